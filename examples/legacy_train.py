"""A small detector training script in the style of 2021-2022 OpenMMLab projects.

It is deliberately left as its authors wrote it: NumPy 1.19 spellings
(``np.float``, ``np.int``, ``np.in1d``, ``np.NaN``), ``mmcv.ops`` imports,
and an mmdet that asserts its mmcv version. On today's stack (NumPy 2,
mmcv-lite 2.2 without compiled ops, mmdet 3.3) it fails on its imports.
Run it unchanged under lazypatch:

    lazypatch run -- python examples/legacy_train.py      # or: ./dev demo

It trains a tiny Deformable DETR (mmdet, mmengine Runner) on generated
images for a few iterations (under a minute on 2 CPU cores), predicts on a
new image, and prints lazypatch's report of what it patched.
"""

import tempfile
import time

import mmdet  # asserts mmcv < 2.2.0
import numpy as np
import torch
from mmcv.ops import MultiScaleDeformableAttention, nms  # needs mmcv._ext
from mmdet.structures import DetDataSample
from mmdet.utils import register_all_modules
from mmengine.hooks import Hook
from mmengine.runner import Runner
from mmengine.structures import InstanceData

IMAGE_SIZE = 64
CLASSES = ('red_box', 'green_box')
ITERATIONS = 10


class SyntheticBoxes(torch.utils.data.Dataset):
    """Images with one bright rectangle; the colour channel is the class."""

    metainfo = dict(classes=CLASSES)

    def __init__(self, num_images=4, seed=0):
        rng = np.random.RandomState(seed)
        self.samples = []
        for index in range(num_images):
            image = np.full((3, IMAGE_SIZE, IMAGE_SIZE), 30, dtype=np.uint8)
            x0, y0 = rng.randint(4, 28, size=2)
            w, h = rng.randint(16, 30, size=2)
            label = index % len(CLASSES)
            image[label, y0:y0 + h, x0:x0 + w] = 220
            boxes = np.array([[x0, y0, x0 + w, y0 + h]], dtype=np.float)   # legacy alias
            labels = np.array([label], dtype=np.int)                       # legacy alias
            self.samples.append((image, boxes, labels))

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        image, boxes, labels = self.samples[index]
        meta = dict(img_shape=(IMAGE_SIZE, IMAGE_SIZE), ori_shape=(IMAGE_SIZE, IMAGE_SIZE),
                    scale_factor=(1.0, 1.0), img_id=index)
        sample = DetDataSample(metainfo=meta)
        sample.gt_instances = InstanceData(bboxes=torch.from_numpy(boxes).float(),
                                           labels=torch.from_numpy(labels).long())
        return dict(inputs=torch.from_numpy(image), data_samples=sample)


class PrintLoss(Hook):
    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        print('iter %2d  loss %.4f' % (runner.iter + 1, outputs['loss'].item()))


def build_config(embed_dims=32):
    attention = dict(embed_dims=embed_dims, num_heads=2, num_levels=2, num_points=2,
                     batch_first=True)
    ffn = dict(embed_dims=embed_dims, feedforward_channels=64, ffn_drop=0.0)
    return dict(
        type='DeformableDETR', num_queries=10, num_feature_levels=2,
        with_box_refine=False, as_two_stage=False,
        data_preprocessor=dict(type='DetDataPreprocessor', mean=[0, 0, 0],
                               std=[255, 255, 255], bgr_to_rgb=False),
        backbone=dict(type='ResNet', depth=18, out_indices=(2, 3), frozen_stages=-1,
                      norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
                      init_cfg=None),
        neck=dict(type='ChannelMapper', in_channels=[256, 512], kernel_size=1,
                  out_channels=embed_dims, act_cfg=None,
                  norm_cfg=dict(type='GN', num_groups=8), num_outs=2),
        encoder=dict(num_layers=1, layer_cfg=dict(self_attn_cfg=attention, ffn_cfg=ffn)),
        decoder=dict(num_layers=1, return_intermediate=True, post_norm_cfg=None,
                     layer_cfg=dict(self_attn_cfg=dict(embed_dims=embed_dims, num_heads=2,
                                                       dropout=0.0, batch_first=True),
                                    cross_attn_cfg=attention, ffn_cfg=ffn)),
        positional_encoding=dict(num_feats=embed_dims // 2, normalize=True, offset=-0.5),
        bbox_head=dict(type='DeformableDETRHead', num_classes=len(CLASSES),
                       embed_dims=embed_dims, sync_cls_avg_factor=True,
                       loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0,
                                     alpha=0.25, loss_weight=2.0),
                       loss_bbox=dict(type='L1Loss', loss_weight=5.0),
                       loss_iou=dict(type='GIoULoss', loss_weight=2.0)),
        train_cfg=dict(assigner=dict(type='HungarianAssigner', match_costs=[
            dict(type='FocalLossCost', weight=2.0),
            dict(type='BBoxL1Cost', weight=5.0, box_format='xywh'),
            dict(type='IoUCost', iou_mode='giou', weight=2.0)])),
        test_cfg=dict(max_per_img=5))


def main():
    started = time.time()
    register_all_modules()
    print('mmdet %s, MultiScaleDeformableAttention from %s'
          % (mmdet.__version__, MultiScaleDeformableAttention.__module__))
    runner = Runner(
        model=build_config(), work_dir=tempfile.mkdtemp(prefix='legacy_train_'),
        default_scope='mmdet',
        train_dataloader=dict(dataset=SyntheticBoxes(), batch_size=2, num_workers=0,
                              sampler=dict(type='InfiniteSampler', shuffle=False),
                              collate_fn=dict(type='pseudo_collate')),
        train_cfg=dict(type='IterBasedTrainLoop', max_iters=ITERATIONS),
        optim_wrapper=dict(optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.0)),
        custom_hooks=[PrintLoss()], log_level='WARNING',
        # The same losses and boxes on every run: without a seed mmengine's Runner draws a
        # fresh one (its default is seed=None) and seeds torch, numpy and random with it.
        # deterministic=True makes it call torch.use_deterministic_algorithms(True).
        randomness=dict(seed=0, deterministic=True),
        default_hooks=dict(checkpoint=None, logger=dict(type='LoggerHook', interval=100)))
    runner.train()

    model = runner.model.eval()
    probe = SyntheticBoxes(num_images=1, seed=1)[0]
    with torch.no_grad():
        result = model.test_step(dict(inputs=[probe['inputs']],
                                      data_samples=[probe['data_samples']]))[0]
    boxes, scores = result.pred_instances.bboxes, result.pred_instances.scores
    labels = result.pred_instances.labels.numpy()
    keep_dets, keep = nms(boxes, scores, iou_threshold=0.5)            # mmcv.ops
    wanted = np.in1d(labels[keep.numpy()], [0, 1])                     # legacy alias
    best = np.NaN if len(keep) == 0 else float(keep_dets[0, 4])        # legacy alias
    print('predicted %d boxes after NMS (%d of wanted classes), best score %.3f'
          % (len(keep), int(wanted.sum()), best))
    for (x0, y0, x1, y1, score), label in zip(keep_dets.tolist(), labels[keep.numpy()]):
        print('  %-9s %.3f  [%5.1f %5.1f %5.1f %5.1f]' % (CLASSES[label], score, x0, y0, x1, y1))
    print('ground truth: %s %s' % (CLASSES[int(probe['data_samples'].gt_instances.labels[0])],
                                   probe['data_samples'].gt_instances.bboxes[0].tolist()))
    print('done in %.1f s' % (time.time() - started))


if __name__ == '__main__':
    main()
    # The one line added for the demo: show what lazypatch changed, if it is active.
    try:
        import lazypatch
        print(lazypatch.render_report())
    except ImportError:
        pass

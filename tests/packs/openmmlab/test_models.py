"""Real OpenMMLab models, end to end on CPU, with only ``import lazypatch.auto`` added.

Tiny configurations (64x64 images, 10 queries, one encoder and one decoder
layer; a 64x64 pillar grid) keep each scenario to seconds. The twin failure
without lazypatch is the import itself, checked in test_pack.py.
"""

from __future__ import annotations

DEFORMABLE_DETR = """
    import lazypatch.auto
    import json, tempfile
    import numpy as np
    import torch
    from mmengine.hooks import Hook
    from mmengine.runner import Runner
    from mmengine.structures import InstanceData
    from mmdet.structures import DetDataSample
    from mmdet.utils import register_all_modules

    register_all_modules()
    SIZE, DIMS = 64, 32

    class GeneratedBoxes(torch.utils.data.Dataset):
        # one bright rectangle per image; its colour channel is its class
        def __init__(self, count=4, seed=0):
            generator = np.random.default_rng(seed)
            self.items = []
            for index in range(count):
                image = np.full((3, SIZE, SIZE), 30, np.uint8)
                x0, y0 = generator.integers(4, 28, 2)
                width, height = generator.integers(16, 30, 2)
                label = index % 2
                image[label, y0:y0 + height, x0:x0 + width] = 220
                box = torch.tensor([[x0, y0, x0 + width, y0 + height]], dtype=torch.float32)
                self.items.append((torch.from_numpy(image), box, torch.tensor([label])))

        def __len__(self):
            return len(self.items)

        def __getitem__(self, index):
            image, boxes, labels = self.items[index]
            sample = DetDataSample(metainfo=dict(img_shape=(SIZE, SIZE), ori_shape=(SIZE, SIZE),
                                                 scale_factor=(1.0, 1.0), img_id=index))
            sample.gt_instances = InstanceData(bboxes=boxes, labels=labels)
            return dict(inputs=image, data_samples=sample)

    class RecordLoss(Hook):
        def __init__(self):
            self.losses = []

        def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
            self.losses.append(float(outputs["loss"].detach()))

    deformable_attention = dict(embed_dims=DIMS, num_heads=2, num_levels=2, num_points=2,
                                batch_first=True)
    ffn = dict(embed_dims=DIMS, feedforward_channels=64, ffn_drop=0.0)
    model = dict(
        type="DeformableDETR", num_queries=10, num_feature_levels=2, with_box_refine=False,
        as_two_stage=False,
        data_preprocessor=dict(type="DetDataPreprocessor", mean=[0, 0, 0], std=[255, 255, 255],
                               bgr_to_rgb=False, pad_size_divisor=1),
        backbone=dict(type="ResNet", depth=18, num_stages=4, out_indices=(2, 3), frozen_stages=-1,
                      norm_cfg=dict(type="BN", requires_grad=True), norm_eval=False,
                      style="pytorch", init_cfg=None),
        neck=dict(type="ChannelMapper", in_channels=[256, 512], kernel_size=1, out_channels=DIMS,
                  act_cfg=None, norm_cfg=dict(type="GN", num_groups=8), num_outs=2),
        encoder=dict(num_layers=1, layer_cfg=dict(self_attn_cfg=deformable_attention,
                                                  ffn_cfg=ffn)),
        decoder=dict(num_layers=1, return_intermediate=True, post_norm_cfg=None, layer_cfg=dict(
            self_attn_cfg=dict(embed_dims=DIMS, num_heads=2, dropout=0.0, batch_first=True),
            cross_attn_cfg=deformable_attention, ffn_cfg=ffn)),
        positional_encoding=dict(num_feats=DIMS // 2, normalize=True, offset=-0.5),
        bbox_head=dict(
            type="DeformableDETRHead", num_classes=2, embed_dims=DIMS, sync_cls_avg_factor=True,
            loss_cls=dict(type="FocalLoss", use_sigmoid=True, gamma=2.0, alpha=0.25,
                          loss_weight=2.0),
            loss_bbox=dict(type="L1Loss", loss_weight=5.0),
            loss_iou=dict(type="GIoULoss", loss_weight=2.0)),
        train_cfg=dict(assigner=dict(type="HungarianAssigner", match_costs=[
            dict(type="FocalLossCost", weight=2.0),
            dict(type="BBoxL1Cost", weight=5.0, box_format="xywh"),
            dict(type="IoUCost", iou_mode="giou", weight=2.0)])),
        test_cfg=dict(max_per_img=5))

    torch.manual_seed(0)
    recorder = RecordLoss()
    runner = Runner(
        model=model, work_dir=tempfile.mkdtemp(), default_scope="mmdet",
        train_dataloader=dict(dataset=GeneratedBoxes(), batch_size=2, num_workers=0,
                              sampler=dict(type="InfiniteSampler", shuffle=False),
                              collate_fn=dict(type="pseudo_collate")),
        train_cfg=dict(type="IterBasedTrainLoop", max_iters=8),
        optim_wrapper=dict(optimizer=dict(type="AdamW", lr=1e-3, weight_decay=0.0)),
        custom_hooks=[recorder], log_level="WARNING",
        default_hooks=dict(checkpoint=None, logger=dict(type="LoggerHook", interval=100)))
    runner.train()

    detector = runner.model.eval()
    probe = GeneratedBoxes(count=1, seed=1)[0]
    with torch.no_grad():
        predicted = detector.test_step(dict(inputs=[probe["inputs"]],
                                            data_samples=[probe["data_samples"]]))
    instances = predicted[0].pred_instances
    print(json.dumps({"losses": recorder.losses, "boxes": instances.bboxes.tolist(),
                      "scores": instances.scores.tolist()}))
"""

POINTPILLARS = """
    import lazypatch.auto
    import json, sys
    import numpy as np
    import torch
    from mmengine.config import ConfigDict
    from mmengine.optim import OptimWrapper
    from mmengine.structures import InstanceData
    from mmdet3d.registry import MODELS
    from mmdet3d.structures import Det3DDataSample, LiDARInstance3DBoxes
    from mmdet3d.utils import register_all_modules
    import mmcv.ops

    register_all_modules()
    ext = sys.modules["mmcv._ext"]
    calls = {"hard_voxelize_forward": 0, "nms_rotated": 0}

    def counting(name, kernel):
        def count(*args, **kwargs):
            calls[name] += 1
            return kernel(*args, **kwargs)
        return count

    for name in calls:              # count what reaches the provided kernels
        setattr(ext, name, counting(name, getattr(ext, name)))

    RANGE, VOXEL = [0, -8, -3, 16, 8, 1], [0.25, 0.25, 4]
    config = dict(
        type="VoxelNet",
        data_preprocessor=dict(type="Det3DDataPreprocessor", voxel=True, voxel_layer=dict(
            max_num_points=8, point_cloud_range=RANGE, voxel_size=VOXEL,
            max_voxels=(2000, 2000))),
        voxel_encoder=dict(type="PillarFeatureNet", in_channels=4, feat_channels=[16],
                           with_distance=False, voxel_size=VOXEL, point_cloud_range=RANGE),
        middle_encoder=dict(type="PointPillarsScatter", in_channels=16, output_shape=[64, 64]),
        backbone=dict(type="SECOND", in_channels=16, layer_nums=[1, 1], layer_strides=[2, 2],
                      out_channels=[16, 32]),
        neck=dict(type="SECONDFPN", in_channels=[16, 32], upsample_strides=[1, 2],
                  out_channels=[16, 16]),
        bbox_head=dict(
            type="Anchor3DHead", num_classes=1, in_channels=32, feat_channels=32,
            use_direction_classifier=True, assign_per_class=False, diff_rad_by_sin=True,
            anchor_generator=dict(type="AlignedAnchor3DRangeGenerator",
                                  ranges=[[0, -8, -1.78, 16, 8, -1.78]],
                                  sizes=[[3.9, 1.6, 1.56]], rotations=[0, 1.57],
                                  reshape_out=True),
            bbox_coder=dict(type="DeltaXYZWLHRBBoxCoder"),
            loss_cls=dict(type="mmdet.FocalLoss", use_sigmoid=True, gamma=2.0, alpha=0.25,
                          loss_weight=1.0),
            loss_bbox=dict(type="mmdet.SmoothL1Loss", beta=1.0 / 9.0, loss_weight=2.0),
            loss_dir=dict(type="mmdet.CrossEntropyLoss", use_sigmoid=False, loss_weight=0.2)),
        train_cfg=dict(assigner=dict(type="Max3DIoUAssigner",
                                     iou_calculator=dict(type="mmdet3d.BboxOverlapsNearest3D"),
                                     pos_iou_thr=0.6, neg_iou_thr=0.45, min_pos_iou=0.45,
                                     ignore_iof_thr=-1),
                       allowed_border=0, pos_weight=-1, debug=False),
        test_cfg=dict(use_rotate_nms=True, nms_across_levels=False, nms_thr=0.01, score_thr=0.0,
                      min_bbox_size=0, nms_pre=100, max_num=20))
    torch.manual_seed(0)
    model = MODELS.build(ConfigDict(config))
    generator = np.random.default_rng(0)

    def scene():
        # background points plus a dense cluster around one car-sized box
        box = np.array([[8.0, 0.0, -1.0, 3.9, 1.6, 1.56, 0.3]], np.float32)
        xyz = np.concatenate([generator.uniform(RANGE[:3], RANGE[3:], (600, 3)),
                              box[0, :3] + generator.uniform(-0.8, 0.8, (200, 3))])
        points = np.concatenate([xyz, generator.uniform(0, 1, (len(xyz), 1))], 1)
        sample = Det3DDataSample(metainfo=dict(box_type_3d=LiDARInstance3DBoxes))
        sample.gt_instances_3d = InstanceData(
            bboxes_3d=LiDARInstance3DBoxes(torch.from_numpy(box)), labels_3d=torch.tensor([0]))
        return torch.from_numpy(points.astype(np.float32)), sample

    scenes = [scene(), scene()]
    batch = dict(inputs=dict(points=[points for points, _ in scenes]),
                 data_samples=[sample for _, sample in scenes])
    optimizer = OptimWrapper(torch.optim.AdamW(model.parameters(), lr=1e-3))
    model.train()
    losses = model.train_step(batch, optimizer)
    total = float(sum(value for key, value in losses.items() if key.startswith("loss")))
    model.eval()
    with torch.no_grad():
        predicted = model.test_step(dict(inputs=dict(points=[scenes[0][0]]),
                                         data_samples=[scenes[0][1]]))
    instances = predicted[0].pred_instances_3d
    print(json.dumps({"loss": total, "boxes": len(instances.bboxes_3d),
                      "scores": instances.scores_3d.tolist(), "calls": calls}))
"""


def test_deformable_detr_trains_with_the_runner_and_predicts(interpreter):
    result = interpreter.run_json(DEFORMABLE_DETR, timeout=300)
    losses = result["losses"]
    assert len(losses) == 8 and all(loss == loss and abs(loss) != float("inf") for loss in losses)
    # two alternating batches: compare each batch's first and last loss
    assert losses[-2] < losses[0] and losses[-1] < losses[1], losses
    assert 0 < len(result["boxes"]) <= 5 and all(0 <= score <= 1 for score in result["scores"])
    assert all(len(box) == 4 for box in result["boxes"])


def test_pointpillars_trains_a_step_and_predicts_with_rotated_nms(interpreter):
    result = interpreter.run_json(POINTPILLARS, timeout=300)
    assert result["loss"] == result["loss"] and result["loss"] > 0
    assert 0 < result["boxes"] <= 20
    assert result["calls"]["hard_voxelize_forward"] >= 2    # training batch and inference
    assert result["calls"]["nms_rotated"] >= 1              # NMS ran through the provided kernel

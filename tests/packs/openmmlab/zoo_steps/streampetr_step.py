"""One training step of StreamPETR, built from its own config, on a synthetic batch.

Run from a StreamPETR checkout (exiawsh/StreamPETR, with mmdetection3d's ``configs``
folder beside ``projects``, as its install instructions clone it: the config's
``_base_`` names it) with the OpenMMLab 1.x stack, under ``lazypatch run --enable
device --enable cuda_extensions`` and ``LAZYPATCH_CUDA_AVAILABLE=1`` (its flash
attention asserts ``q.is_cuda``); the model's code is used unchanged. Prints one JSON
line: the losses, whether every trainable parameter got a gradient, and how far the
step moved the weights.
"""
import math
import os
import sys

import numpy as np
import torch
from mmcv import Config
from mmcv.parallel import DataContainer

sys.path.insert(0, ".")   # the checkout: its `projects` package, as tools/train.py has it
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))
import projects.mmdet3d_plugin  # noqa: E402,F401  (registers StreamPETR's modules)
from mmdet3d.core.bbox import LiDARInstance3DBoxes  # noqa: E402
from mmdet3d.models import build_model  # noqa: E402
from training_step import intrinsics, lidar_to_camera, seeded, train_one_step  # noqa: E402

CAMERAS, HEIGHT, WIDTH = 6, 96, 160
# The config DrivingSDK's model_examples/StreamPETR trains (VoVNet-99, flash attention).
CONFIG = "projects/configs/StreamPETR/stream_petr_vov_flash_800_bs2_seq_24e.py"
BOXES = np.array([[5.0, 2.0, -1.0, 1.9, 4.5, 1.6, 0.3, 1.0, 0.0],
                  [-8.0, -3.0, -1.0, 0.6, 0.8, 1.7, 0.0, 0.0, 0.5]], dtype=np.float32)
LABELS = np.array([0, 8])


def camera_targets(extrinsics, intrinsic):
    """Per camera: the 2D boxes, labels, projected centres and depths of the 3D boxes
    whose centre it sees (what StreamPETR's pipeline derives from nuScenes)."""
    boxes, labels, centers, depths = [], [], [], []
    centres = np.concatenate([BOXES[:, :3], np.ones((len(BOXES), 1), np.float32)], axis=1)
    for extrinsic in extrinsics:
        camera = centres @ extrinsic.T
        pixels = camera @ intrinsic.T
        depth = camera[:, 2]
        uv = pixels[:, :2] / np.maximum(depth[:, None], 1e-5)
        seen = (depth > 0.5) & (uv[:, 0] > 0) & (uv[:, 0] < WIDTH) & (uv[:, 1] > 0) & (uv[:, 1] < HEIGHT)
        corners = np.concatenate([uv[seen] - 12.0, uv[seen] + 12.0], axis=1)
        corners = np.clip(corners, 0, [WIDTH, HEIGHT, WIDTH, HEIGHT])
        boxes.append(torch.tensor(corners, dtype=torch.float32).reshape(-1, 4).cuda())
        labels.append(torch.tensor(LABELS[seen]).cuda())
        centers.append(torch.tensor(uv[seen], dtype=torch.float32).reshape(-1, 2).cuda())
        depths.append(torch.tensor(depth[seen], dtype=torch.float32).cuda())
    return boxes, labels, centers, depths


def main():
    seeded()
    config = Config.fromfile(CONFIG)
    model = build_model(config.model, train_cfg=config.get("train_cfg"),
                        test_cfg=config.get("test_cfg"))
    model = model.cuda()      # as the training scripts do; the device pack decides
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=4e-4, weight_decay=0.01)
    extrinsics = np.stack([lidar_to_camera(index * math.pi / 3) for index in range(CAMERAS)])
    intrinsic = intrinsics(HEIGHT, WIDTH)
    boxes, labels, centers, depths = camera_targets(extrinsics, intrinsic)
    boxes_3d = LiDARInstance3DBoxes(torch.from_numpy(BOXES), box_dim=9)
    labels_3d = torch.from_numpy(LABELS).cuda()
    # The config's meta_keys carry the 3D targets too (its denoising queries read them).
    metas = dict(pad_shape=[(HEIGHT, WIDTH, 3)] * CAMERAS, img_shape=[(HEIGHT, WIDTH, 3)] * CAMERAS,
                 scene_token="synthetic", box_type_3d=LiDARInstance3DBoxes,
                 gt_bboxes_3d=DataContainer(boxes_3d), gt_labels_3d=DataContainer(labels_3d))

    def per_frame(array, dtype=torch.float32):
        """A (batch 1, queue 1, ...) tensor, as the dataset's collate stacks them."""
        return torch.as_tensor(np.asarray(array), dtype=dtype)[None, None].cuda()

    # One sample of a queue of one frame (queue_length = 1 in this config): every
    # per-sample entry is [sample][frame], the tensors (batch, frame, ...).
    batch = dict(
        img=torch.rand(1, 1, CAMERAS, 3, HEIGHT, WIDTH).cuda(),
        img_metas=[[metas]],
        gt_bboxes_3d=[[boxes_3d]], gt_labels_3d=[[labels_3d]],
        gt_bboxes=[[boxes]], gt_labels=[[labels]], centers2d=[[centers]], depths=[[depths]],
        lidar2img=per_frame(intrinsic @ extrinsics), intrinsics=per_frame([intrinsic] * CAMERAS),
        extrinsics=per_frame(extrinsics), timestamp=per_frame(1.0, torch.float64),
        img_timestamp=per_frame([1.0] * CAMERAS, torch.float64),
        ego_pose=per_frame(np.eye(4)), ego_pose_inv=per_frame(np.eye(4)),
        prev_exists=per_frame(0.0))
    train_one_step(model, batch, optimizer)


if __name__ == "__main__":
    main()

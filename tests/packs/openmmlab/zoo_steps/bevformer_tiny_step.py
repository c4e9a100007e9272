"""One training step of BEVFormer-tiny, built from its own config, on a synthetic batch.

Run from a BEVFormer checkout (fundamentalvision/BEVFormer) with the OpenMMLab 1.x
stack, under ``lazypatch run --enable device --enable cuda_extensions``; the model's
code is used unchanged. Prints one JSON line: the losses, whether every trainable
parameter got a gradient, and how far the step moved the weights.
"""
import math
import sys

import numpy as np
import torch
from mmcv import Config

sys.path.insert(0, ".")   # the checkout: its `projects` package, as tools/train.py has it
import projects.mmdet3d_plugin  # noqa: E402,F401  (registers BEVFormer's modules)
from mmdet3d.core.bbox import LiDARInstance3DBoxes  # noqa: E402
from mmdet3d.models import build_model  # noqa: E402
from training_step import train_one_step  # noqa: E402

CAMERAS, HEIGHT, WIDTH, QUEUE = 6, 96, 160, 2


def lidar_to_image(yaw):
    """A 4x4 lidar-to-image projection of a camera looking along ``yaw`` (nuScenes-like)."""
    intrinsics = np.array([[80.0, 0, WIDTH / 2, 0], [0, 80.0, HEIGHT / 2, 0],
                           [0, 0, 1, 0], [0, 0, 0, 1]])
    cos, sin = math.cos(yaw), math.sin(yaw)
    # camera axes (right, down, forward) in lidar coordinates (x forward, y left, z up)
    forward, right, down = np.array([cos, sin, 0]), np.array([sin, -cos, 0]), np.array([0, 0, -1])
    extrinsics = np.eye(4)
    extrinsics[:3, :3] = np.stack([right, down, forward])
    extrinsics[:3, 3] = -extrinsics[:3, :3] @ np.array([0.0, 0.0, 1.6])
    return intrinsics @ extrinsics


def metas(prev_bev_exists):
    return dict(can_bus=np.zeros(18), scene_token="synthetic", prev_bev_exists=prev_bev_exists,
                lidar2img=[lidar_to_image(index * math.pi / 3) for index in range(CAMERAS)],
                img_shape=[(HEIGHT, WIDTH, 3)] * CAMERAS, box_type_3d=LiDARInstance3DBoxes)


def main():
    torch.manual_seed(0)
    config = Config.fromfile("projects/configs/bevformer/bevformer_tiny.py")
    model = build_model(config.model, train_cfg=config.get("train_cfg"),
                        test_cfg=config.get("test_cfg"))
    model = model.cuda()      # as the training scripts do; the device pack decides
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.01)
    boxes = torch.tensor([[5.0, 2.0, -1.0, 1.9, 4.5, 1.6, 0.3, 1.0, 0.0],
                          [-8.0, -3.0, -1.0, 0.6, 0.8, 1.7, 0.0, 0.0, 0.5]])
    batch = dict(
        img=torch.rand(1, QUEUE, CAMERAS, 3, HEIGHT, WIDTH).cuda(),
        img_metas=[{index: metas(index > 0) for index in range(QUEUE)}],
        gt_bboxes_3d=[LiDARInstance3DBoxes(boxes, box_dim=9)],
        gt_labels_3d=[torch.tensor([0, 8]).cuda()])
    train_one_step(model, batch, optimizer)


if __name__ == "__main__":
    main()

"""One training step of Sparse4D v3, built from its own config, on a synthetic batch.

Run with the current directory holding the anchors file the config names
(``nuscenes_kmeans900.npy``; this script writes synthetic anchors there when it is
missing) and the Sparse4D checkout (HorizonRobotics/Sparse4D) as the first argument,
with the OpenMMLab 1.x stack, under ``lazypatch run --enable device --enable
cuda_extensions``; the model's code is used unchanged. Prints one JSON line: the
losses, whether every trainable parameter got a gradient, and how far the step moved
the weights.
"""
import math
import os
import sys

import numpy as np
import torch

CHECKOUT = os.path.abspath(sys.argv[1])
sys.path.insert(0, CHECKOUT)   # its `projects` package, as tools/train.py has it
import projects.mmdet3d_plugin  # noqa: E402,F401  (registers Sparse4D's modules)
from mmcv import Config  # noqa: E402
from mmdet.models import build_detector  # noqa: E402
from training_step import train_one_step  # noqa: E402

CAMERAS, HEIGHT, WIDTH = 6, 96, 160
CONFIG = "projects/configs/sparse4dv3_temporal_r50_1x8_bs6_256x704.py"


def lidar_to_image(yaw):
    """A 4x4 lidar-to-image projection of a camera looking along ``yaw`` (nuScenes-like)."""
    intrinsics = np.array([[80.0, 0, WIDTH / 2, 0], [0, 80.0, HEIGHT / 2, 0],
                           [0, 0, 1, 0], [0, 0, 0, 1]])
    cos, sin = math.cos(yaw), math.sin(yaw)
    forward, right, down = np.array([cos, sin, 0]), np.array([sin, -cos, 0]), np.array([0, 0, -1])
    extrinsics = np.eye(4)
    extrinsics[:3, :3] = np.stack([right, down, forward])
    extrinsics[:3, 3] = -extrinsics[:3, :3] @ np.array([0.0, 0.0, 1.6])
    return intrinsics @ extrinsics


def synthetic_anchors(path, count=900):
    """Anchors in Sparse4D's layout (x, y, z, log w, log l, log h, sin, cos, vx, vy, vz)."""
    generator = np.random.default_rng(0)
    anchors = np.zeros((count, 11), dtype=np.float32)
    anchors[:, :2] = generator.uniform(-50, 50, (count, 2))
    anchors[:, 2] = -1.0
    anchors[:, 3:6] = np.log([1.9, 4.5, 1.6])
    anchors[:, 7] = 1.0
    np.save(path, anchors)


def main():
    torch.manual_seed(0)
    if not os.path.exists("nuscenes_kmeans900.npy"):
        synthetic_anchors("nuscenes_kmeans900.npy")
    config = Config.fromfile(os.path.join(CHECKOUT, CONFIG))
    model = build_detector(config.model).cuda()   # as the training scripts do
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.001)
    projection = np.stack([lidar_to_image(index * math.pi / 3) for index in range(CAMERAS)])
    depth = [torch.where(torch.rand(1, CAMERAS, HEIGHT // stride, WIDTH // stride) > 0.8,
                         torch.rand(1, CAMERAS, HEIGHT // stride, WIDTH // stride) * 50, -1.0)
             for stride in (4, 8, 16)]
    batch = dict(
        img=torch.rand(1, CAMERAS, 3, HEIGHT, WIDTH).cuda(),
        timestamp=torch.tensor([1.0], dtype=torch.float64).cuda(),
        projection_mat=torch.from_numpy(projection).float()[None].cuda(),
        image_wh=torch.tensor([[WIDTH, HEIGHT]] * CAMERAS, dtype=torch.float32)[None].cuda(),
        focal=torch.full((1, CAMERAS), 80.0).cuda(),
        gt_depth=[level.cuda() for level in depth],
        gt_bboxes_3d=[torch.tensor([[5.0, 2.0, -1.0, 1.9, 4.5, 1.6, 0.3, 1.0, 0.0],
                                    [-8.0, -3.0, -1.0, 0.6, 0.8, 1.7, 0.0, 0.0, 0.5]]).cuda()],
        gt_labels_3d=[torch.tensor([0, 8]).cuda()],
        img_metas=[dict(T_global=np.eye(4), T_global_inv=np.eye(4), timestamp=1.0)])
    train_one_step(model, batch, optimizer)


if __name__ == "__main__":
    main()

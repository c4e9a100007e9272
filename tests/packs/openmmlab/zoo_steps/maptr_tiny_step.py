"""One training step of MapTR-tiny (BEVFormer encoder), built from its own config, on a
synthetic batch.

Run from a MapTR checkout (hustvl/MapTR) with the OpenMMLab 1.x stack at the versions
MapTR names (mmdet 2.14.0, mmsegmentation 0.14.1) and MapTR's own mmdetection3d 0.17.2
(its ``mmdetection3d`` folder, put on the path here), under ``lazypatch run --enable
device --enable cuda_extensions``; the model's code is used unchanged. Prints one JSON
line: the losses, whether every trainable parameter got a gradient, and how far the
step moved the weights.
"""
import math
import sys

import numpy as np
import torch

# the checkout: its `projects` package, as tools/train.py has it, and its vendored
# mmdetection3d, which MapTR's instructions install from that folder
sys.path[:0] = [".", "mmdetection3d"]
import projects.mmdet3d_plugin  # noqa: E402,F401  (registers MapTR's modules)
from mmcv import Config  # noqa: E402
from mmdet3d.models import build_model  # noqa: E402
from projects.mmdet3d_plugin.datasets.nuscenes_map_dataset import LiDARInstanceLines  # noqa: E402
from shapely.geometry import LineString  # noqa: E402
from training_step import train_one_step  # noqa: E402

CAMERAS, HEIGHT, WIDTH = 6, 96, 160
CONFIG = "projects/configs/maptr/maptr_tiny_r50_24e_bevformer.py"


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


def map_lines():
    """Three map elements (divider, pedestrian crossing, boundary) as MapTR's dataset
    gives them: lines in the 60 m x 30 m patch around the ego car, 20 points each."""
    lines = [LineString([(-1.8, -25.0), (-1.8, 0.0), (-1.5, 25.0)]),
             LineString([(-6.0, 10.0), (6.0, 10.0), (6.0, 13.0), (-6.0, 13.0), (-6.0, 10.0)]),
             LineString([(7.0, -28.0), (7.5, 0.0), (8.0, 28.0)])]
    return LiDARInstanceLines(lines, sample_dist=1, num_samples=250, padding=False,
                              fixed_num=20, padding_value=-10000, patch_size=(60.0, 30.0))


def main():
    torch.manual_seed(0)
    config = Config.fromfile(CONFIG)
    model = build_model(config.model, train_cfg=config.get("train_cfg"),
                        test_cfg=config.get("test_cfg"))
    # The head's own initialisation (its embeddings are torch.Tensor(...), uninitialised
    # memory, until then); the whole model's init_weights would load the ResNet weights
    # the config names.
    model.pts_bbox_head.init_weights()
    model = model.cuda()      # as the training scripts do; the device pack decides
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.01)
    metas = dict(can_bus=np.zeros(18), scene_token="synthetic", prev_bev_exists=False,
                 lidar2img=[lidar_to_image(index * math.pi / 3) for index in range(CAMERAS)],
                 img_shape=[(HEIGHT, WIDTH, 3)] * CAMERAS)
    batch = dict(img=torch.rand(1, 1, CAMERAS, 3, HEIGHT, WIDTH).cuda(),
                 img_metas=[{0: metas}], gt_bboxes_3d=[map_lines()],
                 gt_labels_3d=[torch.tensor([0, 1, 2]).cuda()])
    train_one_step(model, batch, optimizer)


if __name__ == "__main__":
    main()

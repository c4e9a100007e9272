"""One training step of DETR3D, built from its own config, on a synthetic batch.

Run from a DETR3D checkout (WangYueFt/detr3d, with its ``mmdetection3d`` submodule's
``configs`` folder, which the config's ``_base_`` names) with the OpenMMLab 1.x stack,
under ``lazypatch run --enable device --enable cuda_extensions``; the model's code is
used unchanged. Prints one JSON line: the losses, whether every trainable parameter
got a gradient, and how far the step moved the weights.
"""
import math
import os
import sys

import torch
from mmcv import Config

sys.path.insert(0, ".")   # the checkout: its `projects` package, as tools/train.py has it
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))
import projects.mmdet3d_plugin  # noqa: E402,F401  (registers DETR3D's modules)
from mmdet3d.core.bbox import LiDARInstance3DBoxes  # noqa: E402
from mmdet3d.models import build_model  # noqa: E402
from training_step import lidar_to_image, seeded, train_one_step  # noqa: E402

CAMERAS, HEIGHT, WIDTH = 6, 96, 160
# The config DrivingSDK's model_examples/DETR3D trains (ResNet-101 with DCNv2).
CONFIG = "projects/configs/detr3d/detr3d_res101_gridmask.py"


def main():
    seeded()
    config = Config.fromfile(CONFIG)
    model = build_model(config.model, train_cfg=config.get("train_cfg"),
                        test_cfg=config.get("test_cfg"))
    model = model.cuda()      # as the training scripts do; the device pack decides
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.01)
    boxes = torch.tensor([[5.0, 2.0, -1.0, 1.9, 4.5, 1.6, 0.3, 1.0, 0.0],
                          [-8.0, -3.0, -1.0, 0.6, 0.8, 1.7, 0.0, 0.0, 0.5]])
    metas = dict(lidar2img=[lidar_to_image(index * math.pi / 3, HEIGHT, WIDTH)
                            for index in range(CAMERAS)],
                 img_shape=[(HEIGHT, WIDTH, 3)] * CAMERAS, box_type_3d=LiDARInstance3DBoxes)
    batch = dict(img=torch.rand(1, CAMERAS, 3, HEIGHT, WIDTH).cuda() * 255, img_metas=[metas],
                 gt_bboxes_3d=[LiDARInstance3DBoxes(boxes, box_dim=9)],
                 gt_labels_3d=[torch.tensor([0, 8]).cuda()])
    train_one_step(model, batch, optimizer)


if __name__ == "__main__":
    main()

"""One training step of BEVDet-R50, built from its own config, on a synthetic batch.

Run from a BEVDet checkout (HuangJunJie2017/BEVDet; the repository is its own
mmdetection3d 0.17.2 fork, put on the path here) with the OpenMMLab 1.x stack (mmdet
2.28.2, mmsegmentation 0.30.0), under ``lazypatch run --enable device --enable
cuda_extensions``; the model's code is used unchanged. Prints one JSON line: the
losses, whether every trainable parameter got a gradient, and how far the step moved
the weights.
"""
import math
import sys

import torch

sys.path.insert(0, ".")   # the checkout: its own mmdet3d, as tools/train.py has it
from mmcv import Config  # noqa: E402
from mmdet3d.core.bbox import LiDARInstance3DBoxes  # noqa: E402
from mmdet3d.models import build_model  # noqa: E402
from training_step import train_one_step  # noqa: E402

CAMERAS = 6
CONFIG = "configs/bevdet/bevdet-r50.py"


def camera_inputs(height, width):
    """BEVDet's ``img_inputs`` after its image pipeline: images, camera-to-ego rotations
    and translations, intrinsics, and the augmentation's post-rotation and translation."""
    rotations, translations = [], []
    for index in range(CAMERAS):
        yaw = index * math.pi / 3
        cos, sin = math.cos(yaw), math.sin(yaw)
        # camera axes (right, down, forward) in ego coordinates (x forward, y left, z up)
        rotations.append(torch.tensor([[sin, 0.0, cos], [-cos, 0.0, sin], [0.0, -1.0, 0.0]]))
        translations.append(torch.tensor([0.0, 0.0, 1.6]))
    intrinsics = torch.tensor([[300.0, 0, width / 2], [0, 300.0, height / 2], [0, 0, 1]])
    return [torch.rand(1, CAMERAS, 3, height, width).cuda(),
            torch.stack(rotations)[None].cuda(), torch.stack(translations)[None].cuda(),
            intrinsics.expand(1, CAMERAS, 3, 3).contiguous().cuda(),
            torch.eye(3).expand(1, CAMERAS, 3, 3).contiguous().cuda(),
            torch.zeros(1, CAMERAS, 3).cuda()]


def main():
    torch.manual_seed(0)
    config = Config.fromfile(CONFIG)
    model = build_model(config.model, train_cfg=config.get("train_cfg"),
                        test_cfg=config.get("test_cfg"))
    model = model.cuda()      # as the training scripts do; the device pack decides
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.01)
    height, width = config.data_config["input_size"]
    boxes = torch.tensor([[5.0, 2.0, -1.0, 1.9, 4.5, 1.6, 0.3, 1.0, 0.0],
                          [-8.0, -3.0, -1.0, 0.6, 0.8, 1.7, 0.0, 0.0, 0.5]])
    batch = dict(img_inputs=camera_inputs(height, width),
                 img_metas=[dict(box_type_3d=LiDARInstance3DBoxes)],
                 gt_bboxes_3d=[LiDARInstance3DBoxes(boxes, box_dim=9)],
                 gt_labels_3d=[torch.tensor([0, 8]).cuda()])
    train_one_step(model, batch, optimizer)


if __name__ == "__main__":
    main()

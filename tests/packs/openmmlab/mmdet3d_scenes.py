"""Small synthetic scenes for training mmdet3d 1.4's own configs one step on the CPU.

Imported by the training scripts that tests/packs/openmmlab/test_mmdet3d_*_configs.py run in a
fresh interpreter (the script puts this folder on sys.path). Outdoor scenes are
ground points near one car-sized box plus points on the box, inside the config's
point-cloud range; indoor scenes (ScanNet/SUN RGB-D configs, depth boxes) are a floor
and one chair-sized box in a 6 m room.
"""

from typing import Any, Dict, List, Tuple

import numpy as np
import torch

# x/y ranges of a config that scale with the scene's extent
XY_RANGES = ("point_cloud_range", "post_center_range", "post_center_limit_range")


def shrink_extent(node: Any, shrink: int) -> None:
    """Scale the x/y extent of every range, grid and sparse shape of a config by 1/shrink,
    in place: the dense BEV networks behind the encoders cost far less on a smaller map,
    while layers, channels, voxel sizes, losses and assigners stay the config's own."""
    if shrink == 1:
        return
    if isinstance(node, dict):
        for key, value in node.items():
            if key in XY_RANGES:
                node[key] = [v / shrink if i % 3 < 2 else v for i, v in enumerate(value)]
            elif key == "pc_range":
                node[key] = [v / shrink for v in value]
            elif key == "ranges":      # anchor ranges, one [x0 y0 z0 x1 y1 z1] per class
                node[key] = [[v / shrink if i % 3 < 2 else v for i, v in enumerate(r)]
                             for r in value]
            elif key == "sparse_shape":                    # (z, y, x)
                node[key] = [value[0], value[1] // shrink, value[2] // shrink]
            elif key == "grid_size" and isinstance(value, list):   # voxel grid (x, y, z);
                # an int grid_size is a RoI grid (PV-RCNN's 6x6x6 points per box)
                node[key] = [value[0] // shrink, value[1] // shrink, value[2]]
            else:
                shrink_extent(value, shrink)
    elif isinstance(node, list):
        for item in node:
            shrink_extent(item, shrink)


def find_key(node: Any, key: str) -> Any:
    """The first value stored under ``key`` anywhere in a config tree, or None."""
    if isinstance(node, dict):
        if key in node:
            return node[key]
        children = node.values()
    elif isinstance(node, list):
        children = node
    else:
        return None
    for child in children:
        found = find_key(child, key)
        if found is not None:
            return found
    return None


def point_features(model_cfg: Any) -> int:
    """Columns per point the model reads: the voxel encoder's ``num_features`` (or
    ``in_channels``), a point backbone's ``in_channels``, else x, y, z, intensity."""
    encoder = model_cfg.get("pts_voxel_encoder") or model_cfg.get("voxel_encoder") or {}
    for key in ("num_features", "in_channels"):
        if key in encoder:
            return int(encoder[key])
    backbone = model_cfg.get("backbone") or {}
    if "in_channels" in backbone and backbone.get("type", "").startswith(("PointNet2", "DGCNN")):
        return int(backbone["in_channels"])
    return 4


def synthetic_batch(cfg: Any, points_per_scene: int, scenes: int = 2,
                    seed: int = 0) -> Dict[str, Any]:
    """A training batch of ``scenes`` synthetic scenes for a model built from config
    ``cfg``: points, one ground-truth box per scene, per-point masks. The box type is
    the datasets' ``box_type_3d``; the extent the model's point-cloud range, else the
    data pipeline's."""
    from mmdet3d.structures import DepthInstance3DBoxes, Det3DDataSample, LiDARInstance3DBoxes, PointData
    from mmengine.structures import InstanceData

    model_cfg = cfg.model
    if str(find_key(cfg._cfg_dict, "box_type_3d")).lower() == "depth":
        low, high = np.array([-3.0, -3.0, 0.0]), np.array([3.0, 3.0, 2.5])
        size, boxes = [1.0, 1.0, 1.0], DepthInstance3DBoxes
    else:
        extent = (find_key(model_cfg, "point_cloud_range")
                  or find_key(cfg._cfg_dict, "point_cloud_range"))
        low, high = np.array(extent[:3], dtype=float), np.array(extent[3:], dtype=float)
        size, boxes = [3.9, 1.6, 1.56], LiDARInstance3DBoxes
    box_dim = 9 if "pts_bbox_head" in model_cfg else 7          # nuScenes: + velocity
    columns = point_features(model_cfg)
    rng = np.random.default_rng(seed)

    def scene() -> Tuple[torch.Tensor, Any]:
        centre = low + (high - low) * np.array([0.55, 0.5, 0.4])
        box = np.concatenate([centre, size, [0.3], [0.5, 0.0][:box_dim - 7]])
        half = points_per_scene // 2
        ground = np.stack([rng.uniform(low[0], high[0], half) * 0.3 + centre[0] * 0.7,
                           rng.uniform(low[1], high[1], half) * 0.3 + centre[1] * 0.7,
                           np.full(half, centre[2] - 0.8)], 1)
        on_box = centre + rng.uniform(-0.5, 0.5, (points_per_scene - half, 3)) * size
        xyz = np.concatenate([ground, on_box])
        points = np.concatenate([xyz, rng.uniform(0, 1, (len(xyz), columns - 3))], 1)
        sample = Det3DDataSample(metainfo=dict(box_type_3d=boxes))
        sample.gt_instances_3d = InstanceData(
            bboxes_3d=boxes(torch.tensor(box[None], dtype=torch.float32), box_dim=box_dim),
            labels_3d=torch.tensor([0]))
        on = torch.zeros(len(xyz), dtype=torch.long)
        on[half:] = 1
        sample.gt_pts_seg = PointData(pts_semantic_mask=on, pts_instance_mask=on)
        return torch.tensor(points, dtype=torch.float32), sample

    made: List[Tuple[torch.Tensor, Any]] = [scene() for _ in range(scenes)]
    return dict(inputs=dict(points=[points for points, _ in made]),
                data_samples=[sample for _, sample in made])


def train_one_step(config_name: str, shrink: int, points_per_scene: int,
                   load_from: str = "", save_to: str = "") -> Dict[str, Any]:
    """Build the model of mmdet3d's own config (the wheel's ``.mim/configs``, identical
    to ``configs/`` at the release tag), train it one step on a synthetic batch and say
    what happened: the losses, how many parameters the step moved, which sparse
    convolution ran and whether lazypatch's ``mmcv._ext`` was the one in use."""
    import os
    import sys

    import mmdet3d
    from mmdet3d.registry import MODELS
    from mmdet3d.utils import register_all_modules
    from mmengine.config import Config
    from mmengine.optim import OptimWrapper

    register_all_modules()
    cfg = Config.fromfile(os.path.join(os.path.dirname(mmdet3d.__file__), ".mim", "configs",
                                       config_name))
    shrink_extent(cfg.model, shrink)
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    if load_from:
        model.load_state_dict(torch.load(load_from), strict=True)
    if save_to:
        torch.save(model.state_dict(), save_to)
    batch = synthetic_batch(cfg, points_per_scene)
    encoder = getattr(model, "pts_middle_encoder", None) or getattr(model, "middle_encoder", None)
    watched = encoder if encoder is not None and hasattr(encoder, "conv_input") else model
    before = [parameter.detach().clone() for parameter in watched.parameters()]
    model.train()
    losses = model.train_step(batch, OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.01)))
    moved = sum(not torch.equal(old, parameter.detach())
                for old, parameter in zip(before, watched.parameters()))
    sparse_conv = ""
    if watched is encoder:
        conv = type(encoder.conv_input[0])
        sparse_conv = f"{conv.__module__}.{conv.__name__}"
    return {"losses": {key: float(value) for key, value in losses.items()},
            "sparse_conv": sparse_conv,
            "watched": "sparse encoder" if watched is encoder else "model",
            "parameters": len(before), "parameters_moved": moved,
            "spconv": "spconv" in sys.modules,
            "mmcv_ext": getattr(sys.modules.get("mmcv._ext"), "__lazypatch_provided__", False)}


if __name__ == "__main__":
    import json
    import sys
    arguments = sys.argv[1:] + [""] * (5 - len(sys.argv[1:]))
    print(json.dumps(train_one_step(arguments[0], int(arguments[1]), int(arguments[2]),
                                    arguments[3], arguments[4])))

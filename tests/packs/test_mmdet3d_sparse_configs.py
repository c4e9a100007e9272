"""mmdet3d 1.4's own SECOND and CenterPoint configs train a step on the CPU under lazypatch.

Each scenario runs ``lazypatch run --enable device [--enable cuda_extensions] -- python
train.py <config>`` in a fresh interpreter: the config file is the one mmdet3d's wheel
ships (``mmdet3d/.mim/configs``, identical to ``configs/`` at the v1.4.0 tag), the
model is built from it and trained one step on a small synthetic lidar-like cloud
(points on the ground and on one car). The sparse middle encoder runs on lazypatch's
pure-PyTorch sparse convolution: through mmcv's ``SparseConv3d``/``SubMConv3d`` and the
provided ``mmcv._ext`` by default, through the ``spconv`` stand-in of the
``cuda_extensions`` pack when that pack is enabled (mmdet3d prefers spconv 2 when it
imports).

The configs' point-cloud extent is scaled down by ``SHRINK`` on x and y (with every
range, grid and sparse shape that follows from it), so that the dense BEV network
behind the sparse encoder (SECOND's 128/256-channel 2-D backbone, which costs 20 s a
step on its full 200x176 map on one core) takes a few seconds; layers, channels, voxel
sizes, losses and assigners are the config's own. ``LAZYPATCH_FULL_SIZE_CONFIGS=1``
runs the configs unscaled (about 30 s each).
"""

from __future__ import annotations

import os
import sys

import pytest

SECOND = "second/second_hv_secfpn_8xb6-80e_kitti-3d-car.py"
CENTERPOINT = "centerpoint/centerpoint_voxel01_second_secfpn_8xb4-cyclic-20e_nus-3d.py"
SHRINK = 1 if os.environ.get("LAZYPATCH_FULL_SIZE_CONFIGS") == "1" else 4

TRAIN = '''
import json, os, sys
import numpy as np
import torch
import mmdet3d
from mmengine.config import Config
from mmengine.optim import OptimWrapper
from mmengine.structures import InstanceData
from mmdet3d.registry import MODELS
from mmdet3d.structures import Det3DDataSample, LiDARInstance3DBoxes
from mmdet3d.utils import register_all_modules

config_name, shrink = sys.argv[1], int(sys.argv[2])
load_from, save_to = sys.argv[3], sys.argv[4]
register_all_modules()
cfg = Config.fromfile(os.path.join(os.path.dirname(mmdet3d.__file__), ".mim", "configs",
                                   config_name))

# Scale the x/y extent of the scene down: every range and grid of the config follows.
XY_RANGES = ("point_cloud_range", "post_center_range", "post_center_limit_range")

def shrink_extent(node):
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
            elif key == "grid_size":                       # (x, y, z)
                node[key] = [value[0] // shrink, value[1] // shrink, value[2]]
            else:
                shrink_extent(value)
    elif isinstance(node, list):
        for item in node:
            shrink_extent(item)

shrink_extent(cfg.model)
torch.manual_seed(0)
model = MODELS.build(cfg.model)
if load_from:
    model.load_state_dict(torch.load(load_from), strict=True)

voxel_layer = cfg.model.data_preprocessor.voxel_layer
low = np.array(voxel_layer.point_cloud_range[:3])
high = np.array(voxel_layer.point_cloud_range[3:])
encoder_cfg = cfg.model.get("pts_voxel_encoder") or cfg.model.get("voxel_encoder")
num_features = encoder_cfg.get("num_features", 4)
box_dim = 9 if "pts_bbox_head" in cfg.model else 7          # nuScenes boxes carry velocity
rng = np.random.default_rng(0)

def scene():
    """Ground points near one car-sized box, and points on that box."""
    centre = low + (high - low) * np.array([0.55, 0.5, 0.4])
    box = np.concatenate([centre, [3.9, 1.6, 1.56, 0.3], [0.5, 0.0][:box_dim - 7]])
    ground = np.stack([rng.uniform(low[0], high[0], 400) * 0.3 + centre[0] * 0.7,
                       rng.uniform(low[1], high[1], 400) * 0.3 + centre[1] * 0.7,
                       np.full(400, centre[2] - 0.8)], 1)
    on_box = centre + rng.uniform(-1.0, 1.0, (400, 3)) * [1.9, 0.8, 0.78]
    xyz = np.concatenate([ground, on_box])
    points = np.concatenate([xyz, rng.uniform(0, 1, (len(xyz), num_features - 3))], 1)
    sample = Det3DDataSample(metainfo=dict(box_type_3d=LiDARInstance3DBoxes))
    sample.gt_instances_3d = InstanceData(
        bboxes_3d=LiDARInstance3DBoxes(torch.tensor(box[None], dtype=torch.float32),
                                       box_dim=box_dim),
        labels_3d=torch.tensor([0]))
    return torch.tensor(points, dtype=torch.float32), sample

scenes = [scene(), scene()]
batch = dict(inputs=dict(points=[points for points, _ in scenes]),
             data_samples=[sample for _, sample in scenes])
if save_to:
    torch.save(model.state_dict(), save_to)
encoder = getattr(model, "pts_middle_encoder", None) or model.middle_encoder
before = [p.detach().clone() for p in encoder.parameters()]
model.train()
losses = model.train_step(batch, OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.01)))
moved = sum(not torch.equal(b, p.detach()) for b, p in zip(before, encoder.parameters()))
conv = type(encoder.conv_input[0])
print(json.dumps({"losses": {key: float(value) for key, value in losses.items()},
                  "sparse_conv": f"{conv.__module__}.{conv.__name__}",
                  "encoder_parameters": len(before), "encoder_parameters_moved": moved,
                  "spconv": "spconv" in sys.modules,
                  "mmcv_ext": getattr(sys.modules.get("mmcv._ext"), "__lazypatch_provided__",
                                      False)}))
'''


def train(interpreter, config: str, packs: list, load_from: str = "", save_to: str = ""):
    script = interpreter.root / "train.py"
    script.write_text(TRAIN)
    command = [sys.executable, "-m", "lazypatch", "run"]
    for pack in packs:
        command += ["--enable", pack]
    command += ["--", sys.executable, str(script), config, str(SHRINK), load_from, save_to]
    result = interpreter.run_command(command, env={"OMP_NUM_THREADS": "1"},
                                     timeout=600)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, result.stdout + result.stderr
    import json
    return json.loads(lines[-1])


def assert_trained(result: dict) -> None:
    losses = result["losses"]
    assert losses["loss"] == losses["loss"] and 0 < losses["loss"] < float("inf"), losses
    # the optimizer step reached every parameter of the sparse encoder
    assert result["encoder_parameters_moved"] == result["encoder_parameters"] > 0


def test_second_trains_through_mmcv_sparse_ops_and_the_spconv_stand_in_alike(interpreter):
    """SECOND, once on mmcv.ops' sparse convolution (device pack only) and once on the
    spconv stand-in (device + cuda_extensions), from the same weights: mmdet3d's own
    checkpoint conversion turns mmcv's (D, H, W, in, out) kernels into spconv 2's
    (out, D, H, W, in), and both give the same losses."""
    weights = str(interpreter.root / "second.pth")
    on_mmcv = train(interpreter, SECOND, ["device"], save_to=weights)
    assert on_mmcv["sparse_conv"] == "mmcv.ops.sparse_conv.SubMConv3d"
    assert on_mmcv["mmcv_ext"] is True and on_mmcv["spconv"] is False
    assert_trained(on_mmcv)
    on_spconv = train(interpreter, SECOND, ["device", "cuda_extensions"], load_from=weights)
    assert on_spconv["sparse_conv"] == "lazypatch.registry.cuda_extensions.spconv.SubMConv3d"
    assert_trained(on_spconv)
    assert on_spconv["losses"] == pytest.approx(on_mmcv["losses"], rel=1e-4, abs=1e-5)


def test_centerpoint_trains_on_the_spconv_stand_in(interpreter):
    result = train(interpreter, CENTERPOINT, ["device", "cuda_extensions"])
    assert result["sparse_conv"] == "lazypatch.registry.cuda_extensions.spconv.SubMConv3d"
    assert_trained(result)
    assert set(result["losses"]) >= {f"task{i}.loss_heatmap" for i in range(6)}

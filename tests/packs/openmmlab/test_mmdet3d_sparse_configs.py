"""mmdet3d 1.4's own SECOND and CenterPoint configs train a step on the CPU under lazypatch.

Each scenario runs ``lazypatch run --enable device [--enable cuda_extensions] -- python
mmdet3d_scenes.py <config>`` in a fresh interpreter: the config file is the one mmdet3d's
wheel ships (``mmdet3d/.mim/configs``, identical to ``configs/`` at the v1.4.0 tag), the
model is built from it and trained one step on a small synthetic lidar-like cloud
(points on the ground and on one car; ``mmdet3d_scenes.py``). The sparse middle encoder runs on lazypatch's
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

import json
import os
import sys
from pathlib import Path

import pytest

SECOND = "second/second_hv_secfpn_8xb6-80e_kitti-3d-car.py"
CENTERPOINT = "centerpoint/centerpoint_voxel01_second_secfpn_8xb4-cyclic-20e_nus-3d.py"
SHRINK = 1 if os.environ.get("LAZYPATCH_FULL_SIZE_CONFIGS") == "1" else 4

SCENES = Path(__file__).resolve().parent / "mmdet3d_scenes.py"


def train(interpreter, config: str, packs: list, load_from: str = "", save_to: str = "",
          points: int = 800, shrink: int = SHRINK):
    """Train ``config`` one step under ``lazypatch run --enable <packs>`` in a fresh
    interpreter (mmdet3d_scenes.py's synthetic batch); its summary."""
    command = [sys.executable, "-m", "lazypatch", "run"]
    for pack in packs:
        command += ["--enable", pack]
    command += ["--", sys.executable, str(SCENES), config, str(shrink), str(points),
                load_from, save_to]
    result = interpreter.run_command(command, env={"OMP_NUM_THREADS": "1"},
                                     timeout=900)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, result.stdout + result.stderr
    return json.loads(lines[-1])


def assert_trained(result: dict) -> None:
    losses = result["losses"]
    assert losses["loss"] == losses["loss"] and 0 < losses["loss"] < float("inf"), losses
    # the optimizer step reached every parameter of the sparse encoder
    assert result["watched"] == "sparse encoder"
    assert result["parameters_moved"] == result["parameters"] > 0


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

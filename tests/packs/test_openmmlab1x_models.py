"""Zoo models on the OpenMMLab 1.x stack: one training step each, from the model's own
repository and config, under ``lazypatch run --enable device --enable cuda_extensions``,
with the model's code unchanged (the scripts are in ``zoo_steps/``).

Slow (minutes of CPU each). Nothing is downloaded: give an extracted checkout at the
commit DrivingSDK's ``model_examples/<Model>/README.md`` names,

    git -C <BEVFormer clone> archive 66b65f3a | tar -x -C /tmp/bevformer
    git -C <detectron2 clone> archive HEAD detectron2 | tar -x -C /tmp/detectron2
    git -C <Sparse4D clone> archive c41df4bb | tar -x -C /tmp/sparse4d
    git -C <MapTR clone> archive fa420a2e | tar -x -C /tmp/maptr
    git -C <BEVDet clone> archive <commit> | tar -x -C /tmp/bevdet
    LAZYPATCH_BEVFORMER_CHECKOUT=/tmp/bevformer LAZYPATCH_DETECTRON2_CHECKOUT=/tmp/detectron2 \
    LAZYPATCH_SPARSE4D_CHECKOUT=/tmp/sparse4d LAZYPATCH_MAPTR_CHECKOUT=/tmp/maptr \
    LAZYPATCH_BEVDET_CHECKOUT=/tmp/bevdet pytest tests/packs/test_openmmlab1x_models.py

(BEVDet: DrivingSDK names 58c2587a; a clone at master 1bacecb, its mmdet3d 0.17.2 fork
with ``configs/bevdet/bevdet-r50.py``, is what these tests were run with. MapTR needs a
venv with the versions it names: see ``MAPTR_VERSIONS_MISSING`` below.)

(BEVFormer's plugin imports its dd3d code, which imports detectron2: detectron2's Python
source on the path is enough, as it is not on the package index). Run in the 1.x
environment (requirements/stack1x.txt) plus what these repositories import
(requirements/stack1x-models.txt); elsewhere, or without a checkout, they skip and say so.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from openmmlab1x import last_json_line, needs_stack_1x, patch_statuses, run_under_lazypatch

from lazypatch import installed_version

STEPS = Path(__file__).resolve().parent / "zoo_steps"

#: What lazypatch must have provided for any of these models on a CPU machine.
PROVIDED = ("openmmlab.mmcv_ext", "cuda_extensions.torchvision")


def checkout(variable: str, marker: str) -> Path:
    path = os.environ.get(variable, "")
    if not path or not (Path(path) / marker).exists():
        pytest.skip(f"no extracted checkout (set {variable}; see this file's docstring for "
                    f"the git archive command)")
    return Path(path)


def judge(result, report_directory: Path) -> dict:
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    step = last_json_line(result.stdout)
    assert step["finite"] and step["loss"] > 0, step
    assert step["without_gradient"] == [], step["without_gradient"]
    assert step["moved"] > 0 and step["trainable"] > 100
    statuses = patch_statuses(report_directory)
    assert not [name for name, status in statuses.items() if status == "failed"], statuses
    for name in PROVIDED:
        assert name in statuses, (name, sorted(statuses))
    assert any(name.startswith("device.") for name in statuses), sorted(statuses)
    print("lazypatch provided:", ", ".join(sorted(statuses)))
    return step


@needs_stack_1x
def test_bevformer_tiny_trains_a_step(tmp_path):
    bevformer = checkout("LAZYPATCH_BEVFORMER_CHECKOUT",
                         "projects/configs/bevformer/bevformer_tiny.py")
    detectron2 = checkout("LAZYPATCH_DETECTRON2_CHECKOUT", "detectron2/__init__.py")
    result = run_under_lazypatch([sys.executable, str(STEPS / "bevformer_tiny_step.py")],
                                 cwd=bevformer, report_directory=tmp_path / "reports",
                                 env={"PYTHONPATH": str(detectron2)})
    step = judge(result, tmp_path / "reports")
    assert {"loss_cls", "loss_bbox", "d4.loss_cls"} <= set(step["log_vars"])
    assert "openmmlab.mmcv_version_gate.mmdet3d" in patch_statuses(tmp_path / "reports")


@needs_stack_1x
def test_sparse4d_v3_trains_a_step(tmp_path):
    sparse4d = checkout("LAZYPATCH_SPARSE4D_CHECKOUT",
                        "projects/configs/sparse4dv3_temporal_r50_1x8_bs6_256x704.py")
    result = run_under_lazypatch([sys.executable, str(STEPS / "sparse4d_v3_step.py"), str(sparse4d)],
                                 cwd=tmp_path, report_directory=tmp_path / "reports")
    step = judge(result, tmp_path / "reports")
    # The denoising queries' -1 labels reach mmdet's FocalLoss on the CPU branch.
    assert "loss_cls_dn_0" in step["log_vars"]
    statuses = patch_statuses(tmp_path / "reports")
    assert "openmmlab.mmdet_focal_loss_cpu" in statuses
    assert "cuda_extensions.projects.mmdet3d_plugin.ops.deformable_aggregation_ext" in statuses


# MapTR and BEVDet

#: MapTR (hustvl/MapTR fa420a2e) names mmdet 2.14.0 and mmsegmentation 0.14.1, and its
#: dataset code imports av2 (Argoverse 2): a venv of its own, the 1.x stack with
#: requirements/stack1x-maptr.txt on top (``pip install --no-deps -r``); its mmdetection3d
#: 0.17.2 is the checkout's own ``mmdetection3d`` folder (the step script puts it on the path).
MAPTR_VERSIONS_MISSING = [
    requirement for requirement, installed in (
        ("mmdet==2.14.*", (installed_version("mmdet") or "").startswith("2.14.")),
        ("mmsegmentation==0.14.*", (installed_version("mmsegmentation") or "").startswith("0.14.")),
        ("av2", installed_version("av2") is not None)) if not installed]


@needs_stack_1x
@pytest.mark.skipif(bool(MAPTR_VERSIONS_MISSING),
                    reason=f"MapTR needs the versions it names, not the 1.x CI venv's: "
                           f"{', '.join(MAPTR_VERSIONS_MISSING)} (a venv of the 1.x stack with "
                           f"requirements/stack1x-maptr.txt on top)")
def test_maptr_trains_a_step(tmp_path):
    maptr = checkout("LAZYPATCH_MAPTR_CHECKOUT",
                     "projects/configs/maptr/maptr_tiny_r50_24e_bevformer.py")
    result = run_under_lazypatch([sys.executable, str(STEPS / "maptr_tiny_step.py")],
                                 cwd=maptr, report_directory=tmp_path / "reports")
    step = judge(result, tmp_path / "reports")
    assert {"loss_cls", "loss_pts", "loss_dir", "d4.loss_pts"} <= set(step["log_vars"])
    statuses = patch_statuses(tmp_path / "reports")
    # mmdet 2.14 and mmseg 0.14 refuse mmcv 1.7.2; mmdetection3d 0.17 imports numba.errors,
    # its compiled ops and MapTR's own GeometricKernelAttention at import
    for name in ("openmmlab.mmcv_version_gate.mmdet", "openmmlab.mmcv_version_gate.mmdet3d",
                 "openmmlab.mmcv_version_gate.mmseg", "openmmlab.moved_modules.numba",
                 "cuda_extensions.mmdet3d.ops.iou3d.iou3d_cuda",
                 "cuda_extensions.mmdet3d.ops.spconv.conv.registrations",
                 "cuda_extensions.GeometricKernelAttention.pytorch"):
        assert name in statuses, (name, sorted(statuses))


@needs_stack_1x
def test_bevdet_trains_a_step(tmp_path):
    # The 1.x stack's mmdet 2.28.2 and mmsegmentation 0.30.0 are the versions DrivingSDK's
    # BEVDet README names; the checkout is its own mmdetection3d 0.17.2 fork.
    bevdet = checkout("LAZYPATCH_BEVDET_CHECKOUT", "configs/bevdet/bevdet-r50.py")
    result = run_under_lazypatch([sys.executable, str(STEPS / "bevdet_r50_step.py")],
                                 cwd=bevdet, report_directory=tmp_path / "reports")
    step = judge(result, tmp_path / "reports")
    assert {"task0.loss_heatmap", "task0.loss_xy", "task5.loss_heatmap"} <= set(step["log_vars"])
    statuses = patch_statuses(tmp_path / "reports")
    # mmdetection3d 0.17.2 refuses mmcv 1.7.2; its bev_pool (sizes as 0-d tensors) and other
    # ops are stand-ins; its own SparseConv2d and SwinTransformer take over the names mmcv's
    # ops and mmdet 2.28 registered first
    for name in ("openmmlab.mmcv_version_gate.mmdet3d", "openmmlab.moved_modules.numba",
                 "cuda_extensions.mmdet3d.ops.bev_pool.bev_pool_ext",
                 "cuda_extensions.mmdet3d.ops.spconv.conv.registrations",
                 "cuda_extensions.mmdet3d.models.backbones.swin.registrations"):
        assert name in statuses, (name, sorted(statuses))

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
    git -C <detr3d clone> archive 34a47673 | tar -x -C /tmp/detr3d
    git -C <StreamPETR clone> archive 95f64702 | tar -x -C /tmp/streampetr
    git -C <mmdetection3d clone> archive v1.0.0rc6 configs | tar -x -C /tmp/detr3d/mmdetection3d
    git -C <mmdetection3d clone> archive v1.0.0rc6 configs | tar -x -C /tmp/streampetr/mmdetection3d
    LAZYPATCH_BEVFORMER_CHECKOUT=/tmp/bevformer LAZYPATCH_DETECTRON2_CHECKOUT=/tmp/detectron2 \
    LAZYPATCH_SPARSE4D_CHECKOUT=/tmp/sparse4d LAZYPATCH_MAPTR_CHECKOUT=/tmp/maptr \
    LAZYPATCH_BEVDET_CHECKOUT=/tmp/bevdet LAZYPATCH_DETR3D_CHECKOUT=/tmp/detr3d \
    LAZYPATCH_STREAMPETR_CHECKOUT=/tmp/streampetr pytest tests/packs/openmmlab/test_1x_models.py

(BEVDet: DrivingSDK names 58c2587a; a clone at master 1bacecb, its mmdet3d 0.17.2 fork
with ``configs/bevdet/bevdet-r50.py``, is what these tests were run with. MapTR needs a
venv with the versions it names: see ``MAPTR_VERSIONS_MISSING`` below.)

(BEVFormer's plugin imports its dd3d code, which imports detectron2: detectron2's Python
source on the path is enough, as it is not on the package index. DETR3D's and
StreamPETR's configs inherit from ``mmdetection3d/configs`` inside their checkout: DETR3D
has it as a submodule, StreamPETR's instructions clone it there; DrivingSDK names
v1.0.0rc6 for both, and mkdir the folder first. StreamPETR runs with
``LAZYPATCH_CUDA_AVAILABLE=1``: its flash attention asserts ``q.is_cuda``.) Run in the 1.x
environment (requirements/stack1x.txt) plus what these repositories import
(requirements/stack1x-models.txt); elsewhere, or without a checkout, they skip and say so.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from packs.openmmlab.openmmlab1x import last_json_line, needs_stack_1x, patch_statuses, run_under_lazypatch

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


def mmdetection3d_configs(checkout_path: Path, variable: str) -> None:
    """DETR3D's and StreamPETR's configs inherit from ``mmdetection3d/configs/_base_``
    inside the checkout (a submodule / a clone their instructions make): skip without it."""
    if not (checkout_path / "mmdetection3d/configs/_base_/default_runtime.py").exists():
        pytest.skip(f"{variable} has no mmdetection3d/configs (the configs' _base_): see this "
                    f"file's docstring for the git archive command")


def changed_something(report_directory: Path, name: str) -> bool:
    """Whether patch ``name`` changed anything in a process of ``report_directory`` (a
    patch can apply and find nothing to do, as the device pack's claims without the
    setting)."""
    import glob
    import json
    for path in glob.glob(str(report_directory / "*.json")):
        with open(path, encoding="utf-8") as handle:
            if any(record["name"] == name and record["changes"] not in ("", "[]", [])
                   for record in json.load(handle)["patches"]):
                return True
    return False


@needs_stack_1x
def test_detr3d_trains_a_step(tmp_path):
    detr3d = checkout("LAZYPATCH_DETR3D_CHECKOUT", "projects/configs/detr3d/detr3d_res101_gridmask.py")
    mmdetection3d_configs(detr3d, "LAZYPATCH_DETR3D_CHECKOUT")
    result = run_under_lazypatch([sys.executable, str(STEPS / "detr3d_step.py")],
                                 cwd=detr3d, report_directory=tmp_path / "reports")
    step = judge(result, tmp_path / "reports")
    assert {"loss_cls", "loss_bbox", "d4.loss_cls", "d4.loss_bbox"} <= set(step["log_vars"])
    # mmdet3d 1.0.0rc6 asserts mmcv<=1.7.0; the ResNet-101's DCNv2 runs on mmcv._ext.
    assert "openmmlab.mmcv_version_gate.mmdet3d" in patch_statuses(tmp_path / "reports")


@needs_stack_1x
def test_streampetr_trains_a_step(tmp_path):
    streampetr = checkout("LAZYPATCH_STREAMPETR_CHECKOUT",
                          "projects/configs/StreamPETR/stream_petr_vov_flash_800_bs2_seq_24e.py")
    mmdetection3d_configs(streampetr, "LAZYPATCH_STREAMPETR_CHECKOUT")
    # Its flash attention asserts q.is_cuda: the documented claim of CUDA answers it.
    result = run_under_lazypatch([sys.executable, str(STEPS / "streampetr_step.py")],
                                 cwd=streampetr, report_directory=tmp_path / "reports",
                                 env={"LAZYPATCH_CUDA_AVAILABLE": "1"})
    step = judge(result, tmp_path / "reports")
    # The denoising queries and the 2D focal head's losses, for the one frame.
    assert {"frame_0_loss_cls", "frame_0_dn_loss_cls", "frame_0_enc_loss_cls",
            "frame_0_centers2d_losses"} <= set(step["log_vars"])
    statuses = patch_statuses(tmp_path / "reports")
    assert {"cuda_extensions.flash_attn.flash_attn_interface",     # flash-attn 1.x's names
            "cuda_extensions.flash_attn.bert_padding"} <= set(statuses)
    assert changed_something(tmp_path / "reports", "device.tensor_is_cuda")


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

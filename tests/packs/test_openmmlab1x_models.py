"""Zoo models on the OpenMMLab 1.x stack: one training step each, from the model's own
repository and config, under ``lazypatch run --enable device --enable cuda_extensions``,
with the model's code unchanged (the scripts are in ``zoo_steps/``).

Slow (minutes of CPU each). Nothing is downloaded: give an extracted checkout at the
commit DrivingSDK's ``model_examples/<Model>/README.md`` names,

    git -C <BEVFormer clone> archive 66b65f3a | tar -x -C /tmp/bevformer
    git -C <detectron2 clone> archive HEAD detectron2 | tar -x -C /tmp/detectron2
    git -C <Sparse4D clone> archive c41df4bb | tar -x -C /tmp/sparse4d
    LAZYPATCH_BEVFORMER_CHECKOUT=/tmp/bevformer LAZYPATCH_DETECTRON2_CHECKOUT=/tmp/detectron2 \
    LAZYPATCH_SPARSE4D_CHECKOUT=/tmp/sparse4d pytest tests/packs/test_openmmlab1x_models.py

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

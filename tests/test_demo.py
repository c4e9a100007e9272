"""The README's demo: the legacy script fails on today's stack, and trains under `lazypatch run`."""

from __future__ import annotations

import os
import sys

from conftest import REPOSITORY

DEMO = str(REPOSITORY / "examples" / "legacy_train.py")
LAZYPATCH = os.path.join(os.path.dirname(sys.executable), "lazypatch")


def test_demo_fails_without_lazypatch(interpreter):
    result = interpreter.run_command([sys.executable, DEMO], check=False, timeout=300)
    assert result.returncode != 0
    assert "MMCV==2.2.0 is used but incompatible" in result.stderr


def test_demo_trains_predicts_and_reports_under_lazypatch_run(interpreter):
    result = interpreter.run_command([LAZYPATCH, "run", "--", sys.executable, DEMO], timeout=600)
    lines = result.stdout.splitlines()
    losses = [float(line.split()[-1]) for line in lines if line.startswith("iter ")]
    assert len(losses) == 10 and all(loss == loss for loss in losses)   # finite, no NaN
    assert any(line.startswith("predicted ") for line in lines)
    assert "MultiScaleDeformableAttention from mmcv.ops.multi_scale_deform_attn" in result.stdout
    report = {line.split()[1]: line.split()[0] for line in lines
              if line.split()[:1] and line.split()[0] in ("applied", "reverted", "skipped",
                                                          "disabled", "failed", "pending")}
    assert report["numpy_compat.type_aliases"] == "applied"
    assert report["openmmlab.mmcv_ext"] == "applied"
    assert report["openmmlab.mmcv_version_gate.mmdet"] == "reverted"
    assert "failed" not in report.values()

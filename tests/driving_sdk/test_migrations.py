"""DrivingSDK's own test suites and a real migration file, run unchanged against lazypatch.

Both need an extracted checkout of Ascend/DrivingSDK (nothing is downloaded at test
time): set LAZYPATCH_DRIVING_SDK_CHECKOUT to a folder holding ``tests/patcher`` (2.0)
and ``model_examples/DiffusionDrive/migrate_to_ascend/patch.py``, and
LAZYPATCH_DRIVING_SDK_V1_CHECKOUT to one holding the 1.0 tests
``tests/torch/test_patcher*.py`` (commit c0809f71~1); tests/driving_sdk/driving_sdk_suite.py says how.
Without them these tests skip, saying so.

The suites are judged by floors: the pass counts measured when this file was last
changed (docs/driving_sdk.md lists the groups that stay failing and why). A change
that breaks code written for DrivingSDK lowers the count and fails here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import driving_sdk_suite  # noqa: E402

CHECKOUT = os.environ.get("LAZYPATCH_DRIVING_SDK_CHECKOUT", "")
V1_CHECKOUT = os.environ.get("LAZYPATCH_DRIVING_SDK_V1_CHECKOUT", "")
MIGRATION = "model_examples/DiffusionDrive/migrate_to_ascend/patch.py"

# Passed tests of DrivingSDK's own suites against lazypatch, as last measured.
FLOOR_V2 = 590
FLOOR_V1 = 54


def needs(path: str, inside: str) -> Path:
    if not path or not (Path(path) / inside).exists():
        pytest.skip(f"no DrivingSDK checkout with {inside} (set LAZYPATCH_DRIVING_SDK_CHECKOUT / "
                    f"LAZYPATCH_DRIVING_SDK_V1_CHECKOUT; see tests/driving_sdk/driving_sdk_suite.py)")
    return Path(path)


@pytest.mark.stack
def test_drivingsdk_2_own_patcher_tests(capsys):
    counts = driving_sdk_suite.run(needs(CHECKOUT, "tests/patcher"), "tests/patcher")
    with capsys.disabled():
        print("\nDrivingSDK 2.0 tests/patcher against lazypatch:\n" + driving_sdk_suite.table(counts))
    assert sum(passed for passed, _, _ in counts.values()) >= FLOOR_V2


@pytest.mark.stack
def test_drivingsdk_1_own_patcher_tests(capsys):
    counts = driving_sdk_suite.run(needs(V1_CHECKOUT, "tests/torch"),
                                   "tests/torch/test_patcher*.py")
    with capsys.disabled():
        print("\nDrivingSDK 1.0 tests against lazypatch:\n" + driving_sdk_suite.table(counts))
    assert sum(passed for passed, _, _ in counts.values()) >= FLOOR_V1


# DiffusionDrive's own project modules are not installable here: small packages with the
# classes and functions its migration file patches stand in for them (written by the
# test; the migration file itself is DrivingSDK's, read from the checkout unchanged).
PROJECT = {
    "projects/__init__.py": "",
    "projects/mmdet3d_plugin/__init__.py": "",
    "projects/mmdet3d_plugin/ops/__init__.py": "",
    "projects/mmdet3d_plugin/ops/deformable_aggregation.py":
        "raise ImportError('the CUDA extension of deformable aggregation is not built')\n",
    "projects/mmdet3d_plugin/models/__init__.py": "",
    "projects/mmdet3d_plugin/models/sparsedrive_v1.py": "class V1SparseDrive:\n    pass\n",
    "projects/mmdet3d_plugin/models/attention.py": (
        "def auto_fp16(**kwargs):\n    return lambda function: function\n\n"
        "def _in_projection_packed(*args):\n    return args\n\n"
        "def rearrange(x, pattern):\n    return x\n\n"
        "class FlashAttention:\n    def forward(self, q, k, v):\n        return 'cuda flash'\n\n"
        "class FlashMHA:\n    def forward(self, x):\n        return 'cuda mha'\n"),
}
# A FAKE torch_npu: the migration file imports it at its top (the NPU cannot exist here).
FAKE_TORCH_NPU = {"fake_npu/torch_npu/__init__.py": "# FAKE torch_npu\n"}


@pytest.mark.stack
def test_diffusiondrive_migration_file_unchanged_with_fake_torch_npu(interpreter):
    checkout = needs(CHECKOUT, MIGRATION)
    interpreter.write(PROJECT)
    interpreter.write(FAKE_TORCH_NPU)
    migrate = interpreter.root / "migrate_to_ascend"
    migrate.mkdir()
    (migrate / "__init__.py").write_text("")
    (migrate / "patch.py").write_text((checkout / MIGRATION).read_text(encoding="utf-8"))
    result = interpreter.run_json("""
import json, sys
import lazypatch.auto
import lazypatch
from mx_driving.patcher import default_patcher
from migrate_to_ascend.patch import configure_patcher

configure_patcher(default_patcher, performance=False)
default_patcher.apply()
early = sorted(name for name in ("projects.mmdet3d_plugin.models.attention",
                                 "projects.mmdet3d_plugin.ops.deformable_aggregation",
                                 "mmcv.runner") if name in sys.modules)
from projects.mmdet3d_plugin.models import attention
from projects.mmdet3d_plugin.ops.deformable_aggregation import DeformableAggregationFunction
from projects.mmdet3d_plugin.models import V1SparseDrive
flash = attention.FlashAttention.forward.__qualname__
statuses = {r["name"]: r["status"] for r in lazypatch.report()
            if r["name"].startswith("driving_sdk.")}
default_patcher.restore()
print(json.dumps({"early": early, "flash": flash, "kernel": DeformableAggregationFunction.__name__,
                  "injected": V1SparseDrive.__name__, "statuses": statuses,
                  "restored": attention.FlashAttention.forward.__qualname__}))
""", env={"PYTHONPATH": str(interpreter.root / "fake_npu")})
    assert result["early"] == []                      # nothing imported by apply()
    assert result["flash"] == "FlashAttention._flash_attention_forward"
    assert result["kernel"] == "_DeformableAggregationFunction"
    assert result["injected"] == "V1SparseDrive"
    statuses = result["statuses"]
    attention_patches = [name for name in statuses if "attention.FlashAttention" in name]
    assert attention_patches and all(statuses[name] == "applied" for name in attention_patches)
    # targets never imported are listed, waiting for their module
    assert any(status == "pending" for status in statuses.values())
    assert result["restored"] == "FlashAttention.forward"

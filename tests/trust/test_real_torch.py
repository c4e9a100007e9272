"""The engine against the real torch: patched during ``import torch``, undone exactly."""

from __future__ import annotations

import pytest

# Needs the real stack (torch, OpenMMLab): run on 3.11 only (.ci/run).
pytestmark = pytest.mark.stack


def test_patch_on_torch_nn_functional_applies_during_import_torch_and_undoes(interpreter):
    result = interpreter.run_json("""
import json, sys, lazypatch
seen_during_import = []

@lazypatch.when_imported("torch.nn.functional", name="torch.relu_counter")
def count_relu(module, patch):
    seen_during_import.append("torch" in sys.modules and not hasattr(sys.modules["torch"], "compile"))
    calls = []

    def counting(wrapped, instance, args, kwargs):
        calls.append(1)
        return wrapped(*args, **kwargs)
    patch.wrap(module, "relu", counting)
    patch.setattr(module, "RELU_CALLS", calls)

@lazypatch.when_imported("torch.nn.functional", name="torch.gelu_marker")
def mark_gelu(module, patch):
    patch.setattr(module, "gelu", lambda *args, **kwargs: "marked")

assert "torch" not in sys.modules
import torch
import torch.nn.functional as F
relu_before = F.relu.__wrapped__
gelu_before = lazypatch.original(F, "gelu")
out = F.relu(torch.tensor([-1.0, 2.0]))
calls = len(F.RELU_CALLS)
lazypatch.unpatch_all()
print(json.dumps({
    "applied_while_torch_importing": seen_during_import == [True],
    "relu_result": out.tolist(), "calls": calls,
    "relu_restored": F.relu is relu_before, "gelu_restored": F.gelu is gelu_before,
    "marker_removed": not hasattr(F, "RELU_CALLS"),
    "statuses": sorted({r["status"] for r in lazypatch.report()}),
}))
""", env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, timeout=300)
    assert result == {"applied_while_torch_importing": True, "relu_result": [0.0, 2.0], "calls": 1,
                      "relu_restored": True, "gelu_restored": True, "marker_removed": True,
                      "statuses": ["reverted"]}


def test_import_lazypatch_auto_imports_no_target_and_not_wrapt(interpreter):
    result = interpreter.run_json("""
import sys, json
before = set(sys.modules)
import lazypatch.auto
added = sorted(set(sys.modules) - before)
heavy = [name for name in added if name.split(".")[0] in
         ("torch", "numpy", "wrapt", "mmcv", "mmdet", "mmdet3d", "mmengine", "torch_npu",
          "mx_driving", "typing", "logging") or name == "importlib.metadata"]
print(json.dumps({"heavy": heavy, "finder_first": type(sys.meta_path[0]).__name__}))
""")
    assert result == {"heavy": [], "finder_first": "LazyPatchFinder"}

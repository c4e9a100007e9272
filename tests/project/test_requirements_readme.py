"""docs/writing_patches.md's API block, run as written on this machine's stack (mmcv-lite 2.2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# Needs the real stack (torch, OpenMMLab): run on 3.11 only (.ci/run).
pytestmark = pytest.mark.stack

README = Path(__file__).resolve().parents[2] / "docs" / "writing_patches.md"


def quickstart_registrations() -> str:
    """The quickstart's code block, up to its first report (the registrations)."""
    text = README.read_text(encoding="utf-8")
    block = text.split("## The API in one block", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    return block.split("lazypatch.report()", 1)[0]


def test_quickstart_requirement_on_mmcv_holds_with_mmcv_lite(interpreter):
    code = quickstart_registrations()
    assert 'requires=["mmcv>=2.0,<2.3"]' in code
    result = interpreter.run(
        "import lazypatch.auto, json\n"
        "def my_wrapper(wrapped, instance, args, kwargs):\n"
        "    return wrapped(*args, **kwargs)\n"
        "def my_batched_nms(*args, **kwargs):\n"
        "    return None\n"
        + code +
        "import mmcv.ops\n"
        "record = next(r for r in lazypatch.report() if r['name'] == 'mymmcv.nms_fallback')\n"
        "print(json.dumps([record['status'], record['reason'], record['history'],\n"
        "                  mmcv.ops.batched_nms is my_batched_nms]))\n", timeout=300)
    status, reason, history, replaced = json.loads(result.stdout.splitlines()[-1])
    assert status == "applied", reason
    assert replaced
    assert any("version of mmcv from distribution mmcv" in event for event in history), history

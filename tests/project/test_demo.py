"""The README's demo: the legacy script fails on today's stack, trains under `lazypatch run`,
gives the same losses and boxes on every run, and docs/demo.md shows its real output."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import REPOSITORY, clean_environment

DEMO = str(REPOSITORY / "examples" / "legacy_train.py")
LAZYPATCH = os.path.join(os.path.dirname(sys.executable), "lazypatch")
STATUSES = ("applied", "reverted", "skipped", "disabled", "failed", "pending")

# The demo tests share one run of the demo (a minute or more): one xdist worker runs them.
# They need the real stack (torch, OpenMMLab): run on 3.11 only (.ci/run).
pytestmark = [pytest.mark.xdist_group("demo"), pytest.mark.stack]


def _run_demo(tmp_path) -> str:
    """stdout of `lazypatch run -- python examples/legacy_train.py`, as `./dev demo` runs it."""
    result = subprocess.run([LAZYPATCH, "run", "--", sys.executable, DEMO], cwd=tmp_path,
                            env=clean_environment(), capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def demo_output(tmp_path_factory) -> str:
    return _run_demo(tmp_path_factory.mktemp("demo"))


def _stable_lines(output: str):
    """The lines the README promises are the same on every run: all but the wall time
    (`done in`), with the report's MS column (each patch's time) taken out."""
    lines = []
    for line in output.splitlines():
        if line.startswith("done in "):
            continue
        if line.startswith("one-time imports, charged to no patch: "):
            # "wrapt 2.76 ms": a time, like the MS column
            line = re.sub(r"\d+\.\d+ ms", "N ms", line)
        cells = line.split()
        if cells[:1] and cells[0] in STATUSES + ("STATUS",) and len(cells) > 5:
            # STATUS PATCH TARGET CHANGES MS DETAIL...: drop MS
            line = " ".join(cells[:4] + cells[5:])
        lines.append(line)
    return lines


def _readme_demo_block() -> str:
    text = (REPOSITORY / "docs" / "demo.md").read_text()
    blocks = re.findall(r"```\n(mmdet .*?)```", text, flags=re.S)
    assert len(blocks) == 1, "docs/demo.md shows the demo's output in one block"
    return blocks[0]


# "iter  3  loss 6.2469", "predicted 5 boxes ... best score 0.105",
# "  red_box   0.105  [ 18.8  23.0  26.8  30.9]": the lines whose numbers training decides.
NUMBERED = re.compile(r"^(iter |predicted |  \S+ +\d+\.\d+  \[)")


def _numbers(lines):
    """The losses, box scores and corners of the demo's lines."""
    values = []
    for line in lines:
        if NUMBERED.match(line):
            values += [float(value) for value in re.findall(r"-?\d+\.\d+", line)]
    return values


def test_demo_fails_without_lazypatch(interpreter):
    result = interpreter.run_command([sys.executable, DEMO], check=False, timeout=300)
    assert result.returncode != 0
    assert "MMCV==2.2.0 is used but incompatible" in result.stderr


def test_demo_trains_predicts_and_reports_under_lazypatch_run(demo_output):
    lines = demo_output.splitlines()
    losses = [float(line.split()[-1]) for line in lines if line.startswith("iter ")]
    assert len(losses) == 10 and all(loss == loss for loss in losses)   # finite, no NaN
    assert any(line.startswith("predicted ") for line in lines)
    assert "MultiScaleDeformableAttention from mmcv.ops.multi_scale_deform_attn" in demo_output
    report = {line.split()[1]: line.split()[0] for line in lines
              if line.split()[:1] and line.split()[0] in STATUSES}
    assert report["numpy_compat.type_aliases"] == "applied"
    assert report["openmmlab.mmcv_ext"] == "applied"
    assert report["openmmlab.mmcv_version_gate.mmdet"] == "reverted"
    assert "failed" not in report.values()


def test_demo_gives_the_same_losses_boxes_and_report_on_a_second_run(demo_output, tmp_path):
    first, second = _stable_lines(demo_output), _stable_lines(_run_demo(tmp_path))
    assert [line for line in first if line.startswith("iter ")]   # there is something to compare
    assert second == first


def test_readme_shows_the_demos_real_output(demo_output):
    readme, run = _stable_lines(_readme_demo_block()), _stable_lines(demo_output)
    # Everything but the numbers, exactly: the report's rows, their details, the summaries.
    without_numbers = lambda lines: [line for line in lines  # noqa: E731
                                     if not NUMBERED.match(line)]
    assert without_numbers(readme) == without_numbers(run)
    # The numbers as printed here; another CPU's vector units may round the last digits of
    # ten training steps differently, so they are compared within a print-sized margin.
    expected, found = _numbers(readme), _numbers(run)
    assert len(expected) == len(found) > 10
    assert all(abs(a - b) <= 0.02 + 0.002 * abs(a) for a, b in zip(expected, found)), \
        "docs/demo.md's demo block is not this code's output: paste the output of ./dev demo"

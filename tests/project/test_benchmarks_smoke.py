"""The benchmark runner keeps working: every measurement runs and yields numbers.

Runs ``benchmarks/run.py --smoke`` (one repetition, a few modules) in a fresh
process and reads its JSON. Nothing here asserts anything about time: speed
is judged in the published table, as ratios against same-run baselines.
The heavy measurements (``import torch``, the eager stack, the packs' own
benchmarks) are left to ``tox -e bench``; the eager baseline is checked
for what it claims to do.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPOSITORY, clean_environment

LIGHT_MEASUREMENTS = ("activation", "unwatched", "watched", "wrap", "scale")
EXPECTED_ROWS = (
    "`import lazypatch.auto` vs `python -c pass` (wall, clean venv)",
    "modules imported by activation beyond a bare start",
    "finder on an unwatched import (wall)",
    "watched import before its patches run (wall)",
    "watched import, no-op patch: lazypatch vs wrapt hooks (wall)",
    "`patch.wrap` overhead vs wrapt FunctionWrapper overhead (function)",
    "`patch.wrap` overhead vs wrapt FunctionWrapper overhead (method)",
    "register 10,000 patches",
    "register 10,000 patches (CPU time)",
    "registration linearity: µs/patch at 10,000 vs at 1,000",
    "unwatched import with 10,000 patches vs with 10 (wall)",
    "report() of 3,000 patches waiting on 50 missing modules vs 300: ms per record",
)


# About 40 seconds of one worker (the runner builds a clean venv and counts with callgrind):
# in the slow tier, which CI runs beside its own quick benchmark pass (.ci/run).
@pytest.mark.slow
def test_runner_produces_every_row_with_numbers(tmp_path: Path) -> None:
    output, raw = tmp_path / "RESULTS.md", tmp_path / "raw.json"
    result = subprocess.run(
        [sys.executable, str(REPOSITORY / "benchmarks" / "run.py"), "--smoke",
         "--only", ",".join(LIGHT_MEASUREMENTS), "--output", str(output), "--json", str(raw)],
        cwd=tmp_path, env=clean_environment(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(raw.read_text())["rows"]
    errors = [row for row in rows if row["verdict"] == "error"]
    assert not errors, errors
    names = [row["name"] for row in rows]
    for expected in EXPECTED_ROWS:
        assert expected in names, f"missing row {expected!r}; rows: {names}"
    for row in rows:
        assert isinstance(row["value"], (int, float)) and math.isfinite(row["value"]), row
        assert row["verdict"] in ("met", "missed", "info"), row
    decided = {row["group"] for row in rows if row["verdict"] in ("met", "missed")}
    assert len(decided) == len(LIGHT_MEASUREMENTS), decided  # one group per measurement
    activation = rows[names.index("modules imported by activation beyond a bare start")]
    assert not any(name.split(".")[0] in ("torch", "numpy", "wrapt", "mmcv", "mmdet")
                   for name in activation["raw"]["added"]), activation
    table = output.read_text()
    assert "CPUs" in table and "| figure | value | baseline | ratio |" in table
    for expected in EXPECTED_ROWS:
        assert expected.replace("|", "\\|") in table


@pytest.mark.stack
def test_eager_baseline_imports_every_target_up_front(tmp_path: Path) -> None:
    script = ("import sys\n"
              f"sys.path.insert(0, {str(REPOSITORY / 'benchmarks' / 'baselines')!r})\n"
              "from eager_patcher import default_patcher_builder\n"
              "with default_patcher_builder.build():\n"
              "    import numpy\n"
              "print(sorted(m for m in ('torch', 'mmcv', 'mmdet', 'mmdet3d') "
              "if m in sys.modules))\n")
    result = subprocess.run([sys.executable, "-W", "error", "-c", script], cwd=tmp_path,
                            env=clean_environment(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[-2] == "['mmcv', 'mmdet', 'mmdet3d', 'torch']"


def test_the_runner_names_every_benchmark_module_by_its_place() -> None:
    # The pack and report benchmarks are imported by dotted name (benchmarks/packs/__init__.py,
    # benchmarks/run.py): a moved or renamed file would only show as a "not present" row.
    benchmarks = REPOSITORY / "benchmarks"
    named = set()
    for runner in (benchmarks / "run.py", benchmarks / "packs" / "__init__.py"):
        named |= set(re.findall(r'"((?:packs|reports)\.[\w.]+)"', runner.read_text()))
    files = {path.relative_to(benchmarks).with_suffix("").as_posix().replace("/", ".")
             for path in benchmarks.rglob("bench_*.py")}
    assert named == files

"""Import and scope-entry cost of the export pack, against onnx-diagnostic's
``torch_export_patches`` where it imports beside the installed transformers.

Each figure is measured in a fresh interpreter that has already imported torch and a
model family (``transformers`` llama): what remains is the tool's own cost.

* import: ``import lazypatch.auto`` (activation, the export pack only declared)
  against ``from onnx_diagnostic.torch_export_patches import torch_export_patches``;
* scope entry: entering ``lazypatch.patched("export")`` (cache classes registered,
  declarations resolved) against entering ``torch_export_patches(patch_transformers=True)``;
* modules: how many modules each adds to ``sys.modules``.

Run from the repository root::

    .venv/bin/python benchmarks/bench_export.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Dict, List

PROLOGUE = """
import sys, time, json, warnings
warnings.simplefilter("ignore")
import torch, transformers
from transformers.models.llama import modeling_llama
modules = set(sys.modules)
"""

LAZYPATCH = PROLOGUE + """
started = time.perf_counter()
import lazypatch.auto, lazypatch
imported = time.perf_counter()
with lazypatch.patched("export"):
    entered = time.perf_counter()
print("RESULT" + json.dumps([imported - started, entered - imported, len(set(sys.modules) - modules)]))
"""

ONNX_DIAGNOSTIC = PROLOGUE + """
started = time.perf_counter()
from onnx_diagnostic.torch_export_patches import torch_export_patches
imported = time.perf_counter()
with torch_export_patches(patch_transformers=True):
    entered = time.perf_counter()
print("RESULT" + json.dumps([imported - started, entered - imported, len(set(sys.modules) - modules)]))
"""


def sample(code: str) -> List[float]:
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               timeout=600)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT")]
    if not lines:
        last = (completed.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(last)
    return json.loads(lines[-1][len("RESULT"):])


def measure(code: str, repetitions: int) -> List[float]:
    samples = [sample(code) for _ in range(repetitions)]
    return [statistics.median(column) for column in zip(*samples)]


def run(quick: bool) -> List[Dict[str, object]]:
    repetitions = 3 if quick else 11
    ours = measure(LAZYPATCH, repetitions)
    try:
        theirs = measure(ONNX_DIAGNOSTIC, repetitions)
        reason = ""
    except Exception as error:   # not installed, or does not import beside this transformers
        theirs, reason = [None, None, None], f"onnx-diagnostic does not import here: {error}"
    rows = []
    for index, (name, unit, scale) in enumerate((("import", "ms", 1000.0),
                                                  ("scope entry", "ms", 1000.0),
                                                  ("modules added", "modules", 1.0))):
        value = ours[index] * scale
        baseline = theirs[index] * scale if theirs[index] is not None else None
        rows.append({"name": f"export pack {name}", "value": value, "baseline": baseline,
                     "ratio": value / baseline if baseline else None, "unit": unit,
                     "note": reason or "baseline: onnx-diagnostic torch_export_patches"})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    for row in run(parser.parse_args().quick):
        print(json.dumps(row))


if __name__ == "__main__":
    main()

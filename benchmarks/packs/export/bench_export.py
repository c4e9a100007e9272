"""Import, scope-entry and scope-exit cost of the export pack, against onnx-diagnostic's
``torch_export_patches`` in the same interpreter environment, on the same models.

Each figure is measured in a fresh interpreter that has already imported torch,
transformers and the modeling modules of the models the export tests use (llama,
qwen2, mistral, phi, gemma2, qwen3-moe, gpt2, bert, bart: those the installed
transformers has): what remains is the tool's own cost.

* import: ``import lazypatch.auto`` (activation; the export pack is only declared)
  against ``from onnx_diagnostic.torch_export_patches import torch_export_patches``;
* scope entry: entering ``lazypatch.patched("export")`` (cache classes registered,
  model-family rewrites applied) against entering
  ``torch_export_patches(patch_transformers=True)``; scope exit likewise;
* modules added to ``sys.modules`` by the import and the scope;
* pytree nodes left registered after the scope (exact undo leaves none).

onnx-diagnostic 0.9.3 does not import beside transformers 5.17 to 5.24: in such an
environment its rows carry the reason instead of figures. Measure it where it imports
with ``--python``, an interpreter whose environment has lazypatch, torch, transformers
and onnx-diagnostic (also ``LAZYPATCH_EXPORT_BENCH_PYTHON``, os.pathsep-separated,
for benchmarks/run.py). Both tools are always measured by the same interpreter.

Run from the repository root::

    .venv/bin/python benchmarks/packs/export/bench_export.py [--quick] [--python OTHER/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Dict, List, Optional

PROLOGUE = """
import sys, time, json, warnings, importlib
warnings.simplefilter("ignore")
import torch, transformers
import torch.utils._pytree as pytree
for family in ("llama", "qwen2", "mistral", "phi", "gemma2", "qwen3_moe", "gpt2", "bert", "bart"):
    try:
        importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    except ImportError:   # this transformers does not have that family
        pass
nodes = set(pytree.SUPPORTED_NODES)
modules = set(sys.modules)
"""

EPILOGUE = """
exited = time.process_time()
print("RESULT" + json.dumps(dict(
    transformers=transformers.__version__, imported=imported - started,
    entered=entered - imported, exited=exited - left, modules=len(set(sys.modules) - modules),
    nodes_left=len(set(pytree.SUPPORTED_NODES) - nodes))))
"""

LAZYPATCH = PROLOGUE + """
started = time.process_time()
import lazypatch.auto, lazypatch
imported = time.process_time()
with lazypatch.patched("export"):
    entered = time.process_time()
    left = time.process_time()
""" + EPILOGUE

ONNX_DIAGNOSTIC = PROLOGUE + """
started = time.process_time()
from onnx_diagnostic.torch_export_patches import torch_export_patches
imported = time.process_time()
with torch_export_patches(patch_transformers=True):
    entered = time.process_time()
    left = time.process_time()
""" + EPILOGUE

FIGURES = (("import", "imported", "ms", 1000.0), ("scope entry", "entered", "ms", 1000.0),
           ("scope exit", "exited", "ms", 1000.0), ("modules added", "modules", "modules", 1.0),
           ("pytree nodes left after the scope", "nodes_left", "nodes", 1.0))


def sample(python: str, code: str) -> Dict[str, object]:
    """One fresh interpreter's figures; RuntimeError with its last error line if it fails."""
    completed = subprocess.run([python, "-c", code], capture_output=True, text=True,
                               timeout=600)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT")]
    if not lines:
        last = (completed.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(last)
    return json.loads(lines[-1][len("RESULT"):])


def medians(samples: List[Dict[str, object]]) -> Dict[str, object]:
    """Median of each figure over the samples."""
    result: Dict[str, object] = {"transformers": samples[0]["transformers"]}
    for _, key, _, _ in FIGURES:
        result[key] = statistics.median(float(item[key]) for item in samples)  # type: ignore[arg-type]
    return result


def rows_for(python: str, repetitions: int) -> List[Dict[str, object]]:
    """Both tools measured by ``python``, interleaved (one lazypatch interpreter, then
    one onnx-diagnostic interpreter, ``repetitions`` times) so that load drifts alike."""
    our_samples: List[Dict[str, object]] = []
    their_samples: List[Dict[str, object]] = []
    reason = ""
    for _ in range(repetitions):
        our_samples.append(sample(python, LAZYPATCH))
        if not reason:
            try:
                their_samples.append(sample(python, ONNX_DIAGNOSTIC))
            except Exception as error:   # not installed, or does not import here
                reason = f"onnx-diagnostic does not import here: {error}"
    ours = medians(our_samples)
    theirs = medians(their_samples) if their_samples and not reason else None
    where = f"transformers {ours['transformers']}"
    rows = []
    for label, key, unit, scale in FIGURES:
        value = float(ours[key]) * scale  # type: ignore[arg-type]
        baseline = float(theirs[key]) * scale if theirs else None  # type: ignore[arg-type]
        rows.append({"name": f"export pack {label} ({where})", "value": value,
                     "baseline": baseline,
                     "ratio": value / baseline if baseline else None, "unit": unit,
                     "note": reason or "baseline: onnx-diagnostic torch_export_patches, "
                                       "same interpreter"})
    return rows


def run(quick: bool, pythons: Optional[List[str]] = None) -> List[Dict[str, object]]:
    """Rows for this interpreter and every other one named (``--python`` or
    ``LAZYPATCH_EXPORT_BENCH_PYTHON``)."""
    if pythons is None:
        extra = os.environ.get("LAZYPATCH_EXPORT_BENCH_PYTHON", "")
        pythons = [sys.executable] + [path for path in extra.split(os.pathsep) if path]
    repetitions = 3 if quick else 11
    rows: List[Dict[str, object]] = []
    for python in pythons:
        rows.extend(rows_for(python, repetitions))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--python", action="append", default=[],
                        help="also measure in this interpreter's environment (repeatable)")
    arguments = parser.parse_args()
    for row in run(arguments.quick, [sys.executable] + arguments.python):
        print(json.dumps(row))


if __name__ == "__main__":
    main()

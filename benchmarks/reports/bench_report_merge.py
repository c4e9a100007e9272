"""Merging many processes' reports: 1,024 and 10,000 rank files, summary and HTML page.

Writes N generated rank reports (the record layout ``lazypatch.write_report``
writes: 24 patches per process, the size of a run with the built-in packs
and a few of the user's), then times what ``lazypatch report --html`` does
with them: read and check every file, group identical processes, render the
text summary and render the page. A job looks like a real one that went
partly wrong: every 97th rank failed one patch and one node of 8 ranks has
another torch version, so there are three groups whatever N is.

The figure is the cost per report; flat means the per-report cost at
10,000 is close to that at 1,024 (merging is one pass, the page's size
follows the groups, not the processes). CPU time of this process
(``time.process_time``): waiting for a core on a shared machine is not a
cost of merging. Memory: the peak Python allocation (``tracemalloc``) of
reading and merging, at 10,000 against 1,024 reports: flat, since files are
read one at a time and only a group's first document is kept whole.

Run from the repository root::

    .venv/bin/python benchmarks/reports/bench_report_merge.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Dict, List

# The repository (this file lies in benchmarks/reports/).
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, ROOT)

from lazypatch.reports.merging import load_reports, merge, render_merged  # noqa: E402
from lazypatch.reports.report_page import render_page  # noqa: E402

SIZES = (1_024, 10_000)
PATCHES = 24
FLAT_BUDGET = 1.5    # per-report cost at 10,000 at most 1.5x that at 1,024
MEMORY_BUDGET = 0.05  # each further report costs at most 5% of holding its document


RANK_MARK = "@RANK@"   # where a rank's number goes in a pre-rendered report


def record(index: int, failing: bool, torch_version: str) -> Dict[str, object]:
    """One patch record with every key ``reporting.record_of`` writes."""
    failing = failing and index == 3
    return {
        "name": f"pack{index % 4}.patch{index}", "target": f"torch.module{index}",
        "phase": "after", "status": "failed" if failing else "applied",
        "reason": f"RuntimeError: no device on rank {RANK_MARK}" if failing else "",
        "error": "Traceback (most recent call last):\n  ...\nRuntimeError" if failing else None,
        "enabled": True, "enabled_by_default": True, "priority": 0, "tags": ["device"],
        "requires": ["torch>=2.1"], "description": f"patch number {index}",
        "duration_ms": 0.0421, "applications": 1,
        "changes": [] if failing else [{"action": "setattr", "target": f"torch.module{index}",
                                        "key": "forward", "live": True, "replaced": True}],
        "conflicts": [], "late_references": [], "untracked_changes": [], "undoable": True,
        "history": [], "notes": [], "source": "LAZYPATCH_MODULES", "unmet_requirements": [],
        "package": "torch", "version": torch_version,
    }


def write_reports(directory: str, count: int) -> None:
    """``count`` rank files as ``write_report`` lays them out (indented JSON); each
    kind of rank is rendered once and its rank filled in, so that writing 10,000
    files costs little more than the disk."""
    rendered: Dict[tuple, str] = {}
    for rank in range(count):
        kind = (rank % 97 == 5, "2.5.1" if 64 <= rank < 72 else "2.4.1")
        if kind not in rendered:
            rendered[kind] = json.dumps(
                {"pid": RANK_MARK, "rank": RANK_MARK, "rank_variable": "RANK",
                 "argv": ["train.py"], "python": sys.executable,
                 "patches": [record(index, *kind) for index in range(PATCHES)]}, indent=2)
        text = rendered[kind].replace(f'"{RANK_MARK}"', str(rank)).replace(RANK_MARK, str(rank))
        with open(os.path.join(directory, f"report-{rank}.json"), "w") as handle:
            handle.write(text)


def timed_merge(directory: str) -> Dict[str, float]:
    """Seconds (CPU) of each step of `lazypatch report --html` on the directory."""
    steps: Dict[str, float] = {}
    started = time.process_time()
    # Reading is lazy (one file at a time, as merge asks): timed together.
    merged = merge(load_reports([directory]))
    steps["load_and_merge"] = time.process_time() - started
    started = time.process_time()
    summary = render_merged(merged)
    steps["summary"] = time.process_time() - started
    started = time.process_time()
    page = render_page(merged)
    steps["page"] = time.process_time() - started
    assert len(merged["groups"]) == 3, [group["label"] for group in merged["groups"]]
    assert "differ between processes" in summary and "<table" in page
    steps["page_bytes"] = float(len(page))
    return steps


def loaded_document_bytes(directory: str) -> int:
    """Bytes Python holds for one loaded report document of ``directory``."""
    import tracemalloc
    path = os.path.join(directory, "report-1.json")
    tracemalloc.start()
    try:
        document = next(load_reports([path]))
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert document["patches"]
    return held


def peak_merge_bytes(directory: str) -> int:
    """Peak bytes Python allocated while reading and merging every report of ``directory``."""
    import gc
    import tracemalloc
    gc.collect()
    tracemalloc.start()
    try:
        merged = merge(load_reports([directory]))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(merged["groups"]) == 3
    return peak


def run(quick: bool) -> List[Dict[str, object]]:
    """Rows for the benchmark runner: per-report merge cost at each size, and flatness."""
    repeats = 1 if quick else 3
    per_report_us: Dict[int, float] = {}
    peak_bytes: Dict[int, int] = {}
    document_bytes = 0
    rows: List[Dict[str, object]] = []
    for size in SIZES:
        directory = tempfile.mkdtemp(prefix=f"lazypatch-merge-{size}-")
        try:
            write_reports(directory, size)
            samples = [timed_merge(directory) for _ in range(repeats)]
            peak_bytes[size] = peak_merge_bytes(directory)
            document_bytes = loaded_document_bytes(directory)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        steps = {key: statistics.median(sample[key] for sample in samples)
                 for key in samples[0]}
        total = steps["load_and_merge"] + steps["summary"] + steps["page"]
        per_report_us[size] = total / size * 1e6
        rows.append({
            "name": f"merge {size:,} rank reports: load, group, summary, HTML page",
            "value": round(total * 1e3, 1), "unit": "ms", "baseline": None, "ratio": None,
            "note": f"{per_report_us[size]:.0f} µs per report (load and group "
                    f"{steps['load_and_merge'] / size * 1e6:.0f}, "
                    f"summary {steps['summary'] / size * 1e6:.1f}, page "
                    f"{steps['page'] / size * 1e6:.1f}); {PATCHES} patches per report, "
                    f"3 groups; page {steps['page_bytes'] / 1024:.0f} KiB",
            "raw": {"steps_s": steps, "samples": samples}})
    small, large = per_report_us[SIZES[0]], per_report_us[SIZES[1]]
    from benchmarks import harness
    rows.append({
        "name": f"merge cost per report at {SIZES[1]:,} vs at {SIZES[0]:,}",
        "value": round(large, 1), "baseline": round(small, 1), "ratio": round(large / small, 3),
        "unit": "µs/report", "budget": f"ratio ≤ {FLAT_BUDGET:g} (flat)",
        "verdict": harness.verdict(large / small <= FLAT_BUDGET),
        "note": "CPU time of the merging process; the page's size follows the groups"})
    small_peak, large_peak = peak_bytes[SIZES[0]], peak_bytes[SIZES[1]]
    per_report = (large_peak - small_peak) / (SIZES[1] - SIZES[0])
    document = document_bytes
    rows.append({
        "name": f"memory per report merged (peak, {SIZES[0]:,} to {SIZES[1]:,} reports) vs one "
                f"loaded report",
        "value": round(per_report), "baseline": round(document), "unit": "B",
        "ratio": round(per_report / document, 4), "budget": f"ratio ≤ {MEMORY_BUDGET:g}",
        "verdict": harness.verdict(per_report / document <= MEMORY_BUDGET),
        "note": f"tracemalloc peak {small_peak / 2**20:.1f} MiB at {SIZES[0]:,}, "
                f"{large_peak / 2**20:.1f} MiB at {SIZES[1]:,}: files are read one at a time, a "
                f"group keeps one whole document and of the other members their rank, pid and "
                f"path"})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="one repetition per size")
    arguments = parser.parse_args()
    for entry in run(arguments.quick):
        print(f"{entry['name']}: {entry['value']} {entry['unit']} "
              f"(ratio {entry.get('ratio')}) {entry['note']}")


if __name__ == "__main__":
    main()

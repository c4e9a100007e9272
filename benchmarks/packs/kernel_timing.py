"""Timing of a kernel against a plain formulation of the same arithmetic, shared by the
kernel benchmarks of benchmarks/packs/ (bev_pool, torchvision ops, deformable
aggregation, mmcv ops): both sides in alternation in per-thread CPU time, a row per
comparison, a script's rows read back from a fresh interpreter for ``run.py``."""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Tuple

# The repository (this file lies in benchmarks/packs/).
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

#: (op, size, ours ms, the baseline's name, baseline ms), and optionally LOWER_BOUND
#: when the baseline skips work no kernel can skip (reported without a verdict).
Row = Tuple[Any, ...]

#: A row's optional last element: its baseline is only a lower bound.
LOWER_BOUND = "lower bound"


def paired_ms(ours: Callable[[], object], theirs: Callable[[], object],
              repetitions: int) -> Tuple[float, float]:
    """Median per-thread CPU times in milliseconds of ``ours`` and ``theirs`` (one torch
    thread runs in the caller's thread), timed in alternation after one warm-up call
    each, so that the load of a shared machine weighs on both alike."""
    ours()
    theirs()
    times: Tuple[List[float], List[float]] = ([], [])
    for repetition in range(repetitions):
        pair = ((0, ours), (1, theirs)) if repetition % 2 == 0 else ((1, theirs), (0, ours))
        for side, function in pair:
            started = time.thread_time()
            function()
            times[side].append((time.thread_time() - started) * 1e3)
    return statistics.median(times[0]), statistics.median(times[1])


def compared(op: str, size: str, ours: Callable[[], object], theirs: Callable[[], object],
             reference: str, repetitions: int, lower_bound: bool = False) -> Row:
    """One table row: ``ours`` against ``theirs`` on the same inputs (``lower_bound``:
    ``theirs`` skips work, so the row has no verdict)."""
    mine, reference_ms = paired_ms(ours, theirs, repetitions)
    row: Row = (op, size, mine, reference, reference_ms)
    return row + (LOWER_BOUND,) if lower_bound else row


def rows_of_script(script: str, quick: bool) -> List[Dict[str, Any]]:
    """``run.py``'s rows from a kernel benchmark ``script`` (this one, or another that
    prints ``(op, size, ours, reference, theirs)`` rows with ``--json``), measured in a
    fresh interpreter: torch never loads into the runner. A reference that computes
    the same arithmetic gives the row the budget 1.0x; a LOWER_BOUND row is information."""
    measured, load = script_output(script, quick)
    rows = []
    for op, size, ours, reference, theirs, *kind in measured:
        row = {"name": f"{op} [{size}] vs {reference}", "value": ours, "unit": "ms",
               "baseline": theirs, "ratio": ours / theirs,
               "note": f"baseline: {reference}; {TIMING}; {load}"}
        if kind == [LOWER_BOUND]:
            row["note"] = f"baseline (a lower bound, not the same arithmetic): {reference}; " \
                          f"{TIMING}; {load}"
        else:
            row.update(budget="≤ 1.0× (the same arithmetic in plain PyTorch)",
                       verdict="met" if ours <= theirs else "missed")
        rows.append(row)
    return rows


#: How the rows are timed (said in each row's note).
TIMING = "per-thread CPU time, both sides interleaved, one torch thread"


def script_output(script: str, quick: bool) -> Tuple[List[Any], str]:
    """The rows a kernel benchmark ``script`` prints with ``--json``, run in a fresh
    interpreter, and the machine's load while it ran (for the rows' notes: the machine
    is shared, and CPU time only partly shields a measurement from the others' load)."""
    command = [sys.executable, os.path.abspath(script), "--json"] + (["--quick"] if quick else [])
    before = os.getloadavg()[0]
    output = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT).stdout
    after = os.getloadavg()[0]
    load = f"load average {before:.1f} before, {after:.1f} after, on {os.cpu_count()} CPUs"
    return json.loads(output.splitlines()[-1]), load


def command_line(bench: "Callable[..., List[Row]]", description: str,
                 sections: Tuple[str, ...] = ()) -> None:
    """A kernel benchmark's command line: one torch thread, ``bench(quick)``'s rows as
    one JSON line (``--json``, for ``rows_of_script``) or as a Markdown table; with
    ``sections``, ``--only`` picks some of them (``bench(quick, only)``)."""
    parser = argparse.ArgumentParser(description=description.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON line")
    if sections:
        parser.add_argument("--only", default="",
                            help=f"comma-separated sections to run: {', '.join(sections)}")
    arguments = parser.parse_args()
    import torch
    # One thread: on a shared 2-core machine a second thread only adds noise.
    torch.set_num_threads(1)
    rows = bench(arguments.quick, arguments.only) if sections else bench(arguments.quick)
    if arguments.json:
        print(json.dumps(rows))
        return
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}\n")
    print("| op | size | lazypatch (ms) | reference | reference (ms) | reference / lazypatch |")
    print("|---|---|---:|---|---:|---:|")
    for op, size, ours, reference, theirs, *_ in rows:
        ratio = "-" if math.isnan(theirs) else f"{theirs / ours:.2f}x"
        print(f"| {op} | {size} | {ours:.2f} | {reference} | {theirs:.2f} | {ratio} |")

"""Per-call overhead of the ``training.tracing`` pack against a PyProf-style wrapper.

Three situations, each as extra microseconds per call over the same call
with no tracing at all (measured in the same run, variants interleaved):

* a torch operator (``torch.add`` on small tensors) while no profiler
  records: lazypatch's pack formats nothing; PyProf walked the stack anyway;
* the same call while ``torch.profiler`` records (both emit their ranges);
* a module forward (``nn.Linear``) while no profiler records.

The PyProf-style baseline is ``benchmarks/baselines/pyprof_style.py``.

Run from the repository root::

    .venv/bin/python benchmarks/packs/training/bench_tracing.py [--quick]
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from typing import Callable, Dict, Iterator, List

# The repository (this file lies in benchmarks/packs/<pack>/).
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.insert(0, ROOT)
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import lazypatch.registry.training  # noqa: E402,F401  (declares training.tracing)
import torch  # noqa: E402

import lazypatch  # noqa: E402
from benchmarks import harness  # noqa: E402
from benchmarks.baselines import pyprof_style  # noqa: E402

TRACING = "training.tracing"


@contextlib.contextmanager
def lazypatch_tracing() -> Iterator[None]:
    lazypatch.enable(TRACING)          # torch is imported: applies at once
    try:
        yield
    finally:
        lazypatch.unpatch(TRACING)


@contextlib.contextmanager
def pyprof_tracing(owner: object, name: str) -> Iterator[None]:
    undo = pyprof_style.add_wrapper(owner, name)
    try:
        yield
    finally:
        undo()


@contextlib.contextmanager
def nothing() -> Iterator[None]:
    yield


@contextlib.contextmanager
def recording() -> Iterator[None]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        yield


def per_call_us(call: Callable[[], object], calls: int) -> float:
    start = time.thread_time()   # this thread's CPU time: a shared machine's waits are not costs
    for _ in range(calls):
        call()
    return (time.thread_time() - start) / calls * 1e6


def measure(call_for: Dict[str, Callable[[], Callable[[], object]]],
            setups: Dict[str, Callable[[], contextlib.AbstractContextManager]],
            calls: int, repeats: int, around: Callable[[], contextlib.AbstractContextManager]
            ) -> Dict[str, float]:
    """Median µs per call of each variant; variants interleaved in every repeat."""
    samples: Dict[str, List[float]] = {name: [] for name in setups}
    for _ in range(repeats):
        for name, setup in setups.items():
            with setup(), around():
                call = call_for[name]()
                per_call_us(call, calls // 10)        # warm up caches and the branch
                samples[name].append(per_call_us(call, calls))
    return {name: statistics.median(values) for name, values in samples.items()}


def row(name: str, ours: float, baseline: float, bare: float, note: str) -> Dict[str, object]:
    value, base = ours - bare, baseline - bare
    return {"name": name, "value": round(value, 3), "baseline": round(base, 3),
            "ratio": round(value / base, 4) if base > 0 else None, "unit": "us/call overhead",
            "note": f"{note}; bare call {bare:.2f} us"}


def run(quick: bool) -> List[Dict[str, object]]:
    """Rows for the benchmark runner: tracing overhead vs the PyProf-style baseline."""
    calls, repeats = (2000, 3) if quick else (20000, 7)
    left, right = torch.ones(4, 4), torch.ones(4, 4)
    operator_calls = {name: (lambda: (lambda: torch.add(left, right)))
                      for name in ("bare", "lazypatch", "pyprof")}
    operator_setups = {"bare": nothing, "lazypatch": lazypatch_tracing,
                       "pyprof": lambda: pyprof_tracing(torch, "add")}
    idle = measure(operator_calls, operator_setups, calls, repeats, nothing)
    # Recording writes events for every call: fewer calls keep the trace small.
    busy = measure(operator_calls, operator_setups, max(calls // 10, 200), repeats, recording)

    layer, sample = torch.nn.Linear(4, 4), torch.ones(2, 4)
    forward_calls = {name: (lambda: (lambda: layer(sample)))
                     for name in ("bare", "lazypatch", "pyprof")}
    forward_setups = {"bare": nothing, "lazypatch": lazypatch_tracing,
                      "pyprof": lambda: pyprof_tracing(torch.nn.Linear, "forward")}
    forward = measure(forward_calls, forward_setups, calls, repeats, nothing)
    return [
        row("tracing: torch op, no profiler", idle["lazypatch"], idle["pyprof"], idle["bare"],
            "lazypatch formats nothing unless a profiler records; PyProf walks the stack on "
            "every call"),
        row("tracing: torch op, profiler recording", busy["lazypatch"], busy["pyprof"],
            busy["bare"], "both emit ranges (record_function vs NVTX) with op name and shapes"),
        row("tracing: module forward, no profiler", forward["lazypatch"], forward["pyprof"],
            forward["bare"], "global module hooks keep the module path stack"),
    ]


if __name__ == "__main__":
    harness.rows_command_line(run, __doc__ or "", "lazypatch", "PyProf-style")

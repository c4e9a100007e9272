"""Overhead of the device pack on CUDA-written code running on the CPU.

Three versions of one small training loop run side by side, each in its own
interpreter, interleaved and repeated (median of the per-process medians):

* ``plain``: the loop written for the CPU, no lazypatch (the baseline);
* ``pack``: the loop written for CUDA (a side-stream copy with ``.cuda()`` and
  ``.to("cuda")``, ``wait_stream``, ``record_stream``,
  ``torch.zeros(..., device="cuda")``, ``torch.cuda.synchronize()``), run with
  ``LAZYPATCH_ENABLE=device`` (factories replaced by plain redirecting functions);
* ``mode``: the same CUDA loop with the pack's ``device.factories`` patch
  disabled and factories redirected by a global ``TorchFunctionMode``
  instead (the alternative the issue asks to measure).

Also per-call costs of a redirected factory call (pack vs mode vs a plain
CPU call) and of ``Tensor.to("cuda")`` against ``Tensor.to("cpu")``.
Figures are ratios against the baseline measured in the same run; the step
ratio is the median of per-round ratios of the stepping thread's CPU time
(each round runs the variants back to back, alternating their order; the
wall-clock ratio is given alongside), next to a deterministic count of the
Python calls a step makes, which machine load cannot blur.

Run from the repository root::

    .venv/bin/python benchmarks/packs/device/bench_device.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import textwrap
from typing import Dict, List

# The repository (this file lies in benchmarks/packs/<pack>/).
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
RESULTS = os.path.join(ROOT, "benchmarks", "results", "device.json")

SETUP = r'''
import sys, json, time
variant, steps, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if variant != "plain":
    import lazypatch.auto
import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

if variant == "mode":
    from lazypatch.registry.device.target import translate

    class RedirectFactories(TorchFunctionMode):
        """The alternative: every torch call passes here; translate device= when given."""
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            device = kwargs.get("device")
            if device is not None:
                kwargs["device"] = translate(device)
            return func(*args, **kwargs)
    RedirectFactories().__enter__()

torch.set_num_threads(1)
torch.manual_seed(0)
device = "cpu" if variant == "plain" else "cuda"
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                      nn.Linear(128, 10))
model = model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
inputs = torch.randn(32, 64)
labels = torch.randint(0, 10, (32,))

side_stream = torch.cuda.Stream() if device == "cuda" else None

def step():
    if device == "cuda":
        # The prefetcher idiom: copy on a side stream, wait, record_stream.
        with torch.cuda.stream(side_stream):
            x = inputs.cuda(non_blocking=True)
            y = labels.to(device, non_blocking=True)
        torch.cuda.current_stream().wait_stream(side_stream)
        x.record_stream(torch.cuda.current_stream())
    else:
        x = inputs.to(device)
        y = labels.to(device)
    mask = torch.ones(32, device=device)
    optimizer.zero_grad()
    loss = (nn.functional.cross_entropy(model(x), y, reduction="none") * mask).mean()
    loss.backward()
    optimizer.step()
    if device == "cuda":
        torch.cuda.synchronize()

'''

TIMED = r'''
def median_time(function, repeat, number, clock=time.perf_counter):
    times = []
    for _ in range(repeat):
        start = clock()
        for _ in range(number):
            function()
        times.append((clock() - start) / number)
    return statistics.median(times)

import statistics
for _ in range(20):
    step()
result = {"step_us": median_time(step, 7, steps) * 1e6}
# The CPU time of this thread (torch runs single-threaded here, autograd included):
# time the scheduler gives other processes on a shared machine is not counted.
result["step_cpu_us"] = median_time(step, 7, steps, time.thread_time) * 1e6

# Deterministic companion to the clock: how many Python-level and C-level
# calls one step makes (the pack's work is Python calls; load does not change
# the count).
counts = {"call": 0, "c_call": 0}
def count_calls(frame, event, arg):
    if event in counts:
        counts[event] += 1
counted_steps = 10
sys.setprofile(count_calls)
for _ in range(counted_steps):
    step()
sys.setprofile(None)
result["python_calls_per_step"] = counts["call"] / counted_steps
result["c_calls_per_step"] = counts["c_call"] / counted_steps
factory = lambda: torch.zeros(8, device=device)
result["factory_us"] = median_time(factory, 7, calls) * 1e6
small = torch.ones(8)
to_device = lambda: small.to(device)
result["to_us"] = median_time(to_device, 7, calls) * 1e6
add = lambda: torch.add(small, small)
result["add_us"] = median_time(add, 7, calls) * 1e6
print(json.dumps(result))
'''


CHILD = SETUP + TIMED

# Under callgrind: only the steps inside operator.call are counted
# (--toggle-collect on its C function, which neither torch nor the pack calls).
COUNTED = SETUP + r'''
import operator
for _ in range(20):
    step()

def counted_steps():
    for _ in range(steps):
        step()

operator.call(counted_steps)
'''


def valgrind_available() -> bool:
    return shutil.which("valgrind") is not None and sys.version_info >= (3, 11)


def step_instructions(variant: str, steps: int) -> float:
    """Instructions per training step of ``variant``, counted by callgrind (deterministic)."""
    environment = child_environment(variant)
    environment["PYTHONHASHSEED"] = "0"
    output = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                             "--collect-atstart=no", "--toggle-collect=_operator_call",
                             sys.executable, "-c", textwrap.dedent(COUNTED), variant,
                             str(steps), "0"], env=environment, cwd=ROOT,
                            capture_output=True, text=True, check=True)
    for line in output.stderr.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1]) / steps
    raise RuntimeError(f"callgrind printed no 'Collected' line:\n{output.stderr[-2000:]}")


def child_environment(variant: str) -> Dict[str, str]:
    """This environment without LAZYPATCH_* settings, plus what ``variant`` enables."""
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("LAZYPATCH")}
    environment.update({"OMP_NUM_THREADS": "1", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    if variant in ("pack", "mode"):
        environment["LAZYPATCH_ENABLE"] = "device"
    if variant == "mode":
        environment["LAZYPATCH_DISABLE"] = "device.factories"
    return environment


def run_child(variant: str, steps: int, calls: int) -> Dict[str, float]:
    """One interpreter running the loop in ``variant``; returns its medians (µs)."""
    environment = child_environment(variant)
    output = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), variant,
                             str(steps), str(calls)], env=environment, cwd=ROOT,
                            capture_output=True, text=True, check=True)
    return json.loads(output.stdout.strip().splitlines()[-1])


def row(name: str, value: float, baseline: float, unit: str, note: str) -> Dict[str, object]:
    return {"name": name, "value": round(value, 3), "baseline": round(baseline, 3),
            "ratio": round(value / baseline, 3) if baseline else None, "unit": unit,
            "note": note}


STEP_BUDGET = 1.05     # issue 20: the pack's step within 5% of the CPU-written loop


def paired_ratio(samples: Dict[str, List[Dict[str, float]]], variant: str,
                 key: str = "step_cpu_us") -> List[float]:
    """Per round, ``variant``'s step time over the baseline's from the same round:
    the processes of one round ran back to back, so slow drifts in machine load cancel."""
    return [mine[key] / plain[key]
            for mine, plain in zip(samples[variant], samples["plain"])]


def step_row(name: str, samples: Dict[str, List[Dict[str, float]]], variant: str,
             note: str, budget: bool) -> Dict[str, object]:
    """The step-time row (thread CPU time): medians, the median of paired per-round
    ratios and their range; the wall-clock ratio alongside, in the note."""
    ratios = paired_ratio(samples, variant)
    wall_ratios = paired_ratio(samples, variant, "step_us")
    ratio = statistics.median(ratios)
    result = row(name, statistics.median(sample["step_cpu_us"] for sample in samples[variant]),
                 statistics.median(sample["step_cpu_us"] for sample in samples["plain"]),
                 "µs CPU/step", f"{note}; wall clock: "
                 f"{statistics.median(wall_ratios):.3f}× (median of paired ratios)")
    result.update({"ratio": round(ratio, 3),
                   "spread": f"paired ratios {min(ratios):.3f}–{max(ratios):.3f}, "
                             f"n={len(ratios)}",
                   "raw": {"paired_ratios": ratios, "paired_wall_ratios": wall_ratios}})
    if budget:
        result.update({"budget": f"≤ {STEP_BUDGET}×",
                       "verdict": "met" if ratio <= STEP_BUDGET else "missed"})
    return result


def run(quick: bool) -> List[Dict[str, object]]:
    """Measure and return the table rows (also the runner's entry point)."""
    rounds, steps, calls = (4, 100, 2000) if quick else (8, 300, 20000)
    samples: Dict[str, List[Dict[str, float]]] = {"plain": [], "pack": [], "mode": []}
    variants = list(samples)
    for index in range(rounds):
        # A B C, C B A, ...: drift during the run hits every variant alike.
        for variant in (variants if index % 2 == 0 else variants[::-1]):
            samples[variant].append(run_child(variant, steps, calls))

    def median(variant: str, key: str) -> float:
        return statistics.median(sample[key] for sample in samples[variant])

    counted: List[Dict[str, object]] = []
    if not quick and valgrind_available():
        # About ten minutes (torch imports under callgrind): the full run only.
        plain, pack = step_instructions("plain", 50), step_instructions("pack", 50)
        counted.append(row("training step, CUDA code + device pack (instructions)", pack,
                           plain, "instructions/step", "callgrind, steps only (deterministic); "
                           "baseline: the same loop written for the CPU"))
        counted[-1].update({"budget": f"≤ {STEP_BUDGET}×",
                            "verdict": "met" if pack / plain <= STEP_BUDGET else "missed"})
    return counted + [
        step_row("training step, CUDA code + device pack (function replacement)", samples,
                 "pack", "baseline: the same loop written for the CPU, no lazypatch; "
                 "ratio: median of per-round paired ratios of thread CPU time", budget=True),
        row("Python calls per training step, CUDA code + device pack",
            median("pack", "python_calls_per_step"), median("plain", "python_calls_per_step"),
            "calls/step", "deterministic (sys.setprofile count); the pack's redirects are "
            "Python calls, the rest of the step is torch's own"),
        step_row("training step, CUDA code + TorchFunctionMode factories", samples, "mode",
                 "alternative: factories redirected by a global TorchFunctionMode",
                 budget=False),
        row("torch.zeros(8, device='cuda'), device pack", median("pack", "factory_us"),
            median("plain", "factory_us"), "µs/call", "baseline: torch.zeros(8, device='cpu')"),
        row("torch.zeros(8, device='cuda'), TorchFunctionMode", median("mode", "factory_us"),
            median("plain", "factory_us"), "µs/call", "baseline: torch.zeros(8, device='cpu')"),
        row("Tensor.to('cuda') -> cpu, device pack", median("pack", "to_us"),
            median("plain", "to_us"), "µs/call", "baseline: Tensor.to('cpu') unpatched"),
        row("torch.add (no device argument), device pack", median("pack", "add_us"),
            median("plain", "add_us"), "µs/call", "no device argument: not touched"),
        row("torch.add (no device argument), TorchFunctionMode", median("mode", "add_us"),
            median("plain", "add_us"), "µs/call", "every op pays for a global mode"),
    ]


def markdown(rows: List[Dict[str, object]]) -> str:
    lines = ["| measurement | value | baseline | ratio | unit | note |",
             "|---|---:|---:|---:|---|---|"]
    for item in rows:
        lines.append(f"| {item['name']} | {item['value']} | {item['baseline']} | "
                     f"{item['ratio']} | {item['unit']} | {item['note']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and steps")
    options = parser.parse_args()
    rows = run(options.quick)
    print(markdown(rows))
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as handle:
        json.dump({"benchmark": "device", "quick": options.quick, "rows": rows}, handle,
                  indent=2)


if __name__ == "__main__":
    main()

"""Measuring whole interpreter processes: interleaved repetitions, medians, callgrind.

Everything here is about *how* to measure; what to measure lives in the
``measure_*`` modules. Two kinds of figure come out:

* wall-clock samples of a process (or of a section a process times itself
  and prints), repeated and interleaved with the baseline (A B B A ...), so
  that a machine getting slower during the run hurts both sides alike;
* instruction counts from valgrind's callgrind, which are deterministic
  (with ``PYTHONHASHSEED`` fixed) and so can resolve the sub-microsecond
  differences that wall-clock noise on a shared machine drowns.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence

# COSTS.md's conversion on this class of machine, used only when a run has no
# same-run calibration: a bare start is ~38.7M instructions for ~19 ms.
INSTRUCTIONS_PER_MS_FALLBACK = 2.2e6
INSTRUCTIONS_PER_US_IMPORT_FALLBACK = 3000.0

MET, MISSED, INFO, SKIPPED, ERROR = "met", "missed", "info", "skipped", "error"


def process_environment(extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The environment benchmark processes run in: this one without any setting that
    would change what the interpreter imports (PYTHONPATH, LAZYPATCH_*, startup files)."""
    removed = ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONDONTWRITEBYTECODE", "PYTHONHOME",
               "PYTHONPROFILEIMPORTTIME", "PYTHONNOUSERSITE")
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("LAZYPATCH") and key not in removed}
    # torch autoloads device backends (torch_npu) at import: keep both sides equal.
    environment["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    # Fixed hashing makes dict/set layouts, hence instruction counts, repeatable.
    environment["PYTHONHASHSEED"] = "0"
    # Never import from the current directory: run from the repository root,
    # ``python -c "import lazypatch"`` would get the checkout, not the install.
    environment["PYTHONSAFEPATH"] = "1"
    if extra:
        environment.update(extra)
    return environment


def run_process(command: Sequence[str], *, env: Optional[Mapping[str, str]] = None,
                cwd: Optional[str] = None, timeout: float = 600) -> "subprocess.CompletedProcess[str]":
    """Run a command; raise RuntimeError with its output if it fails."""
    result = subprocess.run(list(command), env=dict(env or process_environment()),
                            cwd=cwd or tempfile.gettempdir(),
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"benchmark process failed (exit {result.returncode}): "
                           f"{' '.join(command)}\n--- stdout ---\n{result.stdout[-2000:]}"
                           f"\n--- stderr ---\n{result.stderr[-4000:]}")
    return result


def last_json_line(output: str) -> object:
    """The JSON document a benchmark script printed as its last non-empty line."""
    lines = [line for line in output.splitlines() if line.strip()]
    if not lines:
        raise RuntimeError("benchmark script printed nothing")
    return json.loads(lines[-1])


@dataclass
class Samples:
    """Repeated measurements of one variant (seconds, or whatever the caller measures)."""

    values: List[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        """25th percentile (the minimum with fewer than four samples)."""
        if len(self.values) < 4:
            return min(self.values)
        return statistics.quantiles(self.values, n=4)[0]

    @property
    def high(self) -> float:
        """75th percentile (the maximum with fewer than four samples)."""
        if len(self.values) < 4:
            return max(self.values)
        return statistics.quantiles(self.values, n=4)[2]

    def spread(self, scale: float = 1.0, digits: int = 2) -> str:
        """``"p25–p75"`` (or ``"min–max"`` under four samples), scaled for display."""
        kind = "IQR" if len(self.values) >= 4 else "range"
        return (f"{kind} {self.low * scale:.{digits}f}–{self.high * scale:.{digits}f}, "
                f"n={len(self.values)}")

    def as_dict(self) -> Dict[str, object]:
        return {"values": self.values, "median": self.median, "low": self.low,
                "high": self.high}


def interleave(variants: Mapping[str, Callable[[], float]], repetitions: int,
               warmup: int = 1) -> Dict[str, Samples]:
    """Run each variant ``repetitions`` times, interleaved in an A B, B A pattern.

    Each callable performs one measurement and returns one number. ``warmup``
    rounds run first and are discarded (they fill the page cache and write .pyc).
    """
    names = list(variants)
    for _ in range(warmup):
        for name in names:
            variants[name]()
    samples = {name: Samples() for name in names}
    for repetition in range(repetitions):
        order = names if repetition % 2 == 0 else list(reversed(names))
        for name in order:
            samples[name].values.append(variants[name]())
    return samples


def process_wall_time(command: Sequence[str], env: Optional[Mapping[str, str]] = None,
                      cwd: Optional[str] = None) -> Callable[[], float]:
    """A measurement: seconds from start to exit of a whole interpreter process."""
    def measure() -> float:
        started = time.perf_counter()
        run_process(command, env=env, cwd=cwd)
        return time.perf_counter() - started
    return measure


def reported_time(command: Sequence[str], key: str, env: Optional[Mapping[str, str]] = None,
                  cwd: Optional[str] = None) -> Callable[[], float]:
    """A measurement: the seconds a process timed itself and printed as JSON ``{key: s}``."""
    def measure() -> float:
        document = last_json_line(run_process(command, env=env, cwd=cwd).stdout)
        return float(document[key])  # type: ignore[index]
    return measure


def valgrind_available() -> bool:
    """Whether instruction counting with callgrind is possible on this machine."""
    return shutil.which("valgrind") is not None


def instructions(command: Sequence[str], env: Optional[Mapping[str, str]] = None,
                 cwd: Optional[str] = None, timeout: float = 600) -> int:
    """Instructions the process executes, counted by callgrind (``Collected : N``)."""
    result = run_process(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                          *command], env=env, cwd=cwd, timeout=timeout)
    for line in result.stderr.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1].strip())
    raise RuntimeError(f"callgrind printed no 'Collected' line:\n{result.stderr[-2000:]}")


def row(group: str, name: str, value: Optional[float], unit: str, *,
        baseline: Optional[float] = None, ratio: Optional[float] = None,
        difference: Optional[float] = None, difference_unit: str = "", budget: str = "",
        verdict: str = INFO,
        spread: str = "", note: str = "", raw: Optional[Mapping[str, object]] = None
        ) -> Dict[str, object]:
    """One table row. The keys ``name, value, baseline, ratio, unit, note`` are the
    contract every ``bench_*`` module follows; the rest are optional."""
    return {"group": group, "name": name, "value": value, "baseline": baseline,
            "ratio": ratio, "difference": difference,
            "difference_unit": difference_unit or unit, "unit": unit, "budget": budget,
            "verdict": verdict, "spread": spread, "note": note, "raw": dict(raw or {})}


def verdict(ok: bool) -> str:
    return MET if ok else MISSED


def rows_command_line(run: Callable[[bool], List[Dict[str, object]]], description: str,
                      value_column: str, baseline_column: str) -> None:
    """A benchmark script's command line: ``run(quick)``'s rows as JSON (``--json``) or
    as a Markdown table whose value and baseline columns have the given headings."""
    import argparse
    parser = argparse.ArgumentParser(description=description.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    arguments = parser.parse_args()
    rows = run(arguments.quick)
    if arguments.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"| benchmark | {value_column} | {baseline_column} | ratio | unit | note |")
    print("|---|---|---|---|---|---|")
    for entry in rows:
        print(f"| {entry['name']} | {entry['value']} | {entry['baseline']} | {entry['ratio']} "
              f"| {entry['unit']} | {entry['note']} |")

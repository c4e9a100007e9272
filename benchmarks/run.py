"""Run lazypatch's benchmarks and publish the table.

    python benchmarks/run.py [--quick] [--only activation,unwatched,...]
                             [--output benchmarks/RESULTS.md] [--no-instructions]

Prints the Markdown table, writes it to ``--output`` and the raw figures
(every sample) as JSON to ``benchmarks/results/<date>.json``. ``--quick``
uses few repetitions (what CI runs so that the benchmarks never rot); it
asserts nothing about time and exits 0 even when a budget is missed; it exits 1
only when a measurement itself crashed (an "error" row), so that CI notices rot.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

if __package__ in (None, ""):   # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness, packs, table  # noqa: E402
from benchmarks.activate import measure_activation, measure_lazy_eager  # noqa: E402
from benchmarks.apply import measure_calls, measure_wrap  # noqa: E402
from benchmarks.declare import measure_scale  # noqa: E402
from benchmarks.environment import BENCHMARKS, Environment, build_environment  # noqa: E402
from benchmarks.watch import measure_imports  # noqa: E402


@dataclass(frozen=True)
class Settings:
    """How hard to measure: repetitions, module counts, what runs under callgrind."""

    repetitions: int          # interleaved processes per variant, small measurements
    heavy_repetitions: int    # processes per variant that import torch or the whole stack
    modules: int              # tiny modules imported per timed process
    counted_modules: int      # tiny modules imported per callgrind process
    wrap_calls: int           # calls per timeit round in the wrapper benchmark
    count_torch: bool         # count `import torch` under callgrind (~1 min per process)
    torch_repetitions: int    # processes per side timing `import torch`
    count_heavy: bool = True  # callgrind for watched and scale (wrapt, 10,000 registrations)
    outside_places: int = 5   # directories measure_single_import counts its programs in


# --smoke: the smallest settings, for the test suite (every measurement runs; the
# figures are meaningless). --quick: what CI runs. Default: the published table.
SMOKE = Settings(repetitions=1, heavy_repetitions=1, modules=20, counted_modules=10,
                 wrap_calls=1_000, count_torch=False, torch_repetitions=1, count_heavy=False)
QUICK = Settings(repetitions=3, heavy_repetitions=1, modules=200, counted_modules=100,
                 wrap_calls=20_000, count_torch=False, torch_repetitions=3, outside_places=2)
FULL = Settings(repetitions=21, heavy_repetitions=7, modules=2_000, counted_modules=1_000,
                wrap_calls=200_000, count_torch=True, torch_repetitions=11)

Measurement = Callable[[Environment, Settings, bool], List[Dict[str, object]]]

# name -> what it measures; the order is the table's order.
MEASUREMENTS: Dict[str, Measurement] = {
    "activation": lambda env, s, count: measure_activation.measure(
        env, s.repetitions * 2, count),
    "unwatched": lambda env, s, count: measure_imports.unwatched(
        env, s.repetitions, s.modules, s.counted_modules if count else None),
    "torch": lambda env, s, count: measure_imports.torch_import(
        env, s.torch_repetitions, count and s.count_torch),
    "watched": lambda env, s, count: measure_imports.watched(
        env, s.repetitions, s.modules, s.counted_modules if count and s.count_heavy else None,
        s.outside_places),
    "lazy-eager": lambda env, s, count: measure_lazy_eager.measure(env, s.heavy_repetitions),
    "wrap": lambda env, s, count: measure_wrap.measure(env, s.repetitions, s.wrap_calls),
    "calls": lambda env, s, count: measure_calls.measure(env, s.repetitions, s.wrap_calls),
    "scale": lambda env, s, count: measure_scale.measure(
        env, s.repetitions, s.modules, s.counted_modules if count and s.count_heavy else None),
    "packs": lambda env, s, count: packs.measure(quick=s is not FULL),
    "tracker": lambda env, s, count: packs.measure(
        quick=s is not FULL, modules=("packs.training.bench_tracker",)),
    "report-merge": lambda env, s, count: packs.measure(
        quick=s is not FULL, modules=("reports.bench_report_merge",)),
    "bev-pool": lambda env, s, count: packs.measure(
        quick=s is not FULL, modules=("packs.cuda_extensions.bench_bev_pool",)),
    "sparse-conv": lambda env, s, count: packs.measure(
        quick=s is not FULL, modules=("packs.cuda_extensions.bench_sparse_conv",)),
    "deformable-aggregation": lambda env, s, count: packs.measure(
        quick=s is not FULL, modules=("packs.cuda_extensions.bench_deformable_aggregation",)),
    "torchvision-ops": lambda env, s, count: packs.measure(
        quick=s is not FULL, modules=("packs.cuda_extensions.bench_torchvision_ops",)),
}


def run(names: Sequence[str], settings: Settings, count_instructions: bool,
        workdir: Path) -> List[Dict[str, object]]:
    """Run the chosen measurements; a failing one becomes an "error" row, not a crash."""
    environment = build_environment(workdir, settings.modules)
    rows: List[Dict[str, object]] = []
    for name in names:
        started = time.perf_counter()
        try:
            rows += MEASUREMENTS[name](environment, settings, count_instructions)
        except Exception as error:
            rows.append(harness.row(name, f"{name}: measurement failed", None, "",
                                    verdict=harness.ERROR, note=f"{type(error).__name__}: "
                                    f"{str(error)[:500]}"))
        print(f"[{name}: {time.perf_counter() - started:.1f} s]", file=sys.stderr)
    return rows


def parse_arguments(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="few repetitions and small counts (CI); asserts nothing about time")
    parser.add_argument("--smoke", action="store_true",
                        help="smallest settings, for the test suite; the figures mean nothing")
    parser.add_argument("--only", default="",
                        help=f"comma-separated subset of: {', '.join(MEASUREMENTS)}")
    parser.add_argument("--output", type=Path, default=BENCHMARKS / "RESULTS.md",
                        help="where to write the Markdown table (default: %(default)s)")
    parser.add_argument("--json", type=Path, default=None,
                        help="raw JSON path (default: benchmarks/results/<date>.json)")
    parser.add_argument("--no-instructions", action="store_true",
                        help="skip callgrind instruction counts even if valgrind is installed")
    arguments = parser.parse_args(argv)
    names = [name.strip() for name in arguments.only.split(",") if name.strip()] \
        or list(MEASUREMENTS)
    unknown = [name for name in names if name not in MEASUREMENTS]
    if unknown:
        parser.error(f"unknown measurement(s) {', '.join(unknown)}; "
                     f"choose from {', '.join(MEASUREMENTS)}")
    arguments.names = names
    return arguments


def main(argv: Optional[Sequence[str]] = None) -> int:
    arguments = parse_arguments(argv)
    settings = SMOKE if arguments.smoke else QUICK if arguments.quick else FULL
    count_instructions = harness.valgrind_available() and not arguments.no_instructions
    when = datetime.datetime.now(datetime.timezone.utc)
    with tempfile.TemporaryDirectory(prefix="lazypatch-bench-") as workdir:
        rows = run(arguments.names, settings, count_instructions, Path(workdir) / "env")
    mode = ("smoke" if arguments.smoke else "quick" if arguments.quick else "full") + \
        ("" if count_instructions else ", no instruction counts")
    host = table.machine()
    markdown = table.render(rows, mode=mode, when=when, host=host)
    print(markdown)
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(markdown)
    raw_path = arguments.json or BENCHMARKS / "results" / f"{when:%Y%m%dT%H%M%S}.json"
    raw_path.parent.mkdir(parents=True, exist_ok=True)
    raw_path.write_text(json.dumps({"date": when.isoformat(), "mode": mode, "machine": host,
                                    "settings": settings.__dict__, "rows": rows},
                                   indent=1, default=str))
    print(f"wrote {arguments.output} and {raw_path}", file=sys.stderr)
    crashed = [row["name"] for row in rows if row.get("verdict") == harness.ERROR]
    if crashed:
        # A measurement that crashes has rotted; a missed budget is only reported.
        print(f"benchmark measurement(s) crashed: {', '.join(crashed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

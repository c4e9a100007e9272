"""Budget 7: rows from the packs' own benchmark modules, when they exist.

Each pack's benchmarks lie in ``benchmarks/packs/<pack>/bench_*.py`` (the engine's
report merge in ``benchmarks/reports/``); each exposes ``run(quick: bool) -> list[dict]``
with rows ``{"name", "value", "baseline", "ratio", "unit", "note"}``. A module
that is absent gives a "skipped" row, one that fails an "error" row: a pack's
benchmark never stops the others.
"""

from __future__ import annotations

import importlib
import traceback
from typing import Dict, List

from benchmarks import harness

GROUP = "7. Packs"
# Dotted under ``benchmarks``; a row is labelled with the module's own name (bench_device).
PACK_BENCHMARKS = ("packs.device.bench_device", "packs.shared.bench_mmcv_ops",
                   "packs.training.bench_tracing", "packs.export.bench_export")


def measure(quick: bool, modules: "tuple[str, ...]" = PACK_BENCHMARKS) -> List[Dict[str, object]]:
    """Rows of every pack benchmark module present, normalised to the table's keys."""
    rows: List[Dict[str, object]] = []
    for dotted in modules:
        module_name = dotted.rpartition(".")[2]
        try:
            module = importlib.import_module(f"benchmarks.{dotted}")
        except ModuleNotFoundError as error:
            if error.name != f"benchmarks.{dotted}":
                raise
            rows.append(harness.row(GROUP, f"{module_name}: not present", None, "",
                                    verdict=harness.SKIPPED,
                                    note=f"benchmarks/{dotted.replace('.', '/')}.py does not exist yet"))
            continue
        try:
            produced = module.run(quick)
        except Exception as error:
            rows.append(harness.row(GROUP, f"{module_name}: failed", None, "",
                                    verdict=harness.ERROR,
                                    note=f"{type(error).__name__}: {error}",
                                    raw={"traceback": traceback.format_exc()}))
            continue
        for produced_row in produced:
            rows.append(normalise(module_name, produced_row))
    return rows


def normalise(module_name: str, produced: Dict[str, object]) -> Dict[str, object]:
    """A pack's row with every key the table reads (missing ones get defaults)."""
    normalised = harness.row(GROUP, f"{module_name}: {produced.get('name', '?')}",
                             produced.get("value"), str(produced.get("unit", "")))  # type: ignore[arg-type]
    normalised.update({key: value for key, value in produced.items() if key != "name"})
    normalised["group"] = GROUP
    return normalised

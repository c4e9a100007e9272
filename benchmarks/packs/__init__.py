"""Budget 7: rows from the packs' own benchmark modules, when they exist.

``benchmarks/bench_device.py``, ``bench_mmcv_ops.py`` and ``bench_tracing.py``
belong to the pack engineers; each exposes ``run(quick: bool) -> list[dict]``
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
PACK_BENCHMARKS = ("bench_device", "bench_mmcv_ops", "bench_tracing", "bench_export")


def measure(quick: bool, modules: "tuple[str, ...]" = PACK_BENCHMARKS) -> List[Dict[str, object]]:
    """Rows of every pack benchmark module present, normalised to the table's keys."""
    rows: List[Dict[str, object]] = []
    for module_name in modules:
        try:
            module = importlib.import_module(f"benchmarks.{module_name}")
        except ModuleNotFoundError as error:
            if error.name != f"benchmarks.{module_name}":
                raise
            rows.append(harness.row(GROUP, f"{module_name}: not present", None, "",
                                    verdict=harness.SKIPPED,
                                    note=f"benchmarks/{module_name}.py does not exist yet"))
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

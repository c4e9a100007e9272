"""The Markdown table (and the JSON record) of one benchmark run."""

from __future__ import annotations

import datetime
import os
import platform
import sys
from typing import Dict, List, Mapping, Optional

from benchmarks import harness

COLUMNS = ("figure", "value", "baseline", "ratio", "difference", "budget", "verdict", "spread",
           "note")


def machine() -> Dict[str, object]:
    """What the figures were measured on."""
    return {"platform": platform.platform(), "processor": platform.processor() or
            platform.machine(), "cpu_count": os.cpu_count(),
            "python": sys.version.split()[0], "implementation": platform.python_implementation(),
            "valgrind": harness.valgrind_available()}


def number(value: object, unit: str = "") -> str:
    """A figure with a sensible number of digits, or an em dash when there is none."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    magnitude = abs(value)
    if magnitude >= 1000:
        text = f"{value:,.0f}"
    elif magnitude >= 100:
        text = f"{value:.1f}"
    elif magnitude >= 1:
        text = f"{value:.2f}"
    else:
        text = f"{value:.3f}"
    return f"{text} {unit}".strip()


def cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(rows: List[Mapping[str, object]], *, mode: str, when: datetime.datetime,
           host: Optional[Mapping[str, object]] = None) -> str:
    """The whole RESULTS.md: header with machine and date, one table per group, misses."""
    host = host or machine()
    lines = [
        "# lazypatch benchmark results",
        "",
        f"Measured {when:%Y-%m-%d %H:%M} UTC on `{host['platform']}` ({host['processor']}, "
        f"{host['cpu_count']} CPUs), Python {host['python']}, mode: {mode}. "
        f"Instruction counts: {'valgrind callgrind' if host['valgrind'] else 'unavailable'}.",
        "",
        "Produced by `python benchmarks/run.py` (see `benchmarks/run.py --help`). Every figure "
        "has its baseline measured in the same run; wall-clock figures are medians over "
        "interleaved whole-interpreter processes (spread: IQR, or range under 4 samples); "
        "instruction counts (deterministic) decide the verdict where both exist, converted "
        "with COSTS.md's 2.2M instructions per ms and 3,000 per µs of import time.",
        "",
    ]
    groups: Dict[str, List[Mapping[str, object]]] = {}
    for row in rows:
        groups.setdefault(str(row.get("group", "other")), []).append(row)
    for group in sorted(groups):
        lines += [f"## {group}", "",
                  "| " + " | ".join(COLUMNS) + " |",
                  "|" + "---|" * len(COLUMNS)]
        for row in groups[group]:
            unit = str(row.get("unit", ""))
            ratio = row.get("ratio")
            verdict = str(row.get("verdict", harness.INFO))
            values = (row.get("name"), number(row.get("value"), unit),
                      number(row.get("baseline"), unit),
                      f"{ratio:.3f}×" if isinstance(ratio, (int, float)) else "—",
                      signed(row.get("difference"), str(row.get("difference_unit") or unit)),
                      row.get("budget") or "—",
                      f"**{verdict}**" if verdict == harness.MISSED else verdict,
                      row.get("spread") or "", row.get("note") or "")
            lines.append("| " + " | ".join(cell(value) for value in values) + " |")
        lines.append("")
    missed = [row for row in rows if row.get("verdict") == harness.MISSED]
    lines += ["## Budgets missed", ""]
    lines += [f"- {row['group']}: {row['name']} ({row.get('budget')})" for row in missed] \
        or ["- none"]
    lines.append("")
    return "\n".join(lines)


def signed(value: object, unit: str = "") -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "—"
    return ("+" if value >= 0 else "") + number(value, unit)

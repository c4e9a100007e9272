"""Rendering and writing patch reports: a readable table and JSON.

Imported only when a report is rendered or written (``json`` alone costs
about 14 ms to import).
"""

from __future__ import annotations

import json
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Sequence

FORMATS = ("table", "json")


def render(records: "Sequence[Dict[str, Any]]", format: str = "table") -> str:
    """Records as a JSON document or an aligned text table."""
    if format == "json":
        return json.dumps(list(records), indent=2, default=str)
    if format != "table":
        raise ValueError(f"unknown report format {format!r}; use one of {', '.join(FORMATS)}")
    return render_table(records)


def render_table(records: "Sequence[Dict[str, Any]]") -> str:
    """One line per patch: status, name, target, changes, time, reason."""
    header = ("STATUS", "PATCH", "TARGET", "CHANGES", "MS", "DETAIL")
    rows = [header]
    for record in records:
        detail = record.get("reason") or ""
        if record.get("conflicts"):
            detail = (detail + "; " if detail else "") + "conflict: " + "; ".join(record["conflicts"])
        if record.get("notes"):
            detail = (detail + "; " if detail else "") + "; ".join(record["notes"])
        if record.get("untracked_changes"):
            detail = (detail + "; " if detail else "") + "not undoable: " + \
                ", ".join(record["untracked_changes"])
        rows.append((record.get("status", ""), record.get("name", ""), record.get("target", ""),
                     str(len(record.get("changes") or ())),
                     f"{record.get('duration_ms', 0):.2f}", detail))
    widths = [max(len(row[column]) for row in rows) for column in range(len(header) - 1)]
    lines = []
    for row in rows:
        cells = [row[column].ljust(widths[column]) for column in range(len(widths))]
        lines.append("  ".join(cells + [row[-1]]).rstrip())
    counts: "Dict[str, int]" = {}
    for record in records:
        counts[record.get("status", "")] = counts.get(record.get("status", ""), 0) + 1
    lines.append(", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
                 or "no patches registered")
    return "\n".join(lines)


def expand_path(template: str) -> str:
    """Fill ``{rank}`` and ``{pid}`` in a report path."""
    from .log import current_rank
    return template.replace("{rank}", str(current_rank())).replace("{pid}", str(os.getpid()))


def write_report(path: str) -> str:
    """Write the current report as JSON to ``path`` (placeholders filled); return the path."""
    import lazypatch
    from .log import current_rank
    import sys
    target = expand_path(path)
    directory = os.path.dirname(target)
    if directory:
        os.makedirs(directory, exist_ok=True)
    document = {"pid": os.getpid(), "rank": current_rank(), "argv": list(sys.argv),
                "python": sys.executable, "patches": lazypatch.report()}
    temporary = f"{target}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=2, default=str)
    os.replace(temporary, target)
    return target


def write_report_at_exit(path: str) -> None:
    """Register an exit handler that writes the report to ``path``."""
    import atexit

    def write() -> None:
        try:
            write_report(path)
        except OSError as error:
            from _warnings import warn
            from .errors import ConfigurationWarning
            warn(f"lazypatch: cannot write LAZYPATCH_REPORT={path!r}: {error}",
                 ConfigurationWarning)
    atexit.register(write)

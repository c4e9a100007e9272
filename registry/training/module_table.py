"""Time per module, forward and backward, from a profiled run with the tracing marks.

The tracing pack names a module's forward range "Net.encoder (Sequential)"
and each autograd node's backward range "Net.encoder.0 (backward):
AddmmBackward0". A module's forward time is its forward ranges' total (they
contain their submodules'); its backward time is the total of the backward
ranges of nodes made by it or by its submodules. An outermost module's range
may end with its call site ("Net (Net) @ train.py:42",
LAZYPATCH_TRACE_CALL_SITES=1): the table lists them after the times.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterable, List, Tuple

FORWARD = re.compile(r"^(?P<path>[^\s:()]+) \((?P<kind>[^()]+)\)(?: @ (?P<site>.+))?$")
BACKWARD = re.compile(r"^(?P<path>[^\s:()]+) \(backward\): (?P<node>.+)$")
TABLE_ROWS = 30


class ModuleTimes:
    """Forward and backward totals (microseconds) and call counts of one module path."""

    __slots__ = ("kind", "calls", "forward_us", "backward_us", "call_sites")

    def __init__(self) -> None:
        self.kind = ""
        self.calls = 0
        self.forward_us = 0.0
        self.backward_us = 0.0
        self.call_sites: "List[str]" = []   # distinct, in the order the profile lists them


def module_times(events: "Iterable[Tuple[str, int, float]]") -> "Dict[str, ModuleTimes]":
    """Per module path, from (range name, count, total microseconds) of the profile."""
    times: "Dict[str, ModuleTimes]" = {}
    backward: "List[Tuple[str, float]]" = []
    for name, count, total_us in events:
        matched = BACKWARD.match(name)
        if matched:
            backward.append((matched["path"], total_us))
            continue
        matched = FORWARD.match(name)
        if matched and matched["kind"] != "backward":
            entry = times.setdefault(matched["path"], ModuleTimes())
            entry.kind, entry.calls = matched["kind"], entry.calls + count
            entry.forward_us += total_us
            site = matched["site"]
            if site and site not in entry.call_sites:
                entry.call_sites.append(site)
    for path, total_us in backward:
        # charged to the module that made the node and to each enclosing module
        parts = path.split(".")
        for depth in range(1, len(parts) + 1):
            times.setdefault(".".join(parts[:depth]), ModuleTimes()).backward_us += total_us
    return times


def profile_events(profiler: "Any") -> "List[Tuple[str, int, float]]":
    """(name, count, CPU total µs) of each distinct range of a finished profiler cycle."""
    return [(event.key, event.count, event.cpu_time_total) for event in profiler.key_averages()]


def render(times: "Dict[str, ModuleTimes]", rows: int = TABLE_ROWS) -> str:
    """A text table: one line per module (indented by depth), in model order, then totals."""
    if not times:
        return ""
    sites = any(entry.call_sites for entry in times.values())
    lines = [f"{'module':<48} {'type':<18} {'calls':>5} {'forward ms':>11} {'backward ms':>12}"
             + ("  called from" if sites else "")]
    for path in sorted(times, key=lambda name: [_sort_key(part) for part in name.split(".")])[:rows]:
        entry = times[path]
        depth = path.count(".")
        label = "  " * depth + path.rsplit(".", 1)[-1] if depth else path
        line = (f"{label[:48]:<48} {entry.kind[:18]:<18} {entry.calls:>5} "
                f"{entry.forward_us / 1000:>11.3f} {entry.backward_us / 1000:>12.3f}")
        if entry.call_sites:
            line += "  " + ", ".join(entry.call_sites)
        lines.append(line)
    if len(times) > rows:
        lines.append(f"... {len(times) - rows} more modules")
    return "\n".join(lines)


def _sort_key(part: str) -> "Tuple[int, Any]":
    return (0, int(part)) if part.isdigit() else (1, part)


def module_table(profiler: "Any") -> str:
    """The per-module table of a finished cycle, "" when the trace has no module ranges."""
    return render(module_times(profile_events(profiler)))

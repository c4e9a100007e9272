"""Merging the report files of many processes into one view: identical processes grouped.

A job of 1,024 ranks writes 1,024 report files, and nearly all of them say
the same thing. Processes whose patches all have the same status (and the
same target package version) form one group ("ranks 0-1023: identical"); the
view is a patch-by-group matrix restricted to the patches whose status is
not the same in every group, with each group's reasons below. Merging is
one pass over the records (linear in the number of reports).

Loaded only by ``lazypatch report`` and the HTML page (``report_page``),
never at activation.
"""

from __future__ import annotations

import glob
import os
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from .reporting import (
    ReportFileError,
    calls_text,
    cannot_apply_here,
    detail_of,
    format_table,
    hidden_summary,
    load_report,
    one_time_imports_line,
    plural,
    render_table,
    severity,
    usage_lines,
    usage_of,
)

ABSENT = "absent"              # the patch is not registered in that process
MATRIX_COLUMNS = 8             # more groups than this: listed per patch, not as columns
REASONS_SHOWN = 3              # distinct reasons listed per group and patch


def report_paths(arguments: Sequence[str]) -> List[str]:
    """Report files named by files, glob patterns and directories (every ``*.json``
    inside), each once, in the order given; raises ReportFileError for a pattern
    or directory that names no file."""
    paths: List[str] = []
    seen = set()
    for argument in arguments:
        if os.path.isdir(argument):
            found = sorted(glob.glob(os.path.join(argument, "*.json")))
            where = f"directory {argument}"
        elif glob.has_magic(argument) and not os.path.exists(argument):
            found = sorted(glob.glob(argument))
            where = f"pattern {argument}"
        elif not os.path.exists(argument) and _written_per_process(argument):
            # `lazypatch run --report r.json` writes r-<pid>.json, one per process (and
            # says so): asked for r.json, the user means those.
            found = _written_per_process(argument)
            where = f"pattern {argument}"
        else:
            found, where = [argument], ""
        if not found:
            raise ReportFileError(f"{where}: no report file (*.json) found; write them with "
                                  f"LAZYPATCH_REPORT='out/report-{{rank}}.json'")
        for path in found:
            if path not in seen:
                seen.add(path)
                paths.append(path)
    return paths


def _written_per_process(path: str) -> List[str]:
    """The files ``lazypatch run --report path`` wrote when ``path`` names no process."""
    stem, extension = os.path.splitext(path)
    return sorted(found for found in glob.glob(glob.escape(stem) + "-*" + glob.escape(extension))
                  if found[len(stem) + 1:len(found) - len(extension)].isdigit())


def load_reports(arguments: Sequence[str]) -> Iterator[Dict[str, Any]]:
    """Every report file the arguments name (see ``report_paths``), loaded and checked
    one at a time as ``merge`` asks for it: ten thousand reports are never all in memory.
    A pattern naming nothing raises ReportFileError at once, a bad file when reached."""
    paths = report_paths(arguments)
    return (load_report(path) for path in paths)


# What a group keeps of each member after the first (the first keeps its whole document):
# what group labels, report lists and sorting read.
MEMBER_FACTS = ("rank", "rank_variable", "pid", "role", "path", "host", "local_rank", "worker")


def ranked(document: Dict[str, Any]) -> bool:
    """Whether a report comes from a rank of a launched job. A process no launcher
    gave a rank variable (the driver of a Ray job, a plain `python train.py`, a
    `lazypatch run` wrapper) reports rank 0 too, but it is not rank 0: its report
    says which variable its rank came from (None). Older reports lack the field."""
    return isinstance(document.get("rank"), int) and (
        "rank_variable" not in document or document.get("rank_variable") is not None)


def _sort_key(document: Dict[str, Any]) -> Tuple[int, int, str]:
    if ranked(document):
        return (0, document["rank"], str(document.get("pid", "")))
    return (1, 0, str(document.get("pid", "")))


def compressed_ranges(numbers: Iterable[int]) -> str:
    """``0-5, 7, 9-1023`` for the sorted distinct numbers given."""
    runs: List[List[int]] = []
    for number in sorted(set(numbers)):
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ", ".join(str(first) if first == last else f"{first}-{last}" for first, last in runs)


def group_label(members: Sequence[Dict[str, Any]]) -> str:
    """``rank 3``, ``ranks 0-5, 7-1023``, ``ranks 0-1 (4 processes)``, ``agent pid 17``,
    ``process pid 4242 (no rank)``."""
    ranks = [member["rank"] for member in members if ranked(member)]
    # A launcher's own process (torchrun's agent) has no rank; it is named as an agent.
    agents = [member for member in members if member.get("role") == "agent"]
    unranked = [member for member in members
                if not ranked(member) and member.get("role") != "agent"]
    parts = []
    if ranks:
        distinct = len(set(ranks))
        parts.append(("rank " if distinct == 1 else "ranks ") + compressed_ranges(ranks))
        if distinct != len(ranks):      # DataLoader workers, agents: several per rank
            parts[-1] += f" ({len(ranks)} processes)"
    if len(agents) == 1:
        parts.append(f"agent pid {agents[0].get('pid', '?')}")
    elif agents:
        parts.append(f"{len(agents)} launcher agents")
    if len(unranked) == 1:
        parts.append(f"process pid {unranked[0].get('pid', '?')} (no rank)")
    elif unranked:
        parts.append(f"{len(unranked)} processes without a rank")
    return "; ".join(parts)


def _status_key(record: Optional[Dict[str, Any]]) -> Tuple[str, str]:
    if record is None:
        return (ABSENT, "")
    return (str(record.get("status", "")), str(record.get("version") or ""))


class _Group:
    """One group of identical processes while merging: its members' facts, the whole
    document of the member that sorts first, and per patch the distinct details of
    its members, each with the first member (in sort order) that had it."""

    __slots__ = ("members", "first", "first_key", "first_records", "details")

    def __init__(self) -> None:
        self.members: List[Tuple[Tuple[int, int, str], Dict[str, Any]]] = []
        self.first: Dict[str, Any] = {}
        self.first_key: Optional[Tuple[int, int, str]] = None
        self.first_records: Dict[str, Dict[str, Any]] = {}   # the first's, by patch name
        self.details: Dict[str, Dict[str, Tuple[int, int, str]]] = {}

    def add(self, key: Tuple[int, int, str], document: Dict[str, Any],
            records: Dict[str, Dict[str, Any]]) -> None:
        if self.first_key is None or key < self.first_key:
            self.first, self.first_key, self.first_records = document, key, records
        self.members.append((key, {fact: document[fact] for fact in MEMBER_FACTS
                                   if fact in document}))
        for name, record in records.items():
            # Call counts differ from process to process: summed once per patch instead.
            detail = detail_of(record, calls=False)
            if not detail:
                continue
            seen = self.details.setdefault(name, {})
            if detail not in seen or key < seen[detail]:
                seen[detail] = key

    def reasons(self, name: str, everyone: bool) -> List[str]:
        """The first ``REASONS_SHOWN + 1`` distinct details of ``name`` in member order
        (one more than shown, so that a reader learns there are more); only the first
        member's unless ``everyone``."""
        record = self.first_records.get(name)
        if record is None:
            return ["not registered"]
        if not everyone:
            detail = detail_of(record, calls=False)
            return [detail] if detail else []
        seen = self.details.get(name, {})
        return sorted(seen, key=seen.__getitem__)[:REASONS_SHOWN + 1]


def merge(documents: Iterable[Dict[str, Any]]) -> Dict[str, Any]:
    """Group identical processes and line up every patch across the groups, the
    patches that differ between groups first.

    Returns ``{"processes": N, "groups": [...], "patches": [...]}``: each group
    has a ``label`` and its ``members`` (by rank: the first a whole document, the
    others their facts, ``MEMBER_FACTS``); each patch has ``name``, ``target``,
    ``differs`` and ``cells``, one per group, each a record of that group's first
    member (or an ``absent`` stand-in) plus ``reasons``, the distinct details within
    the group. One pass over ``documents`` (an iterator is read once), in memory
    that grows with the distinct groups and details, not with the documents: each is
    dropped once merged unless it sorts first in its group.
    """
    # name -> (sort key of the first document naming it, position there, target)
    names: Dict[str, Tuple[Tuple[int, int, str], int, str]] = {}
    by_signature: Dict[Tuple[Any, ...], _Group] = {}
    # name -> [calls summed over the processes that counted them, how many did,
    #          (sort key, first call site) of the first that counted some]
    calls: Dict[str, List[Any]] = {}
    # (what, where, patch) -> the "what ran where" row summed over the processes, and
    # the sort key of the process whose first call site it shows
    usage: Dict[Tuple[str, str, str], Tuple[Dict[str, Any], Tuple[int, int, str]]] = {}
    processes = 0
    for document in documents:
        processes += 1
        key = _sort_key(document)
        records = {}
        for position, record in enumerate(document["patches"]):
            name = str(record.get("name", ""))
            records[name] = record
            _note_record(names, calls, usage, key, position, record)
        signature = tuple(sorted((name, _status_key(record)) for name, record in records.items()))
        group = by_signature.get(signature)
        if group is None:
            group = by_signature[signature] = _Group()
        group.add(key, document, records)
    merged_groups = sorted(by_signature.values(), key=lambda group: group.first_key or (2, 0, ""))
    patches = [_merged_patch(name, target, merged_groups, calls.get(name))
               for name, (_, _, target) in sorted(names.items(), key=lambda item: item[1][:2])]
    patches.sort(key=_report_order)
    return {"processes": processes, "groups": _labelled_groups(merged_groups), "patches": patches,
            "usage": usage_of([{"usage": [row for row, _ in usage.values()]}])}


def _note_record(names: Dict[str, Tuple[Tuple[int, int, str], int, str]],
                 calls: Dict[str, List[Any]],
                 usage: Dict[Tuple[str, str, str], Tuple[Dict[str, Any], Tuple[int, int, str]]],
                 key: Tuple[int, int, str], position: int, record: Dict[str, Any]) -> None:
    """Add one process's record of a patch to ``merge``'s tallies: where the patch is
    first named, its calls summed, its "what ran where" rows summed."""
    name = str(record.get("name", ""))
    known = names.get(name)
    if known is None or key < known[0]:
        names[name] = (key, position, str(record.get("target", "")))
    count = record.get("calls")
    if isinstance(count, int):
        total = calls.setdefault(name, [0, 0, None])
        total[0] += count
        total[1] += 1
        if count and (total[2] is None or key < total[2][0]):
            total[2] = (key, record.get("first_call_site") or "")
    for row in record.get("usage") or ():
        _add_usage(usage, row, key)


def _labelled_groups(merged_groups: List["_Group"]) -> List[Dict[str, Any]]:
    """Each group's label and members by rank, its first member's whole document first."""
    groups: List[Dict[str, Any]] = []
    for group in merged_groups:
        group.members.sort(key=lambda member: member[0])
        members = [member for _, member in group.members]
        members[0] = group.first       # the whole document speaks for the group
        groups.append({"label": group_label(members), "members": members})
    return groups


def _merged_patch(name: str, target: str, merged_groups: List["_Group"],
                  counted: Optional[List[Any]]) -> Dict[str, Any]:
    """One patch across the groups: a cell per group, whether they differ, its calls."""
    firsts = [group.first_records.get(name) for group in merged_groups]
    differs = len({_status_key(first) for first in firsts}) > 1
    cells = []
    for group, first in zip(merged_groups, firsts):
        cell: Dict[str, Any] = dict(first) if first is not None else {
            "name": name, "target": target,
            "status": ABSENT, "reason": "not registered"}
        # Every member's reason only where the patch differs (what a reader
        # studies); elsewhere the first member speaks for its group.
        cell["reasons"] = group.reasons(name, everyone=differs)
        cells.append(cell)
    return {"name": name, "target": target, "differs": differs, "cells": cells,
            "calls": None if counted is None else
            [counted[0], counted[1], counted[2][1] if counted[2] else ""]}


def _report_order(patch: Dict[str, Any]) -> Tuple[bool, bool, int]:
    """What went wrong first (a failure in any process, then conflicts), then what
    differs between processes, then the rest by status: what a reader of a thousand
    ranks came for is at the top (the sort is stable: first-seen order within)."""
    worst = min(severity(cell) for cell in patch["cells"])
    return (worst > 1, not patch["differs"], worst)


def _add_usage(usage: Dict[Tuple[str, str, str], Tuple[Dict[str, Any], Tuple[int, int, str]]],
               row: Dict[str, Any], key: Tuple[int, int, str]) -> None:
    """Add one process's "what ran where" row: calls summed, the first call site of the
    process that sorts first among those that made a call."""
    identity = (str(row.get("what", "")), str(row.get("where", "")), str(row.get("patch", "")))
    calls = row.get("calls") if isinstance(row.get("calls"), int) else None
    known = usage.get(identity)
    if known is None:
        usage[identity] = (dict(row, calls=calls, processes=1), key)
        return
    total, first_key = known
    total["processes"] += 1
    if calls is not None:
        total["calls"] = (total.get("calls") or 0) + calls
    if calls and row.get("first_call_site") and (
            not total.get("first_call_site") or key < first_key):
        total["first_call_site"] = row["first_call_site"]
        usage[identity] = (total, key)


def failures(merged: Dict[str, Any]) -> List[Tuple[Dict[str, Any], Dict[str, Any], Dict[str, Any]]]:
    """``(patch, group, cell)`` for every group in which a patch failed."""
    return [(patch, group, cell) for patch in merged["patches"]
            for group, cell in zip(merged["groups"], patch["cells"])
            if cell.get("status") == "failed"]


def short_label(label: str, width: int = 36) -> str:
    """A group's label cut to ``width`` for a column header (the full one is listed above)."""
    return label if len(label) <= width else label[:width - 3].rsplit(",", 1)[0] + ", ..."


def _same_everywhere(patch: Dict[str, Any]) -> bool:
    """A patch that cannot apply anywhere (off by default, requirement unmet) is noise."""
    return not patch["differs"] and all(cannot_apply_here(cell) for cell in patch["cells"]
                                        if cell["status"] != ABSENT)


CELL_REASON_WIDTH = 48    # a failure's reason in a matrix cell, cut to this


def _cell_text(cell: Dict[str, Any], reason: bool = True) -> str:
    """A matrix cell: status (and version); a failure's reason too, unless ``reason``
    is False (where the reasons are listed beside it)."""
    version = cell.get("version")
    text = f"{cell['status']} ({version})" if version else str(cell["status"])
    if reason and cell.get("status") == "failed" and cell.get("reasons"):
        first = str(cell["reasons"][0])
        text += ": " + (first if len(first) <= CELL_REASON_WIDTH
                        else first[:CELL_REASON_WIDTH - 3] + "...")
    return text


def failure_lines(merged: Dict[str, Any]) -> List[str]:
    """The report's first lines when a patch failed anywhere: which, where, why."""
    found = failures(merged)
    if not found:
        return []
    names = {patch["name"] for patch, _, _ in found}
    processes = sum(len(group["members"]) for _, group, _ in found)
    lines = [f"FAILED: {plural(len(names), 'patch', 'patches')} failed in "
             f"{plural(processes, 'process', 'processes')} of {merged['processes']}:"]
    for patch, group, cell in found:
        reasons = "; ".join(cell.get("reasons") or ()) or "no reason recorded"
        lines.append(f"  {patch['name']} ({patch['target']}) in {group['label']}: {reasons}")
    return lines + [""]


def render_merged(merged: Dict[str, Any], all: bool = False) -> str:
    """The merged view as text: the groups, then a patch-by-group matrix of the
    patches that differ between groups (of every patch that can apply, when all
    processes agree; of every patch with ``all``), then each differing patch's
    status and reasons per group. One report renders as its own table."""
    groups, patches = merged["groups"], merged["patches"]
    if merged["processes"] == 1:
        return _render_one(groups[0]["members"][0], all)
    lines = failure_lines(merged)
    lines.append(f"{plural(merged['processes'], 'report')}, {plural(len(groups), 'group')} "
                 f"of identical processes:")
    for index, group in enumerate(groups):
        lines.append(f"  {group_name(index)}: {group['label']}: identical")
    differing = [patch for patch in patches if patch["differs"]]
    noise = [] if all else [patch for patch in patches if _same_everywhere(patch)]
    if all:
        shown = patches
    elif len(groups) == 1:
        # Every process says the same: the one column is the useful table.
        shown = [patch for patch in patches if not _same_everywhere(patch)]
    else:
        shown = differing
    lines.append("")
    if len(groups) <= MATRIX_COLUMNS and shown:
        lines.append(_matrix(groups, shown))
    agreeing = len(patches) - len(differing) - len(noise) - \
        sum(1 for patch in shown if not patch["differs"])
    if agreeing:
        lines.append(f"{plural(agreeing, 'patch', 'patches')} with the same status in every "
                     f"process not shown (`--all` shows them)")
    if noise:
        lines.append(f"{len(noise)} not shown, the same in every process (`--all` shows them):")
        lines += ["  " + line for line in hidden_summary([patch["cells"][0] for patch in noise])]
    lines += _calls_summary(patches, merged["processes"])
    lines += usage_lines(merged.get("usage") or (), merged["processes"])
    if not differing:
        lines.append("every patch has the same status in every process")
        return "\n".join(lines)
    return "\n".join(lines + [""] + _differences(groups, differing))


def _render_one(document: Dict[str, Any], all: bool) -> str:
    """One report: its path and label, then its own table."""
    label = group_label([document])
    if "pid" not in label:
        label += f", pid {document.get('pid', '?')}"
    once = one_time_imports_line(document.get("one_time_imports") or {})
    return (f"{document.get('path', '')}: {label}\n" + render_table(document["patches"], all=all)
            + (f"\n{once}" if once else ""))


def _matrix(groups: Sequence[Dict[str, Any]], shown: Sequence[Dict[str, Any]]) -> str:
    """The patch-by-group table of the patches ``shown``."""
    header = ["PATCH", "TARGET"] + [f"{group_name(index)}: {short_label(group['label']).upper()}"
                                    for index, group in enumerate(groups)]
    rows = [header] + [[patch["name"], patch["target"]] +
                       [_cell_text(cell) for cell in patch["cells"]] for patch in shown]
    return format_table([row + [""] for row in rows])


def _differences(groups: Sequence[Dict[str, Any]], differing: Sequence[Dict[str, Any]]) -> List[str]:
    """Each differing patch's status and reasons, group by group."""
    lines = [f"{plural(len(differing), 'patch', 'patches')} "
             f"differ{'s' if len(differing) == 1 else ''} between processes:"]
    for patch in differing:
        lines.append(f"  {patch['name']} ({patch['target']})")
        for group, cell in zip(groups, patch["cells"]):
            reasons = cell["reasons"][:REASONS_SHOWN]
            more = "; ..." if len(cell["reasons"]) > REASONS_SHOWN else ""
            text = f" ({'; '.join(reasons)}{more})" if reasons else ""
            lines.append(f"    {short_label(group['label'], 60)}: "
                         f"{_cell_text(cell, reason=False)}{text}")
    return lines


def _calls_summary(patches: Sequence[Dict[str, Any]], processes: int) -> List[str]:
    """Calls of each patch's replacements summed over the processes that counted
    them: "never called in any of 1024 processes" is what a reader acts on."""
    lines = []
    for patch in patches:
        total = patch.get("calls")
        if total is None:
            continue
        count, counted, site = total
        where = f"{counted} of {processes} processes" if counted != processes \
            else f"{processes} processes"
        text = calls_text(count, site) if count else "never called"
        lines.append(f"  {patch['name']}: {text}, in {where}")
    return ["calls of the replacements, summed:"] + lines if lines else []


def group_name(index: int) -> str:
    """``A``, ``B``, ... ``Z``, ``AA``: short names for the matrix's columns."""
    name = ""
    index += 1
    while index:
        index, remainder = divmod(index - 1, 26)
        name = chr(ord("A") + remainder) + name
    return name


def merged_as_json(merged: Dict[str, Any]) -> Dict[str, Any]:
    """The merged view as plain data: groups by label and report paths, patches with
    one status per group (the full records stay in the report files)."""
    return {
        "processes": merged["processes"],
        "groups": [{"name": group_name(index), "label": group["label"],
                    "processes": len(group["members"]),
                    "reports": [member.get("path", "") for member in group["members"]]}
                   for index, group in enumerate(merged["groups"])],
        "patches": [{"name": patch["name"], "target": patch["target"],
                     "differs": patch["differs"],
                     "statuses": [cell["status"] for cell in patch["cells"]],
                     "versions": [cell.get("version") for cell in patch["cells"]],
                     "reasons": [cell["reasons"] for cell in patch["cells"]],
                     "calls": None if patch.get("calls") is None else {
                         "calls": patch["calls"][0], "processes_counted": patch["calls"][1],
                         "first_call_site": patch["calls"][2]}}
                    for patch in merged["patches"]],
        "differences": [patch["name"] for patch in merged["patches"] if patch["differs"]],
        "usage": list(merged.get("usage") or ()),
    }


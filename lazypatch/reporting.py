"""Reporting: the record of each patch, tables, and report files of one or many processes.

Records are built here and only here (``record_of``): ``report()``, the
report file, ``lazypatch list`` and ``doctor`` all show the same fields.
Tables are drawn by one function, ``format_table``.

Imported only when a report is built, rendered or written (``json`` is
imported by the functions that need it; see benchmarks/COSTS.md).
"""

from __future__ import annotations

import os

from .selection import unmet_requirements
from .state import STATE

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Dict, List, Sequence

    from .state import RegisteredPatch

FORMATS = ("table", "json")


class PatchRecord(dict):
    """A snapshot of one patch's state, as ``report()`` returns it.

    A plain dict (JSON-ready) whose keys can also be read as attributes:
    ``record["status"] == record.status``.
    """

    def __getattr__(self, key: str) -> "Any":
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


def _provided_notes(patch: "RegisteredPatch") -> "List[str]":
    lines: "List[str]" = []
    for provider in patch.note_providers:
        try:
            provided = provider()
        except Exception as error:  # a report must never fail because of one pack
            from .slots import describe_exception
            lines.append(f"note provider failed: {describe_exception(error)}")
            continue
        if provided is None:
            continue
        lines.extend([provided] if isinstance(provided, str) else [str(item) for item in provided])
    return lines


def record_of(patch: "RegisteredPatch") -> PatchRecord:
    """The report record of a patch at this moment."""
    with STATE.lock:
        changes = [change.as_dict() for context in patch.live for change in context.changes]
        untracked = list(patch.untracked())
        record = PatchRecord(
            name=patch.name, target=patch.target, phase=patch.phase, status=patch.status,
            reason=patch.reason, error=patch.error, enabled=patch.enabled,
            enabled_by_default=patch.enabled_by_default, priority=patch.priority,
            tags=sorted(patch.tags), requires=[str(item) for item in patch.requires],
            description=patch.description, duration_ms=round(patch.duration_ms, 4),
            applications=patch.application_count, changes=changes,
            conflicts=list(patch.conflicts), late_references=list(patch.late_references),
            untracked_changes=untracked, undoable=not untracked, history=list(patch.history),
            notes=list(patch.notes),
            source=STATE.activation.sources.get(patch.name, "")
            or getattr(patch.function, "__module__", "") or "",
        )
        record["unmet_requirements"] = [reason for _, reason in unmet_requirements(patch)]
        plugin = STATE.plugin_entries.get(patch.name)
        if plugin is not None:
            record["source"] = f"plugin {plugin.distribution} ({plugin.value})"
        providers = list(patch.note_providers)
    if providers:   # user code: called without the lock
        record["notes"] = record["notes"] + _provided_notes(patch)
    return record


def report() -> "List[PatchRecord]":
    """A record of every registered patch, in registration order."""
    with STATE.lock:
        patches = STATE.catalog.patches()
    return [record_of(patch) for patch in patches]


def format_table(rows: "Sequence[Sequence[str]]") -> str:
    """Aligned columns; the last column is not padded (it holds free text)."""
    if not rows:
        return ""
    columns = max(len(row) for row in rows)
    widths = [max((len(row[column]) for row in rows if column < len(row)), default=0)
              for column in range(columns - 1)]
    lines = []
    for row in rows:
        cells = [cell.ljust(widths[column]) if column < len(widths) else cell
                 for column, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def render(records: "Sequence[Dict[str, Any]]", format: str = "table", all: bool = False) -> str:
    """Records as a JSON document or a text table (see ``render_table`` for ``all``)."""
    if format == "json":
        import json
        return json.dumps(list(records), indent=2, default=str)
    if format != "table":
        raise ValueError(f"unknown report format {format!r}; use one of {', '.join(FORMATS)}")
    return render_table(records, all=all)


# Rows in the order a reader needs them: what went wrong, what changed the
# program, what was skipped for a reason, what still waits for its import.
STATUS_ORDER = ("failed", "applied", "reverted", "skipped", "pending", "disabled")
DISABLED_BY_DEFAULT = "disabled by default"


def cannot_apply_here(record: "Dict[str, Any]") -> bool:
    """Whether a record is noise on this host: off by default and never turned on, or
    not applied because a required distribution is missing or at another version."""
    status = record.get("status")
    if status == "disabled" and str(record.get("reason") or "").startswith(DISABLED_BY_DEFAULT):
        return True
    return status in ("pending", "skipped", "disabled") and bool(record.get("unmet_requirements"))


def detail_of(record: "Dict[str, Any]") -> str:
    """The DETAIL cell: reason, conflicts, notes, undo problems; never empty."""
    parts = []
    reason = record.get("reason") or ""
    if reason:
        parts.append(reason)
    elif record.get("status") == "pending":
        unmet = record.get("unmet_requirements") or ()
        parts.append(f"will be skipped: {unmet[0]}" if unmet else
                     f"{record.get('target', '')} not imported yet")
    if record.get("conflicts"):
        parts.append("conflict: " + "; ".join(record["conflicts"]))
    if record.get("notes"):
        parts.append("; ".join(record["notes"]))
    if record.get("untracked_changes"):
        parts.append("not undoable: " + ", ".join(record["untracked_changes"]))
    if not parts and record.get("description"):
        parts.append(record["description"])
    return "; ".join(parts)


def ordered(records: "Sequence[Dict[str, Any]]") -> "List[Dict[str, Any]]":
    """Records by ``STATUS_ORDER`` (failed first), registration order within a status."""
    rank = {status: position for position, status in enumerate(STATUS_ORDER)}
    return sorted(records, key=lambda record: rank.get(record.get("status", ""), len(rank)))


def hidden_summary(records: "Sequence[Dict[str, Any]]") -> "List[str]":
    """One line per pack and kind for the records ``cannot_apply_here`` keeps out of
    the table: how many, which, and what would change it."""
    groups: "Dict[tuple, List[Dict[str, Any]]]" = {}
    for record in records:
        name = str(record.get("name", ""))
        pack = name.split(".", 1)[0]
        kind = "disabled" if not record.get("unmet_requirements") else "cannot apply"
        groups.setdefault((pack, kind), []).append(record)
    lines = []
    for (pack, kind), members in groups.items():
        names = [str(record.get("name", "")) for record in members]
        shown = ", ".join(names) if len(names) <= 2 else f"{pack}.*"
        if kind == "disabled" and len(names) == 1:
            lines.append(f"1 disabled by default ({names[0]}): enable it by its name")
        elif kind == "disabled":
            lines.append(f"{len(names)} disabled by default ({shown}): enable with "
                         f"LAZYPATCH_ENABLE={pack} or `lazypatch run --enable {pack}` "
                         f"(or one by name)")
        else:
            reasons: "List[str]" = []
            for record in members:
                for reason in record.get("unmet_requirements") or ():
                    # "requires torch_npu: torch_npu is not installed" -> the second half
                    short = reason.split(": ", 1)[-1] if reason.endswith("not installed") \
                        else reason
                    if short not in reasons:
                        reasons.append(short)
            lines.append(f"{len(names)} cannot apply on this host ({shown}): "
                         f"{'; '.join(reasons[:3])}{'; ...' if len(reasons) > 3 else ''}")
    return lines


def render_table(records: "Sequence[Dict[str, Any]]", all: bool = False) -> str:
    """One line per patch (status, name, target, changes, time, detail), failures
    first. Unless ``all``, patches that cannot apply here (off by default, or a
    required distribution missing) are summarised in one line per pack instead."""
    header = ("STATUS", "PATCH", "TARGET", "CHANGES", "MS", "DETAIL")
    shown = [record for record in records if all or not cannot_apply_here(record)]
    hidden = [record for record in records if not all and cannot_apply_here(record)]
    rows = [header]
    for record in ordered(shown):
        rows.append((record.get("status", ""), record.get("name", ""), record.get("target", ""),
                     str(len(record.get("changes") or ())),
                     f"{record.get('duration_ms', 0):.2f}", detail_of(record)))
    lines = [format_table(rows)] if shown else []
    if hidden:
        lines.append(f"{len(hidden)} not shown (`--all` or all=True shows them):")
        lines += ["  " + line for line in hidden_summary(hidden)]
    counts: "Dict[str, int]" = {}
    for record in records:
        counts[record.get("status", "")] = counts.get(record.get("status", ""), 0) + 1
    lines.append(", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
                 or "no patches registered")
    return "\n".join(lines)


REPORT_PLACEHOLDERS = ("host", "node", "rank", "local_rank", "worker", "pid")


def expand_path(template: str) -> str:
    """Fill ``{host}``, ``{node}``, ``{rank}``, ``{local_rank}``, ``{worker}`` and ``{pid}``
    in a report path; a launcher agent's ``{rank}`` is ``agent``, never a rank's number.

    Plain replacement, not ``str.format``: other braces in a path stay as written.
    """
    if "{" not in template:
        return template
    from .processes import process_identity
    identity = process_identity()
    for name in REPORT_PLACEHOLDERS:
        value = identity[name]
        text = "agent" if value is None else str(value)
        template = template.replace("{" + name + "}", text.replace(os.sep, "_"))
    return template


def write_report(path: str, started: float = 0.0) -> str:
    """Write the current report as JSON to ``path`` (placeholders filled); return the path.

    A process without a launcher rank (torchrun's own launcher, say) counts as
    rank 0, but it never overwrites a report that a ranked process wrote
    since ``started`` (a time.time() value): it writes beside it, with
    ``.pid<PID>`` before the extension.
    """
    import json
    import sys

    from .configuration import rank_variable, settings_facts
    from .files import atomic_write
    from .processes import process_identity
    target = expand_path(path)
    variable = rank_variable()
    if variable is None and "{rank}" in path and _written_by_ranked_process(target, started):
        stem, extension = os.path.splitext(target)
        target = f"{stem}.pid{os.getpid()}{extension}"
    directory = os.path.dirname(target)
    if directory:
        os.makedirs(directory, exist_ok=True)
    document = dict(process_identity())   # host, node, rank (None for an agent), role...
    document.update({"rank_variable": variable, "argv": list(sys.argv),
                     "python": sys.executable, "settings": settings_facts(),
                     # Targets imported before activation (a Ray or Dask worker's own
                     # modules): their patches were applied late.
                     "activated_by": STATE.activation.activated_by,
                     "imported_before": list(STATE.activation.imported_before),
                     "patches": report()})
    atomic_write(target, json.dumps(document, indent=2, default=str))
    return target


def _written_by_ranked_process(target: str, since: float) -> bool:
    import json
    try:
        if os.stat(target).st_mtime < since:
            return False
        with open(target, encoding="utf-8") as handle:
            return bool(json.load(handle).get("rank_variable"))
    except (OSError, ValueError, AttributeError):
        return False


def write_report_at_exit(path: str) -> None:
    """Register an exit handler that writes the report to ``path``."""
    import atexit
    import time
    started = time.time()

    def write() -> None:
        try:
            write_report(path, started)
        except Exception as error:   # at exit: say why, never raise from a handler
            from .errors import ConfigurationWarning
            from .notices import notify
            notify(f"lazypatch: cannot write LAZYPATCH_REPORT={path!r}: {error}",
                   ConfigurationWarning)
    atexit.register(write)


# --- reports of several processes -----------------------------------------

class ReportFileError(ValueError):
    """A report file that cannot be read; the message names the file and the fix."""


def load_report(path: str) -> "Dict[str, Any]":
    """One report file as written by ``write_report`` (``patches`` plus process facts)."""
    import json
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        raise ReportFileError(f"{path}: no such report file; write one with "
                              f"LAZYPATCH_REPORT=path (or `lazypatch run --report path`)") from None
    except (OSError, ValueError) as error:
        raise ReportFileError(f"{path}: not a lazypatch JSON report ({error})") from None
    if isinstance(document, list):   # a bare `lazypatch.report()` dump
        document = {"patches": document}
    if not isinstance(document, dict) or not isinstance(document.get("patches"), list) or \
            not all(isinstance(record, dict) for record in document["patches"]):
        raise ReportFileError(f"{path}: not a lazypatch report (expected an object with a "
                              f"'patches' list of records, as LAZYPATCH_REPORT writes)")
    document.setdefault("path", path)
    return document


def process_label(document: "Dict[str, Any]", duplicate_ranks: bool) -> str:
    """``rank 1`` or, when ranks repeat (DataLoader workers), ``rank 0 pid 4242``; a
    launcher's agent is ``agent pid 4242``, never a rank."""
    if document.get("role") == "agent":
        return f"agent pid {document.get('pid', '?')}"
    label = f"rank {document.get('rank', '?')}"
    if duplicate_ranks:
        label += f" pid {document.get('pid', '?')}"
    return label


def differences(documents: "Sequence[Dict[str, Any]]") -> "List[Dict[str, Any]]":
    """Patches whose status is not the same in every report (a patch missing
    from a report counts as status ``absent``)."""
    names: "List[str]" = []
    for document in documents:
        for record in document["patches"]:
            if record.get("name") not in names:
                names.append(record.get("name"))
    found = []
    for name in names:
        per_process = []
        for document in documents:
            record = next((item for item in document["patches"] if item.get("name") == name), None)
            per_process.append(record or {"status": "absent", "reason": "not registered"})
        if len({record.get("status") for record in per_process}) > 1:
            found.append({"name": name, "records": per_process})
    return found


def render_many(documents: "Sequence[Dict[str, Any]]", all: bool = False) -> str:
    """Several processes' reports: one status column per process, then the
    patches whose status differs between them with each process's reason."""
    if len(documents) == 1:
        document = documents[0]
        heading = (f"{document.get('path', '')}: rank {document.get('rank', '?')}, "
                   f"pid {document.get('pid', '?')}")
        return heading + "\n" + render_table(document["patches"], all=all)
    ranks = [document.get("rank") for document in documents]
    duplicate = len(set(ranks)) != len(ranks)
    labels = [process_label(document, duplicate) for document in documents]
    order = sorted(range(len(documents)), key=lambda index: (str(ranks[index]), labels[index]))
    documents = [documents[index] for index in order]
    labels = [labels[index] for index in order]
    targets: "Dict[str, str]" = {}
    names: "List[str]" = []
    statuses: "Dict[str, Dict[int, str]]" = {}
    noise: "Dict[str, Dict[str, Any]]" = {}   # name -> a record, while every process hides it
    for column, document in enumerate(documents):
        for record in document["patches"]:
            name = record.get("name", "")
            if name not in statuses:
                names.append(name)
                statuses[name] = {}
                noise[name] = record
            targets[name] = record.get("target", "")
            statuses[name][column] = record.get("status", "")
            if not cannot_apply_here(record):
                noise.pop(name, None)
    hidden = [] if all else [record for name, record in noise.items()]
    if hidden:
        names = [name for name in names if name not in noise]
    header = ["PATCH", "TARGET"] + [label.upper() for label in labels]
    rows = [header] + [[name, targets[name]] +
                       [statuses[name].get(column, "absent") for column in range(len(labels))]
                       for name in names]
    lines = [format_table([row + [""] for row in rows])]
    if hidden:
        lines.append(f"{len(hidden)} not shown, the same in every process (`--all` shows them):")
        lines += ["  " + line for line in hidden_summary(hidden)]
    lines.append(f"{len(documents)} reports: " + ", ".join(
        f"{label} ({document.get('path', '')})" for label, document in zip(labels, documents)))
    different = differences(documents)
    if not different:
        lines.append("every patch has the same status in every process")
        return "\n".join(lines)
    lines.append("")
    lines.append(f"{len(different)} patch(es) differ between processes:")
    for item in different:
        lines.append(f"  {item['name']}")
        for label, record in zip(labels, item["records"]):
            reason = record.get("reason") or ""
            lines.append(f"    {label}: {record.get('status')}" + (f" ({reason})" if reason else ""))
    return "\n".join(lines)

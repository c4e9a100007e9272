"""Reporting: the record of each patch, tables, and report files of one or many processes.

Records are built here and only here (``record_of``): ``report()``, the
report file, ``lazypatch list`` and ``doctor`` all show the same fields.
Tables are drawn by one function, ``format_table``.

Imported only when a report is built, rendered or written (``json`` is
imported by the functions that need it; see benchmarks/COSTS.md).
"""

from __future__ import annotations

import os
import sys

from ..apply.calls import calls_of
from ..decide.selection import unmet_requirements
from ..state import AFTER, STATE

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Dict, List, Optional, Sequence, Tuple

    from ..state import RegisteredPatch

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


def _provided(patch: "RegisteredPatch") -> "Tuple[List[str], List[Dict[str, Any]]]":
    """What the patch's note providers say now: notes (strings), and rows of the
    report's "what ran where" section (dicts with a ``what``, see ``usage_row``)."""
    lines: "List[str]" = []
    usage: "List[Dict[str, Any]]" = []
    for provider in patch.note_providers:
        try:
            provided = provider()
        except Exception as error:  # a report must never fail because of one pack
            from ..slots import describe_exception
            lines.append(f"note provider failed: {describe_exception(error)}")
            continue
        if provided is None:
            continue
        # A string, or several; anything else (a counter is a number) is one note. A
        # value whose str() raises is named instead: the report must still be built.
        items = list(provided) if isinstance(provided, (list, tuple, set, frozenset)) \
            else [provided]
        for item in items:
            try:
                if isinstance(item, dict) and "what" in item:
                    usage.append(usage_row(item, patch.name))
                else:
                    lines.append(item if isinstance(item, str) else str(item))
            except Exception as error:
                from ..slots import describe_exception
                lines.append(f"note provider returned a {type(item).__name__} that cannot be "
                             f"shown ({describe_exception(error)})")
    return lines, usage


def usage_row(item: "Dict[str, Any]", patch: str) -> "Dict[str, Any]":
    """One row of "what ran where": ``what`` ran (an API, a module, an operator)
    ``where`` (the device it was sent to, or the stand-in that provided it),
    ``calls`` times (None: not counted), the first from ``first_call_site``
    ("file:line" in the user's code), by ``patch`` (or by what the item's ``by``
    names: a pack whose patches share one counter names the pack)."""
    calls = item.get("calls")
    return {"what": str(item["what"]), "where": str(item.get("where") or ""),
            "calls": calls if isinstance(calls, int) else None,
            "first_call_site": str(item.get("first_call_site") or ""),
            "patch": str(item.get("by") or patch)}


def record_of(patch: "RegisteredPatch",
              packages: "Optional[Dict[str, Tuple[str, Optional[str]]]]" = None,
              hints: "Optional[MissingModuleHints]" = None) -> PatchRecord:
    """The report record of a patch at this moment; ``packages`` and ``hints``
    remember ``target_distribution`` and ``missing_module_hint`` answers across the
    records of one report."""
    record, has_providers = _record_under_lock(patch)
    top = patch.target.split(".", 1)[0]
    if packages is None or top not in packages:
        found = target_distribution(top)
        if packages is None:
            packages = {}
        packages[top] = found
    record["package"], record["version"] = packages[top]
    if has_providers:   # user code: called without the lock
        notes, usage = _provided(patch)
        record["notes"] = record["notes"] + notes
        if usage:
            record["usage"] = usage
    _explain_pending(record, patch, top, hints)
    return record


def _record_under_lock(patch: "RegisteredPatch") -> "Tuple[PatchRecord, bool]":
    """The facts of the patch's record, read together under the state's lock, and
    whether note providers are to be asked (without the lock) for more."""
    with STATE.lock:
        live = patch.live
        changes = [described_change(change) for context in live for change in context.changes]
        overwritten = [text for context in live for text in context.overwritten_changes()]
        untracked = list(patch.untracked_changes)
        record = PatchRecord(
            name=patch.name, target=patch.target, phase=patch.phase, status=patch.status,
            reason=patch.reason, error=patch.error, enabled=patch.enabled,
            enabled_by_default=patch.enabled_by_default, priority=patch.priority,
            tags=sorted(patch.tags), requires=[str(item) for item in patch.requires],
            description=patch.description, duration_ms=round(patch.duration_ms, 4),
            applications=patch.application_count, changes=changes,
            conflicts=list(patch.conflicts), late_references=list(patch.late_references),
            overwritten=overwritten,
            untracked_changes=untracked, undoable=not untracked, history=list(patch.history),
            notes=list(patch.notes),
            source=STATE.activation.sources.get(patch.name, "")
            or getattr(patch.function, "__module__", "") or "",
        )
        record["unmet_requirements"] = [reason for _, reason in unmet_requirements(patch)]
        record.update(calls_of(patch))
        plugin = STATE.plugin_entries.get(patch.name)
        if plugin is not None:
            record["source"] = f"plugin {plugin.distribution} ({plugin.value})"
        return record, bool(patch.note_providers)


def _explain_pending(record: PatchRecord, patch: "RegisteredPatch", top: str,
                     hints: "Optional[MissingModuleHints]") -> None:
    """Why a pending patch waits: its target put in sys.modules without an import, or
    imported where lazypatch's finder did not see it, or (for a patch of the user's) a
    hint at a misspelled or missing module."""
    imported = sys.modules.get(patch.target)
    spec = getattr(imported, "__spec__", None)
    if record["status"] == "pending" and patch.phase == AFTER and imported is not None and \
            not getattr(spec, "_initializing", False):
        apply_it = (f"apply it with lazypatch.notify_module_loaded("
                    f"sys.modules[{patch.target!r}], {patch.target!r})")
        if getattr(spec, "name", None) != patch.target:
            # In sys.modules without an import: a package assigned it there under a second
            # name (sys.modules["pkg.alias"] = real). No import event exists to hook.
            record["reason"] = (
                f"{patch.target} is in sys.modules but was put there without an import (an "
                f"alias assigned by its package); {apply_it}")
        else:
            # Imported under its own name, and no application: lazypatch's finder was not
            # asked. Used as a library, lazypatch leaves sys.meta_path the program's
            # list, so a program that assigned a list of its own without the finder
            # imports everything unpatched from then on (activation puts it back).
            record["reason"] = f"{patch.target} was imported without lazypatch seeing it: " + (
                "lazypatch's finder is not on sys.meta_path (a program assigned a list of "
                "its own, or lazypatch.uninstall() took it off), so no import is patched "
                "now; lazypatch.install() puts it back first. To patch this module, "
                if not any(finder is STATE.finder for finder in sys.meta_path) else
                "lazypatch's finder was not on sys.meta_path then, or a finder ahead of it "
                "served the import; ") + apply_it
    elif record["status"] == "pending" and record["source"] != "built-in":
        hint = (hints or MissingModuleHints())(top)
        if hint:
            record["notes"] = record["notes"] + [hint]


def missing_module_hint(top: str) -> str:
    """For a patch waiting on a top-level module that nothing can import: say so, with
    the installed module of the nearest name (``nunpy``: did you mean 'numpy'?); ""
    when the module is importable (it simply was not imported yet)."""
    return MissingModuleHints()(top)


class MissingModuleHints:
    """``missing_module_hint`` for the records of one report: each top-level name is
    answered once, and the program's imports and the installed modules are listed at
    most once (listing every installed module per record made a report of 3,000 patches
    waiting on missing modules take minutes)."""

    def __init__(self) -> None:
        self.answers: "Dict[str, str]" = {}
        self.imported: "Optional[List[str]]" = None
        self.installed: "Optional[List[str]]" = None

    def __call__(self, top: str) -> str:
        answer = self.answers.get(top)
        if answer is None:
            answer = self.answers[top] = self._hint(top)
        return answer

    def _hint(self, top: str) -> str:
        from ..decide.distributions import findable
        if findable(top):
            return ""
        # The program's own imports first (the module it did import is the likely
        # meaning), then everything installed.
        from difflib import get_close_matches
        if self.imported is None:
            self.imported = sorted({name.partition(".")[0] for name in list(sys.modules)})
        close = get_close_matches(top, self.imported, n=1, cutoff=0.75)
        if not close:
            if self.installed is None:
                import pkgutil
                installed = {module.name for module in pkgutil.iter_modules()}
                self.installed = sorted(installed | set(sys.builtin_module_names))
            close = get_close_matches(top, self.installed, n=1, cutoff=0.75)
        return f"no module named {top!r} can be imported here" + (
            f" (did you mean {close[0]!r}?)" if close else "; the patch waits for nothing")


def target_distribution(target: str) -> "Tuple[str, Optional[str]]":
    """(distribution, version) of the package a target module belongs to, read from
    installed metadata without importing it; (top-level name, None) when no
    installed distribution provides it (a local module, the standard library)."""
    from ..decide.distributions import canonical_name, import_name_providers, installed_version
    top = target.split(".", 1)[0]
    # Most distributions are named as they import (torch, numpy, mmdet): one
    # listing lookup. The others (mmcv-lite -> mmcv) need the top-level map.
    version = installed_version(top)
    if version is not None:
        return top, version
    providers = import_name_providers(top)
    if providers:
        return canonical_name(providers[0][0]), providers[0][1]
    return top, None


def described_change(change: "Any") -> "Dict[str, Any]":
    """A ledger change as a record entry; a replaced function also gets where the
    original and its replacement are defined (``original_code``/``replacement_code``),
    so that ``lazypatch report --diff`` can read both sources later."""
    described = change.as_dict()
    original, replacement = code_location(change.before), code_location(replacement_of(change))
    if original and replacement:
        described["original_code"] = original
        described["replacement_code"] = replacement
    return described


def replacement_of(change: "Any") -> "Any":
    """The object a change put in place; for ``patch.wrap``, the user's wrapper function."""
    after = change.after
    if change.action == "wrap":
        # a module function's plain wrapper (wrapping.py), or wrapt's proxy
        return getattr(after, "__lazypatch_wrapper__", None) or getattr(after, "_self_wrapper",
                                                                           after)
    return after


def code_location(value: "Any") -> "Optional[Dict[str, Any]]":
    """``{"file", "line", "name"}`` of a Python function (or the function inside a
    bound method, classmethod or staticmethod); None for anything else (classes, builtins)."""
    function = getattr(value, "__func__", value)
    if getattr(function, "__lazypatch_calls__", None) is not None:
        function = function.__wrapped__     # a counting wrapper (calls.py): the user's function
    code = getattr(function, "__code__", None)
    if code is None or not isinstance(getattr(code, "co_filename", None), str):
        return None
    return {"file": code.co_filename, "line": code.co_firstlineno,
            "name": getattr(function, "__qualname__", code.co_name)}


def report() -> "List[PatchRecord]":
    """A record of every registered patch, in registration order."""
    with STATE.lock:
        patches = STATE.catalog.patches()
    packages: "Dict[str, Tuple[str, Optional[str]]]" = {}   # many patches, few packages
    hints = MissingModuleHints()
    return [record_of(patch, packages, hints) for patch in patches]


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


def render(records: "Sequence[Dict[str, Any]]", format: str = "table", all: bool = False,
           diff: bool = False, footer: str = "") -> str:
    """Records as a JSON document or a text table (see ``render_table`` for ``all``;
    ``footer`` lines end the table); with ``diff``, the table is followed by the source
    diff of every replaced function (``render_diffs``; in JSON, each such change gets a
    ``diff`` text)."""
    if format == "json":
        import json
        if diff:
            records = [dict(record, changes=[dict(change, diff=change_diff(record, change))
                                             if "original_code" in change else change
                                             for change in record.get("changes") or ()])
                       for record in records]
        return json.dumps(list(records), indent=2, default=str)
    if format != "table":
        raise ValueError(f"unknown report format {format!r}; use one of {', '.join(FORMATS)}")
    table = render_table(records, all=all) + ("\n" + footer if footer else "")
    return table + "\n\n" + render_diffs(records) if diff else table


def one_time_imports_line(imports: "Dict[str, float]") -> str:
    """"one-time imports, charged to no patch: wrapt 270.12 ms", or "" when none."""
    if not imports:
        return ""
    return "one-time imports, charged to no patch: " + ", ".join(
        f"{name} {milliseconds:.2f} ms" for name, milliseconds in sorted(imports.items()))


def function_source(location: "Dict[str, Any]") -> "Optional[List[str]]":
    """The source lines of the function defined at ``location`` (file and first line),
    read from its file now; None when the file is not readable here."""
    import inspect
    import linecache
    lines = linecache.getlines(str(location.get("file", "")))
    line = int(location.get("line") or 0)
    if not lines or not 0 < line <= len(lines):
        return None
    try:
        return inspect.getblock(lines[line - 1:])
    except (SyntaxError, IndentationError):   # tokenize gives up on broken text
        return lines[line - 1:line]


def change_diff(record: "Dict[str, Any]", change: "Dict[str, Any]") -> str:
    """Unified diff of one replaced function, original against replacement; or why not."""
    import difflib
    original, replacement = change["original_code"], change["replacement_code"]
    before, after = function_source(original), function_source(replacement)
    if before is None or after is None:
        missing = original if before is None else replacement
        return (f"source not available here: {missing.get('file')}:{missing.get('line')} "
                f"cannot be read on this machine")
    text = "".join(difflib.unified_diff(
        before, after, fromfile=f"{original['name']} (original, {original['file']}:"
                                f"{original['line']})",
        tofile=f"{replacement['name']} (replacement, {replacement['file']}:"
               f"{replacement['line']})"))
    return text or "identical source"


def render_diffs(records: "Sequence[Dict[str, Any]]") -> str:
    """For every replaced function in the records, a heading and the unified diff of its
    source, original against replacement (each patch once, even if records repeat)."""
    sections: "List[str]" = []
    seen: "set" = set()
    for record in records:
        for change in record.get("changes") or ():
            if "original_code" not in change:
                continue
            key = (record.get("name"), change.get("target"), change.get("key"))
            if key in seen:
                continue
            seen.add(key)
            sections.append(f"diff of {record.get('name', '')}: {change.get('action')} "
                            f"{change.get('target')}.{change.get('key')}\n"
                            + change_diff(record, change).rstrip("\n"))
    return "\n\n".join(sections) or "no replaced function in these records (nothing to diff)"


def package_summary(records: "Sequence[Dict[str, Any]]") -> "List[str]":
    """One line per package the records' targets belong to: ``numpy 2.1.3: 3 applied,
    1 skipped``, packages in first-seen order, statuses by ``STATUS_ORDER``."""
    counts: "Dict[str, Dict[str, int]]" = {}
    for record in records:
        package = str(record.get("package") or str(record.get("target", "")).split(".")[0])
        version = record.get("version")
        label = f"{package} {version}" if version else f"{package} (no installed distribution)"
        statuses = counts.setdefault(label, {})
        status = str(record.get("status", ""))
        statuses[status] = statuses.get(status, 0) + 1
    rank = {status: position for position, status in enumerate(STATUS_ORDER)}
    return [f"{label}: " + ", ".join(f"{count} {status}" for status, count in
                                     sorted(statuses.items(),
                                            key=lambda item: rank.get(item[0], len(rank))))
            for label, statuses in counts.items()]


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


def waiting_built_in(record: "Dict[str, Any]") -> bool:
    """A built-in pack's patch still waiting for a module this process never imported:
    what the program did not touch is not news (a user's own pending patch stays in the
    table: a misspelled target shows up there)."""
    return record.get("status") == "pending" and record.get("source") == "built-in" \
        and not record.get("unmet_requirements")


def detail_of(record: "Dict[str, Any]", calls: bool = True) -> str:
    """The DETAIL cell: reason, conflicts, notes, undo problems, and (with ``calls``)
    whether the replacements were called."""
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
    if record.get("overwritten"):
        parts.append("no longer in effect, another value assigned since (or a reload lazypatch "
                     "did not see): " + ", ".join(record["overwritten"]))
    if not parts and record.get("description"):
        parts.append(record["description"])
    count = record.get("calls") if calls else None
    if count is not None:
        parts.append(calls_text(count, record.get("first_call_site") or ""))
    return "; ".join(parts)


def calls_text(count: int, first_call_site: str) -> str:
    """"called 12x, first from train.py:40", or "never called"."""
    return f"called {count}x, first from {short_site(first_call_site)}" if count \
        else "never called"


def short_site(site: str) -> str:
    """A call site for the table: "train.py:42" (the JSON record keeps the full path)."""
    path, _, line = str(site).rpartition(":")
    return f"{os.path.basename(path)}:{line}" if path else str(site)


def calls_footer(records: "Sequence[Dict[str, Any]]") -> "List[str]":
    """Why call counts are missing, once for the table (not in every row)."""
    reasons = {str(record.get("calls_not_tracked")) for record in records
               if record.get("status") == "applied" and record.get("calls_not_tracked")}
    return sorted(reasons)


def severity(record: "Dict[str, Any]") -> int:
    """Where a record goes in a report: failures first, then conflicts, then the other
    statuses by ``STATUS_ORDER``; what cannot apply on this host last."""
    status = record.get("status", "")
    if status == "failed":
        return 0
    if record.get("conflicts"):
        return 1
    if cannot_apply_here(record):
        return 2 + len(STATUS_ORDER)
    return 2 + (STATUS_ORDER.index(status) if status in STATUS_ORDER else len(STATUS_ORDER))


def ordered(records: "Sequence[Dict[str, Any]]") -> "List[Dict[str, Any]]":
    """Records by ``severity`` (failed first), registration order within one."""
    return sorted(records, key=severity)


def status_counts(records: "Sequence[Dict[str, Any]]") -> str:
    """"1 failed, 7 applied, 2 reverted": every status present, failures first."""
    counts: "Dict[str, int]" = {}
    for record in records:
        counts[record.get("status", "")] = counts.get(record.get("status", ""), 0) + 1
    order = {status: position for position, status in enumerate(STATUS_ORDER)}
    return ", ".join(f"{counts[status]} {status}"
                     for status in sorted(counts, key=lambda status: order.get(status, len(order))))


def plural(count: int, word: str, plural_word: str = "") -> str:
    """"1 process", "2 processes": a count with its noun."""
    return f"{count} {word if count == 1 else (plural_word or word + 's')}"


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


def usage_of(records: "Sequence[Dict[str, Any]]") -> "List[Dict[str, Any]]":
    """Every "what ran where" row of ``records`` (see ``usage_row``), most calls first."""
    rows = [row for record in records for row in record.get("usage") or ()]
    return sorted(rows, key=lambda row: -(row.get("calls") or 0))


def usage_lines(rows: "Sequence[Dict[str, Any]]", processes: int = 0) -> "List[str]":
    """The "what ran where" section as text: a table of what was redirected or
    provided, how often and from which line of the user's code first; ``processes``
    (when several reports were merged) says what the calls are summed over."""
    if not rows:
        return []
    summed = f" (calls summed over {plural(processes, 'process', 'processes')})" \
        if processes > 1 else ""
    table = [("WHAT", "RAN ON / AS", "CALLS", "FIRST CALL", "BY")]
    for row in rows:
        calls = row.get("calls")
        table.append((str(row.get("what", "")), str(row.get("where", "")),
                      "-" if calls is None else str(calls),
                      short_site(row.get("first_call_site") or "") or "-",
                      str(row.get("patch", ""))))
    return [f"what ran where{summed}:"] + ["  " + line for line in format_table(table).splitlines()]


def count_line(shown: "Sequence[Dict[str, Any]]", waiting: "Sequence[Dict[str, Any]]",
               hidden: "Sequence[Dict[str, Any]]") -> str:
    """The last line of a table: the rows shown by status, then what was not shown
    in the words (and the numbers) of the summary lines above it."""
    line = status_counts(shown)
    kinds = []
    if waiting:
        kinds.append(f"{len(waiting)} waiting for a module never imported")
    cannot = sum(1 for record in hidden if record.get("unmet_requirements"))
    if cannot:
        kinds.append(f"{cannot} cannot apply on this host")
    if len(hidden) - cannot:
        kinds.append(f"{len(hidden) - cannot} disabled by default")
    if kinds:
        line = (line + "; " if line else "") + "not shown: " + ", ".join(kinds)
    return line


def render_table(records: "Sequence[Dict[str, Any]]", all: bool = False) -> str:
    """One line per patch (status, name, target, changes, time, detail), failures
    first. Unless ``all``, patches that cannot apply here (off by default, or a
    required distribution missing) are summarised in one line per pack instead."""
    header = ("STATUS", "PATCH", "TARGET", "CHANGES", "MS", "DETAIL")
    shown = [record for record in records if all or not cannot_apply_here(record)]
    hidden = [record for record in records if not all and cannot_apply_here(record)]
    waiting = [record for record in shown if not all and waiting_built_in(record)]
    shown = [record for record in shown if all or not waiting_built_in(record)]
    rows = [header]
    for record in ordered(shown):
        rows.append((record.get("status", ""), record.get("name", ""), record.get("target", ""),
                     str(len(record.get("changes") or ())),
                     f"{record.get('duration_ms', 0):.2f}", detail_of(record)))
    lines = [format_table(rows)] if shown else []
    # What ran where is what a user of a redirecting pack came for: right below the rows.
    lines += usage_lines(usage_of(records))
    if hidden or waiting:
        lines.append(f"{len(hidden) + len(waiting)} not shown (`--all` or all=True shows them):")
    if waiting:
        modules = sorted({str(record.get("target", "")) for record in waiting})
        packs = sorted({str(record.get("name", "")).split(".", 1)[0] + ".*"
                        for record in waiting})
        lines.append(f"  {len(waiting)} of the built-in packs ({', '.join(packs)}) wait for "
                     f"modules this process never imported: {', '.join(modules[:4])}"
                     f"{', ...' if len(modules) > 4 else ''}")
    if hidden:
        lines += ["  " + line for line in hidden_summary(hidden)]
    if shown and any("package" in record for record in shown):
        lines.append("by package:")
        lines += ["  " + line for line in package_summary(shown)]
    lines += calls_footer(shown)
    lines.append(count_line(shown, waiting, hidden) if records else "no patches registered")
    return "\n".join(lines)


REPORT_PLACEHOLDERS = ("host", "node", "rank", "local_rank", "worker", "pid")
# The placeholders that tell a command's processes apart: a pid is unique on its host,
# a rank in its job (a launcher's agent, whose rank is "agent", writes beside a rank's
# report: see write_report). The others are shared: a host runs many processes,
# {node} and {local_rank} repeat on every node and for every process a rank starts,
# and {worker} is "main" in every process outside Ray and Dask and is inherited by
# the processes a worker starts.
PROCESS_PLACEHOLDERS = ("pid", "rank")


def one_file_per_process(path: str) -> str:
    """``path`` when it names a process (``{pid}`` or ``{rank}``), else ``path`` with
    ``-{pid}`` before its extension: for a command whose every process writes a report."""
    if any("{" + name + "}" in path for name in PROCESS_PLACEHOLDERS):
        return path
    stem, extension = os.path.splitext(path)
    return f"{stem}-{{pid}}{extension}"


def expand_path(template: str) -> str:
    """Fill ``{host}``, ``{node}``, ``{rank}``, ``{local_rank}``, ``{worker}`` and ``{pid}``
    in a report path; a launcher agent's ``{rank}`` is ``agent``, never a rank's number.

    Plain replacement, not ``str.format``: other braces in a path stay as written.
    """
    if "{" not in template:
        return template
    from ..activate.processes import process_identity
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

    from ..activate.configuration import rank_variable, settings_facts
    from ..activate.processes import process_identity
    from ..files import atomic_write
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
                     "one_time_imports": dict(STATE.one_time_imports),
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
            from ..errors import ConfigurationWarning
            from ..notices import notify
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

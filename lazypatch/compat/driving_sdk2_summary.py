"""What DrivingSDK 2.0 patchers say: event actions (``configure_patcher_logging``), the
log level, and the summary (``configure_summary``, ``patcher_logger``); see ``driving_sdk2``.

DrivingSDK logs a summary at the end of ``apply()``, because there every patch has
been applied, skipped or failed by then. Here ``apply()`` only declares: a patch
is decided when its module is imported. So the summary comes when the patcher's
work ends: at ``restore()`` (the end of ``with patcher:``), before anything is
undone, or at interpreter exit for a patcher still applied; once per ``apply()``.
``Patcher.summary()`` gives the same text at any time.

What it shows, as in DrivingSDK: the import controls (Skipped Modules,
Injected Imports, Replaced Imports, each with whether its module was imported),
then the Applied, Skipped and Failed patches grouped by package (with the
installed version) and patch group, with each reason; plus Pending Patches,
whose module was never imported (DrivingSDK, being eager, has none).

Where: the ``lazypatch`` logger at ``level`` (INFO by default), on rank 0 only (the
launcher's rank variables, or ``patcher_logger.set_rank(n)``).
As in DrivingSDK, ``set_patcher_log_level(logging.WARNING)`` hides an INFO
summary; where the ``lazypatch`` logger has no handler at all, the summary is
written to stderr as ``[Patcher] INFO: ...`` (DrivingSDK's own handler).
A section is hidden when its ``show_*`` flag is False, or, left None, when
``configure_patcher_logging`` made that event ``silent``.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Set, Tuple

LEVEL_NAMES = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}
BANNER = "DRIVINGSDK PATCHER SUMMARY (lazypatch)"
WIDTH = 78


class SummaryConfig:
    """What the summary shows and at which logging level; see ``configure_summary``."""

    def __init__(self) -> None:
        self.enabled = True
        self.level = LEVEL_NAMES["INFO"]
        self.show_applied: "Optional[bool]" = None
        self.show_skipped: "Optional[bool]" = None
        self.show_failed: "Optional[bool]" = None
        self.show_import_events = True


SUMMARY = SummaryConfig()
SILENT_EVENTS: "Set[str]" = set()   # events configure_patcher_logging made silent
RANK_OVERRIDE: "List[int]" = []     # patcher_logger.set_rank(n): n, else the environment's


def summary_rank() -> int:
    """The rank the summary filter sees: ``set_rank``'s, else the launcher's variables
    (RANK, LOCAL_RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, as DrivingSDK)."""
    from ..configuration import current_rank
    return RANK_OVERRIDE[-1] if RANK_OVERRIDE else current_rank()


def _flag(value: "Any", label: str) -> "Optional[bool]":
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"configure_summary: {label} must be True, False or None (None: "
                        f"follow configure_patcher_logging), got {value!r}")
    return value


def _level(value: "Any") -> int:
    if isinstance(value, str) and value.upper() in LEVEL_NAMES:
        return LEVEL_NAMES[value.upper()]
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    raise ValueError(f"configure_summary: level must be a logging level such as "
                     f"logging.INFO or 'WARNING', got {value!r}")


def configure_summary(enabled: "Optional[bool]" = None, level: "Any" = None,
                      show_applied: "Optional[bool]" = None,
                      show_skipped: "Optional[bool]" = None,
                      show_failed: "Optional[bool]" = None,
                      show_import_events: "Optional[bool]" = None) -> None:
    """Whether the summary is emitted, at which logging level, and which sections it
    shows (None leaves a setting as it is). Every argument is checked first."""
    checked = {"enabled": _flag(enabled, "enabled"),
               "show_applied": _flag(show_applied, "show_applied"),
               "show_skipped": _flag(show_skipped, "show_skipped"),
               "show_failed": _flag(show_failed, "show_failed"),
               "show_import_events": _flag(show_import_events, "show_import_events")}
    chosen_level = None if level is None else _level(level)
    for label in ("enabled", "show_import_events"):
        if checked[label] is not None:
            setattr(SUMMARY, label, checked[label])
    for label in ("show_applied", "show_skipped", "show_failed"):
        if checked[label] is not None:
            setattr(SUMMARY, label, checked[label])
    if chosen_level is not None:
        SUMMARY.level = chosen_level


def _shown(flag: "Optional[bool]", event: str) -> bool:
    return flag if flag is not None else event not in SILENT_EVENTS


SECTIONS = (("applied", "Applied Patches", "+", "show_applied", "apply"),
            ("skipped", "Skipped Patches", "~", "show_skipped", "skip"),
            ("failed", "Failed Patches", "!", "show_failed", "failure"),
            ("pending", "Pending Patches (module never imported)", "?", "show_skipped",
             "skip"))


def _status(record: "Any") -> str:
    """The record's status, with ``pending`` also for a patch by path that moved to a
    submodule not imported yet (``paths`` reports it ``skipped`` "waiting for ...")."""
    if record.status == "skipped" and str(record.reason).startswith("waiting for "):
        return "pending"
    return str(record.status)


def summary_text(declared: "List[Tuple[str, str, str]]",
                 import_events: "List[Tuple[str, str, str]]") -> str:
    """The summary of these declarations, or "" when no section has anything to show:
    ``declared`` holds (what is shown, group, lazypatch name), ``import_events``
    (section title, description, lazypatch name)."""
    from ..reporting import report
    records = {record.name: record for record in report()}
    lines = ["=" * WIDTH, f"=== {BANNER} ===", "=" * WIDTH]
    if SUMMARY.show_import_events:
        titles: "Dict[str, List[str]]" = {}
        for title, description, name in import_events:
            record = records.get(name)
            used = record is not None and record.status == "applied"
            titles.setdefault(title, []).append(
                f"    - {description} ({'imported' if used else 'not imported'})")
        for title, entries in titles.items():
            lines += [f"  {title}:"] + entries + ["-" * WIDTH]
    for status, title, mark, flag, event in SECTIONS:
        if not _shown(getattr(SUMMARY, flag), event):
            continue
        grouped: "Dict[str, Dict[str, List[str]]]" = {}
        for shown, group, name in declared:
            record = records.get(name)
            if record is None or _status(record) != status:
                continue
            version = record.get("version")
            package = f"[{record.get('package') or record.target.split('.')[0]}]" + \
                (f" ({version})" if version else "")
            reason = f" ({record.reason})" if record.reason and status in ("skipped", "failed") \
                else ""
            unmet = record.get("unmet_requirements") or []
            if status == "pending" and unmet:
                reason = f" (will be skipped: {'; '.join(unmet)})"
            grouped.setdefault(package, {}).setdefault(group, []).append(
                f"        {mark} {shown}{reason}")
        if not grouped:
            continue
        lines.append(f"  {title}:")
        for package in sorted(grouped):
            lines.append(f"    {package}")
            for group in sorted(grouped[package]):
                lines += [f"      {group}:"] + grouped[package][group]
        lines.append("-" * WIDTH)
    if lines[-1] == "-" * WIDTH:
        lines.pop()
    if len(lines) == 3:
        return ""     # as in DrivingSDK: no section to show, no summary
    lines.append("=" * WIDTH)
    return "\n".join(lines)


def emit(text: str) -> None:
    """Log the summary at the configured level on rank 0 (stderr when the ``lazypatch``
    logger has no handler); nothing when disabled or below the logger's threshold."""
    if not text or not SUMMARY.enabled or summary_rank() != 0:
        return
    import logging
    logger = logging.getLogger("lazypatch")
    threshold = logger.level or LEVEL_NAMES["INFO"]   # unset: DrivingSDK's INFO
    if SUMMARY.level < threshold or logger.disabled:
        return
    if logger.hasHandlers():
        # handle(), not log(): the threshold above replaces the inherited root level.
        logger.handle(logger.makeRecord(logger.name, SUMMARY.level, __file__, 0, text,
                                        (), None))
    else:
        sys.stderr.write(f"[Patcher] {logging.getLevelName(SUMMARY.level)}: {text}\n")


EVENT_ACTIONS = {"debug": "log:debug", "info": "log:info", "warning": "log:warning",
                 "error": "log:error", "exception": "raise", "exit": "exit",
                 "silent": "silent"}


# The actions configure_patcher_logging chose, for the logger's own event methods
# (PatcherLogger.applied/skipped/failed); DrivingSDK's defaults otherwise.
CONFIGURED_ACTIONS: "Dict[str, str]" = {}
DEFAULT_ACTIONS = {"apply": "log:debug", "skip": "log:info", "failure": "log:warning"}


def configure_patcher_logging(on_apply: "Optional[str]" = None, on_skip: "Optional[str]" = None,
                              on_fail: "Optional[str]" = None,
                              on_error: "Optional[str]" = None) -> "PatcherLogger":
    """What applying, skipping and failing do for the patches of DrivingSDK patchers
    (``on_error``, an unexpected error, is a failure here too; ``on_fail`` wins).
    Every value is checked before any is set."""
    from ..events import set_event_action
    from .driving_sdk2_patches import TAG
    chosen = {"apply": on_apply, "skip": on_skip, "failure": on_fail or on_error}
    actions = {}
    for event, value in chosen.items():
        if value is None:
            continue
        action = EVENT_ACTIONS.get(str(value).lower()) if isinstance(value, str) else None
        if action is None:
            raise ValueError(f"configure_patcher_logging: {value!r} is not an action; use one "
                             f"of {', '.join(EVENT_ACTIONS)}")
        actions[event] = action
    for event, action in actions.items():
        set_event_action(event, action, selector=f"tag:{TAG}")
        CONFIGURED_ACTIONS[event] = action
        # A silent event also hides its section of the summary, as in DrivingSDK.
        if action == "silent":
            SILENT_EVENTS.add(event)
        else:
            SILENT_EVENTS.discard(event)
    return patcher_logger


def set_patcher_log_level(level: "Any") -> None:
    """The threshold of the ``lazypatch`` logger (where these patchers log and the
    summary goes)."""
    import logging
    logging.getLogger("lazypatch").setLevel(level)


class PatcherLogger:
    """DrivingSDK's ``patcher_logger``: ``configure`` (event actions),
    ``configure_summary``, ``set_level``, ``set_rank``/``set_rank_from_env`` (the
    summary is emitted on rank 0 only); each returns the logger for chaining."""

    def set_rank(self, rank: int) -> "PatcherLogger":
        """Use ``rank`` instead of the environment's for the summary's rank-0 filter."""
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
            raise ValueError(f"patcher_logger.set_rank: the rank must be an integer >= 0, "
                             f"got {rank!r}")
        RANK_OVERRIDE[:] = [rank]
        return self

    def set_rank_from_env(self) -> "PatcherLogger":
        """Read the rank from the launcher's variables again (the default)."""
        RANK_OVERRIDE.clear()
        return self

    @property
    def rank(self) -> int:
        return summary_rank()

    @property
    def is_main_process(self) -> bool:
        return summary_rank() == 0

    def configure(self, on_apply: "Optional[str]" = None, on_skip: "Optional[str]" = None,
                  on_fail: "Optional[str]" = None,
                  on_error: "Optional[str]" = None) -> "PatcherLogger":
        configure_patcher_logging(on_apply, on_skip, on_fail, on_error)
        return self

    def configure_summary(self, **settings: "Any") -> "PatcherLogger":
        configure_summary(**settings)
        return self

    def set_level(self, level: "Any") -> "PatcherLogger":
        set_patcher_log_level(level)
        return self

    def set_buffer_enabled(self, enabled: bool) -> "PatcherLogger":
        """Keep the event methods' records for ``records`` instead of acting at once
        (lazypatch's own summary comes from its report either way)."""
        self._buffered = bool(enabled)
        return self

    @property
    def records(self) -> "List[Tuple[str, str, str]]":
        """(event, target, reason) kept while buffering."""
        return self.__dict__.setdefault("_records", [])

    def _message(self, level: str, message: str) -> None:
        if summary_rank() != 0:
            return
        import logging
        logging.getLogger("lazypatch").log(LEVEL_NAMES[level], f"[Patcher] {message}")

    def debug(self, message: str) -> None:
        self._message("DEBUG", message)

    def info(self, message: str) -> None:
        self._message("INFO", message)

    def warning(self, message: str) -> None:
        self._message("WARNING", message)

    def error(self, message: str) -> None:
        self._message("ERROR", message)

    def _event(self, event: str, target: str, reason: str) -> None:
        action = CONFIGURED_ACTIONS.get(event, DEFAULT_ACTIONS[event])
        label = {"apply": "Applied", "skip": "Skipped", "failure": "Failed"}[event]
        message = f"{label}: {target}" + (f" ({reason})" if reason else "")
        if action == "raise":
            from ..errors import PatchError
            raise PatchError(message)
        if action == "exit":
            self.error(message)
            raise SystemExit(1)
        if getattr(self, "_buffered", False):
            self.records.append((event, target, reason))
            return
        if action.startswith("log:"):
            self._message(action[4:].upper(), message)

    def applied(self, target: str, package: str = "", patch_name: str = "",
                extra_info: str = "") -> None:
        """An applied patch, handled as ``configure_patcher_logging(on_apply=...)`` says."""
        self._event("apply", target, "")

    def skipped(self, target: str, reason: str = "", package: str = "", patch_name: str = "",
                extra_info: str = "") -> None:
        """A skipped patch, handled as ``on_skip`` says."""
        self._event("skip", target, reason)

    def failed(self, target: str, reason: str = "", package: str = "", patch_name: str = "",
               extra_info: str = "") -> None:
        """A failed patch, handled as ``on_fail`` says (``exception`` raises PatchError)."""
        self._event("failure", target, reason)


patcher_logger = PatcherLogger()

__all__ = ["configure_summary", "summary_text", "emit", "patcher_logger", "PatcherLogger",
           "SUMMARY", "SILENT_EVENTS", "EVENT_ACTIONS", "configure_patcher_logging",
           "set_patcher_log_level"]

"""What DrivingSDK 2.0 patchers say: event actions (``configure_patcher_logging``), the
log level, and the summary (``configure_summary``, ``patcher_logger``); see ``v2.patcher``.

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

Where: DrivingSDK's ``mx_driving.patcher`` logger at ``level`` (INFO by default), on
rank 0 only (the launcher's rank variables, or ``patcher_logger.set_rank(n)``).
As in DrivingSDK, ``set_patcher_log_level(logging.WARNING)`` hides an INFO
summary; where that logger has no handler at all, the summary is written to stderr
as ``[Patcher] INFO: ...`` (DrivingSDK's own handler).
A section is hidden when its ``show_*`` flag is False, or, left None, when
``configure_patcher_logging`` made that event ``silent``.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

TAG = "driving_sdk"   # the tag of the patches the 2.0 patchers declare
LOGGER_NAME = "mx_driving.patcher"   # DrivingSDK's logger, where its users look
LEVEL_NAMES = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}
BANNER = "MX-DRIVING PATCHER SUMMARY"
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


def summary_rank() -> int:
    """The rank the summary filter sees: ``patcher_logger``'s (``set_rank``, else the
    launcher's variables RANK, LOCAL_RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK)."""
    return patcher_logger.rank


def rank_from_environment() -> int:
    """The launcher's rank (its environment variables), 0 when launched without ranks."""
    from ...activate.configuration import current_rank
    return current_rank()


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
                      show_import_events: "Optional[bool]" = None) -> "PatcherLogger":
    """Whether the summary is emitted, at which logging level, and which sections it
    shows (None leaves a setting as it is), for the patchers' ``patcher_logger``."""
    return patcher_logger.configure_summary(enabled, level, show_applied, show_skipped,
                                            show_failed, show_import_events)


def _shown(flag: "Optional[bool]", event: str) -> bool:
    """A section's explicit flag, else shown unless its event's action is ``silent``."""
    return flag if flag is not None else patcher_logger.action(event) != "silent"


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
    from ...reports.reporting import report
    records = {record.name: record for record in report()}
    lines = ["=" * WIDTH, f"=== {BANNER} ===", "=" * WIDTH]
    if patcher_logger._summary.show_import_events:
        titles: "Dict[str, List[str]]" = {}
        for title, description, name in import_events:
            record = records.get(name)
            used = record is not None and record.status == "applied"
            titles.setdefault(title, []).append(
                f"    - {description} ({'imported' if used else 'not imported'})")
        for title, entries in titles.items():
            lines += [f"  {title}:"] + entries + ["-" * WIDTH]
    for status, title, mark, flag, event in SECTIONS:
        if not _shown(getattr(patcher_logger._summary, flag), event):
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
    """Log the summary at the configured level on rank 0 (stderr when DrivingSDK's logger
    has no handler); nothing when disabled or below the logger's threshold."""
    config = patcher_logger._summary
    if not text or not config.enabled or summary_rank() != 0:
        return
    import logging
    logger = patcher_logger._logger
    threshold = logger.level or LEVEL_NAMES["INFO"]   # unset: DrivingSDK's INFO
    if config.level < threshold or logger.disabled:
        return
    if logger.hasHandlers():
        # handle(), not log(): the threshold above replaces the inherited root level.
        logger.handle(logger.makeRecord(logger.name, config.level, __file__, 0, text,
                                        (), None))
    else:
        sys.stderr.write(f"[Patcher] {logging.getLevelName(config.level)}: {text}\n")


# DrivingSDK's event actions and what each is in lazypatch's event rules.
EVENT_ACTIONS = {"debug": "log:debug", "info": "log:info", "warning": "log:warning",
                 "error": "log:error", "exception": "raise", "exit": "exit",
                 "silent": "silent"}
DEFAULT_ACTIONS = {"apply": "info", "skip": "info", "failure": "warning", "error": "warning"}


def configure_patcher_logging(on_apply: "Optional[str]" = None, on_skip: "Optional[str]" = None,
                              on_fail: "Optional[str]" = None,
                              on_error: "Optional[str]" = None) -> "PatcherLogger":
    """What applying, skipping and failing do for the patches of DrivingSDK patchers
    (``on_error``, an unexpected error, is a failure here too; ``on_fail`` wins).
    Every value is checked before any is set; returns ``patcher_logger``."""
    return patcher_logger.configure(on_apply, on_skip, on_fail, on_error)


def set_patcher_log_level(level: "Any") -> "PatcherLogger":
    """The threshold of DrivingSDK's ``mx_driving.patcher`` logger (where these patchers
    log and the summary goes)."""
    return patcher_logger.set_level(level)


def _action(value: "Any", label: str) -> str:
    if not isinstance(value, str) or value.lower() not in EVENT_ACTIONS:
        raise ValueError(f"configure_patcher_logging: {label}={value!r} is not an action; use "
                         f"one of {', '.join(EVENT_ACTIONS)}")
    return value.lower()


class PatchInfo:
    """One event a ``PatcherLogger`` buffered for its summary."""

    __slots__ = ("target", "package", "patch_name", "reason", "extra_info")

    def __init__(self, target: str, package: str = "", patch_name: str = "", reason: str = "",
                 extra_info: str = "") -> None:
        self.target, self.package, self.patch_name = target, package, patch_name
        self.reason, self.extra_info = reason, extra_info

    def __repr__(self) -> str:
        return f"PatchInfo({self.target!r}, package={self.package!r}, " \
               f"patch_name={self.patch_name!r}, reason={self.reason!r})"


class PatcherLogger:
    """DrivingSDK's ``PatcherLogger``: event actions (``configure``), the summary's
    settings (``configure_summary``), the logger's threshold (``set_level``), the rank
    (``set_rank``/``set_rank_from_env``; only rank 0 logs, ``exception``/``exit`` act on
    every rank), and the event methods ``applied``/``skipped``/``failed``, buffered for
    ``flush_summary`` or acted on at once (``set_buffer_enabled(False)``). Each setter
    returns the logger for chaining.

    Its records go to DrivingSDK's ``mx_driving.patcher`` logger (given a ``[Patcher]``
    stderr handler and INFO when it has no handler, not propagated, as DrivingSDK does);
    so do the records of the patchers' patches' events. The module's ``patcher_logger`` is the
    one the patchers use: its ``configure`` also sets lazypatch's event actions for
    their patches (tag ``driving_sdk``), and its summary settings and rank decide the
    patchers' summary."""

    def __init__(self) -> None:
        import logging
        # DrivingSDK's logger, set up as DrivingSDK sets it up: a user who configured it
        # (handlers, level, assertLogs) gets these records where they look for them.
        self._logger = logging.getLogger(LOGGER_NAME)
        if not self._logger.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("[Patcher] %(levelname)s: %(message)s"))
            self._logger.addHandler(handler)
            self._logger.setLevel(logging.INFO)
        self._logger.propagate = False
        self._on_apply = DEFAULT_ACTIONS["apply"]
        self._on_skip = DEFAULT_ACTIONS["skip"]
        self._on_fail = DEFAULT_ACTIONS["failure"]
        self._on_error = DEFAULT_ACTIONS["error"]
        self._rank = 0
        self._rank_initialized = False
        self._summary = SummaryConfig()
        self._buffer_enabled = True
        self._applied_patches: "List[PatchInfo]" = []
        self._skipped_patches: "List[PatchInfo]" = []
        self._failed_patches: "List[PatchInfo]" = []
        self._skipped_modules: "List[str]" = []
        self._injected_imports: "List[str]" = []
        self._replaced_imports: "List[str]" = []

    # -- rank -------------------------------------------------------------------------

    def set_rank(self, rank: int) -> "PatcherLogger":
        """Use ``rank`` instead of the environment's (only rank 0 logs)."""
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
            raise ValueError(f"patcher_logger.set_rank: the rank must be an integer >= 0, "
                             f"got {rank!r}")
        self._rank, self._rank_initialized = rank, True
        return self

    def set_rank_from_env(self) -> "PatcherLogger":
        """Read the rank from the launcher's variables now."""
        self._rank, self._rank_initialized = rank_from_environment(), True
        return self

    @property
    def rank(self) -> int:
        """The rank: ``set_rank``'s, else the environment's, read at first use."""
        if not self._rank_initialized:
            self.set_rank_from_env()
        return self._rank

    @property
    def is_main_process(self) -> bool:
        return self.rank == 0

    # -- configuration ----------------------------------------------------------------

    def configure(self, on_apply: "Optional[str]" = None, on_skip: "Optional[str]" = None,
                  on_fail: "Optional[str]" = None,
                  on_error: "Optional[str]" = None) -> "PatcherLogger":
        """The action for each event (``debug``/``info``/``warning``/``error`` log at that
        level, ``exception`` raises ``PatchError``, ``exit`` exits, ``silent``); None
        leaves one as it is. Every value is checked before any is set."""
        chosen = {label: _action(value, label) for label, value in
                  (("on_apply", on_apply), ("on_skip", on_skip), ("on_fail", on_fail),
                   ("on_error", on_error)) if value is not None}
        for label, value in chosen.items():
            setattr(self, f"_{label}", value)
        if self is patcher_logger:
            _set_event_actions(chosen)
        return self

    def action(self, event: str) -> str:
        """The action configured for ``apply``, ``skip`` or ``failure``."""
        return {"apply": self._on_apply, "skip": self._on_skip,
                "failure": self._on_fail}[event]

    def configure_summary(self, enabled: "Optional[bool]" = None, level: "Any" = None,
                          show_applied: "Optional[bool]" = None,
                          show_skipped: "Optional[bool]" = None,
                          show_failed: "Optional[bool]" = None,
                          show_import_events: "Optional[bool]" = None) -> "PatcherLogger":
        """Whether the summary is emitted, at which level, and which sections it shows
        (None leaves a setting as it is). Every argument is checked first."""
        checked = {"enabled": _flag(enabled, "enabled"),
                   "show_applied": _flag(show_applied, "show_applied"),
                   "show_skipped": _flag(show_skipped, "show_skipped"),
                   "show_failed": _flag(show_failed, "show_failed"),
                   "show_import_events": _flag(show_import_events, "show_import_events"),
                   "level": None if level is None else _level(level)}
        for label, value in checked.items():
            if value is not None:
                setattr(self._summary, label, value)
        return self

    def set_level(self, level: "Any") -> "PatcherLogger":
        """The threshold of the logger these records go to."""
        self._logger.setLevel(level)
        return self

    def set_buffer_enabled(self, enabled: bool) -> "PatcherLogger":
        """Buffer the event methods' records for ``flush_summary`` (the default) or act
        on each at once."""
        self._buffer_enabled = bool(enabled)
        return self

    # -- events -----------------------------------------------------------------------

    def _handle(self, action: str, message: str) -> None:
        """Carry out ``action`` for ``message``: log it (rank 0 only), raise
        ``PatchError`` or exit (every rank), or nothing."""
        if action == "silent":
            return
        if action == "exception":
            from ...errors import PatchError
            raise PatchError(message)
        if action == "exit":
            if self.rank == 0:
                self._logger.error(message)
            sys.exit(1)
        if self.rank == 0:
            self._logger.log(LEVEL_NAMES[action.upper()], message)

    def applied(self, target: str, package: str = "", patch_name: str = "",
                extra_info: str = "") -> None:
        """An applied patch: buffered, or handled as ``on_apply`` says."""
        if self._buffer_enabled:
            self._applied_patches.append(PatchInfo(target, package, patch_name, "", extra_info))
        else:
            self._handle(self._on_apply, f"Applied: {target}")

    def skipped(self, target: str, reason: str = "", package: str = "", patch_name: str = "",
                extra_info: str = "") -> None:
        """A skipped patch: buffered, or handled as ``on_skip`` says."""
        if self._buffer_enabled:
            self._skipped_patches.append(PatchInfo(target, package, patch_name, reason,
                                                   extra_info))
        else:
            self._handle(self._on_skip, f"Skipped: {target}" + (f" ({reason})" if reason else ""))

    def failed(self, target: str, reason: str = "", package: str = "", patch_name: str = "",
               extra_info: str = "") -> None:
        """A failed patch: ``exception``/``exit`` act at once; else buffered, or handled as
        ``on_fail`` says."""
        message = f"Failed: {target}" + (f" ({reason})" if reason else "")
        if self._on_fail in ("exception", "exit") or not self._buffer_enabled:
            self._handle(self._on_fail, message)
        else:
            self._failed_patches.append(PatchInfo(target, package, patch_name, reason,
                                                  extra_info))

    def add_skipped_module(self, module_name: str) -> None:
        self._skipped_modules.append(module_name)

    def add_injected_import(self, import_path: str) -> None:
        self._injected_imports.append(import_path)

    def add_replaced_import(self, description: str) -> None:
        self._replaced_imports.append(description)

    def _message(self, level: str, message: str) -> None:
        if self.rank == 0:
            self._logger.log(LEVEL_NAMES[level], message)

    def debug(self, message: str) -> None:
        self._message("DEBUG", message)

    def info(self, message: str) -> None:
        self._message("INFO", message)

    def warning(self, message: str) -> None:
        self._message("WARNING", message)

    def error(self, message: str) -> None:
        """An unexpected error, handled as ``on_error`` says."""
        self._handle(self._on_error, message)

    # -- the buffered summary -----------------------------------------------------------

    def buffered_summary(self) -> str:
        """The summary of the buffered records (the layout of the patchers' summary), or
        "" when no shown section has any."""
        lines = ["=" * WIDTH, f"=== {BANNER} ===", "=" * WIDTH]
        if self._summary.show_import_events:
            for title, entries in (("Skipped Modules", self._skipped_modules),
                                   ("Injected Imports", self._injected_imports),
                                   ("Replaced Imports", self._replaced_imports)):
                if entries:
                    lines += [f"  {title}:"] + [f"    - {entry}" for entry in entries] + \
                        ["-" * WIDTH]
        for title, infos, mark, flag, action in (
                ("Applied Patches", self._applied_patches, "+", self._summary.show_applied,
                 self._on_apply),
                ("Skipped Patches", self._skipped_patches, "~", self._summary.show_skipped,
                 self._on_skip),
                ("Failed Patches", self._failed_patches, "!", self._summary.show_failed,
                 self._on_fail)):
            if not infos or not (flag if flag is not None else action != "silent"):
                continue
            grouped: "Dict[str, Dict[str, List[PatchInfo]]]" = {}
            for info in infos:
                grouped.setdefault(info.package or "other", {}).setdefault(
                    info.patch_name or "unknown", []).append(info)
            lines.append(f"  {title}:")
            for package in sorted(grouped):
                first = next(iter(grouped[package].values()))[0]
                lines.append(f"    [{package}]" + (f" ({first.extra_info})"
                                                   if first.extra_info else ""))
                for patch_name in sorted(grouped[package]):
                    lines.append(f"      {patch_name}:")
                    lines += [f"        {mark} {info.target}" +
                              (f" ({info.reason})" if info.reason else "")
                              for info in grouped[package][patch_name]]
            lines.append("-" * WIDTH)
        if lines[-1] == "-" * WIDTH:
            lines.pop()
        return "" if len(lines) == 3 else "\n".join(lines + ["=" * WIDTH])

    def flush_summary(self) -> None:
        """Log the buffered records' summary at the summary level (rank 0, if enabled),
        then clear the buffers."""
        text = self.buffered_summary()
        if text and self._summary.enabled and self.rank == 0:
            self._logger.log(self._summary.level, text)
        self.forget_buffered()

    def forget_buffered(self) -> None:
        """Clear the buffered records."""
        for buffer in (self._applied_patches, self._skipped_patches, self._failed_patches,
                       self._skipped_modules, self._injected_imports, self._replaced_imports):
            buffer.clear()


def _set_event_actions(chosen: "Dict[str, str]") -> None:
    """The patchers' patches (tag ``driving_sdk``) act as ``patcher_logger`` was told:
    ``on_fail`` (or else ``on_error``) for failures."""
    from ...decide.events import set_event_action
    events = {"apply": chosen.get("on_apply"), "skip": chosen.get("on_skip"),
              "failure": chosen.get("on_fail") or chosen.get("on_error")}
    for event, action in events.items():
        if action is not None:
            set_event_action(event, EVENT_ACTIONS[action], selector=f"tag:{TAG}")


patcher_logger = PatcherLogger()


def _route_event_records() -> None:
    from ...decide.events import LOGGER_BY_TAG
    LOGGER_BY_TAG[TAG] = LOGGER_NAME


_route_event_records()

__all__ = ["configure_summary", "summary_text", "emit", "patcher_logger", "PatcherLogger",
           "PatchInfo", "EVENT_ACTIONS", "configure_patcher_logging", "set_patcher_log_level",
           "rank_from_environment"]

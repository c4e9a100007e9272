"""What happens when a patch applies, is skipped or fails: one action per event.

Events: ``apply``, ``skip``, ``failure``. Actions:

* ``silent``: nothing beyond the report (and the DEBUG log line, if wanted);
* ``log`` or ``log:<level>``: a record on the ``lazypatch`` logger (INFO for
  apply and skip, ERROR for a failure, unless a level is given), or on the logger
  ``LOGGER_BY_TAG`` names for one of the patch's tags;
* ``warn``: a warning (``PatchAppliedWarning``, ``PatchSkippedWarning``,
  ``PatchFailedWarning``) through ``notices.notify``, so ``-W error`` cannot
  turn it into a crash;
* ``raise``: ``PatchError`` (an ``ImportError``) from the import that ran the
  patch; an application is undone first, so nothing of it stays;
* ``exit``: ``SystemExit`` with the message (exit status 1), after the same undo.

Where the action comes from, first found wins:

1. the patch's own ``events={...}`` given at registration;
2. selector rules, the latest first: ``set_event_action(event, action,
   selector="tag:openmmlab")`` calls, then ``LAZYPATCH_ON_<EVENT>`` items
   ``selector=action`` (a pack is chosen by its tag or name prefix, as
   ``LAZYPATCH_DISABLE`` chooses);
3. the global action: ``set_event_action(event, action)``, else the bare action
   of ``LAZYPATCH_ON_<EVENT>`` (TOML key ``on_<event>``);
4. strict mode (``LAZYPATCH_STRICT=1``, ``set_strict(True)``) makes the global
   failure action ``raise``, whatever 3 says: the strict switch of old,
   expressed here (rules 1 and 2 still choose for their patches);
5. the defaults: apply ``silent``, skip ``silent``, failure ``warn``.

Bad actions and events given in code raise ``ValueError`` at once; bad
values in the configuration warn (``ConfigurationWarning``, naming the
variable and the accepted values) and are ignored, as every setting does.

The rules live in ``state.STATE.events`` (an ``EventRules``, made when this
module is first imported, which is when an action is first set: activation
does not pay for it), changed under ``STATE.lock``; ``lazypatch.reset()``
clears them with the rest of the state.
"""

from __future__ import annotations

from ..state import STATE
from .selection import matches

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Dict, List, Mapping, Optional, Tuple

    from ..activate.configuration import Configuration
    from ..state import RegisteredPatch

APPLY = "apply"
SKIP = "skip"
FAILURE = "failure"
EVENTS = (APPLY, SKIP, FAILURE)

SILENT = "silent"
LOG = "log"
WARN = "warn"
RAISE = "raise"
EXIT = "exit"
ACTIONS = (SILENT, LOG, WARN, RAISE, EXIT)
LOG_LEVEL_NAMES = ("debug", "info", "warning", "error", "critical")

DEFAULTS = {APPLY: SILENT, SKIP: SILENT, FAILURE: WARN}

# Declared (declare_variable) by the package's __init__, which reads them without
# importing this module.
VARIABLES = {
    APPLY: "LAZYPATCH_ON_APPLY",
    SKIP: "LAZYPATCH_ON_SKIP",
    FAILURE: "LAZYPATCH_ON_FAILURE",
}


class PatchAppliedWarning(UserWarning):
    """A patch applied, and its ``apply`` action is ``warn``."""


class PatchSkippedWarning(UserWarning):
    """A patch was skipped, and its ``skip`` action is ``warn``."""


class EventRules:
    """Every source of an event's action except strict mode (see the module docstring)."""

    def __init__(self) -> None:
        self.per_patch: "Dict[str, Dict[str, str]]" = {}
        # event -> [(selector, action)], oldest first; the API's after the configuration's
        self.configured_selectors: "Dict[str, List[Tuple[str, str]]]" = {e: [] for e in EVENTS}
        self.selectors: "Dict[str, List[Tuple[str, str]]]" = {e: [] for e in EVENTS}
        self.configured_global: "Dict[str, str]" = {}
        self.global_actions: "Dict[str, str]" = {}
        self.active = False   # any rule at all: the common case skips every lookup
        self.adopted_values: "Tuple[str, ...]" = ("",) * len(EVENTS)

    def refresh(self) -> None:
        self.active = bool(self.per_patch or self.configured_global or self.global_actions
                           or any(self.selectors.values())
                           or any(self.configured_selectors.values()))

    def forget(self) -> None:
        """Back to no rule at all, in place (``lazypatch.reset()``); the configuration is
        adopted again."""
        with STATE.lock:
            self.__init__()  # type: ignore[misc]


def _rules() -> EventRules:
    """``STATE.events``, made on this module's first import. In place from then on:
    ``application`` binds it once, so reset clears it rather than replacing it."""
    with STATE.lock:
        if STATE.events is None:
            STATE.events = EventRules()
        return STATE.events


# The same object as STATE.events, bound here for the functions below and for the
# modules that read the rules on every application.
RULES = _rules()


def parse_action(value: object, where: str) -> str:
    """A valid action (``log:INFO`` normalised to ``log:info``); ValueError naming the choices."""
    if isinstance(value, str):
        action = value.strip().lower()
        if action in ACTIONS:
            return action
        head, colon, level = action.partition(":")
        if head == LOG and colon and level in LOG_LEVEL_NAMES:
            return action
    raise ValueError(f"{where}: {value!r} is not an action; use one of "
                     f"{', '.join(ACTIONS)}, or log:<level> with a level among "
                     f"{', '.join(LOG_LEVEL_NAMES)}")


def parse_event(value: object, where: str) -> str:
    if isinstance(value, str) and value.strip().lower() in EVENTS:
        return value.strip().lower()
    raise ValueError(f"{where}: {value!r} is not an event; use one of {', '.join(EVENTS)}")


def validate(events: "Optional[Mapping[str, str]]", patch_name: str) -> "Optional[Dict[str, str]]":
    """A patch's ``events={...}`` checked at registration: {event: action}, or None."""
    if events is None:
        return None
    if not hasattr(events, "items"):
        raise TypeError(f"patch {patch_name!r}: events must be a mapping such as "
                        f"{{'failure': 'raise'}}, got {events!r}")
    where = f"patch {patch_name!r}: events"
    return {parse_event(event, where): parse_action(action, f"{where}[{event!r}]")
            for event, action in events.items()}


def declare(patch_name: str, actions: "Optional[Dict[str, str]]") -> None:
    """Remember a registered patch's own actions (checked by ``validate``)."""
    if actions:
        with STATE.lock:
            RULES.per_patch[patch_name] = actions
            RULES.active = True


def set_event_action(event: str, action: str, selector: "Optional[str]" = None) -> None:
    """Set what ``event`` does for every patch (``selector`` None) or for the patches a
    selector chooses (a name, glob, pack prefix or ``tag:x``); later calls win."""
    event = parse_event(event, "set_event_action")
    action = parse_action(action, f"set_event_action({event!r}, ...)")
    if selector is not None and (not isinstance(selector, str) or not selector.strip()):
        raise ValueError(f"set_event_action: selector must be a patch name, glob, pack prefix "
                         f"or 'tag:...', got {selector!r}")
    with STATE.lock:
        if selector is None:
            RULES.global_actions[event] = action
        else:
            RULES.selectors[event].append((selector.strip(), action))
        RULES.active = True


def clear_event_actions(selector: "Optional[str]" = None) -> None:
    """Forget the ``set_event_action`` rules of ``selector`` (None: the global ones)."""
    with STATE.lock:
        if selector is None:
            RULES.global_actions.clear()
        else:
            for event in EVENTS:
                RULES.selectors[event] = [rule for rule in RULES.selectors[event]
                                          if rule[0] != selector]
        RULES.refresh()


def action_for(patch: "RegisteredPatch", event: str) -> str:
    """The action ``event`` takes for ``patch`` now (see the module docstring's order)."""
    if RULES.active:
        own = RULES.per_patch.get(patch.name)
        if own is not None and event in own:
            return own[event]
        if RULES.selectors[event] or RULES.configured_selectors[event]:
            for selector, action in reversed(RULES.configured_selectors[event]
                                             + RULES.selectors[event]):
                if matches(selector, patch):
                    return action
        chosen = RULES.global_actions.get(event) or RULES.configured_global.get(event)
        if event == FAILURE and STATE.strict:
            return RAISE
        if chosen:
            return chosen
    elif event == FAILURE and STATE.strict:
        return RAISE
    return DEFAULTS[event]


def actions_of(patch: "RegisteredPatch") -> "Dict[str, str]":
    """{event: action} for ``patch`` now."""
    return {event: action_for(patch, event) for event in EVENTS}


def adopt(configuration: "Configuration") -> None:
    """Read ``LAZYPATCH_ON_<EVENT>`` (environment first, then TOML ``on_<event>``) into the
    rules; a bad item warns, naming the variable and the accepted values, and is ignored.
    The same values adopted again (activation after ``import lazypatch``) say nothing."""
    import os

    from ..activate.configuration import alert
    values = tuple(os.environ.get(variable, configuration.extra.get(variable, ""))
                   for variable in VARIABLES.values())
    if values == RULES.adopted_values:
        return
    configured_global: "Dict[str, str]" = {}
    configured_selectors: "Dict[str, List[Tuple[str, str]]]" = {e: [] for e in EVENTS}
    for (event, variable), value in zip(VARIABLES.items(), values):
        for item in (part.strip() for part in value.split(",")):
            if not item:
                continue
            selector, equals, action = item.rpartition("=")
            try:
                chosen = parse_action(action, variable)
            except ValueError as error:
                alert(f"lazypatch: {error}; ignoring {item!r}")
                continue
            if equals and selector.strip():
                configured_selectors[event].append((selector.strip(), chosen))
            elif equals:
                alert(f"lazypatch: {variable}: {item!r} has no selector before '='; write "
                      f"'tag:pack={action}' or just '{action}'; ignoring it")
            else:
                configured_global[event] = chosen
    with STATE.lock:
        RULES.adopted_values = values
        RULES.configured_global = configured_global
        RULES.configured_selectors = configured_selectors
        RULES.refresh()


def adopt_configured(configuration: "Configuration") -> None:
    """``adopt`` when the configuration (or the environment) sets an event action or did
    before; otherwise nothing (the common case costs two dictionary lookups per event)."""
    import os
    extra = configuration.extra
    if any(RULES.adopted_values) or any(variable in os.environ or variable in extra
                                        for variable in VARIABLES.values()):
        adopt(configuration)


# --- acting ---------------------------------------------------------------------

def consequence(action: str) -> str:
    """What a failure's message says happens next."""
    if action == RAISE:
        # Name both ways this is asked for, so the user finds the switch they set.
        return ("The import stops (strict mode, LAZYPATCH_STRICT=1 or set_strict(), or an "
                "on_failure=raise action)")
    if action == EXIT:
        return "The program exits (on_failure=exit)"
    return "The import continues unpatched by it"


def act(patch: "RegisteredPatch", event: str, action: str, message: str,
        error: "Optional[BaseException]" = None) -> None:
    """Carry out ``action`` for ``event`` with ``message``; ``raise`` and ``exit`` raise."""
    if action == SILENT:
        return
    if action == RAISE:
        from ..errors import PatchError
        raise PatchError(message, patch_name=patch.name, target=patch.target) from error
    if action == EXIT:
        raise SystemExit(message)
    if action == WARN:
        from ..errors import PatchFailedWarning
        from ..notices import notify  # only on this path: see benchmarks/COSTS.md
        category: "Any" = {APPLY: PatchAppliedWarning, SKIP: PatchSkippedWarning,
                           FAILURE: PatchFailedWarning}[event]
        notify(message, category)
        return
    import logging
    level_name = action.partition(":")[2] or ("error" if event == FAILURE else "info")
    logger_name = next((LOGGER_BY_TAG[tag] for tag in patch.tags if tag in LOGGER_BY_TAG),
                       "lazypatch")
    logging.getLogger(logger_name).log(getattr(logging, level_name.upper()), message)


#: Tags whose patches log their events to another logger than ``lazypatch``: code
#: written for another patcher (``driving_sdk``) is watched through that patcher's logger.
LOGGER_BY_TAG: "Dict[str, str]" = {}


def on_applied(patch: "RegisteredPatch", changes: int) -> "Optional[str]":
    """The apply event; returns the action when it is ``raise``/``exit`` (the caller undoes
    the application first, then calls ``act``), else acts and returns None."""
    action = action_for(patch, APPLY)
    if action == SILENT:
        return None
    if action in (RAISE, EXIT):
        return action
    act(patch, APPLY, action, applied_message(patch, changes))
    return None


def applied_message(patch: "RegisteredPatch", changes: int) -> str:
    return (f"lazypatch: patch {patch.name!r} applied to {patch.target!r} "
            f"({changes} change(s))")


def waiting(reason: str) -> Exception:
    """A ``SkipPatch`` that says the patch moved to wait for a submodule: not a skip the
    user acts on (it applies later), so it fires no skip event. Raise it in a patch."""
    from ..errors import SkipPatch
    skip = SkipPatch(reason)
    skip.lazypatch_waiting = True  # type: ignore[attr-defined]
    return skip


def on_skipped(patch: "RegisteredPatch", reason: str) -> None:
    """The skip event (requirements unmet, ``patch.skip``, a precheck that said no)."""
    action = action_for(patch, SKIP)
    if action != SILENT:
        act(patch, SKIP, action, f"lazypatch: patch {patch.name!r} on {patch.target!r} "
                                 f"skipped: {reason}")


__all__ = ["EVENTS", "ACTIONS", "RULES", "set_event_action", "clear_event_actions",
           "action_for", "actions_of", "validate", "declare", "adopt", "act",
           "PatchAppliedWarning", "PatchSkippedWarning"]

"""lazypatch: monkey patches applied the moment their target module is imported.

Register with ``@when_imported("pkg.mod")`` (after the module body ran) or
``@before_import("pkg.mod")`` (before it runs). Nothing is imported to
register a patch; every change a patch makes through its ``patch`` context is
recorded, reported by ``report()`` and undone exactly by ``unpatch()``.

Importing this package is cheap by design (standard library only, no
``typing``, no ``logging``, no ``wrapt``): it sits on the start-up path of
every process it activates.
"""

import sys

from .activate.configuration import declare_variable, setting, setting_source
from .declare import registration as _registration
from .declare.registration import declare_opt_in_pack, register
from .state import AFTER, BEFORE, STATE, STATUSES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterable, List, Optional, TypeVar

    from .apply.ledger import PatchContext
    from .apply.scopes import patched
    from .decide.requirements import installed_version, version_matches
    from .decide.selection import matches, set_strict
    from .errors import (
        ConfigurationWarning,
        LatePatchWarning,
        NewAttributeWarning,
        PatchConflictWarning,
        PatchError,
        PatchFailedWarning,
        UndoError,
    )
    from .on_demand import (
        activation_info,
        disable,
        enable,
        event_actions,
        inject,
        install,
        is_patched,
        notify_module_loaded,
        original,
        patches,
        registry_entry,
        render_report,
        replace,
        replace_module,
        report,
        source_drift,
        uninstall,
        unpatch,
        unpatch_all,
        warn_configuration,
        wrap,
        write_report,
    )
    from .reports.reporting import PatchRecord

    PatchFunction = TypeVar("PatchFunction", bound=Callable[..., Any])

__version__ = "0.1.0"

# Public names whose modules nothing on the activation path needs: imported on
# first use (PEP 562), so that `import lazypatch.auto` stays within its budget.
_LAZY_NAMES = {"PatchRecord": "reports.reporting", "patched": "apply.scopes",
               "StandInError": "declare.boundaries", "PatchContext": "apply.ledger",
               "set_event_action": "decide.events", "clear_event_actions": "decide.events",
               "PatchAppliedWarning": "decide.events", "PatchSkippedWarning": "decide.events",
               "ATTRIBUTE": "slots", "PatchError": "errors", "UndoError": "errors",
               "LatePatchWarning": "errors", "PatchConflictWarning": "errors",
               "PatchFailedWarning": "errors", "ConfigurationWarning": "errors",
               "NewAttributeWarning": "errors", "installed_version": "decide.requirements",
               "version_matches": "decide.requirements", "matches": "decide.selection",
               "set_strict": "decide.selection"}
# The facade's functions that activation never calls live in on_demand.py, loaded when
# one is first used (its docstring says what they cost here).
_ON_DEMAND = ("activation_info", "report", "render_report", "write_report", "unpatch",
              "unpatch_all", "enable", "disable", "original", "is_patched", "install",
              "uninstall", "patches", "source_drift", "replace_module", "inject",
              "notify_module_loaded", "replace", "wrap", "registry_entry", "event_actions",
              "warn_configuration")
_LAZY_NAMES.update(dict.fromkeys(_ON_DEMAND, "on_demand"))
# Modules `import lazypatch` loaded before activation stopped loading them
# (benchmarks/COSTS.md): still attributes of the package, imported when first asked for.
_LAZY_MODULES = ("notices", "slots", "errors")

# The event-action settings (events.py), declared here so that they are known (not
# reported as typos, listed by `lazypatch run --help`) without importing events.py
# at activation: it is loaded only when a rule is set (benchmarks/COSTS.md).
EVENT_VARIABLES = ("LAZYPATCH_ON_APPLY", "LAZYPATCH_ON_SKIP", "LAZYPATCH_ON_FAILURE")
for _variable in EVENT_VARIABLES:
    declare_variable(_variable, f"what a patch does on {_variable[13:].lower()}: silent, "
                                f"log[:level], warn, raise or exit; 'selector=action' "
                                f"items set it for a pack (tag:x) or a patch")


def __getattr__(name: str) -> "Any":
    from importlib import import_module
    if name in _LAZY_MODULES:
        return import_module(f"{__name__}.{name}")   # the import sets the attribute
    module = _LAZY_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'lazypatch' has no attribute {name!r}")
    imported = import_module(f"{__name__}.{module}")
    if module == "apply.ledger":
        imported.process_ledger()   # so that a PatchContext made by hand has the default ledger
    value = getattr(imported, name)
    globals()[name] = value
    return value


def __dir__() -> "List[str]":
    """Every name of the package, those loaded when first used included."""
    return sorted(set(globals()) | set(_LAZY_NAMES) | set(_LAZY_MODULES))


def _adopt_environment() -> None:
    # LAZYPATCH_DISABLE, _ENABLE and _STRICT hold for every patch, however
    # lazypatch was imported: a script that only does `import lazypatch` and
    # registers its own patches obeys them too. Activation adopts the same
    # (memoised) configuration again, so nothing warns twice.
    from .activate.configuration import adopt_without_rules, read
    configuration = read()
    if not adopt_without_rules(configuration):
        from .decide.selection import configure
        configure(configuration)
    # LAZYPATCH_ON_APPLY/_SKIP/_FAILURE: events.py is imported only when one is set
    # (or was, so that a reset forgets it), never on the plain activation path.
    import os
    if "lazypatch.decide.events" in sys.modules or any(
            name in os.environ or name in configuration.extra for name in EVENT_VARIABLES):
        from .decide.events import adopt_configured
        adopt_configured(configuration)


_adopt_environment()


def _decorator(target: str, phase: str, name: "Optional[str]", priority: int,
               requires: "Iterable[str]", tags: "Iterable[str]", enabled: bool,
               events: "Optional[Dict[str, str]]" = None
               ) -> "Callable[[PatchFunction], PatchFunction]":
    _registration.validate_target(target)          # fail at the decorator line, not later
    requirements = _registration.checked_requirements(requires)   # checked once, here

    def decorate(function: "PatchFunction") -> "PatchFunction":
        register(function, target, phase=phase, name=name, priority=priority,
                 requires=requirements, tags=tags, enabled=enabled, events=events)
        return function
    return decorate


def when_imported(target: str, *, name: "Optional[str]" = None, priority: int = 0,
                  requires: "Iterable[str]" = (), tags: "Iterable[str]" = (),
                  enabled: bool = True, events: "Optional[Dict[str, str]]" = None
                  ) -> "Callable[[PatchFunction], PatchFunction]":
    """Decorator: call the function as ``fn(module)`` or ``fn(module, patch)`` right
    after ``target``'s body has run (at once if it already has). Returns it unchanged.

    Patches on one module run by ascending ``priority``, ties in registration
    order. ``requires`` are PEP 508 strings checked against installed
    distributions; unmet means status ``skipped``. ``events``: see ``register``.
    """
    return _decorator(target, AFTER, name, priority, requires, tags, enabled, events)


def before_import(target: str, *, name: "Optional[str]" = None, priority: int = 0,
                  requires: "Iterable[str]" = (), tags: "Iterable[str]" = (),
                  enabled: bool = True, events: "Optional[Dict[str, str]]" = None
                  ) -> "Callable[[PatchFunction], PatchFunction]":
    """Decorator: call the function with the new, still empty module object of
    ``target`` just before its body runs. Same arguments as ``when_imported``."""
    return _decorator(target, BEFORE, name, priority, requires, tags, enabled, events)


def reset() -> None:
    """Undo every live patch and forget every registration, selection rule, class-patch
    declaration and strict setting: the state of a fresh ``import lazypatch`` (the
    environment's settings are adopted again). The finder stays installed.

    The one supported way for tests to start clean. Raises ``UndoError`` (after
    forgetting everything) if some change could not be undone.
    """
    failure: "Optional[BaseException]" = None
    from .apply import undo
    try:
        undo.unpatch_all("undone by reset()")
    except BaseException as error:   # forget everything first, then report
        failure = error
    STATE.forget_everything()
    events = sys.modules.get(f"{__name__}.events")
    if events is not None:
        events.RULES.forget()
    _adopt_environment()
    if failure is not None:
        raise failure


def stand_in(module_name: str, attributes: "Optional[Dict[str, Any]]" = None, *,
             name: "Optional[str]" = None, tags: "Iterable[str]" = (),
             enabled: bool = True, submodules: bool = False) -> str:
    """Provide an empty module for ``module_name`` (any depth, missing parents too) when
    nothing installed provides it, carrying ``attributes``; reading any other public
    attribute raises ``StandInError`` naming the patch. With ``submodules``, every
    ``module_name.x`` imported gets a stand-in too. Returns the patch name."""
    if not submodules and isinstance(module_name, str) and "." not in module_name \
            and module_name not in sys.modules and isinstance(attributes, (dict, type(None))) \
            and all(isinstance(key, str) and key.isidentifier() for key in attributes or {}):
        # A top-level module not imported yet: declared without loading boundaries.py,
        # which loads if the module is ever imported (_deferred_stand_in says why).
        from .watch.importer import BOUNDARY_TAG
        _registration.validate_target(module_name)
        chosen = [tags] if isinstance(tags, str) else list(tags)
        if BOUNDARY_TAG not in chosen:
            chosen.append(BOUNDARY_TAG)
        patch_name = name or f"stand_in:{module_name}"
        return _registration.register(
            _deferred_stand_in(module_name, dict(attributes or {}), patch_name, chosen),
            module_name, phase=BEFORE, name=patch_name, priority=_registration.FIRST,
            tags=chosen, enabled=enabled)
    from .declare.boundaries import stand_in as declare
    return declare(module_name, attributes, name=name, tags=tags, enabled=enabled,
                   submodules=submodules)


def _deferred_stand_in(module_name: str, attributes: "Dict[str, Any]", patch_name: str,
                      tags: "List[str]") -> "Callable[[Any, Any], None]":
    """The patch function of a top-level stand-in whose boundary is made on first need,
    exactly as ``boundaries.stand_in`` makes it.

    A built-in pack that declares a stand-in at activation (``driving_sdk_api``'s
    ``mx_driving``) would otherwise import the boundary machinery into every process,
    about 2M instructions of the 10 ms activation budget (benchmarks/COSTS.md), for a
    module almost no program imports. Registration checks a plain function cheaply; the
    boundary is made by ``boundaries`` when the finder asks for it
    (``importer.boundary_of``) or the patch runs, and is then the function's
    ``lazypatch_boundary`` like any other."""
    made: "List[Any]" = []

    def real() -> "Callable[..., None]":
        if not made:
            from .declare.boundaries import Boundary, _stand_in_function
            declaration = Boundary(module_name)
            declaration.patch_name = patch_name
            declaration.attributes = dict(attributes)
            declaration.tags = list(tags)
            made.append(_stand_in_function(declaration, dict(attributes)))
            provide_stand_in.lazypatch_boundary = declaration  # type: ignore[attr-defined]
        return made[0]

    def provide_stand_in(module: "Any", patch: "Any") -> None:
        real()(module, patch)
    provide_stand_in.__doc__ = f"Stand-in for {module_name}, which is not installed"
    provide_stand_in.lazypatch_deferred = real  # type: ignore[attr-defined]
    return provide_stand_in


def driving_sdk_patcher() -> "Dict[str, str]":
    """Where lazypatch's own ``mx_driving.patcher`` (DrivingSDK's patcher API) is:
    ``module``, its import name, and ``directory``, the folder holding that package (for
    an ``mx_driving`` stand-in's ``__path__``). Imports nothing."""
    import os
    return {"module": "lazypatch.driving_sdk.package.patcher",
            "directory": os.path.join(os.path.dirname(os.path.abspath(__file__)), "driving_sdk",
                                      "package")}


__all__ = [
    "when_imported", "before_import", "register", "report", "render_report", "write_report",
    "unpatch", "unpatch_all", "enable", "disable", "patched", "install", "uninstall",
    "set_strict", "original", "is_patched", "installed_version", "version_matches",
    "PatchContext", "PatchRecord", "PatchError", "UndoError", "LatePatchWarning",
    "PatchConflictWarning", "PatchFailedWarning", "ConfigurationWarning", "NewAttributeWarning",
    "STATUSES", "matches", "patches", "declare_variable", "setting", "setting_source", "source_drift",
    "reset", "activation_info", "stand_in", "replace_module", "inject", "notify_module_loaded",
    "replace", "wrap", "StandInError", "registry_entry", "set_event_action",
    "clear_event_actions", "event_actions", "PatchAppliedWarning", "PatchSkippedWarning",
    "declare_opt_in_pack", "warn_configuration", "driving_sdk_patcher",
]

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


def activation_info() -> "Dict[str, object]":
    """Whether and how this process activated lazypatch: ``activated_by`` ("" when not),
    ``milliseconds``, ``imported_before``, ``strict``, ``report_path`` and ``sources``."""
    from .activate.activation import activation_info as info
    return info()


def _application() -> "Any":
    # Loaded on first use, not at `import lazypatch` (see benchmarks/COSTS.md).
    from .apply import application
    return application


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


def report() -> "List[PatchRecord]":
    """A snapshot of every registered patch, in registration order.

    Each record has ``name``, ``target``, ``status`` (one of ``STATUSES``),
    ``reason``, ``error`` (traceback text of a failure), ``duration_ms``,
    ``changes``, ``conflicts`` and more; it is a dict usable as attributes.
    """
    from .reports.reporting import report as build_report
    return build_report()


def render_report(records: "Optional[List[Any]]" = None, format: str = "table",
                  all: bool = False, diff: bool = False) -> str:
    """Render report records (default: the current ``report()``) as ``"table"`` or ``"json"``;
    the table summarises patches that are off by default or cannot apply here unless ``all``;
    ``diff`` adds the source diff of every replaced function, original against replacement."""
    from .reports.reporting import one_time_imports_line, render
    footers = []
    if records is None:
        footers.append(one_time_imports_line(STATE.one_time_imports))
    if records is None and STATE.opt_in_packs:
        # This process's own report: say which packs were never loaded here, since
        # none of their patches is in it (registry/__init__.py OPT_IN).
        footers.append(f"opt-in packs not loaded here: {', '.join(sorted(STATE.opt_in_packs))} "
                       f"(name one in LAZYPATCH_ENABLE, or `lazypatch list --all`, to see "
                       f"its patches)")
    footer = "\n".join(line for line in footers if line)
    return render(report() if records is None else records, format, all=all, diff=diff,
                  footer=footer)


def write_report(path: str) -> str:
    """Write the current report as JSON to ``path`` now, atomically; return the path
    written. ``{host}``, ``{node}``, ``{rank}``, ``{local_rank}``, ``{worker}`` and
    ``{pid}`` are filled in. Raises OSError when it cannot."""
    from .reports.reporting import write_report as write
    return write(path)


def unpatch(name: str) -> None:
    """Undo patch ``name`` exactly, on every module object it touched, and keep it from
    re-applying (its aliases and submodule stand-ins too). Imports nothing. Raises ``UndoError`` if part of it
    could not be restored."""
    patch = STATE.catalog.find(name)
    from .apply import undo
    from .declare.paths import derived_from
    for derived in derived_from(name):   # aliases, stand-ins of submodules
        undo.unpatch(STATE.catalog.find(derived), f"undone by unpatch({name!r})")
    undo.unpatch(patch, "undone by unpatch()")


def unpatch_all() -> None:
    """Undo every applied patch, newest first, and keep them from re-applying.

    Every undo is attempted; one ``UndoError`` naming each failure is raised at the end.
    """
    from .apply import undo
    undo.unpatch_all("undone by unpatch_all()")


def enable(*selectors: str) -> "List[str]":
    """Enable the patches chosen by names, globs or tags; apply those whose target
    is imported. Returns the names enabled; raises KeyError for a selector that
    matches nothing."""
    return _application().enable(selectors)


def disable(*selectors: str) -> "List[str]":
    """Keep the chosen patches from applying from now on (``unpatch`` undoes one)."""
    return _application().disable(selectors)


def original(owner: "Any", name: str) -> "Any":
    """The value ``owner.name`` had before any live patch changed it.

    Raises AttributeError if the owner had no such attribute of its own.
    """
    from .apply.ledger import process_ledger
    from .slots import ATTRIBUTE, MISSING, describe
    value = process_ledger().first_original(ATTRIBUTE, owner, name)
    if value is MISSING:
        for base in getattr(owner, "__mro__", ())[1:]:
            value = base.__dict__.get(name, MISSING)
            if value is not MISSING:
                return value
        raise AttributeError(f"{describe(owner)} has no attribute {name!r}")
    return value


def is_patched(owner: "Any", name: str) -> bool:
    """Whether a live patch currently changes ``owner.name``."""
    from .apply.ledger import process_ledger
    from .slots import ATTRIBUTE
    return process_ledger().is_patched(ATTRIBUTE, owner, name)


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


def install() -> None:
    """Put lazypatch's finder first on ``sys.meta_path`` (registration does this too) and,
    as activation does, make ``sys.meta_path`` guard a finder the moment it is put in
    front of it (``importer.MetaPath``: the list object is replaced once)."""
    from .watch.importer import guard_the_front
    guard_the_front(STATE.finder)
    _registration.ensure_finder()


def uninstall() -> None:
    """Take the finder off ``sys.meta_path``, and the check of its front off each import;
    applied patches stay (see ``unpatch_all``)."""
    from .watch.importer import uninstall_finder
    if STATE.finder is not None:
        uninstall_finder(STATE.finder)


def patches(target: str, **options: "Any") -> "Callable[[type], type]":
    """Class decorator: the decorated class's methods (plain, class, static,
    properties) replace those of class ``target`` ("pkg.mod.ClassName") when
    its module is imported; undone exactly. See ``lazypatch.declare.classes``."""
    from .declare.classes import patches as declare_class_patch
    return declare_class_patch(target, **options)


def source_drift(owner: "Any", name: str, pinned: "Iterable[str]",
                 copied_from: str) -> "Optional[str]":
    """Why an edited copy of ``owner.name`` must not replace it (the installed source's
    SHA-256 is not among ``pinned``, or another patch wrapped it), or None when it may."""
    from .decide.pinning import source_drift as check
    return check(owner, name, pinned, copied_from)


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



def replace_module(module_name: str, replacement: "Any", *, name: "Optional[str]" = None,
                   tags: "Iterable[str]" = (), enabled: bool = True) -> str:
    """``import module_name`` gives ``replacement`` (an object, or a "pkg.mod:attr" string
    resolved at that import); the real module never runs. Returns the patch name."""
    from .declare.boundaries import replace_module as declare
    return declare(module_name, replacement, name=name, tags=tags, enabled=enabled)


def inject(module_name: str, names: "Dict[str, Any]", *, name: "Optional[str]" = None,
           priority: int = 0, requires: "Iterable[str]" = (), tags: "Iterable[str]" = (),
           enabled: bool = True) -> str:
    """Set ``names`` (values or "pkg.mod:attr" strings, resolved then) on ``module_name``
    when it is imported. Returns the patch name."""
    from .declare.boundaries import inject as declare
    return declare(module_name, names, name=name, priority=priority, requires=requires,
                   tags=tags, enabled=enabled)


def notify_module_loaded(module: "Any", name: "Optional[str]" = None) -> "List[str]":
    """Apply the ``when_imported`` patches of a module placed into ``sys.modules`` by
    hand (wrapt's ``notify_module_loaded``); the names of the patches applied to it."""
    from .declare.boundaries import notify_module_loaded as notify
    return notify(module, name)


def replace(path: str, replacement: "Any", *, name: "Optional[str]" = None,
            rebind: bool = False, priority: int = 0, requires: "Iterable[str]" = (),
            tags: "Iterable[str]" = (), enabled: bool = True,
            precheck: "Optional[Callable[[], Any]]" = None,
            runtime_check: "Optional[Callable[..., Any]]" = None,
            aliases: "Iterable[str]" = (), events: "Optional[Dict[str, str]]" = None) -> str:
    """Replace the attribute at dotted ``path`` ("pkg.mod.Class.method", or
    "pkg.mod:Class.method") with ``replacement`` (or a "pkg.mod:attr" string) when the
    module that holds it is imported; imports nothing now. ``precheck()`` false at that
    time: skipped; ``runtime_check(*args, **kwargs)`` false for a call: the original
    runs; ``aliases``: other paths bound to the same original (re-exports), rebound
    too, each when its module is imported. Returns the patch name."""
    from .declare.paths import replace as declare
    return declare(path, replacement, name=name, rebind=rebind, priority=priority,
                   requires=requires, tags=tags, enabled=enabled, precheck=precheck,
                   runtime_check=runtime_check, aliases=aliases, events=events)


def wrap(path: str, wrapper: "Any", *, name: "Optional[str]" = None, rebind: bool = False,
         priority: int = 0, requires: "Iterable[str]" = (), tags: "Iterable[str]" = (),
         enabled: bool = True, aliases: "Iterable[str]" = (),
         events: "Optional[Dict[str, str]]" = None) -> str:
    """Wrap the callable at dotted ``path`` with ``wrapper(wrapped, instance, args,
    kwargs)`` when the module that holds it is imported (``aliases`` as for
    ``replace``). Returns the patch name."""
    from .declare.paths import wrap as declare
    return declare(path, wrapper, name=name, rebind=rebind, priority=priority,
                   requires=requires, tags=tags, enabled=enabled, aliases=aliases,
                   events=events)


def registry_entry(registry: str, key: str, replacement: "Any", *,
                   name: "Optional[str]" = None, priority: int = 0,
                   requires: "Iterable[str]" = (), tags: "Iterable[str]" = (),
                   enabled: bool = True, events: "Optional[Dict[str, str]]" = None,
                   force: bool = True, precheck: "Optional[Callable[[], Any]]" = None) -> str:
    """Make entry ``key`` of the mmengine/mmcv registry at ``registry`` ("mmdet.registry:MODELS")
    give ``replacement`` (or a "pkg.mod:attr" string) once that module is imported, so
    ``build`` returns it; a key that did not exist is added. Undone exactly (an added
    entry removed, a replaced one restored). ``force=False`` fails rather than replace.
    Returns the patch name."""
    from .declare.registry_entries import registry_entry as declare
    return declare(registry, key, replacement, name=name, priority=priority,
                   requires=requires, tags=tags, enabled=enabled, events=events,
                   force=force, precheck=precheck)


def warn_configuration(message: str) -> None:
    """Warn about a bad setting the way lazypatch does (``ConfigurationWarning``): at the
    user's own line (or ``<lazypatch activation>``), once per process tree, and never as
    an exception, whatever the warnings filters: packs use it for their settings."""
    from .errors import ConfigurationWarning
    from .notices import notify
    notify(str(message), ConfigurationWarning)


def driving_sdk_patcher() -> "Dict[str, str]":
    """Where lazypatch's own ``mx_driving.patcher`` (DrivingSDK's patcher API) is:
    ``module``, its import name, and ``directory``, the folder holding that package (for
    an ``mx_driving`` stand-in's ``__path__``). Imports nothing."""
    import os
    return {"module": "lazypatch.driving_sdk.package.patcher",
            "directory": os.path.join(os.path.dirname(os.path.abspath(__file__)), "driving_sdk",
                                      "package")}


def event_actions(name: str) -> "Dict[str, str]":
    """What each event (apply, skip, failure) does for patch ``name`` now: ``silent``,
    ``log[:level]``, ``warn``, ``raise`` or ``exit`` (see ``set_event_action``)."""
    from .decide.events import actions_of
    return actions_of(STATE.catalog.find(name))




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

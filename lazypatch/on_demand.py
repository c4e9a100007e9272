"""The public functions that activation never calls, loaded the first time one is used.

``lazypatch.report``, ``lazypatch.wrap`` and the rest of the facade's functions listed in
its ``_ON_DEMAND`` are found here by the facade's ``__getattr__`` (PEP 562) and kept
as the package's own attributes from then on: each function a module holds costs every
process its code object and function object at start and again at exit, about 16,000
instructions, and these 22 were about 0.3M of activation (benchmarks/COSTS.md).
"""

from .state import STATE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterable, List, Optional

    from .reports.reporting import PatchRecord


def activation_info() -> "Dict[str, object]":
    """Whether and how this process activated lazypatch: ``activated_by`` ("" when not),
    ``milliseconds``, ``imported_before``, ``strict``, ``report_path`` and ``sources``."""
    from .activate.activation import activation_info as info
    return info()


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


def disable(*selectors: str) -> "List[str]":
    """Keep the chosen patches from applying from now on (``unpatch`` undoes one)."""
    from .apply import application
    return application.disable(selectors)


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


def install() -> None:
    """Put lazypatch's finder first on ``sys.meta_path`` (registration does this too) and,
    as activation does, make ``sys.meta_path`` guard a finder the moment it is put in
    front of it (``importer.MetaPath``: the list object is replaced once)."""
    from .declare.registration import ensure_finder
    from .watch.importer import guard_the_front
    guard_the_front(STATE.finder)
    ensure_finder()


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


def event_actions(name: str) -> "Dict[str, str]":
    """What each event (apply, skip, failure) does for patch ``name`` now: ``silent``,
    ``log[:level]``, ``warn``, ``raise`` or ``exit`` (see ``set_event_action``)."""
    from .decide.events import actions_of
    return actions_of(STATE.catalog.find(name))


def enable(*selectors: str) -> "List[str]":
    """Enable the patches chosen by names, globs or tags; apply those whose target
    is imported. Returns the names enabled; raises KeyError for a selector that
    matches nothing."""
    from .apply import application
    return application.enable(selectors)


def replace_module(module_name: str, replacement: "Any", *, name: "Optional[str]" = None,
                   tags: "Iterable[str]" = (), enabled: bool = True) -> str:
    """``import module_name`` gives ``replacement`` (an object, or a "pkg.mod:attr" string
    resolved at that import); the real module never runs. Returns the patch name."""
    from .declare.boundaries import replace_module as declare
    return declare(module_name, replacement, name=name, tags=tags, enabled=enabled)


def warn_configuration(message: str) -> None:
    """Warn about a bad setting the way lazypatch does (``ConfigurationWarning``): at the
    user's own line (or ``<lazypatch activation>``), once per process tree, and never as
    an exception, whatever the warnings filters: packs use it for their settings."""
    from .errors import ConfigurationWarning
    from .notices import notify
    notify(str(message), ConfigurationWarning)

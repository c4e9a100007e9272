"""lazypatch: monkey patches applied the moment their target module is imported.

Register with ``@when_imported("pkg.mod")`` (after the module body ran) or
``@before_import("pkg.mod")`` (before it runs). Nothing is imported to
register a patch; every change a patch makes through its ``patch`` context is
recorded, reported by ``report()`` and undone exactly by ``unpatch()``.

Importing this package is cheap by design (standard library only, no
``typing``, no ``logging``, no ``wrapt``): it sits on the start-up path of
every process it activates.
"""

from __future__ import annotations

from . import dispatch as _dispatch
from .catalog import (
    AFTER,
    BEFORE,
    DISABLED,
    REVERTED,
    STATUSES,
    PatchRecord,
    matches,
    record_of,
    set_enabled,
    validate_target,
)
from .conditions import installed_version, parse_requirements, version_matches
from .config import declare_variable, setting
from .context import PatchContext, is_patched, original
from .errors import (
    ConfigurationWarning,
    LatePatchWarning,
    PatchConflictWarning,
    PatchError,
    PatchFailedWarning,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable, List, Optional, TypeVar, Union

    from .conditions import Requirement

    PatchFunction = TypeVar("PatchFunction", bound=Callable[..., Any])

__version__ = "0.1.0"


def register(function: "Callable[..., Any]", target: str, *, phase: str = AFTER,
             name: "Optional[str]" = None, priority: float = 0,
             requires: "Iterable[Union[str, Requirement]]" = (), tags: "Iterable[str]" = (),
             enabled: bool = True) -> str:
    """Register ``function`` as a patch on module ``target``; return its name.

    The non-decorator form of ``when_imported``/``before_import`` (``phase``
    is ``"after"`` or ``"before"``). Applies at once if the target is already
    imported; never imports it.
    """
    if phase not in (AFTER, BEFORE):
        raise ValueError(f"phase must be {AFTER!r} or {BEFORE!r}, got {phase!r}")
    patch = _dispatch.CATALOG.add(function, target, phase=phase, name=name,
                                  priority=priority, requires=requires, tags=tags,
                                  enabled=enabled)
    _dispatch.ensure_finder()
    _dispatch.apply_to_imported(patch)
    return patch.name


def _decorator(target: str, phase: str, name: "Optional[str]", priority: float,
               requires: "Iterable[str]", tags: "Iterable[str]",
               enabled: bool) -> "Callable[[PatchFunction], PatchFunction]":
    validate_target(target)              # fail at the decorator line, not later
    requirements = parse_requirements(requires)   # parsed once; register() takes them as they are

    def decorate(function: "PatchFunction") -> "PatchFunction":
        register(function, target, phase=phase, name=name, priority=priority,
                 requires=requirements, tags=tags, enabled=enabled)
        return function
    return decorate


def when_imported(target: str, *, name: "Optional[str]" = None, priority: float = 0,
                  requires: "Iterable[str]" = (), tags: "Iterable[str]" = (),
                  enabled: bool = True) -> "Callable[[PatchFunction], PatchFunction]":
    """Decorator: call the function as ``fn(module)`` or ``fn(module, patch)`` right
    after ``target``'s body has run (at once if it already has). Returns it unchanged.

    Patches on one module run by ascending ``priority``, ties in registration
    order. ``requires`` are PEP 508 strings checked against installed
    distributions; unmet means status ``skipped``.
    """
    return _decorator(target, AFTER, name, priority, requires, tags, enabled)


def before_import(target: str, *, name: "Optional[str]" = None, priority: float = 0,
                  requires: "Iterable[str]" = (), tags: "Iterable[str]" = (),
                  enabled: bool = True) -> "Callable[[PatchFunction], PatchFunction]":
    """Decorator: call the function with the new, still empty module object of
    ``target`` just before its body runs. Same arguments as ``when_imported``."""
    return _decorator(target, BEFORE, name, priority, requires, tags, enabled)


def report() -> "List[PatchRecord]":
    """A snapshot of every registered patch, in registration order.

    Each record has ``name``, ``target``, ``status`` (one of ``STATUSES``),
    ``reason``, ``error`` (traceback text of a failure), ``duration_ms``,
    ``changes``, ``conflicts`` and more; it is a dict usable as attributes.
    """
    return [record_of(patch) for patch in _dispatch.CATALOG.patches()]


def render_report(records: "Optional[List[Any]]" = None, format: str = "table") -> str:
    """Render report records (default: the current ``report()``) as ``"table"`` or ``"json"``."""
    from .reporting import render
    return render(report() if records is None else records, format)


def _lookup(name: str) -> "Any":
    patch = _dispatch.CATALOG.by_name.get(name)
    if patch is None:
        known = ", ".join(sorted(_dispatch.CATALOG.by_name)[:10]) or "none registered"
        raise KeyError(f"no patch named {name!r}; registered patches include: {known} "
                       f"(see lazypatch.report() or `lazypatch list`)")
    return patch


def unpatch(name: str) -> None:
    """Undo patch ``name`` exactly and keep it from re-applying. Imports nothing."""
    patch = _lookup(name)
    set_enabled(patch, False, "unpatched")
    _dispatch.revert(patch, reason="undone by unpatch()")


def unpatch_all() -> None:
    """Undo every applied patch, newest first, and keep them from re-applying."""
    applied = sorted((patch for patch in _dispatch.CATALOG.patches() if patch.context is not None),
                     key=lambda patch: patch.applied_order, reverse=True)
    for patch in applied:
        _dispatch.revert(patch, reason="undone by unpatch_all()")
    for patch in _dispatch.CATALOG.patches():
        set_enabled(patch, False, "unpatched")


def enable(*selectors: str) -> "List[str]":
    """Enable the patches chosen by names, globs or tags; apply those whose target
    is imported. Returns the names enabled; raises KeyError for a selector that
    matches nothing."""
    chosen, unmatched = _dispatch.CATALOG.select(selectors)
    if unmatched:
        raise KeyError(f"no patch matches {', '.join(map(repr, unmatched))}; "
                       f"see lazypatch.report() for names and tags")
    for patch in chosen:
        set_enabled(patch, True, "")
        _dispatch.apply_to_imported(patch)
    return [patch.name for patch in chosen]


def disable(*selectors: str) -> "List[str]":
    """Keep the chosen patches from applying from now on (``unpatch`` undoes one)."""
    chosen, unmatched = _dispatch.CATALOG.select(selectors)
    if unmatched:
        raise KeyError(f"no patch matches {', '.join(map(repr, unmatched))}; "
                       f"see lazypatch.report() for names and tags")
    for patch in chosen:
        set_enabled(patch, False, "disabled by disable()")
    return [patch.name for patch in chosen]


class patched:
    """Context manager: enable and apply the chosen patches for a scope, undo on exit.

    ``with lazypatch.patched("a.b", tags=["compat"]): ...`` selects by names
    (or globs) and tags, including patches registered with ``enabled=False``.
    Patches that were already applied before the block are left as they were.
    """

    def __init__(self, *names: str, tags: "Iterable[str]" = ()) -> None:
        tags = [tags] if isinstance(tags, str) else list(tags)
        self._selectors = list(names) + [f"tag:{tag}" for tag in tags]
        self._saved: "List[Any]" = []
        self.names: "List[str]" = []

    def __enter__(self) -> "patched":
        chosen, unmatched = _dispatch.CATALOG.select(self._selectors)
        if unmatched or not self._selectors:
            raise KeyError(f"patched(): no patch matches "
                           f"{', '.join(map(repr, unmatched)) or 'an empty selection'}; "
                           f"pass patch names, globs or tags=[...]")
        _dispatch.ensure_finder()
        for patch in chosen:
            already_applied = patch.context is not None
            self._saved.append((patch, patch.enabled, already_applied))
            if not already_applied:
                set_enabled(patch, True, "")
                _dispatch.apply_to_imported(patch)
        self.names = [patch.name for patch in chosen]
        return self

    def __exit__(self, *exc_info: "Any") -> None:
        for patch, was_enabled, already_applied in reversed(self._saved):
            if already_applied:
                continue
            # Back to the state before the scope: a default-off patch reads "disabled" again.
            _dispatch.revert(patch, REVERTED if was_enabled else DISABLED,
                             "scope of lazypatch.patched() ended")
            set_enabled(patch, was_enabled, "scope of lazypatch.patched() ended")
        self._saved = []


def install() -> None:
    """Put lazypatch's finder first on ``sys.meta_path`` (registration does this too)."""
    _dispatch.ensure_finder()


def uninstall() -> None:
    """Take the finder off ``sys.meta_path``; applied patches stay (see ``unpatch_all``)."""
    from .importer import uninstall_finder
    uninstall_finder(_dispatch.FINDER)


def patches(target: str, **options: "Any") -> "Callable[[type], type]":
    """Class decorator: the decorated class's methods (plain, class, static,
    properties) replace those of class ``target`` ("pkg.mod.ClassName") when
    its module is imported; undone exactly. See ``lazypatch.classes``."""
    from .classes import patches as declare_class_patch
    return declare_class_patch(target, **options)


def source_drift(owner: "Any", name: str, pinned: "Iterable[str]",
                 copied_from: str) -> "Optional[str]":
    """Why an edited copy of ``owner.name`` must not replace it (the installed source's
    SHA-256 is not among ``pinned``, or another patch wrapped it), or None when it may."""
    from .pinning import source_drift as check
    return check(owner, name, pinned, copied_from)


def set_strict(strict: bool = True) -> None:
    """In strict mode a failing patch fails its target's import (``PatchError``)."""
    _dispatch.SETTINGS.strict = bool(strict)


__all__ = [
    "when_imported", "before_import", "register", "report", "render_report",
    "unpatch", "unpatch_all", "enable", "disable", "patched", "install", "uninstall",
    "set_strict", "original", "is_patched", "installed_version", "version_matches",
    "PatchContext", "PatchRecord", "PatchError", "LatePatchWarning",
    "PatchConflictWarning", "PatchFailedWarning", "ConfigurationWarning",
    "STATUSES", "matches", "patches", "declare_variable", "setting", "source_drift",
]

"""The catalog of registered patches, keyed by target module name.

The import finder asks one question on every import in the process: "is
anything watching this name?". That must be a single dict membership test,
so patches are indexed by target name (``by_target``) and the catalog never
scans all patches on an import. Selection by name, glob or tag (for
``LAZYPATCH_ENABLE``/``LAZYPATCH_DISABLE`` and ``patched()``) is the only
place that walks every patch, and it runs at configuration time.
"""

from __future__ import annotations

from .conditions import Requirement, parse_requirements

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~40M instructions to import; keep it off the activation path
    from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

PENDING = "pending"
APPLIED = "applied"
SKIPPED = "skipped"
FAILED = "failed"
DISABLED = "disabled"
REVERTED = "reverted"
STATUSES = (PENDING, APPLIED, SKIPPED, FAILED, DISABLED, REVERTED)

BEFORE = "before"   # runs on the new module object before its body executes
AFTER = "after"     # runs right after the body executed



class Patch:
    """One registered patch and everything known about it.

    Instances are owned by the catalog; users see them through ``report()``
    as plain dictionaries.
    """

    __slots__ = (
        "name", "target", "function", "phase", "priority", "sequence",
        "requires", "tags", "enabled_by_default", "enabled", "status",
        "reason", "error", "context", "module", "duration_ms",
        "applications", "conflicts", "late_references", "takes_context",
        "untracked_changes", "history", "description", "applied_order",
        "notes", "note_providers", "namespace_snapshots",
    )

    def __init__(self, *, name: str, target: str, function: Callable[..., Any],
                 phase: str, priority: float, sequence: int,
                 requires: Tuple[Requirement, ...], tags: frozenset,
                 enabled: bool, takes_context: bool) -> None:
        self.name = name
        self.target = target
        self.function = function
        self.phase = phase
        self.priority = priority
        self.sequence = sequence
        self.requires = requires
        self.tags = tags
        self.enabled_by_default = enabled
        self.enabled = enabled
        self.status = PENDING if enabled else DISABLED
        self.reason = "" if enabled else "disabled by default; enable it by name or tag"
        self.error = ""
        self.context: Any = None          # the PatchContext of the live application
        self.module: Any = None           # the module object it is applied to
        self.duration_ms = 0.0
        self.applications = 0
        self.conflicts: List[str] = []
        self.late_references: List[str] = []
        self.untracked_changes: List[str] = []
        # (target namespace before, after, module, changes) of the last application,
        # until the report turns them into untracked_changes (see untracked()).
        self.namespace_snapshots: Any = None
        self.takes_context = takes_context
        self.history: List[str] = []
        self.applied_order = 0
        self.notes: List[str] = []
        self.note_providers: List[Callable[[], Any]] = []
        doc = getattr(function, "__doc__", None) or ""
        self.description = doc.strip().split("\n", 1)[0]

    def untracked(self) -> List[str]:
        """Names of the target module the last application changed without going
        through ``patch`` (plain assignments): they cannot be undone."""
        if self.namespace_snapshots is not None:
            before, after, module, changes = self.namespace_snapshots
            self.namespace_snapshots = None
            # (name, id) pairs compared as sets: C-speed even for torch's ~1,500 globals;
            # the snapshots keep the old objects alive, so no id can have been reused.
            difference = set(zip(before, map(id, before.values()))) ^ \
                set(zip(after, map(id, after.values())))
            tracked = {change.key for change in changes if change.owner is module}
            self.untracked_changes = sorted({name for name, _ in difference} - tracked)
        return self.untracked_changes

    @property
    def order(self) -> Tuple[float, int]:
        return (self.priority, self.sequence)

    def __repr__(self) -> str:
        return f"<Patch {self.name!r} on {self.target!r}: {self.status}>"


def validate_target(target: object) -> str:
    """Return ``target`` if it is an absolute dotted module name, else raise."""
    if not isinstance(target, str):
        raise TypeError(f"patch target must be a module name string such as "
                        f"'mmcv.ops', got {target!r} ({type(target).__name__})")
    if not target:
        raise ValueError("patch target is empty: name the module to patch, "
                         "such as 'mmcv.ops'")
    if target.startswith("."):
        raise ValueError(f"patch target {target!r} is relative: use the absolute "
                         f"module name, such as 'mmcv.ops'")
    for part in target.split("."):
        if not part.isidentifier():   # C-speed; also rejects "" from ".." and "1mod"
            raise ValueError(f"patch target {target!r} is not a valid dotted module "
                             f"name: {part!r} is not an identifier")
    return target


def _count_positional_parameters(function: Callable[..., Any]) -> Tuple[int, int, bool]:
    """(required, maximum, has *args) for a callable, cheaply.

    ``inspect.signature`` pulls in a large import graph; for plain functions
    the code object answers the same question.
    """
    # A bound method forwards __code__ to its function, whose first parameter
    # (self) is already supplied: count it out.
    bound_self = 1 if getattr(function, "__self__", None) is not None and \
        hasattr(function, "__func__") else 0
    code = getattr(function, "__code__", None)
    if code is None:
        import inspect
        try:
            parameters = list(inspect.signature(function).parameters.values())
        except (TypeError, ValueError):
            return (0, 2, True)
        positional = [p for p in parameters
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        required = sum(1 for p in positional if p.default is p.empty)
        varargs = any(p.kind == p.VAR_POSITIONAL for p in parameters)
        return (required, len(positional), varargs)
    count = code.co_argcount - bound_self
    defaults = getattr(function, "__defaults__", None) or ()
    varargs = bool(code.co_flags & 0x04)
    return (count - len(defaults), count, varargs)


def takes_context(function: Callable[..., Any], name: str) -> bool:
    """True if ``function`` is called as ``fn(module, patch)``, False for ``fn(module)``.

    Raises TypeError naming the patch when it can be called neither way.
    """
    if not callable(function):
        raise TypeError(f"patch {name!r}: {function!r} is not callable; decorate a "
                        f"function taking (module) or (module, patch)")
    required, maximum, varargs = _count_positional_parameters(function)
    if required <= 2 and (maximum >= 2 or varargs):
        return True
    if required <= 1 and maximum >= 1:
        return False
    raise TypeError(f"patch {name!r}: function {getattr(function, '__qualname__', function)!r} "
                    f"must accept (module) or (module, patch); it takes "
                    f"{required} required positional argument(s)")


class Catalog:
    """Every registered patch, indexed by name and by target module."""

    def __init__(self) -> None:
        self.by_name: Dict[str, Patch] = {}
        # target module name -> patches on it, kept sorted by (priority, sequence).
        # The finder holds a reference to this very dict.
        self.by_target: Dict[str, List[Patch]] = {}
        self._sequence = 0
        # Selection rules from configuration; re-applied to patches registered later.
        self.enable_rules: List[str] = []
        self.disable_rules: List[str] = []

    def add(self, function: Callable[..., Any], target: object, *, phase: str,
            name: Optional[str], priority: float, requires: Iterable[Union[str, Requirement]],
            tags: Iterable[str], enabled: bool) -> Patch:
        """Validate and register one patch; raise ValueError/TypeError on bad input."""
        target = validate_target(target)
        if name is None:
            module_name = getattr(function, "__module__", None) or "__main__"
            qualified = getattr(function, "__qualname__", None) or repr(function)
            name = f"{module_name}.{qualified}"
        elif not isinstance(name, str) or not name.strip():
            raise ValueError(f"patch name must be a non-empty string, got {name!r}")
        if name in self.by_name:
            existing = self.by_name[name]
            raise ValueError(f"a patch named {name!r} is already registered (on "
                             f"{existing.target!r}); pass a unique name=...")
        if not isinstance(priority, (int, float)) or isinstance(priority, bool):
            raise TypeError(f"patch {name!r}: priority must be a number, got {priority!r}")
        if isinstance(tags, str):
            tags = (tags,)
        tag_set = frozenset(tags)
        for tag in tag_set:
            if not isinstance(tag, str) or not tag:
                raise ValueError(f"patch {name!r}: tags must be non-empty strings, got {tag!r}")
        parsed = parse_requirements(requires)
        self._sequence += 1
        patch = Patch(name=name, target=target, function=function, phase=phase,
                      priority=priority, sequence=self._sequence, requires=parsed,
                      tags=tag_set, enabled=enabled,
                      takes_context=takes_context(function, name))
        if self.enable_rules and any(matches(rule, patch) for rule in self.enable_rules):
            set_enabled(patch, True, "enabled by configuration")
        if self.disable_rules and any(matches(rule, patch) for rule in self.disable_rules):
            set_enabled(patch, False, "disabled by configuration")
        self.by_name[name] = patch
        patches = self.by_target.get(target)
        if patches is None:
            # A new list object, assigned only when complete: the finder may be
            # reading this dict from another thread without a lock.
            self.by_target[target] = [patch]
        else:
            # Walk back from the end: a new patch usually sorts last (same priority,
            # highest sequence). No bisect import: this runs at activation.
            updated = list(patches)
            position = len(updated)
            while position and _order(updated[position - 1]) > patch.order:
                position -= 1
            updated.insert(position, patch)
            self.by_target[target] = updated
        return patch

    def remove(self, patch: Patch) -> None:
        """Forget a patch (it must already be undone)."""
        self.by_name.pop(patch.name, None)
        remaining = [other for other in self.by_target.get(patch.target, ()) if other is not patch]
        if remaining:
            self.by_target[patch.target] = remaining
        else:
            self.by_target.pop(patch.target, None)

    def select(self, selectors: Iterable[str]) -> Tuple[List[Patch], List[str]]:
        """Patches matching any selector (name, glob or tag), and unmatched selectors."""
        chosen: Dict[str, Patch] = {}
        unmatched = []
        for selector in selectors:
            hits = [patch for patch in self.by_name.values() if matches(selector, patch)]
            if not hits:
                unmatched.append(selector)
            for patch in hits:
                chosen[patch.name] = patch
        return sorted(chosen.values(), key=_order), unmatched

    def patches(self) -> List[Patch]:
        return sorted(self.by_name.values(), key=lambda patch: patch.sequence)


def _order(patch: Patch) -> Tuple[float, int]:
    return (patch.priority, patch.sequence)


def set_enabled(patch: Patch, enabled: bool, reason: str) -> None:
    patch.enabled = enabled
    if not enabled and patch.status == PENDING:
        patch.status, patch.reason = DISABLED, reason
    elif enabled and patch.status == DISABLED:
        patch.status, patch.reason = PENDING, ""


def is_glob(selector: str) -> bool:
    return any(character in selector for character in "*?[")


def matches(selector: str, patch: Patch) -> bool:
    """Whether a name, glob, or tag selector chooses ``patch``.

    ``*`` alone means every patch. A glob matches names; fnmatch (which
    imports ``re``) is only loaded when a selector really is a glob.
    """
    if selector == "*" or selector == patch.name or selector in patch.tags:
        return True
    if selector.startswith("tag:"):
        return selector[4:] in patch.tags
    if is_glob(selector):
        from fnmatch import fnmatchcase
        return fnmatchcase(patch.name, selector)
    # A dotted prefix selects a whole family: "openmmlab" selects "openmmlab.mmcv_ext".
    return patch.name.startswith(selector + ".")


class PatchRecord(dict):
    """A snapshot of one patch's state, as ``report()`` returns it.

    A plain dict (JSON-ready) whose keys can also be read as attributes:
    ``record["status"] == record.status``.
    """

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


def _provided_notes(patch: Patch) -> List[str]:
    lines: List[str] = []
    for provider in patch.note_providers:
        try:
            provided = provider()
        except Exception as error:  # a report must never fail because of one pack
            lines.append(f"note provider failed: {type(error).__name__}: {error}")
            continue
        if provided is None:
            continue
        lines.extend([provided] if isinstance(provided, str) else [str(item) for item in provided])
    return lines


def record_of(patch: Patch) -> PatchRecord:
    """The report record of a patch at this moment."""
    context = patch.context
    changes = [change.as_dict() for change in context.changes] if context is not None else []
    return PatchRecord(
        name=patch.name, target=patch.target, phase=patch.phase, status=patch.status,
        reason=patch.reason, error=patch.error, enabled=patch.enabled,
        enabled_by_default=patch.enabled_by_default, priority=patch.priority,
        tags=sorted(patch.tags), requires=[str(item) for item in patch.requires],
        description=patch.description, duration_ms=round(patch.duration_ms, 4),
        applications=patch.applications, changes=changes,
        conflicts=list(patch.conflicts), late_references=list(patch.late_references),
        untracked_changes=list(patch.untracked()),
        undoable=not patch.untracked(), history=list(patch.history),
        notes=list(patch.notes) + _provided_notes(patch),
    )

"""Declarative patches by dotted path: ``replace("pkg.sub.Class.method", "my_pkg.mod:fn")``.

Where the module part of a dotted path ends cannot be known without
importing (is ``pkg.sub.helpers`` a module or an attribute?), and nothing
may be imported at registration. So the patch is registered on the longest
prefix already in ``sys.modules`` (else the top-level package) and walks
the rest when that module is imported:

* a component found as an attribute is followed (a class, a nested class,
  a submodule its parent imported);
* a component that is a submodule not imported yet (found by the finders
  without executing anything: its parent is imported) moves the patch to
  that submodule, reported ``skipped`` with "waiting for ..." until it is
  imported, then applied there.

This is what the DrivingSDK custom-patch pattern needs: a patch on ``pkg``
whose function changes ``pkg.sub.attr`` runs when ``pkg``'s ``__init__``
ends, before ``pkg.sub`` exists, and fails with a misleading "partially
initialized module" error; declared by path it attaches to ``pkg.sub``.

``"pkg.mod:Class.attr"`` says where the module ends, and the patch is
registered on ``pkg.mod`` itself. Replacements given as strings are
resolved only when the patch is applied.

``aliases``: other dotted paths bound to the same original (a re-export such
as ``mmdet.models.FPN`` of ``mmdet.models.necks.fpn.FPN``). Each alias is a
patch of its own, named ``<name>.alias:<path>`` (so selecting the name selects
it, and ``unpatch(name)`` undoes it too), registered and resolved like the
main path, when its own module is imported. Once the main path is applied, an
alias that holds the original is rebound to the very object the main path now
holds (one wrapper, not two); an alias that reaches the same attribute (the
same class by another path) has nothing more to change and says so; an alias
that holds something else fails, naming both. Applied before the main path,
an alias makes the same change on its own.
"""

from __future__ import annotations

import sys

from ..apply.application import apply_to_imported
from ..decide.events import waiting
from ..slots import ATTRIBUTE, MISSING, is_unloaded_lazy_module, own_dict, read_slot, write_slot
from ..state import APPLIED, STATE
from .boundaries import resolve, validate_reference
from .registration import register, validate_target

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable, List, Optional, Tuple


def split_path(path: str) -> "Tuple[str, List[str], bool]":
    """(module to register on, attribute path after it, whether the module is fixed)."""
    if not isinstance(path, str) or not path.strip():
        raise TypeError(f"a dotted path such as 'pkg.mod.Class.method' is required, got {path!r}")
    if ":" in path:
        module, _, attributes = path.partition(":")
        parts = attributes.split(".")
        validate_target(module)
        if not all(part.isidentifier() for part in parts):
            raise ValueError(f"{path!r} must look like 'pkg.mod:Class.method'")
        return module, parts, True
    parts = path.split(".")
    if len(parts) < 2 or not all(part.isidentifier() for part in parts):
        raise ValueError(f"{path!r} must be a dotted path to an attribute inside a module, "
                         f"such as 'pkg.mod.function' or 'pkg.mod.Class.method'")
    # The longest prefix already imported (never importing one to find out); the
    # attribute itself is never a module to register on.
    for end in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in sys.modules:
            return prefix, parts[end:], False
    return parts[0], parts[1:], False


class PathPatch:
    """One declaration: where it stands now and how to change the attribute it names."""

    def __init__(self, path: str, module: str, attributes: "List[str]", fixed: bool,
                 change: "Callable[[Any, Any, str], None]") -> None:
        self.path = path
        self.module = module          # the module it is registered on now
        self.attributes = attributes  # the path after that module
        self.fixed = fixed
        self.change = change
        self.patch_name = ""
        # (owner, attribute, value before, value after) of the last application,
        # for the aliases to compare against; None until applied.
        self.applied: "Optional[Tuple[Any, str, Any, Any]]" = None

    def apply(self, module: "Any", patch: "Any",
              precheck: "Optional[Callable[[], Any]]" = None) -> None:
        """The patch function: walk to the owner, ask ``precheck``, change the attribute.

        The precheck is asked only once the owner is reached: a patch registered on an
        imported parent package that waits for its submodule must not run a precheck
        at the parent's import (a precheck that imports the target would make the
        patch eager, importing the very module it waits for)."""
        owner: "Any" = module
        for depth, attribute in enumerate(self.attributes[:-1]):
            found = self._step(owner, attribute)
            if found is MISSING:
                submodule = f"{getattr(owner, '__name__', '')}.{attribute}"
                if not self.fixed and isinstance(owner, type(sys)) and \
                        hasattr(owner, "__path__") and _module_exists(submodule):
                    self._move_to(submodule, self.attributes[depth + 1:])
                    raise waiting(f"waiting for {submodule!r} to be imported ({self.path!r} "
                                  f"is inside it); applied when it is")
                where = ".".join([self.module] + self.attributes[:depth])
                stand_in = vars(owner).get("__lazypatch_stand_in__") \
                    if isinstance(owner, type(sys)) else None
                if stand_in:
                    # An empty stand-in has no attributes at all: "renamed or moved?"
                    # would send the user looking in the wrong place.
                    top = where.split(".", 1)[0]
                    cause = (f"{where!r} is an empty stand-in (patch {stand_in!r}) because "
                             f"{top!r} could not be imported: not installed, or its project "
                             f"is not on sys.path (run from the project's checkout, or add it "
                             f"to PYTHONPATH)")
                    if not self.fixed:
                        # Like a patch on a package that is not installed: it waits for
                        # the module it is inside, which applies it if it is ever imported.
                        self._move_to(submodule, self.attributes[depth + 1:])
                        raise waiting(f"waiting for {submodule!r} to be imported "
                                      f"({self.path!r} is inside it): {cause}")
                    raise AttributeError(f"{self.path!r} cannot be patched: {cause}")
                raise AttributeError(f"{where!r} has no attribute {attribute!r}"
                                     f"{nearest_attribute(owner, attribute)}, so {self.path!r} "
                                     f"cannot be patched (renamed or moved in this version?)")
            owner = found
        if precheck is not None and not precheck():
            patch.skip(f"precheck {getattr(precheck, '__qualname__', precheck)!r} said no")
        attribute = self.attributes[-1]
        before = _current_value(owner, attribute)
        self.change(patch, owner, attribute)
        self.applied = (owner, attribute, before, _current_value(owner, attribute))

    @staticmethod
    def _step(owner: "Any", attribute: str) -> "Any":
        namespace = own_dict(owner)
        if isinstance(owner, type(sys)):
            # A module's own namespace first: getattr would run a lazy module's
            # __getattr__ (and import) for a submodule that is not imported yet.
            if isinstance(namespace, dict) and attribute in namespace:
                return namespace[attribute]
            submodule = sys.modules.get(f"{getattr(owner, '__name__', '')}.{attribute}")
            if submodule is not None and not is_unloaded_lazy_module(submodule) \
                    and not _still_executing(submodule):
                return submodule
            if hasattr(owner, "__path__"):
                return MISSING   # perhaps a submodule: the caller finds out without importing
        try:
            return getattr(owner, attribute)
        except AttributeError:
            return MISSING

    def _move_to(self, module: str, attributes: "List[str]") -> None:
        """Register the patch on ``module`` from now on (the finder then watches it)."""
        previous = (self.module, self.attributes)
        self.module, self.attributes = module, attributes   # before: moving may apply it
        if not move_patch(self.patch_name, module):
            self.module, self.attributes = previous


def nearest_attribute(owner: "Any", attribute: str) -> str:
    """`` (did you mean 'norm'?)`` for the owner's attribute closest to ``attribute``,
    or "" (difflib is imported only here, on the way to an error message)."""
    try:
        names = [name for name in dir(owner) if not name.startswith("__")]
    except Exception:
        return ""
    from difflib import get_close_matches
    close = get_close_matches(attribute, names, n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def move_patch(patch_name: str, module: str) -> bool:
    """Register patch ``patch_name`` on ``module`` from now on (the finder then watches it);
    applied at once if ``module`` is imported by then. False if no such patch."""
    with STATE.lock:
        registered = STATE.catalog.by_name.get(patch_name)
        if registered is None:
            return False
        STATE.catalog.remove(registered)
        registered.target = module
        STATE.catalog.add(registered)
    # In sys.modules but still executing, or an unloaded lazy module: applied
    # when its body ends, as registration would do.
    if module in sys.modules:
        apply_to_imported(registered)
    return True


def module_exists(name: str) -> bool:
    """Whether the finders can find ``name``; its parent is imported, so nothing runs."""
    return _module_exists(name)


def _current_value(owner: "Any", attribute: str) -> "Any":
    """The raw value in the owner's own slot, else what attribute lookup finds (inherited)."""
    value = read_slot(ATTRIBUTE, owner, attribute)
    if value is MISSING:
        value = getattr(owner, attribute, MISSING)
    return value


def _still_executing(module: "Any") -> bool:
    """Whether ``module``'s body is still running (its import has not finished)."""
    namespace = own_dict(module)
    spec = namespace.get("__spec__") if isinstance(namespace, dict) else None
    return bool(getattr(spec, "_initializing", False))


def _module_exists(name: str) -> bool:
    """Whether the finders can find ``name``; its parent is imported, so nothing runs."""
    from importlib.util import find_spec
    try:
        return find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _checked_replacement(replacement: "Any", runtime_check: "Callable[..., Any]"
                         ) -> "Callable[[Any, Any, str], None]":
    """Replace through a wrapper that calls the replacement only for calls
    ``runtime_check`` accepts, the original for the others (DrivingSDK's AtomicPatch)."""
    def change(patch: "Any", owner: "Any", attribute: str) -> None:
        value = resolve(replacement)
        warned: "list" = []

        def dispatch(wrapped: "Any", instance: "Any", args: tuple, kwargs: dict) -> "Any":
            # wrapt passes a method's self (or a classmethod's class) as ``instance``;
            # the replacement and the check take it as their first argument, as the
            # original function would.
            full = args if instance is None else (instance,) + tuple(args)
            try:
                accepted = runtime_check(*full, **kwargs)
            except Exception as error:
                # A check that cannot decide keeps the original (DrivingSDK's rule): the
                # call is not the check's to break. Said once, so it is not silent.
                if not warned:
                    warned.append(error)
                    from ..notices import notify
                    notify(f"lazypatch: the runtime_check of the replacement of "
                           f"{getattr(owner, '__name__', owner)}.{attribute} raised "
                           f"{type(error).__name__}: {error}; such calls run the original",
                           RuntimeWarning)
                accepted = False
            if accepted:
                return value(*full, **kwargs)
            return wrapped(*args, **kwargs)
        patch.wrap(owner, attribute, dispatch, rebind=getattr(change, "rebind", False))
    return change


def _replace_value(replacement: "Any") -> "Callable[[Any, Any, str], None]":
    def change(patch: "Any", owner: "Any", attribute: str) -> None:
        value = resolve(replacement)
        original = read_slot(ATTRIBUTE, owner, attribute)
        if original is MISSING and not hasattr(owner, attribute):
            raise AttributeError(f"{getattr(owner, '__name__', owner)!r} has no attribute "
                                 f"{attribute!r} to replace{nearest_attribute(owner, attribute)}")
        # A plain function replacing a staticmethod or classmethod keeps that kind:
        # otherwise the class would start passing self/cls to it.
        if isinstance(original, (staticmethod, classmethod)) and \
                not isinstance(value, (staticmethod, classmethod)):
            value = type(original)(value)
        patch.setattr(owner, attribute, value, rebind=getattr(change, "rebind", False))
    return change


def _wrap_value(wrapper: "Any") -> "Callable[[Any, Any, str], None]":
    def change(patch: "Any", owner: "Any", attribute: str) -> None:
        patch.wrap(owner, attribute, resolve(wrapper), rebind=getattr(change, "rebind", False))
    return change


def _alias_change(main: PathPatch, own_change: "Callable[[Any, Any, str], None]",
                  rebind: bool) -> "Callable[[Any, Any, str], None]":
    """Give the alias what the main path now holds, when it holds the same original."""
    def change(patch: "Any", owner: "Any", attribute: str) -> None:
        registered = STATE.catalog.by_name.get(main.patch_name)
        applied = main.applied
        if applied is None or registered is None or not registered.live:
            own_change(patch, owner, attribute)   # the main path is not applied (yet)
            return
        main_owner, main_attribute, original, installed = applied
        if main_owner is owner and main_attribute == attribute:
            patch.note(f"the same attribute as {main.path!r} (reached by another path): "
                       f"already changed by {main.patch_name!r}")
            return
        current = _current_value(owner, attribute)
        if current is installed:
            # A copy made while the main path was live (`from x import y` ran after it):
            # recorded as holding the original, so that undo gives it the original back.
            write_slot(ATTRIBUTE, owner, attribute, original)
            patch.setattr(owner, attribute, installed, rebind=rebind)
            return
        if current is not original:
            raise AttributeError(
                f"alias {getattr(owner, '__name__', owner)}.{attribute} holds {current!r}, "
                f"not the original of {main.path!r} ({original!r}): it is not a re-export "
                f"of it here, so it is left alone")
        patch.setattr(owner, attribute, installed, rebind=rebind)
    return change


def declare_path(path: str, change: "Callable[[Any, Any, str], None]", description: str,
                 default_name: str, *, name: "Optional[str]", rebind: bool, priority: int,
                 requires: "Iterable[str]", tags: "Iterable[str]", enabled: bool,
                 precheck: "Optional[Callable[[], Any]]" = None,
                 aliases: "Iterable[str]" = (), events: "Optional[Any]" = None) -> str:
    """Register ``change(patch, owner, attribute)`` for the attribute at ``path`` (and its
    aliases), run when the module holding it is imported; return the patch name."""
    module, attributes, fixed = split_path(path)
    if not isinstance(rebind, bool):
        raise TypeError(f"rebind must be True or False, got {rebind!r}")
    if precheck is not None and not callable(precheck):
        raise TypeError(f"precheck must be a callable taking no argument, got {precheck!r}")
    alias_paths = _validate_aliases(path, aliases)
    change.rebind = rebind  # type: ignore[attr-defined]
    declaration = PathPatch(path, module, attributes, fixed, change)
    declaration.patch_name = name or default_name
    patch_name = _register_path(declaration, description, precheck, priority=priority,
                                requires=requires, tags=tags, enabled=enabled, events=events)
    for alias in alias_paths:
        alias_module, alias_attributes, alias_fixed = split_path(alias)
        alias_declaration = PathPatch(alias, alias_module, alias_attributes, alias_fixed,
                                      _alias_change(declaration, change, rebind))
        alias_declaration.patch_name = f"{patch_name}.alias:{alias}"
        _register_path(alias_declaration, f"{description} (alias {alias})", precheck,
                       priority=priority, requires=requires, tags=tags, enabled=enabled,
                       events=events, alias_of=patch_name)
    return patch_name


def _validate_aliases(path: str, aliases: "Iterable[str]") -> "List[str]":
    if isinstance(aliases, str):
        raise TypeError(f"aliases of {path!r} must be a list of dotted paths, got the "
                        f"string {aliases!r} (write aliases=[{aliases!r}])")
    try:
        chosen = list(aliases)
    except TypeError:
        raise TypeError(f"aliases of {path!r} must be a list of dotted paths, "
                        f"got {aliases!r}") from None
    for alias in chosen:
        split_path(alias)   # refuses a malformed path now, at the declaration line
        if alias == path:
            raise ValueError(f"alias {alias!r} is the path itself")
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"aliases of {path!r} repeat a path: {chosen!r}")
    return chosen


def _register_path(declaration: PathPatch, description: str,
                   precheck: "Optional[Callable[[], Any]]", *, priority: int,
                   requires: "Iterable[str]", tags: "Iterable[str]", enabled: bool,
                   events: "Optional[Any]", alias_of: str = "") -> str:
    def apply_by_path(target_module: "Any", patch: "Any") -> None:
        declaration.apply(target_module, patch, precheck)
    apply_by_path.__doc__ = description
    apply_by_path.lazypatch_path = declaration  # type: ignore[attr-defined]
    if alias_of:
        apply_by_path.lazypatch_alias_of = alias_of  # type: ignore[attr-defined]
    return register(apply_by_path, declaration.module, name=declaration.patch_name,
                    priority=priority, requires=requires, tags=tags, enabled=enabled,
                    events=events)


def aliases_of(patch_name: str) -> "List[str]":
    """Names of the alias patches declared with ``patch_name`` (undone with it)."""
    with STATE.lock:
        derived = list(STATE.catalog.with_indexes().derived.get(patch_name, {}).values())
    return [patch.name for patch in sorted(derived, key=lambda patch: patch.sequence)
            if getattr(patch.function, "lazypatch_alias_of", None) == patch_name]


def derived_from(patch_name: str) -> "List[str]":
    """Patches declared on behalf of ``patch_name``, which ``unpatch(patch_name)`` undoes
    too: its aliases, the stand-ins made on demand for submodules of a stand-in
    (``<name>.sub:<module>``) and those of its missing parents (``<name>.parent:<parent>``)
    unless another applied patch still lives below that parent; deepest first. (An index
    lookup: the catalog keeps them.)"""
    with STATE.lock:
        found = sorted(STATE.catalog.with_indexes().derived.get(patch_name, {}).values(),
                       key=lambda patch: patch.sequence)
        found += _parents_declared_by_others(patch_name, found)
        found = [patch for patch in found
                 if ".parent:" not in patch.name or not _parent_still_needed(patch, patch_name)]
    return [patch.name for patch in sorted(found, key=lambda patch: -len(patch.target))]


def _parents_declared_by_others(patch_name: str, found: "List[Any]") -> "List[Any]":
    """The applied stand-ins of missing parents of ``patch_name``'s module that another
    stand-in declared first (one parent serves both): the last one undone takes it."""
    patch = STATE.catalog.by_name.get(patch_name)
    if patch is None:
        return []
    parts = patch.target.split(".")
    return [parent for depth in range(1, len(parts))
            for parent in STATE.catalog.by_target.get(".".join(parts[:depth]), ())
            if ".parent:" in parent.name and parent.status == APPLIED
            and parent not in found]


def _parent_still_needed(parent: "Any", patch_name: str) -> bool:
    """Whether an applied patch that is not ``patch_name``'s own still has its module
    below the stand-in ``parent`` (a parent shared by two stand-ins stays for the other)."""
    below = parent.target + "."
    own = patch_name + "."
    return any(other.status == APPLIED and other.target.startswith(below)
               and other.name != patch_name and not other.name.startswith(own)
               for other in STATE.catalog.by_name.values())


def replace(path: str, replacement: "Any", *, name: "Optional[str]" = None,
            rebind: bool = False, priority: int = 0, requires: "Iterable[str]" = (),
            tags: "Iterable[str]" = (), enabled: bool = True,
            precheck: "Optional[Callable[[], Any]]" = None,
            runtime_check: "Optional[Callable[..., Any]]" = None,
            aliases: "Iterable[str]" = (), events: "Optional[Any]" = None) -> str:
    """Replace the attribute at dotted ``path`` with ``replacement`` (an object or a
    ``"package.module:attribute"`` string resolved when applied) once its module is
    imported; return the patch name.

    ``precheck()`` is asked when the patch applies (false: ``skipped``);
    ``runtime_check(*args, **kwargs)`` on every call (false: the original runs);
    ``aliases`` are other paths bound to the same original, rebound too.
    """
    validate_reference(replacement, f"replace({path!r}, ...): the replacement")
    if runtime_check is not None and not callable(runtime_check):
        raise TypeError(f"runtime_check must be callable with the call's arguments, "
                        f"got {runtime_check!r}")
    described = replacement if isinstance(replacement, str) else \
        getattr(replacement, "__qualname__", repr(replacement))
    change = _replace_value(replacement) if runtime_check is None else \
        _checked_replacement(replacement, runtime_check)
    return declare_path(path, change, f"Replace {path} with {described}",
                    f"replace:{path}", name=name, rebind=rebind, priority=priority,
                    requires=requires, tags=tags, enabled=enabled, precheck=precheck,
                    aliases=aliases, events=events)


def wrap(path: str, wrapper: "Any", *, name: "Optional[str]" = None, rebind: bool = False,
         priority: int = 0, requires: "Iterable[str]" = (), tags: "Iterable[str]" = (),
         enabled: bool = True, aliases: "Iterable[str]" = (),
         events: "Optional[Any]" = None) -> str:
    """Wrap the callable at dotted ``path`` with ``wrapper(wrapped, instance, args,
    kwargs)`` (or a string naming one) once its module is imported; the patch name.
    ``aliases``: other paths bound to the same original, given the same wrapper."""
    if not isinstance(wrapper, str) and not callable(wrapper):
        raise TypeError(f"wrap({path!r}, ...): the wrapper must be callable as "
                        f"wrapper(wrapped, instance, args, kwargs) or a 'pkg.mod:name' string")
    validate_reference(wrapper, f"wrap({path!r}, ...): the wrapper")
    described = wrapper if isinstance(wrapper, str) else \
        getattr(wrapper, "__qualname__", repr(wrapper))
    return declare_path(path, _wrap_value(wrapper), f"Wrap {path} with {described}",
                    f"wrap:{path}", name=name, rebind=rebind, priority=priority,
                    requires=requires, tags=tags, enabled=enabled, aliases=aliases,
                    events=events)


__all__ = ["replace", "wrap", "split_path", "PathPatch", "aliases_of", "declare_path",
           "move_patch", "module_exists", "derived_from"]

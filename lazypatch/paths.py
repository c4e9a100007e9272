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
"""

from __future__ import annotations

import sys

from .application import apply_to_imported
from .boundaries import resolve, validate_reference
from .registration import register, validate_target
from .slots import ATTRIBUTE, MISSING, is_unloaded_lazy_module, own_dict, read_slot
from .state import STATE

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

    def apply(self, module: "Any", patch: "Any") -> None:
        """The patch function: walk to the owner, then change its attribute."""
        owner: "Any" = module
        for depth, attribute in enumerate(self.attributes[:-1]):
            found = self._step(owner, attribute)
            if found is MISSING:
                submodule = f"{getattr(owner, '__name__', '')}.{attribute}"
                if not self.fixed and isinstance(owner, type(sys)) and \
                        hasattr(owner, "__path__") and _module_exists(submodule):
                    self._move_to(submodule, self.attributes[depth + 1:])
                    patch.skip(f"waiting for {submodule!r} to be imported ({self.path!r} is "
                               f"inside it); applied when it is")
                where = ".".join([self.module] + self.attributes[:depth])
                raise AttributeError(f"{where!r} has no attribute {attribute!r}, so {self.path!r} "
                                     f"cannot be patched (renamed or moved in this version?)")
            owner = found
        self.change(patch, owner, self.attributes[-1])

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
        with STATE.lock:
            registered = STATE.catalog.by_name.get(self.patch_name)
            if registered is None:
                return
            STATE.catalog.remove(registered)
            registered.target = module
            STATE.catalog.add(registered)
            self.module, self.attributes = module, attributes
        # In sys.modules but still executing, or an unloaded lazy module: applied
        # when its body ends, as registration would do.
        if module in sys.modules:
            apply_to_imported(registered)


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

        def dispatch(wrapped: "Any", instance: "Any", args: tuple, kwargs: dict) -> "Any":
            # wrapt passes a method's self (or a classmethod's class) as ``instance``;
            # the replacement and the check take it as their first argument, as the
            # original function would.
            full = args if instance is None else (instance,) + tuple(args)
            if runtime_check(*full, **kwargs):
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
                                 f"{attribute!r} to replace")
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


def _declare(path: str, change: "Callable[[Any, Any, str], None]", description: str,
             default_name: str, *, name: "Optional[str]", rebind: bool, priority: int,
             requires: "Iterable[str]", tags: "Iterable[str]", enabled: bool,
             precheck: "Optional[Callable[[], Any]]" = None) -> str:
    module, attributes, fixed = split_path(path)
    if not isinstance(rebind, bool):
        raise TypeError(f"rebind must be True or False, got {rebind!r}")
    if precheck is not None and not callable(precheck):
        raise TypeError(f"precheck must be a callable taking no argument, got {precheck!r}")
    change.rebind = rebind  # type: ignore[attr-defined]
    declaration = PathPatch(path, module, attributes, fixed, change)
    declaration.patch_name = name or default_name

    def apply_by_path(target_module: "Any", patch: "Any") -> None:
        if precheck is not None and not precheck():
            patch.skip(f"precheck {getattr(precheck, '__qualname__', precheck)!r} said no")
        declaration.apply(target_module, patch)
    apply_by_path.__doc__ = description
    apply_by_path.lazypatch_path = declaration  # type: ignore[attr-defined]
    return register(apply_by_path, module, name=declaration.patch_name, priority=priority,
                    requires=requires, tags=tags, enabled=enabled)


def replace(path: str, replacement: "Any", *, name: "Optional[str]" = None,
            rebind: bool = False, priority: int = 0, requires: "Iterable[str]" = (),
            tags: "Iterable[str]" = (), enabled: bool = True,
            precheck: "Optional[Callable[[], Any]]" = None,
            runtime_check: "Optional[Callable[..., Any]]" = None) -> str:
    """Replace the attribute at dotted ``path`` with ``replacement`` (an object or a
    ``"package.module:attribute"`` string resolved when applied) once its module is
    imported; return the patch name.

    ``precheck()`` is asked when the patch applies (false: ``skipped``);
    ``runtime_check(*args, **kwargs)`` on every call (false: the original runs).
    """
    validate_reference(replacement, f"replace({path!r}, ...): the replacement")
    if runtime_check is not None and not callable(runtime_check):
        raise TypeError(f"runtime_check must be callable with the call's arguments, "
                        f"got {runtime_check!r}")
    described = replacement if isinstance(replacement, str) else \
        getattr(replacement, "__qualname__", repr(replacement))
    change = _replace_value(replacement) if runtime_check is None else \
        _checked_replacement(replacement, runtime_check)
    return _declare(path, change, f"Replace {path} with {described}",
                    f"replace:{path}", name=name, rebind=rebind, priority=priority,
                    requires=requires, tags=tags, enabled=enabled, precheck=precheck)


def wrap(path: str, wrapper: "Any", *, name: "Optional[str]" = None, rebind: bool = False,
         priority: int = 0, requires: "Iterable[str]" = (), tags: "Iterable[str]" = (),
         enabled: bool = True) -> str:
    """Wrap the callable at dotted ``path`` with ``wrapper(wrapped, instance, args,
    kwargs)`` (or a string naming one) once its module is imported; the patch name."""
    if not isinstance(wrapper, str) and not callable(wrapper):
        raise TypeError(f"wrap({path!r}, ...): the wrapper must be callable as "
                        f"wrapper(wrapped, instance, args, kwargs) or a 'pkg.mod:name' string")
    validate_reference(wrapper, f"wrap({path!r}, ...): the wrapper")
    described = wrapper if isinstance(wrapper, str) else \
        getattr(wrapper, "__qualname__", repr(wrapper))
    return _declare(path, _wrap_value(wrapper), f"Wrap {path} with {described}",
                    f"wrap:{path}", name=name, rebind=rebind, priority=priority,
                    requires=requires, tags=tags, enabled=enabled)


__all__ = ["replace", "wrap", "split_path", "PathPatch"]

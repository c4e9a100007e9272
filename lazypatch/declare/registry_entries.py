"""Registry entries: replace or add an entry of an mmengine / mmcv / mmdet ``Registry``.

``registry_entry("mmdet.registry:MODELS", "FPN", "my_pkg.fpn:MyFPN")`` is a
patch declared by dotted path (``paths.declare_path``): it applies when the
module holding the registry is imported, resolves the replacement then, and
sets ``registry._module_dict[key]`` through the ledger, so ``build`` and
``get`` return the replacement and undo is exact (an entry that did not
exist is removed, a replaced one restored).

The registry's own module usually runs before the module that registers
the real class (``mmdet.registry`` before ``mmdet.models.necks.fpn``, which
``MODELS.get`` imports on first use through the registry's ``locations``).
That later ``@MODELS.register_module()`` would raise "already registered"
(or, with ``force=True``, overwrite the replacement). So while an entry is
patched, the registry's ``_register_module`` is shadowed on the instance by
a guard: a registration of a patched key is not written; it becomes the
value undo restores (the ledger change's ``before``), and other keys
register as usual. The guard goes when the registry's last patched entry is
undone.

Scopes: the entry is placed in the registry you name, and only there.
mmengine looks a key up in the registry ``build`` is called on (or the one
the default scope selects), then in its parents: patching mmengine's root
``MODELS`` does not change what ``mmdet.registry.MODELS.build`` returns for
a key mmdet registers itself; patch ``mmdet.registry:MODELS`` for that.
"""

from __future__ import annotations

from ..slots import MISSING
from ..state import STATE
from .boundaries import resolve, validate_reference
from .paths import declare_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterable, Optional


class RegistryGuard:
    """Keeps the patched keys of one registry from being re-registered (module docstring)."""

    def __init__(self, registry: "Any") -> None:
        self.registry = registry
        namespace = registry.__dict__
        self.own_before = namespace.get("_register_module", MISSING)
        self.original = registry._register_module
        self.protected: "Dict[str, Any]" = {}   # key -> the ledger Change of its entry

    def register(self, module: "Any", module_name: "Any" = None, force: bool = False) -> "Any":
        names = module_name if module_name is not None else getattr(module, "__name__", None)
        chosen = [names] if isinstance(names, str) or names is None else list(names)
        held = [key for key in chosen if key in self.protected]
        if not held:
            return self.original(module, module_name, force)
        with STATE.lock:
            for key in held:
                # The registration that would have happened is what undo restores.
                self.protected[key].before = module
        rest = [key for key in chosen if key not in held]
        if rest:
            self.original(module, rest, force)
        return module

    def release(self, key: str, change: "Any") -> None:
        """Stop guarding ``key``; the last key out takes the guard off the instance."""
        with STATE.lock:
            if self.protected.get(key) is change:
                del self.protected[key]
            if self.protected:
                return
            _GUARDS.pop(id(self.registry), None)
            if self.own_before is MISSING:
                self.registry.__dict__.pop("_register_module", None)
            else:
                self.registry.__dict__["_register_module"] = self.own_before


# id(registry) -> its guard, while it has patched entries (emptied by their undo).
_GUARDS: "Dict[int, RegistryGuard]" = {}


def _guard_of(registry: "Any") -> RegistryGuard:
    with STATE.lock:
        guard = _GUARDS.get(id(registry))
        if guard is None:
            guard = _GUARDS[id(registry)] = RegistryGuard(registry)
            registry.__dict__["_register_module"] = guard.register
        return guard


def _entry_change(key: str, replacement: "Any", where: str, force: bool,
                  any_registry: bool = False) -> "Callable[[Any, Any, str], None]":
    def change(patch: "Any", owner: "Any", attribute: str) -> None:
        registry = getattr(owner, attribute)
        entries = getattr(registry, "_module_dict", None)
        tabled = isinstance(entries, dict) and callable(getattr(registry, "_register_module",
                                                                None))
        if not tabled and any_registry:
            _register_untracked(patch, registry, key, replacement, where, force)
            return
        if not tabled or not isinstance(entries, dict):
            raise TypeError(f"{where} is {registry!r}, not an mmengine/mmcv Registry (it has no "
                            f"_module_dict and _register_module)")
        before = entries.get(key, MISSING)
        if not force and before is not MISSING:
            raise KeyError(f"{key!r} is already registered in {where} "
                           f"({getattr(before, '__qualname__', before)!r}) and force=False")
        value = resolve(replacement)
        before = entries.get(key, MISSING)   # resolving may have imported its registration
        patch.setitem(entries, key, value)
        entry_change = patch.changes[-1]
        guard = _guard_of(registry)
        with STATE.lock:
            guard.protected[key] = entry_change
        patch.on_undo(lambda: guard.release(key, entry_change))
        patch.note(f"{where}[{key!r}]: " + ("added" if before is MISSING else
                                            f"replaced {getattr(before, '__qualname__', before)!r}"))
    return change


def _register_untracked(patch: "Any", registry: "Any", key: str, replacement: "Any",
                        where: str, force: bool) -> None:
    """Code written for DrivingSDK may name any object with a ``register_module`` (a
    registry of its own, a test double): it is called as DrivingSDK calls it. With no
    entry table to restore, the report says so (``not undoable``) instead of claiming
    the undo."""
    register = getattr(registry, "register_module", None)
    if not callable(register):
        from ..errors import SkipPatch
        raise SkipPatch(f"invalid registry: {where} is {type(registry).__name__}, which has "
                        f"no register_module")
    register(name=key, force=force, module=resolve(replacement))
    patch.untracked(f"{where}.register_module(name={key!r}) ({type(registry).__name__} has no "
                    f"entry table to restore)")


def registry_entry(registry: str, key: str, replacement: "Any", *,
                   name: "Optional[str]" = None, priority: int = 0,
                   requires: "Iterable[str]" = (), tags: "Iterable[str]" = (),
                   enabled: bool = True, events: "Optional[Any]" = None, force: bool = True,
                   precheck: "Optional[Callable[[], Any]]" = None,
                   any_registry: bool = False) -> str:
    """Make ``key`` of the registry at ``registry`` ("pkg.mod:NAME" or "pkg.mod.NAME")
    give ``replacement`` (an object or a "pkg.mod:attr" string resolved when applied)
    once that module is imported; return the patch name. ``force=False``: fail instead
    of replacing an entry that exists then; ``precheck()`` false: skipped.
    ``any_registry``: an object with only a ``register_module`` gets that call, and the
    report says the change is not undoable (``_register_untracked``)."""
    if not isinstance(force, bool):
        raise TypeError(f"registry_entry: force must be True or False, got {force!r}")
    if not isinstance(key, str) or not key.strip():
        raise ValueError(f"registry_entry({registry!r}, ...): the key must be a non-empty "
                         f"string such as 'FPN', got {key!r}")
    validate_reference(replacement, f"registry_entry({registry!r}, {key!r}, ...): the "
                                    f"replacement")
    if replacement is None:
        raise TypeError(f"registry_entry({registry!r}, {key!r}, ...): the replacement is None")
    described = replacement if isinstance(replacement, str) else \
        getattr(replacement, "__qualname__", repr(replacement))
    return declare_path(registry, _entry_change(key, replacement, registry, force, any_registry),
                        f"Registry {registry} entry {key!r} is {described}",
                        f"registry:{registry}[{key}]", name=name, rebind=False,
                        priority=priority, requires=requires, tags=tags, enabled=enabled,
                        events=events, precheck=precheck)


__all__ = ["registry_entry", "RegistryGuard"]

"""Turning a legacy patch function's plain assignments into recorded, undoable changes.

DrivingSDK patch functions write ``root_module.x.y.f = g``, ``SomeClass.forward = g``
or ``@HEADS.register_module(force=True)`` directly. To undo them exactly, every
namespace such a function can reach is copied before it runs and compared after:
each difference is put back and redone through the patch context, which records the
original raw value (so undo restores it, or deletes an attribute that was only
inherited).

What is copied: the namespace of every imported module of each package the function
can reach (not only the root package's: a function given ``mmcv`` may change a class of
``mmdet`` or ``torch`` it names), the classes each module defines, and the entry table
of every OpenMMLab registry a module holds (a registry's ``_module_dict``). A package
the function imports is copied when that import returns, before the function can
change it (``imports_copied``), so changes to a submodule it imported are undone too.
(Copying every module of the process costs seconds with torch imported; the packages
the code names are where its plain assignments can land.)
"""

from __future__ import annotations

import builtins
import importlib
import sys
from contextlib import contextmanager

from ..slots import MISSING, own_dict

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterator, List, Set, Tuple

    Snapshot = List[Tuple[Any, Dict[Any, Any], str]]

# lazypatch's own modules hold its bookkeeping, which changes as patches apply.
OWN_PACKAGES = ("lazypatch",)
ATTRIBUTES, ENTRIES = "attributes", "entries"


def _own(name: str) -> bool:
    return name.partition(".")[0] in OWN_PACKAGES


# OpenMMLab's registry classes: mmengine's (OpenMMLab 2.x) and mmcv 1.x's, read only if
# their module is imported. An instance's ``_module_dict`` is its entry table.
REGISTRY_CLASSES = (("mmengine.registry.registry", "Registry"), ("mmcv.utils.registry", "Registry"))


def registry_types() -> "Tuple[type, ...]":
    """The registry classes of REGISTRY_CLASSES that are imported."""
    found = (getattr(sys.modules.get(module), name, None) for module, name in REGISTRY_CLASSES)
    return tuple(kind for kind in found if isinstance(kind, type))


def module_owners(name: str, module: "Any", seen: "set", registries: "Tuple[type, ...]"
                  ) -> "List[Tuple[Any, Any, str]]":
    """``(owner, namespace, kind)`` of ``module``: itself, the classes it defines and the
    registries it holds (each once, by identity, across calls sharing ``seen``)."""
    namespace = own_dict(module)
    if not isinstance(namespace, dict) or id(module) in seen:
        return []
    seen.add(id(module))
    owners: "List[Tuple[Any, Any, str]]" = [(module, namespace, ATTRIBUTES)]
    # One C-level pass picks the few values worth a look out of thousands. By type(value),
    # not isinstance(value, ...): isinstance falls back to reading value.__class__, and some
    # module globals warn on any attribute read (torch.distributed.reduce_op's
    # FutureWarning would come from lazypatch).
    kinds = (type, *registries)
    for value in [value for value in namespace.values() if issubclass(type(value), kinds)]:
        if id(value) in seen:
            continue
        if isinstance(value, type):
            if value.__dict__.get("__module__") == name:
                seen.add(id(value))
                owners.append((value, own_dict(value), ATTRIBUTES))
            continue
        table = getattr(value, "_module_dict", None)
        if isinstance(table, dict) and id(table) not in seen:
            seen.add(id(table))
            owners.append((table, table, ENTRIES))
    return owners


def names_in_code(function: "Any", strings: bool = False) -> "Set[str]":
    """The names a function's code reads (attributes and globals), its nested functions'
    included; with ``strings``, also the identifier-like strings it holds (the name
    given to ``hasattr``/``getattr``). Empty for an object without code."""
    code = getattr(function, "__code__", None)
    names: "Set[str]" = set()
    codes = [code] if code is not None else []
    while codes:
        current = codes.pop()
        names.update(current.co_names)
        for constant in current.co_consts:
            if strings and isinstance(constant, str) and constant.isidentifier():
                names.add(constant)
            elif hasattr(constant, "co_names"):
                codes.append(constant)
    return names


def reachable_packages(function: "Any", root: str) -> "Set[str]":
    """The top-level packages a patch function can reach: ``root``'s, and those of the
    modules, classes and functions its code names (in its globals and closure)."""
    packages = {root.partition(".")[0]}
    if getattr(function, "__code__", None) is None:
        return packages
    names = names_in_code(function)
    namespace = getattr(function, "__globals__", {})
    values = [namespace[name] for name in names if name in namespace]
    for cell in getattr(function, "__closure__", None) or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:   # an empty cell
            continue
    for value in values:
        module = value.__name__ if isinstance(value, type(sys)) else \
            getattr(value if isinstance(value, type) or callable(value) else type(value),
                    "__module__", None)
        if isinstance(module, str):
            packages.add(module.partition(".")[0])
    return packages


class Copies:
    """The namespaces copied so far, and which modules they cover."""

    def __init__(self, packages: "Set[str]") -> None:
        self.entries: "Snapshot" = []
        self.seen: "set" = set()
        self.modules: "set" = set()
        self.packages = {package for package in packages if package not in OWN_PACKAGES}

    def add_modules(self, wait_for_bodies: bool = False) -> None:
        """Copy every imported module of the packages not copied yet (and what it owns);
        with ``wait_for_bodies``, not one whose body is still running (a module the patch
        function is importing: copied once that import returns). The module being
        patched is still running its body when its patches run, and is copied."""
        registries = registry_types()
        for name, module in list(sys.modules.items()):
            if module is None or name in self.modules or \
                    name.partition(".")[0] not in self.packages:
                continue
            if wait_for_bodies and getattr(getattr(module, "__spec__", None), "_initializing",
                                           False):
                continue
            self.modules.add(name)
            for owner, namespace, kind in module_owners(name, module, self.seen, registries):
                if namespace is not None:
                    self.entries.append((owner, dict(namespace), kind))


def snapshot(function: "Any", root: str) -> "Copies":
    """Copies of every namespace the patch function can reach (``reachable_packages``),
    to compare after it ran."""
    copies = Copies(reachable_packages(function, root))
    copies.add_modules()
    return copies


@contextmanager
def imports_copied(copies: "Copies") -> "Iterator[None]":
    """While the patch function runs, a module it imports is copied as soon as its
    import returns (``import`` statements and ``importlib.import_module``)."""
    original_import, original_import_module = builtins.__import__, importlib.import_module

    def copied(name: "Any", level: "Any") -> None:
        if isinstance(name, str) and name and not level:
            copies.packages.add(name.partition(".")[0])
        copies.add_modules(wait_for_bodies=True)

    def copying_import(name: "Any", *args: "Any", **kwargs: "Any") -> "Any":
        try:
            return original_import(name, *args, **kwargs)
        finally:
            copied(name, args[3] if len(args) > 3 else kwargs.get("level", 0))

    def copying_import_module(name: "Any", package: "Any" = None) -> "Any":
        try:
            return original_import_module(name, package)
        finally:
            copied(name, name.startswith(".") if isinstance(name, str) else 0)
    builtins.__import__ = copying_import
    importlib.import_module = copying_import_module
    try:
        yield
    finally:
        builtins.__import__ = original_import
        importlib.import_module = original_import_module


def _is_submodule_binding(owner: "Any", key: str, value: "Any") -> bool:
    # `import pkg.sub` inside a patch function binds pkg.sub: that is the import
    # system's doing, and undoing it would leave sys.modules inconsistent.
    name = getattr(owner, "__name__", None) if isinstance(owner, type(sys)) else None
    return isinstance(name, str) and sys.modules.get(f"{name}.{key}") is value


def differences(copies: "Copies") -> "List[Tuple[Any, Any, Any, Any, str]]":
    """``(owner, key, before, after, kind)`` of every slot changed since the copies."""
    found = []
    for owner, before, kind in copies.entries:
        namespace = owner if kind == ENTRIES else own_dict(owner)
        if namespace is None:
            continue
        after = dict(namespace)
        for key in set(before) | set(after):
            old, new = before.get(key, MISSING), after.get(key, MISSING)
            if old is new or kind == ATTRIBUTES and not isinstance(key, str):
                continue
            if old is MISSING and kind == ATTRIBUTES and _is_submodule_binding(owner, key, new):
                continue
            found.append((owner, key, old, new, kind))
    return found


def _put_back(owner: "Any", key: "Any", old: "Any", kind: str) -> None:
    if kind == ENTRIES:
        if old is MISSING:
            owner.pop(key, None)
        else:
            owner[key] = old
    elif old is MISSING:
        delattr(owner, key)
    else:
        setattr(owner, key, old)


def put_back(copies: "Copies") -> None:
    """Undo every change made since the copies, recording nothing."""
    for owner, key, old, _new, kind in differences(copies):
        _put_back(owner, key, old, kind)


def record_plain_assignments(copies: "Copies", patch: "Any") -> "List[str]":
    """Re-do every change made behind the context's back through ``patch``; return them."""
    recorded = []
    for owner, key, old, new, kind in differences(copies):
        if patch_already_recorded(patch, owner, key):
            continue
        # put the original back, then make the same change through the ledger
        _put_back(owner, key, old, kind)
        if kind == ENTRIES:
            if new is MISSING:
                patch.delitem(owner, key)
            else:
                patch.setitem(owner, key, new)
            recorded.append(f"registry entry {key!r}")
        else:
            if new is MISSING:
                patch.delattr(owner, key)
            else:
                patch.setattr(owner, key, new)
            recorded.append(f"{getattr(owner, '__name__', owner)}.{key}")
    return recorded


def patch_already_recorded(patch: "Any", owner: "Any", key: "Any") -> bool:
    """Whether the function already made this change through ``patch`` itself."""
    return any(change.owner is owner and change.key == key and change.live
               for change in getattr(patch, "changes", ()))

"""Finding other references to an object that a patch replaced.

``from torch.nn.functional import relu`` copies the function into the
importing module's globals; patching ``torch.nn.functional.relu`` afterwards
does not reach that copy (the DrivingSDK patcher's "re-exports keep the old
object" defect). gevent diagnoses this with ``gc.get_referrers``; we only
need module globals, so we walk ``sys.modules`` and compare identities.

Identity proves a copy only for objects that are made one at a time:
functions, classes, modules, instances. It proves nothing for values the
interpreter shares between unrelated modules: ``None``, booleans, small
integers (cached), interned strings, the empty tuple, and equal constants
that the compiler folds. ``os.X_OK`` *is* the same object as a user's
``LIMIT = 1`` without either module having copied the other; rebinding every
global that is ``1`` rewrote dozens of innocent modules. So values of the
immutable builtin types and enum members are never rebound or reported as
copies (``identity_proves_copy`` says why).

The walk must never load a lazy module: it reads each module's ``__dict__``
with ``object.__getattribute__`` and skips modules that are still lazy.
Module-level ``__getattr__`` (PEP 562, ``lazy_loader.attach``) is never
called because we never look up a missing name.
"""

from __future__ import annotations

import sys

from ..slots import is_unloaded_lazy_module, own_dict

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Dict, Iterator, List, Optional, Tuple

# Immutable value types: equal values may be one shared object in many modules.
SHARED_BY_VALUE = (type(None), bool, int, float, complex, str, bytes, tuple, frozenset,
                   range, type(Ellipsis), type(NotImplemented))


def identity_proves_copy(value: "Any") -> "Optional[str]":
    """None when a module global that *is* ``value`` must be a copy of it; else why not."""
    if isinstance(value, SHARED_BY_VALUE):
        return (f"a {type(value).__name__} value, which the interpreter shares between modules "
                f"(cached, interned or folded), so identity cannot tell a copy from an unrelated "
                f"global")
    enum_module = sys.modules.get("enum")
    if enum_module is not None and isinstance(value, enum_module.Enum):
        return "an enum member, which every module names by value, not as a copy"
    return None


def _module_globals(exclude: "Tuple[Any, ...]", after: "Optional[Tuple[str, Any, bool]]" = None
                    ) -> "Iterator[Tuple[str, Any, str, Any]]":
    """(module name, module, global name, value) for every loaded module's globals; with
    ``after`` (``Change.last_module_before``: a name, a reference to its entry, whether
    weak), only of the modules entered in ``sys.modules`` after that entry."""
    excluded = {id(item) for item in exclude if item is not None}
    entries = list(sys.modules.items())
    if after is not None:
        name, reference, weak = after
        entry = reference() if weak else reference
        names = [entry_name for entry_name, _ in entries]
        position = names.index(name)   # ValueError: the caller's to handle
        if entries[position][1] is not entry or weak and entry is None:
            # Another object under that name: the marked module was imported again, and
            # its new place in the order says nothing about what came after the mark.
            raise ValueError(f"{name!r} is no longer the module the mark was made at")
        entries = entries[position + 1:]
    for module_name, module in entries:
        if module is None or id(module) in excluded or is_unloaded_lazy_module(module) \
                or module_name == "lazypatch" or module_name.startswith("lazypatch."):
            # lazypatch's own modules (packs included) hold originals on purpose,
            # to call them: rebinding those would make a wrapper call itself.
            continue
        namespace = own_dict(module)
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            yield module_name, module, name, value


def find_module_references(target: "Any", exclude: "Tuple[Any, ...]" = (),
                           after: "Optional[Tuple[str, Any, bool]]" = None
                           ) -> "List[Tuple[Any, str]]":
    """(module, global name) for each module global that *is* ``target``; none for shared
    values. With ``after`` (``Change.last_module_before``), only modules imported after the
    module it marks (which must still be in ``sys.modules`` under its name: ValueError
    otherwise)."""
    if identity_proves_copy(target) is not None:
        return []
    return [(module, name) for _, module, name, value in _module_globals(exclude, after)
            if value is target]


def find_holders(targets: "List[Any]", exclude: "Tuple[Any, ...]" = ()) -> "Dict[int, List[Tuple[Any, str]]]":
    """For each target (by id), the (module, global name) pairs holding it: one walk for all.

    Targets whose identity proves nothing get an empty list.
    """
    found: "Dict[int, List[Tuple[Any, str]]]" = {id(target): [] for target in targets}
    wanted = {id(target) for target in targets if identity_proves_copy(target) is None}
    if wanted:
        for _, module, name, value in _module_globals(exclude):
            if id(value) in wanted:
                found[id(value)].append((module, name))
    return found


def describe_references(targets: "List[Any]", exclude: "Tuple[Any, ...]" = (),
                        limit: int = 20) -> "List[str]":
    """"module.name" for module globals holding any of ``targets``, at most ``limit``."""
    wanted = {id(item) for item in targets if identity_proves_copy(item) is None}
    found: "List[str]" = []
    if not wanted:
        return found
    for module_name, _, name, value in _module_globals(exclude):
        if id(value) in wanted:
            found.append(f"{module_name}.{name}")
            if len(found) >= limit:
                break
    return found

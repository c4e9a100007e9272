"""Turning a legacy patch function's plain assignments into recorded, undoable changes.

DrivingSDK patch functions write ``root_module.x.y.f = g`` or
``SomeClass.forward = g`` directly. To undo them exactly, the namespaces
such a function can reach (the root package's imported modules and the
classes they define) are copied before it runs and compared after: each
difference is put back and redone through the patch context, which records
the original raw value (so undo restores it, or deletes an attribute that
was only inherited).
"""

from __future__ import annotations

import sys

from ..slots import MISSING, own_dict

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Tuple

    Snapshot = List[Tuple[Any, Dict[str, Any]]]


def reachable_namespaces(root: str) -> "List[Any]":
    """The imported modules of package ``root`` and the classes they define."""
    owners: "List[Any]" = []
    prefix = root + "."
    for name, module in list(sys.modules.items()):
        if module is None or not (name == root or name.startswith(prefix)):
            continue
        namespace = own_dict(module)
        if not isinstance(namespace, dict):
            continue
        owners.append(module)
        for value in list(namespace.values()):
            # type(value), not isinstance(value, type): isinstance falls back to reading
            # value.__class__, and some module globals warn on any attribute read
            # (torch.distributed.reduce_op's FutureWarning would come from lazypatch).
            if issubclass(type(value), type) and getattr(value, "__module__", None) == name:
                owners.append(value)
    return owners


def snapshot(root: str) -> "Snapshot":
    """Copies of every reachable namespace, to compare after the patch function ran."""
    copies = []
    for owner in reachable_namespaces(root):
        namespace = own_dict(owner)
        if namespace is not None:
            copies.append((owner, dict(namespace)))
    return copies


def _is_submodule_binding(owner: "Any", key: str, value: "Any") -> bool:
    # `import pkg.sub` inside a patch function binds pkg.sub: that is the import
    # system's doing, and undoing it would leave sys.modules inconsistent.
    name = getattr(owner, "__name__", None)
    return isinstance(name, str) and sys.modules.get(f"{name}.{key}") is value


def record_plain_assignments(copies: "Snapshot", patch: "Any") -> "List[str]":
    """Re-do every change made behind the context's back through ``patch``; return them."""
    recorded = []
    for owner, before in copies:
        namespace = own_dict(owner)
        if namespace is None:
            continue
        after = dict(namespace)
        for key in set(before) | set(after):
            old, new = before.get(key, MISSING), after.get(key, MISSING)
            if old is new or not isinstance(key, str):
                continue
            if old is MISSING and _is_submodule_binding(owner, key, new):
                continue
            if patch_already_recorded(patch, owner, key):
                continue
            # put the original back, then make the same change through the ledger
            if old is MISSING:
                delattr(owner, key)
            else:
                setattr(owner, key, old)
            if new is MISSING:
                patch.delattr(owner, key)
            else:
                patch.setattr(owner, key, new)
            recorded.append(f"{getattr(owner, '__name__', owner)}.{key}")
    return recorded


def patch_already_recorded(patch: "Any", owner: "Any", key: str) -> bool:
    """Whether the function already made this change through ``patch`` itself."""
    return any(change.owner is owner and change.key == key and change.live
               for change in getattr(patch, "changes", ()))

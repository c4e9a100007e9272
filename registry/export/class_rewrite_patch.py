"""Applying one ``rewrite_class`` declaration: pinned copies replace a class's members."""

from __future__ import annotations

import importlib
from typing import Any, List

import lazypatch

# What every class body has from Python itself, and the carrier's own bookkeeping.
NOT_MEMBERS = frozenset({
    "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__",
    "__firstlineno__", "__static_attributes__", "_PINNED_", "_COPIED_FROM_",
})


def carrier_members(carrier: type) -> dict:
    """The carrier's own members, raw from its ``__dict__`` (a classmethod stays one)."""
    return {key: value for key, value in vars(carrier).items() if key not in NOT_MEMBERS}


def load_carrier(dotted: str) -> type:
    """The carrier class named ``"pkg.mod:Class"`` (imports its module)."""
    module_name, class_name = dotted.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def replace_members(module: Any, class_path: List[str], carrier_name: str, patch: Any) -> None:
    """Set every member of the carrier on the target class through ``patch``, or skip
    the whole rewrite (nothing replaced) when a member's installed source drifted."""
    owner: Any = module
    for part in class_path:
        owner = getattr(owner, part, None)
        if owner is None:
            patch.skip(f"{module.__name__} has no {'.'.join(class_path)} in this version")
    carrier = load_carrier(carrier_name)
    members = carrier_members(carrier)
    pinned = carrier.__dict__.get("_PINNED_", {})
    unpinned = sorted(set(members) - set(pinned))
    if unpinned:   # the carrier's own mistake: fail loudly, never install an unchecked copy
        raise TypeError(f"{carrier_name}: members {unpinned} have no _PINNED_ digests")
    reasons = [reason for reason in (
        lazypatch.source_drift(owner, member, pinned[member], carrier._COPIED_FROM_)
        for member in members) if reason]
    if reasons:
        patch.skip("; ".join(reasons))
    for member, value in members.items():
        patch.setattr(owner, member, value)
    why = " ".join((carrier.__doc__ or "").split())
    patch.note(f"{', '.join(members)} replaced by copies of {carrier._COPIED_FROM_}'s"
               + (f": {why}" if why else ""))

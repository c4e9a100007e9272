"""Helper functions DrivingSDK's patcher modules expose beside their API, which code
written for it (its own tests among them) reads by name: importing a module if it can,
resolving a dotted path, naming a callable, a source diff, whether the nuScenes kit
is importable. Written here for lazypatch; none imports anything until called."""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any, Optional


def import_module_or_none(name: str) -> "Optional[ModuleType]":
    """``import name``, or None when it (or something it imports) cannot be imported."""
    from importlib import import_module
    try:
        return import_module(name)
    except Exception:
        return None


def object_at(path: str, ensure_import: bool = True) -> "Any":
    """The object at dotted ``path`` (``pkg.mod.Class.attr``; a part after a dict is its
    key, as in ``REGISTRY._module_dict.Name``), importing the longest module prefix when
    ``ensure_import``; None when any part is missing. An empty path is a ValueError."""
    if not path:
        raise ValueError("object_at: the path is empty; give a dotted path such as 'pkg.mod.name'")
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        module = sys.modules.get(module_name)
        if module is None and ensure_import:
            module = import_module_or_none(module_name)
        if module is None:
            continue
        value: "Any" = module
        for attribute in parts[cut:]:
            value = value.get(attribute) if isinstance(value, dict) else \
                getattr(value, attribute, None)
            if value is None:
                return None
        return value
    return None


def callable_name(value: "Any") -> str:
    """A readable name of ``value`` as DrivingSDK's messages show it: the qualified name
    of a function or class (its module is in the patch target already), else its
    ``__name__``, else its type's name; ``"<None>"`` for None."""
    if value is None:
        return "<None>"
    value = getattr(value, "__func__", value)
    for attribute in ("__qualname__", "__name__"):
        name = getattr(value, attribute, None)
        if isinstance(name, str):
            return name
    return type(value).__name__


def source_diff(original: "Any", replacement: "Any") -> str:
    """Unified diff of ``original``'s source against ``replacement``'s ("" when either
    has no source)."""
    import difflib
    import inspect

    def source(value: "Any") -> "Optional[str]":
        value = getattr(value, "__func__", value)
        value = getattr(value, "__wrapped__", value)
        try:
            return inspect.getsource(value)
        except (OSError, TypeError):
            return None
    before, after = source(original), source(replacement)
    if before is None or after is None:
        return ""
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                        fromfile=f"original: {callable_name(original)}",
                                        tofile=f"replacement: {callable_name(replacement)}"))


def nuscenes_kit_available() -> bool:
    """Whether the nuScenes devkit that mmdet3d's nuScenes metric uses is importable."""
    from importlib.util import find_spec
    try:
        return find_spec("nuscenes") is not None and find_spec("pyquaternion") is not None
    except (ImportError, ValueError):
        return False




__all__ = ["import_module_or_none", "object_at", "callable_name", "source_diff",
           "nuscenes_kit_available"]

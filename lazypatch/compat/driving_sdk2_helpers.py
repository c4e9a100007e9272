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
    """The object at dotted ``path`` (``pkg.mod.Class.attr``), importing the longest
    module prefix when ``ensure_import``; None when any part is missing."""
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
            value = getattr(value, attribute, None)
            if value is None:
                return None
        return value
    return None


def callable_name(value: "Any") -> str:
    """``module.qualname`` of a function or class, else its ``repr``."""
    value = getattr(value, "__func__", value)
    module = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if qualname is None:
        return repr(value)
    return f"{module}.{qualname}" if module else str(qualname)


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
                                        fromfile=callable_name(original),
                                        tofile=callable_name(replacement)))


def nuscenes_kit_available() -> bool:
    """Whether the nuScenes devkit that mmdet3d's nuScenes metric uses is importable."""
    from importlib.util import find_spec
    try:
        return find_spec("nuscenes") is not None and find_spec("pyquaternion") is not None
    except (ImportError, ValueError):
        return False




def training_loop_patch(target_module: str, options: "Any") -> "Any":
    """DrivingSDK's ``build_mmengine_*_train_loop_patch`` / ``build_mmcv_*_runner_patch``:
    a ``LegacyPatch`` on ``target_module`` that turns on profiling and the brake from
    ``options`` (``enable_profiler``, ``profiling_path``, ``profiling_level``,
    ``step_ctrl`` = (wait, warmup, active, repeat, skip_first), ``enable_brake``,
    ``brake_step``). lazypatch's training pack hooks the loop instead of replacing it,
    so one patch serves epoch- and iteration-based loops of mmengine and mmcv alike."""
    from .driving_sdk2_patches import LegacyPatch
    settings = dict(options or {})
    if settings.get("enable_profiler"):
        level = settings.get("profiling_level", 0)
        if not isinstance(level, int) or not 0 <= level <= 2:
            raise ValueError(f"valid profiling levels are integers within range [0, 2], "
                             f"got {level!r}")

    def training_loop(module: "Any", _options: "Any") -> None:
        from ..registry import training
        if settings.get("enable_profiler"):
            wait, warmup, active, repeat, skip_first = tuple(
                settings.get("step_ctrl", (1, 1, 1, 1, 20)))
            training.profile_to(settings["profiling_path"], settings.get("profiling_level", 0),
                                skip_first=skip_first, wait=wait, warmup=warmup,
                                active=active, repeat=repeat)
        if settings.get("enable_brake"):
            training.brake_at(settings.get("brake_step"))
    return LegacyPatch(training_loop, settings, target_module=target_module)


def build_mmengine_epoch_train_loop_patch(options: "Any") -> "Any":
    """Profiling and brake for mmengine's epoch-based loop (``training_loop_patch``)."""
    return training_loop_patch("mmengine", options)


def build_mmengine_iter_train_loop_patch(options: "Any") -> "Any":
    """Profiling and brake for mmengine's iteration-based loop (``training_loop_patch``)."""
    return training_loop_patch("mmengine", options)


def build_mmcv_epoch_runner_patch(options: "Any") -> "Any":
    """Profiling and brake for mmcv 1.x's EpochBasedRunner (``training_loop_patch``)."""
    return training_loop_patch("mmcv", options)


def build_mmcv_iter_runner_patch(options: "Any") -> "Any":
    """Profiling and brake for mmcv 1.x's IterBasedRunner (``training_loop_patch``)."""
    return training_loop_patch("mmcv", options)


__all__ = ["import_module_or_none", "object_at", "callable_name", "source_diff",
           "nuscenes_kit_available", "training_loop_patch",
           "build_mmengine_epoch_train_loop_patch", "build_mmengine_iter_train_loop_patch",
           "build_mmcv_epoch_runner_patch", "build_mmcv_iter_runner_patch"]

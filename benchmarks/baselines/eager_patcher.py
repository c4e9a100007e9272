"""BASELINE, not part of lazypatch: an eager patcher in the style of DrivingSDK's.

Modelled on seed 002's ``mx_driving.patcher`` (``Patch``, ``Patcher``,
``PatcherBuilder``, ``default_patcher_builder.build()``): ``Patcher.apply()``
imports every root module it has patches for (mmcv, torch, numpy, mmdet,
mmdet3d), up front, whether or not the program will use it, and runs the
patch functions on them, turning failures into warnings. The benchmarks
compare a script that needs only numpy (or only torch) under this patcher
against the same script under ``import lazypatch.auto``.

The patch functions here are small and real (a version spoof so that mmdet
and mmdet3d accept mmcv 2.2, NumPy aliases), so that the cost measured is the
eager imports, as it is in DrivingSDK, and not the patches.
"""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType
from typing import Callable, Dict, List, Optional, Set


class Patch:
    """One patch function ``func(root_module, options)``, as in DrivingSDK."""

    def __init__(self, func: Callable[[ModuleType, Dict], None],
                 options: Optional[Dict] = None, priority: int = 0) -> None:
        self.func = func
        self.name = func.__name__
        self.options = options or {}
        self.priority = priority


class Patcher:
    """Imports each root module and applies its patches, at ``apply()`` time."""

    def __init__(self, module_patches: Dict[str, List[Patch]], blacklist: Set[str]) -> None:
        self.module_patches = module_patches
        self.blacklist = blacklist

    def apply(self) -> None:
        for module_name, patches in self.module_patches.items():
            try:
                module = importlib.import_module(module_name)   # the eager import
            except Exception as error:  # DrivingSDK: a missing library is a warning
                warnings.warn(f"patcher: cannot import {module_name}: {error}", stacklevel=2)
                continue
            for patch in sorted(patches, key=lambda item: item.priority):
                if patch.name in self.blacklist:
                    continue
                try:
                    patch.func(module, patch.options)
                except Exception as error:
                    warnings.warn(f"patcher: {patch.name} failed on {module_name}: {error}",
                                  stacklevel=2)

    def __enter__(self) -> "Patcher":
        self.apply()
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


class PatcherBuilder:
    """Fluent construction of a Patcher, as in DrivingSDK."""

    def __init__(self) -> None:
        self.module_patches: Dict[str, List[Patch]] = {}
        self.blacklist: Set[str] = set()

    def add_module_patch(self, module_name: str, *patches: Patch) -> "PatcherBuilder":
        self.module_patches.setdefault(module_name, []).extend(patches)
        return self

    def disable_patches(self, *patch_names: str) -> "PatcherBuilder":
        self.blacklist.update(patch_names)
        return self

    def build(self) -> Patcher:
        return Patcher(self.module_patches, self.blacklist)


def patch_mmcv_version(mmcv: ModuleType, options: Dict) -> None:
    """mmdet 3.3 and mmdet3d 1.4 assert mmcv < 2.2; claim 2.1.0 so they import."""
    mmcv.__version__ = "2.1.0"


def numpy_type(np: ModuleType, options: Dict) -> None:
    """Restore the NumPy aliases removed in NumPy 1.24 / 2.0."""
    for alias, value in (("int", int), ("float", float), ("bool", bool), ("object", object)):
        if alias not in np.__dict__:
            setattr(np, alias, value)


def torch_index(torch: ModuleType, options: Dict) -> None:
    """Stand-in for DrivingSDK's torch patches: touch the attribute they replace."""
    getattr(torch.Tensor, "__getitem__")


def mmdet_noop(module: ModuleType, options: Dict) -> None:
    """Stand-in for the mmdet / mmdet3d patches: reach one attribute."""
    getattr(module, "__version__", None)


# The order matters as in DrivingSDK: mmcv's version is patched before mmdet imports.
default_patcher_builder = (
    PatcherBuilder()
    .add_module_patch("mmcv", Patch(patch_mmcv_version))
    .add_module_patch("torch", Patch(torch_index))
    .add_module_patch("numpy", Patch(numpy_type))
    .add_module_patch("mmdet", Patch(mmdet_noop))
    .add_module_patch("mmdet3d", Patch(mmdet_noop))
)

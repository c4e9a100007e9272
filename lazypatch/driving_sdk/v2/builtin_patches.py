"""DrivingSDK's built-in patches under their DrivingSDK names, doing lazypatch's work.

DrivingSDK 2.0 ships its built-in set as ``Patch`` classes (``ResNetFP16``,
``TensorIndex``, ``NumpyCompat``...) and 1.0 ships it as functions
``func(module, options)`` (``index``, ``numpy_type``, ``msda``...); migration
files import both. The classes are ``v2.builtin_groups``'s (DrivingSDK's
shape, lazypatch's packs doing the work); each 1.0 function applies its class's
patches.

``ensure_mmcv_version(version)`` presents ``version`` as ``mmcv.__version__``
to mmdet's and mmdet3d's own imports only (undone when each body ends), where
DrivingSDK imports both at once to get past their version asserts.
"""

from __future__ import annotations

import sys

from . import builtin_groups as groups
from .builtin_groups import MultiScaleDeformableAttention, NuScenesDataset
from .patches import LegacyPatch, unique_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List


# DrivingSDK's class name for each built-in group, and its name.
CLASS_NAMES = {
    "MultiScaleDeformableAttention": "multi_scale_deformable_attention",
    "DeformConv": "deform_conv",
    "ModulatedDeformConv": "modulated_deform_conv",
    "SparseConv3D": "spconv3d",
    "Voxelization": "voxelization",
    "Stream": "stream",
    "DDP": "ddp",
    "OptimizerHooks": "optimizer_hooks",
    "OptimizerWrapper": "optimizer_wrapper",
    "PseudoSampler": "pseudo_sampler",
    "ResNetAddRelu": "resnet_add_relu",
    "ResNetMaxPool": "resnet_maxpool",
    "ResNetFP16": "resnet_fp16",
    "NuScenesDataset": "nuscenes_dataset",
    "NuScenesMetric": "nuscenes_metric",
    "NumpyCompat": "numpy_compat",
    "TensorIndex": "tensor_index",
    "BatchMatmul": "batch_matmul",
    "TorchScatter": "torch_scatter",
}
CLASSES: "Dict[str, type]" = {class_name: getattr(groups, class_name) for class_name in CLASS_NAMES}
# Each group by its 1.0 name: a 1.0 builder given a function of that name adds the
# group's patches instead (DrivingSDK's _LEGACY_NAME_TO_CLASS; one table, changes seen).
LEGACY_NAME_TO_CLASS: "Dict[str, Any]" = {
    getattr(group, "legacy_name"): group for group in CLASSES.values()
    if getattr(group, "legacy_name", None)}

# DrivingSDK's 1.0 function names (its 2.0 keeps them): each turns its group's patches on.
FUNCTION_NAMES = {
    "msda": "MultiScaleDeformableAttention", "dc": "DeformConv", "mdc": "ModulatedDeformConv",
    "spconv3d": "SparseConv3D", "stream": "Stream", "ddp": "DDP",
    "optimizer_hooks": "OptimizerHooks", "optimizer_wrapper": "OptimizerWrapper",
    "index": "TensorIndex", "batch_matmul": "BatchMatmul", "numpy_type": "NumpyCompat",
    "pseudo_sampler": "PseudoSampler", "resnet_add_relu": "ResNetAddRelu",
    "resnet_maxpool": "ResNetMaxPool", "resnet_fp16": "ResNetFP16",
    "nuscenes_dataset": "NuScenesDataset", "nuscenes_metric": "NuScenesMetric",
    "scatter": "TorchScatter",
}


def _legacy_function(function_name: str, group_class: "Any") -> "Callable[[Any, Any], None]":
    def legacy(module: "Any", options: "Any") -> None:
        patches = group_class.patches(options)
        if sys.modules.get(getattr(module, "__name__", "")) is module:
            for patch in patches:     # the imported module: lazypatch's packs do the work
                patch.apply()
        else:
            for patch in patches:     # another object (a stand-in): patched as given
                patch.apply_to(module)
    legacy.__name__ = legacy.__qualname__ = function_name
    legacy.__doc__ = (f"DrivingSDK 1.0's {function_name}(module, options): "
                      f"{group_class.__name__}'s patches ({group_class.__doc__}) for the "
                      f"imported module; on another module object, made on that object now")
    return legacy


FUNCTIONS: "Dict[str, Callable[[Any, Any], None]]" = {
    function_name: _legacy_function(function_name, CLASSES[class_name])
    for function_name, class_name in FUNCTION_NAMES.items()}
msda = FUNCTIONS["msda"]
dc = FUNCTIONS["dc"]
mdc = FUNCTIONS["mdc"]
spconv3d = FUNCTIONS["spconv3d"]
stream = FUNCTIONS["stream"]
ddp = FUNCTIONS["ddp"]
optimizer_hooks = FUNCTIONS["optimizer_hooks"]
optimizer_wrapper = FUNCTIONS["optimizer_wrapper"]
index = FUNCTIONS["index"]
batch_matmul = FUNCTIONS["batch_matmul"]
numpy_type = FUNCTIONS["numpy_type"]
pseudo_sampler = FUNCTIONS["pseudo_sampler"]
resnet_add_relu = FUNCTIONS["resnet_add_relu"]
resnet_maxpool = FUNCTIONS["resnet_maxpool"]
resnet_fp16 = FUNCTIONS["resnet_fp16"]
nuscenes_dataset = FUNCTIONS["nuscenes_dataset"]
nuscenes_metric = FUNCTIONS["nuscenes_metric"]
scatter = FUNCTIONS["scatter"]

MSDA = MultiScaleDeformableAttention
NuScenes = NuScenesDataset

# The groups DrivingSDK's default_patcher holds, in its order.
DEFAULT_CLASS_NAMES = ("MultiScaleDeformableAttention", "DeformConv", "ModulatedDeformConv",
                       "SparseConv3D", "Stream", "DDP", "ResNetAddRelu", "ResNetMaxPool",
                       "NumpyCompat", "NuScenesDataset", "NuScenesMetric", "TensorIndex",
                       "BatchMatmul")


def ensure_mmcv_version(expected_version: str) -> "List[str]":
    """Present ``expected_version`` as ``mmcv.__version__`` while mmdet's and mmdet3d's
    bodies run (their version asserts), undone when each ends; the patch names."""
    if not isinstance(expected_version, str) or not expected_version.strip():
        raise TypeError(f"ensure_mmcv_version: expected_version must be a version string "
                        f"such as '2.1.0', got {expected_version!r}")
    from ...declare.registration import register
    from ...state import BEFORE
    names = []
    for package in ("mmdet", "mmdet3d"):
        def present(module: "Any", patch: "Any", package: str = package) -> None:
            from importlib import import_module
            mmcv = import_module("mmcv")   # mmdet's own first line imports it anyway
            patch.setattr(mmcv, "__version__", expected_version)
            patch.revert_after_import()
            patch.note(f"presented mmcv.__version__ = {expected_version!r} to {package}")
        name = unique_name(f"mx_driving.ensure_mmcv_version.{package}")
        register(present, package, phase=BEFORE, name=name, tags=("driving_sdk",))
        names.append(name)
    return names


def patch_mmcv_version(expected_version: str) -> "List[str]":
    """DrivingSDK 1.0's name for ``ensure_mmcv_version``."""
    return ensure_mmcv_version(expected_version)


def training_loop_patch(target_module: str, options: "Any") -> "Any":
    """DrivingSDK's ``build_mmengine_*_train_loop_patch`` / ``build_mmcv_*_runner_patch``:
    a ``LegacyPatch`` on ``target_module`` that turns on profiling and the brake from
    ``options`` (``enable_profiler``, ``profiling_path``, ``profiling_level``,
    ``step_ctrl`` = (wait, warmup, active, repeat, skip_first), ``enable_brake``,
    ``brake_step``). lazypatch's training pack hooks the loop instead of replacing it,
    so one patch serves epoch- and iteration-based loops of mmengine and mmcv alike."""
    settings = dict(options or {})
    if settings.get("enable_profiler"):
        level = settings.get("profiling_level", 0)
        if not isinstance(level, int) or not 0 <= level <= 2:
            raise ValueError(f"valid profiling levels are integers within range [0, 2], "
                             f"got {level!r}")

    def training_loop(module: "Any", _options: "Any") -> None:
        from ...registry import training
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


__all__ = sorted(CLASSES) + sorted(FUNCTIONS) + [
    "MSDA", "NuScenes", "CLASSES", "LEGACY_NAME_TO_CLASS", "FUNCTIONS", "DEFAULT_CLASS_NAMES",
    "ensure_mmcv_version", "patch_mmcv_version", "training_loop_patch",
    "build_mmengine_epoch_train_loop_patch", "build_mmengine_iter_train_loop_patch",
    "build_mmcv_epoch_runner_patch", "build_mmcv_iter_runner_patch"]

"""``mx_driving.patcher`` for code written against DrivingSDK's patcher, on lazypatch.

A migration file's first line, ``from mx_driving.patcher import ...``, works
unchanged when lazypatch is active and DrivingSDK is not installed: lazypatch
provides ``mx_driving`` as a package holding only ``patcher`` (DrivingSDK's
compiled ops are not lazypatch's to provide), whose submodules are the files of
this folder, named as DrivingSDK names them (``patch``, ``patcher``,
``patcher_logger``, ``reporting``, ``version``, ``legacy`` and the built-in
``*_patch`` files). Each file only names objects of ``lazypatch.driving_sdk``, so a
file loaded by path under DrivingSDK's module name (DrivingSDK's own tests do
that) gives the very same classes. Where DrivingSDK is installed, its package
stays in charge unless ``LAZYPATCH_DRIVING_SDK=lazypatch`` asks for this one
(the ``driving_sdk_api`` built-in pack declares which).

Everything DrivingSDK's ``mx_driving.patcher`` exports is here: the 2.0 API, the
built-in groups as classes, the 1.0 builder and the 1.0 built-in functions.
Where the semantics differ on purpose (lazy application, exact undo, reports),
docs/driving_sdk.md has the table.

On an Ascend host (torch_npu importable), importing the patcher also turns on
lazypatch's device pack, which sends CUDA calls to the NPU as DrivingSDK's
import of ``torch_npu.contrib.transfer_to_npu`` does (recorded in the report,
undone by ``lazypatch.disable("device")``); elsewhere it does not.
"""

from lazypatch.driving_sdk.mx_driving import Patch as LegacyPatchWrapper
from lazypatch.driving_sdk.mx_driving import PatcherBuilder, default_patcher_builder
from lazypatch.driving_sdk.provision import turn_on_npu_device_handling
from lazypatch.driving_sdk.v2.builtin_groups import (
    DDP,
    BatchMatmul,
    DeformConv,
    ModulatedDeformConv,
    MultiScaleDeformableAttention,
    NumpyCompat,
    NuScenes,
    NuScenesDataset,
    NuScenesMetric,
    OptimizerHooks,
    OptimizerWrapper,
    PseudoSampler,
    ResNetAddRelu,
    ResNetFP16,
    ResNetMaxPool,
    SparseConv3D,
    Stream,
    TensorIndex,
    TorchScatter,
    Voxelization,
)
from lazypatch.driving_sdk.v2.builtin_patches import (
    CLASS_NAMES,
    CLASSES,
    DEFAULT_CLASS_NAMES,
    LEGACY_NAME_TO_CLASS,
    MSDA,
    batch_matmul,
    dc,
    ddp,
    ensure_mmcv_version,
    index,
    mdc,
    msda,
    numpy_type,
    nuscenes_dataset,
    nuscenes_metric,
    optimizer_hooks,
    optimizer_wrapper,
    pseudo_sampler,
    resnet_add_relu,
    resnet_fp16,
    resnet_maxpool,
    scatter,
    spconv3d,
    stream,
)
from lazypatch.driving_sdk.v2.patcher import Patcher, default_patcher, replace_with
from lazypatch.driving_sdk.v2.patches import (
    AtomicPatch,
    BasePatch,
    LegacyPatch,
    Patch,
    RegistryPatch,
    with_imports,
)
from lazypatch.driving_sdk.v2.results import PatchResult, PatchStatus
from lazypatch.driving_sdk.v2.summary import (
    configure_patcher_logging,
    patcher_logger,
    set_patcher_log_level,
)
from lazypatch.driving_sdk.v2.versions import (
    check_version,
    get_version,
    is_mmcv_v1x,
    is_mmcv_v2x,
    mmcv_version,
)

LegacyPatcherBuilder = PatcherBuilder


def patch_mmcv_version(expected_version: str) -> "list":
    """DrivingSDK 1.0's name for ``ensure_mmcv_version``, which it calls through this
    package (as DrivingSDK's does: a program or test that swaps the package's
    ``ensure_mmcv_version`` is heard); the patch names."""
    return ensure_mmcv_version(expected_version)

# DrivingSDK's tables of its built-in groups (its __all__ lists them as internal).
_ALL_PATCH_CLASSES = [CLASSES[name] for name in CLASS_NAMES]
_DEFAULT_PATCH_CLASSES = [CLASSES[name] for name in DEFAULT_CLASS_NAMES]
_LEGACY_NAME_TO_CLASS = LEGACY_NAME_TO_CLASS   # the builders' own table

turn_on_npu_device_handling()

__all__ = [
    "Patcher", "BasePatch", "Patch", "AtomicPatch", "RegistryPatch", "LegacyPatch",
    "replace_with", "with_imports",
    "patcher_logger", "configure_patcher_logging", "set_patcher_log_level",
    "PatchStatus", "PatchResult",
    "get_version", "check_version", "mmcv_version", "is_mmcv_v1x", "is_mmcv_v2x",
    "default_patcher",
    "MultiScaleDeformableAttention", "MSDA", "DeformConv", "ModulatedDeformConv",
    "SparseConv3D", "Voxelization", "Stream", "DDP", "OptimizerHooks", "OptimizerWrapper",
    "PseudoSampler", "ResNetAddRelu", "ResNetMaxPool", "ResNetFP16",
    "NuScenesDataset", "NuScenesMetric", "NuScenes",
    "NumpyCompat", "TensorIndex", "BatchMatmul", "TorchScatter",
    "PatcherBuilder", "LegacyPatcherBuilder", "LegacyPatchWrapper", "default_patcher_builder",
    "msda", "dc", "mdc", "spconv3d", "patch_mmcv_version", "ensure_mmcv_version", "stream",
    "ddp", "optimizer_hooks", "optimizer_wrapper", "index", "batch_matmul", "numpy_type",
    "pseudo_sampler", "resnet_add_relu", "resnet_maxpool", "resnet_fp16",
    "nuscenes_dataset", "nuscenes_metric", "scatter",
    "_ALL_PATCH_CLASSES", "_DEFAULT_PATCH_CLASSES", "_LEGACY_NAME_TO_CLASS",
]

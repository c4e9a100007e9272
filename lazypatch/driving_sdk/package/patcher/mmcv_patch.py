"""``mx_driving.patcher.mmcv_patch``: built-in groups and 1.0 functions.

Names only (see ``__init__.py`` of this folder): loaded under any name, this file
gives the very objects of ``lazypatch.driving_sdk``.
"""

from lazypatch.driving_sdk.v2.builtin_groups import (
    DDP,
    DeformConv,
    ModulatedDeformConv,
    MultiScaleDeformableAttention,
    OptimizerHooks,
    SparseConv3D,
    Stream,
    Voxelization,
)
from lazypatch.driving_sdk.v2.builtin_patches import (
    build_mmcv_epoch_runner_patch,
    build_mmcv_iter_runner_patch,
    dc,
    mdc,
    msda,
    patch_mmcv_version,
    spconv3d,
)

__all__ = ["build_mmcv_epoch_runner_patch", "build_mmcv_iter_runner_patch", "DDP",
           "DeformConv", "ModulatedDeformConv", "MultiScaleDeformableAttention",
           "OptimizerHooks", "SparseConv3D", "Stream", "Voxelization", "dc", "mdc", "msda",
           "patch_mmcv_version", "spconv3d"]

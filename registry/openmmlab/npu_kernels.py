"""mmcv ops on Ascend NPUs through DrivingSDK's ``mx_driving`` kernels.

The same three replacements as DrivingSDK's one-click patcher
(``mx_driving/patcher/mmcv_patch.py``: ``msda``, ``dc``, ``mdc``) plus
voxelization, but lazy (applied when ``mmcv.ops`` is imported), undoable,
and active only where both ``torch_npu`` and ``mx_driving`` can be imported.
Every replaced module global is also rebound where other modules copied it
(``mmcv.ops.deform_conv2d`` re-exports ``mmcv.ops.deform_conv.deform_conv2d``),
which the DrivingSDK patcher misses.
"""

from __future__ import annotations

import importlib.machinery
from types import ModuleType
from typing import Any

import lazypatch

REQUIRED_MODULES = ("torch_npu", "mx_driving")


def _import_mx_driving(patch: lazypatch.PatchContext) -> ModuleType:
    """mx_driving, or skip the patch when the Ascend stack is not importable.

    ``PathFinder.find_spec`` on top-level names only reads the path (no parent
    package to import), so hosts without an NPU pay no import for this check; and it
    sees only what is installed, not the ``mx_driving`` lazypatch provides for code
    written against DrivingSDK's patcher (it has no kernels).
    """
    missing = [name for name in REQUIRED_MODULES
               if importlib.machinery.PathFinder.find_spec(name) is None]
    if missing:
        patch.skip(f"{' and '.join(missing)} not importable: not an Ascend NPU host "
                   f"with DrivingSDK")
    return importlib.import_module("mx_driving")


def use_mx_driving_msda(mmcv_ops: ModuleType, patch: lazypatch.PatchContext) -> None:
    """Make mmcv's ``MultiScaleDeformableAttnFunction`` run mx_driving's kernel.

    The class keeps its identity (subclasses and stored references follow);
    its ``forward``/``backward`` become adapters: mmcv passes ``im2col_step``,
    which mx_driving's forward does not take, and expects one more gradient
    (``None`` for ``im2col_step``) than mx_driving's backward returns.
    """
    mx_driving = _import_mx_driving(patch)
    kernel = mx_driving.MultiScaleDeformableAttnFunction
    target = mmcv_ops.multi_scale_deform_attn.MultiScaleDeformableAttnFunction

    def forward(ctx: Any, value: Any, spatial_shapes: Any, level_start_index: Any,
                sampling_locations: Any, attention_weights: Any, im2col_step: Any = None) -> Any:
        return kernel.forward(ctx, value, spatial_shapes, level_start_index,
                              sampling_locations, attention_weights)

    def backward(ctx: Any, grad_output: Any) -> Any:
        return (*kernel.backward(ctx, grad_output), None)

    patch.setattr(target, "forward", staticmethod(forward))
    patch.setattr(target, "backward", staticmethod(backward))
    patch.note("MultiScaleDeformableAttnFunction.forward/backward -> "
               "mx_driving.MultiScaleDeformableAttnFunction")


def use_mx_driving_deform_conv(mmcv_ops: ModuleType, patch: lazypatch.PatchContext) -> None:
    """Replace mmcv's (modulated) deformable convolution functions by mx_driving's."""
    mx_driving = _import_mx_driving(patch)
    for module, names in ((mmcv_ops.deform_conv, ("DeformConv2dFunction", "deform_conv2d")),
                          (mmcv_ops.modulated_deform_conv,
                           ("ModulatedDeformConv2dFunction", "modulated_deform_conv2d"))):
        for name in names:
            patch.setattr(module, name, getattr(mx_driving, name), rebind=True)
    patch.note("DeformConv2dFunction, deform_conv2d, ModulatedDeformConv2dFunction, "
               "modulated_deform_conv2d -> mx_driving")


def use_mx_driving_voxelization(mmcv_ops: ModuleType, patch: lazypatch.PatchContext) -> None:
    """Replace mmcv's ``voxelization`` (used by ``Voxelization.forward``) by mx_driving's,
    which takes the same arguments (points, voxel_size, coors_range, max_points,
    max_voxels, deterministic)."""
    mx_driving = _import_mx_driving(patch)
    patch.setattr(mmcv_ops.voxelize, "voxelization", mx_driving.voxelization, rebind=True)
    patch.note("mmcv.ops.voxelize.voxelization -> mx_driving.voxelization")

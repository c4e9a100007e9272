"""DrivingSDK 2.0's built-in patch groups, by their names, mapped onto lazypatch's packs.

DrivingSDK's ``default_patcher`` holds Patch classes named ``tensor_index``,
``numpy_compat``, ``multi_scale_deformable_attention``...; each has a
``legacy_name``, its DrivingSDK 1.0 function name (``index``, ``numpy_type``,
``msda``). Here the same work is done by lazypatch's built-in packs under other
names (``ascend.tensor_bool_index``, ``numpy_compat.*``,
``openmmlab.mx_driving.msda``). This table lets a ported script keep writing
DrivingSDK's names: ``default_patcher.disable("tensor_index")``,
``enable("resnet_fp16")`` (an optional group, off by default),
``conflicts_with = ["resnet_maxpool"]``; a 1.0 name gives a ``FutureWarning``
naming the 2.0 one. Groups lazypatch has no pack for (``nuscenes_dataset``,
``torch_scatter``) map to nothing.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, Iterable, Optional, Set, Tuple


class BuiltinGroup:
    """One DrivingSDK Patch class of its built-in set and the lazypatch patches doing its
    work (``conflicts_with`` as DrivingSDK declares it)."""

    __slots__ = ("name", "legacy_name", "patches", "conflicts_with")

    def __init__(self, name: str, legacy_name: str, patches: "Tuple[str, ...]",
                 conflicts_with: "Tuple[str, ...]" = ()) -> None:
        self.name = name
        self.legacy_name = legacy_name
        self.patches = patches
        self.conflicts_with = conflicts_with


GROUPS = (
    BuiltinGroup("multi_scale_deformable_attention", "msda", ("openmmlab.mx_driving.msda",)),
    BuiltinGroup("deform_conv", "dc", ("openmmlab.mx_driving.deform_conv",)),
    # One lazypatch patch covers DeformConv2d and ModulatedDeformConv2d.
    BuiltinGroup("modulated_deform_conv", "mdc", ("openmmlab.mx_driving.deform_conv",)),
    BuiltinGroup("spconv3d", "", ("ascend.sparse_conv",)),
    BuiltinGroup("voxelization", "", ("openmmlab.mx_driving.voxelization",)),
    BuiltinGroup("stream", "", ("ascend.mmcv1_scatter_stream",)),
    BuiltinGroup("ddp", "", ("ascend.mmcv1_ddp",)),
    BuiltinGroup("optimizer_hooks", "", ("ascend.mmcv1_optimizer_hook",
                                         "ascend.mmcv1_fp16_scaler")),
    BuiltinGroup("optimizer_wrapper", "", ("ascend.optim_wrapper_clip",)),
    BuiltinGroup("pseudo_sampler", "", ("ascend.pseudo_sampler", "ascend.pseudo_sampler_mmdet2")),
    BuiltinGroup("resnet_add_relu", "", ("ascend.resnet_add_relu",)),
    BuiltinGroup("resnet_maxpool", "", ("ascend.resnet_maxpool",)),
    BuiltinGroup("resnet_fp16", "", ("ascend.resnet_fp16",), ("resnet_maxpool",)),
    BuiltinGroup("numpy_compat", "numpy_type", ("numpy_compat.attribute_hook",
                                                "numpy_compat.type_aliases",
                                                "numpy_compat.function_aliases",
                                                "numpy_compat.constant_aliases")),
    BuiltinGroup("nuscenes_dataset", "", ()),
    BuiltinGroup("nuscenes_metric", "", ("ascend.nuscenes_metric",)),
    BuiltinGroup("tensor_index", "index", ("ascend.tensor_bool_index",)),
    BuiltinGroup("batch_matmul", "", ("ascend.batch_matmul",)),
    BuiltinGroup("torch_scatter", "scatter", ()),
)

BY_NAME: "Dict[str, BuiltinGroup]" = {group.name: group for group in GROUPS}
BY_LEGACY_NAME: "Dict[str, BuiltinGroup]" = {group.legacy_name: group for group in GROUPS
                                             if group.legacy_name}


def renamed(name: str) -> "Optional[str]":
    """The 2.0 name of a built-in group's 1.0 name (``numpy_type`` -> ``numpy_compat``)."""
    group = BY_LEGACY_NAME.get(name)
    return group.name if group is not None and name not in BY_NAME else None


def lazypatch_names(names: "Iterable[str]") -> "Set[str]":
    """The lazypatch patches doing the work of these DrivingSDK built-in groups."""
    return {patch for name in names if name in BY_NAME for patch in BY_NAME[name].patches}


def group_of(patch_name: str) -> "Optional[str]":
    """The DrivingSDK group a lazypatch built-in patch belongs to (the first that lists
    it), or None."""
    for group in GROUPS:
        if patch_name in group.patches:
            return group.name
    return None


__all__ = ["BuiltinGroup", "GROUPS", "BY_NAME", "BY_LEGACY_NAME", "renamed",
           "lazypatch_names", "group_of"]

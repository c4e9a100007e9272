"""A pure-PyTorch stand-in for mmcv's compiled extension module ``mmcv._ext``.

mmcv-lite ships the Python half of ``mmcv.ops`` but not the compiled half:
every ``mmcv/ops/*.py`` runs ``ext_loader.load_ext('_ext', [names...])`` at
import time, which imports ``mmcv._ext`` and asserts that each name exists.
:func:`build_ext_module` returns a module object that satisfies that contract:

* the names listed in :data:`IMPLEMENTED` are real kernels written with plain
  tensor operations (device-agnostic, same call signatures as the C++/CUDA
  bindings, results written into the caller's preallocated tensors);
* every other name that the installed mmcv asks for (found by parsing its op
  sources with :mod:`ast`, so the set follows the installed mmcv version) is a
  callable that raises :class:`NotImplementedError` with a message naming the
  op and the way out.

This file must stay importable without torch or mmcv: the kernel modules
(which import torch at the top) are imported only inside
:func:`build_ext_module`.
"""
from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import os
import types
from typing import Any, Callable, Dict, FrozenSet, Iterable, Optional, Tuple

__all__ = [
    "IMPLEMENTED",
    "PATCH_NAME",
    "build_ext_module",
    "implemented_names",
    "requested_ext_names",
    "unimplemented_kernel",
]

#: Name of the lazypatch patch that installs this module; quoted in errors.
PATCH_NAME = "openmmlab.mmcv_ext"

#: ext function name -> (kernel submodule, attribute). Kept as strings so that
#: importing this package does not import torch.
IMPLEMENTED: Dict[str, Tuple[str, str]] = {
    # build information (mmcv.utils.collect_env calls these)
    "get_compiler_version": ("info", "get_compiler_version"),
    "get_compiling_cuda_version": ("info", "get_compiling_cuda_version"),
    # multi-scale deformable attention
    "ms_deform_attn_forward": ("msda", "ms_deform_attn_forward"),
    "ms_deform_attn_backward": ("msda", "ms_deform_attn_backward"),
    # axis-aligned NMS family
    "nms": ("nms", "nms"),
    "softnms": ("nms", "softnms"),
    "nms_match": ("nms", "nms_match"),
    # rotated boxes
    "box_iou_rotated": ("rotated", "box_iou_rotated"),
    "nms_rotated": ("rotated", "nms_rotated"),
    # sigmoid and softmax focal loss (mmdet takes the sigmoid one when its predictions are on an accelerator)
    "sigmoid_focal_loss_forward": ("focal_loss", "sigmoid_focal_loss_forward"),
    "sigmoid_focal_loss_backward": ("focal_loss", "sigmoid_focal_loss_backward"),
    "softmax_focal_loss_forward": ("focal_loss", "softmax_focal_loss_forward"),
    "softmax_focal_loss_backward": ("focal_loss", "softmax_focal_loss_backward"),
    # chamfer distance (Oriented RepPoints' point-set loss)
    "chamfer_distance_forward": ("chamfer", "chamfer_distance_forward"),
    "chamfer_distance_backward": ("chamfer", "chamfer_distance_backward"),
    # RoIAlign
    "roi_align_forward": ("roi_align", "roi_align_forward"),
    "roi_align_backward": ("roi_align", "roi_align_backward"),
    # deformable convolution v1 / v2
    "deform_conv_forward": ("deform_conv", "deform_conv_forward"),
    "deform_conv_backward_input": ("deform_conv", "deform_conv_backward_input"),
    "deform_conv_backward_parameters": (
        "deform_conv", "deform_conv_backward_parameters"),
    "modulated_deform_conv_forward": (
        "deform_conv", "modulated_deform_conv_forward"),
    "modulated_deform_conv_backward": (
        "deform_conv", "modulated_deform_conv_backward"),
    # point clouds: voxelization and voxel feature scatter
    "hard_voxelize_forward": ("voxelize", "hard_voxelize_forward"),
    "dynamic_voxelize_forward": ("voxelize", "dynamic_voxelize_forward"),
    "dynamic_point_to_voxel_forward": (
        "scatter_points", "dynamic_point_to_voxel_forward"),
    "dynamic_point_to_voxel_backward": (
        "scatter_points", "dynamic_point_to_voxel_backward"),
    # 3D boxes
    "iou3d_boxes_overlap_bev_forward": (
        "iou3d", "iou3d_boxes_overlap_bev_forward"),
    "iou3d_nms3d_forward": ("iou3d", "iou3d_nms3d_forward"),
    "iou3d_nms3d_normal_forward": ("iou3d", "iou3d_nms3d_normal_forward"),
    "points_in_boxes_part_forward": (
        "points_in_boxes", "points_in_boxes_part_forward"),
    "points_in_boxes_all_forward": (
        "points_in_boxes", "points_in_boxes_all_forward"),
    "points_in_boxes_cpu_forward": (
        "points_in_boxes", "points_in_boxes_cpu_forward"),
    # point-cloud neighbourhoods (PointNet++ family, PAConv, diff IoU)
    **{name: ("points", name) for name in (
        "furthest_point_sampling_forward",
        "furthest_point_sampling_with_dist_forward",
        "knn_forward", "three_nn_forward",
        "three_interpolate_forward", "three_interpolate_backward",
        "ball_query_forward",
        "group_points_forward", "group_points_backward",
        "gather_points_forward", "gather_points_backward",
        "stack_ball_query_forward",
        "stack_group_points_forward", "stack_group_points_backward")},
    "assign_score_withk_forward": ("assign_score", "assign_score_withk_forward"),
    "assign_score_withk_backward": (
        "assign_score", "assign_score_withk_backward"),
    "roipoint_pool3d_forward": ("roipoint_pool3d", "roipoint_pool3d_forward"),
    "roiaware_pool3d_forward": ("roiaware_pool3d", "roiaware_pool3d_forward"),
    "roiaware_pool3d_backward": ("roiaware_pool3d", "roiaware_pool3d_backward"),
    "points_in_polygons_forward": (
        "points_in_polygons", "points_in_polygons_forward"),
    "diff_iou_rotated_sort_vertices_forward": (
        "sort_vertices", "diff_iou_rotated_sort_vertices_forward"),
    # sparse convolution (SECOND, CenterPoint, Part-A2, PV-RCNN backbones)
    **{name: ("sparse_conv", name) for name in (
        "get_indice_pairs_2d_forward", "get_indice_pairs_3d_forward",
        "get_indice_pairs_4d_forward", "get_indice_pairs_2d_backward",
        "get_indice_pairs_3d_backward", "indice_conv_forward",
        "indice_conv_backward", "fused_indice_conv_forward",
        "indice_maxpool_forward", "indice_maxpool_backward")},
}


def implemented_names() -> FrozenSet[str]:
    """Return the ext function names that have a pure-PyTorch kernel."""
    return frozenset(IMPLEMENTED)


def _load_ext_names_in_source(source: str) -> FrozenSet[str]:
    """Names listed in every ``load_ext('_ext', [...])`` call of ``source``.

    Only literal lists/tuples of string constants are understood; that is how
    every mmcv 1.x/2.x op module spells the call.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return frozenset()
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or len(node.args) < 2:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(
            func, "id", None)
        if name != "load_ext":
            continue
        first, second = node.args[0], node.args[1]
        if not (isinstance(first, ast.Constant) and first.value == "_ext"):
            continue
        if isinstance(second, (ast.List, ast.Tuple)):
            found.update(elt.value for elt in second.elts
                         if isinstance(elt, ast.Constant)
                         and isinstance(elt.value, str))
    return frozenset(found)


def _mmcv_ops_dir() -> Optional[str]:
    """Directory of the installed ``mmcv/ops`` package, without importing it.

    ``find_spec`` on a top-level name locates the package without executing
    ``mmcv/__init__.py`` (which would import torch).
    """
    spec = importlib.util.find_spec("mmcv")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        ops_dir = os.path.join(location, "ops")
        if os.path.isdir(ops_dir):
            return ops_dir
    return None


@functools.lru_cache(maxsize=8)
def _scan_ops_dir(ops_dir: str, stamp: Tuple[Tuple[str, float], ...]
                  ) -> FrozenSet[str]:
    # ``stamp`` (file names and mtimes) is part of the cache key so that a
    # reinstalled mmcv is rescanned.
    names = set()
    for file_name, _ in stamp:
        path = os.path.join(ops_dir, file_name)
        try:
            with open(path, encoding="utf-8") as handle:
                names |= _load_ext_names_in_source(handle.read())
        except OSError:
            continue
    return frozenset(names)


def requested_ext_names(ops_dir: Optional[str] = None) -> FrozenSet[str]:
    """Every ext name that the installed mmcv's ``ops/*.py`` asks for.

    Returns an empty set when mmcv is not installed.
    """
    ops_dir = ops_dir or _mmcv_ops_dir()
    if ops_dir is None or not os.path.isdir(ops_dir):
        return frozenset()
    stamp = tuple(sorted(
        (entry.name, entry.stat().st_mtime) for entry in os.scandir(ops_dir)
        if entry.name.endswith(".py") and entry.is_file()))
    return _scan_ops_dir(ops_dir, stamp)


def _not_implemented_message(name: str) -> str:
    return (f"mmcv op '{name}' has no compiled kernel in mmcv-lite and "
            "lazypatch provides no pure-PyTorch implementation; install full "
            "mmcv (with compiled ops) or disable the patch "
            f"'{PATCH_NAME}'")


def unimplemented_kernel(name: str) -> Callable[..., Any]:
    """A callable standing in for ext function ``name``; calling it raises.

    Its presence lets ``load_ext`` succeed (so ``import mmcv.ops`` works); the
    error only fires when a model actually runs the missing op.
    """

    def kernel(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(_not_implemented_message(name))

    kernel.__name__ = name
    kernel.__qualname__ = name
    kernel.__doc__ = _not_implemented_message(name)
    kernel.__lazypatch_unimplemented__ = True  # type: ignore[attr-defined]
    return kernel


def _resolve(name: str) -> Callable[..., Any]:
    submodule, attribute = IMPLEMENTED[name]
    module = importlib.import_module(f"{__name__}.{submodule}")
    return getattr(module, attribute)


def build_ext_module(module_name: str = "mmcv._ext",
                     extra_names: Iterable[str] = ()) -> types.ModuleType:
    """Build a fresh module that can stand in for ``mmcv._ext``.

    The module holds every name in :data:`IMPLEMENTED` plus every name that
    the installed mmcv's op modules request via ``load_ext`` (and any
    ``extra_names``); the latter raise :class:`NotImplementedError` when
    called. It sets ``__lazypatch_provided__ = True`` and lists the real
    kernels in ``__lazypatch_implemented__`` and the stand-ins in
    ``__lazypatch_unimplemented__``.

    The module is not inserted into ``sys.modules``; that is the caller's job.
    """
    module = types.ModuleType(
        module_name,
        "Pure-PyTorch replacement for mmcv's compiled ops, built by lazypatch.")
    module.__lazypatch_provided__ = True  # type: ignore[attr-defined]
    implemented = sorted(IMPLEMENTED)
    for name in implemented:
        setattr(module, name, _resolve(name))
    wanted = set(requested_ext_names()) | set(extra_names)
    missing = sorted(wanted - set(IMPLEMENTED))
    for name in missing:
        setattr(module, name, unimplemented_kernel(name))
    module.__lazypatch_implemented__ = tuple(implemented)  # type: ignore
    module.__lazypatch_unimplemented__ = tuple(missing)  # type: ignore
    module.__all__ = sorted(implemented + missing)  # type: ignore
    return module

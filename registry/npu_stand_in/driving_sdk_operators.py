"""DrivingSDK's own operators (``mx_driving.*``) where lazypatch has the kernel.

The ``mx_driving`` that lazypatch provides where DrivingSDK is not installed holds only
``patcher``; with the NPU stand-in on, these operators are added to it (same arguments
and results as DrivingSDK's):

* ``multi_scale_deformable_attn`` / ``MultiScaleDeformableAttnFunction`` /
  ``npu_multi_scale_deformable_attn_function``: the OpenMMLab pack's pure-PyTorch
  multi-scale deformable attention kernels, forward and backward;
* ``scatter_max(updates, indices, out=None) -> (out, argmax)`` along dim 0:
  ``out[i] = max(out[i], max_j updates[j] for indices[j] == i)``, argmax the first such
  ``j`` holding it (``len(updates)`` where none does), the gradient reaching that one;
* ``scatter_mean`` and ``scatter_add(src, indices, out=None, dim=0, dim_size=None)``:
  torch_scatter's conventions (the ``cuda_extensions`` kernels);
* ``deformable_aggregation`` / ``npu_deformable_aggregation``: Sparse4D's deformable
  aggregation on the ``cuda_extensions`` pack's kernel, forward and backward;
* ``npu_add_relu(x, y)``: ``relu(x + y)``; ``npu_max_pool2d(x, kernel_size, stride,
  padding)``; ``npu_batch_matmul(a, b)``: ``a @ b``.

Every other name of DrivingSDK's top level is importable and raises when called, naming
the operator (``unavailable``).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch.autograd import Function

from ..shared import scatter as scatter_kernels
from ..shared.deformable_aggregation import (
    deformable_aggregation_backward,
    deformable_aggregation_forward,
)
from ..shared.mmcv_ext.msda import msda_backward, msda_forward


class MultiScaleDeformableAttnFunction(Function):
    """``mx_driving.MultiScaleDeformableAttnFunction``: (bs, nq, heads * head_dim)."""

    @staticmethod
    def forward(ctx: Any, value: torch.Tensor, value_spatial_shapes: torch.Tensor,
                value_level_start_index: torch.Tensor, sampling_locations: torch.Tensor,
                attention_weights: torch.Tensor, **ignored: Any) -> torch.Tensor:
        shapes = value_spatial_shapes.long()
        starts = value_level_start_index.long()
        locations = sampling_locations.type_as(value)
        weights = attention_weights.type_as(value)
        ctx.save_for_backward(value, shapes, starts, locations, weights)
        return msda_forward(value, shapes, starts, locations, weights)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> Tuple[Any, ...]:
        value, shapes, starts, locations, weights = ctx.saved_tensors
        grad_value, grad_locations, grad_weights = msda_backward(
            value, shapes, starts, locations, weights, grad_output.contiguous())
        return grad_value, None, None, grad_locations, grad_weights


multi_scale_deformable_attn = MultiScaleDeformableAttnFunction.apply


class DeformableAggregationFunction(Function):
    """``mx_driving.deformable_aggregation``: Sparse4D's deformable aggregation (DrivingSDK's
    drop-in for Sparse4D's ``DeformableAggregationFunction``, same layouts), on the
    ``cuda_extensions`` pack's kernel: (batch, anchors, channels)."""

    @staticmethod
    def forward(ctx: Any, mc_ms_feat: torch.Tensor, spatial_shape: torch.Tensor,
                scale_start_index: torch.Tensor, sampling_location: torch.Tensor,
                weights: torch.Tensor) -> torch.Tensor:
        tensors = (mc_ms_feat.contiguous(), spatial_shape.contiguous().long(),
                   scale_start_index.contiguous().long(), sampling_location.contiguous(),
                   weights.contiguous())
        ctx.save_for_backward(*tensors)
        return deformable_aggregation_forward(*tensors)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> Tuple[Any, ...]:
        mc_ms_feat, spatial_shape, scale_start_index, sampling_location, weights = \
            ctx.saved_tensors
        grads = (torch.zeros_like(mc_ms_feat), torch.zeros_like(sampling_location),
                 torch.zeros_like(weights))
        # The kernel adds into the gradients it is given, as the CUDA kernel does.
        deformable_aggregation_backward(mc_ms_feat, spatial_shape, scale_start_index,
                                        sampling_location, weights, grad_output.contiguous(),
                                        *grads)
        return grads[0], None, None, grads[1], grads[2]


deformable_aggregation = DeformableAggregationFunction.apply
npu_deformable_aggregation = DeformableAggregationFunction.apply


def npu_multi_scale_deformable_attn_function(value: torch.Tensor, shape: torch.Tensor,
                                             offset: torch.Tensor, locations: torch.Tensor,
                                             weight: torch.Tensor) -> torch.Tensor:
    """DrivingSDK's older name of ``multi_scale_deformable_attn``."""
    return MultiScaleDeformableAttnFunction.apply(value, shape, offset, locations, weight)


def scatter_max(updates: torch.Tensor, indices: torch.Tensor,
                out: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Row maxima of ``updates`` grouped by ``indices`` (dim 0), started from ``out``."""
    indices = indices.long()
    count = updates.shape[0]
    index = scatter_kernels.broadcast(indices, updates, 0)
    if out is None:
        rows = int(indices.max()) + 1 if indices.numel() else 0
        start = updates.new_zeros((rows, *updates.shape[1:]))
        include_start = False
    else:
        start, include_start = out, True
    with torch.no_grad():
        maxima = start.scatter_reduce(0, index, updates, "amax", include_self=include_start)
        positions = torch.arange(count, device=updates.device).view(
            -1, *([1] * (updates.dim() - 1))).expand_as(updates)
        holds = updates == maxima.gather(0, index)
        candidates = torch.where(holds, positions, torch.full_like(positions, count))
        argmax = torch.full(maxima.shape, count, dtype=torch.long, device=updates.device)
        argmax = argmax.scatter_reduce(0, index, candidates, "amin", include_self=True)
        found = argmax < count
    # Read back from updates at argmax: the gradient reaches that element only.
    values = updates.gather(0, torch.where(found, argmax, torch.zeros_like(argmax)))
    return torch.where(found, values, maxima.to(values.dtype)), argmax.int()


def scatter_mean(src: torch.Tensor, indices: torch.Tensor, out: Optional[torch.Tensor] = None,
                 dim: int = 0, dim_size: Optional[int] = None) -> torch.Tensor:
    """Means of ``src`` grouped by ``indices`` along ``dim`` (0 where a group is empty)."""
    if out is not None:
        raise NotImplementedError(
            "mx_driving.scatter_mean in lazypatch's NPU stand-in does not support out= "
            "(DrivingSDK averages out's elements in): pass out=None and use the result")
    return scatter_kernels.scatter_mean(src, indices.long(), dim, None, dim_size)


def scatter_add(src: torch.Tensor, indices: torch.Tensor, out: Optional[torch.Tensor] = None,
                dim: int = 0, dim_size: Optional[int] = None) -> torch.Tensor:
    """Sums of ``src`` grouped by ``indices`` along ``dim`` (into ``out`` when given)."""
    return scatter_kernels.scatter_sum(src, indices.long(), dim, out, dim_size)


def npu_add_relu(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``relu(x + y)`` (DrivingSDK fuses the two on the NPU)."""
    return F.relu(x + y)


def npu_max_pool2d(x: torch.Tensor, kernel_size: int, stride: int, padding: int) -> torch.Tensor:
    """2-D max pooling (DrivingSDK's inference-only NPU kernel)."""
    return F.max_pool2d(x, kernel_size, stride, padding)


def npu_batch_matmul(projection_mat: torch.Tensor, pts_extend: torch.Tensor) -> torch.Tensor:
    """Batched ``projection_mat @ pts_extend``."""
    return torch.matmul(projection_mat, pts_extend)


PROVIDED = ("multi_scale_deformable_attn", "MultiScaleDeformableAttnFunction",
            "npu_multi_scale_deformable_attn_function", "deformable_aggregation",
            "npu_deformable_aggregation", "scatter_max", "scatter_mean",
            "scatter_add", "npu_add_relu", "npu_max_pool2d", "npu_batch_matmul")

#: DrivingSDK's top-level names (its ``__all__`` and the other operators its
#: ``__init__`` imports): those not in PROVIDED raise when called.
DRIVING_SDK_NAMES = (
    "RoIPointPool3d", "SparseConv3d", "SparseInverseConv3d", "SubMConv3d", "SparseConvolution",
    "SparseConvTensor", "SparseModule", "SparseSequential", "Voxelization",
    "assign_score_withk", "bev_pool", "bev_pool_v2", "bev_pool_v3", "border_align",
    "box_iou_quadri", "box_iou_rotated", "boxes_overlap_bev", "npu_boxes_overlap_bev",
    "boxes_iou_bev", "DeformConv2dFunction", "deform_conv2d", "ModulatedDeformConv2dFunction",
    "modulated_deform_conv2d", "dynamic_scatter", "furthest_point_sampling",
    "furthest_point_sample_with_dist", "npu_fused_bias_leaky_relu",
    "geometric_kernel_attention", "grid_sampler2d_v2", "grid_sampler3d_v1", "group_points",
    "hypot", "knn", "multi_scale_deformable_attn", "npu_index_select",
    "npu_multi_scale_deformable_attn_function", "nms3d_normal", "npu_nms3d_normal",
    "npu_add_relu", "npu_deformable_aggregation", "npu_batch_matmul", "deformable_aggregation",
    "npu_dynamic_scatter", "npu_max_pool2d", "nms3d", "npu_nms3d",
    "MultiScaleDeformableAttnFunction", "npu_points_in_box", "npu_points_in_box_all",
    "points_in_box", "points_in_boxes_all", "pixel_group", "roi_align_rotated",
    "roiaware_pool3d", "roipoint_pool3d", "npu_rotated_iou", "npu_rotated_overlaps",
    "scatter_max", "scatter_mean", "scatter_add", "three_interpolate", "three_nn",
    "npu_voxel_pooling_train", "voxelization", "unique_voxel", "cal_anchors_heading",
    "npu_gaussian", "npu_draw_gaussian_to_heatmap", "npu_assign_target_of_single_head",
    "diff_iou_rotated_2d", "nms3d_on_sight", "cartesian_to_frenet", "radius", "npu_unique",
    "graph_softmax", "cylinder_query", "sigmoid_focal_loss", "npu_fake_tensor_quant",
    "npu_fake_tensor_quant_inplace", "npu_fake_tensor_quant_with_axis")

def compiled_module(unavailable: Callable[[str], Any]) -> ModuleType:
    """``mx_driving._C``: any kernel name gives ``unavailable("mx_driving._C.<name>")``,
    one object per name."""
    module = ModuleType("mx_driving._C", "DrivingSDK's compiled kernels: none here "
                                         "(lazypatch's NPU stand-in; each raises when called)")
    kernels: dict = {}

    def kernel(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(f"module 'mx_driving._C' (lazypatch's NPU stand-in) has no "
                                 f"attribute {name!r}")
        if name not in kernels:
            kernels[name] = unavailable(f"mx_driving._C.{name}")
        return kernels[name]
    module.__getattr__ = kernel  # type: ignore[method-assign]
    return module

"""Multi-scale deformable attention (Deformable DETR) kernels.

Same math as mmcv's ``multi_scale_deformable_attn_pytorch``: per level, the
sampling locations (normalised to [0, 1], x then y) are bilinearly sampled
from the value map with zero padding outside it, then weighted and summed.
``grid_sample(align_corners=False)`` maps a location ``l`` to the pixel
coordinate ``l * size - 0.5`` exactly like the CUDA kernel's
``h_im = loc_h * H - 0.5``. The backward pass differentiates that same
forward with autograd.

When an input requires a gradient, the forward keeps its autograd graph
and the backward uses it instead of running the forward again: fwd+bwd then
costs what autograd through ``multi_scale_deformable_attn_pytorch`` costs.
The kept graph goes when the backward uses it or when any of the three input
tensors is freed (mmcv's autograd Function saves them until its own graph
goes, so a forward whose backward never comes does not pin memory longer
than mmcv's own pytorch version would).
"""
from __future__ import annotations

import weakref
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F


def _levels(value_spatial_shapes: torch.Tensor,
            value_level_start_index: torch.Tensor
            ) -> List[Tuple[int, int, int]]:
    # Shapes are needed as Python ints to slice and reshape; this is one small
    # host transfer per call.
    shapes = value_spatial_shapes.tolist()
    starts = value_level_start_index.tolist()
    return [(int(s), int(h), int(w)) for s, (h, w) in zip(starts, shapes)]


def msda_pytorch(value: torch.Tensor, value_spatial_shapes: torch.Tensor,
                 value_level_start_index: torch.Tensor,
                 sampling_locations: torch.Tensor,
                 attention_weights: torch.Tensor) -> torch.Tensor:
    """Differentiable multi-scale deformable attention.

    Args:
        value: (bs, num_keys, num_heads, head_dim).
        value_spatial_shapes: (num_levels, 2) int, rows (h, w).
        value_level_start_index: (num_levels,) int, first key of each level.
        sampling_locations: (bs, nq, num_heads, num_levels, num_points, 2),
            normalised (x, y).
        attention_weights: (bs, nq, num_heads, num_levels, num_points).

    Returns:
        (bs, nq, num_heads * head_dim).
    """
    bs, _, num_heads, head_dim = value.shape
    _, nq, _, num_levels, num_points, _ = sampling_locations.shape
    grids = 2 * sampling_locations - 1
    # (bs, nq, heads, levels, points) -> (bs*heads, 1, nq, levels, points)
    weights = attention_weights.transpose(1, 2).reshape(
        bs * num_heads, 1, nq, num_levels, num_points)
    levels = _levels(value_spatial_shapes, value_level_start_index)
    # One split, not a slice per level: the backward of split is one cat,
    # where each slice's backward fills a value-sized zero tensor and adds.
    sizes = [h * w for _, h, w in levels]
    first = levels[0][0]
    if all(start == first + sum(sizes[:index])
           for index, (start, _, _) in enumerate(levels)):
        pieces = value[:, first:first + sum(sizes)].split(sizes, dim=1)
    else:   # levels not stored back to back: slice each one
        pieces = tuple(value[:, start:start + size]
                       for (start, _, _), size in zip(levels, sizes))
    out: Optional[torch.Tensor] = None
    for level, ((_, h, w), piece) in enumerate(zip(levels, pieces)):
        # (bs, h*w, heads, d) -> (bs*heads, d, h, w)
        value_l = piece.flatten(2).transpose(1, 2).reshape(
            bs * num_heads, head_dim, h, w)
        # (bs, nq, heads, points, 2) -> (bs*heads, nq, points, 2)
        grid_l = grids[:, :, :, level].transpose(1, 2).flatten(0, 1)
        sampled = F.grid_sample(value_l, grid_l, mode="bilinear",
                                padding_mode="zeros", align_corners=False)
        # Weighted sum per level (no stack of every level's samples: that
        # copy was the largest tensor of the whole computation).
        term = (sampled * weights[..., level, :]).sum(-1)
        out = term if out is None else out + term
    assert out is not None
    out = out.view(bs, num_heads * head_dim, nq)
    return out.transpose(1, 2).contiguous()


#: Forward graphs (output, leaves) the backward can reuse, keyed by the
#: inputs (storage, version, shape); see the module docstring for lifetime.
_FORWARD_GRAPHS: Dict[tuple, Tuple[torch.Tensor, List[torch.Tensor]]] = {}


def _inputs_key(tensors: Sequence[torch.Tensor]) -> tuple:
    # The saved tensors mmcv hands to the backward share storage and version
    # counter with the forward's inputs; an in-place change bumps _version.
    return tuple((t.data_ptr(), t._version, tuple(t.shape), t.dtype,
                  str(t.device)) for t in tensors)


def ms_deform_attn_forward(value: torch.Tensor,
                           value_spatial_shapes: torch.Tensor,
                           value_level_start_index: torch.Tensor,
                           sampling_locations: torch.Tensor,
                           attention_weights: torch.Tensor,
                           im2col_step: int = 64) -> torch.Tensor:
    """Ext ``ms_deform_attn_forward``: returns (bs, nq, heads * head_dim).

    ``im2col_step`` only tunes the CUDA kernel's batching; results do not
    depend on it, so it is accepted and ignored.
    """
    inputs = (value, sampling_locations, attention_weights)
    if not any(t.requires_grad for t in inputs):
        with torch.no_grad():
            return msda_pytorch(value, value_spatial_shapes,
                                value_level_start_index, sampling_locations,
                                attention_weights)
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(t.requires_grad) for t in inputs]
        graph_output = msda_pytorch(leaves[0], value_spatial_shapes,
                                    value_level_start_index, leaves[1],
                                    leaves[2])
    key = _inputs_key(inputs)
    _FORWARD_GRAPHS[key] = (graph_output, leaves)
    for tensor in inputs:
        weakref.finalize(tensor, _FORWARD_GRAPHS.pop, key, None)
    return graph_output.detach()


def _kept_graph(inputs: Sequence[torch.Tensor]):
    """The (output, leaves) the forward kept for these inputs, used once."""
    return _FORWARD_GRAPHS.pop(_inputs_key(inputs), None)


def ms_deform_attn_backward(value: torch.Tensor,
                            value_spatial_shapes: torch.Tensor,
                            value_level_start_index: torch.Tensor,
                            sampling_locations: torch.Tensor,
                            attention_weights: torch.Tensor,
                            grad_output: torch.Tensor,
                            grad_value: torch.Tensor,
                            grad_sampling_loc: torch.Tensor,
                            grad_attn_weight: torch.Tensor,
                            im2col_step: int = 64) -> None:
    """Ext ``ms_deform_attn_backward``: accumulates into the grad buffers.

    Like the CUDA kernel, gradients are added to ``grad_value``,
    ``grad_sampling_loc`` and ``grad_attn_weight`` (the caller passes zeros).
    """
    graph = _kept_graph((value, sampling_locations, attention_weights))
    with torch.enable_grad():
        if graph is None:
            leaves = [t.detach().requires_grad_(True)
                      for t in (value, sampling_locations, attention_weights)]
            out = msda_pytorch(leaves[0], value_spatial_shapes,
                               value_level_start_index, leaves[1], leaves[2])
        else:
            out, leaves = graph
        wanted = [leaf for leaf in leaves if leaf.requires_grad]
        found = iter(torch.autograd.grad(
            out, wanted, grad_outputs=grad_output.reshape(out.shape).to(
                out.dtype), allow_unused=True))
        grads = [next(found) if leaf.requires_grad else None
                 for leaf in leaves]
    for buffer, grad in zip(
            (grad_value, grad_sampling_loc, grad_attn_weight), grads):
        if grad is not None:
            buffer.add_(grad.to(buffer.dtype))

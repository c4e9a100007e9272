"""MapTR's ``GeometricKernelAttention`` extension (``geometric_kernel_attn_cuda_forward``,
``geometric_kernel_attn_cuda_backward``) on plain tensor ops.

It is multi-scale deformable attention with integer sampling locations: ``value``
(batch, keys, heads, channels) holds each level's map flattened row-major from
``level_start_index``; ``sampling_loc`` (batch, queries, heads, levels, points, 2) are
int64 pixel (x, y), clamped into the level's map (no interpolation); each sample is
multiplied by ``attn_weight`` (batch, queries, heads, levels, points) and summed. The
output is (batch, queries, heads * channels). The backward returns ``[grad_value,
grad_attn_weight]``; locations get no gradient (they are integers). ``im2col_step``
only splits the CUDA launch: it changes nothing here but must divide the batch, as the
kernel asserts.
"""
from __future__ import annotations

from typing import List, Tuple

import torch


def _rows(value: torch.Tensor, spatial_shapes: torch.Tensor, level_start_index: torch.Tensor,
          sampling_loc: torch.Tensor, im2col_step: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Row of ``value.view(-1, channels)`` of every sample, and the per-sample head-major
    layout (batch, queries, heads, levels * points)."""
    batch, keys, heads, _ = value.shape
    step = min(batch, int(im2col_step))
    if step <= 0 or batch % step:
        raise ValueError(f"geometric_kernel_attn: the batch ({batch}) must be a multiple of "
                         f"im2col_step ({im2col_step}), as the compiled kernel requires")
    levels = spatial_shapes.shape[0]
    shapes = spatial_shapes.long()
    height = shapes[:, 0].view(1, 1, 1, levels, 1)
    width = shapes[:, 1].view(1, 1, 1, levels, 1)
    x = torch.minimum(sampling_loc[..., 0].long().clamp_min(0), width - 1)
    y = torch.minimum(sampling_loc[..., 1].long().clamp_min(0), height - 1)
    start = level_start_index.long().view(1, 1, 1, levels, 1)
    key = start + y * width + x                               # (b, q, heads, levels, points)
    batch_index = torch.arange(batch, device=value.device).view(batch, 1, 1, 1, 1)
    head = torch.arange(heads, device=value.device).view(1, 1, heads, 1, 1)
    rows = (batch_index * keys + key) * heads + head
    return rows.reshape(-1), rows


def geometric_kernel_attn_cuda_forward(value: torch.Tensor, spatial_shapes: torch.Tensor,
                                       level_start_index: torch.Tensor,
                                       sampling_loc: torch.Tensor, attn_weight: torch.Tensor,
                                       im2col_step: int) -> torch.Tensor:
    """A new (batch, queries, heads * channels) tensor: the weighted sum of the value
    rows at the (clamped) sampling locations."""
    batch, _, heads, channels = value.shape
    flat, rows = _rows(value, spatial_shapes, level_start_index, sampling_loc, im2col_step)
    sampled = value.reshape(-1, channels).index_select(0, flat).view(*rows.shape, channels)
    out = (sampled * attn_weight.unsqueeze(-1)).sum((3, 4))   # (b, q, heads, channels)
    return out.reshape(batch, rows.shape[1], heads * channels)


def geometric_kernel_attn_cuda_backward(value: torch.Tensor, spatial_shapes: torch.Tensor,
                                        level_start_index: torch.Tensor,
                                        sampling_loc: torch.Tensor, attn_weight: torch.Tensor,
                                        grad_output: torch.Tensor,
                                        im2col_step: int) -> List[torch.Tensor]:
    """``[grad_value, grad_attn_weight]``, new tensors shaped as ``value`` and
    ``attn_weight``."""
    batch, _, heads, channels = value.shape
    flat, rows = _rows(value, spatial_shapes, level_start_index, sampling_loc, im2col_step)
    grad = grad_output.reshape(batch, rows.shape[1], heads, 1, 1, channels)
    sampled = value.reshape(-1, channels).index_select(0, flat).view(*rows.shape, channels)
    grad_attn_weight = (grad * sampled).sum(-1)
    grad_value = torch.zeros_like(value)
    grad_value.view(-1, channels).index_add_(
        0, flat, (grad * attn_weight.unsqueeze(-1)).reshape(-1, channels))
    return [grad_value, grad_attn_weight.to(attn_weight.dtype)]

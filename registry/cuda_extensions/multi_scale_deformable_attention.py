"""Deformable-DETR's compiled ``MultiScaleDeformableAttention`` extension
(``ms_deform_attn_forward``, ``ms_deform_attn_backward``) on the pure-PyTorch
multi-scale deformable attention kernels the packs share (``shared.mmcv_ext.msda``).

Deformable-DETR, DINO, Mask2Former, PanoOcc and their kin build it top-level with their
own ``ops/setup.py`` and call it from ``ops/functions/ms_deform_attn_func.py``. Its
arguments, as ``src/ms_deform_attn.h`` declares them: ``value`` (batch, keys, heads,
channels), ``spatial_shapes`` (levels, 2) rows (h, w), ``level_start_index`` (levels,),
``sampling_loc`` (batch, queries, heads, levels, points, 2) normalised x, y in [0, 1],
``attn_weight`` (batch, queries, heads, levels, points), ``im2col_step``. The forward
returns a new (batch, queries, heads * channels) tensor; the backward, given
``grad_output``, returns new ``[grad_value, grad_sampling_loc, grad_attn_weight]``
(unlike mmcv's ``_ext`` binding, which adds into buffers the caller passes).
``im2col_step`` only splits the CUDA launch: it changes nothing here but must divide
the batch (after ``min(batch, im2col_step)``), as the compiled kernel asserts.
"""
from __future__ import annotations

from typing import List

import torch

from ..shared.mmcv_ext.msda import msda_backward, msda_forward


def _check_step(function: str, value: torch.Tensor, im2col_step: int) -> None:
    """Refuse what the compiled kernel refuses: a step that does not divide the batch."""
    batch = value.shape[0]
    step = min(batch, int(im2col_step))
    if step <= 0 or batch % step:
        raise ValueError(f"MultiScaleDeformableAttention.{function}: the batch ({batch}) must "
                         f"be a multiple of im2col_step ({im2col_step}), as the compiled kernel "
                         f"requires")


def ms_deform_attn_forward(value: torch.Tensor, spatial_shapes: torch.Tensor,
                           level_start_index: torch.Tensor, sampling_loc: torch.Tensor,
                           attn_weight: torch.Tensor, im2col_step: int) -> torch.Tensor:
    """A new (batch, queries, heads * channels) tensor: every query's attention-weighted
    sum of bilinear samples (zero outside each level's map)."""
    _check_step("ms_deform_attn_forward", value, im2col_step)
    # The extension's autograd Function calls this inside its forward: no graph is wanted.
    with torch.no_grad():
        return msda_forward(value, spatial_shapes, level_start_index, sampling_loc,
                            attn_weight)


def ms_deform_attn_backward(value: torch.Tensor, spatial_shapes: torch.Tensor,
                            level_start_index: torch.Tensor, sampling_loc: torch.Tensor,
                            attn_weight: torch.Tensor, grad_output: torch.Tensor,
                            im2col_step: int) -> List[torch.Tensor]:
    """``[grad_value, grad_sampling_loc, grad_attn_weight]``, new tensors shaped (and
    typed) as ``value``, ``sampling_loc`` and ``attn_weight``."""
    _check_step("ms_deform_attn_backward", value, im2col_step)
    with torch.no_grad():
        grads = msda_backward(value, spatial_shapes, level_start_index, sampling_loc,
                              attn_weight, grad_output.contiguous())
    return [grad.to(like.dtype) for grad, like in zip(grads, (value, sampling_loc, attn_weight))]

"""flash-attn's ``flash_attn.bert_padding``: between padded batches ``(batch, seqlen, ...)``
and the packed rows ``(total, ...)`` with ``cu_seqlens`` that the varlen (1.x: unpadded)
attention functions take.

Plain indexing, so autograd differentiates it (flash-attn writes autograd functions for
the same gathers and scatters to save memory on the GPU).
"""
from __future__ import annotations

from typing import Tuple

import torch


def index_first_axis(input: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """The rows ``indices`` of ``input`` along its first axis."""
    return input.index_select(0, indices)


def index_put_first_axis(values: torch.Tensor, indices: torch.Tensor,
                         first_axis_dim: int) -> torch.Tensor:
    """A new zero tensor of ``first_axis_dim`` rows holding ``values`` at rows ``indices``."""
    output = values.new_zeros(first_axis_dim, *values.shape[1:])
    return output.index_copy(0, indices, values)


def unpad_input(hidden_states: torch.Tensor, attention_mask: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """``(rows, indices, cu_seqlens, max_seqlen)``: the rows of ``hidden_states``
    ``(batch, seqlen, ...)`` where ``attention_mask`` ``(batch, seqlen)`` is true, their
    flat indices, the int32 cumulative sequence lengths (from 0) and the longest length
    (the four values of flash-attn 1.x and 2.x before 2.6)."""
    if attention_mask.shape != hidden_states.shape[:2]:
        raise ValueError(f"unpad_input: attention_mask has shape {tuple(attention_mask.shape)}, "
                         f"expected (batch, seqlen) = {tuple(hidden_states.shape[:2])}")
    lengths = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = attention_mask.flatten().nonzero().flatten()
    cu_seqlens = torch.nn.functional.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))
    longest = int(lengths.max()) if lengths.numel() else 0
    rows = index_first_axis(hidden_states.reshape(-1, *hidden_states.shape[2:]), indices)
    return rows, indices, cu_seqlens, longest


def pad_input(hidden_states: torch.Tensor, indices: torch.Tensor, batch: int,
              seqlen: int) -> torch.Tensor:
    """The inverse of :func:`unpad_input`: ``(batch, seqlen, ...)`` with zeros where the
    mask was false."""
    output = index_put_first_axis(hidden_states, indices, batch * seqlen)
    return output.view(batch, seqlen, *hidden_states.shape[1:])

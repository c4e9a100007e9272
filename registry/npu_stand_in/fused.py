"""torch_npu's fused operators that DrivingSDK's model files call, in plain PyTorch.

Same arguments and results as torch_npu's, computed on whatever device the tensors are on:

* ``npu_fusion_attention``: softmax attention with torch_npu's conventions: ``scale``
  defaults to 1.0 (not 1/sqrt(d)), ``atten_mask`` True means *masked out*,
  ``keep_prob`` is the probability of keeping a weight (dropout applies whenever it
  is below 1, as on the NPU), layouts ``BSH``, ``SBH``, ``BSND``, ``BNSD``;
  ``sparse_mode`` 0/1 (the mask as given; 0 also keeps ``pre_tockens`` keys before and
  ``next_tockens`` keys after each query), 2 (causal from the top left), 3 (causal from
  the bottom right). It returns torch_npu's tuple, the output first, then the per-row
  softmax max and sum (broadcast over 8 lanes, as torch_npu lays them out).
* ``npu_rms_norm``: ``(x * rsqrt(mean(x^2) + eps) * gamma, rstd)`` over gamma's dims.
* ``npu_rotary_mul``: ``x * r1 + rotate(x) * r2``, halves (``"half"``) or pairs
  (``"interleave"``) rotated.

What these do not compute (``TND`` varlen layouts, ``padding_mask``, band and prefix
sparse modes) raises ``NotImplementedError`` naming the argument.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

#: torch_npu's "no limit" for pre_tockens / next_tockens.
NO_LIMIT = 2147483647
LAYOUTS = ("BSH", "SBH", "BSND", "BNSD")


def _refuse(operator: str, what: str) -> None:
    raise NotImplementedError(
        f"torch_npu.{operator} in lazypatch's NPU stand-in does not support {what}; "
        f"run on an Ascend host with torch_npu installed, or call it without it")


def _to_bnsd(tensor: torch.Tensor, layout: str, head_num: int) -> torch.Tensor:
    """(batch, heads, sequence, head_dim) view of a tensor in torch_npu's ``layout``."""
    if layout == "BNSD":
        return tensor
    if layout == "BSND":
        return tensor.transpose(1, 2)
    if layout == "SBH":
        tensor = tensor.transpose(0, 1)
    batch, sequence, hidden = tensor.shape
    return tensor.reshape(batch, sequence, head_num, hidden // head_num).transpose(1, 2)


def _from_bnsd(tensor: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "BNSD":
        return tensor
    if layout == "BSND":
        return tensor.transpose(1, 2)
    batch, heads, sequence, head_dim = tensor.shape
    merged = tensor.transpose(1, 2).reshape(batch, sequence, heads * head_dim)
    return merged.transpose(0, 1) if layout == "SBH" else merged


def _kept(query_length: int, key_length: int, sparse_mode: int, pre_tokens: int,
          next_tokens: int, device: torch.device) -> Optional[torch.Tensor]:
    """(Sq, Sk) True where a key may be attended, from the sparse mode alone (None: all)."""
    rows = torch.arange(query_length, device=device).unsqueeze(1)
    columns = torch.arange(key_length, device=device).unsqueeze(0)
    if sparse_mode == 2:
        return columns <= rows
    if sparse_mode == 3:
        return columns <= rows + (key_length - query_length)
    if sparse_mode == 0 and (pre_tokens < NO_LIMIT or next_tokens < NO_LIMIT):
        return (columns >= rows - pre_tokens) & (columns <= rows + next_tokens)
    return None


def npu_fusion_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         head_num: int, input_layout: str, pse: Optional[torch.Tensor] = None,
                         padding_mask: Optional[torch.Tensor] = None,
                         atten_mask: Optional[torch.Tensor] = None, scale: float = 1.0,
                         keep_prob: float = 1.0, pre_tockens: int = NO_LIMIT,
                         next_tockens: int = NO_LIMIT, inner_precise: int = 0,
                         prefix: Any = None, actual_seq_qlen: Any = None,
                         actual_seq_kvlen: Any = None, sparse_mode: int = 0,
                         gen_mask_parallel: bool = True, sync: bool = False
                         ) -> Tuple[Any, ...]:
    """torch_npu's fused attention: ``(output, softmax_max, softmax_sum, softmax_out,
    seed, offset, numels)``, the output in ``input_layout``."""
    if input_layout not in LAYOUTS:
        _refuse("npu_fusion_attention", f"input_layout={input_layout!r} (supported: "
                                        f"{', '.join(LAYOUTS)})")
    if padding_mask is not None:
        _refuse("npu_fusion_attention", "padding_mask")
    if prefix is not None or actual_seq_qlen is not None or actual_seq_kvlen is not None:
        _refuse("npu_fusion_attention", "prefix / actual_seq_qlen / actual_seq_kvlen")
    if sparse_mode not in (0, 1, 2, 3):
        _refuse("npu_fusion_attention", f"sparse_mode={sparse_mode} (supported: 0, 1, 2, 3)")
    q = _to_bnsd(query, input_layout, head_num)
    k = _to_bnsd(key, input_layout, head_num)
    v = _to_bnsd(value, input_layout, head_num)
    # Half-precision inputs accumulate in float32, as the NPU kernel does.
    compute = torch.promote_types(query.dtype, torch.float32)
    scores = torch.matmul(q.to(compute), k.to(compute).transpose(-1, -2)) * scale
    if pse is not None:
        scores = scores + pse.to(compute)
    masked = None
    if atten_mask is not None and sparse_mode in (0, 1):
        masked = atten_mask.bool()
    kept = _kept(q.shape[-2], k.shape[-2], sparse_mode, pre_tockens, next_tockens, q.device)
    if kept is not None:
        masked = ~kept if masked is None else masked | ~kept
    if masked is not None:
        scores = scores.masked_fill(masked, float("-inf"))
    row_max = scores.amax(-1, keepdim=True)
    # A row with every key masked: no weights, zero output (not NaN).
    safe_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)
    exponentials = torch.exp(scores - safe_max)
    row_sum = exponentials.sum(-1, keepdim=True)
    weights = exponentials / row_sum.clamp_min(torch.finfo(row_sum.dtype).tiny)
    if keep_prob < 1.0:
        weights = torch.nn.functional.dropout(weights, p=1.0 - keep_prob, training=True)
    output = torch.matmul(weights, v.to(compute)).to(query.dtype)
    lanes = (*row_max.shape[:-1], 8)
    return (_from_bnsd(output, input_layout), safe_max.expand(lanes).contiguous(),
            row_sum.expand(lanes).contiguous(), query.new_empty(0), 0, 0, 0)


def npu_rms_norm(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6
                 ) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(y, rstd)``: x normalised by its root mean square over gamma's (last) dims,
    times gamma; rstd keeps those dims as 1."""
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    compute = torch.promote_types(x.dtype, torch.float32)
    variance = x.to(compute).pow(2).mean(dim=dims, keepdim=True)
    rstd = torch.rsqrt(variance + epsilon)
    return (x.to(compute) * rstd * gamma.to(compute)).to(x.dtype), rstd


def npu_rotary_mul(x: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor,
                   rotary_mode: str = "half") -> torch.Tensor:
    """Rotary position embedding: ``x * r1 + rotate(x) * r2``."""
    if rotary_mode == "half":
        first, second = x.chunk(2, dim=-1)
        rotated = torch.cat((-second, first), dim=-1)
    elif rotary_mode == "interleave":
        rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).reshape(x.shape)
    else:
        _refuse("npu_rotary_mul", f"rotary_mode={rotary_mode!r} (supported: 'half', "
                                  f"'interleave')")
    return x * r1 + rotated * r2


OPERATORS = ("npu_fusion_attention", "npu_rms_norm", "npu_rotary_mul")

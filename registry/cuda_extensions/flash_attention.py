"""flash-attn's attention functions on ``torch.nn.functional.scaled_dot_product_attention``:
flash-attn 2's names, and flash-attn 1.x's ``flash_attn_unpadded_*`` (the varlen ones
under their old name, ``causal`` aligned as 1.x aligns it).

Tensors keep flash-attn's layout, ``(batch, seqlen, nheads, headdim)``; SDPA
wants ``(batch, nheads, seqlen, headdim)``, hence the transposes. Two
flash-attn conventions SDPA does not share are reproduced with an explicit
mask: ``causal`` with ``seqlen_q != seqlen_k`` is aligned to the bottom-right
corner (query ``i`` sees keys ``j <= i + seqlen_k - seqlen_q``; SDPA's
``is_causal`` aligns top-left, and so did flash-attn before 2.1: the 1.x names keep
that), and ``window_size=(left, right)`` is a local
band around that same diagonal. A query row that sees no key gives zeros, as
flash-attn does (SDPA would give NaN). Grouped-query attention (fewer key/value
heads) repeats the key/value heads. ``dropout_p`` is applied whenever it is
non-zero, as flash-attn does (it knows no training flag).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import torch
import torch.nn.functional as functional

NO_WINDOW = (-1, -1)


def _refuse(function: str, **arguments: Any) -> None:
    """Raise for the arguments this stand-in cannot honour (given a non-default value)."""
    for name, value in arguments.items():
        unset = value is None or (isinstance(value, (bool, int, float)) and not value)
        if not unset:
            raise NotImplementedError(
                f"lazypatch's pure-PyTorch {function} does not support {name}={value!r} "
                f"(flash_attn is not installed; lazypatch pack 'cuda_extensions' provides a "
                f"stand-in): install flash-attn, or call it without {name}")


def _band_mask(seqlen_q: int, seqlen_k: int, causal: bool, window_size: Sequence[int],
               device: torch.device, top_left: bool = False) -> Optional[torch.Tensor]:
    """Boolean ``(seqlen_q, seqlen_k)`` mask of the keys each query sees, or None for all;
    the diagonal ends bottom-right (flash-attn >= 2.1), or starts top-left (1.x)."""
    left, right = int(window_size[0]), int(window_size[1])
    if causal:
        right = 0
    if left < 0 and right < 0:
        return None
    rows = torch.arange(seqlen_q, device=device).unsqueeze(1)
    columns = torch.arange(seqlen_k, device=device).unsqueeze(0)
    diagonal = rows if top_left else rows + (seqlen_k - seqlen_q)
    allowed = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if right >= 0:
        allowed &= columns <= diagonal + right
    if left >= 0:
        allowed &= columns >= diagonal - left
    return allowed


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float,
               softmax_scale: Optional[float], causal: bool,
               window_size: Sequence[int], top_left: bool = False) -> torch.Tensor:
    """Attention on flash-attn layouts ``(batch, seqlen, heads, dim)``."""
    heads, kv_heads = q.shape[-2], k.shape[-2]
    if heads % kv_heads:
        raise ValueError(f"number of query heads ({heads}) must be a multiple of the number "
                         f"of key/value heads ({kv_heads})")
    if kv_heads != heads:
        k = k.repeat_interleave(heads // kv_heads, dim=-2)
        v = v.repeat_interleave(heads // kv_heads, dim=-2)
    query, key, value = (tensor.transpose(1, 2) for tensor in (q, k, v))
    seqlen_q, seqlen_k = query.shape[-2], key.shape[-2]
    mask = _band_mask(seqlen_q, seqlen_k, causal, window_size, q.device, top_left)
    seen = None
    if mask is not None:
        seen = mask.any(dim=-1, keepdim=True)         # rows that see at least one key
        mask = mask | ~seen                           # keep SDPA finite on empty rows
    out = functional.scaled_dot_product_attention(query, key, value, attn_mask=mask,
                                                  dropout_p=dropout_p, scale=softmax_scale)
    if seen is not None and not bool(seen.all()):
        out = torch.where(seen, out, torch.zeros_like(out))   # flash-attn gives zeros there
    return out.transpose(1, 2)


def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                    softmax_scale: Optional[float] = None, causal: bool = False,
                    window_size: Tuple[int, int] = NO_WINDOW, softcap: float = 0.0,
                    alibi_slopes: Optional[torch.Tensor] = None, deterministic: bool = False,
                    return_attn_probs: bool = False) -> torch.Tensor:
    """flash-attn's ``flash_attn_func``: q ``(b, sq, h, d)``, k/v ``(b, sk, hk, d)`` ->
    ``(b, sq, h, d)``."""
    _refuse("flash_attn_func", softcap=softcap, alibi_slopes=alibi_slopes,
            return_attn_probs=return_attn_probs)
    return _attention(q, k, v, dropout_p, softmax_scale, causal, window_size)


def flash_attn_kvpacked_func(q: torch.Tensor, kv: torch.Tensor, dropout_p: float = 0.0,
                             softmax_scale: Optional[float] = None, causal: bool = False,
                             window_size: Tuple[int, int] = NO_WINDOW, softcap: float = 0.0,
                             alibi_slopes: Optional[torch.Tensor] = None,
                             deterministic: bool = False,
                             return_attn_probs: bool = False) -> torch.Tensor:
    """flash-attn's ``flash_attn_kvpacked_func``: kv ``(b, sk, 2, hk, d)``."""
    _refuse("flash_attn_kvpacked_func", softcap=softcap, alibi_slopes=alibi_slopes,
            return_attn_probs=return_attn_probs)
    return _attention(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal,
                      window_size)


def flash_attn_qkvpacked_func(qkv: torch.Tensor, dropout_p: float = 0.0,
                              softmax_scale: Optional[float] = None, causal: bool = False,
                              window_size: Tuple[int, int] = NO_WINDOW, softcap: float = 0.0,
                              alibi_slopes: Optional[torch.Tensor] = None,
                              deterministic: bool = False,
                              return_attn_probs: bool = False) -> torch.Tensor:
    """flash-attn's ``flash_attn_qkvpacked_func``: qkv ``(b, s, 3, h, d)``."""
    _refuse("flash_attn_qkvpacked_func", softcap=softcap, alibi_slopes=alibi_slopes,
            return_attn_probs=return_attn_probs)
    return _attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale,
                      causal, window_size)


def flash_attn_varlen_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                           max_seqlen_q: int, max_seqlen_k: int, dropout_p: float = 0.0,
                           softmax_scale: Optional[float] = None, causal: bool = False,
                           window_size: Tuple[int, int] = NO_WINDOW, softcap: float = 0.0,
                           alibi_slopes: Optional[torch.Tensor] = None,
                           deterministic: bool = False, return_attn_probs: bool = False,
                           block_table: Optional[torch.Tensor] = None) -> torch.Tensor:
    """flash-attn's ``flash_attn_varlen_func``: packed q ``(total_q, h, d)``, k/v
    ``(total_k, hk, d)``, sequence ``i`` being rows ``cu_seqlens[i]:cu_seqlens[i+1]``;
    one attention per sequence (``max_seqlen_*`` are only hints there)."""
    _refuse("flash_attn_varlen_func", softcap=softcap, alibi_slopes=alibi_slopes,
            return_attn_probs=return_attn_probs, block_table=block_table)
    return _by_sequence(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, softmax_scale,
                        causal, window_size)


def flash_attn_varlen_kvpacked_func(q: torch.Tensor, kv: torch.Tensor,
                                    cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                                    max_seqlen_q: int, max_seqlen_k: int,
                                    dropout_p: float = 0.0,
                                    softmax_scale: Optional[float] = None,
                                    causal: bool = False,
                                    window_size: Tuple[int, int] = NO_WINDOW,
                                    softcap: float = 0.0,
                                    alibi_slopes: Optional[torch.Tensor] = None,
                                    deterministic: bool = False,
                                    return_attn_probs: bool = False) -> torch.Tensor:
    """flash-attn's ``flash_attn_varlen_kvpacked_func``: kv ``(total_k, 2, hk, d)``."""
    _refuse("flash_attn_varlen_kvpacked_func", softcap=softcap, alibi_slopes=alibi_slopes,
            return_attn_probs=return_attn_probs)
    return _by_sequence(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k, dropout_p,
                        softmax_scale, causal, window_size)


def flash_attn_varlen_qkvpacked_func(qkv: torch.Tensor, cu_seqlens: torch.Tensor,
                                     max_seqlen: int, dropout_p: float = 0.0,
                                     softmax_scale: Optional[float] = None,
                                     causal: bool = False,
                                     window_size: Tuple[int, int] = NO_WINDOW,
                                     softcap: float = 0.0,
                                     alibi_slopes: Optional[torch.Tensor] = None,
                                     deterministic: bool = False,
                                     return_attn_probs: bool = False) -> torch.Tensor:
    """flash-attn's ``flash_attn_varlen_qkvpacked_func``: qkv ``(total, 3, h, d)``."""
    _refuse("flash_attn_varlen_qkvpacked_func", softcap=softcap, alibi_slopes=alibi_slopes,
            return_attn_probs=return_attn_probs)
    return _by_sequence(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens, dropout_p,
                        softmax_scale, causal, window_size)


# flash-attn 1.x: the varlen functions were called "unpadded", took dropout_p without a
# default, had no window, and aligned ``causal`` top-left.

def flash_attn_unpadded_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                             max_seqlen_q: int, max_seqlen_k: int, dropout_p: float,
                             softmax_scale: Optional[float] = None, causal: bool = False,
                             return_attn_probs: bool = False,
                             deterministic: bool = False) -> torch.Tensor:
    """flash-attn 1.x's ``flash_attn_unpadded_func`` (2.x: ``flash_attn_varlen_func``)."""
    _refuse("flash_attn_unpadded_func", return_attn_probs=return_attn_probs)
    return _by_sequence(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, softmax_scale, causal,
                        NO_WINDOW, top_left=True)


def flash_attn_unpadded_kvpacked_func(q: torch.Tensor, kv: torch.Tensor,
                                      cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                                      max_seqlen_q: int, max_seqlen_k: int, dropout_p: float,
                                      softmax_scale: Optional[float] = None,
                                      causal: bool = False, return_attn_probs: bool = False,
                                      deterministic: bool = False) -> torch.Tensor:
    """flash-attn 1.x's ``flash_attn_unpadded_kvpacked_func``: kv ``(total_k, 2, h, d)``."""
    _refuse("flash_attn_unpadded_kvpacked_func", return_attn_probs=return_attn_probs)
    return _by_sequence(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k, dropout_p,
                        softmax_scale, causal, NO_WINDOW, top_left=True)


def flash_attn_unpadded_qkvpacked_func(qkv: torch.Tensor, cu_seqlens: torch.Tensor,
                                       max_seqlen: int, dropout_p: float,
                                       softmax_scale: Optional[float] = None,
                                       causal: bool = False, return_attn_probs: bool = False,
                                       deterministic: bool = False) -> torch.Tensor:
    """flash-attn 1.x's ``flash_attn_unpadded_qkvpacked_func``: qkv ``(total, 3, h, d)``."""
    _refuse("flash_attn_unpadded_qkvpacked_func", return_attn_probs=return_attn_probs)
    return _by_sequence(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens, dropout_p,
                        softmax_scale, causal, NO_WINDOW, top_left=True)


def _by_sequence(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                 cu_seqlens_k: torch.Tensor, dropout_p: float, softmax_scale: Optional[float],
                 causal: bool, window_size: Sequence[int], top_left: bool = False
                 ) -> torch.Tensor:
    """One attention per packed sequence (rows ``cu_seqlens[i]:cu_seqlens[i+1]``)."""
    starts_q, starts_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    if len(starts_q) != len(starts_k):
        raise ValueError(f"cu_seqlens_q and cu_seqlens_k must describe the same number of "
                         f"sequences, got {len(starts_q) - 1} and {len(starts_k) - 1}")
    batch = len(starts_q) - 1
    same_q, same_k = _equal_lengths(starts_q, q.shape[0]), _equal_lengths(starts_k, k.shape[0])
    if batch > 1 and same_q and same_k:
        # Sequences of one length each (no padding, as StreamPETR calls it): one batched
        # attention instead of one per sequence.
        out = _attention(q.reshape(batch, -1, *q.shape[1:]), k.reshape(batch, -1, *k.shape[1:]),
                         v.reshape(batch, -1, *v.shape[1:]), dropout_p, softmax_scale, causal,
                         window_size, top_left)
        return out.reshape(q.shape[0], *out.shape[2:])
    outputs = []
    for index in range(len(starts_q) - 1):
        rows_q = slice(starts_q[index], starts_q[index + 1])
        rows_k = slice(starts_k[index], starts_k[index + 1])
        outputs.append(_attention(q[rows_q].unsqueeze(0), k[rows_k].unsqueeze(0),
                                  v[rows_k].unsqueeze(0), dropout_p, softmax_scale, causal,
                                  window_size, top_left).squeeze(0))
    if not outputs:
        return q.new_empty(q.shape)
    return torch.cat(outputs, dim=0)


def _equal_lengths(starts: "list[int]", total: int) -> bool:
    """Whether ``cu_seqlens`` cuts all ``total`` rows into sequences of one length."""
    if len(starts) < 2 or starts[0] != 0 or starts[-1] != total:
        return False
    length = starts[1] - starts[0]
    return length > 0 and all(b - a == length for a, b in zip(starts, starts[1:]))

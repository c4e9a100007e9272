"""torch_scatter's scatter and segment operations on ``Tensor.scatter_add_`` /
``scatter_reduce_``, with torch_scatter's conventions:

* a 1-D ``index`` is broadcast along ``dim`` of ``src`` (torch_scatter's
  ``broadcast``); ``dim_size`` defaults to ``index.max() + 1``;
* an output position no element goes to holds 0 (also for max/min, and
  for mul: 1, as torch_scatter starts a product from one), and its argmax/argmin
  is ``src.size(dim)``;
* ``scatter_max``/``scatter_min`` return ``(values, arg)``, ``arg`` being the
  first position of the extreme along ``dim``; the gradient flows to that one
  element only, as torch_scatter's backward does;
* ``scatter_mean`` divides by the count (at least 1), flooring for integers.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

REDUCTIONS = ("sum", "add", "mul", "mean", "min", "max")


def _normal_dim(dim: int, tensor: torch.Tensor) -> int:
    return dim + tensor.dim() if dim < 0 else dim


def broadcast(index: torch.Tensor, src: torch.Tensor, dim: int) -> torch.Tensor:
    """``index`` shaped like ``src`` (torch_scatter's ``broadcast``)."""
    dim = _normal_dim(dim, src)
    if index.dim() == 1:
        for _ in range(dim):
            index = index.unsqueeze(0)
    for _ in range(index.dim(), src.dim()):
        index = index.unsqueeze(-1)
    return index.expand(src.size())


def _output_size(src: torch.Tensor, index: torch.Tensor, dim: int,
                 dim_size: Optional[int]) -> list:
    size = list(src.size())
    if dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() > 0 else 0
    size[dim] = dim_size
    return size


def _refuse_out(function: str, out: Optional[torch.Tensor]) -> None:
    if out is not None:
        raise NotImplementedError(
            f"lazypatch's pure-PyTorch torch_scatter.{function} does not support out= "
            f"(torch_scatter is not installed; lazypatch pack 'cuda_extensions' provides a "
            f"stand-in): use the returned tensor instead")


def scatter_sum(src: torch.Tensor, index: torch.Tensor, dim: int = -1,
                out: Optional[torch.Tensor] = None,
                dim_size: Optional[int] = None) -> torch.Tensor:
    """Sum of the ``src`` elements sent to each position (into ``out`` when given)."""
    dim = _normal_dim(dim, src)
    index = broadcast(index, src, dim)
    if out is None:
        out = src.new_zeros(_output_size(src, index, dim, dim_size))
        return out.scatter_add(dim, index, src)
    return out.scatter_add_(dim, index, src)


scatter_add = scatter_sum


def scatter_mul(src: torch.Tensor, index: torch.Tensor, dim: int = -1,
                out: Optional[torch.Tensor] = None,
                dim_size: Optional[int] = None) -> torch.Tensor:
    """Product of the ``src`` elements sent to each position (1 where none)."""
    dim = _normal_dim(dim, src)
    index = broadcast(index, src, dim)
    if out is None:
        out = src.new_ones(_output_size(src, index, dim, dim_size))
        return out.scatter_reduce(dim, index, src, "prod", include_self=True)
    return out.scatter_reduce_(dim, index, src, "prod", include_self=True)


def scatter_mean(src: torch.Tensor, index: torch.Tensor, dim: int = -1,
                 out: Optional[torch.Tensor] = None,
                 dim_size: Optional[int] = None) -> torch.Tensor:
    """Mean of the ``src`` elements sent to each position (0 where none)."""
    _refuse_out("scatter_mean", out)
    dim = _normal_dim(dim, src)
    total = scatter_sum(src, index, dim, None, dim_size)
    counts = scatter_sum(torch.ones_like(src), index, dim, None, total.size(dim))
    counts = counts.clamp(min=1)
    if total.is_floating_point() or total.is_complex():
        return total / counts
    return torch.div(total, counts, rounding_mode="floor")


def _scatter_extreme(src: torch.Tensor, index: torch.Tensor, dim: int,
                     out: Optional[torch.Tensor], dim_size: Optional[int],
                     reduction: str) -> Tuple[torch.Tensor, torch.Tensor]:
    _refuse_out(f"scatter_{reduction[1:]}", out)
    dim = _normal_dim(dim, src)
    index = broadcast(index, src, dim)
    size = _output_size(src, index, dim, dim_size)
    with torch.no_grad():
        extreme = src.new_zeros(size).scatter_reduce(dim, index, src, reduction,
                                                     include_self=False)
        # The first position along ``dim`` holding the extreme: positions of the
        # other elements are replaced by src.size(dim), then the smallest is kept.
        shape = [1] * src.dim()
        shape[dim] = src.size(dim)
        positions = torch.arange(src.size(dim), device=src.device).view(shape).expand_as(src)
        is_extreme = src == extreme.gather(dim, index)
        empty = torch.full_like(positions, src.size(dim))
        candidates = torch.where(is_extreme, positions, empty)
        arg = torch.full(size, src.size(dim), dtype=torch.long, device=src.device)
        arg = arg.scatter_reduce(dim, index, candidates, "amin", include_self=True)
        found = arg < src.size(dim)
    # Values read back from src at ``arg``: the gradient reaches that element only.
    values = src.gather(dim, torch.where(found, arg, torch.zeros_like(arg)))
    return torch.where(found, values, torch.zeros_like(values)), arg


def scatter_max(src: torch.Tensor, index: torch.Tensor, dim: int = -1,
                out: Optional[torch.Tensor] = None,
                dim_size: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(max, argmax)`` of the ``src`` elements sent to each position."""
    return _scatter_extreme(src, index, dim, out, dim_size, "amax")


def scatter_min(src: torch.Tensor, index: torch.Tensor, dim: int = -1,
                out: Optional[torch.Tensor] = None,
                dim_size: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(min, argmin)`` of the ``src`` elements sent to each position."""
    return _scatter_extreme(src, index, dim, out, dim_size, "amin")


def scatter(src: torch.Tensor, index: torch.Tensor, dim: int = -1,
            out: Optional[torch.Tensor] = None, dim_size: Optional[int] = None,
            reduce: str = "sum") -> torch.Tensor:
    """torch_scatter's ``scatter``: ``reduce`` is one of sum, add, mul, mean, min, max
    (for min/max the values only, as torch_scatter returns)."""
    if reduce in ("sum", "add"):
        return scatter_sum(src, index, dim, out, dim_size)
    if reduce == "mul":
        return scatter_mul(src, index, dim, out, dim_size)
    if reduce == "mean":
        return scatter_mean(src, index, dim, out, dim_size)
    if reduce == "min":
        return scatter_min(src, index, dim, out, dim_size)[0]
    if reduce == "max":
        return scatter_max(src, index, dim, out, dim_size)[0]
    raise ValueError(f"reduce must be one of {', '.join(REDUCTIONS)}, got {reduce!r}")


def _segment_index(src: torch.Tensor, indptr: torch.Tensor) -> Tuple[torch.Tensor, int, int]:
    """The segment of each row of ``src[start:stop]`` for a 1-D ``indptr``, and start, stop."""
    if indptr.dim() != 1:
        raise NotImplementedError(
            "lazypatch's pure-PyTorch torch_scatter segment operations take a 1-D indptr "
            f"(got {indptr.dim()}-D; torch_scatter is not installed): reshape src so that the "
            "segments run along its first dimension")
    bounds = indptr.tolist()
    start, stop = bounds[0], bounds[-1]
    lengths = indptr[1:] - indptr[:-1]
    segments = torch.arange(lengths.numel(), device=src.device)
    return segments.repeat_interleave(lengths.to(src.device)), start, stop


def segment_csr(src: torch.Tensor, indptr: torch.Tensor, out: Optional[torch.Tensor] = None,
                reduce: str = "sum") -> "torch.Tensor | Tuple[torch.Tensor, torch.Tensor]":
    """Reduce the rows ``indptr[i]:indptr[i+1]`` of ``src`` (first dimension) into row
    ``i``; min/max return ``(values, arg)`` with ``arg`` a row of ``src``."""
    _refuse_out("segment_csr", out)
    index, start, stop = _segment_index(src, indptr)
    count = indptr.numel() - 1
    rows = src[start:stop]
    if reduce in ("min", "max"):
        values, arg = _scatter_extreme(rows, index, 0, None, count, "a" + reduce)
        return values, torch.where(arg < rows.size(0), arg + start,
                                   torch.full_like(arg, src.size(0)))
    if reduce not in REDUCTIONS:
        raise ValueError(f"reduce must be one of {', '.join(REDUCTIONS)}, got {reduce!r}")
    return scatter(rows, index, 0, None, count, reduce)


def gather_csr(src: torch.Tensor, indptr: torch.Tensor,
               out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Row ``i`` of ``src`` repeated for each row of segment ``i`` of a 1-D ``indptr``."""
    _refuse_out("gather_csr", out)
    index, _, _ = _segment_index(src, indptr)
    return src.index_select(0, index)

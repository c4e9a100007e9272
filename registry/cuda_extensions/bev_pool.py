"""BEV pooling kernels of the BEV-detector research projects, on plain tensor ops.

Both families pool the points of a camera frustum into a bird's-eye-view grid
over *intervals*: runs of points (``interval_starts[i]``, ``interval_lengths[i]``)
that fall into one BEV cell. Each interval's sum is written into its cell (each
CUDA thread writes its own interval's cell; intervals that share a cell, a race
there, add up here):

* BEVFusion's ``bev_pool_ext`` (``bev_pool_forward`` / ``bev_pool_backward``):
  features ``x`` (N, C) and integer coordinates ``geom_feats`` (N, 4) in the order
  (h, w, depth, batch); the output is (B, D, H, W, C). The backward hands each
  point of an interval the gradient of its cell.
* BEVDet's ``bev_pool_v2_ext`` (``bev_pool_v2_forward``, ``bev_pool_v2_backward``,
  ``bev_pool_v2_backward_opt``): each point is the product of a depth score
  ``depth.flat[ranks_depth]`` and a feature row ``feat.flat[ranks_feat]``; its cell
  is the row ``ranks_bev`` of the caller's output viewed as (-1, C). The backward's
  intervals group points by ``ranks_feat``: ``_opt`` adds into the caller's
  gradients (atomicAdd in CUDA), the plain one writes each interval's sum.

Floating-point sums may differ from CUDA's in the last bits (summation order).
"""
from __future__ import annotations

from typing import Tuple, Union

import torch

#: A grid size: an int, or a one-element tensor as BEVDet passes it.
Size = Union[int, torch.Tensor]


def interval_members(interval_starts: torch.Tensor, interval_lengths: torch.Tensor
                     ) -> Tuple[torch.Tensor, torch.Tensor, bool]:
    """(point, interval, in_order) for every point of every interval: the point's index,
    the number of its interval (intervals in order, points in order within each), and
    whether the points are exactly 0, 1, 2, ... (the intervals tile the input)."""
    starts = interval_starts.long()
    lengths = interval_lengths.long()
    first_member = torch.cumsum(lengths, 0) - lengths
    total = int(first_member[-1] + lengths[-1]) if lengths.numel() else 0
    # Interval number of each member: one repeat_interleave (an empty interval has no
    # members and is skipped).
    interval = torch.repeat_interleave(torch.arange(lengths.numel(), device=lengths.device),
                                       lengths, output_size=total)
    positions = torch.arange(total, device=lengths.device)
    if torch.equal(starts, first_member):
        return positions, interval, True
    return starts[interval] + positions - first_member[interval], interval, False


def bev_pool_forward(x: torch.Tensor, geom_feats: torch.Tensor,
                     interval_lengths: torch.Tensor, interval_starts: torch.Tensor,
                     b: "Size", d: "Size", h: "Size", w: "Size") -> torch.Tensor:
    """BEVFusion ``bev_pool_forward``: a new (b, d, h, w, C) tensor holding each
    interval's feature sum in the cell of its first point, zeros elsewhere. The sizes may
    be ints or 0-d tensors (BEVDet passes tensors; the compiled op converts them)."""
    b, d, h, w = _sizes(b, d, h, w)
    channels = x.shape[1]
    point, interval, in_order = interval_members(interval_starts, interval_lengths)
    rows = x[:point.numel()] if in_order else x[point]
    cells = _bev_cells(geom_feats, interval_starts, d, h, w)[interval]
    out = x.new_zeros(b * d * h * w, channels).index_add_(0, cells, rows)
    return out.view(b, d, h, w, channels)


def bev_pool_backward(out_grad: torch.Tensor, geom_feats: torch.Tensor,
                      interval_lengths: torch.Tensor, interval_starts: torch.Tensor,
                      b: "Size", d: "Size", h: "Size", w: "Size") -> torch.Tensor:
    """BEVFusion ``bev_pool_backward``: a new (N, C) tensor giving every point of an
    interval the gradient of its cell (zeros for points in no interval)."""
    b, d, h, w = _sizes(b, d, h, w)
    channels = out_grad.shape[-1]
    count = geom_feats.shape[0]
    point, interval, in_order = interval_members(interval_starts, interval_lengths)
    cells = _bev_cells(geom_feats, interval_starts, d, h, w)[interval]
    rows = out_grad.reshape(-1, channels).index_select(0, cells)
    if in_order and point.numel() == count:
        return rows
    x_grad = out_grad.new_zeros(count, channels)
    x_grad[point] = rows
    return x_grad


def _sizes(*sizes: "Size") -> Tuple[int, ...]:
    """The grid sizes as ints, as pybind11 converts the compiled op's ``int`` arguments
    (a one-element tensor included)."""
    converted = []
    for size in sizes:
        if isinstance(size, torch.Tensor) and size.numel() != 1:
            raise TypeError(f"bev_pool: a grid size must be an int or a one-element tensor, "
                            f"got a tensor of shape {tuple(size.shape)}")
        converted.append(int(size))
    return tuple(converted)


def _bev_cells(geom_feats: torch.Tensor, interval_starts: torch.Tensor,
               d: int, h: int, w: int) -> torch.Tensor:
    """Flat (b, d, h, w) cell of each interval, from the (h, w, depth, batch)
    coordinates of its first point."""
    first = geom_feats[interval_starts.long()].long()
    return ((first[:, 3] * d + first[:, 2]) * h + first[:, 0]) * w + first[:, 1]


def bev_pool_v2_forward(depth: torch.Tensor, feat: torch.Tensor, out: torch.Tensor,
                        ranks_depth: torch.Tensor, ranks_feat: torch.Tensor,
                        ranks_bev: torch.Tensor, interval_lengths: torch.Tensor,
                        interval_starts: torch.Tensor) -> None:
    """BEVDet ``bev_pool_v2_forward``: writes into ``out`` (viewed as (-1, C)) at row
    ``ranks_bev`` of each interval's first point the sum of depth x feature products."""
    channels = feat.shape[-1]
    point, interval, in_order = interval_members(interval_starts, interval_lengths)
    products = _rows(feat.reshape(-1, channels), _of_members(ranks_feat, point, in_order))
    # In place in the gathered rows: no second (points, C) tensor to allocate and fill.
    products.mul_(_rows(depth.reshape(-1), _of_members(ranks_depth, point, in_order))[:, None])
    cells = _rows(ranks_bev, interval_starts).long()
    flat = out.view(-1, channels)
    flat.index_fill_(0, cells, 0)   # each interval writes its cell, as the kernel does
    flat.index_add_(0, _rows(cells, interval), products.to(out.dtype))


def _rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    # index_select: several times faster than advanced indexing on the CPU.
    return table.index_select(0, index.long())


def _of_members(values: torch.Tensor, point: torch.Tensor, in_order: bool) -> torch.Tensor:
    """``values`` of each member point (a slice when the members are 0, 1, 2, ...)."""
    return values[:point.numel()] if in_order else _rows(values, point)


def _bev_pool_v2_gradients(out_grad: torch.Tensor, depth: torch.Tensor, feat: torch.Tensor,
                           ranks_depth: torch.Tensor, ranks_feat: torch.Tensor,
                           ranks_bev: torch.Tensor, interval_lengths: torch.Tensor,
                           interval_starts: torch.Tensor
                           ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per point: its depth index and depth gradient; per interval: its feature row
    and feature gradient."""
    channels = feat.shape[-1]
    point, interval, in_order = interval_members(interval_starts, interval_lengths)
    depth_index = _of_members(ranks_depth, point, in_order).long()
    grad_rows = _rows(out_grad.reshape(-1, channels), _of_members(ranks_bev, point, in_order))
    feat_rows = _rows(feat.reshape(-1, channels), _of_members(ranks_feat, point, in_order))
    # Products in place in the gathered rows (ours to overwrite): no (points, C) temporary.
    depth_grad = feat_rows.mul_(grad_rows).sum(1)
    del feat_rows
    weighted = grad_rows.mul_(_rows(depth.reshape(-1), depth_index)[:, None])
    feat_grad = weighted.new_zeros(interval_lengths.numel(), channels).index_add_(
        0, interval, weighted)
    return depth_index, depth_grad, _rows(ranks_feat, interval_starts).long(), feat_grad


def bev_pool_v2_backward(out_grad: torch.Tensor, depth_grad: torch.Tensor,
                         feat_grad: torch.Tensor, depth: torch.Tensor, feat: torch.Tensor,
                         ranks_depth: torch.Tensor, ranks_feat: torch.Tensor,
                         ranks_bev: torch.Tensor, interval_lengths: torch.Tensor,
                         interval_starts: torch.Tensor) -> None:
    """BEVDet ``bev_pool_v2_backward``: writes (not adds) each point's depth gradient
    and each interval's feature gradient (intervals grouped by ``ranks_feat``)."""
    depth_rows, depth_values, feat_rows, feat_values = _bev_pool_v2_gradients(
        out_grad, depth, feat, ranks_depth, ranks_feat, ranks_bev, interval_lengths,
        interval_starts)
    depth_grad.view(-1)[depth_rows] = depth_values.to(depth_grad.dtype)
    feat_grad.view(-1, feat.shape[-1])[feat_rows] = feat_values.to(feat_grad.dtype)


def bev_pool_v2_backward_opt(out_grad: torch.Tensor, depth_grad: torch.Tensor,
                             feat_grad: torch.Tensor, depth: torch.Tensor,
                             feat: torch.Tensor, ranks_depth: torch.Tensor,
                             ranks_feat: torch.Tensor, ranks_bev: torch.Tensor,
                             interval_lengths: torch.Tensor,
                             interval_starts: torch.Tensor) -> None:
    """BEVDet ``bev_pool_v2_backward_opt``: adds the depth and feature gradients into
    ``depth_grad`` and ``feat_grad``."""
    depth_rows, depth_values, feat_rows, feat_values = _bev_pool_v2_gradients(
        out_grad, depth, feat, ranks_depth, ranks_feat, ranks_bev, interval_lengths,
        interval_starts)
    depth_grad.view(-1).index_add_(0, depth_rows, depth_values.to(depth_grad.dtype))
    feat_grad.view(-1, feat.shape[-1]).index_add_(0, feat_rows,
                                                  feat_values.to(feat_grad.dtype))

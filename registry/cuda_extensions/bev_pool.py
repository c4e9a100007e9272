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
                     ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(point, interval) for every point of every interval: the point's index and the
    number of its interval (intervals in order, points in order within each)."""
    starts = interval_starts.long()
    lengths = interval_lengths.long()
    first_member = torch.cumsum(lengths, 0) - lengths
    total = int(lengths.sum())
    # Interval number of each member: one repeat_interleave (an empty interval has no
    # members and is skipped).
    interval = torch.repeat_interleave(torch.arange(lengths.numel(), device=lengths.device),
                                       lengths, output_size=total)
    positions = torch.arange(total, device=lengths.device)
    return starts[interval] + positions - first_member[interval], interval


def bev_pool_forward(x: torch.Tensor, geom_feats: torch.Tensor,
                     interval_lengths: torch.Tensor, interval_starts: torch.Tensor,
                     b: "Size", d: "Size", h: "Size", w: "Size") -> torch.Tensor:
    """BEVFusion ``bev_pool_forward``: a new (b, d, h, w, C) tensor holding each
    interval's feature sum in the cell of its first point, zeros elsewhere. The sizes may
    be ints or 0-d tensors (BEVDet passes tensors; the compiled op converts them)."""
    b, d, h, w = _sizes(b, d, h, w)
    channels = x.shape[1]
    cells, point = _member_cells(geom_feats, interval_starts, interval_lengths, d, h, w)
    rows = x[:cells.numel()] if point is None else _rows(x, point)
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
    cells, point = _member_cells(geom_feats, interval_starts, interval_lengths, d, h, w)
    rows = out_grad.reshape(-1, channels).index_select(0, cells)
    if point is None and cells.numel() == count:
        return rows
    x_grad = out_grad.new_zeros(count, channels)
    if point is None:
        x_grad[:cells.numel()] = rows
    else:
        x_grad[point] = rows
    return x_grad


def _member_cells(geom_feats: torch.Tensor, interval_starts: torch.Tensor,
                  interval_lengths: torch.Tensor, d: int, h: int, w: int
                  ) -> Tuple[torch.Tensor, "torch.Tensor | None"]:
    """The cell of every member point of every interval (its interval's first point's
    cell, as each CUDA thread writes its interval's cell), and the member points'
    indices, None when the intervals tile the points 0, 1, 2, ... in order."""
    return _spread(_bev_cells(geom_feats, interval_starts, d, h, w), interval_starts,
                   interval_lengths)


def _spread(per_interval: torch.Tensor, interval_starts: torch.Tensor,
            interval_lengths: torch.Tensor) -> Tuple[torch.Tensor, "torch.Tensor | None"]:
    """``per_interval`` values repeated over each interval's member points, and the
    members' indices, None when the intervals tile the points 0, 1, 2, ... in order."""
    lengths = interval_lengths.long()
    if torch.equal(interval_starts.long(), torch.cumsum(lengths, 0) - lengths):
        # In order (as the projects' Python sorts them): one repeat_interleave, with no
        # member and interval numbers built.
        return torch.repeat_interleave(per_interval, lengths,
                                       output_size=int(lengths.sum())), None
    point, interval = interval_members(interval_starts, interval_lengths)
    return per_interval.index_select(0, interval), point


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
    first = geom_feats.index_select(0, interval_starts.long()).long()
    return ((first[:, 3] * d + first[:, 2]) * h + first[:, 0]) * w + first[:, 1]


def bev_pool_v2_forward(depth: torch.Tensor, feat: torch.Tensor, out: torch.Tensor,
                        ranks_depth: torch.Tensor, ranks_feat: torch.Tensor,
                        ranks_bev: torch.Tensor, interval_lengths: torch.Tensor,
                        interval_starts: torch.Tensor) -> None:
    """BEVDet ``bev_pool_v2_forward``: writes into ``out`` (viewed as (-1, C)) at row
    ``ranks_bev`` of each interval's first point the sum of depth x feature products."""
    channels = feat.shape[-1]
    cells = _rows(ranks_bev, interval_starts).long()
    member_cells, point = _spread(cells, interval_starts, interval_lengths)
    count = member_cells.numel()
    products = _rows(feat.reshape(-1, channels), _of_members(ranks_feat, point, count))
    # In place in the gathered rows: no second (points, C) tensor to allocate and fill.
    products.mul_(_rows(depth.reshape(-1), _of_members(ranks_depth, point, count))[:, None])
    flat = out.view(-1, channels)
    flat.index_fill_(0, cells, 0)   # each interval writes its cell, as the kernel does
    flat.index_add_(0, member_cells, products.to(out.dtype))


def _rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    # index_select: several times faster than advanced indexing on the CPU.
    return table.index_select(0, index.long())


def _of_members(values: torch.Tensor, point: "torch.Tensor | None", count: int
                ) -> torch.Tensor:
    """``values`` of each of the ``count`` member points (a slice when ``point`` is None:
    the members are 0, 1, 2, ...)."""
    return values[:count] if point is None else _rows(values, point)


def _bev_pool_v2_gradients(out_grad: torch.Tensor, depth: torch.Tensor, feat: torch.Tensor,
                           ranks_depth: torch.Tensor, ranks_feat: torch.Tensor,
                           ranks_bev: torch.Tensor, interval_lengths: torch.Tensor,
                           interval_starts: torch.Tensor
                           ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per member point: its depth index and depth gradient, its interval's feature row
    and its share of that row's gradient (the interval's sum is the sum of the shares)."""
    channels = feat.shape[-1]
    feat_index, point = _spread(_rows(ranks_feat, interval_starts).long(), interval_starts,
                                interval_lengths)
    count = feat_index.numel()
    depth_index = _of_members(ranks_depth, point, count).long()
    grad_rows = _rows(out_grad.reshape(-1, channels), _of_members(ranks_bev, point, count))
    feat_rows = _rows(feat.reshape(-1, channels), _of_members(ranks_feat, point, count))
    # Products in place in the gathered rows (ours to overwrite): no (points, C) temporary.
    depth_grad = feat_rows.mul_(grad_rows).sum(1)
    del feat_rows
    shares = grad_rows.mul_(_rows(depth.reshape(-1), depth_index)[:, None])
    return depth_index, depth_grad, feat_index, shares


def bev_pool_v2_backward(out_grad: torch.Tensor, depth_grad: torch.Tensor,
                         feat_grad: torch.Tensor, depth: torch.Tensor, feat: torch.Tensor,
                         ranks_depth: torch.Tensor, ranks_feat: torch.Tensor,
                         ranks_bev: torch.Tensor, interval_lengths: torch.Tensor,
                         interval_starts: torch.Tensor) -> None:
    """BEVDet ``bev_pool_v2_backward``: writes (not adds) each point's depth gradient
    and each interval's feature gradient (intervals grouped by ``ranks_feat``)."""
    depth_rows, depth_values, feat_rows, shares = _bev_pool_v2_gradients(
        out_grad, depth, feat, ranks_depth, ranks_feat, ranks_bev, interval_lengths,
        interval_starts)
    depth_grad.view(-1)[depth_rows] = depth_values.to(depth_grad.dtype)
    target = feat_grad.view(-1, feat.shape[-1])
    target.index_fill_(0, feat_rows, 0)   # each interval writes its row, as the kernel does
    target.index_add_(0, feat_rows, shares.to(feat_grad.dtype))


def bev_pool_v2_backward_opt(out_grad: torch.Tensor, depth_grad: torch.Tensor,
                             feat_grad: torch.Tensor, depth: torch.Tensor,
                             feat: torch.Tensor, ranks_depth: torch.Tensor,
                             ranks_feat: torch.Tensor, ranks_bev: torch.Tensor,
                             interval_lengths: torch.Tensor,
                             interval_starts: torch.Tensor) -> None:
    """BEVDet ``bev_pool_v2_backward_opt``: adds the depth and feature gradients into
    ``depth_grad`` and ``feat_grad``."""
    depth_rows, depth_values, feat_rows, shares = _bev_pool_v2_gradients(
        out_grad, depth, feat, ranks_depth, ranks_feat, ranks_bev, interval_lengths,
        interval_starts)
    depth_grad.view(-1).index_add_(0, depth_rows, depth_values.to(depth_grad.dtype))
    feat_grad.view(-1, feat.shape[-1]).index_add_(0, feat_rows, shares.to(feat_grad.dtype))

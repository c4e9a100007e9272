"""``roiaware_pool3d_forward`` / ``roiaware_pool3d_backward`` (mmcv ships CUDA only;
Part-A2's RoI head): each 3D box is cut into an ``out_x x out_y x out_z`` grid in its
own frame and the features of the points in each cell are max- or average-pooled.

Semantics follow mmcv's kernels:

* a point is in a box by the rule of :func:`points_in_boxes.points_in_boxes_mask`;
  its cell is ``trunc((local + size / 2) / (size / out))`` in x and y and
  ``trunc((z - bottom) / (z_size / out_z))`` in z, clamped to the grid;
* each cell keeps its first ``max_pts_per_voxel - 1`` points in index order:
  ``pts_idx_of_voxels[..., 0]`` is that count, ``[..., 1:count + 1]`` the points;
* max pooling takes, per channel, the first kept point holding the largest value
  (``argmax``; -1 and a pooled 0 for an empty cell); average pooling divides the
  sum by the count (0 for an empty cell);
* the backward adds ``grad_out`` to the argmax point (max) or ``grad_out / count`` to
  each kept point (avg).
"""
from __future__ import annotations

from typing import Tuple

import torch

from .points_in_boxes import points_in_boxes_mask
from .ranks import rank_within_groups

MAX_POOL, AVG_POOL = 0, 1


def _cells_of_points(rois: torch.Tensor, pts: torch.Tensor, grid: Tuple[int, int, int]
                     ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(point, box, flat cell) of every point inside a box, point-major (index order)."""
    inside = points_in_boxes_mask(pts[None, :, :3], rois[None])[0]  # (N, M)
    point, box = inside.nonzero(as_tuple=True)
    boxes = rois.to(pts.dtype)[box]
    xyz = pts[point, :3]
    shift_x, shift_y = xyz[:, 0] - boxes[:, 0], xyz[:, 1] - boxes[:, 1]
    # The local frame exactly as points_in_boxes_mask computes it.
    cos, sin = torch.cos(-boxes[:, 6]), torch.sin(-boxes[:, 6])
    local = (shift_x * cos - shift_y * sin + boxes[:, 3] / 2,
             shift_x * sin + shift_y * cos + boxes[:, 4] / 2,
             xyz[:, 2] - boxes[:, 2])
    cell = torch.zeros_like(point)
    for axis, (offset, size) in enumerate(zip(local, grid)):
        resolution = boxes[:, 3 + axis] / size
        index = torch.trunc(offset / resolution).long().clamp(0, size - 1)
        cell = cell * size + index
    return point, box, cell


def roiaware_pool3d_forward(rois: torch.Tensor, pts: torch.Tensor,
                            pts_feature: torch.Tensor, argmax: torch.Tensor,
                            pts_idx_of_voxels: torch.Tensor,
                            pooled_features: torch.Tensor, pool_method: int = MAX_POOL) -> None:
    """Fill ``pts_idx_of_voxels`` (M, X, Y, Z, P), ``pooled_features`` (M, X, Y, Z, C) and,
    for max pooling, ``argmax`` (M, X, Y, Z, C), from (M, 7) ``rois``, (N, 3) ``pts`` and
    (N, C) ``pts_feature``."""
    boxes, out_x, out_y, out_z, channels = pooled_features.shape
    cells_per_box = out_x * out_y * out_z
    capacity = pts_idx_of_voxels.shape[-1] - 1  # slot 0 is the counter
    point, box, cell = _cells_of_points(rois, pts, (out_x, out_y, out_z))
    group = box * cells_per_box + cell
    rank = rank_within_groups(group)
    kept = rank < capacity
    point, group, rank = point[kept], group[kept], rank[kept]
    cells = boxes * cells_per_box
    counts = torch.bincount(group, minlength=cells)
    slots = pts_idx_of_voxels.view(cells, capacity + 1)
    slots[:, 0] = counts.to(slots.dtype)
    slots[group, rank + 1] = point.to(slots.dtype)

    pooled = pooled_features.view(cells, channels)
    values = pts_feature[point].to(pooled.dtype)
    occupied = (counts > 0)[:, None]
    if int(pool_method) == AVG_POOL:
        sums = pooled.new_zeros(cells, channels).index_add_(0, group, values)
        means = sums / counts.clamp(min=1)[:, None].to(sums.dtype)
        pooled.copy_(torch.where(occupied, means, pooled))
        return
    by_group = group[:, None].expand(-1, channels)
    largest = torch.full_like(pooled, -torch.inf).scatter_reduce(
        0, by_group, values, "amax", include_self=True)
    # The kernel starts from -inf and keeps a strictly larger value: the first point
    # (lowest index) holding the largest finite-or-+inf value wins; -inf never does.
    holds = (values == largest[group]) & (values > -torch.inf)
    none = pts.shape[0]
    candidates = torch.where(holds, point[:, None], torch.full_like(by_group, none))
    first = torch.full((cells, channels), none, dtype=torch.long, device=pooled.device)
    first.scatter_reduce_(0, by_group, candidates, "amin", include_self=True)
    found = first < none
    pooled.copy_(torch.where(found, largest, pooled))
    argmax.view(cells, channels).copy_(
        torch.where(found, first, torch.full_like(first, -1)).to(argmax.dtype))


def roiaware_pool3d_backward(pts_idx_of_voxels: torch.Tensor, argmax: torch.Tensor,
                             grad_out: torch.Tensor, grad_in: torch.Tensor,
                             pool_method: int = MAX_POOL) -> None:
    """Add the gradient of (M, X, Y, Z, C) ``grad_out`` into (N, C) ``grad_in``."""
    channels = grad_out.shape[-1]
    grad = grad_out.reshape(-1, channels).to(grad_in.dtype)
    if int(pool_method) == AVG_POOL:
        slots = pts_idx_of_voxels.reshape(grad.shape[0], -1).long()
        counts = slots[:, 0]
        share = grad / counts.clamp(min=1)[:, None].to(grad.dtype)
        used = torch.arange(slots.shape[1] - 1, device=slots.device) < counts[:, None]
        cell, slot = used.nonzero(as_tuple=True)
        grad_in.index_add_(0, slots[cell, slot + 1], share[cell])
        return
    winners = argmax.reshape(-1, channels).long()
    cell, channel = (winners >= 0).nonzero(as_tuple=True)
    grad_in.index_put_((winners[cell, channel], channel), grad[cell, channel],
                       accumulate=True)

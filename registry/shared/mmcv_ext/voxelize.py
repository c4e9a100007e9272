"""Point-cloud voxelization kernels: ``dynamic_voxelize_forward`` and
``hard_voxelize_forward``.

Semantics follow mmcv's deterministic CPU kernel:

* a point's voxel is ``floor((p - range_min) / voxel_size)`` per axis, and a
  point outside ``[0, grid_size)`` on any axis is dropped (coordinates -1);
  ``grid_size = round((range_max - range_min) / voxel_size)``;
* coordinates are written in reversed axis order, (z, y, x);
* hard voxelization numbers voxels in order of their first point, keeps at
  most ``max_voxels`` voxels (points of later voxels are dropped) and the
  first ``max_points`` points of each voxel, in input order.

All of it is vectorized with ``unique``/``sort``/scatter operations.
"""
from __future__ import annotations

from typing import NamedTuple, Tuple

import torch

from .ranks import rank_within_groups


def _grid_params(points: torch.Tensor, voxel_size: torch.Tensor,
                 coors_range: torch.Tensor, ndim: int
                 ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    size = voxel_size.to(device=points.device).reshape(-1)[:ndim]
    rng = coors_range.to(device=points.device).reshape(-1)
    low, high = rng[:ndim], rng[ndim:2 * ndim]
    # Grid size is computed in float32 like the kernel's std::vector<float>;
    # round half away from zero as C's round() does.
    extent = (high.float() - low.float()) / size.float()
    grid = torch.sign(extent) * torch.floor(extent.abs() + 0.5)
    return size, low, grid.long()


def _point_voxel_coords(points: torch.Tensor, voxel_size: torch.Tensor,
                        coors_range: torch.Tensor, ndim: int
                        ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-point integer voxel coords (x, y, z order), validity, grid size."""
    size, low, grid = _grid_params(points, voxel_size, coors_range, ndim)
    dtype = points.dtype
    coords = torch.floor(
        (points[:, :ndim] - low.to(dtype)) / size.to(dtype)).long()
    valid = ((coords >= 0) & (coords < grid)).all(dim=1)
    return coords, valid, grid


def dynamic_voxelize_forward(points: torch.Tensor, voxel_size: torch.Tensor,
                             coors_range: torch.Tensor, coors: torch.Tensor,
                             NDim: int = 3) -> None:
    """Ext ``dynamic_voxelize_forward``: fills ``coors`` (N, NDim) with each
    point's voxel coordinate in reversed axis order, or -1 if out of range."""
    if points.shape[0] == 0:
        return
    coords, valid, _ = _point_voxel_coords(points, voxel_size, coors_range,
                                           int(NDim))
    result = torch.where(valid[:, None], coords.flip(1),
                         torch.full_like(coords, -1))
    coors.copy_(result.to(coors.dtype))


class HardVoxels(NamedTuple):
    """Where hard voxelization puts each kept point, in voxel-id order (ids follow
    the order in which voxels first receive a point)."""
    #: (K,) kept points: their row in the input, their voxel id and slot in it
    point_index: torch.Tensor
    voxel_index: torch.Tensor
    slot: torch.Tensor
    #: (M, ndim) voxel coordinates in (z, y, x) order and (M,) point counts (capped)
    voxel_coords: torch.Tensor
    counts: torch.Tensor


def hard_voxel_assignment(points: torch.Tensor, voxel_size: torch.Tensor,
                          coors_range: torch.Tensor, max_points: int, max_voxels: int,
                          ndim: int = 3) -> HardVoxels:
    """Hard voxelization without the output buffers: what ``hard_voxelize_forward``
    writes, for callers with their own layout (spconv's ``PointToVoxel``)."""
    device = points.device
    empty = torch.zeros(0, dtype=torch.long, device=device)
    nothing = HardVoxels(empty, empty, empty, empty.reshape(0, ndim), empty)
    n = points.shape[0]
    if n == 0:
        return nothing
    coords, valid, grid = _point_voxel_coords(points, voxel_size, coors_range, ndim)
    point_idx = valid.nonzero(as_tuple=True)[0]
    if point_idx.numel() == 0:
        return nothing
    c = coords[point_idx]
    # Linear key of the voxel; any injective encoding works for grouping.
    key = torch.zeros_like(point_idx)
    for axis in range(ndim - 1, -1, -1):
        key = key * grid[axis] + c[:, axis]
    uniq, inverse = torch.unique(key, return_inverse=True)
    first = torch.full((uniq.numel(),), n, dtype=torch.long, device=device)
    first.scatter_reduce_(0, inverse, point_idx, reduce="amin")
    # Voxel ids follow the order in which voxels first receive a point.
    rank = torch.empty_like(first)
    rank[first.argsort()] = torch.arange(first.numel(), device=device)
    voxel_id = rank[inverse]
    # Slot of each point inside its voxel = number of earlier points there.
    slot = rank_within_groups(voxel_id)
    counts = torch.bincount(voxel_id, minlength=uniq.numel())
    limit_v = uniq.numel() if max_voxels == -1 else min(uniq.numel(), int(max_voxels))
    keep = voxel_id < limit_v
    if max_points != -1:
        keep &= slot < int(max_points)
    voxel_coords = torch.empty((uniq.numel(), ndim), dtype=torch.long, device=device)
    voxel_coords[voxel_id] = c.flip(1)
    # counts are indexed by voxel id; ids < limit_v are the kept voxels.
    capped = counts[:limit_v] if max_points == -1 else counts[:limit_v].clamp(
        max=int(max_points))
    return HardVoxels(point_idx[keep], voxel_id[keep], slot[keep], voxel_coords[:limit_v],
                      capped)


def hard_voxelize_forward(points: torch.Tensor, voxel_size: torch.Tensor,
                          coors_range: torch.Tensor, voxels: torch.Tensor,
                          coors: torch.Tensor,
                          num_points_per_voxel: torch.Tensor,
                          voxel_num: torch.Tensor, max_points: int,
                          max_voxels: int, NDim: int = 3,
                          deterministic: bool = True) -> None:
    """Ext ``hard_voxelize_forward``.

    Fills, for the first ``M = voxel_num`` voxels: ``voxels[:M]``
    (M, max_points, C) with their points (zero padded), ``coors[:M]`` with
    their (z, y, x) coordinates and ``num_points_per_voxel[:M]`` with their
    point counts (capped at ``max_points``), and stores M in the 0-d tensor
    ``voxel_num``. ``deterministic=False`` selects a faster CUDA variant in
    mmcv; the result here is always the deterministic one.
    """
    found = hard_voxel_assignment(points, voxel_size, coors_range, int(max_points),
                                  int(max_voxels), int(NDim))
    kept = found.counts.numel()
    voxels[found.voxel_index, found.slot] = points[found.point_index].to(voxels.dtype)
    coors[:kept] = found.voxel_coords.to(coors.dtype)
    num_points_per_voxel[:kept] = found.counts.to(num_points_per_voxel.dtype)
    voxel_num.fill_(kept)

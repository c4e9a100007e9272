"""Voxel feature scatter kernels: ``dynamic_point_to_voxel_forward`` and
``dynamic_point_to_voxel_backward`` (used by ``DynamicScatter``, e.g. in
dynamic-voxel PointPillars / SECOND encoders).

Semantics follow mmcv's CUDA kernel: points with any negative coordinate are
ignored; voxels are the unique coordinate rows in lexicographic order; the
reduction is ``max``, ``sum`` or ``mean``; the max backward sends each
feature's gradient to the lowest-indexed point that attains the maximum.
"""
from __future__ import annotations

from typing import List

import torch

_REDUCE = {"max": "amax", "sum": "sum", "mean": "sum"}


def dynamic_point_to_voxel_forward(feats: torch.Tensor, coors: torch.Tensor,
                                   reduce_type: str) -> List[torch.Tensor]:
    """Ext ``dynamic_point_to_voxel_forward``.

    Returns ``[voxel_feats (M, C), voxel_coors (M, ndim),
    point2voxel_map (N,) int32 (-1 for ignored points),
    voxel_points_count (M,) int32]``.
    """
    if reduce_type not in _REDUCE:
        raise RuntimeError(f"do not support reduce type {reduce_type}")
    if feats.shape[0] == 0:
        return [feats.clone().detach(), coors.clone().detach(),
                coors.new_empty(0, dtype=torch.int32),
                coors.new_empty(0, dtype=torch.int32)]
    invalid = (coors < 0).any(dim=-1, keepdim=True)
    clean = coors.masked_fill(invalid, -1)
    out_coors, coors_map, counts = torch.unique(
        clean, dim=0, sorted=True, return_inverse=True, return_counts=True)
    if bool((out_coors[0] < 0).any()):
        # Row (-1, ..., -1) sorts first and collects the ignored points.
        out_coors, counts = out_coors[1:], counts[1:]
        coors_map = coors_map - 1
    num_voxels, channels = out_coors.shape[0], feats.shape[1]
    valid = coors_map >= 0
    reduced = feats.new_zeros((num_voxels, channels))
    if num_voxels:
        index = coors_map[valid][:, None].expand(-1, channels)
        reduced.scatter_reduce_(0, index, feats[valid],
                                reduce=_REDUCE[reduce_type],
                                include_self=False)
        if reduce_type == "mean":
            reduced = reduced / counts[:, None].to(reduced.dtype)
    return [reduced, out_coors, coors_map.to(torch.int32),
            counts.to(torch.int32)]


def dynamic_point_to_voxel_backward(grad_feats: torch.Tensor,
                                    grad_reduced_feats: torch.Tensor,
                                    feats: torch.Tensor,
                                    reduced_feats: torch.Tensor,
                                    coors_idx: torch.Tensor,
                                    reduce_count: torch.Tensor,
                                    reduce_type: str) -> None:
    """Ext ``dynamic_point_to_voxel_backward``: overwrites ``grad_feats``."""
    grad_feats.zero_()
    n, channels = feats.shape
    if n == 0 or reduced_feats.shape[0] == 0:
        return
    vmap = coors_idx.long()
    valid = vmap >= 0
    pts = valid.nonzero(as_tuple=True)[0]
    vox = vmap[pts]
    g = grad_reduced_feats.to(grad_feats.dtype)
    if reduce_type in ("sum", "mean"):
        contrib = g[vox]
        if reduce_type == "mean":
            contrib = contrib / reduce_count.long()[vox][:, None].to(
                contrib.dtype)
        grad_feats[pts] = contrib
        return
    # max: the first point (lowest index) that attains each feature's max.
    hits = feats[pts] == reduced_feats[vox]
    cand = torch.where(hits, pts[:, None], torch.full_like(hits, n,
                                                          dtype=torch.long))
    source = torch.full(reduced_feats.shape, n, dtype=torch.long,
                        device=feats.device)
    source.scatter_reduce_(0, vox[:, None].expand(-1, channels), cand,
                           reduce="amin")
    found = source < n
    rows = source[found]
    cols = torch.arange(channels, device=feats.device).expand_as(source)[found]
    grad_feats[rows, cols] = g[found]

"""Rank of each element within its group, in index order, without a Python loop.

CUDA kernels that fill per-group slots (hard voxelization's points per voxel,
RoI-aware pooling's points per box cell, DSVT's ``ingroup_inds``) give each
element the value of a per-group counter at the moment it arrives. Taking the
elements in index order is one valid arrival order, and the deterministic one.
"""
from __future__ import annotations

import torch


def rank_within_groups(group: torch.Tensor) -> torch.Tensor:
    """For a 1-D integer ``group``, the number of earlier elements (lower index) with
    the same group value, for each element; same shape and dtype as ``group``.

    Group values may be any integers (large or negative): no table indexed by
    them is built.
    """
    count = group.numel()
    if count == 0:
        return group.clone()
    order = torch.argsort(group, stable=True)
    ordered = group[order]
    positions = torch.arange(count, device=group.device)
    starts_group = torch.ones(count, dtype=torch.bool, device=group.device)
    starts_group[1:] = ordered[1:] != ordered[:-1]
    # Position where each element's run of equal values begins.
    run_start = torch.where(starts_group, positions, torch.zeros_like(positions)).cummax(0).values
    rank = torch.empty_like(positions)
    rank[order] = positions - run_start
    return rank.to(group.dtype)

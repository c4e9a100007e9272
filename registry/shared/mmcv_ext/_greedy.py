"""Greedy suppression over a precomputed overlap matrix.

Greedy NMS is inherently sequential: whether box ``i`` survives depends on
the decisions for every higher-scored box. The pairwise overlaps are computed
vectorized on the boxes' device; only this final O(kept x N) boolean pass
runs on the host (the same split as torchvision's and mmcv's CUDA NMS, which
also reduce their suppression bitmask on the CPU).
"""
from __future__ import annotations

from typing import List

import numpy as np
import torch


def greedy_keep(suppresses: torch.Tensor) -> torch.Tensor:
    """Indices kept by greedy NMS, in order.

    Args:
        suppresses: (N, N) bool; ``suppresses[i, j]`` says that box ``i``
            (if kept) removes box ``j``. Boxes are in priority order; only
            entries with ``j > i`` are consulted.

    Returns:
        int64 tensor on ``suppresses.device`` with the kept row indices,
        ascending.
    """
    n = suppresses.shape[0]
    device = suppresses.device
    if n == 0:
        return torch.empty(0, dtype=torch.long, device=device)
    # Only the upper triangle matters; cutting it keeps already-decided
    # boxes from being touched by later rows.
    rows = torch.triu(suppresses, diagonal=1).cpu().numpy()
    removed = np.zeros(n, dtype=bool)
    keep: List[int] = []
    for i in range(n):
        if removed[i]:
            continue
        keep.append(i)
        removed |= rows[i]
    return torch.tensor(keep, dtype=torch.long, device=device)


def greedy_groups(suppresses: torch.Tensor) -> List[List[int]]:
    """Like :func:`greedy_keep`, but also report whom each kept box removed.

    Returns one list per kept row: ``[kept, removed_1, removed_2, ...]`` with
    the removed rows in ascending (priority) order.
    """
    n = suppresses.shape[0]
    rows = torch.triu(suppresses, diagonal=1).cpu().numpy()
    removed = np.zeros(n, dtype=bool)
    groups: List[List[int]] = []
    for i in range(n):
        if removed[i]:
            continue
        newly = rows[i] & ~removed
        removed |= newly
        groups.append([i] + np.flatnonzero(newly).tolist())
    return groups

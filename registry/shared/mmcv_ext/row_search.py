"""Neighbour lookup of a submanifold convolution by rows of sorted keys.

With the sites' keys linearised row-major (last axis fastest) and sorted, the kernel
taps along the last axis of one row of the kernel reach consecutive keys ``q - w + 1 ..
q``: one binary search for the lowest of them finds them all, since each one present
lies among the next ``w`` sorted keys. So a 3x3x3 kernel takes 9 searches per site
instead of 27 lookups (5 with the submanifold symmetry), and the searches run on an
array of a few hundred KB that stays in cache, whatever the grid's size: SECOND's full
KITTI grid (185M sites) is too large for a direct-address table.
"""
from __future__ import annotations

from typing import Sequence

import torch


def row_neighbours(keys: torch.Tensor, highest_shifts: Sequence[int], width: int
                   ) -> torch.Tensor:
    """(len(highest_shifts) * width, N) int64: entry ``(c * width + j, i)`` is the row of
    the site whose key is ``keys[i] + highest_shifts[c] - j``, or -1 when there is none.

    ``keys`` are distinct and non-negative, in input order."""
    count = keys.numel()
    sorted_keys, order = torch.sort(keys)
    in_order = torch.equal(order, torch.arange(count, device=keys.device))
    # sentinels past the end: -1 equals no key
    padded_keys = torch.cat([sorted_keys, sorted_keys.new_full((width,), -1)])
    padded_order = torch.cat([order, order.new_full((width,), -1)])
    # every kernel row at once: (rows, N) lowest keys reached, and where they would sit
    lowest_shifts = torch.tensor([int(shift) - (width - 1) for shift in highest_shifts],
                                 dtype=keys.dtype, device=keys.device)
    lowest = keys[None, :] + lowest_shifts[:, None]
    start = torch.searchsorted(sorted_keys, lowest.view(-1))
    candidates = [padded_keys.index_select(0, start + step).view_as(lowest) - lowest
                  for step in range(width)]
    rows = [start + step if in_order else padded_order.index_select(0, start + step)
            for step in range(width)]
    found = torch.empty((len(highest_shifts), width, count), dtype=torch.long,
                        device=keys.device)
    missing = torch.full((1,), -1, dtype=torch.long, device=keys.device)
    for above in range(width):
        # key lowest + above is among the first above + 1 candidates, if present; it is
        # reached by tap width - 1 - above of the kernel row
        result = missing
        for step in range(above, -1, -1):
            result = torch.where(candidates[step] == above, rows[step].view_as(lowest),
                                 result)
        found[:, width - 1 - above] = result
    return found.view(-1, count)

"""``roipoint_pool3d_forward`` (mmcv ships CUDA only): for each 3D box, the first
``S`` points inside it (in index order; the in-box rule of
:func:`points_in_boxes.points_in_boxes_mask`), repeated cyclically when fewer are
inside, as (xyz, features) rows; boxes with no point get ``pooled_empty_flag = 1``
and zero features. ``S`` is the caller's ``pooled_features.shape[2]``.
"""
from __future__ import annotations

import torch

from .points_in_boxes import points_in_boxes_mask


def roipoint_pool3d_forward(points: torch.Tensor, boxes3d: torch.Tensor,
                            point_features: torch.Tensor, pooled_features: torch.Tensor,
                            pooled_empty_flag: torch.Tensor) -> None:
    """Fill (B, M, S, 3 + C) ``pooled_features`` and (B, M) ``pooled_empty_flag``."""
    bsz, n = points.shape[:2]
    boxes, sampled = boxes3d.shape[1], pooled_features.shape[2]
    inside = points_in_boxes_mask(points, boxes3d).transpose(1, 2)  # (B, M, N)
    rank = inside.cumsum(-1)  # 1-based rank of each inside point
    count = rank[..., -1] if n else inside.new_zeros(bsz, boxes, dtype=torch.long)
    first = torch.zeros(bsz, boxes, sampled, dtype=torch.long, device=points.device)
    b, m, k = torch.nonzero(inside & (rank <= sampled), as_tuple=True)
    first[b, m, rank[b, m, k] - 1] = k
    taken = count.clamp(max=sampled).clamp(min=1)
    slot = torch.arange(sampled, device=points.device)
    index = torch.gather(first, 2, slot % taken[..., None])  # cyclic repeats
    rows = torch.cat([points, point_features.to(points.dtype)], -1)  # (B, N, 3 + C)
    batch = torch.arange(bsz, device=points.device)[:, None, None]
    pooled = rows[batch, index]
    empty = count == 0
    pooled_features.copy_(pooled.masked_fill(empty[..., None, None], 0))
    pooled_empty_flag.copy_(empty.to(pooled_empty_flag.dtype))

"""``diff_iou_rotated_sort_vertices_forward`` (mmcv ships CUDA only).

Input: (B, N, 24, 2) candidate vertices of each box-pair intersection polygon
(8 box corners then 16 edge intersections, already centred on their mean), a
validity mask and the number of valid vertices. Output (B, N, 9) int64: the
valid vertices' indices in counter-clockwise order starting from the smallest
angle in [0, 2*pi) measured from +x, the first repeated after the last, the
rest padded with the first invalid intersection slot (index >= 8), whose
vertex is zero so that the shoelace area ignores it. Polygons with fewer than
three vertices are all padding. Two identical boxes (8 valid, the first four
sorted all intersections) keep only those four, as mmcv's kernel does.
"""
from __future__ import annotations

import math

import torch

MAX_VERTICES = 9
INTERSECTION_OFFSET = 8


def diff_iou_rotated_sort_vertices_forward(vertices: torch.Tensor,
                                           mask: torch.Tensor,
                                           num_valid: torch.Tensor) -> torch.Tensor:
    """Return the (B, N, 9) int64 sorted-vertex indices described above."""
    slots = vertices.shape[2]
    x, y = vertices[..., 0].float(), vertices[..., 1].float()
    angle = torch.atan2(y, x)
    angle = torch.where(angle < 0, angle + 2 * math.pi, angle)
    mask = mask.bool()
    key = torch.where(mask, angle, torch.full_like(angle, float('inf')))
    order = torch.sort(key, dim=-1, stable=True).indices  # valid ones first
    invalid_intersections = ~mask[..., INTERSECTION_OFFSET:]
    pad = INTERSECTION_OFFSET + invalid_intersections.float().argmax(-1)  # (B, N)
    count = num_valid.long()
    position = torch.arange(MAX_VERTICES, device=vertices.device)
    head = order[..., :MAX_VERTICES] if slots >= MAX_VERTICES else torch.cat(
        [order, order[..., :1].expand(*order.shape[:-1], MAX_VERTICES - slots)], -1)
    result = torch.where(position < count[..., None], head, pad[..., None])
    result = torch.where(position == count[..., None], order[..., :1], result)
    # identical boxes: eight valid vertices whose first four are intersections
    same = (count == 8) & (result[..., :4] >= INTERSECTION_OFFSET).all(-1)
    trimmed = torch.where(position == 4, order[..., :1], pad[..., None])
    result = torch.where(same[..., None] & (position >= 4), trimmed, result)
    result = torch.where((count < 3)[..., None], pad[..., None], result)
    return result

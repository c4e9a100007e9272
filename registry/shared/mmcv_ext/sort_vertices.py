"""``diff_iou_rotated_sort_vertices_forward`` (mmcv ships CUDA only).

Input: (B, N, 24, 2) candidate vertices of each box-pair intersection polygon
(8 box corners then 16 edge intersections, already centred on their mean), a
validity mask and the number of valid vertices. Output (B, N, 9) int64: the
valid vertices' indices in counter-clockwise order starting from the smallest
angle in [0, 2*pi) measured from +x, the first repeated after the last, the
rest padded with the first invalid intersection slot (index >= 8), whose
vertex is zero so that the shoelace area ignores it. Polygons with fewer than
three vertices are all padding. Two identical boxes (8 valid vertices whose
first four picks reappear among the last four) keep only those four, as
mmcv's kernel does: it takes each vertex strictly after the previous one (equal
vertices once), and index 0 once none is left.
"""
from __future__ import annotations

import math

import torch

MAX_VERTICES = 9
EPSILON = 1e-8
INTERSECTION_OFFSET = 8


def diff_iou_rotated_sort_vertices_forward(vertices: torch.Tensor,
                                           mask: torch.Tensor,
                                           num_valid: torch.Tensor) -> torch.Tensor:
    """Return the (B, N, 9) int64 sorted-vertex indices described above."""
    x, y = vertices[..., 0].float(), vertices[..., 1].float()
    angle = torch.atan2(y, x)
    angle = torch.where(angle < 0, angle + 2 * math.pi, angle)
    mask = mask.bool()
    order = torch.sort(torch.where(mask, angle, torch.full_like(angle, float('inf'))),
                       dim=-1, stable=True).indices  # valid ones first, by angle
    sx, sy = torch.gather(x, -1, order), torch.gather(y, -1, order)
    valid = torch.gather(mask, -1, order)
    # the kernel takes each next vertex strictly after the previous one, so a vertex
    # equal to its predecessor (a shared corner, found twice) is taken once
    same = ((sx[..., 1:] - sx[..., :-1]).abs() < EPSILON) & \
        ((sy[..., 1:] - sy[..., :-1]).abs() < EPSILON) & valid[..., :-1]
    unique = valid & torch.cat([torch.ones_like(same[..., :1]), ~same], -1)
    slots = vertices.shape[2]
    position = torch.arange(slots, device=vertices.device)
    compact = torch.sort(torch.where(unique, position, position + slots), dim=-1).indices
    distinct = torch.gather(order, -1, compact)[..., :MAX_VERTICES]
    if distinct.shape[-1] < MAX_VERTICES:
        distinct = torch.cat([distinct, distinct.new_zeros(
            *distinct.shape[:-1], MAX_VERTICES - distinct.shape[-1])], -1)
    taken = unique.sum(-1)
    slot = torch.arange(MAX_VERTICES, device=vertices.device)
    # once no vertex is left after the previous one, the kernel takes index 0
    picks = torch.where(slot < taken[..., None], distinct, torch.zeros_like(distinct))
    pad = INTERSECTION_OFFSET + (~mask[..., INTERSECTION_OFFSET:]).float().argmax(-1)
    count = num_valid.long()
    result = torch.where(slot < count[..., None], picks, pad[..., None])
    result = torch.where(slot == count[..., None], picks[..., :1], result)
    # identical boxes: the last four picks repeat the first four
    repeats = (result[..., :4, None] == result[..., None, 4:8]).sum((-1, -2))
    same_box = (count == 8) & (repeats == 4)
    trimmed = torch.where(slot == 4, picks[..., :1], pad[..., None])
    result = torch.where(same_box[..., None] & (slot >= 4), trimmed, result)
    return torch.where((count < 3)[..., None], pad[..., None], result)

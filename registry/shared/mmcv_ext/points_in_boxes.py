"""Point-in-3D-box kernels: ``points_in_boxes_part_forward``,
``points_in_boxes_all_forward`` and ``points_in_boxes_cpu_forward``.

Boxes are (x, y, z, x_size, y_size, z_size, rz) with (x, y, z) the bottom
centre (LiDAR convention). A point is inside when
``|z - (bz + z_size/2)| <= z_size/2`` and, after rotating its offset by
``-rz``, ``|local_x| < x_size/2`` and ``|local_y| < y_size/2`` (strict), as in
mmcv's kernels. Points are processed in chunks to bound the (points x boxes)
mask.
"""
from __future__ import annotations

import torch

#: Upper bound on elements of one (batch, points, boxes) mask chunk.
CHUNK_ELEMENTS = 1 << 24


def points_in_boxes_mask(points: torch.Tensor,
                         boxes: torch.Tensor) -> torch.Tensor:
    """(B, M, 3) points, (B, T, 7) boxes -> (B, M, T) bool inside-mask."""
    b, m, _ = points.shape
    t = boxes.shape[1]
    boxes = boxes.to(points.dtype)
    cx, cy, cz = boxes[..., 0], boxes[..., 1], boxes[..., 2]
    dx, dy, dz, rz = boxes[..., 3], boxes[..., 4], boxes[..., 5], boxes[..., 6]
    cz = cz + dz / 2  # bottom centre -> centre
    cos, sin = torch.cos(-rz)[:, None], torch.sin(-rz)[:, None]
    step = max(1, CHUNK_ELEMENTS // max(b * t, 1))
    chunks = []
    for start in range(0, m, step):
        p = points[:, start:start + step]
        px, py, pz = (p[..., k, None] for k in range(3))
        in_z = (pz - cz[:, None]).abs() <= dz[:, None] / 2
        sx, sy = px - cx[:, None], py - cy[:, None]
        lx = sx * cos - sy * sin
        ly = sx * sin + sy * cos
        chunks.append(in_z & (lx.abs() < dx[:, None] / 2) &
                      (ly.abs() < dy[:, None] / 2))
    if not chunks:
        return points.new_zeros((b, m, t), dtype=torch.bool)
    return torch.cat(chunks, dim=1)


def points_in_boxes_part_forward(boxes_tensor: torch.Tensor,
                                 pts_tensor: torch.Tensor,
                                 box_idx_of_points_tensor: torch.Tensor
                                 ) -> None:
    """Ext ``points_in_boxes_part_forward``: (B, M) index of the first box
    containing each point; points in no box keep the caller's -1."""
    mask = points_in_boxes_mask(pts_tensor, boxes_tensor)
    if mask.shape[-1] == 0:
        return
    inside = mask.any(-1)
    first = mask.to(torch.uint8).argmax(-1)  # first True along boxes
    box_idx_of_points_tensor.copy_(torch.where(
        inside, first, box_idx_of_points_tensor.long()).to(
            box_idx_of_points_tensor.dtype))


def points_in_boxes_all_forward(boxes_tensor: torch.Tensor,
                                pts_tensor: torch.Tensor,
                                box_idx_of_points_tensor: torch.Tensor
                                ) -> None:
    """Ext ``points_in_boxes_all_forward``: sets (B, M, T) to 1 where the
    point is inside the box (other entries are left as they are, 0)."""
    mask = points_in_boxes_mask(pts_tensor, boxes_tensor)
    box_idx_of_points_tensor.masked_fill_(mask, 1)


def points_in_boxes_cpu_forward(boxes_tensor: torch.Tensor,
                                pts_tensor: torch.Tensor,
                                pts_indices_tensor: torch.Tensor) -> None:
    """Ext ``points_in_boxes_cpu_forward``: (T, M) 0/1 inside-flags for one
    sample's (T, 7) boxes and (M, 3) points."""
    mask = points_in_boxes_mask(pts_tensor[None], boxes_tensor[None])[0]
    pts_indices_tensor.copy_(mask.t().to(pts_indices_tensor.dtype))

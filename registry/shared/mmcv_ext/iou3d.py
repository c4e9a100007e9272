"""3D-box kernels of ``mmcv.ops.iou3d``: ``iou3d_boxes_overlap_bev_forward``,
``iou3d_nms3d_forward`` and ``iou3d_nms3d_normal_forward``.

Boxes are (x, y, z, dx, dy, dz, heading); the bird's-eye-view footprint is
the rotated rectangle (x, y, dx, dy, heading), intersected exactly with the
shared polygon routine of :mod:`.rotated`. NMS uses mmcv's CUDA conventions:
IoU = overlap / max(area_a + area_b - overlap, 1e-8) and suppression when it
is strictly greater than the threshold.
"""
from __future__ import annotations

import torch

from ._greedy import greedy_keep
from .rotated import greedy_rotated_keep, pairwise_intersection_area

_EPS = 1e-8


def _bev(boxes: torch.Tensor) -> torch.Tensor:
    return boxes[:, [0, 1, 3, 4, 6]]


def iou3d_boxes_overlap_bev_forward(boxes_a: torch.Tensor,
                                    boxes_b: torch.Tensor,
                                    ans_iou: torch.Tensor) -> None:
    """Ext ``iou3d_boxes_overlap_bev_forward``: fills ``ans_iou`` (M, N)
    with BEV intersection *areas* (not IoUs, despite the name)."""
    ans_iou.copy_(pairwise_intersection_area(_bev(boxes_a), _bev(boxes_b)))


def _write_keep(keep_idx: torch.Tensor, keep: torch.Tensor,
                num_out: torch.Tensor) -> None:
    keep[:keep_idx.numel()] = keep_idx.to(device=keep.device,
                                          dtype=keep.dtype)
    num_out.fill_(keep_idx.numel())


def _bev_iou_of(inter: torch.Tensor, area_kept: torch.Tensor,
                area_others: torch.Tensor) -> torch.Tensor:
    return inter / (area_kept + area_others - inter).clamp(min=_EPS)


def iou3d_nms3d_forward(boxes: torch.Tensor, keep: torch.Tensor,
                        num_out: torch.Tensor,
                        nms_overlap_thresh: float) -> None:
    """Ext ``iou3d_nms3d_forward``: greedy NMS by rotated BEV IoU.

    ``boxes`` are already sorted by score; the kept row indices go into
    ``keep[:num_out]`` and their count into the 0-d ``num_out``.
    """
    _write_keep(greedy_rotated_keep(_bev(boxes), float(nms_overlap_thresh),
                                    _bev_iou_of), keep, num_out)


def iou3d_nms3d_normal_forward(boxes: torch.Tensor, keep: torch.Tensor,
                               num_out: torch.Tensor,
                               nms_overlap_thresh: float) -> None:
    """Ext ``iou3d_nms3d_normal_forward``: like :func:`iou3d_nms3d_forward`
    with the heading ignored (axis-aligned BEV IoU)."""
    x, y, dx, dy = boxes[:, 0], boxes[:, 1], boxes[:, 3], boxes[:, 4]
    x1, x2, y1, y2 = x - dx / 2, x + dx / 2, y - dy / 2, y + dy / 2
    w = (torch.minimum(x2[:, None], x2[None]) -
         torch.maximum(x1[:, None], x1[None])).clamp(min=0)
    h = (torch.minimum(y2[:, None], y2[None]) -
         torch.maximum(y1[:, None], y1[None])).clamp(min=0)
    inter = w * h
    area = dx * dy
    iou = inter / (area[:, None] + area[None] - inter).clamp(min=_EPS)
    _write_keep(greedy_keep(iou > nms_overlap_thresh), keep, num_out)

"""Rotated-box overlap kernels: ``box_iou_rotated`` and ``nms_rotated``.

The intersection of two rotated rectangles is a convex polygon whose vertices
are (a) the crossings of their edges and (b) the corners of each rectangle
that lie inside the other; that is how mmcv's ``box_iou_rotated_utils.hpp``
clips them. Here all candidate vertices of many box pairs are computed at
once as a fixed (pairs, 24) buffer with a validity mask, ordered by angle
around their centroid, and measured with the shoelace formula. Invalid slots
are replaced by the first ordered vertex so they add zero area; duplicate
vertices likewise add zero area.

Boxes are (x_ctr, y_ctr, w, h, angle) with the angle in radians, corners
rotated counter-clockwise by ``angle`` in the (x, y) frame (mmcv's
``clockwise=True`` convention is handled by its Python wrapper flipping the
angle sign before calling the kernel).
"""
from __future__ import annotations

import torch

from ._greedy import greedy_keep

#: Pairs handled per vectorized chunk; bounds peak memory (~1 KiB per pair).
PAIR_CHUNK = 1 << 16


def box_corners(boxes: torch.Tensor) -> torch.Tensor:
    """(P, 5) rotated boxes -> (P, 4, 2) corners in mmcv's vertex order."""
    x, y, w, h, a = boxes.unbind(-1)
    cos_half = torch.cos(a) * 0.5
    sin_half = torch.sin(a) * 0.5
    p0x = x - sin_half * h - cos_half * w
    p0y = y + cos_half * h - sin_half * w
    p1x = x + sin_half * h - cos_half * w
    p1y = y - cos_half * h - sin_half * w
    xs = torch.stack([p0x, p1x, 2 * x - p0x, 2 * x - p1x], dim=-1)
    ys = torch.stack([p0y, p1y, 2 * y - p0y, 2 * y - p1y], dim=-1)
    return torch.stack([xs, ys], dim=-1)


def _cross(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sum(-1)


def _corners_inside(pts: torch.Tensor, rect: torch.Tensor) -> torch.Tensor:
    """(P, 4) mask: which of ``pts`` (P, 4, 2) lie in rectangles ``rect``.

    A point is inside rectangle ABCD iff its projections on AB and AD fall
    within those edges (boundary included), as in mmcv.
    """
    ab = (rect[:, 1] - rect[:, 0])[:, None]
    da = (rect[:, 0] - rect[:, 3])[:, None]
    ap = pts - rect[:, None, 0]
    ap_ab = _dot(ap, ab)
    ap_ad = -_dot(ap, da)
    return ((ap_ab >= 0) & (ap_ad >= 0) & (ap_ab <= _dot(ab, ab)) &
            (ap_ad <= _dot(da, da)))


def _intersection_area_chunk(b1: torch.Tensor,
                             b2: torch.Tensor) -> torch.Tensor:
    pts1, pts2 = box_corners(b1), box_corners(b2)
    vec1 = pts1.roll(-1, dims=1) - pts1  # edge i: pts1[i] -> pts1[i+1]
    vec2 = pts2.roll(-1, dims=1) - pts2
    # Every edge of box 1 (dim 1) against every edge of box 2 (dim 2).
    v1 = vec1[:, :, None]
    v2 = vec2[:, None, :]
    det = _cross(v2, v1)
    vec12 = pts2[:, None, :] - pts1[:, :, None]
    safe_det = torch.where(det.abs() > 1e-14, det, torch.ones_like(det))
    t1 = _cross(v2, vec12) / safe_det
    t2 = _cross(v1, vec12) / safe_det
    edge_ok = ((det.abs() > 1e-14) & (t1 >= 0) & (t1 <= 1) & (t2 >= 0) &
               (t2 <= 1))
    edge_pts = pts1[:, :, None] + v1 * t1[..., None]
    points = torch.cat([edge_pts.flatten(1, 2), pts1, pts2], dim=1)
    valid = torch.cat([edge_ok.flatten(1), _corners_inside(pts1, pts2),
                       _corners_inside(pts2, pts1)], dim=1)
    count = valid.sum(1)
    weights = valid.to(points.dtype)
    centroid = (points * weights[..., None]).sum(1) / count.clamp(
        min=1)[:, None].to(points.dtype)
    rel = points - centroid[:, None]
    angle = torch.atan2(rel[..., 1], rel[..., 0])
    # Invalid slots sort after every real angle (all real angles <= pi).
    angle = torch.where(valid, angle, torch.full_like(angle, 10.0))
    order = angle.argsort(dim=1)
    ordered = rel.gather(1, order[..., None].expand(-1, -1, 2))
    ordered_valid = valid.gather(1, order)
    first = ordered[:, :1].expand_as(ordered)
    ordered = torch.where(ordered_valid[..., None], ordered, first)
    area = 0.5 * _cross(ordered, ordered.roll(-1, dims=1)).sum(1).abs()
    # Fewer than three vertices enclose nothing (mmcv returns 0 here too).
    return torch.where(count > 2, area, torch.zeros_like(area))


def rotated_intersection_area(boxes1: torch.Tensor,
                              boxes2: torch.Tensor) -> torch.Tensor:
    """Intersection areas of aligned pairs of rotated boxes.

    Args:
        boxes1, boxes2: (P, >=5) tensors; columns 0-4 are
            (x_ctr, y_ctr, w, h, angle).

    Returns:
        (P,) areas, in the dtype of ``boxes1``.
    """
    b1 = boxes1[:, :5]
    b2 = boxes2[:, :5].to(b1.dtype)
    if b1.shape[0] == 0:
        return b1.new_zeros(0)
    # Shift each pair to its common midpoint for precision, as mmcv does.
    shift = (b1[:, :2] + b2[:, :2]) / 2
    b1 = torch.cat([b1[:, :2] - shift, b1[:, 2:]], dim=1)
    b2 = torch.cat([b2[:, :2] - shift, b2[:, 2:]], dim=1)
    chunks = [
        _intersection_area_chunk(b1[i:i + PAIR_CHUNK], b2[i:i + PAIR_CHUNK])
        for i in range(0, b1.shape[0], PAIR_CHUNK)
    ]
    return torch.cat(chunks)


def candidate_pairs(boxes1: torch.Tensor, boxes2: torch.Tensor):
    """Index pairs whose circumscribed circles meet (the only ones that can
    overlap); everything else has zero intersection and is skipped."""
    c1, c2 = boxes1[:, :2], boxes2[:, :2]
    r1 = 0.5 * torch.hypot(boxes1[:, 2], boxes1[:, 3])
    r2 = 0.5 * torch.hypot(boxes2[:, 2], boxes2[:, 3])
    dist = torch.cdist(c1.double(), c2.double())
    # Small slack so rounding never drops a touching pair.
    near = dist <= (r1[:, None] + r2[None]).double() * (1 + 1e-6) + 1e-6
    return near.nonzero(as_tuple=True)


def pairwise_intersection_area(boxes1: torch.Tensor,
                               boxes2: torch.Tensor) -> torch.Tensor:
    """(N, M) intersection areas of every rotated box pair."""
    out = boxes1.new_zeros((boxes1.shape[0], boxes2.shape[0]))
    if out.numel() == 0:
        return out
    i, j = candidate_pairs(boxes1, boxes2)
    if i.numel():
        out[i, j] = rotated_intersection_area(boxes1[i], boxes2[j])
    return out


def _iou_from_inter(inter: torch.Tensor, area1: torch.Tensor,
                    area2: torch.Tensor, mode_flag: int) -> torch.Tensor:
    # mmcv returns 0 when either box is degenerate.
    degenerate = (area1 < 1e-14) | (area2 < 1e-14)
    base = area1 + area2 - inter if mode_flag == 0 else area1.expand_as(inter)
    base = torch.where(degenerate, torch.ones_like(base), base)
    return torch.where(degenerate, torch.zeros_like(inter), inter / base)


def box_iou_rotated_matrix(boxes1: torch.Tensor, boxes2: torch.Tensor,
                           mode_flag: int = 0,
                           aligned: bool = False) -> torch.Tensor:
    """IoU (``mode_flag`` 0) or IoF (1) of rotated boxes.

    Returns (N,) for ``aligned`` pairs, else (N, M).
    """
    area1 = boxes1[:, 2] * boxes1[:, 3]
    area2 = boxes2[:, 2] * boxes2[:, 3]
    if aligned:
        inter = rotated_intersection_area(boxes1, boxes2)
        return _iou_from_inter(inter, area1, area2.to(area1.dtype), mode_flag)
    inter = pairwise_intersection_area(boxes1, boxes2)
    return _iou_from_inter(inter, area1[:, None],
                           area2.to(area1.dtype)[None], mode_flag)


def box_iou_rotated(boxes1: torch.Tensor, boxes2: torch.Tensor,
                    ious: torch.Tensor, mode_flag: int = 0,
                    aligned: bool = False) -> None:
    """Ext ``box_iou_rotated``: fills ``ious`` (N,) if aligned else (N*M,)."""
    result = box_iou_rotated_matrix(boxes1, boxes2, int(mode_flag),
                                    bool(aligned))
    ious.copy_(result.reshape(ious.shape))


def nms_rotated(dets: torch.Tensor, scores: torch.Tensor, order: torch.Tensor,
                dets_sorted: torch.Tensor, labels: torch.Tensor,
                iou_threshold: float, multi_label: bool) -> torch.Tensor:
    """Ext ``nms_rotated``: indices into ``dets`` of kept boxes (int64).

    ``order`` (scores descending) and ``dets_sorted`` come from the caller.
    A box is dropped when its rotated IoU with a kept higher-scored box is
    greater than ``iou_threshold`` (the CUDA kernel's strict comparison).
    Like both mmcv kernels, the label column / ``labels`` (``multi_label``)
    does not restrict suppression to one class: callers such as
    ``batched_nms`` separate classes by offsetting the boxes.
    """
    if dets.shape[0] == 0:
        return order.new_empty(0, dtype=torch.long)
    boxes = dets_sorted[:, :5]
    iou = box_iou_rotated_matrix(boxes, boxes, 0, False)
    return order[greedy_keep(iou > iou_threshold)]

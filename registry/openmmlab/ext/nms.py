"""Axis-aligned NMS kernels: ``nms``, ``softnms`` and ``nms_match``.

Pairwise IoUs are computed as one vectorized matrix on the boxes' device;
the greedy pass that must be sequential is in :mod:`._greedy`. Conventions
(``offset`` added to widths/heights, strict ``>`` for ``nms`` but ``>=`` for
``softnms`` and ``nms_match``) follow mmcv's CPU kernels.
"""
from __future__ import annotations

from typing import List

import torch

from ._greedy import greedy_groups, greedy_keep


def pairwise_iou(boxes: torch.Tensor, offset: float = 0.0) -> torch.Tensor:
    """(N, N) IoU matrix of (x1, y1, x2, y2) boxes; ``offset`` as in mmcv."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    areas = (x2 - x1 + offset) * (y2 - y1 + offset)
    w = (torch.minimum(x2[:, None], x2[None]) -
         torch.maximum(x1[:, None], x1[None]) + offset).clamp(min=0)
    h = (torch.minimum(y2[:, None], y2[None]) -
         torch.maximum(y1[:, None], y1[None]) + offset).clamp(min=0)
    inter = w * h
    return inter / (areas[:, None] + areas[None] - inter)


def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float,
        offset: int = 0) -> torch.Tensor:
    """Ext ``nms``: indices of kept boxes, highest score first (int64).

    A box is suppressed when its IoU with a kept, higher-scored box is
    strictly greater than ``iou_threshold``.
    """
    if boxes.numel() == 0:
        return boxes.new_empty(0, dtype=torch.long)
    # Same call as mmcv so that ties in score are ordered identically.
    order = scores.sort(0, descending=True)[1]
    iou = pairwise_iou(boxes[order], float(offset))
    return order[greedy_keep(iou > iou_threshold)]


def _compact_survivors(survive: torch.Tensor) -> torch.Tensor:
    """Order in which mmcv's soft-NMS leaves the surviving candidates.

    mmcv drops a box by overwriting it with the current last box, so holes
    among the first ``k`` slots (``k`` = number of survivors) are refilled
    with the survivors found after slot ``k``, last one first. Reproducing
    this matters only for the choice among equal scores later on.
    """
    k = int(survive.sum())
    positions = torch.arange(survive.numel(), device=survive.device)
    head = positions[:k]
    result = head.clone()
    holes = head[~survive[:k]]
    fillers = positions[k:][survive[k:]].flip(0)
    result[holes] = fillers
    return result


def softnms(boxes: torch.Tensor, scores: torch.Tensor, dets: torch.Tensor,
            iou_threshold: float, sigma: float, min_score: float, method: int,
            offset: int) -> torch.Tensor:
    """Ext ``softnms``: decay overlapping scores instead of dropping boxes.

    ``method``: 0 naive (zero the score when IoU >= threshold), 1 linear
    (multiply by ``1 - IoU`` when IoU >= threshold), 2 gaussian (multiply by
    ``exp(-IoU^2 / sigma)``). Boxes whose score falls below ``min_score`` are
    dropped. Writes the selected boxes with their decayed scores into the
    first rows of ``dets`` (N, 5) and returns their original indices (int64)
    in selection order.
    """
    n = boxes.shape[0]
    if boxes.numel() == 0:
        return boxes.new_empty(0, dtype=torch.long)
    x1, y1, x2, y2 = boxes[:, :4].unbind(-1)
    cols = torch.stack([x1, y1, x2, y2], dim=1).clone()
    areas = (cols[:, 2] - cols[:, 0] + offset) * (cols[:, 3] - cols[:, 1] +
                                                   offset)
    sc = scores.clone().to(boxes.dtype)
    inds = torch.arange(n, device=boxes.device)
    selected_rows = []
    selected_inds = []
    # Each round selects the best remaining box and rescores the rest; the
    # rounds are inherently sequential, the work inside one is vectorized.
    while sc.numel() > 0:
        best = int(torch.argmax(sc))  # first maximum, as mmcv's strict '<'
        if best != 0:
            # mmcv swaps the best box into the head slot.
            perm = torch.arange(sc.numel(), device=sc.device)
            perm[0], perm[best] = best, 0
            cols, areas, sc, inds = cols[perm], areas[perm], sc[perm], inds[perm]
        head = cols[0]
        selected_rows.append(torch.cat([head, sc[:1]]))
        selected_inds.append(inds[:1])
        rest_cols, rest_areas = cols[1:], areas[1:]
        w = (torch.minimum(head[2], rest_cols[:, 2]) -
             torch.maximum(head[0], rest_cols[:, 0]) + offset).clamp(min=0)
        h = (torch.minimum(head[3], rest_cols[:, 3]) -
             torch.maximum(head[1], rest_cols[:, 1]) + offset).clamp(min=0)
        inter = w * h
        ovr = inter / (areas[0] + rest_areas - inter)
        if method == 0:
            weight = torch.where(ovr >= iou_threshold, torch.zeros_like(ovr),
                                 torch.ones_like(ovr))
        elif method == 1:
            weight = torch.where(ovr >= iou_threshold, 1 - ovr,
                                 torch.ones_like(ovr))
        elif method == 2:
            weight = torch.exp(-(ovr * ovr) / sigma)
        else:
            weight = torch.ones_like(ovr)
        rest_sc = sc[1:] * weight
        keep_order = _compact_survivors(rest_sc >= min_score)
        cols = rest_cols[keep_order]
        areas = rest_areas[keep_order]
        sc = rest_sc[keep_order]
        inds = inds[1:][keep_order]
    result = torch.stack(selected_rows)
    dets[:result.shape[0]] = result.to(dets.dtype)
    return torch.cat(selected_inds)


def nms_match(dets: torch.Tensor, iou_threshold: float) -> List[List[int]]:
    """Ext ``nms_match``: greedy NMS groups of (N, 5) ``[x1, y1, x2, y2, s]``.

    Returns one list per kept box: the kept index followed by the indices it
    suppressed (IoU >= threshold), all in descending-score order.
    """
    if dets.shape[0] == 0:
        return []
    order = dets[:, 4].sort(0, descending=True)[1]
    iou = pairwise_iou(dets[order, :4], 0.0)
    order_list = order.tolist()
    return [[order_list[i] for i in group]
            for group in greedy_groups(iou >= iou_threshold)]

"""Axis-aligned NMS kernels: ``nms``, ``softnms`` and ``nms_match``.

Pairwise IoUs are computed as one vectorized matrix on the boxes' device;
the greedy pass that must be sequential is in :mod:`._greedy`. Conventions
(``offset`` added to widths/heights, strict ``>`` for ``nms`` but ``>=`` for
``softnms`` and ``nms_match``) follow mmcv's CPU kernels.
"""
from __future__ import annotations

from typing import List

import numpy as np
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


def _compact_survivors(survive: np.ndarray) -> np.ndarray:
    """Order in which mmcv's soft-NMS leaves the surviving candidates.

    mmcv drops a box by overwriting it with the current last box, so holes
    among the first ``k`` slots (``k`` = number of survivors) are refilled
    with the survivors found after slot ``k``, last one first. Reproducing
    this matters only for the choice among equal scores later on.
    """
    k = int(survive.sum())
    result = np.arange(k)
    holes = np.flatnonzero(~survive[:k])
    result[holes] = (k + np.flatnonzero(survive[k:]))[::-1]
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

    mmcv only runs soft-NMS on the CPU (its wrapper moves tensors there), and
    its rounds are sequential, so each round is a handful of vectorized NumPy
    operations on the remaining boxes: on small arrays they cost far less
    dispatch overhead than tensor operations.
    """
    if boxes.numel() == 0:
        return boxes.new_empty(0, dtype=torch.long)
    cols = boxes[:, :4].detach().cpu().numpy().copy()
    dtype = cols.dtype.type
    off = dtype(offset)
    areas = (cols[:, 2] - cols[:, 0] + off) * (cols[:, 3] - cols[:, 1] + off)
    sc = scores.detach().cpu().numpy().astype(cols.dtype)
    inds = np.arange(cols.shape[0])
    thr, sig = dtype(iou_threshold), dtype(sigma)
    rows, picked = [], []
    # Each round selects the best remaining box and rescores the rest; the
    # rounds are inherently sequential, the work inside one is vectorized.
    while sc.size:
        best = int(np.argmax(sc))  # first maximum, as mmcv's strict '<'
        if best:
            # mmcv swaps the best box into the head slot.
            for arr in (cols, areas, sc, inds):
                arr[[0, best]] = arr[[best, 0]]
        head = cols[0]
        rows.append(np.append(head, sc[0]))
        picked.append(inds[0])
        rest = cols[1:]
        w = np.maximum(np.minimum(head[2], rest[:, 2]) -
                       np.maximum(head[0], rest[:, 0]) + off, 0)
        h = np.maximum(np.minimum(head[3], rest[:, 3]) -
                       np.maximum(head[1], rest[:, 1]) + off, 0)
        inter = w * h
        ovr = inter / (areas[0] + areas[1:] - inter)
        if method == 0:
            weight = np.where(ovr >= thr, dtype(0), dtype(1))
        elif method == 1:
            weight = np.where(ovr >= thr, 1 - ovr, dtype(1))
        elif method == 2:
            weight = np.exp(-(ovr * ovr) / sig)
        else:
            weight = np.ones_like(ovr)
        rest_sc = (sc[1:] * weight).astype(cols.dtype)
        keep = _compact_survivors(rest_sc >= min_score)
        cols, areas = rest[keep], areas[1:][keep]
        sc, inds = rest_sc[keep], inds[1:][keep]
    result = torch.from_numpy(np.stack(rows))
    dets[:result.shape[0]] = result.to(dets.dtype)
    return torch.tensor(picked, dtype=torch.long, device=boxes.device)


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

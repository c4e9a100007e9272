"""Rotated-box overlap kernels: ``box_iou_rotated`` and ``nms_rotated``.

The intersection of two rotated rectangles is measured in the frame of the
second one, where it is the axis-aligned rectangle ``|x| <= w/2, |y| <= h/2``
(the intersection of two slabs). The first box's outline is clamped onto one
slab, then the other: clamping a closed outline's x into ``[-w/2, w/2]``
moves every point outside the slab onto its nearest line, along x, without
crossing the open slab, so the winding number of every point inside the slab
is unchanged and the clamped outline encloses exactly the part of the
original inside the slab (the parts pushed onto a line enclose nothing). The
clamped image of a straight edge is straight between the points where the
edge crosses the two lines, so each edge becomes its start and those two
crossings: 4 corners, then 12 points, then 36, measured by the shoelace
formula. This is exact like mmcv's ``box_iou_rotated_utils.hpp`` (crossing
points and contained corners, sorted by angle), without a sort or a
per-pair vertex count, in a fixed number of vectorized operations.

Boxes are (x_ctr, y_ctr, w, h, angle) with the angle in radians, corners
rotated counter-clockwise by ``angle`` in the (x, y) frame (mmcv's
``clockwise=True`` convention is handled by its Python wrapper flipping the
angle sign before calling the kernel).
"""
from __future__ import annotations

from typing import Callable, Tuple

import numpy as np
import torch

#: Pairs handled per vectorized chunk; bounds peak memory (~2 KiB per pair
#: in float64: a few (pairs, 36) temporaries).
PAIR_CHUNK = 1 << 15


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


def _clamp_outline(along: torch.Tensor, across: torch.Tensor,
                   half: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Closed outlines (P, K) clamped onto the slab ``|along| <= half``.

    Each edge i -> i+1 contributes its start and the points where it crosses
    ``along = -half`` and ``along = +half`` (parameters clamped into [0, 1],
    so an edge that misses a line repeats an endpoint, which adds no area):
    (P, 3K) outlines, ``along`` clamped, ``across`` interpolated.
    """
    step_along = along.roll(-1, dims=1) - along
    step_across = across.roll(-1, dims=1) - across
    # An edge parallel to the lines crosses neither; any parameters in [0, 1]
    # then only repeat points of the edge, so a stand-in divisor is enough.
    divisor = torch.where(step_along == 0, torch.ones_like(step_along),
                          step_along)
    limit = half[:, None]
    to_low = (-limit - along) / divisor
    to_high = (limit - along) / divisor
    first = torch.minimum(to_low, to_high).clamp(0, 1)
    second = torch.maximum(to_low, to_high).clamp(0, 1)
    # (P, K, 3): start, first crossing, second crossing, in edge order.
    t = torch.stack([torch.zeros_like(first), first, second], dim=2)
    new_along = (along[..., None] + t * step_along[..., None]).flatten(1)
    new_across = (across[..., None] + t * step_across[..., None]).flatten(1)
    return torch.maximum(torch.minimum(new_along, limit), -limit), new_across


def _separated(b1: torch.Tensor, b2: torch.Tensor, xs: torch.Tensor,
               ys: torch.Tensor) -> torch.Tensor:
    """(P,) mask: is one of the four edge normals a separating axis (the
    boxes touch at most)? ``xs``, ``ys``: box 1's corners in box 2's frame.

    Disjoint boxes must measure exactly 0 (an IoU threshold of 0 keeps
    them), but their clamped outlines collapse onto the slab lines, where the
    shoelace terms cancel only up to rounding.
    """
    half_w2, half_h2 = b2[:, 2].abs() / 2, b2[:, 3].abs() / 2
    on_axes_of_2 = ((xs.amin(1) >= half_w2) | (xs.amax(1) <= -half_w2) |
                    (ys.amin(1) >= half_h2) | (ys.amax(1) <= -half_h2))
    cos1, sin1 = torch.cos(b1[:, 4]), torch.sin(b1[:, 4])
    cos2, sin2 = torch.cos(b2[:, 4]), torch.sin(b2[:, 4])
    cos_turn = (cos1 * cos2 + sin1 * sin2).abs()
    sin_turn = (sin2 * cos1 - cos2 * sin1).abs()
    gap_x = b2[:, 0] - b1[:, 0]
    gap_y = b2[:, 1] - b1[:, 1]
    # Box 2's half extent along box 1's width and height axes.
    reach_w = half_w2 * cos_turn + half_h2 * sin_turn
    reach_h = half_w2 * sin_turn + half_h2 * cos_turn
    on_axes_of_1 = (
        ((gap_x * cos1 + gap_y * sin1).abs() >= b1[:, 2].abs() / 2 + reach_w) |
        ((gap_y * cos1 - gap_x * sin1).abs() >= b1[:, 3].abs() / 2 + reach_h))
    return on_axes_of_2 | on_axes_of_1


def _intersection_area_chunk(b1: torch.Tensor,
                             b2: torch.Tensor) -> torch.Tensor:
    corners = box_corners(b1) - b2[:, None, :2]
    cos = torch.cos(b2[:, 4])[:, None]
    sin = torch.sin(b2[:, 4])[:, None]
    # Box 1's corners in box 2's frame (rotated back by box 2's angle).
    xs = corners[..., 0] * cos + corners[..., 1] * sin
    ys = corners[..., 1] * cos - corners[..., 0] * sin
    separated = _separated(b1, b2, xs, ys)
    # Half extents as magnitudes: a negative w or h describes the same
    # rectangle, as the corner polygon does.
    xs, ys = _clamp_outline(xs, ys, b2[:, 2].abs() / 2)
    ys, xs = _clamp_outline(ys, xs, b2[:, 3].abs() / 2)
    # Shoelace; abs because a box with a negative side runs clockwise.
    area = 0.5 * (xs * ys.roll(-1, dims=1) -
                  ys * xs.roll(-1, dims=1)).sum(1).abs()
    # A box of zero area (a segment or a point) intersects nothing, as in
    # mmcv (whose IoU is 0 for it anyway).
    empty = separated | (b1[:, 2] * b1[:, 3] < 1e-14) | (
        b2[:, 2] * b2[:, 3] < 1e-14)
    return torch.where(empty, torch.zeros_like(area), area)


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


def _circumradii(boxes: torch.Tensor) -> torch.Tensor:
    return 0.5 * torch.hypot(boxes[:, 2].double(), boxes[:, 3].double())


def _meeting_reach(radius_sum):
    """The largest centre distance at which two circles count as meeting: a small
    slack so rounding never drops a touching pair (tensors and numpy arrays alike)."""
    return radius_sum * (1 + 1e-6) + 1e-6


def _circles_meet(distance, radius_sum):
    return distance <= _meeting_reach(radius_sum)


#: Rows of the (rows, M) centre-distance block computed at once by
#: :func:`candidate_pairs`; bounds its float64 temporaries to ~32 MiB.
DISTANCE_BLOCK_ELEMENTS = 1 << 22


def candidate_pairs(boxes1: torch.Tensor, boxes2: torch.Tensor):
    """Index pairs whose circumscribed circles meet (the only ones that can
    overlap); everything else has zero intersection and is skipped."""
    c1, c2 = boxes1[:, :2].double(), boxes2[:, :2].double()
    r1, r2 = _circumradii(boxes1), _circumradii(boxes2)
    rows = max(1, DISTANCE_BLOCK_ELEMENTS // max(1, boxes2.shape[0]))
    firsts, seconds = [], []
    for start in range(0, boxes1.shape[0], rows):
        dist = torch.cdist(c1[start:start + rows], c2)
        near = _circles_meet(dist, r1[start:start + rows, None] + r2[None])
        i, j = near.nonzero(as_tuple=True)
        firsts.append(i + start)
        seconds.append(j)
    return torch.cat(firsts), torch.cat(seconds)


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


IouOf = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _rotated_iou_of(inter: torch.Tensor, area_kept: torch.Tensor,
                    area_others: torch.Tensor) -> torch.Tensor:
    return _iou_from_inter(inter, area_kept, area_others, 0)


#: Boxes decided together by :func:`greedy_rotated_keep`: each block costs
#: two batched intersection calls, however many boxes it keeps.
GREEDY_BLOCK = 256


class _HostBoxes:
    """Per-box figures (float64 numpy) for the pair filters of the greedy loop.

    The filters run on the host, single-threaded, over dense (kept, later) blocks:
    on a busy machine, torch's threaded element-wise ops over millions of pairs
    spend most of their time waiting for each other (measured 14x slower with two
    threads than with one); only the few pairs left are clipped in torch.
    """

    def __init__(self, boxes: torch.Tensor) -> None:
        host = boxes[:, :5].detach().double().cpu().numpy()
        self.x, self.y = host[:, 0], host[:, 1]
        self.half_w, self.half_h = np.abs(host[:, 2]) / 2, np.abs(host[:, 3]) / 2
        self.cos, self.sin = np.cos(host[:, 4]), np.sin(host[:, 4])
        self.radii = np.hypot(host[:, 2], host[:, 3]) / 2
        self.areas = host[:, 2] * host[:, 3]


def _near_pairs(host: _HostBoxes, firsts: np.ndarray, seconds: np.ndarray,
                threshold: float):
    """The (first, second) index pairs, over ``firsts`` x ``seconds``, whose
    circumscribed circles meet and whose sizes allow an overlap above
    ``threshold`` (:func:`_sizes_allow`); no other pair can suppress."""
    gap_x = host.x[seconds][None] - host.x[firsts][:, None]
    gap_y = host.y[seconds][None] - host.y[firsts][:, None]
    reach = _meeting_reach(host.radii[firsts][:, None] + host.radii[seconds][None])
    # Squared on both sides (both non-negative): no square root per pair.
    meet = gap_x * gap_x + gap_y * gap_y <= reach * reach
    meet &= _sizes_allow(host.areas[firsts][:, None], host.areas[seconds][None], threshold)
    rows, columns = np.nonzero(meet)
    return firsts[rows], seconds[columns]


def greedy_rotated_keep(boxes: torch.Tensor, iou_threshold: float,
                        iou_of: IouOf = _rotated_iou_of) -> torch.Tensor:
    """Rows of ``boxes`` (priority order) kept by greedy NMS on rotated IoU.

    Does the work of mmcv's kernel, batched: a kept box is compared only with
    the later boxes that are not suppressed yet, and of those only with the
    ones whose circumscribed circle meets its own (the others intersect it in
    nothing). Boxes are decided in blocks of :data:`GREEDY_BLOCK` in priority
    order: the block's surviving boxes against each other (one batch, then
    the greedy pass), then the block's kept boxes against every later box
    still alive (one batch). ``iou_of(intersection, kept_areas,
    other_areas)`` turns areas into the overlap that suppresses when strictly
    greater than ``iou_threshold``; like IoU, it must grow with the
    intersection and never exceed ``min(areas) / max(areas)`` (the
    intersection is at most the smaller box, the union at least the larger).
    That lets pairs of too different sizes, and pairs whose bounding-rectangle
    overlap (:func:`_intersection_bound`) already cannot reach the threshold,
    go unclipped.

    Returns the kept row indices (int64, ascending) on ``boxes.device``.
    """
    n = boxes.shape[0]
    device = boxes.device
    if n == 0:
        return torch.empty(0, dtype=torch.long, device=device)
    if iou_threshold < 0:
        # Every pair's overlap (0 included) exceeds a negative threshold, so
        # the first box suppresses all the others, as in the greedy loop.
        return torch.zeros(1, dtype=torch.long, device=device)
    boxes = boxes[:, :5]
    # The bookkeeping (which boxes are alive, which pairs are near) and the cheap
    # bounds run on host arrays; the polygon clipping runs as batched tensor ops.
    host = _HostBoxes(boxes)
    areas = boxes[:, 2] * boxes[:, 3]
    alive = np.ones(n, dtype=bool)

    def suppressing(firsts: np.ndarray, seconds: np.ndarray) -> np.ndarray:
        """Mask over the near pairs given: does ``firsts`` suppress ``seconds``?
        The clipping is measured only where the bound on the intersection
        (:func:`_intersection_bound`) lets the overlap exceed the threshold
        (``iou_of`` grows with the intersection)."""
        result = np.zeros(firsts.size, dtype=bool)
        if firsts.size == 0:
            return result
        first_areas, second_areas = host.areas[firsts], host.areas[seconds]
        overlap_bound = iou_of(torch.from_numpy(_intersection_bound(host, firsts, seconds)),
                               torch.from_numpy(first_areas), torch.from_numpy(second_areas))
        possible = ((overlap_bound.numpy() > iou_threshold) | (first_areas <= 0)
                    | (second_areas <= 0))
        rows = np.flatnonzero(possible)
        if rows.size:
            first_t = torch.from_numpy(firsts[rows]).to(device)
            second_t = torch.from_numpy(seconds[rows]).to(device)
            inter = rotated_intersection_area(boxes[first_t], boxes[second_t])
            overlap = iou_of(inter, areas[first_t], areas[second_t])
            result[rows] = (overlap > iou_threshold).cpu().numpy()
        return result

    for start in range(0, n, GREEDY_BLOCK):
        stop = min(start + GREEDY_BLOCK, n)
        # Every box of the block was already compared with the kept boxes of
        # earlier blocks; the survivors now decide among themselves.
        block = start + np.flatnonzero(alive[start:stop])
        if block.size == 0:
            continue
        firsts, seconds = _near_pairs(host, block, block, iou_threshold)
        later = firsts < seconds
        firsts, seconds = firsts[later], seconds[later]
        hits = suppressing(firsts, seconds)
        suppresses = np.zeros((stop - start, stop - start), dtype=bool)
        suppresses[firsts[hits] - start, seconds[hits] - start] = True
        kept_in_block = block[_greedy_rows(suppresses, block - start)]
        alive[start:stop] = False
        alive[kept_in_block] = True
        rest = stop + np.flatnonzero(alive[stop:])
        if rest.size == 0 or kept_in_block.size == 0:
            continue
        firsts, seconds = _near_pairs(host, kept_in_block, rest, iou_threshold)
        alive[seconds[suppressing(firsts, seconds)]] = False
    return torch.from_numpy(np.flatnonzero(alive)).to(device)


def _overlap_on_axes(host: _HostBoxes, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Area of box ``second`` overlapped with box ``first``'s bounding rectangle in
    box ``second``'s frame: at least the area of their intersection."""
    cos1, sin1 = host.cos[first], host.sin[first]
    cos2, sin2 = host.cos[second], host.sin[second]
    gap_x, gap_y = host.x[first] - host.x[second], host.y[first] - host.y[second]
    centre_x = gap_x * cos2 + gap_y * sin2
    centre_y = gap_y * cos2 - gap_x * sin2
    cos_turn = np.abs(cos1 * cos2 + sin1 * sin2)
    sin_turn = np.abs(sin1 * cos2 - cos1 * sin2)
    half_w1, half_h1 = host.half_w[first], host.half_h[first]
    half_w2, half_h2 = host.half_w[second], host.half_h[second]
    reach_x = half_w1 * cos_turn + half_h1 * sin_turn
    reach_y = half_w1 * sin_turn + half_h1 * cos_turn
    overlap_x = np.clip(np.minimum(centre_x + reach_x, half_w2) -
                        np.maximum(centre_x - reach_x, -half_w2), 0, None)
    overlap_y = np.clip(np.minimum(centre_y + reach_y, half_h2) -
                        np.maximum(centre_y - reach_y, -half_h2), 0, None)
    return overlap_x * overlap_y


def _intersection_bound(host: _HostBoxes, firsts: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """(P,) upper bounds of the intersection areas of the box pairs (float64).

    The smaller of the two bounding-rectangle overlaps, widened by a relative
    1e-4 and by 1e-6 of the smaller area, so that rounding in the clipping
    never makes a measured intersection exceed it (touching boxes, bound 0,
    are still measured).
    """
    smaller = np.minimum(np.abs(host.areas[firsts]), np.abs(host.areas[seconds]))
    tight = np.minimum(_overlap_on_axes(host, firsts, seconds),
                       _overlap_on_axes(host, seconds, firsts))
    return np.minimum(tight, smaller) * (1 + 1e-4) + smaller * 1e-6


def _sizes_allow(areas1: np.ndarray, areas2: np.ndarray,
                 threshold: float) -> np.ndarray:
    """Pairs whose IoU bound ``min(areas) / max(areas)`` can exceed
    ``threshold``; only pairs of two positive areas are ever ruled out."""
    smaller = np.minimum(areas1, areas2)
    larger = np.maximum(areas1, areas2)
    # Relative slack of 1e-4: a float32 intersection may exceed the smaller
    # area by a few ulps, and a pair ruled out must never have suppressed.
    ruled_out = (smaller > 0) & (smaller <= threshold * larger * (1 - 1e-4))
    return ~ruled_out


def _greedy_rows(suppresses: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Positions in ``rows`` (ascending candidates) that greedy NMS keeps,
    given ``suppresses[i, j]`` for i < j."""
    removed = np.zeros(suppresses.shape[0], dtype=bool)
    kept = []
    for position, row in enumerate(rows):
        if removed[row]:
            continue
        kept.append(position)
        removed |= suppresses[row]
    return np.asarray(kept, dtype=np.int64)


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
    kept = greedy_rotated_keep(dets_sorted[:, :5], float(iou_threshold))
    return order[kept.to(order.device)]

"""Exact nearest-neighbour and radius searches that find candidates by matrix product.

A full matrix of exact squared distances (coordinate differences squared one
axis at a time, as the CUDA kernels compute them) costs several passes over a
(queries, points) matrix. ``|q|^2 + |p|^2 - 2 q.p`` is one matrix product, but
its rounding differs from the exact form, so ties and zero distances would
change. Here the product only *proposes* candidates: a per-query bound on its
error (:func:`_error_bound`) proves that the candidates contain the true answer,
the exact distances are computed for the candidates alone, and a query whose
proof fails is answered from its exact distance row instead. Results are
identical to the exact formulation.
"""
from __future__ import annotations

from typing import Tuple

import torch

#: Rounding error of the product form, in units of float32 epsilon times
#: ``|q|^2 + max |p|^2`` (after centring). The worst case of the arithmetic
#: (centring, the norms, a 5-term dot product, and the exact form's own rounding)
#: is about 25; the margin covers any BLAS summation order.
ERROR_UNITS = 64.0


def exact_squared_distances(queries: torch.Tensor, points: torch.Tensor,
                            axes: int = 3) -> torch.Tensor:
    """(B, Q, axes), (B, N, axes) -> (B, Q, N) squared distances computed as the
    CUDA kernels do: differences squared per axis, summed in axis order."""
    total = None
    for axis in range(axes):  # per axis: no (B, Q, N, axes) intermediate
        diff = queries[:, :, axis, None] - points[:, None, :, axis]
        total = diff * diff if total is None else total.add_(diff * diff)
    return total


def exact_pair_distances(queries: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Squared distance of each (..., 3) query to the (..., 3) point beside it, with
    the float rounding of :func:`exact_squared_distances` (same operations, same order)."""
    total = None
    for axis in range(queries.shape[-1]):
        diff = queries[..., axis] - points[..., axis]
        total = diff * diff if total is None else total.add_(diff * diff)
    return total


class ProductDistances:
    """Approximate squared distances of one batch's queries to its points by one
    matrix product, with a per-query bound on the difference from the exact ones."""

    def __init__(self, points: torch.Tensor) -> None:
        # Centring on the cloud's middle keeps the norms (and so the error) small.
        self.shift = (points.amax(0) + points.amin(0)) / 2 if points.shape[0] else points.new_zeros(3)
        centred = points - self.shift
        norms = (centred * centred).sum(1)
        self.largest_norm = float(norms.max()) if norms.numel() else 0.0
        # [-2p, 1, |p|^2]: a query row [q, |q|^2, 1] times this gives |q - p|^2.
        self.point_rows = torch.cat(
            [-2 * centred, torch.ones_like(norms)[:, None], norms[:, None]], 1).t().contiguous()

    def of(self, queries: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """(Q, 3) queries -> (Q, N) approximate squared distances and the (Q,) bound
        on ``|approximate - exact|``."""
        centred = queries - self.shift
        norms = (centred * centred).sum(1)
        query_rows = torch.cat([centred, norms[:, None], torch.ones_like(norms)[:, None]], 1)
        approximate = query_rows @ self.point_rows
        epsilon = torch.finfo(torch.float32).eps
        bound = ERROR_UNITS * epsilon * (norms + self.largest_norm) + torch.finfo(torch.float32).tiny
        return approximate, bound


#: From this many points on, the k nearest are selected through a threshold taken on a
#: subset (a comparison pass replaces most of the selection); below it, by ``topk``
#: on the whole row, whose per-row cost is then the smaller one.
SUBSET_THRESHOLD_POINTS = 8192


def nearest_candidates(queries: torch.Tensor, points: torch.Tensor,
                       product: ProductDistances, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The k nearest of (N, 3) ``points`` to each (Q, 3) query, nearest first, ties by
    index: (Q, k) squared distances and indices, both exact. Requires ``N >= k``;
    ``product`` is ``ProductDistances(points)``."""
    approximate, bound = product.of(queries)
    if approximate.shape[1] >= SUBSET_THRESHOLD_POINTS:
        return _nearest_through_subset(queries, points, approximate, bound, k)
    return _nearest_through_selection(queries, points, approximate, bound, k)


def _nearest_through_subset(queries: torch.Tensor, points: torch.Tensor,
                            approximate: torch.Tensor, bound: torch.Tensor,
                            k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """A threshold ``t`` per query is the k-th smallest product-form distance over a
    strided subset of the points: at least k points (those k) have an exact distance
    ``<= t + bound``. Every point with a product-form distance ``<= t + 2 * bound``
    is a candidate; any other has an exact distance ``> t + bound``, beyond the k-th
    candidate, so the candidates contain the answer, ties included."""
    n = approximate.shape[1]
    # A subset about 8x smaller than the points, with at least 4k of them: selecting in
    # it is cheap, and the threshold then admits about 8k candidates per query.
    stride = max(1, min(8, n // (4 * k)))
    threshold = approximate[:, ::stride].topk(k, dim=1, largest=False, sorted=False).values.amax(1)
    rows, columns = (approximate <= (threshold + 2 * bound)[:, None]).nonzero(as_tuple=True)
    del approximate
    exact = exact_pair_distances(queries[rows], points[columns])
    count = torch.bincount(rows, minlength=queries.shape[0])
    slot = torch.arange(rows.numel(), device=rows.device) - (torch.cumsum(count, 0) - count)[rows]
    keys = _ordering_keys(exact, columns)
    padded = keys.new_full((queries.shape[0], int(count.max())), torch.iinfo(torch.int64).max)
    padded[rows, slot] = keys
    return _smallest_keys(padded, k)


def _nearest_through_selection(queries: torch.Tensor, points: torch.Tensor,
                               approximate: torch.Tensor, bound: torch.Tensor,
                               k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The k smallest product-form distances are candidates. With ``v`` the largest
    exact candidate distance, a point can tie or beat a candidate only if its
    product-form distance is ``<= v + bound``: a query is proven when no other point
    can (every other one is at least the (k + 1)-th smallest product-form distance,
    or, where selecting k + 1 costs more, none but the candidates is that close);
    any other query is redone from its exact distance row."""
    n = approximate.shape[1]
    # torch's CPU topk keeps a heap while 64 * k <= n and switches to a slower
    # partition beyond: selecting k + 1 there costs twice k (measured at 1024 points).
    if 64 * (k + 1) <= n:
        nearest = approximate.topk(k + 1, dim=1, largest=False, sorted=True)
        candidates = nearest.indices[:, :k]
        exact = exact_pair_distances(queries[:, None, :], points[candidates])
        unproven = exact.amax(1) >= nearest.values[:, k] - bound
    else:
        candidates = approximate.topk(k, dim=1, largest=False, sorted=False).indices
        exact = exact_pair_distances(queries[:, None, :], points[candidates])
        reach = exact.amax(1) + bound
        unproven = (approximate <= reach[:, None]).sum(1) > k
    del approximate
    values, index = _smallest_keys(_ordering_keys(exact, candidates), k)
    if bool(unproven.any()):
        rows = unproven.nonzero()[:, 0]
        full = exact_squared_distances(queries[None, rows], points[None])[0]
        every = torch.arange(points.shape[0], device=points.device).expand_as(full)
        values[rows], index[rows] = _smallest_keys(_ordering_keys(full, every), k)
    return values, index


def _ordering_keys(distances: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """int64 keys that order by (distance, index) with no ties: the bits of a
    non-negative float order as the float does."""
    return (distances.view(torch.int32).to(torch.int64) << 32) | index


def _smallest_keys(keys: torch.Tensor, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """(distances, indices) of the k smallest keys per row, smallest first."""
    best = keys.topk(k, dim=1, largest=False, sorted=True).values
    return (best >> 32).to(torch.int32).view(torch.float32), best & 0xFFFFFFFF


def radius_hits(queries: torch.Tensor, points: torch.Tensor, product: ProductDistances,
                min_squared: float, max_squared: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """Every (query, point) pair with exact squared distance ``d == 0`` or
    ``min_squared <= d < max_squared``, as (rows, columns) sorted by row then column.

    The product form with its bound selects every pair that could qualify; the
    exact distances of those pairs decide. ``product`` is ``ProductDistances(points)``.
    """
    approximate, bound = product.of(queries)
    bound = bound[:, None]
    possible = approximate < max_squared + bound
    if min_squared > 0:
        possible &= (approximate >= min_squared - bound) | (approximate <= bound)
    del approximate
    rows, columns = possible.nonzero(as_tuple=True)
    d = exact_pair_distances(queries[rows], points[columns])
    hit = (d == 0) | ((d >= min_squared) & (d < max_squared))
    return rows[hit], columns[hit]

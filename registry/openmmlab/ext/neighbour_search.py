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


def nearest_candidates(queries: torch.Tensor, points: torch.Tensor,
                       product: ProductDistances, k: int,
                       spare: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The k nearest of (N, 3) ``points`` to each (Q, 3) query, nearest first, ties by
    index: (Q, k) squared distances and indices, both exact.

    ``product`` is ``ProductDistances(points)``; requires ``N > k + spare``. The
    ``k + spare`` nearest by the product form are candidates; a query is proven when
    its k-th exact candidate distance lies below every non-candidate's smallest
    possible exact distance, else its row is redone exactly.
    """
    approximate, bound = product.of(queries)
    near_values, near_index = approximate.topk(k + spare + 1, dim=1, largest=False, sorted=True)
    del approximate
    candidates = near_index[:, :-1].sort(dim=1).values  # index order: ties resolve by index
    exact = exact_pair_distances(queries[:, None, :], points[candidates])
    values, order = exact.sort(dim=1, stable=True)
    values, order = values[:, :k], order[:, :k]
    index = torch.gather(candidates, 1, order)
    # Every point outside the candidates has an approximate distance >= the
    # (k + spare + 1)-th, so an exact distance >= that minus the bound.
    unproven = values[:, -1] >= near_values[:, -1] - bound
    if bool(unproven.any()):
        rows = unproven.nonzero()[:, 0]
        full = exact_squared_distances(queries[None, rows], points[None])[0]
        redo_values, redo_index = full.sort(dim=1, stable=True)
        values[rows] = redo_values[:, :k]
        index[rows] = redo_index[:, :k]
    return values, index


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

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

import functools
from typing import Optional, Tuple

import torch

#: Rounding error of the product form, in units of float32 epsilon times
#: ``|q|^2 + max |p|^2`` (after centring). The worst case of the arithmetic
#: (centring, the norms, a 5-term dot product, and the exact form's own rounding)
#: is about 25; the margin covers any BLAS summation order.
ERROR_UNITS = 64.0


#: Up to this many (query, point) pairs, exact distances come from one broadcast
#: difference (measured faster up to 64 x 16; strided sums cost more above 2,048).
BROADCAST_ELEMENTS = 1 << 11


#: Up to this many (query, point) pairs, exact distances come from one call for every
#: axis; above it one axis at a time (three_nn at VoteNet's FP2, chunks of 256 x 512:
#: 0.83x -> 1.04x cdist + topk in one call).
ONE_CALL_ELEMENTS = 1 << 14

#: ``reduction`` of ``torch._C._nn.mse_loss`` that keeps every element (``"none"``).
NO_REDUCTION = 0


def subtract_and_square(first: torch.Tensor, second: torch.Tensor, reduction: int,
                        out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``(first - second) ** 2`` broadcast, element by element, into ``out`` when given:
    what ``torch._C._nn.mse_loss`` computes without reduction, in two calls instead of one
    (the same rounding: a difference, then its square). ``reduction`` must be
    NO_REDUCTION (the signature is the private function's)."""
    if reduction != NO_REDUCTION:
        raise ValueError(f"subtract_and_square keeps every element: reduction must be "
                         f"NO_REDUCTION ({NO_REDUCTION}), got {reduction!r}")
    difference = torch.sub(first, second, out=out)
    return difference.mul_(difference)


#: The squared differences in one call where torch has it: ``mse_loss`` of
#: ``torch._C._nn`` is private (torch.nn.functional's public one takes no ``out`` and
#: warns on broadcast), so a torch without it gets the same numbers from two public calls.
squared_differences = getattr(getattr(torch._C, "_nn", None), "mse_loss", None) or subtract_and_square


def exact_squared_distances(queries: torch.Tensor, points: torch.Tensor,
                            squares: Optional[torch.Tensor] = None,
                            out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """(B, Q, D), (B, N, D) -> (B, Q, N) squared distances computed as the CUDA kernels
    do: differences squared per axis, summed in axis order. From BROADCAST_ELEMENTS to
    ONE_CALL_ELEMENTS pairs a view whose batches lie D slabs apart (contiguous for one
    batch). Up to ONE_CALL_ELEMENTS pairs ``squares`` (of :func:`squares_shape`) and
    ``out`` (B, Q, N), when given, receive the squared differences and, up to
    BROADCAST_ELEMENTS pairs, the result."""
    if queries.shape[-2] * points.shape[-2] <= BROADCAST_ELEMENTS and queries.shape[-1] == 3:
        # One batch broadcasts as it is: a (1, N, 3) cloud lines up with (1, Q, 1, 3).
        return broadcast_squared_distances(
            queries, points if points.shape[0] == 1 else points.unsqueeze(-3), squares, out)
    if queries.shape[-2] * points.shape[-2] > ONE_CALL_ELEMENTS:
        return _per_axis_squared_distances(queries, points)
    # Every axis's squared differences in one call: ``mse_loss`` without reduction is
    # ``(a - b) * (a - b)`` element by element (a difference squared, rounded as the
    # per-axis form rounds it), broadcast from a (B, D, Q, 1) view of the queries (one
    # value per row: its stride does not slow the broadcast) against the (B, D, 1, N)
    # points made contiguous along the rows; then the sums in axis order, in place in
    # the first axis's slab. Four calls where a subtraction, a square and a sum per axis
    # take eight (knn at 256 points, 64 centres: 0.97x -> 0.91x cdist + topk).
    squares = squared_differences(queries.mT.unsqueeze(-1),
                                  points.mT.contiguous().unsqueeze(-2), NO_REDUCTION, out=squares)
    total, *others = squares.unbind(1)
    for square in others:
        total.add_(square)
    return total


def _per_axis_squared_distances(queries: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """:func:`exact_squared_distances` of large inputs, one axis at a time: no (B, D, Q,
    N) intermediate (three times the result, out of a core's cache above
    ONE_CALL_ELEMENTS pairs)."""
    # Per axis a (B, Q, 1) view of the queries (one value per row: its stride does not
    # slow the broadcast) and a contiguous (B, 1, N) slice of the points (read along
    # the rows: 2.5x faster than strided), squares and sums done in place.
    query_axes = queries.unsqueeze(-1).unbind(-2)
    point_axes = points.transpose(-1, -2).contiguous().unsqueeze(-2).unbind(-3)
    total = query_axes[0] - point_axes[0]
    total.mul_(total)
    for query_axis, point_axis in zip(query_axes[1:], point_axes[1:]):
        diff = query_axis - point_axis
        total.add_(diff.mul_(diff))
    return total


def squares_shape(count: int, n: int) -> Tuple[int, int, int, int]:
    """The shape of the squared differences :func:`exact_squared_distances` computes for
    one batch of ``count`` queries and ``n`` points."""
    return (1, count, n, 3) if count * n <= BROADCAST_ELEMENTS else (1, 3, count, n)


def broadcast_squared_distances(queries: torch.Tensor, points: torch.Tensor,
                                differences: Optional[torch.Tensor] = None,
                                out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """:func:`exact_squared_distances` of small inputs: (B, Q, 3) queries and (B, 1, N, 3)
    points (or (1, N, 3) for one batch) -> (B, Q, N), from one (B, Q, N, 3) difference
    squared at once, then summed in axis order (seven calls where the per-axis form
    takes fourteen: at PointNet++'s small sizes, calls are the cost). ``differences``
    and ``out``, when given, receive the (B, Q, N, 3) differences and the result."""
    diff = torch.sub(queries.unsqueeze(-2), points, out=differences)
    x, y, z = diff.mul_(diff).unbind(-1)
    return torch.add(x, y, out=out).add_(z)


def exact_pair_distances(queries: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Squared distance of each (..., 3) query to the (..., 3) point beside it, with
    the float rounding of :func:`exact_squared_distances` (same operations, same order)."""
    total = None
    for axis in range(queries.shape[-1]):
        diff = queries[..., axis] - points[..., axis]
        diff.mul_(diff)
        total = diff if total is None else total.add_(diff)
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


#: Points per block of :class:`BlockedPoints`: the k nearest are found among the blocks
#: with the smallest minima, so selection runs over ``N / BLOCK_POINTS`` block minima
#: instead of the ``N`` distances (selection, not arithmetic, is the cost of a k-nearest
#: search: ``topk`` over a whole row costs several times the matrix product). 16
#: measured 1.1-1.5x faster than 8 from 4,000 points on.
BLOCK_POINTS = 16


class BlockedPoints:
    """One batch's points cut into blocks of :data:`BLOCK_POINTS` consecutive indices
    (the last one padded with points at infinity), for :func:`nearest_candidates`.

    The product-form rows are laid out position-major, column ``j * blocks + b``
    for point ``b * BLOCK_POINTS + j``, so that a block's minimum is an element-wise
    minimum over ``BLOCK_POINTS`` contiguous slices of a row; the coordinates are kept
    one block per row, so a block's points are gathered at once.
    """

    def __init__(self, points: torch.Tensor) -> None:
        self.count = points.shape[0]
        self.blocks = -(-self.count // BLOCK_POINTS)
        padding = self.blocks * BLOCK_POINTS - self.count
        self.product = ProductDistances(points)
        rows = self.product.point_rows
        if padding:   # distance +inf: a norm of +inf and no other term
            filler = rows.new_zeros(5, padding)
            filler[4] = float("inf")
            rows = torch.cat([rows, filler], 1)
        self.product.point_rows = rows.view(5, self.blocks, BLOCK_POINTS).transpose(1, 2).reshape(
            5, -1).contiguous()
        padded = torch.cat([points, points.new_full((padding, 3), float("inf"))]) if padding \
            else points
        self.coordinates = padded.reshape(self.blocks, BLOCK_POINTS * 3)
        self.offsets = torch.arange(BLOCK_POINTS, device=points.device)


def nearest_candidates(queries: torch.Tensor, points: torch.Tensor,
                       blocked: BlockedPoints, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The k nearest of (N, 3) ``points`` to each (Q, 3) query, nearest first, ties by
    index: (Q, k) squared distances and indices, both exact. Requires ``N >= k``;
    ``blocked`` is ``BlockedPoints(points)``.

    Each block of points is known by its smallest product-form distance, and the
    ``k + 1`` blocks with the smallest minima are the candidates, measured exactly.
    The k points of the answer lie in at most k blocks, so any other block's minimum
    exceeds the k-th exact distance ``v`` unless points tie with it: with ``bound``
    the product form's error, the candidates hold the answer (ties by index
    included) when every block left out has a minimum ``> v + bound`` (then all its
    points are farther than ``v``), which the largest candidate minimum proves. A
    query whose proof fails (many equal distances) is redone from its exact row.
    """
    approximate, bound = blocked.product.of(queries)
    count, blocks = queries.shape[0], blocked.blocks
    minima = approximate.view(count, BLOCK_POINTS, blocks).amin(1)
    del approximate
    chosen = min(blocks, k + 1)
    if chosen < blocks:
        nearest_blocks = minima.topk(chosen, dim=1, largest=False, sorted=False)
        block_index = nearest_blocks.indices
    else:   # every block is a candidate: nothing to prove
        nearest_blocks = None
        block_index = torch.arange(blocks, device=points.device).expand(count, blocks)
    gathered = blocked.coordinates[block_index].view(count, -1, 3)
    exact = exact_pair_distances(queries[:, None, :], gathered)
    columns = (block_index[:, :, None] * BLOCK_POINTS + blocked.offsets).flatten(1)
    chosen_columns = ordering_keys(exact, columns).topk(k, dim=1, largest=False,
                                                        sorted=True).indices
    values, index = exact.gather(1, chosen_columns), columns.gather(1, chosen_columns)
    if nearest_blocks is not None:
        unproven = nearest_blocks.values.amax(1) <= values[:, k - 1] + bound
        if bool(unproven.any()):
            rows = unproven.nonzero()[:, 0]
            full = exact_squared_distances(queries[None, rows], points[None])[0]
            index[rows] = nearest = nearest_in_rows(full, k)
            values[rows] = full.gather(1, nearest)
    return values, index


def nearest_in_rows(distances: torch.Tensor, k: int) -> torch.Tensor:
    """(..., N) exact squared distances -> the (..., k) indices of the k smallest per
    row, nearest first and equal distances by index (gather the distances back)."""
    keys = ordering_keys(distances, column_indices_of(distances))
    return keys.topk(k, -1, False, True).indices   # smallest first, sorted


def column_indices_of(distances: torch.Tensor) -> torch.Tensor:
    """``arange`` over the last axis of ``distances`` as int64, made once per size and
    device: at PointNet++'s smallest layers a whole search costs about 25 us and an
    ``arange`` 1.7 of them. Read only."""
    if distances.is_cpu:   # no device to make and hash (about 0.7 us a call)
        return _cpu_column_indices(distances.shape[-1])
    return _column_indices(distances.shape[-1], distances.device)


@functools.lru_cache(maxsize=16)
def _cpu_column_indices(count: int) -> torch.Tensor:
    return torch.arange(count)


@functools.lru_cache(maxsize=16)
def _column_indices(count: int, device: torch.device) -> torch.Tensor:
    return torch.arange(count, device=device)


#: The bits of an ordering key that hold the index: a float32 converted to float64
#: leaves the 29 low bits of its significand zero.
INDEX_BITS = 29


def ordering_keys(distances: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """int64 keys that order by (distance, index) with no ties, for float32 distances
    >= 0 and int64 indices below 2 ** INDEX_BITS: the bits of a non-negative float64
    order as the float does, and a float32 widened to float64 (exactly) leaves room for
    the index in the low bits. A ``topk`` of these keys orders equal distances by index
    (one of the distances leaves their order unspecified) and is faster. Widening
    beats shifting the int32 bits up (int64 products are not vectorised: 2.5x slower)."""
    return distances.to(torch.float64).view(torch.int64).bitwise_or_(index)


def ordering_keys_into(widened: torch.Tensor, distances: torch.Tensor,
                       index: torch.Tensor) -> torch.Tensor:
    """:func:`ordering_keys` made in a float64 tensor of the distances' shape
    (``widened``, overwritten; the keys are its int64 view)."""
    return widened.copy_(distances).view(torch.int64).bitwise_or_(index)


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
    # index_select, where advanced indexing costs twice as much; one list of the kept
    # pairs for both tensors (a boolean mask is a nonzero per tensor it indexes).
    d = exact_pair_distances(queries.index_select(0, rows), points.index_select(0, columns))
    if min_squared <= 0 < max_squared:   # a zero distance is inside any positive radius
        hit = d < max_squared
    else:
        hit = (d == 0) | ((d >= min_squared) & (d < max_squared))
    kept = hit.nonzero().view(-1)
    return rows.index_select(0, kept), columns.index_select(0, kept)

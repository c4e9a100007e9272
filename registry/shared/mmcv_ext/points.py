"""Point-cloud neighbourhood kernels of mmcv that ship only as CUDA code.

``furthest_point_sampling_forward`` (and ``_with_dist``), ``knn_forward``,
``three_nn_forward``, ``three_interpolate_forward/backward``,
``ball_query_forward``, ``group_points_forward/backward`` and
``gather_points_forward/backward``: same call signatures as mmcv's bindings,
results written into the caller's preallocated tensors. Every kernel is
vectorised over points; distance matrices are built a chunk of query points at
a time so that memory stays bounded for realistic cloud sizes. Furthest point
sampling is sequential by nature (each pick depends on the previous one): it
loops over the *samples*, each step vectorised over all points.
"""
from __future__ import annotations

from typing import Callable, ContextManager, Iterator, Tuple

import torch

from .neighbour_search import (
    BlockedPoints,
    ProductDistances,
    exact_squared_distances,
    nearest_candidates,
    nearest_in_rows,
    ordering_keys_into,
    radius_hits,
)
from .scratch import SCRATCH_ELEMENTS, search_scratch

#: Upper bound on elements of one (batch, queries, points) distance chunk.
CHUNK_ELEMENTS = 1 << 24

#: Up to this many points, knn and three_nn take the k smallest of whole exact distance
#: rows (a chunk of queries at a time); above it the block search of neighbour_search.py.
DENSE_KNN_POINTS = 1024

#: Up to this many points, ball query ranks the hits of whole exact distance rows
#: (a chunk of queries at a time); above it a matrix product proposes candidates.
DENSE_BALL_QUERY_POINTS = 512

#: Elements of one chunk of a whole-row search: its int64 keys or hit ranks stay in
#: a core's 1 MiB L2 cache between the passes that use them (1 << 19 measured 1.5x
#: slower for knn, 1 << 18 up to 5x for the ranking; 1 << 15 pays per-chunk overhead).
DENSE_CHUNK_ELEMENTS = 1 << 17

#: Up to this many elements of a (B, N, N) distance matrix, furthest point sampling
#: computes it whole and picks by reading its rows, when the picks are many enough to
#: repay it: N * N at most FPS_MATRIX_POINTS_PER_PICK times the picks (a pick saves
#: eight calls, about 12 us; the matrix costs about 1.5 ns an element: measured 0.68x
#: the loop at 2,048 -> 1,024 points, 1.56x at 2,048 -> 256).
FPS_MATRIX_ELEMENTS = 1 << 22
FPS_MATRIX_POINTS_PER_PICK = 8192

#: Elements of one product-search chunk: small enough that the product's output is
#: still in cache when the selection reads it (measured faster than 1 << 18 and 1 << 22).
PRODUCT_CHUNK_ELEMENTS = 1 << 20


def untracked() -> ContextManager[None]:
    """A guard under which a kernel's own tensors skip autograd's bookkeeping (inference
    mode: no version counters or view records); the caller's tensors keep theirs.

    At PointNet++'s smallest layers a search is about twelve calls on a few thousand
    elements, and the bookkeeping is a sixth of each call (measured 28.5 -> 23.1 us for
    knn's 64 points, 16 centres). The public ``torch.inference_mode()`` costs 3.4 us to
    enter and leave, the guard it wraps 0.6, a decorator around the kernel 1.8 more. A
    kernel so run returns nothing: its results reach the caller only through the
    caller's tensors (a tensor made in inference mode could not join an autograd graph).
    """
    return torch._C._InferenceMode(True)


def as_float(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as float32: itself when it is already (``.float()`` costs a call, about
    a thirtieth of a search at PointNet++'s smallest layers)."""
    return tensor if tensor.dtype is torch.float32 else tensor.float()


def _query_chunks(b: int, queries: int, points: int,
                  elements: int = CHUNK_ELEMENTS) -> Iterator[Tuple[int, int]]:
    """(start, stop) ranges over the query axis keeping chunks under ``elements``."""
    step = max(1, elements // max(b * points, 1))
    for start in range(0, queries, step):
        yield start, min(queries, start + step)


def furthest_point_sampling_forward(points_xyz: torch.Tensor, temp: torch.Tensor,
                                    output: torch.Tensor, b: int, n: int,
                                    m: int) -> None:
    """Furthest point sampling on (B, N, 3) points, first pick index 0.

    ``temp`` (B, N) holds each point's squared distance to the chosen set and
    is updated in place, as in the CUDA kernel; ``output`` (B, m) gets indices.
    """
    with untracked():
        if m <= 0 or n <= 0:
            return
        if b * n * n <= FPS_MATRIX_ELEMENTS and n * n <= FPS_MATRIX_POINTS_PER_PICK * m:
            # Every distance at once, then three calls per pick instead of eleven: at
            # PointNet++'s small clouds the loop's calls, not its arithmetic, are the cost.
            # Same rounding: (p - q)^2 is (q - p)^2, summed in axis order either way.
            points = points_xyz.float()
            # A chunk of rows at a time, each computed in cache (3.8x faster than whole).
            chunks = [exact_squared_distances(points[:, start:stop], points)
                      for start, stop in _query_chunks(b, n, n, DENSE_CHUNK_ELEMENTS)]
            # (reshape: a single chunk of several batches is a view with gaps)
            flat = (chunks[0] if len(chunks) == 1 else torch.cat(chunks, 1)).reshape(b * n, n)
            # index_select of the (B * N, N) rows: half the cost of matrix[rows, chosen]
            offsets = torch.arange(b, device=flat.device) * n

            def rows_of(rows: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
                return flat.index_select(0, chosen if b == 1 else chosen + offsets)
            _sample_furthest(rows_of, temp, output, b, m, flat.device)
            return
        # One contiguous (B, N) slab per axis, squares and sums in place: each step is a
        # few passes over N floats (3x faster than (B, N, 3) differences summed per row).
        coordinates = points_xyz.float().permute(2, 0, 1).contiguous()
        flat = coordinates.view(3, b * n)
        batch_start = torch.arange(b, device=flat.device) * n

        def squared_distance_to(rows: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
            diff = coordinates - flat.index_select(1, batch_start + chosen)[:, :, None]
            diff.mul_(diff)
            return diff[0].add_(diff[1]).add_(diff[2])   # summed in axis order, as CUDA does
        _sample_furthest(squared_distance_to, temp, output, b, m, flat.device)


def furthest_point_sampling_with_dist_forward(points_dist: torch.Tensor,
                                              temp: torch.Tensor,
                                              output: torch.Tensor, b: int,
                                              n: int, m: int) -> None:
    """Furthest point sampling from a (B, N, N) distance matrix."""
    with untracked():
        if m <= 0 or n <= 0:
            return
        dist = points_dist.float()
        _sample_furthest(lambda rows, chosen: dist[rows, chosen], temp, output, b, m, dist.device)


def _sample_furthest(distance_to: "Callable[[torch.Tensor, torch.Tensor], torch.Tensor]",
                     temp: torch.Tensor, output: torch.Tensor, b: int, m: int,
                     device: torch.device) -> None:
    """The greedy loop of both samplers: first pick index 0, then each time the point
    farthest from the chosen set (``distance_to(rows, chosen)``: (B, N) distances to the
    last picks); ``temp`` keeps the distances, ``output`` gets the indices."""
    best = temp.float().clone()
    rows = torch.arange(b, device=device)
    chosen = torch.zeros(b, dtype=torch.long, device=device)
    picks = [chosen]
    for _ in range(1, m):
        torch.minimum(best, distance_to(rows, chosen), out=best)
        chosen = best.argmax(dim=1)  # first maximum, like the CUDA reduction
        picks.append(chosen)
    temp.copy_(best)
    output.copy_(torch.stack(picks, dim=1).to(output.dtype))


def knn_forward(xyz: torch.Tensor, center_xyz: torch.Tensor, idx: torch.Tensor,
                dist2: torch.Tensor, b: int, n: int, m: int,
                nsample: int) -> None:
    """k nearest of (B, N, 3) ``xyz`` for each (B, m, 3) centre, nearest first
    (equal distances by index), with their exact squared distances.

    ``idx``/``dist2`` are (B, m, nsample); when N < nsample the remaining
    slots keep index 0 and distance 1e10, as the CUDA kernel's heap leaves them.
    """
    with untracked():
        if b == 1 and m * n <= SCRATCH_ELEMENTS and nsample <= n \
                and _takes_small_search(center_xyz, xyz, dist2, idx, nsample):
            _write_small_search(center_xyz, xyz, nsample, m, n, dist2, idx)
            return
        k = min(nsample, n)
        _write_nearest(as_float(center_xyz), as_float(xyz), k, dist2, idx)
        if k < nsample:
            idx[:, :, k:] = 0
            dist2[:, :, k:] = 1e10


def _write_nearest(queries: torch.Tensor, points: torch.Tensor, k: int,
                   dist2: torch.Tensor, idx: torch.Tensor) -> None:
    """The k nearest of (B, N, 3) ``points`` to each (B, Q, 3) query, nearest first and
    equal distances by index, into ``dist2[..., :k]`` and ``idx[..., :k]`` (knn and
    three_nn): whole exact rows up to DENSE_KNN_POINTS points, the block search above."""
    b, count, _ = queries.shape
    n = points.shape[1]
    if n <= DENSE_KNN_POINTS:
        if b * count * n <= DENSE_CHUNK_ELEMENTS and k == idx.shape[-1] == dist2.shape[-1] \
                and dist2.is_contiguous() and dist2.dtype == torch.float32:
            # One chunk, the whole outputs at once (PointNet++'s small layers, where the
            # calls are the cost): the distances gathered straight into the caller's
            # tensor, copy_ converts the indices to its dtype; no slicing.
            distances = exact_squared_distances(queries, points)
            order = nearest_in_rows(distances, k)
            idx.copy_(order)
            torch.gather(distances, 2, order, out=dist2)
            return
        for start, stop in _query_chunks(b, count, n, DENSE_CHUNK_ELEMENTS):
            distances = exact_squared_distances(queries[:, start:stop], points)
            order = nearest_in_rows(distances, k)
            idx[:, start:stop, :k] = order
            dist2[:, start:stop, :k] = distances.gather(2, order)
        return
    for batch in range(b):
        blocked = BlockedPoints(points[batch])
        for start, stop in _query_chunks(1, count, n, PRODUCT_CHUNK_ELEMENTS):
            values, order = nearest_candidates(queries[batch, start:stop], points[batch],
                                               blocked, k)
            idx[batch, start:stop, :k] = order.to(idx.dtype)
            dist2[batch, start:stop, :k] = values.to(dist2.dtype)


def _takes_small_search(queries: torch.Tensor, points: torch.Tensor, dist2: torch.Tensor,
                        idx: torch.Tensor, k: int) -> bool:
    """Whether :func:`_write_small_search` may answer: float32 clouds on the CPU (its
    scratch's device), whole (1, Q, k) outputs, the distances' one contiguous float32."""
    return queries.dtype is points.dtype is dist2.dtype is torch.float32 and queries.is_cpu \
        and points.is_cpu and dist2.shape[-1] == idx.shape[-1] == k and dist2.is_contiguous()


def _write_small_search(queries: torch.Tensor, points: torch.Tensor, k: int, count: int,
                        n: int, dist2: torch.Tensor, idx: torch.Tensor) -> None:
    """The k nearest of one (1, N, 3) cloud's ``points`` to each (1, Q, 3) query into the
    whole ``dist2`` and ``idx``, for Q * N up to SCRATCH_ELEMENTS (PointNet++'s small
    layers: 64 points, 16 centres; 256 points, 64 centres).

    There a search is about fourteen torch calls of about 1.5 us each, and the Python
    around them counts too: the caller's sizes decide, with none read from the tensors
    and no layer between (the general path's layers cost 2.3 us of 26 measured), the
    intermediates written into this thread's scratch of the size (scratch.py). The
    distances are gathered into the caller's tensor, copy_ converts the indices."""
    scratch = search_scratch(count, n, k)
    distances = exact_squared_distances(queries, points, scratch.squares, scratch.distances)
    keys = ordering_keys_into(scratch.widened, distances, scratch.columns)
    order = torch.topk(keys, k, -1, False, True, out=scratch.top)[1]
    idx.copy_(order)
    torch.gather(distances, 2, order, out=dist2)


def three_nn_forward(target: torch.Tensor, source: torch.Tensor,
                     dist2: torch.Tensor, idx: torch.Tensor, b: int, n: int,
                     m: int) -> None:
    """Three nearest (B, m, 3) ``source`` points of each (B, n, 3) target, nearest
    first (equal distances by index, as the CUDA kernel's strict comparisons keep them)."""
    with untracked():
        if b == 1 and n * m <= SCRATCH_ELEMENTS and m >= 3 \
                and _takes_small_search(target, source, dist2, idx, 3):
            _write_small_search(target, source, 3, n, m, dist2, idx)
            return
        k = min(3, m)
        _write_nearest(as_float(target), as_float(source), k, dist2, idx)
        if k < 3:  # the CUDA kernel leaves unmatched slots at index 0, 1e40
            dist2[:, :, k:] = 1e40
            idx[:, :, k:] = 0


def three_interpolate_forward(features: torch.Tensor, indices: torch.Tensor,
                              weight: torch.Tensor, output: torch.Tensor,
                              b: int, c: int, m: int, n: int) -> None:
    """output[b, :, j] = sum_k weight[b, j, k] * features[b, :, indices[b, j, k]]."""
    with untracked():
        gathered = _gather_columns(
            features, indices.long().reshape(b, n * 3)).view(b, c, n, 3)
        weighted = gathered.mul_(weight[:, None, :, :].to(gathered.dtype))
        if output.is_contiguous() and output.dtype == weighted.dtype:
            torch.sum(weighted, -1, out=output)   # no (B, c, n) result to copy over
        else:
            output.copy_(weighted.sum(-1))


def three_interpolate_backward(grad_out: torch.Tensor, idx: torch.Tensor,
                               weight: torch.Tensor, grad_features: torch.Tensor,
                               b: int, c: int, n: int, m: int) -> None:
    """Scatter-add ``weight * grad_out`` (B, c, n) back onto (B, c, m)."""
    contrib = grad_out[:, :, :, None] * weight[:, None, :, :].to(grad_out.dtype)
    _scatter_add_columns(grad_features, idx.long().reshape(b, n * 3),
                         contrib.reshape(b, c, n * 3))


def _gather_columns(features: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """(B, C, N) features, (B, K) column indices -> (B, C, K)."""
    bsz, channels, _ = features.shape
    return torch.gather(features, 2,
                        index[:, None, :].expand(bsz, channels, index.shape[1]))


def _gather_columns_into(output: torch.Tensor, features: torch.Tensor,
                         index: torch.Tensor) -> None:
    """``output`` (B, C, ...) holds ``_gather_columns(features, index)`` (B, C, K);
    ``index`` int32 or int64."""
    bsz, channels = features.shape[:2]
    count = index.shape[1]
    if output.is_contiguous() and output.dtype == features.dtype:
        # Gathered straight into the caller's tensor: no (B, C, K) copy to write
        # and read again (the output of a grouping is the largest tensor of the op).
        if bsz == 1:
            # One batch: index_select takes the int32 indices as they are (no int64
            # copy, no expanded index) and reads faster (measured 0.6-0.75x gather's
            # time from 2,048 x 1 to 32,768 x 128 picks).
            torch.index_select(features[0], 1, index[0], out=output.view(channels, count))
        else:
            torch.gather(features, 2, index.long().unsqueeze(1).expand(bsz, channels, count),
                         out=output.view(bsz, channels, count))
    else:
        output.copy_(_gather_columns(features, index.long()).view(output.shape))


def _scatter_add_columns(target: torch.Tensor, index: torch.Tensor,
                         values: torch.Tensor) -> None:
    """target[b, :, index[b, k]] += values[b, :, k] (in place, duplicates summed)."""
    bsz, channels, _ = target.shape
    target.scatter_add_(2, index[:, None, :].expand(bsz, channels, index.shape[1]),
                        values.to(target.dtype))


def gather_points_forward(features: torch.Tensor, indices: torch.Tensor,
                          output: torch.Tensor, b: int, c: int, n: int,
                          npoints: int) -> None:
    """output[b, :, j] = features[b, :, indices[b, j]]."""
    _gather_columns_into(output, features, indices)


def gather_points_backward(grad_out: torch.Tensor, idx: torch.Tensor,
                           grad_features: torch.Tensor, b: int, c: int, n: int,
                           npoints: int) -> None:
    """grad_features[b, :, idx[b, j]] += grad_out[b, :, j]."""
    _scatter_add_columns(grad_features, idx.long(), grad_out)


def group_points_forward(features: torch.Tensor, indices: torch.Tensor,
                         output: torch.Tensor, b: int, c: int, n: int,
                         npoints: int, nsample: int) -> None:
    """output[b, :, j, s] = features[b, :, indices[b, j, s]]."""
    _gather_columns_into(output, features, indices.reshape(b, npoints * nsample))


def group_points_backward(grad_out: torch.Tensor, idx: torch.Tensor,
                          grad_features: torch.Tensor, b: int, c: int, n: int,
                          npoints: int, nsample: int) -> None:
    """grad_features[b, :, idx[b, j, s]] += grad_out[b, :, j, s]."""
    _scatter_add_columns(grad_features, idx.long().reshape(b, npoints * nsample),
                         grad_out.reshape(b, c, npoints * nsample))


def _first_hits(hit: torch.Tensor, nsample: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """For a (..., N) bool mask: the first ``nsample`` hit indices in order,
    padded with the first hit (0 when there is none), and the hit counts."""
    lead, n = hit.shape[:-1], hit.shape[-1]
    flat = hit.reshape(-1, n)
    rows = flat.shape[0]
    rank = flat.cumsum(-1)  # 1-based rank of each hit within its row
    count = rank[:, -1].clone()
    # Slot 0 collects the misses, slot nsample + 1 the hits past nsample: one scatter
    # of every column index puts each kept hit in place, with no list of hits built
    # (a nonzero, then a gather and an index_put, cost twice as much on dense masks).
    slot = torch.where(flat, rank.clamp_(max=nsample + 1), 0)
    columns = torch.arange(n, device=hit.device).expand(rows, n)
    placed = hit.new_zeros(rows, nsample + 2, dtype=torch.long).scatter_(1, slot, columns)
    result = placed[:, 1:nsample + 1]
    padded = torch.where(torch.arange(nsample, device=hit.device) < count[:, None], result,
                         result[:, :1])
    return padded.reshape(*lead, nsample), count.reshape(lead)


def _in_shell(d2: torch.Tensor, min2: float, max2: float) -> torch.Tensor:
    """``d2 == 0 or min2 <= d2 < max2``, with one comparison in the usual case
    (no inner radius: a zero distance is inside any positive radius)."""
    if min2 <= 0 < max2:
        return d2 < max2
    return (d2 == 0) | ((d2 >= min2) & (d2 < max2))


def ball_query_forward(center_xyz: torch.Tensor, xyz: torch.Tensor,
                       idx: torch.Tensor, b: int, n: int, m: int,
                       min_radius: float, max_radius: float,
                       nsample: int) -> None:
    """For each (B, m, 3) centre, the first ``nsample`` of the (B, n, 3) points
    (in index order) with ``d == 0`` or ``min_radius <= d < max_radius``;
    missing slots repeat the first hit, 0 when there is none (as the CUDA kernel).
    """
    with untracked():
        min2, max2 = float(min_radius) ** 2, float(max_radius) ** 2
        points, centres = xyz.float(), center_xyz.float()
        if n <= DENSE_BALL_QUERY_POINTS:
            for start, stop in _query_chunks(b, m, n, DENSE_CHUNK_ELEMENTS):
                d2 = exact_squared_distances(centres[:, start:stop], points)
                result, _ = _first_hits(_in_shell(d2, min2, max2), nsample)
                idx[:, start:stop] = result.to(idx.dtype)
            return
        for batch in range(b):
            for start, stop, result, _ in _ball_rows(centres[batch], points[batch], min2, max2,
                                                     nsample):
                idx[batch, start:stop] = result.to(idx.dtype)


def _ball_rows(centres: torch.Tensor, points: torch.Tensor, min2: float, max2: float,
               nsample: int) -> Iterator[Tuple[int, int, torch.Tensor, torch.Tensor]]:
    """Ball query of one batch's (Q, 3) ``centres`` among its (N, 3) ``points``, a chunk
    of centres at a time: (start, stop, (stop - start, nsample) first hits padded with
    the first, 0 when none, their counts). Whole exact rows up to
    DENSE_BALL_QUERY_POINTS points, candidates by matrix product above."""
    count, n = centres.shape[0], points.shape[0]
    if n <= DENSE_BALL_QUERY_POINTS:
        for start, stop in _query_chunks(1, count, n, DENSE_CHUNK_ELEMENTS):
            d2 = exact_squared_distances(centres[None, start:stop], points[None])[0]
            yield (start, stop) + _first_hits(_in_shell(d2, min2, max2), nsample)
        return
    product = ProductDistances(points)
    for start, stop in _query_chunks(1, count, n, PRODUCT_CHUNK_ELEMENTS):
        rows, columns = radius_hits(centres[start:stop], points, product, min2, max2)
        yield (start, stop) + _first_listed(rows, columns, stop - start, nsample)


def _first_listed(rows: torch.Tensor, columns: torch.Tensor, queries: int,
                  nsample: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """(queries, nsample): per row the first ``nsample`` of its ``columns`` (pairs
    sorted by row then column), padded with the first, 0 when the row has none; and
    each row's count of pairs."""
    count = torch.bincount(rows, minlength=queries)
    first_pair = torch.cumsum(count, 0) - count
    rank = torch.arange(rows.numel(), device=rows.device) - first_pair.index_select(0, rows)
    keep = (rank < nsample).nonzero().view(-1)   # one list for the three tensors
    result = torch.zeros(queries, nsample, dtype=torch.long, device=rows.device)
    result[rows.index_select(0, keep), rank.index_select(0, keep)] = columns.index_select(0, keep)
    slot = torch.arange(nsample, device=rows.device)
    return torch.where(slot < count[:, None], result, result[:, :1]), count


# --- "stack" layout: batches concatenated along the point axis, with counts ---------

def _batch_of(counts: torch.Tensor, total: int) -> torch.Tensor:
    """Batch number of each of ``total`` stacked rows given per-batch ``counts``."""
    return torch.repeat_interleave(torch.arange(counts.numel(), device=counts.device),
                                   counts.long(), output_size=total)


def _starts(counts: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(counts.long(), 0) - counts.long()


def stack_ball_query_forward(center_xyz: torch.Tensor, center_xyz_batch_cnt: torch.Tensor,
                             xyz: torch.Tensor, xyz_batch_cnt: torch.Tensor,
                             idx: torch.Tensor, max_radius: float, nsample: int) -> None:
    """Ball query on stacked batches: per centre, the first ``nsample`` points of
    its own batch with ``d < max_radius`` as indices local to that batch; when none,
    slot 0 is -1 (the rest left as the caller allocated them), as the CUDA kernel."""
    with untracked():
        radius2 = float(max_radius) ** 2
        centres, points = center_xyz.float(), xyz.float()
        centre_start = point_start = 0
        # Batch by batch, each against its own points only (the distances to the other
        # batches' points, masked out, were most of the work), by ball query's own search.
        for centre_count, point_count in zip(center_xyz_batch_cnt.tolist(), xyz_batch_cnt.tolist()):
            batch_idx = idx[centre_start:centre_start + centre_count]
            if radius2 <= 0 or point_count == 0:   # nothing lies closer than 0
                batch_idx[:, 0] = -1
            else:
                for start, stop, first, count in _ball_rows(
                        centres[centre_start:centre_start + centre_count],
                        points[point_start:point_start + point_count], 0.0, radius2, nsample):
                    chunk = batch_idx[start:stop]
                    found = count > 0
                    chunk[found] = first[found].to(idx.dtype)
                    chunk[~found, 0] = -1
            centre_start += centre_count
            point_start += point_count


def _stack_group_index(features_batch_cnt: torch.Tensor, indices: torch.Tensor,
                       indices_batch_cnt: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Global feature row of each (centre, sample) and whether the kernel reads it."""
    total_centres = indices.shape[0]
    batch = _batch_of(indices_batch_cnt, total_centres)
    start = _starts(features_batch_cnt)[batch][:, None]
    end = torch.cumsum(features_batch_cnt.long(), 0)[batch][:, None]
    local = indices.long()
    # the CUDA kernel compares the *local* index with the batch's end row
    valid = (local < end) & (start + local >= 0)
    return (start + local).clamp(min=0), valid


def stack_group_points_forward(features: torch.Tensor, features_batch_cnt: torch.Tensor,
                               indices: torch.Tensor, indices_batch_cnt: torch.Tensor,
                               output: torch.Tensor, b: int, m: int, c: int,
                               nsample: int) -> None:
    """output[j, :, s] = features[start(batch of j) + indices[j, s], :]."""
    rows, valid = _stack_group_index(features_batch_cnt, indices, indices_batch_cnt)
    rows = rows.clamp(max=max(features.shape[0] - 1, 0))
    gathered = features[rows]  # (M, nsample, C)
    gathered = gathered * valid[..., None].to(gathered.dtype)
    output.copy_(gathered.permute(0, 2, 1))


def stack_group_points_backward(grad_out: torch.Tensor, idx: torch.Tensor,
                                idx_batch_cnt: torch.Tensor,
                                features_batch_cnt: torch.Tensor,
                                grad_features: torch.Tensor, b: int, c: int, m: int,
                                n: int, nsample: int) -> None:
    """grad_features[start + idx[j, s], :] += grad_out[j, :, s]."""
    rows, _ = _stack_group_index(features_batch_cnt, idx, idx_batch_cnt)
    grad_features.index_add_(0, rows.reshape(-1),
                             grad_out.permute(0, 2, 1).reshape(-1, c).to(grad_features.dtype))

"""Multi-scale deformable attention (Deformable DETR) kernels.

Same math as mmcv's ``multi_scale_deformable_attn_pytorch``: per level, the
sampling locations (normalised to [0, 1], x then y) are bilinearly sampled
from the value map with zero padding outside it, then weighted and summed.
A location ``l`` maps to the pixel coordinate ``(2 * l - 1 + 1) * size / 2 -
0.5`` computed in that order, as mmcv's ``2 * l - 1`` followed by
``grid_sample(align_corners=False)`` does, so points on pixel centres and
borders fall in the same cell (and get the same one-sided gradient) as there.

Instead of ``grid_sample`` on a channels-first copy of every level, each
sampling point's four corners are found as rows of ``value`` seen as a
(bs * num_keys * num_heads, head_dim) table, which is already its layout,
and ``F.embedding_bag`` gathers and weights them in one call: no copy of
``value``, no (points x channels) intermediate. The backward is written out
by hand (no autograd graph is kept between forward and backward):

* value: every corner adds ``weight * grad_output`` of its query to its row;
  corners are sorted by row, then one ``embedding_bag`` over
  ``grad_output`` sums each row's contributions.
* attention weights, sampling locations: the bilinear sample, and its
  derivatives along x and y, are the same corners with other weights;
  their dot products with ``grad_output`` give both gradients.

Both passes recompute the corners (cheap elementwise work on (points,)
planes) rather than keep state between them; the backward works a block of
queries at a time so that its intermediates stay cache-sized. On one CPU
thread, forward and forward+backward take well under the time of mmcv's
``multi_scale_deformable_attn_pytorch`` under autograd
(``benchmarks/packs/shared/bench_mmcv_ops.py --only msda``).
"""
from __future__ import annotations

from typing import List, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F

#: Elements of the (sampling point x channels) block the backward gathers
#: at once: big enough to amortise each call, small enough to stay in cache
#: and not to grow with the number of queries.
_BACKWARD_BLOCK = 1 << 20

#: Corners the value gradient sorts at once (at least 4 per row of value:
#: each block costs a sum the size of value).
_VALUE_BLOCK = 1 << 20


def _levels(value_spatial_shapes: torch.Tensor,
            value_level_start_index: torch.Tensor
            ) -> List[Tuple[int, int, int]]:
    # Shapes are needed as Python ints to index; this is one small host
    # transfer per call.
    shapes = value_spatial_shapes.tolist()
    starts = value_level_start_index.tolist()
    return [(int(s), int(h), int(w)) for s, (h, w) in zip(starts, shapes)]


class _Axis(NamedTuple):
    """One axis (x or y) of every sampling point, each (bs, nq, heads, L*P)."""

    weights: Tuple[torch.Tensor, torch.Tensor]  # lower, upper corner; 0 outside
    slopes: Tuple[torch.Tensor, torch.Tensor]   # d weight / d pixel; 0 outside
    offsets: Tuple[torch.Tensor, torch.Tensor]  # row offset (clamped in level)


def _axis(coordinate: torch.Tensor, size: torch.Tensor,
          row_stride: torch.Tensor) -> _Axis:
    """Bilinear weights and row offsets along one axis.

    ``size`` and ``row_stride`` (rows between neighbouring pixels) hold one
    value per (level, point) column of ``coordinate``.
    """
    # mmcv's ``2 * l - 1`` then grid_sample's ``(g + 1) * (size / 2) - 0.5``,
    # step by step so that rounding (and so the cell of a point on a pixel
    # centre or border) is the same as there.
    pixel = ((2 * coordinate - 1) + 1) * (size / 2) - 0.5
    low = pixel.floor()
    fraction = pixel - low
    dtype = coordinate.dtype
    # The lower corner is inside when 0 <= low <= size - 1, the upper one
    # when 0 <= low + 1 <= size - 1.
    low_inside = ((low >= 0) & (low < size)).to(dtype)
    high_inside = ((low >= -1) & (low < size - 1)).to(dtype)
    top = size - 1
    # Clamp into the level so that every row is a valid index (corners
    # outside weigh 0); this also bounds far-away points before the int cast.
    # A NaN or infinite location has NaN weights (as in grid_sample, its
    # output is NaN) but must still index a row.
    low = low.nan_to_num(-1.0).clamp(min=-1).minimum(top)
    low_offset = low.clamp(min=0).to(row_stride.dtype) * row_stride
    high_offset = (low + 1).minimum(top).to(row_stride.dtype) * row_stride
    return _Axis(((1 - fraction) * low_inside, fraction * high_inside),
                 (-low_inside, high_inside), (low_offset, high_offset))


#: Corner order inside each point's group of four: (y, x) lower/upper.
_CORNERS = ((0, 0), (0, 1), (1, 0), (1, 1))


class _Points(NamedTuple):
    """Every sampling point's two axes and corner rows."""

    x: _Axis
    y: _Axis
    # (bs, nq, heads, 4, L*P) or, corners last, (bs, nq, heads, L*P, 4):
    # rows of value.view(-1, d), int32 unless the table needs int64.
    rows: torch.Tensor
    corner_axis: int     # -2 or -1
    scale: torch.Tensor  # (L*P, 2): d pixel / d location, (w, h)


def _points(value_shape: torch.Size, levels: List[Tuple[int, int, int]],
            sampling_locations: torch.Tensor, corners_last: bool) -> _Points:
    """Axes and corner rows of all sampling points.

    The forward and the value gradient take any order of a bag's corners and
    want them first (each corner's rows then fill a contiguous block); the
    locations' gradient sums each point's four, so wants them last.
    """
    bs, num_keys, num_heads, _ = value_shape
    _, nq, _, num_levels, num_points, _ = sampling_locations.shape
    dtype, device = sampling_locations.dtype, sampling_locations.device
    # Per (level, point) column; all further work is on contiguous
    # (bs, nq, heads, L*P) planes, where broadcasting over a trailing axis
    # of 2 or 4 would run torch's loops a handful of elements at a time.
    sizes = torch.tensor([(w, h) for _, h, w in levels], dtype=dtype,
                         device=device).repeat_interleave(num_points, 0)
    # int32 rows: half the memory traffic, for embedding_bag and the sort.
    small = bs * num_keys * num_heads < 2 ** 31
    index_dtype = torch.int32 if small else torch.long
    strides = torch.tensor([(num_heads, w * num_heads) for _, _, w in levels],
                           dtype=index_dtype, device=device
                           ).repeat_interleave(num_points, 0)
    planes = sampling_locations.reshape(bs, nq, num_heads,
                                        num_levels * num_points, 2)
    x = _axis(planes[..., 0], sizes[:, 0], strides[:, 0])
    y = _axis(planes[..., 1], sizes[:, 1], strides[:, 1])
    starts = torch.tensor([s for s, _, _ in levels], device=device
                          ).repeat_interleave(num_points)
    base = _row_bases(bs, num_keys, num_heads, starts).to(index_dtype)
    corner_axis = -1 if corners_last else -2
    shape = list(planes.shape[:-1])
    shape.insert(len(shape) + 1 + corner_axis, 4)
    rows = base.new_empty(shape)
    for y_side in (0, 1):
        row_start = y.offsets[y_side] + base
        for x_side in (0, 1):
            torch.add(row_start, x.offsets[x_side],
                      out=rows.select(corner_axis, 2 * y_side + x_side))
    return _Points(x, y, rows, corner_axis, sizes)


def _row_bases(bs: int, num_keys: int, num_heads: int,
               starts: torch.Tensor) -> torch.Tensor:
    """(bs, 1, heads, columns): row of key ``starts[column]`` of each batch
    and head in a (bs, num_keys, heads) table."""
    device = starts.device
    batch = torch.arange(bs, device=device).view(bs, 1, 1, 1) * num_keys
    head = torch.arange(num_heads, device=device).view(1, 1, num_heads, 1)
    return (batch + starts) * num_heads + head


def _products(out: torch.Tensor, corner_axis: int,
              y_factors: Tuple[torch.Tensor, torch.Tensor],
              x_factors: Tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Fill each corner of ``out`` with its ``y_factor * x_factor``."""
    for corner, (y_side, x_side) in enumerate(_CORNERS):
        torch.mul(y_factors[y_side], x_factors[x_side],
                  out=out.select(corner_axis, corner))
    return out


def _attention_weighted(points: _Points, attention_weights: torch.Tensor
                        ) -> torch.Tensor:
    """Bilinear weight x attention of each corner, laid out as the rows."""
    attention = attention_weights.reshape(points.x.weights[0].shape)
    y_weights = (points.y.weights[0] * attention,
                 points.y.weights[1] * attention)
    out = attention.new_empty(points.rows.shape)
    return _products(out, points.corner_axis, y_weights, points.x.weights)


def _table(value: torch.Tensor) -> torch.Tensor:
    """``value`` as (bs * num_keys * num_heads, head_dim) rows (a view)."""
    return value.contiguous().view(-1, value.shape[-1])


def msda_forward(value: torch.Tensor, value_spatial_shapes: torch.Tensor,
                 value_level_start_index: torch.Tensor,
                 sampling_locations: torch.Tensor,
                 attention_weights: torch.Tensor) -> torch.Tensor:
    """Multi-scale deformable attention, (bs, nq, num_heads * head_dim).

    Args:
        value: (bs, num_keys, num_heads, head_dim).
        value_spatial_shapes: (num_levels, 2) int, rows (h, w).
        value_level_start_index: (num_levels,) int, first key of each level.
        sampling_locations: (bs, nq, num_heads, num_levels, num_points, 2),
            normalised (x, y).
        attention_weights: (bs, nq, num_heads, num_levels, num_points).
    """
    bs, _, num_heads, head_dim = value.shape
    nq = sampling_locations.shape[1]
    levels = _levels(value_spatial_shapes, value_level_start_index)
    points = _points(value.shape, levels, sampling_locations, False)
    weights = _attention_weighted(points, attention_weights)
    # One bag per (batch, query, head): its levels x points x 4 corners.
    out = F.embedding_bag(_bags(points.rows), _table(value), mode="sum",
                          per_sample_weights=_bags(weights))
    return out.view(bs, nq, num_heads * head_dim)


def _bags(corners: torch.Tensor) -> torch.Tensor:
    """(bs, nq, heads, ...) as (bags, corners per bag), also when empty."""
    return corners.flatten(3).flatten(0, 2)


def _bag_of(index: torch.Tensor, per_bag: int) -> torch.Tensor:
    """``index // per_bag``: a shift when ``per_bag`` is a power of two (as
    4 corners x levels x points mostly is), integer division having no
    vector instruction."""
    if per_bag & (per_bag - 1) == 0:
        return index >> (per_bag.bit_length() - 1)
    return index.div(per_bag, rounding_mode="floor")


def _value_gradient(rows: torch.Tensor, weights: torch.Tensor,
                    grad_output: torch.Tensor, table_rows: int) -> torch.Tensor:
    """Sum over corners of ``weight * grad_output[bag]`` into each row.

    ``rows`` and ``weights`` are (bags, corners per bag); ``grad_output`` is
    (bags, head_dim). Returns (table_rows, head_dim).

    The corners are sorted by row so that one ``embedding_bag`` over
    ``grad_output`` sums each row's contributions. Many queries are done a
    block of bags at a time: sorting, and reading the weights in sorted
    order, stay in cache, for one table-sized sum per block.
    """
    per_bag = rows.shape[1]
    step = max(1, max(_VALUE_BLOCK, 4 * table_rows) // max(1, per_bag))
    total: Optional[torch.Tensor] = None
    for first in range(0, max(1, rows.shape[0]), step):
        block_rows = rows[first:first + step].reshape(-1)
        order = block_rows.sort()[1]
        counts = torch.bincount(block_rows, minlength=table_rows)
        offsets = counts.cumsum(0) - counts
        block_weights = weights[first:first + step].reshape(-1)[order]
        part = F.embedding_bag(_bag_of(order, per_bag),
                               grad_output[first:first + step], offsets,
                               mode="sum", per_sample_weights=block_weights)
        total = part if total is None else total.add_(part)
    assert total is not None
    return total


def _point_dot_products(points: _Points, table: torch.Tensor,
                        grad_output: torch.Tensor) -> torch.Tensor:
    """(bags, 3, L*P): grad_output . sample, . d sample/dx, . d sample/dy."""
    bags, head_dim = grad_output.shape
    count = points.rows.shape[-2]
    rows = points.rows.view(bags, 1, count, 4)
    x, y = points.x, points.y
    weights = points.rows.new_empty(points.rows.shape[:-2] + (3, count, 4),
                                    dtype=table.dtype)
    _products(weights[..., 0, :, :], -1, y.weights, x.weights)
    _products(weights[..., 1, :, :], -1, y.weights, x.slopes)
    _products(weights[..., 2, :, :], -1, y.slopes, x.weights)
    weights = weights.view(bags, 3, count, 4)
    result = grad_output.new_empty(bags, 3, count)
    step = max(1, _BACKWARD_BLOCK // (3 * count * head_dim))
    for first in range(0, bags, step):
        last = min(first + step, bags)
        size = last - first
        samples = F.embedding_bag(
            rows[first:last].expand(size, 3, count, 4).reshape(-1, 4), table,
            mode="sum", per_sample_weights=weights[first:last].reshape(-1, 4))
        # Multiply in place and sum while the block is in cache: faster here
        # than bmm, whose (3 * count, head_dim) x (head_dim, 1) products are
        # too small to pay for its per-matrix dispatch.
        torch.sum(samples.view(size, 3 * count, head_dim).mul_(
            grad_output[first:last].unsqueeze(1)), -1,
            out=result[first:last].view(size, 3 * count))
    return result


def msda_backward(value: torch.Tensor, value_spatial_shapes: torch.Tensor,
                  value_level_start_index: torch.Tensor,
                  sampling_locations: torch.Tensor,
                  attention_weights: torch.Tensor, grad_output: torch.Tensor
                  ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of ``msda_forward`` w.r.t. value, locations, weights."""
    bs, _, num_heads, head_dim = value.shape
    nq = sampling_locations.shape[1]
    levels = _levels(value_spatial_shapes, value_level_start_index)
    points = _points(value.shape, levels, sampling_locations, True)
    bags = bs * nq * num_heads
    table = _table(value)
    grad = grad_output.reshape(bags, head_dim).to(value.dtype)
    weights = _attention_weighted(points, attention_weights)
    grad_value = _value_gradient(_bags(points.rows), _bags(weights), grad,
                                 table.shape[0])
    dots = _point_dot_products(points, table, grad)
    shape = attention_weights.shape
    grad_attention = dots[:, 0].reshape(shape)
    # d location = d pixel * size (pixel = location * size - 0.5).
    grad_pixel = dots[:, 1:] * attention_weights.reshape(bags, 1, dots.shape[2])
    grad_locations = (grad_pixel.transpose(1, 2) * points.scale).reshape(
        shape + (2,))
    return grad_value.view(value.shape), grad_locations, grad_attention


def ms_deform_attn_forward(value: torch.Tensor,
                           value_spatial_shapes: torch.Tensor,
                           value_level_start_index: torch.Tensor,
                           sampling_locations: torch.Tensor,
                           attention_weights: torch.Tensor,
                           im2col_step: int = 64) -> torch.Tensor:
    """Ext ``ms_deform_attn_forward``: returns (bs, nq, heads * head_dim).

    ``im2col_step`` only tunes the CUDA kernel's batching; results do not
    depend on it, so it is accepted and ignored.
    """
    with torch.no_grad():
        return msda_forward(value, value_spatial_shapes,
                            value_level_start_index, sampling_locations,
                            attention_weights)


def ms_deform_attn_backward(value: torch.Tensor,
                            value_spatial_shapes: torch.Tensor,
                            value_level_start_index: torch.Tensor,
                            sampling_locations: torch.Tensor,
                            attention_weights: torch.Tensor,
                            grad_output: torch.Tensor,
                            grad_value: torch.Tensor,
                            grad_sampling_loc: torch.Tensor,
                            grad_attn_weight: torch.Tensor,
                            im2col_step: int = 64) -> None:
    """Ext ``ms_deform_attn_backward``: accumulates into the grad buffers.

    Like the CUDA kernel, gradients are added to ``grad_value``,
    ``grad_sampling_loc`` and ``grad_attn_weight`` (the caller passes zeros).
    """
    with torch.no_grad():
        grads = msda_backward(value, value_spatial_shapes,
                              value_level_start_index, sampling_locations,
                              attention_weights, grad_output)
    for buffer, grad in zip(
            (grad_value, grad_sampling_loc, grad_attn_weight), grads):
        buffer.add_(grad.to(buffer.dtype))

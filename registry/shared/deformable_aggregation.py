"""Sparse4D's ``deformable_aggregation_ext`` (also SparseDrive's and DiffusionDrive's),
forward and backward, on plain tensor ops.

Layouts, as the compiled module takes them:

* ``mc_ms_feat`` (batch, features, channels): every camera's every scale flattened
  row-major (h, w) and concatenated; ``scale_start_index`` (cameras, scales) is the
  first row of each map, ``spatial_shape`` (cameras, scales, 2) its (h, w);
* ``sampling_location`` (batch, anchors, points, cameras, 2): (x, y) in [0, 1] of
  the image;
* ``weights`` (batch, anchors, points, cameras, scales, groups): channel ``c`` uses
  group ``c // (channels // groups)``;
* the output (batch, anchors, channels) sums, over points, cameras and scales, the
  weight times the bilinear sample at pixel ``(y * h - 0.5, x * w - 0.5)``, corners
  outside the map counting zero.

As in the CUDA kernel, a (point, camera) whose location is not strictly inside
(0, 1) on both axes contributes nothing and gets no gradient. That is what makes it
fast here too: a key point is seen by one or two of six cameras, so only the
locations inside an image are gathered (the CUDA kernel returns early for the rest),
instead of sampling every camera as a ``grid_sample`` formulation does. The backward
has the kernel's closed form (no autograd graph is kept); it *adds* into the
gradient tensors it is given, as the kernel's ``atomicAdd`` does into the zeros the
Python wrapper passes.
"""
from __future__ import annotations

from typing import Iterator, NamedTuple

import torch

#: Rows of (entry x channel) gathered at once: bounds the memory of one step (~32 MB
#: of float32) whatever the number of anchors.
CHUNK_ELEMENTS = 1 << 23


class _Corners(NamedTuple):
    """The bilinear stencil of a chunk of (location, scale) entries."""
    rows: torch.Tensor         # (4, entries) row of mc_ms_feat.view(-1, C) per corner
    inside: torch.Tensor       # (4, entries) whether the corner is on the map
    fraction_h: torch.Tensor   # (entries,) lh of the kernel
    fraction_w: torch.Tensor   # (entries,) lw of the kernel
    height: torch.Tensor       # (entries,) h of the entry's map
    width: torch.Tensor        # (entries,) w of the entry's map

    def weights(self) -> torch.Tensor:
        """(4, entries) bilinear weights w1..w4 of the kernel, zero off the map."""
        lh, lw = self.fraction_h, self.fraction_w
        hh, hw = 1 - lh, 1 - lw
        return torch.stack([hh * hw, hh * lw, lh * hw, lh * lw]) * self.inside


class _Entries(NamedTuple):
    """The (batch, anchor, point, camera) locations strictly inside their image."""
    location: torch.Tensor     # (M,) flat index into sampling_location.view(-1, 2)
    anchor: torch.Tensor       # (M,) batch * anchors + anchor
    batch: torch.Tensor        # (M,)
    camera: torch.Tensor       # (M,)


def _dimensions(mc_ms_feat: torch.Tensor, spatial_shape: torch.Tensor,
                sampling_location: torch.Tensor, weights: torch.Tensor) -> "tuple[int, ...]":
    batch, features, channels = mc_ms_feat.shape
    cameras, scales = spatial_shape.shape[:2]
    anchors, points = sampling_location.shape[1:3]
    groups = weights.shape[5]
    if channels % groups:
        raise ValueError(f"deformable_aggregation: {channels} channels cannot be split into "
                         f"{groups} weight groups (the last dimension of weights)")
    expected = (batch, anchors, points, cameras, scales, groups)
    if tuple(weights.shape) != expected:
        raise ValueError(f"deformable_aggregation: weights has shape {tuple(weights.shape)}, "
                         f"expected (batch, anchors, points, cameras, scales, groups) = "
                         f"{expected}")
    return batch, features, channels, cameras, scales, anchors, points, groups


def _inside_entries(sampling_location: torch.Tensor, cameras: int, points: int
                    ) -> _Entries:
    location = sampling_location.reshape(-1, 2)
    inside = ((location > 0) & (location < 1)).all(1)
    flat = inside.nonzero().squeeze(1)
    anchors = sampling_location.shape[1]
    anchor = flat // (points * cameras)
    return _Entries(flat, anchor, anchor // anchors, flat % cameras)


def _chunks(entries: _Entries, per_entry: int) -> Iterator[_Entries]:
    size = max(1, CHUNK_ELEMENTS // max(1, per_entry))
    for start in range(0, entries.location.numel(), size):
        yield _Entries(*(field[start:start + size] for field in entries))


def _corners(entries: _Entries, sampling_location: torch.Tensor, spatial_shape: torch.Tensor,
             scale_start_index: torch.Tensor, features: int) -> _Corners:
    """Stencils of every (entry, scale), entries major: (M * scales) columns."""
    scales = spatial_shape.shape[1]
    location = sampling_location.reshape(-1, 2).index_select(0, entries.location)
    maps = (entries.camera[:, None] * scales
            + torch.arange(scales, device=location.device)).reshape(-1)
    shape = spatial_shape.reshape(-1, 2).long().index_select(0, maps)
    start = scale_start_index.reshape(-1).long().index_select(0, maps)
    height, width = shape[:, 0], shape[:, 1]
    # The kernel's arithmetic: loc * size in the location's precision, then - 0.5.
    h_im = location[:, 1].repeat_interleave(scales) * height.to(location.dtype) - 0.5
    w_im = location[:, 0].repeat_interleave(scales) * width.to(location.dtype) - 0.5
    h_low, w_low = h_im.floor(), w_im.floor()
    fraction_h, fraction_w = h_im - h_low, w_im - w_low
    h_low, w_low = h_low.long(), w_low.long()
    base = entries.batch.repeat_interleave(scales) * features + start
    rows, inside = [], []
    for dh, dw in ((0, 0), (0, 1), (1, 0), (1, 1)):
        h, w = h_low + dh, w_low + dw
        on_map = (h >= 0) & (h < height) & (w >= 0) & (w < width)
        rows.append(torch.where(on_map, base + h * width + w, base))
        inside.append(on_map)
    return _Corners(torch.stack(rows), torch.stack(inside).to(location.dtype),
                    fraction_h, fraction_w, height, width)


def deformable_aggregation_forward(mc_ms_feat: torch.Tensor, spatial_shape: torch.Tensor,
                                   scale_start_index: torch.Tensor,
                                   sampling_location: torch.Tensor,
                                   weights: torch.Tensor) -> torch.Tensor:
    """A new (batch, anchors, channels) tensor: the weighted bilinear samples summed over
    points, cameras and scales."""
    batch, features, channels, cameras, scales, anchors, points, groups = _dimensions(
        mc_ms_feat, spatial_shape, sampling_location, weights)
    output = mc_ms_feat.new_zeros(batch * anchors, groups, channels // groups)
    table = mc_ms_feat.reshape(-1, channels)
    group_weights = weights.reshape(-1, scales, groups)
    entries = _inside_entries(sampling_location, cameras, points)
    for chunk in _chunks(entries, scales * channels):
        corners = _corners(chunk, sampling_location, spatial_shape, scale_start_index,
                           features)
        bilinear = corners.weights()
        sampled = table.index_select(0, corners.rows[0]) * bilinear[0, :, None]
        for corner in range(1, 4):
            sampled.addcmul_(table.index_select(0, corners.rows[corner]),
                             bilinear[corner, :, None])
        sampled = sampled.view(-1, scales, groups, channels // groups)
        weighted = (sampled * group_weights.index_select(0, chunk.location)[..., None]).sum(1)
        output.index_add_(0, chunk.anchor, weighted)
    return output.view(batch, anchors, channels)


def deformable_aggregation_backward(mc_ms_feat: torch.Tensor, spatial_shape: torch.Tensor,
                                    scale_start_index: torch.Tensor,
                                    sampling_location: torch.Tensor, weights: torch.Tensor,
                                    grad_output: torch.Tensor, grad_mc_ms_feat: torch.Tensor,
                                    grad_sampling_location: torch.Tensor,
                                    grad_weights: torch.Tensor) -> None:
    """Add the gradients of the forward's output (``grad_output``) with respect to the
    features, sampling locations and weights into the last three tensors."""
    batch, features, channels, cameras, scales, anchors, points, groups = _dimensions(
        mc_ms_feat, spatial_shape, sampling_location, weights)
    width_per_group = channels // groups
    table = mc_ms_feat.reshape(-1, channels)
    table_grad = grad_mc_ms_feat.view(-1, channels)
    location_grad = grad_sampling_location.view(-1, 2)
    weights_grad = grad_weights.view(-1, scales, groups)
    group_weights = weights.reshape(-1, scales, groups)
    outer = grad_output.reshape(-1, groups, width_per_group)
    entries = _inside_entries(sampling_location, cameras, points)
    for chunk in _chunks(entries, 2 * scales * channels):
        corners = _corners(chunk, sampling_location, spatial_shape, scale_start_index,
                           features)
        bilinear = corners.weights()
        weight = group_weights.index_select(0, chunk.location).reshape(-1, groups)
        # (entries, groups, width): the output gradient each (entry, scale) receives
        top = outer.index_select(0, chunk.anchor).repeat_interleave(scales, 0)
        top_feat = top * weight[..., None]            # top_grad_mc_ms_feat of the kernel
        # per corner: <grad, value> by group, and <weighted grad, value> over channels; an
        # off-map corner reads a valid row of the map, its products are masked after
        by_group, total = [], []
        for corner in range(4):
            value = table.index_select(0, corners.rows[corner]).view_as(top)
            products = (top * value).sum(2) * corners.inside[corner, :, None]
            by_group.append(products)
            total.append((products * weight).sum(1))
            table_grad.index_add_(0, corners.rows[corner],
                                  (top_feat * bilinear[corner, :, None, None]
                                   ).view(-1, channels).to(table_grad.dtype))
        weights_grad.index_add_(0, chunk.location, sum(
            bilinear[corner, :, None] * by_group[corner] for corner in range(4)
        ).view(-1, scales, groups).to(weights_grad.dtype))
        lh, lw = corners.fraction_h, corners.fraction_w
        hh, hw = 1 - lh, 1 - lw
        d1, d2, d3, d4 = total
        grad_w = corners.width * (hh * (d2 - d1) + lh * (d4 - d3))
        grad_h = corners.height * (hw * (d3 - d1) + lw * (d4 - d2))
        step = torch.stack([grad_w, grad_h], 1).view(-1, scales, 2).sum(1)
        location_grad.index_add_(0, chunk.location, step.to(location_grad.dtype))

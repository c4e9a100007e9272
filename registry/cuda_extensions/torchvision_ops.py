"""torchvision's compiled operators (``torch.ops.torchvision.*``) written with PyTorch.

Each function takes the arguments of the operator schema of the same name (see
``torchvision_stand_in.SCHEMAS``) and computes what torchvision's CPU kernel computes:
the same sampling points, the same bilinear weights and border rules, the same
tie-breaking, only vectorised instead of looped. The ``_*_backward`` functions are the
operators torchvision's own autograd registrations call; they scatter the gradient
with the forward's weights instead of differentiating a recomputed forward.

Imported only when the stand-in is installed (it imports torch).
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch
from torch import Tensor

#: Elements one gather may produce before the rois are taken in chunks (memory bound).
CHUNK_ELEMENTS = 1 << 22
#: Boxes per vectorised step of nms: small enough that suppression by earlier blocks
#: prunes the later ones, large enough that the steps are few.
NMS_BLOCK = 256


# ----------------------------------------------------------------------------- nms

def nms(dets: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Indices (int64) of the boxes kept by greedy non-maximum suppression, by
    decreasing score (a stable sort, as torchvision's kernel)."""
    _check(dets.dim() == 2 and dets.size(1) == 4,
           f"boxes should be a 2d tensor of shape [N, 4], got {tuple(dets.shape)}")
    _check(scores.dim() == 1 and scores.size(0) == dets.size(0),
           f"scores should be a 1d tensor of the boxes' length, got {tuple(scores.shape)}")
    count = dets.size(0)
    if count == 0:
        return torch.empty(0, dtype=torch.long, device=dets.device)
    order = scores.sort(stable=True, descending=True).indices
    boxes = dets[order]
    x1, y1, x2, y2 = boxes.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    suppressed = torch.zeros(count, dtype=torch.bool)
    flags = suppressed.numpy()
    kept: List[int] = []
    # Blocks of rows: the overlap of a block's surviving boxes with every later surviving
    # box is one vectorised step; only the greedy scan within a block is sequential,
    # and boxes suppressed by earlier blocks are never looked at again.
    for start in range(0, count, NMS_BLOCK):
        stop = min(count, start + NMS_BLOCK)
        rows = torch.nonzero(~suppressed[start:stop]).flatten() + start
        if rows.numel() == 0:
            continue
        columns = torch.nonzero(~suppressed[start:]).flatten() + start
        xx1 = torch.maximum(x1[rows, None], x1[columns])
        yy1 = torch.maximum(y1[rows, None], y1[columns])
        xx2 = torch.minimum(x2[rows, None], x2[columns])
        yy2 = torch.minimum(y2[rows, None], y2[columns])
        inter = (xx2 - xx1).clamp_(min=0).mul_((yy2 - yy1).clamp_(min=0))
        overlap = inter.div_(areas[rows, None] + areas[columns] - inter) > iou_threshold
        # Only later boxes can be suppressed by a row (the kernel's j > i).
        overlap &= columns[None, :] > rows[:, None]
        overlap_rows = overlap.numpy()
        column_index = columns.numpy()
        for position, row in enumerate(rows.tolist()):
            if flags[row]:
                continue
            kept.append(row)
            flags[column_index[overlap_rows[position]]] = True
    return order[torch.tensor(kept, dtype=torch.long, device=order.device)]


def qnms(dets: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """nms of quantized boxes and scores: torchvision passes their integer values (one
    scale and zero point for all, which cancel in the overlap ratio and the order)."""
    return nms(*(t.dequantize() if t.is_quantized else t.to(torch.float64)
                 for t in (dets, scores)), iou_threshold)


def box_iou_rotated(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """Not provided by the stand-in: raises, naming the operator."""
    raise NotImplementedError(
        "torchvision::box_iou_rotated (box_iou with a rotated box format) has no pure-PyTorch "
        "stand-in in lazypatch: install a torchvision build that loads beside this torch "
        "(the same release line as torch), or use an axis-aligned format")


# ------------------------------------------------------------ bilinear sampling

def _roi_corners(y: Tensor, x: Tensor, height: int, width: int
                 ) -> Tuple[List[Tensor], List[Tensor]]:
    """The four (flat index into a height x width plane, weight) pairs of roi_align's
    bilinear interpolation at ``y[..., :, None]`` x ``x[..., None, :]`` broadcast:
    zero weight outside [-1, height] x [-1, width], the last row/column clamped."""
    def axis(t: Tensor, size: int) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        valid = (t >= -1.0) & (t <= size)
        t = torch.where(valid, t, torch.zeros_like(t)).clamp(min=0)
        low = t.long()
        edge = low >= size - 1
        low = torch.where(edge, torch.full_like(low, size - 1), low)
        high = torch.where(edge, low, low + 1)
        t = torch.where(edge, low.to(t.dtype), t)
        fraction = t - low
        return low, high, 1 - fraction, fraction, valid
    y_low, y_high, hy, ly, y_valid = axis(y, height)
    x_low, x_high, hx, lx, x_valid = axis(x, width)
    valid = (y_valid[..., :, None] & x_valid[..., None, :]).to(y.dtype)
    indices = [y_low[..., :, None] * width + x_low[..., None, :],
               y_low[..., :, None] * width + x_high[..., None, :],
               y_high[..., :, None] * width + x_low[..., None, :],
               y_high[..., :, None] * width + x_high[..., None, :]]
    weights = [hy[..., :, None] * hx[..., None, :] * valid,
               hy[..., :, None] * lx[..., None, :] * valid,
               ly[..., :, None] * hx[..., None, :] * valid,
               ly[..., :, None] * lx[..., None, :] * valid]
    return indices, weights


def _roi_grid(rois: Tensor, spatial_scale: float, pooled_height: int, pooled_width: int,
              sampling_ratio: int, offset: float, minimum_size: Optional[float], dtype: torch.dtype
              ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Per roi: start y/x, bin height/width, sampling grid height/width (the kernel's
    ``roi_bin_grid_h``/``_w``)."""
    rois = rois.to(dtype)
    start_w = rois[:, 1] * spatial_scale - offset
    start_h = rois[:, 2] * spatial_scale - offset
    roi_width = rois[:, 3] * spatial_scale - offset - start_w
    roi_height = rois[:, 4] * spatial_scale - offset - start_h
    if minimum_size is not None:
        roi_width = roi_width.clamp(min=minimum_size)
        roi_height = roi_height.clamp(min=minimum_size)
    bin_h = roi_height / pooled_height
    bin_w = roi_width / pooled_width
    if sampling_ratio > 0:
        grid_h = torch.full_like(start_h, sampling_ratio, dtype=torch.long)
        grid_w = torch.full_like(start_w, sampling_ratio, dtype=torch.long)
    else:
        grid_h = torch.ceil(roi_height / pooled_height).long()
        grid_w = torch.ceil(roi_width / pooled_width).long()
    return start_h, start_w, bin_h, bin_w, grid_h, grid_w


def _roi_samples(rois: Tensor, spatial_scale: float, pooled_height: int, pooled_width: int,
                 sampling_ratio: int, offset: float, minimum_size: Optional[float],
                 height: int, width: int, dtype: torch.dtype):
    """Yield, per chunk of rois that share a sampling grid: (roi indices, 4 flat plane
    indices and 4 weights each of shape (k, PH, gh, PW, gw), the bin's sample count)."""
    start_h, start_w, bin_h, bin_w, grid_h, grid_w = _roi_grid(
        rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, offset, minimum_size,
        dtype)
    # Rois are grouped by their grid size (few distinct ones), so each group is one
    # rectangular computation without padding.
    keys = grid_h * (int(grid_w.max()) + 1) + grid_w
    for key in torch.unique(keys).tolist():
        members = torch.nonzero(keys == key).flatten()
        gh, gw = int(grid_h[members[0]]), int(grid_w[members[0]])
        if gh <= 0 or gw <= 0:
            continue
        per_roi = pooled_height * gh * pooled_width * gw
        step = max(1, CHUNK_ELEMENTS // (per_roi * 16))
        for first in range(0, members.numel(), step):
            chosen = members[first:first + step]
            bh, bw = bin_h[chosen, None, None], bin_w[chosen, None, None]
            ph = torch.arange(pooled_height, dtype=dtype)[None, :, None]
            pw = torch.arange(pooled_width, dtype=dtype)[None, :, None]
            iy = (torch.arange(gh, dtype=dtype) + 0.5)[None, None, :]
            ix = (torch.arange(gw, dtype=dtype) + 0.5)[None, None, :]
            y = start_h[chosen, None, None] + ph * bh + iy * bh / gh   # (k, PH, gh)
            x = start_w[chosen, None, None] + pw * bw + ix * bw / gw   # (k, PW, gw)
            # (k, PH, gh, PW, gw): y along dims 1-2, x along dims 3-4
            indices, weights = _roi_corners(y.reshape(len(chosen), -1),
                                            x.reshape(len(chosen), -1), height, width)
            shape = (len(chosen), pooled_height, gh, pooled_width, gw)
            yield (chosen, [index.reshape(shape) for index in indices],
                   [weight.reshape(shape) for weight in weights], gh * gw)


def _sampled(table: Tensor, base: Tensor, indices: List[Tensor], weights: List[Tensor]
             ) -> Tensor:
    """Weighted sum over the 4 corners and the sampling grid of rows of ``table``
    ((rows, C)) at ``base + index``: (k, PH, PW, C)."""
    total = None
    for index, weight in zip(indices, weights):
        values = table[base + index] * weight[..., None]
        total = values if total is None else total + values
    assert total is not None
    return total.sum(dim=(2, 4))


def _scatter_sampled(table: Tensor, base: Tensor, indices: List[Tensor],
                     weights: List[Tensor], grad: Tensor) -> None:
    """The adjoint of :func:`_sampled`: add ``grad`` ((k, PH, PW, C)) into ``table``."""
    spread = grad[:, :, None, :, None, :]
    channels = table.size(1)
    for index, weight in zip(indices, weights):
        values = (weight[..., None] * spread).reshape(-1, channels)
        table.index_add_(0, (base + index).reshape(-1), values)


def _batch_of(rois: Tensor) -> Tensor:
    return rois[:, 0].long()


# --------------------------------------------------------------------- roi_align

def roi_align(input: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int,
              pooled_width: int, sampling_ratio: int, aligned: bool) -> Tensor:
    """(K, C, PH, PW): the average of bilinear samples per bin (torchvision's roi_align)."""
    _check_rois(input, rois)
    batch, channels, height, width = input.shape
    output = input.new_zeros(rois.size(0), channels, pooled_height, pooled_width)
    if output.numel() == 0:
        return output
    table = input.permute(0, 2, 3, 1).reshape(-1, channels)
    plane = height * width
    batch_index = _batch_of(rois)
    for chosen, indices, weights, count in _roi_samples(
            rois, spatial_scale, pooled_height, pooled_width, sampling_ratio,
            0.5 if aligned else 0.0, None if aligned else 1.0, height, width, input.dtype):
        base = (batch_index[chosen] * plane)[:, None, None, None, None]
        pooled = _sampled(table, base, indices, weights) / count
        output[chosen] = pooled.permute(0, 3, 1, 2).to(output.dtype)
    return output


def _roi_align_backward(grad: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int,
                        pooled_width: int, batch_size: int, channels: int, height: int,
                        width: int, sampling_ratio: int, aligned: bool) -> Tensor:
    """The gradient of :func:`roi_align` with respect to its input."""
    table = grad.new_zeros(batch_size * height * width, channels)
    if grad.numel() and table.numel():
        plane = height * width
        batch_index = _batch_of(rois)
        for chosen, indices, weights, count in _roi_samples(
                rois, spatial_scale, pooled_height, pooled_width, sampling_ratio,
                0.5 if aligned else 0.0, None if aligned else 1.0, height, width, grad.dtype):
            base = (batch_index[chosen] * plane)[:, None, None, None, None]
            _scatter_sampled(table, base, indices, weights,
                             grad[chosen].permute(0, 2, 3, 1) / count)
    return table.reshape(batch_size, height, width, channels).permute(0, 3, 1, 2).contiguous()


#: The quantized type whose integer values torchvision passes as each integer type.
QUANTIZED_OF = {torch.int8: torch.qint8, torch.uint8: torch.quint8, torch.int32: torch.qint32}


def _dequantized(values: Tensor, scale: float, zero_point: int) -> Tensor:
    if values.is_quantized:
        return values.dequantize()
    return (values.to(torch.float32) - zero_point) * scale


def qroi_align(input: Tensor, rois: Tensor, input_scale: float, input_zero_point: int,
               rois_scale: float, rois_zero_point: int, spatial_scale: float,
               pooled_height: int, pooled_width: int, sampling_ratio: int,
               aligned: bool) -> Tensor:
    """roi_align of quantized values (torchvision passes their integers and parameters),
    quantized back with the input's parameters, as integers of the input's type."""
    _check(input.size(0) == 1, "Only one image per batch is allowed in roi_align when "
                               "quantized tensors are passed as input.")
    pooled = roi_align(_dequantized(input, input_scale, input_zero_point),
                       _dequantized(rois, rois_scale, rois_zero_point), spatial_scale,
                       pooled_height, pooled_width, sampling_ratio, aligned)
    if input.is_quantized:
        return torch.quantize_per_tensor(pooled, input_scale, input_zero_point, input.dtype)
    _check(input.dtype in QUANTIZED_OF, f"qroi_align takes the integer values of a quantized "
                                        f"tensor (int8, uint8, int32), got {input.dtype}")
    return torch.quantize_per_tensor(pooled, input_scale, input_zero_point,
                                     QUANTIZED_OF[input.dtype]).int_repr()


# ------------------------------------------------------------------ ps_roi_align

def _ps_table(input: Tensor, pooled_height: int, pooled_width: int) -> Tuple[Tensor, int]:
    """Rows (batch, ph, pw, y, x) of the output channels: bin (ph, pw) of output
    channel c reads input channel (c * PH + ph) * PW + pw."""
    batch, channels, height, width = input.shape
    _check(channels % (pooled_height * pooled_width) == 0,
           "input channels must be a multiple of pooling height * pooling width")
    out_channels = channels // (pooled_height * pooled_width)
    table = input.reshape(batch, out_channels, pooled_height, pooled_width, height, width)
    return table.permute(0, 2, 3, 4, 5, 1).reshape(-1, out_channels), out_channels


def _ps_base(batch_index: Tensor, pooled_height: int, pooled_width: int, height: int,
             width: int) -> Tensor:
    ph = torch.arange(pooled_height)[None, :, None, None, None]
    pw = torch.arange(pooled_width)[None, None, None, :, None]
    return ((batch_index[:, None, None, None, None] * pooled_height + ph) * pooled_width
            + pw) * (height * width)


def _channel_mapping(rois: Tensor, out_channels: int, pooled_height: int, pooled_width: int
                     ) -> Tensor:
    mapping = torch.arange(out_channels * pooled_height * pooled_width, dtype=torch.int32)
    return mapping.reshape(1, out_channels, pooled_height, pooled_width).repeat(
        rois.size(0), 1, 1, 1).to(rois.device)


def ps_roi_align(input: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int,
                 pooled_width: int, sampling_ratio: int) -> Tuple[Tensor, Tensor]:
    """Position-sensitive roi_align: (output (K, C/(PH*PW), PH, PW), channel mapping)."""
    _check_rois(input, rois)
    table, out_channels = _ps_table(input, pooled_height, pooled_width)
    height, width = input.shape[-2:]
    output = input.new_zeros(rois.size(0), out_channels, pooled_height, pooled_width)
    mapping = _channel_mapping(rois, out_channels, pooled_height, pooled_width)
    if output.numel() == 0:
        return output, mapping
    batch_index = _batch_of(rois)
    for chosen, indices, weights, count in _roi_samples(
            rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, 0.5, None,
            height, width, input.dtype):
        base = _ps_base(batch_index[chosen], pooled_height, pooled_width, height, width)
        pooled = _sampled(table, base, indices, weights) / count
        output[chosen] = pooled.permute(0, 3, 1, 2).to(output.dtype)
    # No sample in a bin: the kernel divides 0 by a count of 0 (roi_align counts 1).
    *_, grid_h, grid_w = _roi_grid(rois, spatial_scale, pooled_height, pooled_width,
                                   sampling_ratio, 0.5, None, input.dtype)
    output[(grid_h * grid_w) <= 0] = float("nan")
    return output, mapping


def _ps_roi_align_backward(grad: Tensor, rois: Tensor, channel_mapping: Tensor,
                           spatial_scale: float, pooled_height: int, pooled_width: int,
                           sampling_ratio: int, batch_size: int, channels: int, height: int,
                           width: int) -> Tensor:
    """The gradient of :func:`ps_roi_align` with respect to its input."""
    out_channels = channels // (pooled_height * pooled_width)
    table = grad.new_zeros(batch_size * pooled_height * pooled_width * height * width,
                           out_channels)
    if grad.numel() and table.numel():
        batch_index = _batch_of(rois)
        for chosen, indices, weights, count in _roi_samples(
                rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, 0.5, None,
                height, width, grad.dtype):
            base = _ps_base(batch_index[chosen], pooled_height, pooled_width, height, width)
            _scatter_sampled(table, base, indices, weights,
                             grad[chosen].permute(0, 2, 3, 1) / count)
    table = table.reshape(batch_size, pooled_height, pooled_width, height, width, out_channels)
    return table.permute(0, 5, 1, 2, 3, 4).reshape(batch_size, channels, height, width)


# ----------------------------------------------------------------- pooling bins

def _round_half_away(values: Tensor) -> Tensor:
    """C's ``round``: halves away from zero (``torch.round`` rounds them to even)."""
    return torch.sign(values) * torch.floor(values.abs() + 0.5)


def _pool_bins(rois: Tensor, spatial_scale: float, pooled_height: int, pooled_width: int,
               height: int, width: int, extra: int, dtype: torch.dtype, last: int = 0
               ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per roi and bin: [start, end) rows (K, PH) and columns (K, PW), clipped to
    [0, size - ``last``] (``extra`` is roi_pool's +1 in the roi size)."""
    scaled = _round_half_away(rois[:, 1:].to(dtype) * spatial_scale).long()
    start_w, start_h, end_w, end_h = scaled.unbind(1)
    roi_width = (end_w - start_w + extra).clamp(min=1)
    roi_height = (end_h - start_h + extra).clamp(min=1)
    bin_h = roi_height.to(dtype)[:, None] / pooled_height
    bin_w = roi_width.to(dtype)[:, None] / pooled_width
    ph = torch.arange(pooled_height, dtype=dtype)[None, :]
    pw = torch.arange(pooled_width, dtype=dtype)[None, :]
    h0 = (torch.floor(ph * bin_h).long() + start_h[:, None]).clamp(0, height - last)
    h1 = (torch.ceil((ph + 1) * bin_h).long() + start_h[:, None]).clamp(0, height - last)
    w0 = (torch.floor(pw * bin_w).long() + start_w[:, None]).clamp(0, width - last)
    w1 = (torch.ceil((pw + 1) * bin_w).long() + start_w[:, None]).clamp(0, width - last)
    return h0, h1, w0, w1


# ---------------------------------------------------------------------- roi_pool

def roi_pool(input: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int,
             pooled_width: int) -> Tuple[Tensor, Tensor]:
    """Max pooling per bin: (output (K, C, PH, PW), argmax (int32 flat index in the
    plane, -1 for an empty bin)); ties go to the first element in row-major order."""
    _check_rois(input, rois)
    batch, channels, height, width = input.shape
    count = rois.size(0)
    output = input.new_zeros(count, channels, pooled_height, pooled_width)
    argmax = torch.full((count, channels, pooled_height, pooled_width), -1, dtype=torch.int32,
                        device=input.device)
    if output.numel() == 0:
        return output, argmax
    h0, h1, w0, w1 = _pool_bins(rois, spatial_scale, pooled_height, pooled_width, height,
                                width, 1, input.dtype)
    span_h = max(1, int((h1 - h0).max()))
    span_w = max(1, int((w1 - w0).max()))
    table = input.permute(0, 2, 3, 1).reshape(-1, channels)
    batch_index = _batch_of(rois)
    # The kernel starts each bin at -FLT_MAX converted to the input's type (-inf in half)
    lowest = float(torch.tensor(-torch.finfo(torch.float32).max).to(input.dtype))
    step = max(1, CHUNK_ELEMENTS // (pooled_height * pooled_width * span_h * span_w * channels))
    for first in range(0, count, step):
        chunk = slice(first, first + step)
        rows = h0[chunk, :, None] + torch.arange(span_h)                  # (k, PH, sh)
        columns = w0[chunk, :, None] + torch.arange(span_w)               # (k, PW, sw)
        inside = ((rows < h1[chunk, :, None])[:, :, None, :, None]
                  & (columns < w1[chunk, :, None])[:, None, :, None, :])  # (k,PH,PW,sh,sw)
        plane_index = (rows.clamp(max=height - 1)[:, :, None, :, None] * width
                       + columns.clamp(max=width - 1)[:, None, :, None, :])
        values = table[batch_index[chunk, None, None, None, None] * (height * width)
                       + plane_index]                                      # (..., C)
        values = values.masked_fill(~inside[..., None] | values.isnan(), float("-inf"))
        k = values.size(0)
        best, where = values.reshape(k, pooled_height, pooled_width, -1, channels).max(dim=3)
        chosen_index = torch.gather(plane_index.reshape(k, pooled_height, pooled_width, -1),
                                    3, where).to(torch.int32)
        found = best > lowest
        empty = ~inside.reshape(k, pooled_height, pooled_width, -1).any(dim=3)[..., None]
        best = torch.where(found, best, torch.full_like(best, lowest))
        best = best.masked_fill(empty, 0)
        chosen_index = torch.where(found, chosen_index, torch.full_like(chosen_index, -1))
        output[chunk] = best.permute(0, 3, 1, 2)
        argmax[chunk] = chosen_index.permute(0, 3, 1, 2)
    return output, argmax


def _roi_pool_backward(grad: Tensor, rois: Tensor, argmax: Tensor, spatial_scale: float,
                       pooled_height: int, pooled_width: int, batch_size: int, channels: int,
                       height: int, width: int) -> Tensor:
    """The gradient of :func:`roi_pool`: each bin's gradient to its argmax."""
    grad_input = grad.new_zeros(batch_size, channels, height * width)
    if grad.numel() == 0 or grad_input.numel() == 0:
        return grad_input.reshape(batch_size, channels, height, width)
    count = rois.size(0)
    taken = argmax.long().reshape(count, channels, -1)
    values = grad.reshape(count, channels, -1) * (taken >= 0)
    flat = (_batch_of(rois)[:, None, None] * channels + torch.arange(channels)[None, :, None]) \
        * (height * width) + taken.clamp(min=0)
    grad_input.reshape(-1).index_add_(0, flat.reshape(-1), values.reshape(-1).to(grad.dtype))
    return grad_input.reshape(batch_size, channels, height, width)


# ------------------------------------------------------------------- ps_roi_pool

def _integral(planes: Tensor) -> Tensor:
    """Summed-area tables (..., H + 1, W + 1) in float64 (sums of any rectangle in 4 reads)."""
    padded = torch.nn.functional.pad(planes.to(torch.float64), (1, 0, 1, 0))
    return padded.cumsum(-2).cumsum(-1)


def ps_roi_pool(input: Tensor, rois: Tensor, spatial_scale: float, pooled_height: int,
                pooled_width: int) -> Tuple[Tensor, Tensor]:
    """Position-sensitive average pooling per bin: (output, channel mapping)."""
    _check_rois(input, rois)
    batch, channels, height, width = input.shape
    _, out_channels = _ps_table(input[:0], pooled_height, pooled_width)
    count = rois.size(0)
    output = input.new_zeros(count, out_channels, pooled_height, pooled_width)
    mapping = _channel_mapping(rois, out_channels, pooled_height, pooled_width)
    if output.numel() == 0:
        return output, mapping
    # The forward kernel clips the bins to the last row and column (its backward to
    # the map's size): both kept, so the gradients match the compiled ones too.
    h0, h1, w0, w1 = _pool_bins(rois, spatial_scale, pooled_height, pooled_width, height,
                                width, 0, input.dtype, last=1)
    sums = _integral(input).reshape(batch, out_channels, pooled_height, pooled_width,
                                    height + 1, width + 1)
    b = _batch_of(rois)[:, None, None, None]
    c = torch.arange(out_channels)[None, :, None, None]
    ph = torch.arange(pooled_height)[None, None, :, None]
    pw = torch.arange(pooled_width)[None, None, None, :]
    top, bottom = h0[:, None, :, None], h1[:, None, :, None]
    left, right = w0[:, None, None, :], w1[:, None, None, :]
    total = (sums[b, c, ph, pw, bottom, right] - sums[b, c, ph, pw, top, right]
             - sums[b, c, ph, pw, bottom, left] + sums[b, c, ph, pw, top, left])
    area = ((bottom - top) * (right - left)).to(torch.float64)
    empty = (bottom <= top) | (right <= left)
    pooled = torch.where(empty, torch.zeros_like(total), total / area.clamp(min=1))
    return pooled.to(input.dtype), mapping


def _ps_roi_pool_backward(grad: Tensor, rois: Tensor, channel_mapping: Tensor,
                          spatial_scale: float, pooled_height: int, pooled_width: int,
                          batch_size: int, channels: int, height: int, width: int) -> Tensor:
    """The gradient of :func:`ps_roi_pool`: each bin's gradient spread evenly over it
    (corner marks on a difference table, then two cumulative sums)."""
    out_channels = channels // (pooled_height * pooled_width)
    marks = torch.zeros(batch_size * channels * (height + 1) * (width + 1),
                        dtype=torch.float64, device=grad.device)
    if grad.numel() and rois.size(0):
        h0, h1, w0, w1 = _pool_bins(rois, spatial_scale, pooled_height, pooled_width, height,
                                    width, 0, grad.dtype)
        top, bottom = h0[:, None, :, None], h1[:, None, :, None]
        left, right = w0[:, None, None, :], w1[:, None, None, :]
        empty = (bottom <= top) | (right <= left)
        share = grad.to(torch.float64) / ((bottom - top) * (right - left)).clamp(min=1)
        share = torch.where(empty, torch.zeros_like(share), share)
        plane = (((_batch_of(rois)[:, None, None, None] * out_channels
                   + torch.arange(out_channels)[None, :, None, None]) * pooled_height
                  + torch.arange(pooled_height)[None, None, :, None]) * pooled_width
                 + torch.arange(pooled_width)[None, None, None, :]) * ((height + 1) * (width + 1))
        for row, column, sign in ((top, left, 1), (top, right, -1), (bottom, left, -1),
                                  (bottom, right, 1)):
            index = plane + row * (width + 1) + column
            marks.index_add_(0, index.reshape(-1), (share * sign).reshape(-1))
    marks = marks.reshape(batch_size, channels, height + 1, width + 1).cumsum(-2).cumsum(-1)
    return marks[..., :height, :width].to(grad.dtype).contiguous()


# ----------------------------------------------------------------- deform_conv2d
#
# Laid out position-major: the sampled columns are (B, L, K, C_in) (L output positions,
# K kernel taps), so that each bilinear corner is one row gather of C_in/G contiguous
# channels (and its gradient one row index_add), and the convolution one matmul.

def _deform_samples(input: Tensor, offset: Tensor, kernel: Tuple[int, int],
                    stride: Tuple[int, int], padding: Tuple[int, int],
                    dilation: Tuple[int, int], offset_groups: int):
    """The sampling of deformable convolution, each tensor (B, L, K, G): per corner the
    row of the (B*G*H*W, C_in/G) channel table and its weight (zero where the corner is
    outside the map: it reads 0), the fractions ly, lx, hy, hx, and the "inside" flag
    (the kernel samples nothing outside (-1, H) x (-1, W))."""
    batch, _, height, width = input.shape
    kernel_h, kernel_w = kernel
    out_h, out_w = offset.shape[-2:]
    taps = kernel_h * kernel_w
    dtype = input.dtype
    pairs = offset.reshape(batch, offset_groups, taps, 2, out_h * out_w).permute(0, 4, 2, 1, 3)
    tap_y = (torch.arange(kernel_h, dtype=dtype) * dilation[0]).repeat_interleave(kernel_w)
    tap_x = (torch.arange(kernel_w, dtype=dtype) * dilation[1]).repeat(kernel_h)
    out_y = (torch.arange(out_h, dtype=dtype) * stride[0] - padding[0]).repeat_interleave(out_w)
    out_x = (torch.arange(out_w, dtype=dtype) * stride[1] - padding[1]).repeat(out_h)
    y = (out_y[:, None] + tap_y[None, :])[None, :, :, None] + pairs[..., 0]
    x = (out_x[:, None] + tap_x[None, :])[None, :, :, None] + pairs[..., 1]
    inside = (y > -1) & (y < height) & (x > -1) & (x < width)
    y = torch.where(inside, y, torch.zeros_like(y))
    x = torch.where(inside, x, torch.zeros_like(x))
    y_low, x_low = y.floor(), x.floor()
    ly, lx = y - y_low, x - x_low
    hy, hx = 1 - ly, 1 - lx
    y_low, x_low = y_low.long(), x_low.long()
    plane = ((torch.arange(batch)[:, None, None, None] * offset_groups
              + torch.arange(offset_groups)) * (height * width))
    corners = []
    for row, column, weight in ((y_low, x_low, hy * hx), (y_low, x_low + 1, hy * lx),
                                (y_low + 1, x_low, ly * hx), (y_low + 1, x_low + 1, ly * lx)):
        valid = inside & (row >= 0) & (row <= height - 1) & (column >= 0) & (column <= width - 1)
        index = plane + row.clamp(0, height - 1) * width + column.clamp(0, width - 1)
        corners.append((index, weight * valid.to(dtype), valid.to(dtype)))
    return corners, (ly, lx, hy, hx, inside.to(dtype))


def _deform_table(input: Tensor, offset_groups: int) -> Tensor:
    """Rows (batch, offset group, y, x) of the group's channels: (B*G*H*W, C_in/G)."""
    batch, channels, height, width = input.shape
    return input.reshape(batch, offset_groups, channels // offset_groups, height * width) \
        .transpose(2, 3).reshape(-1, channels // offset_groups)


def _mask_rows(mask: Tensor, batch: int, offset_groups: int, taps: int, positions: int
               ) -> Tensor:
    """The modulation mask as (B, L, K, G, 1)."""
    return mask.reshape(batch, offset_groups, taps, positions).permute(0, 3, 2, 1)[..., None]


def _weight_matrix(weight: Tensor, groups: int) -> Tensor:
    """(groups, C_out/groups, K * C_in/groups), ordered as the columns' (tap, channel)."""
    out_channels = weight.size(0)
    return weight.permute(0, 2, 3, 1).reshape(groups, out_channels // groups, -1)


def _grouped_columns(columns: Tensor, groups: int) -> Tensor:
    """(B, L, K, C_in) columns as (B, groups, L, K * C_in/groups)."""
    batch, positions, taps, channels = columns.shape
    if groups == 1:
        return columns.reshape(batch, 1, positions, taps * channels)
    grouped = columns.reshape(batch, positions, taps, groups, channels // groups)
    return grouped.permute(0, 3, 1, 2, 4).reshape(batch, groups, positions, -1)


def deform_conv2d(input: Tensor, weight: Tensor, offset: Tensor, mask: Tensor, bias: Tensor,
                  stride_h: int, stride_w: int, pad_h: int, pad_w: int, dilation_h: int,
                  dilation_w: int, groups: int, offset_groups: int, use_mask: bool) -> Tensor:
    """Deformable convolution v1/v2 (torchvision's deform_conv2d)."""
    _check_deform(input, weight, offset, mask, (stride_h, stride_w), (pad_h, pad_w),
                  (dilation_h, dilation_w), groups, offset_groups, use_mask)
    batch = input.size(0)
    out_channels = weight.size(0)
    out_h, out_w = offset.shape[-2:]
    if batch == 0 or input.numel() == 0:
        return input.new_zeros(batch, out_channels, out_h, out_w) + bias.reshape(1, -1, 1, 1)
    columns, _ = _deform_columns(input, offset, mask, tuple(weight.shape[-2:]),
                                 (stride_h, stride_w), (pad_h, pad_w),
                                 (dilation_h, dilation_w), offset_groups, use_mask)
    output = torch.matmul(_grouped_columns(columns, groups),
                          _weight_matrix(weight, groups).transpose(1, 2)[None])
    # (B, groups, L, C_out/groups) -> (B, C_out, H_out, W_out)
    output = output.permute(0, 1, 3, 2).reshape(batch, out_channels, out_h, out_w)
    return output + bias.reshape(1, -1, 1, 1)


def _deform_columns(input: Tensor, offset: Tensor, mask: Tensor, kernel: Tuple[int, ...],
                    stride: Tuple[int, int], padding: Tuple[int, int],
                    dilation: Tuple[int, int], offset_groups: int, use_mask: bool
                    ) -> Tuple[Tensor, Any]:
    """The columns (B, L, K, C_in) of the deformed sampling times the mask, and what
    the backward needs of the sampling (corners, gathered corner values, fractions)."""
    batch, channels, _, _ = input.shape
    kernel_h, kernel_w = kernel
    table = _deform_table(input, offset_groups)
    corners, fractions = _deform_samples(input, offset, (kernel_h, kernel_w), stride, padding,
                                         dilation, offset_groups)
    # index_select, not advanced indexing: several times faster on the CPU
    values = [table.index_select(0, index.reshape(-1)).view(*index.shape, table.size(1))
              for index, _, _ in corners]                       # (B, L, K, G, C_in/G)
    sampled = values[0] * corners[0][1][..., None]
    for value, (_, weight, _) in zip(values[1:], corners[1:]):
        sampled.addcmul_(value, weight[..., None])
    positions, taps = sampled.size(1), sampled.size(2)
    columns = sampled
    if use_mask:
        columns = sampled * _mask_rows(mask, batch, offset_groups, taps, positions)
    return columns.reshape(batch, positions, taps, channels), (corners, values, fractions,
                                                                sampled)


def _deform_conv2d_backward(grad: Tensor, input: Tensor, weight: Tensor, offset: Tensor,
                            mask: Tensor, bias: Tensor, stride_h: int, stride_w: int,
                            pad_h: int, pad_w: int, dilation_h: int, dilation_w: int,
                            groups: int, offset_groups: int, use_mask: bool
                            ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Gradients of :func:`deform_conv2d` with respect to input, weight, offset, mask
    and bias."""
    batch, in_channels, height, width = input.shape
    out_channels, _, kernel_h, kernel_w = weight.shape
    out_h, out_w = offset.shape[-2:]
    if batch == 0 or input.numel() == 0:
        return (torch.zeros_like(input), torch.zeros_like(weight), torch.zeros_like(offset),
                torch.zeros_like(mask), grad.sum(dim=(0, 2, 3)) if bias.numel()
                else torch.zeros_like(bias))
    taps, positions = kernel_h * kernel_w, out_h * out_w
    group_channels = in_channels // offset_groups
    columns, (corners, values, fractions, sampled) = _deform_columns(
        input, offset, mask, (kernel_h, kernel_w), (stride_h, stride_w), (pad_h, pad_w),
        (dilation_h, dilation_w), offset_groups, use_mask)
    ly, lx, hy, hx, inside = fractions
    matrix = _weight_matrix(weight, groups)                      # (g, C_out/g, K*C_in/g)
    grad_out = grad.reshape(batch, groups, out_channels // groups, positions)
    grad_weight = torch.matmul(grad_out, _grouped_columns(columns, groups)).sum(0)
    grad_weight = grad_weight.reshape(out_channels, kernel_h, kernel_w, -1).permute(0, 3, 1, 2)
    grad_columns = torch.matmul(grad_out.transpose(2, 3), matrix[None])  # (B, g, L, K*C/g)
    if groups == 1:
        grad_columns = grad_columns.reshape(batch, positions, taps, offset_groups,
                                            group_channels)
    else:
        grad_columns = grad_columns.reshape(batch, groups, positions, taps, -1).permute(
            0, 2, 3, 1, 4).reshape(batch, positions, taps, offset_groups, group_channels)
    grad_bias = grad.sum(dim=(0, 2, 3)) if bias.numel() else torch.zeros_like(bias)
    # Per corner, the gradient of the columns against the corner's values: one product
    # and sum over channels each, from which the mask's and the offsets' gradients are
    # small (B, L, K, G) combinations.
    # (in place in the gathered corner values, which nothing reads afterwards)
    against = [value.mul_(grad_columns).sum(-1) for value in values]
    if use_mask:
        mask_rows = _mask_rows(mask, batch, offset_groups, taps, positions)[..., 0]
        grad_mask = sum(weight_value * dot for (_, weight_value, _), dot in zip(corners, against))
        grad_mask = grad_mask.permute(0, 3, 2, 1).reshape(mask.shape)
        grad_sampled = grad_columns * mask_rows[..., None]
        against = [dot * mask_rows for dot in against]
    else:
        grad_mask = torch.zeros_like(mask)
        grad_sampled = grad_columns
    grad_table = input.new_zeros(batch * offset_groups * height * width, group_channels)
    for index, weight_value, _ in corners:
        grad_table.index_add_(0, index.reshape(-1),
                              (grad_sampled * weight_value[..., None]).reshape(-1,
                                                                               group_channels))
    grad_input = grad_table.reshape(batch, offset_groups, height * width, group_channels) \
        .transpose(2, 3).reshape(input.shape)
    # d(sampled)/dy and /dx: the bilinear weights' derivatives against the corner values
    # (each read as 0 outside the map)
    d1, d2, d3, d4 = (dot * valid for dot, (_, _, valid) in zip(against, corners))
    grad_y = (hx * (d3 - d1) + lx * (d4 - d2)) * inside
    grad_x = (hy * (d2 - d1) + ly * (d4 - d3)) * inside
    # (B, L, K, G) twice -> (B, G, K, 2, L)
    grad_offset = torch.stack([grad_y, grad_x], -1).permute(0, 3, 2, 4, 1)
    return (grad_input, grad_weight.contiguous(), grad_offset.reshape(offset.shape),
            grad_mask, grad_bias)


# ------------------------------------------------------------------------ checks

def _check(condition: bool, message: str) -> None:
    if not condition:
        raise RuntimeError(message)


def _check_deform(input: Tensor, weight: Tensor, offset: Tensor, mask: Tensor,
                  stride: Tuple[int, int], padding: Tuple[int, int],
                  dilation: Tuple[int, int], groups: int, offset_groups: int,
                  use_mask: bool) -> None:
    """The compiled kernel's argument checks, with its messages."""
    for name, tensor in (("input", input), ("offset", offset), ("weight", weight)):
        _check(tensor.dim() == 4, f"{name} must be a 4d tensor, got {tensor.dim()}d")
    _check(not use_mask or mask.dim() == 4, f"mask must be a 4d tensor, got {mask.dim()}d")
    kernel_h, kernel_w = weight.shape[-2:]
    _check(kernel_h > 0 and kernel_w > 0, f"weight_h: {kernel_h} weight_w: {kernel_w}")
    _check(min(stride) > 0, f"stride_h: {stride[0]} stride_w: {stride[1]}")
    _check(min(padding) >= 0, f"pad_h: {padding[0]} pad_w: {padding[1]}")
    _check(min(dilation) > 0, f"dilation_h: {dilation[0]} dilation_w: {dilation[1]}")
    _check(weight.size(1) * groups == input.size(1),
           f"weight.size(1) * groups ({weight.size(1)} * {groups}) must be the input's "
           f"channels ({input.size(1)})")
    _check(weight.size(0) % groups == 0, "weight.size(0) must be a multiple of groups")
    taps = kernel_h * kernel_w
    _check(offset.size(1) == offset_groups * 2 * taps,
           f"offset.shape[1] is not valid: got: {offset.size(1)} expected: "
           f"{offset_groups * 2 * taps}")
    if use_mask:
        _check(mask.size(1) == offset_groups * taps,
               f"mask.shape[1] is not valid: got: {mask.size(1)} expected: "
               f"{offset_groups * taps}")
    _check(input.size(1) % offset_groups == 0,
           "input channels must be a multiple of offset groups")
    _check(offset.size(0) == input.size(0), "invalid batch size of offset")
    out_h = (input.size(2) + 2 * padding[0] - (dilation[0] * (kernel_h - 1) + 1)) \
        // stride[0] + 1
    out_w = (input.size(3) + 2 * padding[1] - (dilation[1] * (kernel_w - 1) + 1)) \
        // stride[1] + 1
    _check(offset.size(2) == out_h and offset.size(3) == out_w,
           f"offset output dims: ({offset.size(2)}, {offset.size(3)}) - computed output "
           f"dims: ({out_h}, {out_w})")
    _check(mask.size(0) == input.size(0), "invalid batch size of mask")
    if use_mask:
        _check(mask.size(2) == out_h and mask.size(3) == out_w,
               f"mask output dims: ({mask.size(2)}, {mask.size(3)}) - computed output dims: "
               f"({out_h}, {out_w})")
    _check(out_h > 0 and out_w > 0,
           f"Calculated output size too small - out_h: {out_h} out_w: {out_w}")


def _check_rois(input: Tensor, rois: Tensor) -> None:
    _check(rois.dim() == 2 and rois.size(1) == 5, "rois must have shape as Tensor[K, 5]")
    _check(input.dim() == 4, f"input must be a 4d tensor (N, C, H, W), got {input.dim()}d")
    _check(input.dtype == rois.dtype,
           f"Expected tensor for input to have the same type as tensor for rois; but type "
           f"{input.dtype} does not equal {rois.dtype}")


def cuda_version() -> int:
    """-1: the stand-in was built with no CUDA (torchvision's ``_cuda_version``)."""
    return -1


__all__ = ["nms", "qnms", "box_iou_rotated", "roi_align", "_roi_align_backward", "qroi_align",
           "ps_roi_align", "_ps_roi_align_backward", "roi_pool", "_roi_pool_backward",
           "ps_roi_pool", "_ps_roi_pool_backward", "deform_conv2d", "_deform_conv2d_backward",
           "cuda_version"]

"""RoIAlign kernels: ``roi_align_forward`` and ``roi_align_backward``.

Reproduces mmcv's (Detectron2's) RoIAlign: each output bin averages (or takes
the max of) a ``grid_h x grid_w`` lattice of bilinear samples, where the grid
is ``sampling_ratio`` per side or, if that is 0, ``ceil(roi_size / bins)``
per RoI. Since the adaptive grid differs between RoIs, every RoI is sampled
on the largest grid and the extra samples are masked out.

RoIs of negative size (aligned mode) follow mmcv's CUDA kernel, not its CPU one
(see ``_geometry``). The bilinear rule is mmcv's, not ``grid_sample``'s: a sample further than one
pixel outside the map is zero, anything else is clamped into the map. Its
weights factorise into a y part and an x part, which the code exploits.

Samples are gathered from a channels-last copy of the input, so one gather
fetches all channels of a pixel; RoIs are processed in chunks to bound the
(RoIs x samples x channels) intermediate.
"""
from __future__ import annotations

from typing import Iterator, NamedTuple, Tuple

import torch

#: Upper bound on elements of the per-chunk (rois, samples, channels) buffer.
CHUNK_ELEMENTS = 1 << 24


class _Axis(NamedTuple):
    """Bilinear taps along one axis for every (roi, bin, sample)."""
    low: torch.Tensor   # int64 index of the lower tap
    high: torch.Tensor  # int64 index of the upper tap
    w_low: torch.Tensor
    w_high: torch.Tensor


def _axis_taps(coord: torch.Tensor, size: int) -> _Axis:
    """mmcv's ``bilinear_interpolate`` rule along one axis.

    Out of range (< -1 or > size) gives zero weights; otherwise the
    coordinate is clamped at 0 and at ``size - 1``.
    """
    outside = (coord < -1.0) | (coord > size)
    c = coord.clamp(min=0)
    low = c.floor().long()
    at_end = low >= size - 1
    low = torch.where(at_end, torch.full_like(low, size - 1), low)
    high = torch.where(at_end, low, low + 1)
    c = torch.where(at_end, low.to(c.dtype), c)
    frac = c - low.to(c.dtype)
    w_high = torch.where(outside, torch.zeros_like(frac), frac)
    w_low = torch.where(outside, torch.zeros_like(frac), 1 - frac)
    return _Axis(low, high, w_low, w_high)


class _Geometry(NamedTuple):
    batch: torch.Tensor   # (R,) int64 batch index of each RoI
    ys: torch.Tensor      # (R, PH, GH) sample y coordinates
    xs: torch.Tensor      # (R, PW, GW) sample x coordinates
    y_ok: torch.Tensor    # (R, GH) bool, sample row inside this RoI's grid
    x_ok: torch.Tensor    # (R, GW) bool
    count: torch.Tensor   # (R,) number of samples per bin (>= 1)


def _geometry(rois: torch.Tensor, pooled_h: int, pooled_w: int,
              spatial_scale: float, sampling_ratio: int, aligned: bool,
              dtype: torch.dtype) -> _Geometry:
    rois = rois.to(dtype)
    offset = 0.5 if aligned else 0.0
    start_w = rois[:, 1] * spatial_scale - offset
    start_h = rois[:, 2] * spatial_scale - offset
    roi_w = rois[:, 3] * spatial_scale - offset - start_w
    roi_h = rois[:, 4] * spatial_scale - offset - start_h
    # An inverted aligned RoI (x2 < x1, as Sparse R-CNN's and QueryInst's boxes can be
    # early in training) is sampled as mmcv's CUDA kernel samples it: backwards with a
    # fixed ``sampling_ratio``, no sample (zeros) with the adaptive grid. mmcv's CPU
    # kernel refuses it instead; the CUDA behaviour is the one these models run on.
    if not aligned:  # legacy behaviour: force RoIs to be at least 1x1
        roi_w = roi_w.clamp(min=1.0)
        roi_h = roi_h.clamp(min=1.0)
    bin_h = roi_h / pooled_h
    bin_w = roi_w / pooled_w
    if sampling_ratio > 0:
        grid_h = torch.full_like(roi_h, sampling_ratio, dtype=torch.long)
        grid_w = torch.full_like(roi_w, sampling_ratio, dtype=torch.long)
    else:
        grid_h = torch.ceil(roi_h / pooled_h).long()
        grid_w = torch.ceil(roi_w / pooled_w).long()
    max_gh = max(int(grid_h.max()), 1)
    max_gw = max(int(grid_w.max()), 1)
    dev = rois.device
    iy = torch.arange(max_gh, device=dev, dtype=dtype)
    ix = torch.arange(max_gw, device=dev, dtype=dtype)
    ph = torch.arange(pooled_h, device=dev, dtype=dtype)
    pw = torch.arange(pooled_w, device=dev, dtype=dtype)
    gh = grid_h.clamp(min=1).to(dtype)
    gw = grid_w.clamp(min=1).to(dtype)
    ys = (start_h[:, None, None] + ph[None, :, None] * bin_h[:, None, None] +
          (iy[None, None, :] + 0.5) * bin_h[:, None, None] / gh[:, None, None])
    xs = (start_w[:, None, None] + pw[None, :, None] * bin_w[:, None, None] +
          (ix[None, None, :] + 0.5) * bin_w[:, None, None] / gw[:, None, None])
    y_ok = torch.arange(max_gh, device=dev)[None] < grid_h[:, None]
    x_ok = torch.arange(max_gw, device=dev)[None] < grid_w[:, None]
    count = (grid_h * grid_w).clamp(min=1).to(dtype)
    return _Geometry(rois[:, 0].long(), ys, xs, y_ok, x_ok, count)


def _corner_indices_and_weights(
        geo: _Geometry, height: int, width: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Flat pixel indices and weights of the 4 bilinear taps per sample.

    Returns two (R, PH, PW, GH, GW, 4) tensors; indices address rows of the
    (N*H*W, C) channels-last input. Weights of masked samples are zero.
    """
    ty = _axis_taps(geo.ys, height)  # (R, PH, GH)
    tx = _axis_taps(geo.xs, width)   # (R, PW, GW)
    # Broadcast to (R, PH, PW, GH, GW).
    def y_(t):  # noqa: E306 - tiny local reshaper
        return t[:, :, None, :, None]

    def x_(t):
        return t[:, None, :, None, :]

    base = (geo.batch * height * width)[:, None, None, None, None]
    rows = (y_(ty.low), y_(ty.low), y_(ty.high), y_(ty.high))
    cols = (x_(tx.low), x_(tx.high), x_(tx.low), x_(tx.high))
    wys = (y_(ty.w_low), y_(ty.w_low), y_(ty.w_high), y_(ty.w_high))
    wxs = (x_(tx.w_low), x_(tx.w_high), x_(tx.w_low), x_(tx.w_high))
    mask = (geo.y_ok[:, None, None, :, None] &
            geo.x_ok[:, None, None, None, :]).to(geo.ys.dtype)
    idx = torch.stack([base + r * width + c for r, c in zip(rows, cols)], -1)
    wts = torch.stack([wy * wx * mask for wy, wx in zip(wys, wxs)], -1)
    return idx, wts


def _roi_chunks(num_rois: int, per_roi: int) -> Iterator[slice]:
    step = max(1, CHUNK_ELEMENTS // max(per_roi, 1))
    for start in range(0, num_rois, step):
        yield slice(start, min(num_rois, start + step))


def roi_align_forward(input: torch.Tensor, rois: torch.Tensor,
                      output: torch.Tensor, argmax_y: torch.Tensor,
                      argmax_x: torch.Tensor, aligned_height: int,
                      aligned_width: int, spatial_scale: float,
                      sampling_ratio: int, pool_mode: int,
                      aligned: bool) -> None:
    """Ext ``roi_align_forward``; fills ``output`` (R, C, PH, PW).

    ``rois`` rows are (batch_idx, x1, y1, x2, y2). ``pool_mode`` 1 averages
    the samples of a bin; 0 takes their maximum and records its sample
    coordinates in ``argmax_y``/``argmax_x`` (-1 when the bin is empty), which
    the backward pass routes the gradient through.
    """
    num_rois = rois.shape[0]
    if num_rois == 0:
        return
    n, c, h, w = input.shape
    ph, pw = int(aligned_height), int(aligned_width)
    geo = _geometry(rois, ph, pw, float(spatial_scale), int(sampling_ratio),
                    bool(aligned), input.dtype)
    gh, gw = geo.ys.shape[-1], geo.xs.shape[-1]
    table = input.permute(0, 2, 3, 1).reshape(n * h * w, c)
    per_roi = ph * pw * gh * gw * c
    for sl in _roi_chunks(num_rois, per_roi):
        sub = _Geometry(*(t[sl] for t in geo))
        idx, wts = _corner_indices_and_weights(sub, h, w)
        r = idx.shape[0]
        # (r, PH, PW, GH, GW, C): one channel vector per tap.
        vals = sum(table[idx[..., k].reshape(-1)].view(r, ph, pw, gh, gw, c) *
                   wts[..., k, None] for k in range(4))
        vals = vals.flatten(3, 4)  # (r, PH, PW, S, C)
        if int(pool_mode) == 1:
            out = vals.sum(3) / sub.count[:, None, None, None]
        else:
            valid = (sub.y_ok[:, :, None] & sub.x_ok[:, None, :]).flatten(1)
            valid = valid[:, None, None, :, None]
            masked = torch.where(valid, vals,
                                 torch.full_like(vals, -float("inf")))
            best = masked.max(dim=3).values  # (r, PH, PW, C)
            # mmcv starts from -10000 and keeps the first strict maximum.
            has = best > -10000
            is_best = (masked == best[:, :, :, None]) & valid
            s = is_best.shape[3]
            first = torch.where(
                is_best, torch.arange(s, device=input.device)[:, None],
                torch.full_like(is_best, s, dtype=torch.long)).min(3).values
            first = first.clamp(max=s - 1)
            iy = torch.div(first, gw, rounding_mode="floor")
            ix = first % gw
            ys = sub.ys[:, :, None, :].expand(-1, -1, pw, -1)  # (r,PH,PW,GH)
            xs = sub.xs[:, None, :, :].expand(-1, ph, -1, -1)  # (r,PH,PW,GW)
            ay = ys.gather(3, iy)
            ax = xs.gather(3, ix)
            neg = torch.full_like(best, -1.0)
            out = torch.where(has, best, torch.full_like(best, -10000.0))
            argmax_y[sl] = torch.where(has, ay, neg).permute(0, 3, 1, 2).to(
                argmax_y.dtype)
            argmax_x[sl] = torch.where(has, ax, neg).permute(0, 3, 1, 2).to(
                argmax_x.dtype)
        output[sl] = out.permute(0, 3, 1, 2).to(output.dtype)


def roi_align_backward(grad_output: torch.Tensor, rois: torch.Tensor,
                       argmax_y: torch.Tensor, argmax_x: torch.Tensor,
                       grad_input: torch.Tensor, aligned_height: int,
                       aligned_width: int, spatial_scale: float,
                       sampling_ratio: int, pool_mode: int,
                       aligned: bool) -> None:
    """Ext ``roi_align_backward``; accumulates into ``grad_input``.

    Average mode spreads each bin's gradient over its samples' bilinear taps
    (divided by the sample count); max mode sends it to the taps of the
    recorded argmax sample.
    """
    num_rois = rois.shape[0]
    if num_rois == 0:
        return
    n, c, h, w = grad_input.shape
    ph, pw = int(aligned_height), int(aligned_width)
    dtype = grad_input.dtype
    acc = grad_input.new_zeros((n * h * w, c))
    # (R, PH, PW, C): channel vector per bin, matching the gather layout.
    g = grad_output.permute(0, 2, 3, 1).to(dtype)
    if int(pool_mode) == 1:
        geo = _geometry(rois, ph, pw, float(spatial_scale),
                        int(sampling_ratio), bool(aligned), dtype)
        gh, gw = geo.ys.shape[-1], geo.xs.shape[-1]
        per_roi = ph * pw * gh * gw * c
        for sl in _roi_chunks(num_rois, per_roi):
            sub = _Geometry(*(t[sl] for t in geo))
            idx, wts = _corner_indices_and_weights(sub, h, w)
            gb = g[sl] / sub.count[:, None, None, None]
            for k in range(4):
                contrib = gb[:, :, :, None, None, :] * wts[..., k, None]
                acc.index_add_(0, idx[..., k].reshape(-1),
                               contrib.reshape(-1, c))
    else:
        ay = argmax_y.permute(0, 2, 3, 1).to(dtype)  # (R, PH, PW, C)
        ax = argmax_x.permute(0, 2, 3, 1).to(dtype)
        batch = rois[:, 0].long()[:, None, None, None]
        ty = _axis_taps(ay, h)
        tx = _axis_taps(ax, w)
        has = ay != -1
        chan = torch.arange(c, device=grad_input.device)
        base = batch * h * w
        for row, wy in ((ty.low, ty.w_low), (ty.high, ty.w_high)):
            for col, wx in ((tx.low, tx.w_low), (tx.high, tx.w_high)):
                flat = ((base + row * w + col) * c + chan).reshape(-1)
                contrib = torch.where(has, g * wy * wx, torch.zeros_like(g))
                acc.view(-1).index_add_(0, flat, contrib.reshape(-1))
    grad_input.add_(acc.view(n, h, w, c).permute(0, 3, 1, 2))

"""Time the torchvision stand-in of the ``cuda_extensions`` pack (torchvision's compiled
operators in pure PyTorch, ``registry/cuda_extensions/torchvision_ops.py``) against plain
PyTorch formulations of the same arithmetic, on the same inputs:

* ``nms``: the stand-in against the greedy loop every pure-PyTorch detector carries
  (take the best box, drop the ones overlapping it, repeat);
* ``roi_align`` forward and backward (``_roi_align_backward``): against the same
  bilinear sampling vectorised over every roi at the largest sampling grid, masked,
  with autograd's backward (the shape of torchvision's own Python ``_roi_align``);
* ``deform_conv2d`` forward and backward (``_deform_conv2d_backward``): against the
  same four-corner bilinear gather, mask and matmul with autograd's backward.

Sizes follow a two-stage detector's heads and a DCN layer, scaled down to fit a shared
2-core CPU. Neither side uses torchvision, so this runs in any venv with torch.

    .venv/bin/python benchmarks/packs/cuda_extensions/bench_torchvision_ops.py [--quick] [--json]
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Dict, List

# The repository (this file lies in benchmarks/packs/<pack>/).
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.insert(0, ROOT)
from benchmarks.packs.kernel_timing import Row, command_line, compared, rows_of_script  # noqa: E402


def _kernels() -> Any:
    try:
        return importlib.import_module("lazypatch.registry.cuda_extensions.torchvision_ops")
    except ImportError:
        return importlib.import_module("registry.cuda_extensions.torchvision_ops")


def nms_rows(kernels: Any, count: int, threshold: float, repetitions: int) -> List[Row]:
    import torch
    generator = torch.Generator().manual_seed(0)
    corners = torch.rand(count, 2, generator=generator) * 600
    boxes = torch.cat([corners, corners + torch.rand(count, 2, generator=generator) * 80 + 4], 1)
    scores = torch.rand(count, generator=generator)

    def greedy_loop() -> Any:
        x1, y1, x2, y2 = boxes.unbind(1)
        areas = (x2 - x1) * (y2 - y1)
        order = scores.argsort(descending=True, stable=True)
        kept = []
        while order.numel():
            best, rest = order[0], order[1:]
            kept.append(best)
            inter = ((torch.minimum(x2[best], x2[rest]) - torch.maximum(x1[best], x1[rest]))
                     .clamp(min=0) * (torch.minimum(y2[best], y2[rest])
                                      - torch.maximum(y1[best], y1[rest])).clamp(min=0))
            order = rest[inter / (areas[best] + areas[rest] - inter) <= threshold]
        return torch.stack(kept)

    assert torch.equal(kernels.nms(boxes, scores, threshold), greedy_loop())
    return [compared("nms", f"N={count:,}, IoU>{threshold}",
                     lambda: kernels.nms(boxes, scores, threshold), greedy_loop,
                     "greedy loop (best box, drop overlaps, repeat)", repetitions)]


def _roi_align_padded(features: Any, rois: Any, pooled: int, scale: float, ratio: int) -> Any:
    """roi_align with aligned=True, every roi sampled at the largest grid (masked)."""
    import torch
    batch, channels, height, width = features.shape
    start_w, start_h = rois[:, 1] * scale - 0.5, rois[:, 2] * scale - 0.5
    roi_w, roi_h = rois[:, 3] * scale - 0.5 - start_w, rois[:, 4] * scale - 0.5 - start_h
    bin_h, bin_w = roi_h / pooled, roi_w / pooled
    grid_h = torch.ceil(roi_h / pooled).long() if ratio <= 0 else torch.full_like(
        start_h, ratio, dtype=torch.long)
    grid_w = torch.ceil(roi_w / pooled).long() if ratio <= 0 else torch.full_like(
        start_w, ratio, dtype=torch.long)
    most_h, most_w = int(grid_h.max()), int(grid_w.max())
    p = torch.arange(pooled, dtype=features.dtype)
    iy = torch.arange(most_h, dtype=features.dtype)
    ix = torch.arange(most_w, dtype=features.dtype)
    y = (start_h[:, None, None] + p[None, :, None] * bin_h[:, None, None]
         + (iy[None, None, :] + 0.5) * bin_h[:, None, None] / grid_h[:, None, None])
    x = (start_w[:, None, None] + p[None, :, None] * bin_w[:, None, None]
         + (ix[None, None, :] + 0.5) * bin_w[:, None, None] / grid_w[:, None, None])
    used_y = iy[None, None, :] < grid_h[:, None, None]
    used_x = ix[None, None, :] < grid_w[:, None, None]

    def axis(t: Any, size: int) -> Any:
        valid = (t >= -1) & (t <= size)
        t = torch.where(valid, t, torch.zeros_like(t)).clamp(min=0)
        low = t.long().clamp(max=size - 1)
        high = (low + 1).clamp(max=size - 1)
        t = torch.where(t.long() >= size - 1, low.to(t.dtype), t)
        return low, high, t - low, valid
    y_low, y_high, ly, valid_y = axis(y, height)
    x_low, x_high, lx, valid_x = axis(x, width)
    wy = ((1 - ly) * (valid_y & used_y), ly * (valid_y & used_y))
    wx = ((1 - lx) * (valid_x & used_x), lx * (valid_x & used_x))
    planes = features.permute(0, 2, 3, 1)[rois[:, 0].long()]           # (K, H, W, C)
    k = torch.arange(rois.size(0))[:, None, None, None, None]
    total = 0
    for row, weight_y in zip((y_low, y_high), wy):
        for column, weight_x in zip((x_low, x_high), wx):
            values = planes[k, row[:, :, :, None, None], column[:, None, None, :, :]]
            weight = weight_y[:, :, :, None, None] * weight_x[:, None, None, :, :]
            total = total + values * weight[..., None]
    count = (grid_h * grid_w).clamp(min=1).to(features.dtype)
    return (total.sum(dim=(2, 4)) / count[:, None, None, None]).permute(0, 3, 1, 2)


def roi_align_rows(kernels: Any, rois_count: int, channels: int, size: int,
                   repetitions: int) -> List[Row]:
    import torch
    generator = torch.Generator().manual_seed(1)
    features = torch.randn(2, channels, size, size, generator=generator)
    scale, pooled = 1 / 16, 7
    image = size * 16
    corners = torch.rand(rois_count, 2, generator=generator) * image * 0.8
    extent = torch.rand(rois_count, 2, generator=generator) * image * 0.4 + 16
    rois = torch.cat([torch.randint(0, 2, (rois_count, 1), generator=generator).float(),
                      corners, corners + extent], 1)
    grad = torch.randn(rois_count, channels, pooled, pooled, generator=generator)
    shape = features.shape

    def ours() -> None:
        kernels.roi_align(features, rois, scale, pooled, pooled, -1, True)
        kernels._roi_align_backward(grad, rois, scale, pooled, pooled, *shape, -1, True)

    def padded() -> None:
        leaf = features.detach().requires_grad_()
        _roi_align_padded(leaf, rois, pooled, scale, -1).backward(grad)

    torch.testing.assert_close(kernels.roi_align(features, rois, scale, pooled, pooled, -1, True),
                               _roi_align_padded(features, rois, pooled, scale, -1),
                               rtol=1e-4, atol=1e-4)
    return [compared("roi_align fwd+bwd", f"K={rois_count}, C={channels}, {size}x{size}, 7x7",
                     ours, padded, "same sampling at the largest grid, masked (autograd)",
                     repetitions)]


def _deform_plain(x: Any, weight: Any, offset: Any, mask: Any, bias: Any, padding: int) -> Any:
    """deform_conv2d (stride 1, one group) as gathers of four corners, mask, matmul."""
    import torch
    batch, channels, height, width = x.shape
    out_channels, _, kernel_h, kernel_w = weight.shape
    out_h, out_w = offset.shape[-2:]
    taps = kernel_h * kernel_w
    pairs = offset.reshape(batch, taps, 2, out_h, out_w)
    ky = torch.arange(kernel_h, dtype=x.dtype).repeat_interleave(kernel_w)[:, None, None]
    kx = torch.arange(kernel_w, dtype=x.dtype).repeat(kernel_h)[:, None, None]
    y = torch.arange(out_h, dtype=x.dtype)[:, None] - padding + ky + pairs[:, :, 0]
    x_ = torch.arange(out_w, dtype=x.dtype)[None, :] - padding + kx + pairs[:, :, 1]
    y0, x0 = y.floor(), x_.floor()
    ly, lx = y - y0, x_ - x0
    inside = ((y > -1) & (y < height) & (x_ > -1) & (x_ < width)).to(x.dtype)
    flat = x.reshape(batch, channels, -1)
    sampled = 0
    for dy, wy in ((0, 1 - ly), (1, ly)):
        for dx, wx in ((0, 1 - lx), (1, lx)):
            row, column = y0.long() + dy, x0.long() + dx
            valid = ((row >= 0) & (row < height) & (column >= 0) & (column < width)).to(x.dtype)
            index = (row.clamp(0, height - 1) * width + column.clamp(0, width - 1))
            values = torch.gather(flat, 2, index.reshape(batch, 1, -1).expand(-1, channels, -1))
            sampled = sampled + values * (wy * wx * valid * inside).reshape(batch, 1, -1)
    columns = (sampled * mask.reshape(batch, 1, -1)).reshape(batch, channels * taps, -1)
    output = torch.matmul(weight.reshape(out_channels, -1), columns)
    return output.reshape(batch, out_channels, out_h, out_w) + bias[None, :, None, None]


def deform_rows(kernels: Any, channels: int, size: int, repetitions: int) -> List[Row]:
    import torch
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(2, channels, size, size, generator=generator)
    weight = torch.randn(channels, channels, 3, 3, generator=generator) * 0.05
    offset = torch.randn(2, 18, size, size, generator=generator) * 2
    mask = torch.rand(2, 9, size, size, generator=generator)
    bias = torch.randn(channels, generator=generator)
    grad = torch.randn(2, channels, size, size, generator=generator)
    settings = (1, 1, 1, 1, 1, 1, 1, 1, True)

    def ours() -> None:
        kernels.deform_conv2d(x, weight, offset, mask, bias, *settings)
        kernels._deform_conv2d_backward(grad, x, weight, offset, mask, bias, *settings)

    def plain() -> None:
        leaves = [t.detach().requires_grad_() for t in (x, weight, offset, mask, bias)]
        _deform_plain(*leaves, padding=1).backward(grad)

    torch.testing.assert_close(kernels.deform_conv2d(x, weight, offset, mask, bias, *settings),
                               _deform_plain(x, weight, offset, mask, bias, 1),
                               rtol=1e-4, atol=1e-4)
    return [compared("deform_conv2d fwd+bwd", f"B=2, C={channels}, {size}x{size}, 3x3, mask",
                     ours, plain, "same bilinear gathers, mask and matmul (autograd)",
                     repetitions)]


def bench(quick: bool) -> List[Row]:
    kernels = _kernels()
    repetitions = 3 if quick else 7
    rows = nms_rows(kernels, 2_000, 0.5, repetitions)
    rows += roi_align_rows(kernels, 128, 64, 32, repetitions)
    rows += deform_rows(kernels, 32, 32, repetitions)
    if not quick:
        rows += nms_rows(kernels, 6_000, 0.7, repetitions)
        rows += roi_align_rows(kernels, 512, 256, 50, repetitions)
        rows += deform_rows(kernels, 64, 64, repetitions)
    return rows


def run(quick: bool) -> List[Dict[str, Any]]:
    """Rows for ``benchmarks/run.py``."""
    return rows_of_script(__file__, quick)


def main() -> None:
    command_line(bench, __doc__ or "")


if __name__ == "__main__":
    main()

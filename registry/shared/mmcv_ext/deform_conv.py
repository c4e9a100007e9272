"""Deformable convolution v1 (``deform_conv_*``) and v2
(``modulated_deform_conv_*``) kernels.

Forward = deformable im2col + grouped matmul. For kernel tap ``k = i*kW + j``
and output pixel ``(ho, wo)`` the sample point is
``(ho*sH - padH + i*dilH + off_h, wo*sW - padW + j*dilW + off_w)``, with the
offsets laid out per deformable group as ``[.., 2k] = dy, [.., 2k+1] = dx``.
mmcv's bilinear rule (taps outside the image read as zero, points at or
beyond one pixel outside give zero) is exactly ``grid_sample`` with
``padding_mode='zeros', align_corners=False`` once the pixel coordinate ``p``
is normalised as ``(2p + 1) / size - 1``, so the im2col is one
``grid_sample`` call per batch. The backward kernels differentiate this same
forward with autograd for the input, mask, weight and bias gradients (the
bilinear weights are continuous, so any derivative rule gives the same) and
add the results into the caller's buffers, as the CUDA kernels accumulate
into theirs.

The offset gradient is not continuous: where a sample point falls exactly on
a pixel row or column (zero offsets do that), the bilinear interpolation has
no unique derivative. It is computed by mmcv's own rule
(:func:`deform_offset_grad`) rather than by differentiating ``grid_sample``,
whose normalised coordinates do not even round-trip (in float64 ``y = 0``
comes back as ``-1.1e-16`` and floors to ``-1``).
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
import torch.nn.functional as F


def _out_size(size: int, kernel: int, stride: int, pad: int,
              dilation: int) -> int:
    return (size + 2 * pad - (dilation * (kernel - 1) + 1)) // stride + 1


def deform_im2col(input: torch.Tensor, offset: torch.Tensor,
                  mask: Optional[torch.Tensor], kernel: Tuple[int, int],
                  stride: Tuple[int, int], pad: Tuple[int, int],
                  dilation: Tuple[int, int],
                  deform_groups: int) -> torch.Tensor:
    """Deformable columns, (B, C, kH*kW, Ho*Wo), optionally mask-modulated."""
    b, c, h, w = input.shape
    kh, kw = kernel
    ho = _out_size(h, kh, stride[0], pad[0], dilation[0])
    wo = _out_size(w, kw, stride[1], pad[1], dilation[1])
    k = kh * kw
    dg = deform_groups
    dtype = input.dtype
    y, x = _sample_coordinates(offset, b, ho, wo, kernel, stride, pad,
                               dilation, dg, dtype)  # (B, dg, K, Ho, Wo)
    grid = torch.stack([(2 * x + 1) / w - 1, (2 * y + 1) / h - 1], dim=-1)
    grid = grid.view(b * dg, k * ho, wo, 2)
    cols = F.grid_sample(input.reshape(b * dg, c // dg, h, w), grid,
                         mode="bilinear", padding_mode="zeros",
                         align_corners=False)  # (B*dg, C/dg, K*Ho, Wo)
    cols = cols.view(b, dg, c // dg, k, ho * wo)
    if mask is not None:
        cols = cols * mask.to(dtype).view(b, dg, 1, k, ho * wo)
    return cols.reshape(b, c, k, ho * wo)


def _sample_coordinates(offset: torch.Tensor, batch: int, height_out: int,
                        width_out: int, kernel: Tuple[int, int],
                        stride: Tuple[int, int], pad: Tuple[int, int],
                        dilation: Tuple[int, int], deform_groups: int,
                        dtype: torch.dtype
                        ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Pixel coordinates (y, x) of every sample, each (B, dg, K, Ho, Wo),
    computed as mmcv does: integer base position plus the offset, in the
    input's dtype."""
    kh, kw = kernel
    dev = offset.device
    off = offset.to(dtype).view(batch, deform_groups, kh * kw, 2, height_out,
                                width_out)
    tap_i = torch.arange(kh, device=dev, dtype=dtype).repeat_interleave(kw)
    tap_j = torch.arange(kw, device=dev, dtype=dtype).repeat(kh)
    base_y = (torch.arange(height_out, device=dev, dtype=dtype)[None, :, None]
              * stride[0] - pad[0] + tap_i[:, None, None] * dilation[0])
    base_x = (torch.arange(width_out, device=dev, dtype=dtype)[None, None, :]
              * stride[1] - pad[1] + tap_j[:, None, None] * dilation[1])
    return base_y + off[:, :, :, 0], base_x + off[:, :, :, 1]


def _columns_grad(grad_output: torch.Tensor, weight: torch.Tensor,
                  groups: int) -> torch.Tensor:
    """d(loss)/d(columns), (B, C, K, Ho*Wo): the weight's transpose applied
    to the output gradient, per convolution group."""
    cout, cg, kh, kw = weight.shape
    b = grad_output.shape[0]
    wmat = weight.view(groups, cout // groups, cg * kh * kw)
    g = grad_output.reshape(b, groups, cout // groups, -1).to(wmat.dtype)
    return torch.matmul(wmat.transpose(1, 2)[None], g).view(
        b, groups * cg, kh * kw, -1)


def deform_offset_grad(input: torch.Tensor, offset: torch.Tensor,
                       mask: Optional[torch.Tensor],
                       columns_grad: torch.Tensor, kernel: Tuple[int, int],
                       stride: Tuple[int, int], pad: Tuple[int, int],
                       dilation: Tuple[int, int],
                       deform_groups: int) -> torch.Tensor:
    """d(loss)/d(offset) by mmcv's rule (``get_coordinate_weight``), shaped
    like ``offset``.

    A sample point outside ``-1 < y < H``, ``-1 < x < W`` gets 0. Inside, the
    corners are ``floorf`` of the coordinate (mmcv casts to float32 before
    flooring, in every dtype) and the one above/right; corners outside the
    image read as 0; the y derivative is ``(1-lx)(v3-v1) + lx(v4-v2)`` and the
    x derivative ``(1-ly)(v2-v1) + ly(v4-v3)``, summed over the channels of
    the deformable group, weighted by the columns' gradient and the mask.
    """
    b, c, h, w = input.shape
    dg = deform_groups
    k = kernel[0] * kernel[1]
    dtype = input.dtype
    ho, wo = offset.shape[-2:]
    y, x = _sample_coordinates(offset, b, ho, wo, kernel, stride, pad,
                               dilation, dg, dtype)
    inside = (y > -1) & (x > -1) & (y < h) & (x < w)
    y_low = torch.floor(y.float()).to(torch.long)
    x_low = torch.floor(x.float()).to(torch.long)
    ly, lx = y - y_low.to(dtype), x - x_low.to(dtype)
    image = input.reshape(b, dg, 1, c // dg, h * w).expand(-1, -1, 4, -1, -1)
    corner_y = torch.stack([y_low, y_low, y_low + 1, y_low + 1], dim=2)
    corner_x = torch.stack([x_low, x_low + 1, x_low, x_low + 1], dim=2)
    # (B, dg, 4 corners, K, Ho, Wo); corners off the image read as zero.
    readable = ((corner_y >= 0) & (corner_y < h) & (corner_x >= 0) &
                (corner_x < w) & inside[:, :, None])
    flat = (corner_y.clamp(0, h - 1) * w + corner_x.clamp(0, w - 1))
    flat = flat.view(b, dg, 4, 1, k * ho * wo).expand(-1, -1, -1, c // dg, -1)
    values = image.gather(-1, flat).view(b, dg, 4, c // dg, k, ho * wo)
    values = values * readable.view(b, dg, 4, 1, k, ho * wo).to(dtype)
    v1, v2, v3, v4 = values.unbind(2)   # each (B, dg, C/dg, K, L)
    ly = ly.view(b, dg, 1, k, ho * wo)
    lx = lx.view(b, dg, 1, k, ho * wo)
    d_y = (1 - lx) * (v3 - v1) + lx * (v4 - v2)
    d_x = (1 - ly) * (v2 - v1) + ly * (v4 - v3)
    weight = columns_grad.to(dtype).view(b, dg, c // dg, k, ho * wo)
    if mask is not None:
        weight = weight * mask.to(dtype).view(b, dg, 1, k, ho * wo)
    grad = torch.stack([(d_y * weight).sum(2), (d_x * weight).sum(2)], dim=3)
    return grad.view(offset.shape)


def deform_conv2d_pytorch(input: torch.Tensor, offset: torch.Tensor,
                          mask: Optional[torch.Tensor], weight: torch.Tensor,
                          bias: Optional[torch.Tensor],
                          stride: Tuple[int, int], pad: Tuple[int, int],
                          dilation: Tuple[int, int], groups: int,
                          deform_groups: int) -> torch.Tensor:
    """Differentiable deformable convolution (v2 when ``mask`` is given).

    Shapes: input (B, C, H, W); offset (B, dg*2*kH*kW, Ho, Wo); mask
    (B, dg*kH*kW, Ho, Wo); weight (Cout, C/groups, kH, kW). Returns
    (B, Cout, Ho, Wo).
    """
    b, c, h, w = input.shape
    cout, cg, kh, kw = weight.shape
    ho = _out_size(h, kh, stride[0], pad[0], dilation[0])
    wo = _out_size(w, kw, stride[1], pad[1], dilation[1])
    cols = deform_im2col(input, offset, mask, (kh, kw), stride, pad, dilation,
                         deform_groups)
    cols = cols.view(b, groups, cg * kh * kw, ho * wo)
    wmat = weight.to(input.dtype).view(groups, cout // groups, cg * kh * kw)
    out = torch.matmul(wmat[None], cols).view(b, cout, ho, wo)
    if bias is not None:
        out = out + bias.to(out.dtype).view(1, cout, 1, 1)
    return out


def _grads(fn, inputs: Sequence[Optional[torch.Tensor]],
           wanted: Sequence[bool], grad_output: torch.Tensor):
    """Run ``fn`` on detached copies of ``inputs`` and differentiate.

    Returns one gradient (or None) per input; only ``wanted`` ones are
    computed.
    """
    with torch.enable_grad():
        leaves = [
            None if t is None else t.detach().requires_grad_(bool(want))
            for t, want in zip(inputs, wanted)
        ]
        out = fn(*leaves)
        targets = [t for t, want in zip(leaves, wanted)
                   if t is not None and want]
        got = iter(torch.autograd.grad(out, targets,
                                       grad_outputs=grad_output.to(out.dtype),
                                       allow_unused=True))
    return [next(got) if t is not None and want else None
            for t, want in zip(leaves, wanted)]


def _accumulate(buffer: torch.Tensor, grad: Optional[torch.Tensor],
                scale: float = 1.0) -> None:
    if grad is None:
        return
    grad = grad.to(buffer.dtype).reshape(buffer.shape)
    buffer.add_(grad if scale == 1.0 else grad * scale)


# -- deformable convolution v1 ------------------------------------------------


def deform_conv_forward(input: torch.Tensor, weight: torch.Tensor,
                        offset: torch.Tensor, output: torch.Tensor,
                        columns: torch.Tensor, ones: torch.Tensor, kW: int,
                        kH: int, dW: int, dH: int, padW: int, padH: int,
                        dilationW: int, dilationH: int, group: int,
                        deformable_group: int, im2col_step: int) -> None:
    """Ext ``deform_conv_forward``: writes (B, Cout, Ho, Wo) into ``output``.

    ``columns``/``ones`` are the CUDA kernel's scratch buffers and
    ``im2col_step`` its batching knob; neither affects the result.
    """
    with torch.no_grad():
        out = deform_conv2d_pytorch(input, offset, None, weight, None,
                                    (dH, dW), (padH, padW),
                                    (dilationH, dilationW), group,
                                    deformable_group)
    output.copy_(out.reshape(output.shape))


def deform_conv_backward_input(input: torch.Tensor, offset: torch.Tensor,
                               gradOutput: torch.Tensor,
                               gradInput: torch.Tensor,
                               gradOffset: torch.Tensor, weight: torch.Tensor,
                               columns: torch.Tensor, kW: int, kH: int,
                               dW: int, dH: int, padW: int, padH: int,
                               dilationW: int, dilationH: int, group: int,
                               deformable_group: int,
                               im2col_step: int) -> None:
    """Ext ``deform_conv_backward_input``: adds d(out)/d(input, offset)."""

    def fn(x, off, wt):
        return deform_conv2d_pytorch(x, off, None, wt, None, (dH, dW),
                                     (padH, padW), (dilationH, dilationW),
                                     group, deformable_group)

    g_in, _, _ = _grads(fn, (input, offset, weight), (True, False, False),
                        gradOutput)
    _accumulate(gradInput, g_in)
    with torch.no_grad():
        columns_grad = _columns_grad(gradOutput, weight.to(input.dtype), group)
        g_off = deform_offset_grad(input, offset, None, columns_grad,
                                   (weight.shape[2], weight.shape[3]), (dH, dW),
                                   (padH, padW), (dilationH, dilationW),
                                   deformable_group)
    _accumulate(gradOffset, g_off)


def deform_conv_backward_parameters(input: torch.Tensor, offset: torch.Tensor,
                                    gradOutput: torch.Tensor,
                                    gradWeight: torch.Tensor,
                                    columns: torch.Tensor, ones: torch.Tensor,
                                    kW: int, kH: int, dW: int, dH: int,
                                    padW: int, padH: int, dilationW: int,
                                    dilationH: int, group: int,
                                    deformable_group: int, scale: float,
                                    im2col_step: int) -> None:
    """Ext ``deform_conv_backward_parameters``: ``gradWeight += scale * dW``.

    The weight gradient is ``grad_out x columns^T`` per group, computed
    directly from the deformable columns (no autograd needed).
    """
    cout, cg, kh, kw = gradWeight.shape
    b = input.shape[0]
    with torch.no_grad():
        cols = deform_im2col(input, offset, None, (kh, kw), (dH, dW),
                             (padH, padW), (dilationH, dilationW),
                             deformable_group)
        cols = cols.view(b, group, cg * kh * kw, -1)
        g = gradOutput.to(cols.dtype).reshape(b, group, cout // group, -1)
        gw = torch.einsum("bgol,bgkl->gok", g, cols)
    _accumulate(gradWeight, gw, float(scale))


# -- modulated deformable convolution (v2) -----------------------------------


def modulated_deform_conv_forward(input: torch.Tensor, weight: torch.Tensor,
                                  bias: torch.Tensor, ones: torch.Tensor,
                                  offset: torch.Tensor, mask: torch.Tensor,
                                  output: torch.Tensor, columns: torch.Tensor,
                                  kernel_h: int, kernel_w: int, stride_h: int,
                                  stride_w: int, pad_h: int, pad_w: int,
                                  dilation_h: int, dilation_w: int,
                                  group: int, deformable_group: int,
                                  with_bias: bool) -> None:
    """Ext ``modulated_deform_conv_forward``: writes into ``output``."""
    with torch.no_grad():
        out = deform_conv2d_pytorch(input, offset, mask, weight,
                                    bias if with_bias else None,
                                    (stride_h, stride_w), (pad_h, pad_w),
                                    (dilation_h, dilation_w), group,
                                    deformable_group)
    output.copy_(out.reshape(output.shape))


def modulated_deform_conv_backward(
        input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
        ones: torch.Tensor, offset: torch.Tensor, mask: torch.Tensor,
        columns: torch.Tensor, grad_input: torch.Tensor,
        grad_weight: torch.Tensor, grad_bias: torch.Tensor,
        grad_offset: torch.Tensor, grad_mask: torch.Tensor,
        grad_output: torch.Tensor, kernel_h: int, kernel_w: int,
        stride_h: int, stride_w: int, pad_h: int, pad_w: int, dilation_h: int,
        dilation_w: int, group: int, deformable_group: int,
        with_bias: bool) -> None:
    """Ext ``modulated_deform_conv_backward``: adds every gradient into its
    buffer (``grad_bias`` only when ``with_bias``)."""

    def fn(x, off, m, wt, bs):
        return deform_conv2d_pytorch(x, off, m, wt, bs, (stride_h, stride_w),
                                     (pad_h, pad_w), (dilation_h, dilation_w),
                                     group, deformable_group)

    grads = _grads(fn, (input, offset, mask, weight,
                        bias if with_bias else None),
                   (True, False, True, True, bool(with_bias)), grad_output)
    for buffer, grad in zip(
            (grad_input, grad_offset, grad_mask, grad_weight, grad_bias),
            grads):
        _accumulate(buffer, grad)
    with torch.no_grad():
        columns_grad = _columns_grad(grad_output, weight.to(input.dtype),
                                     group)
        g_off = deform_offset_grad(input, offset, mask, columns_grad,
                                   (kernel_h, kernel_w), (stride_h, stride_w),
                                   (pad_h, pad_w), (dilation_h, dilation_w),
                                   deformable_group)
    _accumulate(grad_offset, g_off)

"""Autograd formulas for the stand-in's torchvision operators, for the torchvision
releases that register theirs from the compiled library (before 0.28): each forward
operator's backward calls its ``_*_backward`` operator, as torchvision's own do, and the
backward operators refuse a second derivative, as torchvision's do.

Imported only by :func:`.torchvision_stand_in.provide` (it imports torch).
"""

from __future__ import annotations

from typing import Any, Callable, Tuple

import torch


def _roi_align_setup(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    features, rois, *ctx.settings = inputs
    ctx.save_for_backward(rois)
    ctx.shape = tuple(features.shape)


def _roi_align_backward(ctx: Any, grad: Any) -> Tuple[Any, ...]:
    (rois,) = ctx.saved_tensors
    scale, pooled_height, pooled_width, sampling_ratio, aligned = ctx.settings
    grad_input = torch.ops.torchvision._roi_align_backward(
        grad, rois, scale, pooled_height, pooled_width, *ctx.shape, sampling_ratio, aligned)
    return (grad_input,) + (None,) * 6


def _pooled_setup(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    """roi_pool, ps_roi_pool, ps_roi_align: the second output (argmax or channel
    mapping) is what their backward operator needs."""
    features, rois, *ctx.settings = inputs
    ctx.save_for_backward(rois, output[1])
    ctx.shape = tuple(features.shape)


def _pooled_backward(operator: str, extra_before_shape: int) -> Callable[..., Tuple[Any, ...]]:
    def backward(ctx: Any, grad: Any, _grad_index: Any) -> Tuple[Any, ...]:
        rois, index = ctx.saved_tensors
        settings = list(ctx.settings)
        # ps_roi_align passes sampling_ratio before the input's shape
        before, after = settings[:3 + extra_before_shape], settings[3 + extra_before_shape:]
        grad_input = getattr(torch.ops.torchvision, operator)(
            grad, rois, index, *before, *ctx.shape, *after)
        return (grad_input,) + (None,) * (1 + len(settings))
    return backward


def _deform_setup(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(*inputs[:5])
    ctx.settings = inputs[5:]


def _deform_backward(ctx: Any, grad: Any) -> Tuple[Any, ...]:
    grads = torch.ops.torchvision._deform_conv2d_backward(grad, *ctx.saved_tensors,
                                                          *ctx.settings)
    return tuple(grads) + (None,) * len(ctx.settings)


def _no_double_backward(name: str) -> Callable[..., Any]:
    def backward(ctx: Any, *grads: Any) -> Any:
        raise RuntimeError(f"double backwards on {name} not supported")
    return backward


def register_autograd(library: Any) -> None:
    """Register the formulas on the operators ``library`` defined."""
    register = torch.library.register_autograd
    register("torchvision::roi_align", _roi_align_backward, setup_context=_roi_align_setup,
             lib=library)
    register("torchvision::roi_pool", _pooled_backward("_roi_pool_backward", 0),
             setup_context=_pooled_setup, lib=library)
    register("torchvision::ps_roi_pool", _pooled_backward("_ps_roi_pool_backward", 0),
             setup_context=_pooled_setup, lib=library)
    register("torchvision::ps_roi_align", _pooled_backward("_ps_roi_align_backward", 1),
             setup_context=_pooled_setup, lib=library)
    register("torchvision::deform_conv2d", _deform_backward, setup_context=_deform_setup,
             lib=library)
    for name in ("roi_align", "roi_pool", "ps_roi_align", "ps_roi_pool", "deform_conv2d"):
        register(f"torchvision::_{name}_backward", _no_double_backward(name), lib=library)

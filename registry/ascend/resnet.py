"""mmdet ResNet on Ascend: fused add+ReLU, NPU stem max-pool, optional FP16.

The add+ReLU and max-pool changes sit in the *middle* of a forward, where no
wrapper can reach, so those two forwards are copies of mmdet 3.3.0's, pinned
by :mod:`.sources` (the patch skips when the installed source differs). The
FP16 patch is a true wrapper around the original forward.

Each copy keeps upstream's behaviour exactly (checkpointing, plugins,
``out_indices``) and changes one step; every kernel has a PyTorch fallback
with the same numbers.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Tuple

import torch
import torch.utils.checkpoint as cp
from torch import nn

import lazypatch

from .kernels import kernel
from .sources import drift_reason

ADD_RELU_PATCH = "ascend.resnet_add_relu"
MAX_POOL_PATCH = "ascend.resnet_maxpool"


def add_relu(out: torch.Tensor, identity: torch.Tensor) -> torch.Tensor:
    """``relu(out + identity)`` by mx_driving's fused kernel, else by PyTorch."""
    fused = kernel("npu_add_relu", ADD_RELU_PATCH)
    if fused is None:
        return torch.relu(out + identity)
    return fused(out, identity)


def _is_stem_pool(pool: Any) -> bool:
    """Whether ``pool`` is ResNet's standard stem pool (3x3, stride 2, padding 1),
    the only configuration npu_max_pool2d is called with."""
    def pair(value: Any) -> Tuple[Any, Any]:
        return tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    return (type(pool) is nn.MaxPool2d and pair(pool.kernel_size) == (3, 3)
            and pair(pool.stride) == (2, 2) and pair(pool.padding) == (1, 1)
            and pair(pool.dilation) == (1, 1) and not pool.ceil_mode
            and not pool.return_indices)


def stem_max_pool(pool: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The stem max-pool: NPU kernel for inference (the seed's rule: input needs no
    gradient, since the kernel has no backward), the module itself otherwise."""
    if x.requires_grad or not _is_stem_pool(pool):
        return pool(x)
    npu_max_pool2d = kernel("npu_max_pool2d", MAX_POOL_PATCH)
    if npu_max_pool2d is None:
        return pool(x)
    return npu_max_pool2d(x, 3, 2, 1)


# --- copies of mmdet 3.3.0 forwards (pinned in sources.PINNED_SOURCES) -----

def basic_block_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """mmdet 3.3.0 ``BasicBlock.forward`` with ``out += identity; relu(out)`` fused."""

    def _inner_forward(x: torch.Tensor) -> torch.Tensor:
        identity = x

        out = self.conv1(x)
        out = self.norm1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.norm2(out)

        if self.downsample is not None:
            identity = self.downsample(x)

        # Upstream adds here and applies ReLU after the checkpointed part; the
        # fused kernel does both, so the ReLU moves inside (same numbers).
        return add_relu(out, identity)

    if self.with_cp and x.requires_grad:
        return cp.checkpoint(_inner_forward, x)
    return _inner_forward(x)


def bottleneck_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """mmdet 3.3.0 ``Bottleneck.forward`` with ``out += identity; relu(out)`` fused."""

    def _inner_forward(x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.conv1(x)
        out = self.norm1(out)
        out = self.relu(out)

        if self.with_plugins:
            out = self.forward_plugin(out, self.after_conv1_plugin_names)

        out = self.conv2(out)
        out = self.norm2(out)
        out = self.relu(out)

        if self.with_plugins:
            out = self.forward_plugin(out, self.after_conv2_plugin_names)

        out = self.conv3(out)
        out = self.norm3(out)

        if self.with_plugins:
            out = self.forward_plugin(out, self.after_conv3_plugin_names)

        if self.downsample is not None:
            identity = self.downsample(x)

        return add_relu(out, identity)

    if self.with_cp and x.requires_grad:
        return cp.checkpoint(_inner_forward, x)
    return _inner_forward(x)


def resnet_forward(self: Any, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """mmdet 3.3.0 ``ResNet.forward`` with the stem pool by :func:`stem_max_pool`."""
    if self.deep_stem:
        x = self.stem(x)
    else:
        x = self.conv1(x)
        x = self.norm1(x)
        x = self.relu(x)
    x = stem_max_pool(self.maxpool, x)
    outs = []
    for i, layer_name in enumerate(self.res_layers):
        res_layer = getattr(self, layer_name)
        x = res_layer(x)
        if i in self.out_indices:
            outs.append(x)
    return tuple(outs)


# --- the patches ---------------------------------------------------------------

def _install_copies(patch: lazypatch.PatchContext, copies: Tuple[Tuple[type, Any], ...]) -> None:
    """Replace each ``owner.forward`` by its copy, or skip (changing nothing) when
    any upstream forward differs from the source the copies were made from."""
    for owner, _ in copies:
        reason = drift_reason(owner, "forward")
        if reason is not None:
            patch.skip(reason)
    for owner, copy in copies:
        patch.setattr(owner, "forward", copy)
        patch.note(f"{owner.__name__}.forward -> {copy.__module__}.{copy.__name__} "
                   f"(copy pinned to mmdet 3.3.0's source)")


def patch_add_relu(resnet: ModuleType, patch: lazypatch.PatchContext) -> None:
    """Install the fused add+ReLU forwards of BasicBlock and Bottleneck."""
    _install_copies(patch, ((resnet.BasicBlock, basic_block_forward),
                            (resnet.Bottleneck, bottleneck_forward)))


def patch_max_pool(resnet: ModuleType, patch: lazypatch.PatchContext) -> None:
    """Install the ResNet forward whose stem pool uses npu_max_pool2d in inference."""
    _install_copies(patch, ((resnet.ResNet, resnet_forward),))


def patch_fp16(resnet: ModuleType, patch: lazypatch.PatchContext) -> None:
    """Run ResNet's *original* forward under FP16 autocast and return float32 outputs.

    It replaces the same slot as ``ascend.resnet_maxpool`` (the engine reports
    the conflict, and this patch, applied later, wins) and calls the forward
    that was there before any patch: so undoing either patch leaves exactly
    the other one's behaviour.
    """
    original_forward = lazypatch.original(resnet.ResNet, "forward")

    def forward(self: Any, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        # The input's own device type: "npu" on Ascend (the seed hard-codes it),
        # and whatever the tensor lives on elsewhere.
        with torch.autocast(device_type=x.device.type, dtype=torch.float16):
            outs = original_forward(self, x)
        return tuple(out.float() for out in outs)

    forward.__qualname__ = "ResNet.forward"
    forward.__wrapped__ = original_forward  # type: ignore[attr-defined]
    patch.setattr(resnet.ResNet, "forward", forward)
    patch.note("ResNet.forward -> original forward under float16 autocast, outputs as float32")

"""mmdet ResNet on Ascend: fused add+ReLU, NPU stem max-pool, optional FP16.

The add+ReLU and max-pool changes sit in the *middle* of a forward, where no
wrapper can reach. So the patches edit the installed forwards' own source
(:mod:`.rewrite`): in ``BasicBlock``/``Bottleneck.forward`` the residual add
whose result goes straight into ``self.relu`` becomes one fused call, and in
``ResNet.forward`` the one ``self.maxpool(x)`` call becomes :func:`stem_max_pool`.
Everything else the installed release does (checkpointing, plugins, whatever a
later release adds) stays as it is, in every mmdet whose forwards have those
steps; a forward without them is left alone and the patch says which step is
missing. The FP16 patch is a true wrapper around the original forward.

``basic_block_forward``, ``bottleneck_forward`` and ``resnet_forward`` are the
fixed replacements DrivingSDK's API exposes (``ResNetAddRelu._basicblock_forward_replacement``
...), written for mmdet 3.x's blocks; the patches do not install them.
Every kernel has a PyTorch fallback with the same numbers.
"""

from __future__ import annotations

import ast
from types import FunctionType, ModuleType
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
import torch.utils.checkpoint as cp
from torch import nn

import lazypatch

from ..shared.rewrite import HELPER_PREFIX, edited, helper_call, installed, is_method_call, is_name
from .kernels import kernel

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


# --- the fixed replacements of DrivingSDK's API (mmdet 3.x's blocks) -------

def basic_block_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """mmdet 3.x ``BasicBlock.forward`` with ``out += identity; relu(out)`` fused."""

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
    """mmdet 3.x ``Bottleneck.forward`` with ``out += identity; relu(out)`` fused."""

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
    """mmdet 3.x ``ResNet.forward`` with the stem pool by :func:`stem_max_pool`."""
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


# --- the edits of the installed forwards -------------------------------------------

ADD_RELU = f"{HELPER_PREFIX}add_relu"
STEM_MAX_POOL = f"{HELPER_PREFIX}stem_max_pool"


def _relu_of_itself(statement: ast.stmt, self_name: str) -> Optional[str]:
    """``name`` when ``statement`` is ``name = <self>.relu(name)``, else None."""
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
            and is_name(statement.targets[0]) and is_method_call(statement.value, self_name, "relu"):
        name = statement.targets[0].id   # type: ignore[attr-defined]
        call = statement.value
        if len(call.args) == 1 and not call.keywords and is_name(call.args[0], name):  # type: ignore[attr-defined]
            return name
    return None


def _residual_add(statement: ast.stmt) -> Optional[str]:
    """``name`` when ``statement`` is ``name += <expression>``, else None."""
    if isinstance(statement, ast.AugAssign) and isinstance(statement.op, ast.Add) \
            and is_name(statement.target):
        return statement.target.id   # type: ignore[attr-defined]
    return None


def _fused(name: str, identity: ast.expr) -> ast.expr:
    return helper_call(ADD_RELU, ast.Name(id=name, ctx=ast.Load()), identity)


def _assigns_result_of(statement: ast.stmt, name: str, function: str) -> bool:
    """Whether ``statement`` only sets ``name`` from a call involving ``function`` (an
    ``if``/``else`` choosing between such calls included): checkpointed or not, it is the
    inner function's result."""
    if isinstance(statement, ast.If):
        return bool(statement.orelse) and all(
            _assigns_result_of(inner, name, function)
            for inner in statement.body + statement.orelse)
    return (isinstance(statement, ast.Assign) and len(statement.targets) == 1
            and is_name(statement.targets[0], name) and isinstance(statement.value, ast.Call)
            and any(is_name(node, function) for node in ast.walk(statement.value)))


def _fuse_inline(statements: List[ast.stmt], self_name: str) -> int:
    """``x += y`` then ``x = self.relu(x)`` -> ``x = add_relu(x, y)``; how many."""
    fused = 0
    for index in range(len(statements) - 2, -1, -1):
        add, relu = statements[index], statements[index + 1]
        name = _residual_add(add)
        if name is not None and _relu_of_itself(relu, self_name) == name:
            statements[index:index + 2] = [ast.Assign(
                targets=[ast.Name(id=name, ctx=ast.Store())],
                value=_fused(name, add.value))]   # type: ignore[attr-defined]
            fused += 1
    return fused


def _fuse_through_inner(definition: ast.FunctionDef, self_name: str) -> "tuple[int, str]":
    """mmdet's shape: ``_inner_forward`` ends ``out += identity; return out`` and the
    forward passes its result (checkpointed or not) straight to ``self.relu``. The add
    becomes ``return add_relu(out, identity)`` and that ``self.relu`` goes: (fused count,
    what was missing)."""
    body = definition.body
    for position, inner in enumerate(body):
        if not isinstance(inner, ast.FunctionDef) or len(inner.body) < 2:
            continue
        add, returned = inner.body[-2], inner.body[-1]
        name = _residual_add(add)
        if name is None or not (isinstance(returned, ast.Return) and is_name(returned.value, name)):
            continue
        later = body[position + 1:]
        for offset, statement in enumerate(later):
            result = _relu_of_itself(statement, self_name)
            if result is not None and offset and all(
                    _assigns_result_of(step, result, inner.name) for step in later[:offset]):
                rest = later[offset + 1:]
                if any(is_name(node, inner.name) for step in rest for node in ast.walk(step)):
                    break
                inner.body[-2:] = [ast.Return(value=_fused(name, add.value))]   # type: ignore[attr-defined]
                del body[position + 1 + offset]
                return 1, ""
        return 0, (f"the result of {inner.name}() (which ends with the residual add "
                   f"'{name} += ...') does not go straight into {self_name}.relu")
    return 0, ""


def fuse_add_relu(where: str) -> Callable[[ast.FunctionDef], str]:
    """The edit fusing a residual block's add and ReLU (``where`` names it in reasons)."""
    def edit(definition: ast.FunctionDef) -> str:
        if not definition.args.args:
            return f"{where} takes no self"
        self_name = definition.args.args[0].arg
        fused, why_not = _fuse_through_inner(definition, self_name)
        for node in list(ast.walk(definition)):
            for field in ("body", "orelse", "finalbody"):
                statements = getattr(node, field, None)
                if isinstance(statements, list):
                    fused += _fuse_inline(statements, self_name)
        if fused:
            return ""
        if why_not:
            return f"{where}: {why_not}"
        return (f"{where} has no residual add ('out += identity') whose result goes straight "
                f"into {self_name}.relu: nothing to fuse")
    return edit


def pool_stem(where: str) -> Callable[[ast.FunctionDef], str]:
    """The edit sending ResNet's one ``self.maxpool(x)`` call to :func:`stem_max_pool`."""
    def edit(definition: ast.FunctionDef) -> str:
        if not definition.args.args:
            return f"{where} takes no self"
        self_name = definition.args.args[0].arg
        calls = [node for node in ast.walk(definition)
                 if is_method_call(node, self_name, "maxpool")]
        if len(calls) != 1:
            return (f"{where} calls {self_name}.maxpool {len(calls)} times; the stem pool is "
                    f"one call")
        call = calls[0]
        if len(call.args) != 1 or call.keywords:    # type: ignore[attr-defined]
            return f"{where} calls {self_name}.maxpool with other than one input"
        pool = call.func                                # type: ignore[attr-defined]
        call.func = ast.Name(id=STEM_MAX_POOL, ctx=ast.Load())   # type: ignore[attr-defined]
        call.args = [pool, call.args[0]]                # type: ignore[attr-defined]
        return ""
    return edit


def _install_edits(patch: lazypatch.PatchContext,
                   edits: Sequence["tuple[type, Callable[[ast.FunctionDef], str]]"],
                   what: str) -> None:
    """Replace each ``owner.forward`` by its edited source, or skip (changing nothing)
    when any of them does not have the steps the edit changes."""
    helpers = {ADD_RELU: add_relu, STEM_MAX_POOL: stem_max_pool}
    rebuilt: List["tuple[type, FunctionType]"] = []
    for owner, edit in edits:
        function, why_not = installed(owner, "forward")
        new: Optional[FunctionType] = None
        if function is not None:
            new, why_not = edited(function, edit, helpers)
        if new is None:
            patch.skip(f"{owner.__name__}.forward left as it is: {why_not}")
        rebuilt.append((owner, new))
    for owner, new in rebuilt:
        patch.setattr(owner, "forward", new)
        patch.note(f"{owner.__name__}.forward of {owner.__module__}, recompiled from the "
                   f"installed source with {what}")


def patch_add_relu(resnet: ModuleType, patch: lazypatch.PatchContext) -> None:
    """BasicBlock and Bottleneck forwards with the residual add and ReLU fused."""
    _install_edits(patch, [(resnet.BasicBlock, fuse_add_relu("BasicBlock.forward")),
                           (resnet.Bottleneck, fuse_add_relu("Bottleneck.forward"))],
                   "the residual add and ReLU as one mx_driving.npu_add_relu")


def patch_max_pool(resnet: ModuleType, patch: lazypatch.PatchContext) -> None:
    """ResNet forward whose stem pool uses npu_max_pool2d in inference."""
    _install_edits(patch, [(resnet.ResNet, pool_stem("ResNet.forward"))],
                   "the stem max-pool by mx_driving.npu_max_pool2d in inference")


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

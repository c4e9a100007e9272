"""Fused gradient clipping: ``optimizer.clip_grad_norm_fused_`` instead of
``torch.nn.utils.clip_grad_norm_``.

torch_npu's fused optimizers (``torch_npu.optim.NpuFused*``) keep their
parameters in flat buffers and offer ``clip_grad_norm_fused_(max_norm,
norm_type=2)``, one kernel instead of one per parameter.

Unlike DrivingSDK's patch, which sets an attribute mmengine never reads
(``clip_grads``; mmengine 0.10 calls ``clip_func``) and forces the fused call
on every optimizer, these wrappers use the fused call only when it can
compute the same thing: clipping by norm, an optimizer that has the method,
and no clipping options beyond ``max_norm``/``norm_type``. Otherwise the
original clipping runs.
"""

from __future__ import annotations

import contextvars
from types import ModuleType
from typing import Any, Callable, Dict, Optional, Tuple

import torch

import lazypatch

FUSED_METHOD = "clip_grad_norm_fused_"
FUSED_OPTIONS = frozenset({"max_norm", "norm_type"})


def can_fuse(optimizer: Any, clip_options: Optional[Dict[str, Any]]) -> bool:
    """Whether ``optimizer.clip_grad_norm_fused_(**clip_options)`` computes the norm
    clipping that ``clip_grad_norm_(params, **clip_options)`` would."""
    return (callable(getattr(optimizer, FUSED_METHOD, None)) and bool(clip_options)
            and set(clip_options) <= FUSED_OPTIONS and "max_norm" in clip_options)


class FusedNormClip:
    """A ``clip_func`` for mmengine's OptimWrapper: same call as
    ``clip_grad_norm_(params, **kwargs)``, computed by the optimizer's fused
    kernel over its own parameters."""

    def __init__(self, optimizer: Any, fallback: Callable[..., Any]) -> None:
        self.optimizer = optimizer
        self.fallback = fallback

    def __call__(self, params: Any, **kwargs: Any) -> Any:
        if can_fuse(self.optimizer, kwargs):
            return getattr(self.optimizer, FUSED_METHOD)(**kwargs)
        return self.fallback(params, **kwargs)

    def __repr__(self) -> str:
        return f"<FusedNormClip via {type(self.optimizer).__name__}.{FUSED_METHOD}>"


def optim_wrapper_init(wrapped: Any, instance: Any, args: Tuple[Any, ...],
                       kwargs: Dict[str, Any]) -> None:
    """``OptimWrapper.__init__`` wrapper: after the original, route norm clipping
    to the fused kernel when :func:`can_fuse` allows it."""
    wrapped(*args, **kwargs)
    if instance is None:
        return
    clip_func = getattr(instance, "clip_func", None)
    if clip_func is torch.nn.utils.clip_grad_norm_ and \
            can_fuse(instance.optimizer, instance.clip_grad_kwargs):
        instance.clip_func = FusedNormClip(instance.optimizer, clip_func)


def patch_optim_wrapper(optimizer_wrapper: ModuleType, patch: lazypatch.PatchContext) -> None:
    """Wrap ``OptimWrapper.__init__`` (its subclasses, e.g. AmpOptimWrapper, call it)."""
    patch.wrap(optimizer_wrapper.OptimWrapper, "__init__", optim_wrapper_init)
    patch.note("OptimWrapper(clip_grad=dict(max_norm=...)) on an optimizer with "
               "clip_grad_norm_fused_ clips with it")


# --- mmcv 1.x ----------------------------------------------------------------

# mmcv 1.x OptimizerHook.clip_grads(params) is not given the runner, so the
# optimizer is handed over from after_train_iter(runner) through a context
# variable (thread- and task-safe, reset after each call).
_CURRENT_OPTIMIZER: "contextvars.ContextVar[Any]" = contextvars.ContextVar(
    "lazypatch_ascend_optimizer", default=None)


def hook_after_train_iter(wrapped: Any, instance: Any, args: Tuple[Any, ...],
                          kwargs: Dict[str, Any]) -> Any:
    """``after_train_iter(runner)`` wrapper: expose ``runner.optimizer`` to clip_grads."""
    runner = args[0] if args else kwargs.get("runner")
    token = _CURRENT_OPTIMIZER.set(getattr(runner, "optimizer", None))
    try:
        return wrapped(*args, **kwargs)
    finally:
        _CURRENT_OPTIMIZER.reset(token)


def hook_clip_grads(wrapped: Any, instance: Any, args: Tuple[Any, ...],
                    kwargs: Dict[str, Any]) -> Any:
    """``OptimizerHook.clip_grads(params)`` wrapper: fused clipping when possible."""
    optimizer = _CURRENT_OPTIMIZER.get()
    grad_clip = getattr(instance, "grad_clip", None)
    if optimizer is None or not can_fuse(optimizer, grad_clip) or len(args) != 1 or kwargs:
        return wrapped(*args, **kwargs)
    # Same guard as upstream: nothing to clip when no parameter has a gradient.
    if not any(p.requires_grad and p.grad is not None for p in args[0]):
        return None
    return getattr(optimizer, FUSED_METHOD)(**grad_clip)


def patch_mmcv1_optimizer_hooks(hooks: ModuleType, patch: lazypatch.PatchContext) -> None:
    """Wrap ``OptimizerHook.clip_grads`` and every hook class's own ``after_train_iter``."""
    base = hooks.OptimizerHook
    patch.wrap(base, "clip_grads", hook_clip_grads)
    wrapped = []
    for name, value in sorted(vars(hooks).items()):
        if isinstance(value, type) and issubclass(value, base) and \
                "after_train_iter" in value.__dict__ and value.__module__ == hooks.__name__:
            patch.wrap(value, "after_train_iter", hook_after_train_iter)
            wrapped.append(name)
    patch.note(f"fused clipping in {', '.join(wrapped)}")

"""mmcv 1.x's optimizer hook family, built on a given ``mmcv.runner.hooks.optimizer``.

DrivingSDK 1.0's ``optimizer_hooks(mmcv, options)`` registers, in the module's ``HOOKS``,
four hook classes doing what mmcv 1.x's ``OptimizerHook``, ``GradientCumulativeOptimizerHook``,
``Fp16OptimizerHook`` and ``GradientCumulativeFp16OptimizerHook`` do, with gradient
clipping by the optimizer's fused ``clip_grad_norm_fused_`` and ``clip_grads(params,
runner)`` taking the runner. On the imported mmcv, lazypatch's ``ascend`` pack wraps
mmcv's own classes instead; this family is for a module object given to the 1.0
function that is not the imported module (a stand-in that has the hook base class and
the names the hooks use, but not the hooks themselves), made on that object at once as
1.0 did.

The behaviour is mmcv 1.x's documented one: ``OptimizerHook(grad_clip,
detect_anomalous_params)`` steps after ``zero_grad`` and ``backward``, logs the clipped
norm, and reports parameters outside the loss's graph; the cumulative hook divides the
loss by the iterations it accumulates (the remainder at the end) and steps every
``cumulative_iters``; the FP16 hooks scale the loss with the module's ``GradScaler``
(``loss_scale`` "dynamic", a number, or the scaler's options), save its state in
``runner.meta["fp16"]["loss_scaler"]`` and resume from it in ``before_run``.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional, Tuple, Union

HOOK_NAMES = ("OptimizerHook", "GradientCumulativeOptimizerHook", "Fp16OptimizerHook",
              "GradientCumulativeFp16OptimizerHook")


def _clip_norm(optimizer: Any, params: Iterable[Any], grad_clip: Dict[str, Any]) -> Any:
    """The total norm after clipping the gradients of ``params`` (None when none has
    one): by the optimizer's fused kernel where it computes this clipping, else torch's."""
    from importlib import import_module
    optim = import_module("lazypatch.registry.ascend.optim")
    with_grads = [p for p in params if p.requires_grad and p.grad is not None]
    if not with_grads:
        return None
    if optimizer is not None and optim.can_fuse(optimizer, grad_clip):
        return getattr(optimizer, optim.FUSED_METHOD)(**grad_clip)
    import torch
    return torch.nn.utils.clip_grad_norm_(with_grads, **grad_clip)


def optimizer_hook_family(hooks: Any) -> Dict[str, type]:
    """The four hook classes, subclasses of ``hooks.Hook``, using ``hooks``'s
    ``GradScaler``, ``wrap_fp16_model``, ``_BatchNorm`` and ``logging`` (read when used,
    so a name changed on the module later is seen)."""
    optimizer_hook = _optimizer_hook(hooks)
    cumulative_hook = _gradient_cumulative_hook(hooks, optimizer_hook)
    fp16_hook = _fp16_hook(hooks, optimizer_hook)

    class GradientCumulativeFp16OptimizerHook(cumulative_hook, fp16_hook):  # type: ignore[valid-type,misc]
        """Mixed precision with gradients accumulated over ``cumulative_iters``."""

        def after_train_iter(self, runner: Any) -> None:
            self.loss_scaler.scale(self.scaled_loss(runner)).backward()
            if self.group_ends(runner):
                self.unscaled_step(runner)
                runner.model.zero_grad()
                runner.optimizer.zero_grad()

    family = {"OptimizerHook": optimizer_hook,
              "GradientCumulativeOptimizerHook": cumulative_hook,
              "Fp16OptimizerHook": fp16_hook,
              "GradientCumulativeFp16OptimizerHook": GradientCumulativeFp16OptimizerHook}
    for hook in family.values():
        hook.__module__ = getattr(hooks, "__name__", hook.__module__)
    return family


def _log_parameters_outside_graph(hooks: Any, loss: Any, runner: Any) -> None:
    """Log, at ERROR, each trainable parameter the loss does not depend on."""
    in_graph = set()
    seen = set()
    pending = [loss.grad_fn]
    while pending:
        node = pending.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable"):
            in_graph.add(node.variable)
        pending.extend(parent[0] for parent in (node.next_functions or ()))
    for name, parameter in runner.model.named_parameters():
        if parameter not in in_graph and parameter.requires_grad:
            runner.logger.log(level=hooks.logging.ERROR,
                              msg=f"{name} with shape {parameter.size()} is not in "
                                  f"the computational graph \n")


def _optimizer_hook(hooks: Any) -> type:
    """mmcv 1.x's ``OptimizerHook`` on ``hooks.Hook``."""
    base: Any = hooks.Hook

    class OptimizerHook(base):
        """Zero the gradients, back-propagate, clip (fused), step."""

        def __init__(self, grad_clip: Optional[Dict[str, Any]] = None,
                     detect_anomalous_params: bool = False) -> None:
            self.grad_clip = grad_clip
            self.detect_anomalous_params = detect_anomalous_params

        def clip_grads(self, params: Iterable[Any], runner: Any = None) -> Any:
            return _clip_norm(getattr(runner, "optimizer", None), params, self.grad_clip or {})

        def clip_and_log(self, runner: Any) -> None:
            if self.grad_clip is None:
                return
            norm = self.clip_grads(runner.model.parameters(), runner)
            if norm is not None:
                runner.log_buffer.update({"grad_norm": float(norm)},
                                         runner.outputs["num_samples"])

        def after_train_iter(self, runner: Any) -> None:
            runner.optimizer.zero_grad()
            if self.detect_anomalous_params:
                self.detect_anomalous_parameters(runner.outputs["loss"], runner)
            runner.outputs["loss"].backward()
            self.clip_and_log(runner)
            runner.optimizer.step()

        def detect_anomalous_parameters(self, loss: Any, runner: Any) -> None:
            """Log, at ERROR, each trainable parameter the loss does not depend on."""
            _log_parameters_outside_graph(hooks, loss, runner)

    return OptimizerHook


def _warn_before_accumulating(hook: Any, runner: Any) -> None:
    """mmcv's two warnings: a resumed iteration inside a group, BatchNorm layers."""
    if runner.iter % hook.cumulative_iters != 0:
        runner.logger.warning(
            "Resume iter number is not divisible by cumulative_iters in "
            "GradientCumulativeOptimizerHook, which means the gradient of some iters "
            "is lost and the result may be influenced slightly.")
    if hook.cumulative_iters > 1 and hook.has_batch_norm(runner.model):
        runner.logger.warning("GradientCumulativeOptimizerHook may slightly decrease "
                              "performance if the model has BatchNorm layers.")


def _loss_factor(hook: Any, runner: Any) -> int:
    """What the loss is divided by this iteration: ``cumulative_iters``, or in the last
    iterations that do not fill a group, how many they are."""
    if runner.iter < runner.max_iters - hook.remainder_iters:
        return hook.cumulative_iters
    factor = hook.remainder_iters
    runner.logger.warning(
        f"Loss will be divided by {factor} in the last {hook.remainder_iters} "
        f"iterations because they are not enough for {hook.cumulative_iters} "
        f"cumulative_iters.")
    if factor <= 0:
        raise ValueError("loss_factor should be larger than 0.")
    return factor


def _gradient_cumulative_hook(hooks: Any, optimizer_hook: Any) -> type:
    """mmcv 1.x's ``GradientCumulativeOptimizerHook`` on ``optimizer_hook``."""

    class GradientCumulativeOptimizerHook(optimizer_hook):
        """Accumulate gradients over ``cumulative_iters`` iterations, then step."""

        def __init__(self, cumulative_iters: int = 1, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            if not isinstance(cumulative_iters, int) or cumulative_iters <= 0:
                raise ValueError(f"cumulative_iters only accepts positive int, but got "
                                 f"{type(cumulative_iters)} instead.")
            self.cumulative_iters = cumulative_iters
            self.divisible_iters = 0
            self.remainder_iters = 0
            self.initialized = False

        def has_batch_norm(self, module: Any) -> bool:
            return isinstance(module, hooks._BatchNorm) or any(
                self.has_batch_norm(child) for child in module.children())

        def _init(self, runner: Any) -> None:
            _warn_before_accumulating(self, runner)
            self.divisible_iters = runner.max_iters // self.cumulative_iters \
                * self.cumulative_iters
            self.remainder_iters = runner.max_iters - self.divisible_iters
            self.initialized = True

        def _get_loss_factor(self, runner: Any) -> int:
            return _loss_factor(self, runner)

        def scaled_loss(self, runner: Any) -> Any:
            if not self.initialized:
                self._init(runner)
            return runner.outputs["loss"] / self._get_loss_factor(runner)

        def group_ends(self, runner: Any) -> bool:
            return bool(self.every_n_iters(runner, self.cumulative_iters)
                        or self.is_last_iter(runner))

        def after_train_iter(self, runner: Any) -> None:
            self.scaled_loss(runner).backward()
            if self.group_ends(runner):
                self.clip_and_log(runner)
                runner.optimizer.step()
                runner.optimizer.zero_grad()

    return GradientCumulativeOptimizerHook


def _loss_scaler(hooks: Any, loss_scale: Union[float, str, Dict[str, Any]]) -> Any:
    """The ``GradScaler`` that ``loss_scale`` asks for: "dynamic", a number, or its options."""
    if loss_scale == "dynamic":
        return hooks.GradScaler()
    if isinstance(loss_scale, float):
        return hooks.GradScaler(init_scale=loss_scale)
    if isinstance(loss_scale, dict):
        return hooks.GradScaler(**loss_scale)
    raise ValueError(f'loss_scale must be of type float, dict, or "dynamic", '
                     f"got {loss_scale}")


def _fp16_hook(hooks: Any, optimizer_hook: Any) -> type:
    """mmcv 1.x's ``Fp16OptimizerHook`` on ``optimizer_hook``."""

    class Fp16OptimizerHook(optimizer_hook):
        """Mixed precision: the loss scaled by the module's ``GradScaler``."""

        def __init__(self, grad_clip: Optional[Dict[str, Any]] = None, coalesce: bool = True,
                     bucket_size_mb: int = -1,
                     loss_scale: Union[float, str, Dict[str, Any]] = 512.0,
                     distributed: bool = True) -> None:
            self.grad_clip = grad_clip
            self.coalesce = coalesce
            self.bucket_size_mb = bucket_size_mb
            self.distributed = distributed
            # A number is also the scale each update resets to (mmcv's static scaling).
            self._scale_update_param = loss_scale if isinstance(loss_scale, float) else None
            self.loss_scaler = _loss_scaler(hooks, loss_scale)

        def before_run(self, runner: Any) -> None:
            hooks.wrap_fp16_model(runner.model)
            saved = runner.meta["fp16"] if "fp16" in runner.meta else {}
            if "loss_scaler" in saved:
                self.loss_scaler.load_state_dict(saved["loss_scaler"])

        def copy_grads_to_fp32(self, fp16_net: Any, fp32_weights: Any) -> None:
            for fp32_param, fp16_param in zip(fp32_weights, fp16_net.parameters()):
                if fp16_param.grad is not None:
                    if fp32_param.grad is None:
                        fp32_param.grad = fp32_param.data.new(fp32_param.size())
                    fp32_param.grad.copy_(fp16_param.grad)

        def copy_params_to_fp16(self, fp16_net: Any, fp32_weights: Any) -> None:
            for fp16_param, fp32_param in zip(fp16_net.parameters(), fp32_weights):
                fp16_param.data.copy_(fp32_param.data)

        def unscaled_step(self, runner: Any) -> None:
            """Unscale, clip (fused), step and update the scaler; keep its state."""
            self.loss_scaler.unscale_(runner.optimizer)
            self.clip_and_log(runner)
            self.loss_scaler.step(runner.optimizer)
            self.loss_scaler.update(self._scale_update_param)
            runner.meta.setdefault("fp16", {})["loss_scaler"] = self.loss_scaler.state_dict()

        def after_train_iter(self, runner: Any) -> None:
            runner.model.zero_grad()
            runner.optimizer.zero_grad()
            self.loss_scaler.scale(runner.outputs["loss"]).backward()
            self.unscaled_step(runner)

    return Fp16OptimizerHook


# id -> (the module object, kept so that its id stays its own; its family). Any object
# can be given (a SimpleNamespace cannot be weakly referenced), and few ever are.
_FAMILIES: Dict[int, Tuple[Any, Dict[str, type]]] = {}


def optimizer_hook_of(hooks: Any, name: str) -> type:
    """The hook class ``name`` of ``hooks``'s family, the family built once per module
    object (so the subclasses registered are of the base classes registered)."""
    if id(hooks) not in _FAMILIES:
        _FAMILIES[id(hooks)] = (hooks, optimizer_hook_family(hooks))
    return _FAMILIES[id(hooks)][1][name]

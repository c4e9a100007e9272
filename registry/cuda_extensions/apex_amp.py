"""apex.amp's documented interface on ``torch.autocast`` and a dynamic loss scaler.

What apex documents, and what this does:

* ``initialize(models, optimizers=None, enabled=True, opt_level="O1", ...)``
  returns the models and optimizers in the form given (one or a list; the
  models alone when no optimizer is given). ``O0``: float32, loss scale 1.
  ``O1``: each model's ``forward`` runs under ``torch.autocast`` (float16,
  or the dtype ``cast_model_type`` names), dynamic loss scaling. ``O2``/``O3`` (float16 master weights) raise
  ``NotImplementedError``: use O1.
* ``scale_loss(loss, optimizers)`` yields ``loss * scale``; on leaving the
  block the gradients of those optimizers' parameters are unscaled; if one
  is not finite, the next ``optimizer.step()`` is skipped and the scale
  halves (dynamic scaling), else after ``scale_window`` (2000) clean steps
  it doubles, between ``min_loss_scale`` and ``max_loss_scale``.
  ``delay_unscale=True`` leaves the gradients scaled (accumulation).
* ``master_params(optimizer)`` yields the optimizer's parameters (they are
  the master weights in O0/O1); ``state_dict()``/``load_state_dict()`` hold
  the loss scalers.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch

OPT_LEVELS = ("O0", "O1")
INITIAL_DYNAMIC_SCALE = 2.0 ** 16   # apex's initial dynamic loss scale
SCALE_WINDOW = 2000


def _unsupported(what: str, hint: str) -> NotImplementedError:
    return NotImplementedError(
        f"lazypatch's pure-PyTorch apex.amp does not support {what} (apex is not installed; "
        f"lazypatch pack 'cuda_extensions' provides a stand-in): {hint}")


class LossScaler:
    """apex's loss scaler: static, or dynamic (halve and skip on overflow, double after
    ``SCALE_WINDOW`` clean steps)."""

    def __init__(self, loss_scale: Union[str, float], min_loss_scale: Optional[float] = None,
                 max_loss_scale: float = 2.0 ** 24) -> None:
        self.dynamic = loss_scale == "dynamic"
        self.loss_scale = INITIAL_DYNAMIC_SCALE if self.dynamic else float(loss_scale)
        if self.dynamic:
            self.loss_scale = min(self.loss_scale, max_loss_scale)
        self.min_loss_scale = min_loss_scale
        self.max_loss_scale = max_loss_scale
        self.unskipped = 0

    def unscale(self, parameters: Sequence[torch.Tensor]) -> bool:
        """Divide the gradients by the scale; whether one of them is not finite."""
        gradients = [p.grad for p in parameters if p.grad is not None]
        if not gradients:
            return False
        overflow = not bool(torch.stack([g.detach().isfinite().all() for g in gradients]).all())
        if self.loss_scale != 1.0:
            for gradient in gradients:
                gradient.mul_(1.0 / self.loss_scale)
        return overflow

    def update(self, overflow: bool) -> None:
        """Adjust a dynamic scale after one unscaled step."""
        if not self.dynamic:
            return
        if overflow:
            self.loss_scale /= 2.0
            if self.min_loss_scale is not None:
                self.loss_scale = max(self.loss_scale, self.min_loss_scale)
            self.unskipped = 0
            return
        self.unskipped += 1
        if self.unskipped == SCALE_WINDOW:
            self.loss_scale = min(self.loss_scale * 2.0, self.max_loss_scale)
            self.unskipped = 0

    def state_dict(self) -> Dict[str, Any]:
        return {"loss_scale": self.loss_scale, "unskipped": self.unskipped}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.loss_scale = float(state["loss_scale"])
        self.unskipped = int(state["unskipped"])


class AmpState:
    """What ``initialize`` chose, read by ``scale_loss`` (apex keeps it global too)."""

    def __init__(self) -> None:
        self.enabled = False
        self.initialized = False
        self.scalers: List[LossScaler] = []


STATE = AmpState()


def _as_list(value: Any) -> Tuple[List[Any], bool]:
    if isinstance(value, (list, tuple)):
        return list(value), True
    return [value], False


def _autocast_forward(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Run ``model.forward`` under ``torch.autocast`` on the device of its parameters."""
    forward = model.forward
    parameter = next(model.parameters(), None)
    device_type = parameter.device.type if parameter is not None else "cpu"

    @functools.wraps(forward)
    def autocast_forward(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type=device_type, dtype=dtype):
            return forward(*args, **kwargs)
    model.forward = autocast_forward   # an instance attribute, as apex O1/O2 do


def _skip_next_step(optimizer: torch.optim.Optimizer) -> None:
    """Make the next ``optimizer.step()`` do nothing, once (apex does the same)."""
    def skip_step(*args: Any, **kwargs: Any) -> None:
        del optimizer.step   # the class's step again from now on
        return None
    optimizer.step = skip_step   # type: ignore[method-assign]


def initialize(models: Any, optimizers: Any = None, enabled: bool = True,
               opt_level: str = "O1", cast_model_type: Optional[torch.dtype] = None,
               patch_torch_functions: Optional[bool] = None,
               keep_batchnorm_fp32: Optional[bool] = None,
               master_weights: Optional[bool] = None,
               loss_scale: Union[None, str, float] = None,
               cast_model_outputs: Optional[torch.dtype] = None, num_losses: int = 1,
               verbosity: int = 1, min_loss_scale: Optional[float] = None,
               max_loss_scale: float = 2.0 ** 24) -> Any:
    """apex.amp.initialize: set up O0 or O1 mixed precision; returns what it was given."""
    model_list, models_were_list = _as_list(models)
    if not enabled:
        STATE.enabled = False
        return models if optimizers is None else (models, optimizers)
    if opt_level not in OPT_LEVELS:
        raise _unsupported(f"opt_level={opt_level!r}",
                           "use opt_level='O1' (autocast with float32 master weights)")
    if master_weights:
        raise _unsupported("master_weights=True", "the parameters stay float32 in O0/O1")
    if opt_level == "O1":
        dtype = cast_model_type or torch.float16
        for model in model_list:
            _autocast_forward(model, dtype)
    default_scale: Union[str, float] = "dynamic" if opt_level == "O1" else 1.0
    STATE.scalers = [LossScaler(default_scale if loss_scale is None else loss_scale,
                                min_loss_scale, max_loss_scale) for _ in range(num_losses)]
    STATE.enabled = STATE.initialized = True
    result_models = model_list if models_were_list else model_list[0]
    return result_models if optimizers is None else (result_models, optimizers)


@contextlib.contextmanager
def scale_loss(loss: torch.Tensor, optimizers: Any, loss_id: int = 0,
               model: Optional[torch.nn.Module] = None, delay_unscale: bool = False,
               delay_overflow_check: bool = False) -> Iterator[torch.Tensor]:
    """Yield ``loss * scale``; on exit unscale the gradients, skip the next step on overflow."""
    if not STATE.enabled:
        yield loss
        return
    if not STATE.initialized:
        raise RuntimeError("amp.scale_loss is used before amp.initialize()")
    scaler = STATE.scalers[loss_id]
    yield loss.float() * scaler.loss_scale
    if delay_unscale:
        return
    optimizer_list, _ = _as_list(optimizers)
    parameters = [p for optimizer in optimizer_list for p in master_params(optimizer)]
    overflow = scaler.unscale(parameters)
    scaler.update(overflow)
    if overflow:
        for optimizer in optimizer_list:
            _skip_next_step(optimizer)


def master_params(optimizer: torch.optim.Optimizer) -> Iterator[torch.Tensor]:
    """The parameters ``optimizer`` updates (the float32 master weights in O0/O1)."""
    for group in optimizer.param_groups:
        yield from group["params"]


def state_dict(destination: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The loss scalers' state, as apex names it (``loss_scaler0``, ...)."""
    state = {} if destination is None else destination
    for index, scaler in enumerate(STATE.scalers):
        state[f"loss_scaler{index}"] = scaler.state_dict()
    return state


def load_state_dict(state: Dict[str, Any]) -> None:
    """Restore the loss scalers saved by ``state_dict``."""
    for index, scaler in enumerate(STATE.scalers):
        key = f"loss_scaler{index}"
        if key in state:
            scaler.load_state_dict(state[key])


__all__ = ["initialize", "scale_loss", "master_params", "state_dict", "load_state_dict",
           "LossScaler"]

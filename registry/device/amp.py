"""Automatic mixed precision: autocast and GradScaler for "cuda" run on the target.

``torch.cuda.amp.autocast``/``GradScaler`` are thin subclasses that pass
"cuda" to ``torch.amp.autocast``/``torch.amp.GradScaler``, and
``torch.autocast("cuda")`` is the same class, so translating the device type
in the two base constructors covers every spelling. The dtype stays what the
code asked for (float16 for torch.cuda.amp): no silent dtype change.
"""

from __future__ import annotations

from .observe import record
from .target import resolve

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Tuple


def _device_type(value: "Any") -> "Any":
    """The target's device type for "cuda" (or a CUDA device), else ``value``."""
    text = value.type if hasattr(value, "type") and not isinstance(value, str) else value
    if not isinstance(text, str) or text.split(":")[0] != "cuda":
        return value
    target = resolve()
    if target is None or target.passthrough:
        return value
    return target.type


def device_type_wrapper(api: str, keyword: str) -> "Callable[..., Any]":
    """Translate the first argument (or ``keyword=``) of a constructor taking a device type."""
    def wrapper(wrapped: "Any", instance: "Any", args: "Tuple[Any, ...]",
                kwargs: "Dict[str, Any]") -> "Any":
        if args:
            translated = _device_type(args[0])
            if translated is not args[0]:
                record(api)
                args = (translated,) + tuple(args[1:])
        elif kwargs.get(keyword) is not None:
            translated = _device_type(kwargs[keyword])
            if translated is not kwargs[keyword]:
                record(api)
                kwargs[keyword] = translated
        return wrapped(*args, **kwargs)
    return wrapper


def patch_amp(amp: "Any", patch: "Any") -> None:
    """autocast.__init__(device_type, ...) and GradScaler.__init__(device, ...)."""
    from torch.amp import autocast_mode, grad_scaler
    patch.wrap(autocast_mode.autocast, "__init__",
               device_type_wrapper("torch.autocast", "device_type"))
    patch.wrap(grad_scaler.GradScaler, "__init__",
               device_type_wrapper("torch.amp.GradScaler", "device"))
    # custom_fwd/custom_bwd(device_type="cuda") read autocast state of that device type.
    for name in ("custom_fwd", "custom_bwd"):
        if name in vars(autocast_mode):
            wrapper = patch.wrap(autocast_mode, name, _keyword_device_type(f"torch.amp.{name}"))
            if vars(amp).get(name) is not None:
                patch.setattr(amp, name, wrapper)


def _keyword_device_type(api: str) -> "Callable[..., Any]":
    def wrapper(wrapped: "Any", instance: "Any", args: "Tuple[Any, ...]",
                kwargs: "Dict[str, Any]") -> "Any":
        device_type = kwargs.get("device_type")
        if device_type is not None:
            translated = _device_type(device_type)
            if translated is not device_type:
                record(api)
                kwargs["device_type"] = translated
        return wrapped(*args, **kwargs)
    return wrapper

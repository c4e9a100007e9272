"""torch.Tensor and torch.nn.Module methods that take a device.

``to`` is on the hot path of every training loop (``x.to(device)`` per
batch), so its wrapper does type checks on the first argument and one dict
lookup, and records a call only when it really redirected one.
"""

from __future__ import annotations

from .factories import device_keyword_wrapper
from .observe import record
from .target import resolve, translate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Tuple

TENSOR_NEW_METHODS = ("new_empty", "new_zeros", "new_ones", "new_full", "new_tensor",
                      "new_empty_strided")


def to_wrapper(api: str) -> "Callable[..., Any]":
    """Wrapper for ``to(device)``, ``to(device, dtype)``, ``to(device=...)``;
    ``to(dtype)`` and ``to(tensor)`` pass through."""
    def wrapper(wrapped: "Any", instance: "Any", args: "Tuple[Any, ...]",
                kwargs: "Dict[str, Any]") -> "Any":
        if args:
            first = args[0]
            translated = translate(first)
            if translated is not first:
                args = (translated,) + tuple(args[1:])
                record(api)
        if kwargs:
            device = kwargs.get("device")
            if device is not None:
                translated = translate(device)
                if translated is not device:
                    kwargs["device"] = translated
                    record(api)
        return wrapped(*args, **kwargs)
    return wrapper


def _cuda_device(args: "Tuple[Any, ...]", kwargs: "Dict[str, Any]") -> "Any":
    """The target device for ``.cuda(device=None, ...)``'s device argument."""
    device = args[0] if args else kwargs.pop("device", None)
    if device is None:
        return None
    return translate(device if not isinstance(device, int) else int(device))


def patch_tensor_methods(torch: "Any", patch: "Any") -> None:
    """Tensor.to, .cuda, .new_*, .pin_memory."""
    tensor = torch.Tensor
    base_to = torch._C.TensorBase.to
    patch.wrap(tensor, "to", to_wrapper("Tensor.to"))

    def cuda(wrapped: "Any", instance: "Any", args: "Tuple[Any, ...]",
             kwargs: "Dict[str, Any]") -> "Any":
        target = resolve()
        if target is None or target.passthrough:
            return wrapped(*args, **kwargs)
        record("Tensor.cuda")
        kwargs = dict(kwargs)
        device = _cuda_device(args, kwargs)
        return base_to(instance, device if device is not None else target.default,
                       non_blocking=kwargs.get("non_blocking", False),
                       memory_format=kwargs.get("memory_format", torch.preserve_format))
    patch.wrap(tensor, "cuda", cuda)

    for name in TENSOR_NEW_METHODS:
        patch.wrap(tensor, name, device_keyword_wrapper(f"Tensor.{name}"))

    def pin_memory(wrapped: "Any", instance: "Any", args: "Tuple[Any, ...]",
                   kwargs: "Dict[str, Any]") -> "Any":
        target = resolve()
        if target is None or target.passthrough:
            return wrapped(*args, **kwargs)
        record("Tensor.pin_memory")
        if target.is_cpu:
            return instance   # page-locking is for host-to-device copies; no device here
        if args:
            args = (translate(args[0]),) + tuple(args[1:])
        if kwargs.get("device") is not None:
            kwargs = dict(kwargs, device=translate(kwargs["device"]))
        return wrapped(*args, **kwargs)
    patch.wrap(tensor, "pin_memory", pin_memory)


def patch_module_methods(module: "Any", patch: "Any") -> None:
    """nn.Module.to, .cuda and .to_empty (module: torch.nn.modules.module)."""
    nn_module = module.Module
    patch.wrap(nn_module, "to", to_wrapper("Module.to"))

    def cuda(wrapped: "Any", instance: "Any", args: "Tuple[Any, ...]",
             kwargs: "Dict[str, Any]") -> "Any":
        target = resolve()
        if target is None or target.passthrough:
            return wrapped(*args, **kwargs)
        record("Module.cuda")
        device = _cuda_device(args, dict(kwargs))
        return instance.to(device if device is not None else target.default)
    patch.wrap(nn_module, "cuda", cuda)
    patch.wrap(nn_module, "to_empty", device_keyword_wrapper("Module.to_empty"))

"""torch.Tensor and torch.nn.Module methods that take a device.

``Tensor.to`` is on the hot path of every training loop (``x.to(device)``
per batch), so its replacement is a plain function (no wrapt binding): a
type check on the first argument, one dict lookup, and a count only when it
really redirected something.
"""

from __future__ import annotations

from .factories import device_keyword_function, named_like
from .observe import counter, record
from .target import resolve, translate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Tuple

TENSOR_NEW_METHODS = ("new_empty", "new_zeros", "new_ones", "new_full", "new_tensor",
                      "new_empty_strided")


def to_function(api: str, original: "Callable[..., Any]") -> "Callable[..., Any]":
    """``original`` (a ``to`` method) with ``to(device)``, ``to(device, dtype)`` and
    ``to(device=...)`` translated; ``to(dtype)`` and ``to(tensor)`` pass through."""
    import torch
    device_type = torch.device
    calls = counter(api)

    # Per batch in every training loop: no Python call besides translate (itself
    # a cache hit) on the way to the original.
    def to(self: "Any", *args: "Any", **kwargs: "Any") -> "Any":
        redirected = False
        if args:
            first = args[0]
            kind = type(first)
            # Only these can name a CUDA device (translate's own test, done here so
            # that .to(dtype) and .to(tensor) skip the call).
            if kind is str or kind is device_type or kind is int:
                translated = translate(first)
                if translated is not first:
                    args = (translated,) + args[1:]
                    redirected = True
        if kwargs:
            device = kwargs.get("device")
            if device is not None:
                translated = translate(device)
                if translated is not device:
                    kwargs["device"] = translated
                    redirected = True
        if redirected:
            if calls[0]:
                calls[0] += 1
            else:
                record(api)
        return original(self, *args, **kwargs)
    return named_like(to, original)


def _cuda_device(args: "Tuple[Any, ...]", kwargs: "Dict[str, Any]") -> "Any":
    """The target device for ``.cuda(device=None, ...)``'s device argument (None: default)."""
    device = args[0] if args else kwargs.get("device")
    return None if device is None else translate(device)


def patch_tensor_methods(torch: "Any", patch: "Any") -> None:
    """Tensor.to, .cuda, .new_*, .pin_memory, .record_stream."""
    tensor = torch.Tensor
    patch.setattr(tensor, "to", to_function("Tensor.to", tensor.to))
    patch.setattr(tensor, "cuda", cuda_method(torch, tensor.cuda))
    for name in TENSOR_NEW_METHODS:
        patch.setattr(tensor, name, device_keyword_function(f"Tensor.{name}",
                                                            getattr(tensor, name)))
    patch.setattr(tensor, "pin_memory", pin_memory_method(tensor.pin_memory))
    from .cuda_classes import record_stream_function
    patch.setattr(tensor, "record_stream", record_stream_function(tensor.record_stream))


def cuda_method(torch: "Any", original_cuda: "Callable[..., Any]") -> "Callable[..., Any]":
    """``Tensor.cuda`` moving the tensor to the target device (the NPU, or the CPU)."""
    base_to = torch._C.TensorBase.to
    preserve_format = torch.preserve_format
    calls = counter("Tensor.cuda")

    def cuda(self: "Any", *args: "Any", **kwargs: "Any") -> "Any":
        target = resolve()
        if target is None or target.passthrough:
            return original_cuda(self, *args, **kwargs)
        if calls[0]:
            calls[0] += 1
        else:
            record("Tensor.cuda")
        if not args:      # x.cuda() / x.cuda(non_blocking=True): the per-batch cases
            if not kwargs:
                return base_to(self, target.default)
            device = kwargs.get("device")
            device = target.default if device is None else translate(device)
            return base_to(self, device, non_blocking=kwargs.get("non_blocking", False),
                           memory_format=kwargs.get("memory_format", preserve_format))
        device = _cuda_device(args, kwargs)
        return base_to(self, device if device is not None else target.default,
                       non_blocking=kwargs.get("non_blocking", False),
                       memory_format=kwargs.get("memory_format", preserve_format))
    return named_like(cuda, original_cuda)


def pin_memory_method(original_pin: "Callable[..., Any]") -> "Callable[..., Any]":
    """``Tensor.pin_memory``: a no-op on the CPU, the device translated on an NPU."""

    def pin_memory(self: "Any", *args: "Any", **kwargs: "Any") -> "Any":
        target = resolve()
        if target is None or target.passthrough:
            return original_pin(self, *args, **kwargs)
        record("Tensor.pin_memory")
        if target.is_cpu:
            return self   # page-locking is for host-to-device copies; no device here
        if args:
            args = (translate(args[0]),) + args[1:]
        if kwargs.get("device") is not None:
            kwargs["device"] = translate(kwargs["device"])
        return original_pin(self, *args, **kwargs)
    return named_like(pin_memory, original_pin)


def patch_module_methods(module: "Any", patch: "Any") -> None:
    """nn.Module.to, .cuda and .to_empty (module: torch.nn.modules.module)."""
    nn_module = module.Module
    namespace = vars(nn_module)
    patch.setattr(nn_module, "to", to_function("Module.to", namespace["to"]))
    original_cuda = namespace["cuda"]

    def cuda(self: "Any", *args: "Any", **kwargs: "Any") -> "Any":
        target = resolve()
        if target is None or target.passthrough:
            return original_cuda(self, *args, **kwargs)
        record("Module.cuda")
        device = _cuda_device(args, kwargs)
        return self.to(device if device is not None else target.default)
    patch.setattr(nn_module, "cuda", named_like(cuda, original_cuda))
    patch.setattr(nn_module, "to_empty",
                  device_keyword_function("Module.to_empty", namespace["to_empty"]))

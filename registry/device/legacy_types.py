"""Legacy CUDA tensor types: ``torch.cuda.FloatTensor(n)``, ``x.type(torch.cuda.HalfTensor)``,
``x.type("torch.cuda.FloatTensor")``, ``isinstance(x, torch.cuda.LongTensor)``.

On a CPU-only torch these ``torch.tensortype`` objects refuse to build
anything ("type torch.cuda.FloatTensor not available"), and ``Tensor.type``
initialises CUDA. Each is replaced by a class (so ``isinstance``, ``issubclass``
and ``type(...)`` comparisons still work) whose call builds the tensor with
the CPU legacy constructor, with its argument forms (sizes, data, a storage),
then moves it to the target; ``isinstance`` accepts tensors of that dtype on
the target, as it accepts CUDA tensors of that dtype on a CUDA machine.
"""

from __future__ import annotations

import sys

from .observe import record
from .target import resolve

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Optional


def _torch() -> "Any":
    return sys.modules["torch"]


class LegacyCudaTensorType(type):
    """Metaclass of the stand-ins for ``torch.cuda.<Scalar>Tensor``."""

    _lazypatch_original: "Any"
    dtype: "Any"

    def __call__(cls, *args: "Any", **kwargs: "Any") -> "Any":
        target = resolve()
        if target is None or target.passthrough:
            return cls._lazypatch_original(*args, **kwargs)
        record(f"torch.cuda.{cls.__name__}")
        tensor = getattr(_torch(), cls.__name__)(*args, **kwargs)
        return tensor if target.is_cpu else tensor.to(target.default)

    def __instancecheck__(cls, instance: "Any") -> bool:
        torch = _torch()
        if not isinstance(instance, torch.Tensor):
            return False
        if isinstance(instance, cls._lazypatch_original):
            return True
        target = resolve()
        return (target is not None and instance.device.type == target.type
                and instance.dtype == cls.dtype and instance.layout == torch.strided)

    def __repr__(cls) -> str:
        return f"<class 'torch.cuda.{cls.__name__}'>"


def stand_in(name: str, original: "Any") -> type:
    """A class standing for ``torch.cuda.<name>`` (a legacy tensor type)."""
    return LegacyCudaTensorType(name, (), {
        "__module__": "torch.cuda", "__qualname__": name, "__doc__": original.__doc__,
        "_lazypatch_original": original, "dtype": original.dtype,
        "is_cuda": True, "is_sparse": False,
    })


def legacy_type_names(cuda: "Any") -> "Dict[str, Any]":
    """``torch.cuda``'s legacy tensor types: name -> the ``torch.tensortype`` object."""
    tensortype = type(cuda.FloatTensor) if "FloatTensor" in vars(cuda) else None
    return {name: value for name, value in vars(cuda).items()
            if tensortype is not None and type(value) is tensortype}


def patch_legacy_types(cuda: "Any", patch: "Any") -> None:
    """Replace each legacy tensor type of torch.cuda by its stand-in class."""
    for name, original in legacy_type_names(cuda).items():
        patch.setattr(cuda, name, stand_in(name, original))


def _legacy_dtype(value: "Any") -> "Optional[Any]":
    """The dtype when ``value`` names a legacy CUDA tensor type (a stand-in, the
    original tensortype, or "torch.cuda.FloatTensor"), else None."""
    if isinstance(value, LegacyCudaTensorType):
        return value.dtype
    if isinstance(value, str):
        if not value.startswith("torch.cuda.") or not value.endswith("Tensor"):
            return None
        value = vars(_torch().cuda).get(value[len("torch.cuda."):])
        return value.dtype if isinstance(value, LegacyCudaTensorType) else None
    if getattr(value, "is_cuda", False) is True and type(value).__name__ == "tensortype":
        return value.dtype
    return None


def type_function(original: "Callable[..., Any]") -> "Callable[..., Any]":
    """``Tensor.type(dtype=None, non_blocking=False)`` with legacy CUDA types moved
    to the target; ``x.type()`` still answers honestly (e.g. "torch.FloatTensor")."""
    def type(self: "Any", dtype: "Any" = None, non_blocking: bool = False,
             **kwargs: "Any") -> "Any":
        if dtype is not None:
            legacy = _legacy_dtype(dtype)
            if legacy is not None:
                target = resolve()
                if target is not None and not target.passthrough:
                    record("Tensor.type")
                    return self.to(device=target.default, dtype=legacy,
                                   non_blocking=bool(non_blocking or kwargs.get("async")))
            return original(self, dtype, non_blocking, **kwargs)
        return original(self, **kwargs)
    type.__name__ = type.__qualname__ = "type"
    type.__doc__ = original.__doc__
    return type


def set_default_tensor_type_function(original: "Callable[..., Any]") -> "Callable[..., Any]":
    """``torch.set_default_tensor_type(torch.cuda.FloatTensor)`` (or its name): the
    CPU type of that dtype, plus the target as default device when it is not the CPU."""
    def set_default_tensor_type(t: "Any") -> None:
        legacy = _legacy_dtype(t)
        target = resolve()
        if legacy is None or target is None or target.passthrough:
            return original(t)
        record("torch.set_default_tensor_type")
        name = t if isinstance(t, str) else f"torch.cuda.{t.__name__}"
        original("torch." + name[len("torch.cuda."):])
        if not target.is_cpu:
            _torch().set_default_device(target.default)
        return None
    set_default_tensor_type.__name__ = set_default_tensor_type.__qualname__ = \
        "set_default_tensor_type"
    set_default_tensor_type.__doc__ = original.__doc__
    return set_default_tensor_type

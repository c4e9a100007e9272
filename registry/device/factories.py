"""Factory functions, torch.Generator and ``with torch.device(...)``.

Factories are redirected by replacing each function (``patch.setattr``): only
calls that pass ``device=`` pay for a dict lookup, every other torch call is
untouched. The alternative, a global ``TorchFunctionMode``, sees every torch
call and costs more per training step (see benchmarks/packs/device/bench_device.py).
"""

from __future__ import annotations

from .observe import counter, record
from .target import translate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Tuple

# Functions of the torch namespace that take a device= keyword argument.
FACTORY_NAMES = (
    "tensor", "as_tensor", "asarray", "zeros", "ones", "empty", "full", "rand", "randn",
    "randint", "randperm", "arange", "range", "linspace", "logspace", "eye",
    "empty_strided", "empty_like", "zeros_like", "ones_like", "full_like", "rand_like",
    "randn_like", "randint_like", "tril_indices", "triu_indices", "sparse_coo_tensor",
    "sparse_csr_tensor", "sparse_csc_tensor", "sparse_bsr_tensor", "sparse_bsc_tensor",
    "sparse_compressed_tensor", "scalar_tensor", "normal", "from_file", "empty_permuted",
    "bartlett_window", "blackman_window", "hamming_window", "hann_window", "kaiser_window",
)


def device_keyword_function(api: str, original: "Callable[..., Any]") -> "Callable[..., Any]":
    """``original`` with its ``device=`` keyword translated to the target.

    A plain function, not a ``wrapt`` wrapper: on a C function or method
    descriptor a FunctionWrapper costs about 2 µs per call here, a plain
    function about 0.6 µs (benchmarks/packs/device/bench_device.py), and these are called
    in training loops. Works as a method too (``self`` is the first argument).
    """
    calls = counter(api)

    def redirected(*args: "Any", **kwargs: "Any") -> "Any":
        # Inlined rather than a call to translate_device_keyword: torch's own Python
        # code calls these factories too (autograd's torch.ones_like per backward,
        # with memory_format= but no device), and a second Python call per call
        # is most of what the replacement costs.
        if kwargs:
            device = kwargs.get("device")
            if device is not None:
                translated = translate(device)
                if translated is not device:
                    kwargs["device"] = translated
                    if calls[0]:
                        calls[0] += 1
                    else:
                        record(api)
        return original(*args, **kwargs)
    return named_like(redirected, original)


def translate_device_keyword(api: str, kwargs: "Dict[str, Any]") -> None:
    """Translate ``kwargs["device"]`` in place when it names a redirected device."""
    device = kwargs.get("device")
    if device is not None:
        translated = translate(device)
        if translated is not device:
            kwargs["device"] = translated
            record(api)


def named_like(function: "Callable[..., Any]", original: "Any") -> "Callable[..., Any]":
    """Give ``function`` the name, qualname and doc of ``original`` (what help() shows)."""
    for attribute in ("__name__", "__qualname__", "__doc__"):
        value = getattr(original, attribute, None)
        if isinstance(value, str):
            setattr(function, attribute, value)
    function.__wrapped__ = original  # type: ignore[attr-defined]
    return function


def patch_factories(torch: "Any", patch: "Any") -> None:
    """Replace every factory of ``FACTORY_NAMES`` this torch has; TorchScript sees
    each replacement as the original's operator."""
    from .torchscript import builtin_table, register_like
    table = builtin_table()        # before the replacements: it must record the originals
    namespace = vars(torch)
    for name in FACTORY_NAMES:
        if name in namespace:
            original = namespace[name]
            replacement = device_keyword_function(f"torch.{name}", original)
            patch.setattr(torch, name, replacement)
            register_like(table, replacement, original, patch)


def patch_generator(torch: "Any", patch: "Any") -> None:
    """Replace torch.Generator by a subclass whose constructor translates the device.

    The subclass answers isinstance/issubclass like the original class, so
    generators torch creates itself (torch.default_generator) still pass
    ``isinstance(g, torch.Generator)``.
    """
    original = vars(torch)["Generator"]

    class _GeneratorType(type(original)):  # type: ignore[misc]
        def __instancecheck__(cls, instance: "Any") -> bool:
            return isinstance(instance, original)

        def __subclasscheck__(cls, subclass: "Any") -> bool:
            return issubclass(subclass, original)

    class Generator(original, metaclass=_GeneratorType):  # type: ignore[misc]
        __doc__ = original.__doc__

        def __new__(cls, device: "Any" = "cpu") -> "Any":
            translated = translate(device)
            if translated is not device:
                record("torch.Generator")
            # An instance of the original class: __init__ of this class never runs.
            return original(translated)

    Generator.__module__ = "torch"
    Generator.__qualname__ = "Generator"
    patch.setattr(torch, "Generator", Generator)


def patch_device_context(module: "Any", patch: "Any") -> None:
    """``with torch.device("cuda")`` and ``torch.set_default_device("cuda")`` build
    ``torch.utils._device.DeviceContext(device)``: translate its device."""
    def wrapper(wrapped: "Any", instance: "Any", args: "Tuple[Any, ...]",
                kwargs: "Dict[str, Any]") -> "Any":
        if args:
            translated = translate(args[0])
            if translated is not args[0]:
                record("torch.device context")
                args = (translated,) + tuple(args[1:])
        return wrapped(*args, **kwargs)
    patch.wrap(module.DeviceContext, "__init__", wrapper)

"""torch.cuda.Stream, Event and ExternalStream stay the very same classes under the pack.

``isinstance(s, torch.cuda.Stream)``, subclassing and torch's own
``isinstance`` checks (``torch.cuda._utils._get_device_index`` tests
``isinstance(device, torch.cuda.device)``) need the class objects themselves,
so instead of replacing them, their constructors and methods are patched in
place: an instance built while the target is not CUDA holds the target's
native stream or event (``torch.npu.Stream`` on an NPU, ``cpu_backend.Stream``
on the CPU) and forwards every call to it, unwrapping stream and event
arguments. On a CPU-only torch the classes' C base is a dummy whose
``__init__`` raises, so ``__init__`` is patched too.

``torch.cuda.device``, ``device_of`` and ``StreamContext`` are left untouched:
they only call ``torch.cuda`` functions (``_exchange_device``,
``current_stream``, ``set_stream``), which the pack redirects. ``stream()``
is replaced on the CPU target only, for speed: ``StreamContext.__init__`` asks
``torch._utils._get_available_device_type()`` which accelerator is present
(five backend probes, several µs) on every prefetch; on the CPU its answer
(none) always makes the context select nothing, so the replacement builds
that very context directly.
"""

from __future__ import annotations

from . import cuda_api
from .observe import counter, record
from .target import resolve, translate_index

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Tuple

NATIVE = "_lazypatch_native"    # instance attribute holding the target's stream / event

STREAM_METHODS = ("query", "synchronize", "wait_event", "wait_stream", "record_event")
EVENT_METHODS = ("record", "wait", "query", "synchronize", "elapsed_time", "ipc_handle")


def native(value: "Any") -> "Any":
    """The target's object behind a pack-built Stream/Event; anything else unchanged."""
    try:
        return vars(value).get(NATIVE, value)
    except TypeError:          # no __dict__: not one of ours
        return value


def _implementation(name: str) -> "Any":
    """The target's ``torch.cuda.<name>`` implementation (None: pass through)."""
    return cuda_api.target_implementation(name)


def wrap_native(cls: type, value: "Any") -> "Any":
    """An instance of the CUDA class ``cls`` standing for the target's ``value``."""
    if value is None or isinstance(value, cls):
        return value
    instance = object.__new__(cls)
    vars(instance)[NATIVE] = value
    return instance


def _forwarding_method(name: str, original: "Any") -> "Callable[..., Any]":
    """``cls.<name>`` calling the native object's method (the original when there is none)."""
    wraps_event = name == "record_event"

    def method(self: "Any", *args: "Any", **kwargs: "Any") -> "Any":
        target_object = vars(self).get(NATIVE)
        if target_object is None:
            return original(self, *args, **kwargs)
        # Called per step by prefetchers (wait_stream): no generator, no dict
        # rebuilt when there is nothing to unwrap.
        if args:
            args = ((native(args[0]),) if len(args) == 1
                    else tuple([native(argument) for argument in args]))
        if kwargs:
            kwargs = {key: native(value) for key, value in kwargs.items()}
        result = getattr(target_object, name)(*args, **kwargs)
        if wraps_event and result is not None:
            import torch
            result = wrap_native(torch.cuda.Event, result)
        return result
    method.__name__ = name
    method.__qualname__ = getattr(original, "__qualname__", name)
    method.__doc__ = getattr(original, "__doc__", None)
    return method


def _getattr(self: "Any", name: str) -> "Any":
    """Attributes the CUDA class does not define (device, priority, stream_id...)
    come from the native object."""
    target_object = vars(self).get(NATIVE)
    if target_object is None or name.startswith("__"):
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
    return getattr(target_object, name)


def _init(self: "Any", *args: "Any", **kwargs: "Any") -> None:
    """Nothing to do: ``__new__`` built the instance. (A CPU-only torch's dummy
    C base raises in ``__init__``.)"""


def _repr(self: "Any") -> str:
    target_object = vars(self).get(NATIVE)
    return (f"<torch.cuda.{type(self).__name__} on {getattr(target_object, 'device', '?')} "
            f"(lazypatch device pack)>")


def _equal(self: "Any", other: "Any") -> bool:
    mine, theirs = native(self), native(other)
    if mine is self:
        return NotImplemented
    return mine is theirs or mine == theirs


def _hash(self: "Any") -> int:
    target_object = native(self)
    return id(self) if target_object is self else hash(target_object)


def _constructor(api: str, original_new: "Any",
                 build: "Callable[[Any, Tuple[Any, ...], Dict[str, Any]], Any]") -> "Any":
    """A ``__new__`` building an instance around ``build(implementation, args, kwargs)``."""
    name = api.rpartition(".")[2]

    def __new__(cls: type, *args: "Any", **kwargs: "Any") -> "Any":
        implementation = _implementation(name)
        if implementation is None:
            return original_new(cls, *args, **kwargs)
        record(api)
        instance = object.__new__(cls)
        vars(instance)[NATIVE] = build(implementation, args, kwargs)
        return instance
    return staticmethod(__new__)


def _build_stream(implementation: "Any", args: "Tuple[Any, ...]",
                  kwargs: "Dict[str, Any]") -> "Any":
    """The target stream for ``Stream(device=None, priority=0)``; ExternalStream's
    ``stream_ptr`` names a CUDA stream that cannot exist here, so it is dropped."""
    device = args[0] if args else kwargs.get("device")
    priority = args[1] if len(args) > 1 else kwargs.get("priority", 0)
    if device is not None:
        device = translate_index(device)
    return implementation(device=device, priority=priority)


def _build_event(implementation: "Any", args: "Tuple[Any, ...]",
                 kwargs: "Dict[str, Any]") -> "Any":
    return implementation(*args, **kwargs)


def _patch_class(cuda_class: type, api: str, methods: "Tuple[str, ...]",
                 build: "Callable[..., Any]", patch: "Any") -> None:
    namespace = vars(cuda_class)
    patch.setattr(cuda_class, "__new__", _constructor(api, namespace["__new__"], build))
    patch.setattr(cuda_class, "__init__", _init)
    patch.setattr(cuda_class, "__getattr__", _getattr)
    for name in methods:
        original = getattr(cuda_class, name, None)
        if original is not None:
            patch.setattr(cuda_class, name, _forwarding_method(name, original))
    if "__repr__" in namespace:
        original_repr = namespace["__repr__"]
        patch.setattr(cuda_class, "__repr__", lambda self: _repr(self) if NATIVE in vars(self)
                      else original_repr(self))
    if "__eq__" in namespace:
        original_equal, original_hash = namespace["__eq__"], namespace.get("__hash__")

        def __eq__(self: "Any", other: "Any") -> bool:
            if NATIVE in vars(self):
                return _equal(self, other)
            return original_equal(self, other)

        def __hash__(self: "Any") -> int:
            if NATIVE in vars(self) or original_hash is None:
                return _hash(self)
            return original_hash(self)
        patch.setattr(cuda_class, "__eq__", __eq__)
        patch.setattr(cuda_class, "__hash__", __hash__)


def _stream_function(name: str, original: "Any", stream_class: type) -> "Callable[..., Any]":
    """``torch.cuda.current_stream``/``default_stream``: the target's stream, as a
    ``torch.cuda.Stream``."""
    api = f"torch.cuda.{name}"
    # The last (native stream, its torch.cuda.Stream): the target answers with the
    # same native stream call after call, so the wrapper is built once, not per call.
    last: "List[Any]" = [None, None]
    calls = counter(api)
    resolved: "List[Any]" = []     # the implementation, once the target is known

    def function(device: "Any" = None) -> "Any":
        implementation = resolved[0] if resolved else _implementation(name)
        if implementation is None:
            return original(device)
        if not resolved:
            resolved.append(implementation)
        if calls[0]:
            calls[0] += 1
        else:
            record(api)
        if device is not None:
            device = translate_index(device)
        stream = implementation(device)
        if stream is last[0] and stream is not None:
            return last[1]
        wrapped = wrap_native(stream_class, stream)
        last[:] = [stream, wrapped]
        return wrapped
    return _named(function, original)


def _stream_context_function(original: "Any", context_class: type) -> "Callable[..., Any]":
    """``torch.cuda.stream(s)``: on the CPU target, the ``StreamContext`` that torch
    itself builds when no accelerator is present (``idx == -1``: entering and
    leaving select nothing), without its per-call accelerator probe."""
    calls = counter("torch.cuda.stream")

    def stream(stream: "Any") -> "Any":
        target = resolve()
        if target is None or not target.is_cpu:
            return original(stream)
        if calls[0]:
            calls[0] += 1
        else:
            record("torch.cuda.stream")
        context = object.__new__(context_class)
        context.stream = stream
        context.idx = -1
        context.src_prev_stream = context.dst_prev_stream = None
        return context
    return _named(stream, original)


def _set_stream(original: "Any") -> "Callable[..., Any]":
    def set_stream(stream: "Any") -> None:
        implementation = _implementation("set_stream")
        if implementation is None:
            return original(stream)
        record("torch.cuda.set_stream")
        if stream is None:
            return None
        return implementation(native(stream))
    return _named(set_stream, original)


def _exchange(name: str, original: "Any") -> "Callable[[int], int]":
    """``_exchange_device(index)``/``_maybe_exchange_device``, used by
    ``torch.cuda.device.__enter__/__exit__``: switch the target's device, return
    the previous index (-1 for a negative index, as torch does)."""
    def exchange(device: int) -> int:
        target = resolve()
        if target is None or target.passthrough:
            return original(device)
        if device < 0:
            return -1
        module = target.module
        if module is not None and not hasattr(module, name):
            # A device namespace without the private exchange (torch_npu's may
            # lack it): the same through its public functions.
            previous = module.current_device()
            module.set_device(device)
            return int(previous)
        return _implementation(name)(device)
    return _named(exchange, original)


def _named(function: "Callable[..., Any]", original: "Any") -> "Callable[..., Any]":
    for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
        value = getattr(original, attribute, None)
        if isinstance(value, str):
            setattr(function, attribute, value)
    return function


def patch_cuda_classes(cuda: "Any", patch: "Any") -> None:
    """Stream, ExternalStream (through Stream.__new__) and Event in place; the stream
    functions and the device exchange that torch.cuda.device/StreamContext call."""
    namespace = vars(cuda)
    stream_class, event_class = namespace["Stream"], namespace["Event"]
    _patch_class(stream_class, "torch.cuda.Stream", STREAM_METHODS, _build_stream, patch)
    _patch_class(event_class, "torch.cuda.Event", EVENT_METHODS, _build_event, patch)
    for name in ("current_stream", "default_stream"):
        if name in namespace:
            patch.setattr(cuda, name, _stream_function(name, namespace[name], stream_class))
    if "set_stream" in namespace:
        patch.setattr(cuda, "set_stream", _set_stream(namespace["set_stream"]))
    if "stream" in namespace and "StreamContext" in namespace:
        patch.setattr(cuda, "stream", _stream_context_function(namespace["stream"],
                                                               namespace["StreamContext"]))
    for name in ("_exchange_device", "_maybe_exchange_device"):
        if name in namespace:
            patch.setattr(cuda, name, _exchange(name, namespace[name]))


def record_stream_function(original: "Any") -> "Callable[..., Any]":
    """``Tensor.record_stream(stream)``: a no-op on the CPU (nothing is asynchronous),
    the target's stream elsewhere."""
    calls = counter("Tensor.record_stream")

    def record_stream(self: "Any", stream: "Any") -> None:
        target = resolve()
        if target is None or target.passthrough:
            return original(self, stream)
        if calls[0]:
            calls[0] += 1
        else:
            record("Tensor.record_stream")
        if target.is_cpu or self.device.type == "cpu":
            return None
        return original(self, native(stream))
    return _named(record_stream, original)

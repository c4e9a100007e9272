"""``torch.cuda``: device, memory, seed, stream and event functions; is_available (and
``Tensor.is_cuda``, which answers with it); nvtx.

Each ``torch.cuda.<name>`` is replaced by a small function that, on first
use, picks the target's implementation (``torch.npu.<name>`` on an NPU,
``cpu_backend.<name>`` on the CPU, the original when CUDA is real) and
caches it. Resolution is lazy because this patch is applied while
``import torch`` is still running.
"""

from __future__ import annotations

import sys
import threading
from functools import wraps

import lazypatch

from .observe import counter, record
from .target import flag, resolve, translate_index

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Tuple

# name -> position of its device argument (also accepted as device=), or None.
REDIRECTED: "Dict[str, Optional[int]]" = {
    "device_count": None, "current_device": None, "set_device": 0, "synchronize": 0,
    "empty_cache": None, "ipc_collect": None, "is_initialized": None, "init": None,
    "memory_allocated": 0, "max_memory_allocated": 0, "memory_reserved": 0,
    "max_memory_reserved": 0, "memory_cached": 0, "max_memory_cached": 0,
    "reset_peak_memory_stats": 0, "reset_max_memory_allocated": 0,
    "reset_max_memory_cached": 0, "reset_accumulated_memory_stats": 0,
    "memory_stats": 0, "memory_summary": 0, "mem_get_info": 0,
    "manual_seed": None, "manual_seed_all": None, "seed": None, "seed_all": None,
    "initial_seed": None, "get_rng_state": 0, "set_rng_state": 1,
    "get_rng_state_all": None, "set_rng_state_all": None,
    "get_device_name": 0, "get_device_properties": 0, "get_device_capability": 0,
    "is_bf16_supported": None, "is_current_stream_capturing": None,
    "set_per_process_memory_fraction": 1, "get_per_process_memory_fraction": 0,
    "memory_snapshot": None, "get_sync_debug_mode": None, "set_sync_debug_mode": None,
    "can_device_access_peer": 0, "get_allocator_backend": None,
}
# Streams, events, current_stream/set_stream and the device exchange behind
# ``with torch.cuda.device(i)`` are in cuda_classes: the classes stay classes.

_IMPLEMENTATIONS: "Dict[str, Any]" = {}


def _implementation(name: str, original: "Any") -> "Any":
    """The target's function for ``torch.cuda.<name>`` (cached once the target is known)."""
    implementation = _IMPLEMENTATIONS.get(name)
    if implementation is not None:
        return implementation
    target = resolve()
    if target is None:            # torch still importing: answer as CUDA would, decide later
        return original
    if target.passthrough:
        implementation = original
    elif target.module is not None and hasattr(target.module, name):
        implementation = getattr(target.module, name)
    else:
        # Imported here, not at the top: this module loads while torch is importing,
        # before torch.cpu exists.
        from . import cpu_backend
        implementation = getattr(cpu_backend, name)
    _IMPLEMENTATIONS[name] = implementation
    return implementation


def target_implementation(name: str) -> "Any":
    """The target's ``torch.cuda.<name>``, or None when calls pass through (real CUDA,
    or torch still importing)."""
    implementation = _IMPLEMENTATIONS.get(name) or _implementation(name, _PASS_THROUGH)
    return None if implementation is _PASS_THROUGH else implementation


_PASS_THROUGH = object()


def redirect(name: str, original: "Any", device_position: "Optional[int]") -> "Callable[..., Any]":
    """A replacement for ``torch.cuda.<name>`` calling the target's implementation."""
    api = f"torch.cuda.{name}"
    calls = counter(api)

    def redirected(*args: "Any", **kwargs: "Any") -> "Any":
        implementation = _IMPLEMENTATIONS.get(name) or _implementation(name, original)
        if implementation is original:
            return original(*args, **kwargs)
        if calls[0]:
            calls[0] += 1
        else:
            record(api)
        if device_position is not None and (args or kwargs):
            if len(args) > device_position:
                args = (args[:device_position] + (translate_index(args[device_position]),)
                        + args[device_position + 1:])
            elif kwargs.get("device") is not None:
                kwargs["device"] = translate_index(kwargs["device"])
        return implementation(*args, **kwargs)
    try:
        redirected = wraps(original, updated=())(redirected)
    except (AttributeError, TypeError):
        pass
    return redirected


def patch_cuda_namespace(cuda: "Any", patch: "Any") -> None:
    """Replace each name of ``REDIRECTED`` that this torch.cuda defines (the stream and
    event classes are patched in place by ``cuda_classes``, which builds on this module)."""
    namespace = vars(cuda)
    for name, device_position in REDIRECTED.items():
        if name in namespace:
            patch.setattr(cuda, name, redirect(name, namespace[name], device_position))


def _excluded_modules() -> "Tuple[Tuple[str, ...], Tuple[str, ...]]":
    """(exact names, prefixes) of the modules that get the honest answer: torch and
    torch_npu always (they pick kernels by it), plus LAZYPATCH_CUDA_AVAILABLE_EXCLUDE."""
    names = ["torch", "torch_npu", "lazypatch"]
    value = lazypatch.setting("LAZYPATCH_CUDA_AVAILABLE_EXCLUDE", "")
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        if all(part.isidentifier() for part in item.split(".")):
            names.append(item)
        else:
            lazypatch.warn_configuration(
                f"lazypatch device pack: LAZYPATCH_CUDA_AVAILABLE_EXCLUDE entry {item!r} is not "
                f"a module name; give comma-separated module names such as 'mmcv,xformers'. "
                f"Ignoring it.")
    return tuple(names), tuple(name + "." for name in names)


def patch_cuda_available(cuda: "Any", patch: "Any") -> None:
    """With LAZYPATCH_CUDA_AVAILABLE=1, claim CUDA to every caller but the excluded modules.

    The caller is the module of the frame that calls is_available (one frame
    up, ``sys._getframe(1)``; no stack walk), so the scope is per calling
    module and nothing global is swapped.
    """
    if not flag("LAZYPATCH_CUDA_AVAILABLE"):
        return       # honest by default: nothing to change
    honest = vars(cuda)["is_available"]
    exact, prefixes = _excluded_modules()

    @wraps(honest)
    def is_available() -> bool:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller in exact or caller.startswith(prefixes):
            return honest()
        record("torch.cuda.is_available")
        return True
    patch.setattr(cuda, "is_available", is_available)


def patch_tensor_is_cuda(torch: "Any", patch: "Any") -> None:
    """With LAZYPATCH_CUDA_AVAILABLE=1, ``Tensor.is_cuda`` is True for tensors on the
    target device, to the callers ``is_available`` claims CUDA to.

    Code that was told CUDA is there checks its tensors next (StreamPETR's flash
    attention asserts ``q.is_cuda``): the tensors the pack moved, and everything
    computed from them, live on the target, where on a GPU they would be CUDA
    tensors. torch, torch_npu, lazypatch and the excluded modules keep the honest
    answer, as they pick kernels by it. Nothing changes without the setting, or
    when CUDA is real.
    """
    if not flag("LAZYPATCH_CUDA_AVAILABLE"):
        return       # honest by default: nothing to change
    honest = torch.Tensor.is_cuda.__get__     # the C getter, inherited from TensorBase
    exact, prefixes = _excluded_modules()
    calls = counter("torch.Tensor.is_cuda")

    def is_cuda(tensor: "Any") -> bool:
        if honest(tensor):
            return True
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller in exact or caller.startswith(prefixes):
            return False
        target = resolve()
        if target is None or target.passthrough:
            return False
        on_target = tensor.is_cpu if target.is_cpu else tensor.device.type == target.type
        if not on_target:
            return False
        if calls[0]:
            calls[0] += 1
        else:
            record("torch.Tensor.is_cuda")
        return True
    patch.setattr(torch.Tensor, "is_cuda", property(
        is_cuda, doc="Is True if the Tensor is stored on the GPU (lazypatch device pack: "
                     "also on the target device, as LAZYPATCH_CUDA_AVAILABLE=1 claims CUDA)"))


# --- nvtx -------------------------------------------------------------------

class _Ranges(threading.local):
    def __init__(self) -> None:
        self.stack: "List[Any]" = []
        self.started: "Dict[int, Any]" = {}
        self.next_id = 0


_RANGES = _Ranges()


def _record_function(message: str) -> "Any":
    from torch.autograd.profiler import record_function
    return record_function(str(message))


def patch_nvtx(nvtx: "Any", patch: "Any") -> None:
    """NVTX ranges become ``torch.autograd.profiler.record_function`` ranges, so they
    show up in torch.profiler traces on the NPU and CPU alike."""
    namespace = vars(nvtx)
    originals = {name: namespace[name] for name in
                 ("range_push", "range_pop", "range_start", "range_end", "mark", "range")
                 if name in namespace}
    for function in (*_nvtx_stack_ranges(originals), *_nvtx_started_ranges(originals),
                     *_nvtx_marks(originals)):
        if function.__name__ in originals:
            patch.setattr(nvtx, function.__name__, function)


def _nvtx_passthrough() -> bool:
    """Whether NVTX calls go to nvtx itself (no device target, or one that passes through)."""
    target = resolve()
    return target is None or target.passthrough


def _nvtx_stack_ranges(originals: "Dict[str, Any]") -> "Tuple[Any, ...]":
    """``range_push`` and ``range_pop``: nested ranges on this thread's stack."""

    def range_push(msg: str) -> int:
        if _nvtx_passthrough():
            return originals["range_push"](msg)
        record("torch.cuda.nvtx.range_push")
        scope = _record_function(msg)
        scope.__enter__()
        _RANGES.stack.append(scope)
        return len(_RANGES.stack) - 1

    def range_pop() -> int:
        if _nvtx_passthrough():
            return originals["range_pop"]()
        if not _RANGES.stack:
            return -1
        _RANGES.stack.pop().__exit__(None, None, None)
        return len(_RANGES.stack)

    return range_push, range_pop


def _nvtx_started_ranges(originals: "Dict[str, Any]") -> "Tuple[Any, ...]":
    """``range_start`` and ``range_end``: ranges by id, ended in any order."""

    def range_start(msg: str) -> int:
        if _nvtx_passthrough():
            return originals["range_start"](msg)
        record("torch.cuda.nvtx.range_start")
        scope = _record_function(msg)
        scope.__enter__()
        _RANGES.next_id += 1
        _RANGES.started[_RANGES.next_id] = scope
        return _RANGES.next_id

    def range_end(range_id: int) -> None:
        if _nvtx_passthrough():
            return originals["range_end"](range_id)
        scope = _RANGES.started.pop(range_id, None)
        if scope is not None:
            scope.__exit__(None, None, None)

    return range_start, range_end


def _nvtx_marks(originals: "Dict[str, Any]") -> "Tuple[Any, ...]":
    """``mark`` (an instant) and ``range`` (a context manager)."""
    from contextlib import contextmanager

    def mark(msg: str) -> None:
        if _nvtx_passthrough():
            return originals["mark"](msg)
        record("torch.cuda.nvtx.mark")
        with _record_function(msg):
            pass

    @contextmanager
    def range(msg: str, *args: "Any", **kwargs: "Any") -> "Any":
        if _nvtx_passthrough():
            with originals["range"](msg, *args, **kwargs):
                yield
            return
        record("torch.cuda.nvtx.range")
        with _record_function(msg.format(*args, **kwargs)):
            yield

    return mark, range

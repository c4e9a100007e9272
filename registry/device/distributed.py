"""torch.distributed and the parallel wrappers: NCCL requests run on gloo (CPU) or hccl (NPU).

Backend strings are parsed: "nccl", ``Backend.NCCL`` and per-device forms
such as "cpu:gloo,cuda:nccl" are translated; "gloo" and the rest pass
through. ``is_nccl_available()`` agrees with ``torch.cuda.is_available()``:
honest unless LAZYPATCH_CUDA_AVAILABLE=1 claims CUDA.
"""

from __future__ import annotations

from .observe import record
from .target import flag, resolve, translate, translate_ids, translate_index

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Tuple

# The collective backend that serves NCCL's role on each target device type.
COLLECTIVE_BACKEND = {"cpu": "gloo", "npu": "hccl", "xpu": "xccl"}


def translate_backend(backend: "Any") -> "Any":
    """The backend to use instead of ``backend`` on the target (same object if none)."""
    if not isinstance(backend, str) or "nccl" not in backend.lower():
        return backend
    target = resolve()
    if target is None or target.passthrough:
        return backend
    replacement = COLLECTIVE_BACKEND.get(target.type, "gloo")
    if ":" not in backend:
        return replacement if backend.lower() == "nccl" else backend
    parts = {}
    for entry in backend.split(","):
        device_type, _, name = entry.strip().partition(":")
        device_type = target.type if device_type.strip() == "cuda" else device_type.strip()
        name = replacement if name.strip().lower() == "nccl" else name.strip()
        parts.setdefault(device_type, name)
    return ",".join(f"{device}:{name}" for device, name in parts.items())


def _backend_wrapper(api: str, position: int) -> "Callable[..., Any]":
    """Translate ``backend`` (positional ``position`` or keyword), drop NCCL-only options
    and translate ``device_id``."""
    def wrapper(wrapped: "Any", instance: "Any", args: "Tuple[Any, ...]",
                kwargs: "Dict[str, Any]") -> "Any":
        backend = args[position] if len(args) > position else kwargs.get("backend")
        translated = translate_backend(backend)
        if translated is not backend:
            record(api)
            if len(args) > position:
                args = args[:position] + (translated,) + args[position + 1:]
            else:
                kwargs["backend"] = translated
            # ProcessGroupNCCL.Options do not fit the replacement backend.
            if kwargs.get("pg_options") is not None:
                kwargs["pg_options"] = None
        device_id = kwargs.get("device_id")
        if device_id is not None:
            target = resolve()
            new_id = translate(device_id)
            if new_id is not device_id:
                record(api)
                kwargs["device_id"] = None if target is not None and target.is_cpu else new_id
        return wrapped(*args, **kwargs)
    return wrapper


def patch_distributed(dist: "Any", patch: "Any") -> None:
    """init_process_group, new_group, barrier(device_ids=) and is_nccl_available."""
    if not dist.is_available():
        return                      # a torch built without distributed: nothing to redirect
    c10d = dist.distributed_c10d
    for name, position in (("init_process_group", 0), ("new_group", 2)):
        original = vars(c10d)[name]
        wrapper = patch.wrap(c10d, name, _backend_wrapper(f"torch.distributed.{name}", position))
        if vars(dist).get(name) is original:
            patch.setattr(dist, name, wrapper)

    def barrier(wrapped: "Any", instance: "Any", args: "Tuple[Any, ...]",
                kwargs: "Dict[str, Any]") -> "Any":
        device_ids = kwargs.get("device_ids")
        if device_ids is not None:
            translated = translate_ids(device_ids)
            if translated is not device_ids:
                record("torch.distributed.barrier")
                kwargs["device_ids"] = translated
        return wrapped(*args, **kwargs)
    original = vars(c10d)["barrier"]
    wrapper = patch.wrap(c10d, "barrier", barrier)
    if vars(dist).get("barrier") is original:
        patch.setattr(dist, "barrier", wrapper)

    if flag("LAZYPATCH_CUDA_AVAILABLE"):
        def is_nccl_available() -> bool:
            """True: LAZYPATCH_CUDA_AVAILABLE=1 claims CUDA, and NCCL requests are served
            by the target's collective backend."""
            return True
        for owner in (c10d, dist):
            if "is_nccl_available" in vars(owner):
                patch.setattr(owner, "is_nccl_available", is_nccl_available)


def _parallel_wrapper(api: str) -> "Callable[..., Any]":
    """``__init__(self, module, device_ids=None, output_device=None, ...)``."""
    def wrapper(wrapped: "Any", instance: "Any", args: "Tuple[Any, ...]",
                kwargs: "Dict[str, Any]") -> "Any":
        args = list(args)
        changed = False
        for position, keyword in ((1, "device_ids"), (2, "output_device")):
            holder, key = (args, position) if len(args) > position else (kwargs, keyword)
            value = holder[key] if (holder is kwargs and key in kwargs) or holder is args else None
            if value is None:
                continue
            if keyword == "device_ids":
                new = translate_ids(value)
            else:
                target = resolve()
                if target is None or target.passthrough:
                    new = value
                elif target.is_cpu:
                    new = None          # modules on the CPU take no output device
                else:
                    new = translate_index(value)
            if new is not value:
                holder[key] = new
                changed = True
        if changed:
            record(api)
        return wrapped(*args, **kwargs)
    return wrapper


def patch_parallel(parallel: "Any", patch: "Any") -> None:
    """DistributedDataParallel and DataParallel constructors."""
    patch.wrap(parallel.DistributedDataParallel, "__init__",
               _parallel_wrapper("DistributedDataParallel"))
    patch.wrap(parallel.DataParallel, "__init__", _parallel_wrapper("DataParallel"))

"""torch.load and torch.jit.load: storages saved on CUDA, and CUDA ``map_location`` values,
go to the target.

The file argument is never looked at: only the location *tags* of storages
(like "cuda:0") and the ``map_location`` the code gives (a string, device,
dict or callable) are parsed as devices. A checkpoint path such as
"runs/cuda_ckpt/model.pt" passes through unchanged.
"""

from __future__ import annotations

from .observe import record
from .target import resolve, translate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Tuple


def _on_target(location: str) -> str:
    """A location tag on the target ("cuda:1" -> "cpu" or "npu:1"); others unchanged."""
    translated = translate(location)
    return location if translated is location else str(translated)


def restore_on_target(map_location: "Any", default_restore: "Callable[..., Any]",
                      redirected: "List[bool]") -> "Callable[[Any, str], Any]":
    """A ``map_location`` callable doing what ``map_location`` asked, on the target."""
    def restore_location(storage: "Any", location: str) -> "Any":
        if map_location is None:
            destination = location
        elif isinstance(map_location, dict):
            destination = map_location.get(location, location)
        elif isinstance(map_location, bytes):
            destination = map_location.decode()
        elif isinstance(map_location, str):
            destination = map_location
        elif callable(map_location):
            result = map_location(storage, location)
            if result is not None:
                return result
            destination = location
        else:                       # a torch.device
            destination = str(map_location)
        on_target = _on_target(str(destination))
        if on_target != destination:
            redirected[0] = True
        return default_restore(storage, on_target)
    return restore_location


def patch_load(torch: "Any", patch: "Any") -> None:
    """Wrap torch.serialization.load and point torch.load at the same wrapper."""
    serialization = torch.serialization
    default_restore = serialization.default_restore_location

    def load(wrapped: "Any", instance: "Any", args: "Tuple[Any, ...]",
             kwargs: "Dict[str, Any]") -> "Any":
        target = resolve()
        if target is None or target.passthrough:
            return wrapped(*args, **kwargs)
        redirected = [False]
        if len(args) > 1:
            args = (args[0], restore_on_target(args[1], default_restore, redirected)) + args[2:]
        else:
            kwargs["map_location"] = restore_on_target(kwargs.get("map_location"),
                                                       default_restore, redirected)
        result = wrapped(*args, **kwargs)
        if redirected[0]:
            record("torch.load")
        return result

    original = vars(serialization)["load"]
    wrapper = patch.wrap(serialization, "load", load)
    if vars(torch).get("load") is original:
        patch.setattr(torch, "load", wrapper)
    patch_jit_load(torch, patch)


def patch_jit_load(torch: "Any", patch: "Any") -> None:
    """torch.jit.load(f, map_location="cuda"): TorchScript archives take one device,
    so a CUDA map_location becomes the target's; with no map_location on a CPU
    target, tensors saved on CUDA load onto the CPU (CPU ones stay where they are)."""
    module = torch.jit._serialization

    def jit_load(wrapped: "Any", instance: "Any", args: "Tuple[Any, ...]",
                 kwargs: "Dict[str, Any]") -> "Any":
        target = resolve()
        if target is None or target.passthrough:
            return wrapped(*args, **kwargs)
        in_args = len(args) > 1
        map_location = args[1] if in_args else kwargs.get("map_location")
        if map_location is None:
            translated = target.default if target.is_cpu else None
        else:
            translated = translate(map_location)
            if translated is not map_location:
                record("torch.jit.load")
        if in_args:
            args = (args[0], translated) + args[2:]
        else:
            kwargs["map_location"] = translated
        return wrapped(*args, **kwargs)

    original = vars(module)["load"]
    wrapper = patch.wrap(module, "load", jit_load)
    if vars(torch.jit).get("load") is original:
        patch.setattr(torch.jit, "load", wrapper)

"""torch_npu specifics: internal tensor formats, and profiler activities.

``torch.npu.config.allow_internal_format`` is not a plain attribute in
torch_npu (setting it calls into the runtime, reading it asks the runtime),
so it is changed through ``patch.setitem`` on a small mapping view of the
object's attributes: the engine records the old value and writes it back on
undo, exactly as for any other slot.
"""

from __future__ import annotations

from .observe import record
from .target import flag, resolve

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Tuple


class AttributeSlots:
    """``view[name]`` reads and writes ``getattr(obj, name)``: lets the ledger record
    attributes that live behind ``__getattr__``/``__setattr__``."""

    def __init__(self, obj: "Any", description: str) -> None:
        self._obj = obj
        self._description = description

    def __getitem__(self, name: str) -> "Any":
        try:
            return getattr(self._obj, name)
        except AttributeError:
            raise KeyError(name) from None

    def __setitem__(self, name: str, value: "Any") -> None:
        setattr(self._obj, name, value)

    def __delitem__(self, name: str) -> None:
        delattr(self._obj, name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and hasattr(self._obj, name)

    def __repr__(self) -> str:
        return self._description


def patch_internal_format(torch_npu: "Any", patch: "Any") -> None:
    """Turn off private NPU formats (as the DrivingSDK patcher does) unless
    LAZYPATCH_ALLOW_INTERNAL_FORMAT=1; only when the target is the NPU."""
    target = resolve()
    if target is None or target.type != "npu" or flag("LAZYPATCH_ALLOW_INTERNAL_FORMAT"):
        return
    import torch
    config = getattr(getattr(torch, "npu", None), "config", None)
    if config is None:
        return
    patch.setitem(AttributeSlots(config, "torch.npu.config"), "allow_internal_format", False)


def _map_activities(activities: "Any", target: "Any", npu_profiler: "Any") -> "Any":
    """CUDA activities: NPU ones on the NPU, dropped on the CPU (CPU kept)."""
    import torch
    cuda = torch.profiler.ProfilerActivity.CUDA
    mapped = []
    for activity in activities:
        if activity == cuda:
            if npu_profiler is not None:
                mapped.append(npu_profiler.ProfilerActivity.NPU)
            continue
        if npu_profiler is not None and activity == torch.profiler.ProfilerActivity.CPU:
            activity = npu_profiler.ProfilerActivity.CPU
        mapped.append(activity)
    return mapped or [torch.profiler.ProfilerActivity.CPU]


def patch_profiler(profiler: "Any", patch: "Any") -> None:
    """torch.profiler.profile(activities=[..., CUDA]): on the NPU build the
    torch_npu.profiler.profile with NPU activities; on the CPU drop CUDA."""
    def profile(wrapped: "Any", instance: "Any", args: "Tuple[Any, ...]",
                kwargs: "Dict[str, Any]") -> "Any":
        activities = kwargs.get("activities")
        target = resolve()
        if not activities or target is None or target.passthrough:
            return wrapped(*args, **kwargs)
        import torch
        if torch.profiler.ProfilerActivity.CUDA not in list(activities):
            return wrapped(*args, **kwargs)
        record("torch.profiler.profile")
        npu_profiler = None
        if target.type == "npu":
            import torch_npu
            npu_profiler = getattr(torch_npu, "profiler", None)
        kwargs["activities"] = _map_activities(activities, target, npu_profiler)
        if npu_profiler is not None and hasattr(npu_profiler, "profile"):
            return npu_profiler.profile(*args, **kwargs)
        return wrapped(*args, **kwargs)
    patch.wrap(profiler, "profile", profile)

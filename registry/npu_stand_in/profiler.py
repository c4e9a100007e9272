"""``torch_npu.profiler`` on ``torch.profiler``: the NPU profiling calls of DrivingSDK's
patcher (``with_profiling``) and model files run, and profile the available device.

NPU activities become CUDA ones where there is a GPU and are dropped on the CPU (the CPU
activity stays); torch_npu's ``experimental_config`` (its profiler level, AI Core
metrics) has no torch equivalent and is accepted and left out.
"""

from __future__ import annotations

import enum
from typing import Any, Iterable, Optional

import torch.profiler

from .device import cuda_present

schedule = torch.profiler.schedule
tensorboard_trace_handler = torch.profiler.tensorboard_trace_handler
record_function = torch.profiler.record_function


class ProfilerActivity(enum.Enum):
    """torch_npu's activities."""
    CPU = "CPU"
    NPU = "NPU"


class ProfilerLevel(enum.Enum):
    """torch_npu's profiler levels (how much NPU detail it records)."""
    Level_none = "Level_none"
    Level0 = "Level0"
    Level1 = "Level1"
    Level2 = "Level2"


class _ExperimentalConfig:
    """torch_npu's extra profiler settings, kept for inspection and otherwise unused."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings

    def __repr__(self) -> str:
        return f"_ExperimentalConfig({self.settings!r}) (lazypatch NPU stand-in: unused)"


def torch_activities(activities: Optional[Iterable[Any]]) -> Optional[list]:
    """torch's activities for torch_npu's (or torch's own): NPU -> CUDA on a GPU host,
    dropped on the CPU; None stays None (torch's default)."""
    if activities is None:
        return None
    mapped = []
    for activity in activities:
        name = getattr(activity, "name", str(activity))
        if name == "NPU" or name == "CUDA":
            if cuda_present():
                mapped.append(torch.profiler.ProfilerActivity.CUDA)
            continue
        mapped.append(torch.profiler.ProfilerActivity.CPU)
    return sorted(set(mapped), key=str) or [torch.profiler.ProfilerActivity.CPU]


def profile(*args: Any, activities: Optional[Iterable[Any]] = None,
            experimental_config: Any = None, **kwargs: Any) -> Any:
    """``torch_npu.profiler.profile(...)``: a ``torch.profiler.profile`` of the available
    device, with torch_npu's activities mapped (``torch_activities``)."""
    return torch.profiler.profile(*args, activities=torch_activities(activities), **kwargs)


NAMES = ("profile", "schedule", "tensorboard_trace_handler", "record_function",
         "ProfilerActivity", "ProfilerLevel", "_ExperimentalConfig")

"""Profiling driven by the training steps: torch.profiler (torch_npu's on an NPU).

The profiler starts before the first step the loop announces (mmengine
iterations) or at the end of the first optimizer step (plain PyTorch
loops: nothing tells us earlier where a step begins), and advances with
every finished step; the schedule (skip first, wait, warmup, active,
repeat) is torch's. Each finished cycle is written by TensorBoard's trace
handler as a Chrome trace (``*.pt.trace.json``) under the directory, and a
short table of the most expensive operators goes to stderr at the end; at
levels 1 and 2, with the tracing marks (``training.tracing``), also the
forward and backward time of each module.
"""

from __future__ import annotations

import atexit
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Tuple

    from .settings import ProfileSettings

TABLE_ROWS = 10

_PROFILERS: "Dict[Tuple[Any, ...], StepProfiler]" = {}


def profiler_for(settings: "ProfileSettings") -> "StepProfiler":
    """The one profiler listener for these settings (so re-applying adds no second one)."""
    key = (settings.path, settings.level, settings.skip_first, settings.wait,
           settings.warmup, settings.active, settings.repeat)
    if key not in _PROFILERS:
        _PROFILERS[key] = StepProfiler(settings)
    return _PROFILERS[key]


def _npu_usable() -> bool:
    torch_npu = sys.modules.get("torch_npu")
    if torch_npu is None:
        return False
    try:
        return bool(torch_npu.npu.is_available())
    except Exception:   # a broken NPU runtime: fall back to torch.profiler
        return False


def profiler_arguments(settings: "ProfileSettings") -> "Tuple[Any, Dict[str, Any], str]":
    """(profiler module, keyword arguments for its ``profile``, note on activities)."""
    import torch
    if _npu_usable():
        import torch_npu
        backend = torch_npu.profiler
        device = backend.ProfilerActivity.NPU
        extra: "Dict[str, Any]" = {"experimental_config": backend._ExperimentalConfig(
            profiler_level=getattr(backend.ProfilerLevel, f"Level{settings.level}"))}
        device_name = "NPU"
    else:
        backend = torch.profiler
        device, device_name, extra = None, "", {}
        if torch.cuda.is_available():
            device, device_name = backend.ProfilerActivity.CUDA, "CUDA"
    cpu = backend.ProfilerActivity.CPU
    if settings.level == 0:
        activities = [device] if device is not None else [cpu]
        note = (f"level 0: {device_name} activity only" if device is not None else
                "level 0: no accelerator is usable, so CPU activity is recorded")
    else:
        activities = [cpu] + ([device] if device is not None else [])
        note = f"level {settings.level}: CPU" + (f" and {device_name}" if device_name else "") + \
            " activity, shapes" + (", stacks and memory" if settings.level == 2 else "")
    schedule = backend.schedule(skip_first=settings.skip_first, wait=settings.wait,
                                warmup=settings.warmup, active=settings.active,
                                repeat=settings.repeat)
    arguments = dict(activities=activities, schedule=schedule,
                     record_shapes=settings.level >= 1, with_stack=settings.level >= 2,
                     profile_memory=settings.level >= 2, **extra)
    return backend, arguments, note


class StepProfiler:
    """A step listener owning one profiler run."""

    order = 0   # before the brake

    def __init__(self, settings: "ProfileSettings") -> None:
        self.settings = settings
        self.profiler: "Any" = None
        self.steps = 0
        self.closed = False
        self.note = ""
        self.tables: "List[str]" = []
        self.module_tables: "List[str]" = []
        self.traces_before: "set" = set()

    def _start(self) -> None:
        backend, arguments, self.note = profiler_arguments(self.settings)
        os.makedirs(self.settings.path, exist_ok=True)
        self.traces_before = set(os.listdir(self.settings.path))
        handler = backend.tensorboard_trace_handler(self.settings.path)

        def trace_ready(profiler: "Any") -> None:
            handler(profiler)
            self.tables.append(_operator_table(profiler))
            if self.settings.level >= 1:
                self.module_tables.append(_module_table(profiler))

        self.profiler = backend.profile(on_trace_ready=trace_ready, **arguments)
        self.profiler.start()
        atexit.register(self.close)

    def step_starting(self) -> None:
        if self.profiler is None and not self.closed:
            self._start()

    def step_finished(self, step: int, what: str) -> None:
        if self.closed:
            return
        if self.profiler is None:
            self._start()   # plain loops: the first step is over; profile from the next
            return
        self.profiler.step()
        self.steps += 1
        last = self.settings.last_step
        if last is not None and self.steps >= last:
            self.close()   # the schedule is done: release the profiler, print the table

    def close(self) -> None:
        """Stop the profiler (writing a pending trace) and print the summary once."""
        if self.closed:
            return
        self.closed = True
        if self.profiler is None:
            return
        try:
            self.profiler.stop()
        finally:
            self.profiler = None
        written = sorted(set(os.listdir(self.settings.path)) - self.traces_before)
        lines = [f"lazypatch: profile ({self.note}) written to {self.settings.path}: "
                 + (", ".join(written) if written else
                    "no trace (the run ended before the schedule's active steps; "
                    "lower LAZYPATCH_PROFILE_SKIP)")]
        if self.tables:
            lines.append("lazypatch: most expensive operators of the last recorded steps:")
            lines.append(self.tables[-1])
        if self.module_tables and self.module_tables[-1]:
            lines.append("lazypatch: time per module of the last recorded steps (CPU, ranges "
                         "include their submodules; backward: nodes the module's forward made):")
            lines.append(self.module_tables[-1])
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()


def _operator_table(profiler: "Any") -> str:
    """The top operators of a finished cycle by self time (device time when recorded)."""
    try:
        averages = profiler.key_averages()
        device_time = any(getattr(event, "self_device_time_total", 0) for event in averages)
        sort_by = "self_device_time_total" if device_time else "self_cpu_time_total"
        return averages.table(sort_by=sort_by, row_limit=TABLE_ROWS)
    except Exception as error:   # a backend without key_averages must not lose the trace
        return f"(no operator table: {type(error).__name__}: {error})"


def _module_table(profiler: "Any") -> str:
    """Per-module forward/backward times, "" without the tracing marks or on failure."""
    try:
        from .module_table import module_table
        return module_table(profiler)
    except Exception as error:   # the operator table and the trace matter more
        return f"(no module table: {type(error).__name__}: {error})"

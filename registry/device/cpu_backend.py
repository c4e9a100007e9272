"""What ``torch.cuda.*`` answers when the target is the CPU.

Sensible CPU answers: one device with index 0, synchronisation and cache
release are no-ops, device-memory statistics are zero, seeds and RNG state
are the CPU generator's (the one every random op now uses), streams and
events are torch.cpu's.
"""

from __future__ import annotations

import os
import sys
from time import perf_counter

import torch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Tuple


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def set_device(device: "Any") -> None:
    return None


def synchronize(device: "Any" = None) -> None:
    return None


def empty_cache() -> None:
    return None


def ipc_collect() -> None:
    return None


def _nothing(device: "Any" = None) -> None:
    return None


# Device memory on the CPU is the process's memory: a training log that prints
# torch.cuda.max_memory_allocated() should show what the run uses, not 0 MiB. Current
# use is the resident set; the peak is the kernel's high-water mark (ru_maxrss) until
# reset_peak_memory_stats(), after which it is the largest value these calls have seen
# (the kernel's mark cannot be reset). There is no caching allocator: reserved equals
# allocated.
_PEAK_SINCE_RESET: "List[int]" = []


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return _high_water_bytes()


def _high_water_bytes() -> int:
    try:
        import resource
    except ImportError:       # not on this platform
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024    # macOS counts bytes, Linux KiB


def memory_allocated(device: "Any" = None) -> int:
    current = _resident_bytes()
    if _PEAK_SINCE_RESET and current > _PEAK_SINCE_RESET[0]:
        _PEAK_SINCE_RESET[0] = current
    return current


def max_memory_allocated(device: "Any" = None) -> int:
    current = memory_allocated()
    if _PEAK_SINCE_RESET:
        return _PEAK_SINCE_RESET[0]
    return max(current, _high_water_bytes())


def reset_peak_memory_stats(device: "Any" = None) -> None:
    _PEAK_SINCE_RESET[:] = [_resident_bytes()]


memory_reserved = memory_cached = memory_allocated
max_memory_reserved = max_memory_cached = max_memory_allocated
reset_max_memory_allocated = reset_max_memory_cached = reset_peak_memory_stats
reset_accumulated_memory_stats = _nothing


def memory_stats(device: "Any" = None) -> "Dict[str, Any]":
    return {}


def memory_summary(device: "Any" = None, abbreviated: bool = False) -> str:
    return "lazypatch device pack: the target is the CPU; there is no device memory to report"


def mem_get_info(device: "Any" = None) -> "Tuple[int, int]":
    """(free, total) host memory in bytes, where the OS tells."""
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page
    except (ValueError, OSError, AttributeError):
        return 0, 0


def manual_seed(seed: int) -> None:
    # The default generator directly: torch.manual_seed would call
    # torch.cuda.manual_seed_all, which is this function again.
    torch.default_generator.manual_seed(int(seed))


manual_seed_all = manual_seed


def seed() -> None:
    torch.default_generator.seed()


seed_all = seed


def initial_seed() -> int:
    return torch.default_generator.initial_seed()


def get_rng_state(device: "Any" = "cuda") -> "torch.Tensor":
    return torch.default_generator.get_state()


def set_rng_state(new_state: "torch.Tensor", device: "Any" = "cuda") -> None:
    torch.default_generator.set_state(new_state)


def get_rng_state_all() -> "List[torch.Tensor]":
    return [torch.default_generator.get_state()]


def set_rng_state_all(new_states: "List[torch.Tensor]") -> None:
    if new_states:
        torch.default_generator.set_state(new_states[0])


def get_device_name(device: "Any" = None) -> str:
    """The processor's model name, saying that it stands for the CUDA device (a log
    line "GPU: cpu" tells the reader nothing about the machine the run used)."""
    return f"{_processor_name()} (CPU, standing in for CUDA)"


def _processor_name() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Hardware", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine() or "cpu"


def get_device_capability(device: "Any" = None) -> "Tuple[int, int]":
    # (0, 0): below every CUDA architecture threshold, so capability checks pick
    # their portable path.
    return (0, 0)


class CPUDeviceProperties:
    """A stand-in for ``torch.cuda.get_device_properties()`` on the CPU."""

    def __init__(self) -> None:
        self.name = get_device_name()
        self.major, self.minor = 0, 0
        self.total_memory = mem_get_info()[1]
        self.multi_processor_count = os.cpu_count() or 1
        self.is_integrated = True
        self.is_multi_gpu_board = False

    def __repr__(self) -> str:
        return (f"CPUDeviceProperties(name={self.name!r}, total_memory={self.total_memory // 2**20}MB, "
                f"multi_processor_count={self.multi_processor_count})")


def get_device_properties(device: "Any" = None) -> CPUDeviceProperties:
    return CPUDeviceProperties()


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def is_current_stream_capturing() -> bool:
    return False        # no CUDA graph can be capturing: there are none on the CPU


def set_per_process_memory_fraction(fraction: float, device: "Any" = None) -> None:
    return None


def get_per_process_memory_fraction(device: "Any" = None) -> float:
    return 1.0


def memory_snapshot(*args: "Any", **kwargs: "Any") -> "List[Any]":
    return []


def get_sync_debug_mode() -> int:
    return 0


def set_sync_debug_mode(debug_mode: "Any") -> None:
    return None


def can_device_access_peer(device: "Any", peer_device: "Any") -> bool:
    return False        # one device: no peer


def get_allocator_backend() -> str:
    return "native"


def is_initialized() -> bool:
    return True


def init() -> None:
    return None


class Stream(torch.cpu.Stream):
    """``torch.cuda.Stream(device=None, priority=0)`` on the CPU: work is already in order."""

    def __init__(self, device: "Any" = None, priority: int = 0, **kwargs: "Any") -> None:
        super().__init__()
        self.device = torch.device("cpu")
        self.priority = priority

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True

    def record_event(self, event: "Any" = None) -> "Event":
        event = Event() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event: "Any") -> None:
        return None

    def wait_stream(self, stream: "Any") -> None:
        return None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream)     # one CPU "stream": everything is in order

    def __hash__(self) -> int:
        return hash(Stream)


class Event(torch.cpu.Event):
    """``torch.cuda.Event(enable_timing=...)`` on the CPU; timing uses the wall clock,
    which is exact here because CPU work is synchronous."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False, **kwargs: "Any") -> None:
        self.enable_timing = enable_timing
        self._recorded_at: "Any" = None

    def record(self, stream: "Any" = None) -> None:
        self._recorded_at = perf_counter()

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds between this event's record() and ``end_event``'s."""
        if not self.enable_timing or not getattr(end_event, "enable_timing", False):
            raise RuntimeError("Both events must be created with enable_timing=True "
                               "to measure elapsed time")
        if self._recorded_at is None or end_event._recorded_at is None:
            raise RuntimeError("Both events must be recorded before calling elapsed_time()")
        return (end_event._recorded_at - self._recorded_at) * 1000.0

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def wait(self, stream: "Any" = None) -> None:
        return None

    def ipc_handle(self) -> bytes:
        raise RuntimeError("lazypatch device pack: CUDA IPC event handles do not exist on the "
                           "CPU; share tensors through torch.multiprocessing instead")


_DEFAULT_STREAM: "Any" = None


def current_stream(device: "Any" = None) -> "Any":
    global _DEFAULT_STREAM
    if _DEFAULT_STREAM is None:
        _DEFAULT_STREAM = Stream()
    return _DEFAULT_STREAM


default_stream = current_stream


def set_stream(stream: "Any") -> None:
    return None


def _exchange_device(device: int) -> int:
    """``torch.cuda.device(i)`` selects nothing on the CPU; the previous index is 0."""
    return 0


_maybe_exchange_device = _exchange_device

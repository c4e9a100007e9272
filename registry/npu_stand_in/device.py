"""``torch.npu`` / ``torch_npu.npu`` on a machine without an NPU: the available device.

Every function answers for the device this machine really has: CUDA where torch sees a
GPU, else the CPU (decided at each call from torch's own device count, so the device
pack's ``LAZYPATCH_CUDA_AVAILABLE`` answer never makes it pick a GPU that is not there).
``is_available()`` stays honest (False: there is no NPU), so that code choosing its
device, lazypatch's own device pack included, does not try ``torch.device("npu")``,
which torch cannot build without torch_npu; ``device_count()`` counts the devices the
calls go to, so ``range(torch.npu.device_count())`` loops still run.
"""

from __future__ import annotations

from typing import Any, Optional

import torch


def cuda_present() -> bool:
    """Whether torch sees a real GPU (torch's own count, never a patched is_available)."""
    count = getattr(torch._C, "_cuda_getDeviceCount", None)
    try:
        return bool(count is not None and count() > 0)
    except RuntimeError:   # a CUDA build on a host without a driver
        return False


def available_device(index: Optional[int] = None) -> torch.device:
    """The device NPU calls go to: ``cuda[:index]`` where there is a GPU, else the CPU."""
    if cuda_present():
        return torch.device("cuda", index) if index is not None else torch.device("cuda")
    return torch.device("cpu")


def _index(device: Any) -> Optional[int]:
    """The index of an NPU device argument (``"npu:1"``, ``1``, ``torch.device``), or None."""
    if device is None:
        return None
    if isinstance(device, int):
        return device
    text = str(device)
    kind, _, number = text.partition(":")
    if kind not in ("npu", "cuda", "cpu") or (number and not number.isdigit()):
        raise ValueError(f"torch.npu (lazypatch's NPU stand-in): {device!r} is not an NPU "
                         f"device; use an index, 'npu' or 'npu:<index>'")
    return int(number) if number else None


# --- the torch.npu namespace ------------------------------------------------------------

def is_available() -> bool:
    """False: there is no NPU here (the stand-in sends NPU calls to the available device)."""
    return False


def device_count() -> int:
    """How many devices NPU calls go to: the GPUs, else 1 (the CPU)."""
    return torch.cuda.device_count() if cuda_present() else 1


def current_device() -> int:
    """The current device's index (0 on the CPU)."""
    return torch.cuda.current_device() if cuda_present() else 0


def set_device(device: Any) -> None:
    """Make ``device`` current on the GPU; nothing to do on the CPU."""
    index = _index(device)
    if cuda_present() and index is not None:
        torch.cuda.set_device(index)


def synchronize(device: Any = None) -> None:
    """Wait for the GPU's work; the CPU has nothing in flight."""
    if cuda_present():
        torch.cuda.synchronize(_index(device))


def manual_seed(seed: int) -> None:
    """Seed the available device's generator."""
    if cuda_present():
        torch.cuda.manual_seed(seed)
    else:
        torch.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    """Seed every available device's generator."""
    if cuda_present():
        torch.cuda.manual_seed_all(seed)
    else:
        torch.manual_seed(seed)


def seed() -> None:
    """Seed the available device's generator with a random number."""
    if cuda_present():
        torch.cuda.seed()
    else:
        torch.seed()


def initial_seed() -> int:
    """The available device's initial seed."""
    return torch.cuda.initial_seed() if cuda_present() else torch.initial_seed()


def get_device_name(device: Any = None) -> str:
    """The GPU's name, or "cpu", marked as the stand-in's answer."""
    name = torch.cuda.get_device_name(_index(device)) if cuda_present() else "cpu"
    return f"{name} (lazypatch NPU stand-in)"


def empty_cache() -> None:
    """Release the GPU's cached memory; nothing on the CPU."""
    if cuda_present():
        torch.cuda.empty_cache()


def _memory(name: str, device: Any = None) -> int:
    if cuda_present():
        return int(getattr(torch.cuda, name)(_index(device)))
    return 0


def memory_allocated(device: Any = None) -> int:
    """The GPU's allocated bytes; 0 on the CPU (torch does not count it there)."""
    return _memory("memory_allocated", device)


def max_memory_allocated(device: Any = None) -> int:
    """The GPU's peak allocated bytes; 0 on the CPU."""
    return _memory("max_memory_allocated", device)


def memory_reserved(device: Any = None) -> int:
    """The GPU's reserved bytes; 0 on the CPU."""
    return _memory("memory_reserved", device)


def max_memory_reserved(device: Any = None) -> int:
    """The GPU's peak reserved bytes; 0 on the CPU."""
    return _memory("max_memory_reserved", device)


def reset_peak_memory_stats(device: Any = None) -> None:
    """Reset the GPU's peak counters; nothing on the CPU."""
    if cuda_present():
        torch.cuda.reset_peak_memory_stats(_index(device))


def set_compile_mode(jit_compile: bool = False) -> None:
    """An NPU compiler switch: nothing to compile for on this machine."""


def _stream_module() -> Any:
    return torch.cuda if cuda_present() else torch.cpu


def current_stream(device: Any = None) -> Any:
    """The available device's current stream."""
    if cuda_present():
        return torch.cuda.current_stream(_index(device))
    return torch.cpu.current_stream()


def stream(selected: Any) -> Any:
    """``with torch.npu.stream(s):`` on the available device."""
    return _stream_module().stream(selected)


def Stream(*args: Any, **kwargs: Any) -> Any:   # noqa: N802  (torch's class name)
    """A stream of the available device (``torch.npu.Stream()``)."""
    kwargs.pop("device", None)
    return _stream_module().Stream(*args, **kwargs)


class _DefaultGenerators:
    """``torch.npu.default_generators[i]``: the available device's generators, read at
    each access (CUDA's exist only once CUDA is initialised)."""

    def _generators(self) -> Any:
        return torch.cuda.default_generators if cuda_present() else (torch.default_generator,)

    def __getitem__(self, index: int) -> Any:
        return self._generators()[index]

    def __len__(self) -> int:
        return len(self._generators())

    def __iter__(self) -> Any:
        return iter(self._generators())


default_generators = _DefaultGenerators()


class _Config:
    """``torch.npu.config``: torch_npu's runtime switches, kept as plain values here."""

    def __init__(self) -> None:
        self.allow_internal_format = False

    def __repr__(self) -> str:
        return f"<torch.npu.config (lazypatch NPU stand-in): {vars(self)}>"


config = _Config()


# --- torch.npu.amp ------------------------------------------------------------------------

class autocast(torch.amp.autocast):  # noqa: N801  (torch_npu's name)
    """``torch.npu.amp.autocast(enabled, dtype)`` on the available device."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16,
                 cache_enabled: bool = True) -> None:
        super().__init__(available_device().type, dtype=dtype, enabled=enabled,
                         cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """``torch.npu.amp.GradScaler(...)`` on the available device."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True, **ignored: Any) -> None:
        # torch_npu's own extras (dynamic=...) only tune its NPU overflow checks.
        super().__init__(available_device().type, init_scale=init_scale,
                         growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=enabled)


NAMESPACE = ("is_available", "device_count", "current_device", "set_device", "synchronize",
             "manual_seed", "manual_seed_all", "seed", "initial_seed", "get_device_name",
             "empty_cache", "memory_allocated", "max_memory_allocated", "memory_reserved",
             "max_memory_reserved", "reset_peak_memory_stats", "set_compile_mode",
             "current_stream", "stream", "Stream", "default_generators", "config")
AMP = ("autocast", "GradScaler")


# --- Tensor.npu / Module.npu ---------------------------------------------------------------

def tensor_npu(self: torch.Tensor, device: Any = None, non_blocking: bool = False,
               **ignored: Any) -> torch.Tensor:
    """``tensor.npu()``: the tensor on the available device."""
    return self.to(available_device(_index(device)), non_blocking=non_blocking)


def module_npu(self: torch.nn.Module, device: Any = None) -> torch.nn.Module:
    """``module.npu()``: the module's parameters and buffers on the available device."""
    return self.to(available_device(_index(device)))

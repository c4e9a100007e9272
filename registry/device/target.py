"""The target device and the translation of CUDA device arguments to it.

Resolved once, lazily, at the first redirect that needs it (never while
torch itself is still importing, since probing torch_npu imports torch):

* ``LAZYPATCH_DEVICE`` (npu, cpu, or any torch device type) when set and usable;
* else the NPU when ``torch_npu`` imports and sees a device;
* else the CPU. When real CUDA is available and nothing was asked for, the
  target is "cuda" itself and every redirect passes its arguments through.

Arguments are parsed as devices: a string is redirected only when
``torch.device`` parses it as a CUDA device, so "cuda_ckpt/model.pt" and
other strings that merely contain "cuda" pass through unchanged.
"""

from __future__ import annotations

import sys

import torch

import lazypatch

from . import observe

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")


class Target:
    """The chosen device type, how to build its devices, and why it was chosen."""

    def __init__(self, device_type: str, reason: str) -> None:
        self.type = device_type
        self.reason = reason
        self.passthrough = device_type == "cuda"   # real CUDA: redirect nothing
        self.is_cpu = device_type == "cpu"
        self.default = torch.device(device_type)
        # The device-specific namespace (torch.npu, torch.xpu, ...); None for the CPU,
        # whose answers come from cpu_backend.
        self.module: "Any" = None
        if not self.is_cpu and not self.passthrough:
            self.module = getattr(torch, device_type, None)

    def device(self, index: "Optional[int]") -> "torch.device":
        """The target device for CUDA device ``index`` (None: the current one)."""
        if self.is_cpu or index is None:
            return self.default
        return torch.device(self.type, index)

    def __repr__(self) -> str:
        return f"<device target {self.type!r}: {self.reason}>"


_TARGET: "Optional[Target]" = None


def flag(name: str, default: bool = False) -> bool:
    """A boolean pack setting; a bad value warns with the accepted words and falls back."""
    value = lazypatch.setting(name, "")
    lowered = value.strip().lower()
    if not lowered:
        return default
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    lazypatch.warn_configuration(
        f"lazypatch device pack: {name}={value!r} is not understood; use one of "
        f"{', '.join(TRUE_WORDS + FALSE_WORDS[:-1])}. Using {int(default)}.")
    return default


def _torch_initializing() -> bool:
    spec = getattr(sys.modules.get("torch"), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def _npu_devices() -> int:
    """How many NPUs torch_npu sees (0 when it is absent or cannot load)."""
    from importlib.util import find_spec
    if "torch_npu" not in sys.modules and find_spec("torch_npu") is None:
        return 0
    try:
        import torch_npu  # noqa: F401  (registers torch.npu)
        npu = getattr(torch, "npu", None)
        return int(npu.device_count()) if npu is not None and npu.is_available() else 0
    except Exception as error:   # a broken Ascend install must not break the program
        lazypatch.warn_configuration(f"lazypatch device pack: torch_npu is installed but "
                                     f"unusable ({type(error).__name__}: {error}); using the CPU")
        return 0


def _requested() -> "Optional[Target]":
    """The target LAZYPATCH_DEVICE asks for, or None (with a warning when unusable)."""
    value = lazypatch.setting("LAZYPATCH_DEVICE", "").strip().lower()
    if not value:
        return None
    # Named as the user set it: the variable, or the key of the file that set it.
    source = lazypatch.setting_source("LAZYPATCH_DEVICE") or "LAZYPATCH_DEVICE"
    key, _, path = source.partition(" in ")
    given = f"{key} = {value!r} in {path}" if path else f"{source}={value!r}"
    accepted = "npu, cpu, or another torch device type such as xpu or mps (no index)"
    try:
        parsed = torch.device(value)
    except (RuntimeError, TypeError):
        parsed = None
    if parsed is None or parsed.index is not None:
        lazypatch.warn_configuration(
            f"lazypatch device pack: {given} is not a device type; "
            f"use {accepted}. Choosing automatically.")
        return None
    if parsed.type == "npu" and _npu_devices() == 0:
        lazypatch.warn_configuration(
            f"lazypatch device pack: {given} but torch_npu sees no NPU; "
            "choosing automatically")
        return None
    if parsed.type not in ("cpu", "npu", "cuda") and getattr(torch, parsed.type, None) is None:
        lazypatch.warn_configuration(
            f"lazypatch device pack: {given}: torch has no "
            f"torch.{parsed.type} namespace; use {accepted}. Choosing automatically.")
        return None
    return Target(parsed.type, given if path else f"{source}={value}")


def _choose() -> Target:
    requested = _requested()
    if requested is not None:
        return requested
    honest_is_available = lazypatch.original(torch.cuda, "is_available")
    if honest_is_available():
        return Target("cuda", "CUDA is available; nothing is redirected")
    if _npu_devices() > 0:
        return Target("npu", "torch_npu sees an NPU")
    return Target("cpu", "no CUDA and no NPU (torch_npu absent or without devices)")


def resolve() -> "Optional[Target]":
    """The target, chosen and reported once; None while torch is still importing
    (callers then pass their arguments through unchanged)."""
    global _TARGET
    target = _TARGET
    if target is not None:
        return target
    if _torch_initializing():
        return None
    target = _choose()
    _TARGET = target
    observe.TARGET_TYPE[0] = target.type
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.getLogger("lazypatch").info(
            "device pack: CUDA calls go to %r (%s)", target.type, target.reason)
    return target


# --- translation ------------------------------------------------------------

_DEVICE = torch.device
_CACHE: "Dict[Any, Any]" = {}      # (type, value) -> translated device


def translate(value: "Any") -> "Any":
    """``value`` as a target device if it denotes a CUDA device, else ``value`` itself.

    CUDA devices are: a string ``torch.device`` parses as type "cuda", a
    ``torch.device`` of type "cuda", and an int (a CUDA index, as torch reads
    ints in device arguments). Returns the same object when nothing changes,
    so callers test ``result is value``.
    """
    kind = type(value)
    if kind is not str and kind is not _DEVICE and kind is not int:
        return value
    key = (kind, value)
    cached = _CACHE.get(key)
    if cached is not None:
        return value if cached is _SAME else cached
    result = _translate_uncached(kind, value)
    if result is None:       # torch still importing: decide later, cache nothing
        return value
    _CACHE[key] = _SAME if result is value else result
    return result


_SAME = object()


def _translate_uncached(kind: type, value: "Any") -> "Any":
    if kind is str:
        if not value.startswith("cuda"):
            return value
        try:
            parsed = _DEVICE(value)
        except (RuntimeError, ValueError):
            return value        # not a device ("cuda_ckpt"): let torch judge it
        if parsed.type != "cuda":
            return value
        index = parsed.index
    elif kind is _DEVICE:
        if value.type != "cuda":
            return value
        index = value.index
    else:
        if value < 0:
            return value
        index = value
    target = resolve()
    if target is None:
        return None
    if target.passthrough:
        return value
    return target.device(index)


def translate_index(value: "Any") -> "Any":
    """For target-namespace functions (torch.npu.set_device(1)): CUDA strings and
    devices become target devices; ints and None stay as they are."""
    if type(value) is int or value is None:
        return value
    return translate(value)


def translate_ids(ids: "Any") -> "Any":
    """A ``device_ids`` list: None on the CPU (which takes none), else translated."""
    if ids is None:
        return None
    target = resolve()
    if target is None or target.passthrough:
        return ids
    if target.is_cpu:
        return None
    return [translate_index(item) for item in ids]

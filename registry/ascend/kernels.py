"""mx_driving kernels, looked up at their first call rather than at patch time.

Patches on ``torch`` run at the end of ``import torch``, which may happen
*inside* ``import mx_driving`` or ``import torch_npu`` (both import torch
first). Importing mx_driving from such a patch would meet a half-initialised
package, so kernels are resolved lazily, once, and cached. A kernel that the
installed mx_driving lacks is reported once (a warning naming the patch to
disable) and the caller falls back to its plain PyTorch path.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any, Callable, Dict, Optional

_MISSING = object()
_cache: Dict[str, Any] = {}


class MissingKernelWarning(UserWarning):
    """The installed mx_driving lacks a kernel a patch wanted; PyTorch is used instead."""


def kernel(name: str, patch_name: str) -> Optional[Callable[..., Any]]:
    """``mx_driving.<name>``, or None (warned once) when mx_driving has no such kernel.

    Never raises: the callers always have an exact PyTorch fallback.
    """
    found = _cache.get(name, _MISSING)
    if found is _MISSING:
        found = _load(name, patch_name)
        _cache[name] = found
    return found


def _load(name: str, patch_name: str) -> Optional[Callable[..., Any]]:
    try:
        module = importlib.import_module("mx_driving")
        found = getattr(module, name)
    except (ImportError, AttributeError) as error:
        warnings.warn(f"lazypatch: {patch_name}: mx_driving.{name} is not available "
                      f"({type(error).__name__}: {error}); using the PyTorch path instead. "
                      f"Disable the patch with LAZYPATCH_DISABLE={patch_name}",
                      MissingKernelWarning, stacklevel=3)
        return None
    return found


def forget() -> None:
    """Drop cached kernels (after mx_driving was reloaded or replaced)."""
    _cache.clear()

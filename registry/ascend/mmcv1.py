"""mmcv 1.x data-parallel fixes for NPUs (``mmcv.parallel`` is gone in mmcv 2.x).

* Scatter stream: mmcv 1.x ``Scatter.forward`` calls torch's
  ``_get_stream(device)`` with an *int*; torch's version takes a
  ``torch.device`` and looks up its backend module by ``device.type``. The
  fix adapts the argument at that one call site (the module global that
  ``Scatter.forward`` looks up) instead of copying ``Scatter.forward``.
* DDP: ``MMDistributedDataParallel`` becomes mmcv's own
  ``mmcv.device.npu.NPUDistributedDataParallel``, in every module that holds
  the name (``mmcv.parallel`` re-exports it), as DrivingSDK's ``ddp`` patch
  does for the defining module only.
* FP16 hooks: ``Fp16OptimizerHook`` and ``GradientCumulativeFp16OptimizerHook``
  scale losses with torch_npu's ``GradScaler`` instead of CUDA's, as DrivingSDK's
  ``optimizer_hooks`` patch does by redefining the four hook classes.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType
from typing import Any, Callable

import torch

import lazypatch


def device_type() -> str:
    """The accelerator's device type: "npu" once torch_npu registered ``torch.npu``."""
    return "npu" if hasattr(torch, "npu") else "cuda"


def stream_adapter(get_stream: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``get_stream`` accepting mmcv 1.x's int device indices (-1: no stream)."""
    def _get_stream(device: Any) -> Any:
        if isinstance(device, int):
            if device < 0:
                return None
            device = torch.device(device_type(), device)
        return get_stream(device)
    _get_stream.__wrapped__ = get_stream  # type: ignore[attr-defined]
    return _get_stream


def patch_scatter_stream(functions: ModuleType, patch: lazypatch.PatchContext) -> None:
    """Replace ``mmcv.parallel._functions._get_stream`` by the int-accepting adapter."""
    import torch.nn.parallel._functions as torch_functions
    current = functions.__dict__.get("_get_stream")
    if current is not torch_functions._get_stream:
        # Old mmcv 1.x defines its own int-taking _get_stream: nothing to fix.
        patch.skip("mmcv.parallel._functions._get_stream is not torch's "
                   "(torch.nn.parallel._functions._get_stream); this mmcv passes device "
                   "indices to its own function, which needs no fix")
    patch.setattr(functions, "_get_stream", stream_adapter(current))
    patch.note(f"Scatter.forward streams created for torch.device('{device_type()}', i)")


def patch_distributed_data_parallel(parallel: ModuleType, patch: lazypatch.PatchContext) -> None:
    """``MMDistributedDataParallel`` -> ``NPUDistributedDataParallel`` everywhere."""
    if importlib.util.find_spec("mmcv.device.npu") is None:
        patch.skip("mmcv.device.npu is missing (mmcv < 1.7): no NPUDistributedDataParallel")
    npu = importlib.import_module("mmcv.device.npu")
    replacement = npu.NPUDistributedDataParallel
    distributed = importlib.import_module(f"{parallel.__name__}.distributed")
    original = distributed.MMDistributedDataParallel
    # The modules defining the replacement subclass the original by that name:
    # they keep it, or the subclass would become its own base.
    keep = tuple(module for name, module in list(sys.modules.items())
                 if module is not None and name.startswith("mmcv.device."))
    patch.setattr(distributed, "MMDistributedDataParallel", replacement)
    rebound = patch.rebind(original, replacement, exclude=(distributed,) + keep)
    patch.note(f"MMDistributedDataParallel -> NPUDistributedDataParallel "
               f"(also in {', '.join(rebound) or 'no other module'})")


def patch_fp16_grad_scaler(optimizer_hooks: ModuleType, patch: lazypatch.PatchContext) -> None:
    """mmcv 1.x ``Fp16OptimizerHook`` / ``GradientCumulativeFp16OptimizerHook``: loss
    scaling by torch_npu's ``GradScaler``.

    mmcv 1.x binds ``GradScaler`` from ``torch.cuda.amp`` at import; without CUDA
    that scaler disables itself (a warning, then ``scale(loss)`` is ``loss``), so
    FP16 gradients underflow on the NPU. The hooks look the name up in their
    module when they are built, so the module global is what changes.
    """
    if "GradScaler" not in optimizer_hooks.__dict__:
        patch.skip("this mmcv's FP16 hooks use no GradScaler (its torch < 1.6 path)")
    importlib.import_module("torch_npu")   # registers torch.npu
    scaler = getattr(getattr(getattr(torch, "npu", None), "amp", None), "GradScaler", None)
    if scaler is None:
        patch.skip("torch.npu.amp.GradScaler is missing (torch_npu too old)")
    patch.setattr(optimizer_hooks, "GradScaler", scaler)
    patch.note("Fp16OptimizerHook and GradientCumulativeFp16OptimizerHook scale losses with "
               "torch.npu.amp.GradScaler (fused clipping: ascend.mmcv1_optimizer_hook)")

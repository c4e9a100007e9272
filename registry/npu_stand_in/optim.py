"""``torch_npu.optim``'s fused optimizers as torch's own (the same update rules; the NPU
versions only fuse the per-parameter loops), with torch_npu's ``clip_grad_norm_fused_``."""

from __future__ import annotations

from typing import Any

import torch


class _FusedClipping:
    """torch_npu's fused optimizers clip their own gradients by norm."""

    def clip_grad_norm_fused_(self, max_norm: float, norm_type: float = 2.0) -> Any:
        parameters = [parameter for group in self.param_groups  # type: ignore[attr-defined]
                      for parameter in group["params"] if parameter.grad is not None]
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type)


class NpuFusedSGD(_FusedClipping, torch.optim.SGD):
    """``torch_npu.optim.NpuFusedSGD``: torch.optim.SGD."""


class NpuFusedAdam(_FusedClipping, torch.optim.Adam):
    """``torch_npu.optim.NpuFusedAdam``: torch.optim.Adam."""


class NpuFusedAdamW(_FusedClipping, torch.optim.AdamW):
    """``torch_npu.optim.NpuFusedAdamW``: torch.optim.AdamW."""


NAMES = ("NpuFusedSGD", "NpuFusedAdam", "NpuFusedAdamW")

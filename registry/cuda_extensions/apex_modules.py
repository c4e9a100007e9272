"""apex's fused optimizer and normalization layers as the PyTorch classes computing the
same thing.

``FusedAdam`` is ``torch.optim.Adam``: with ``adam_w_mode=True`` (apex's
default) weight decay is decoupled (``decoupled_weight_decay=True``, which is
exactly ``torch.optim.AdamW``), with ``False`` it is L2 added to the gradient
(Adam). ``FusedLayerNorm`` is ``torch.nn.LayerNorm`` and ``FusedRMSNorm`` is
``torch.nn.RMSNorm``, with apex's defaults (``eps=1e-5``) and parameter names
(``weight``/``bias``), so apex checkpoints load.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence, Tuple, Union

import torch

Shape = Union[int, Sequence[int], torch.Size]


def _unsupported(what: str, hint: str) -> NotImplementedError:
    return NotImplementedError(
        f"lazypatch's pure-PyTorch {what} is not supported (apex is not installed; lazypatch "
        f"pack 'cuda_extensions' provides a stand-in): {hint}")


class FusedAdam(torch.optim.Adam):
    """apex.optimizers.FusedAdam: Adam, or AdamW with ``adam_w_mode=True`` (default)."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, bias_correction: bool = True,
                 betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 adam_w_mode: bool = True, weight_decay: float = 0.0, amsgrad: bool = False,
                 set_grad_none: bool = True, capturable: bool = False,
                 master_weights: bool = False) -> None:
        if amsgrad:
            # apex raises this too: its fused kernel has no AMSGrad.
            raise RuntimeError("FusedAdam does not support the AMSGrad variant.")
        if not bias_correction:
            raise _unsupported("FusedAdam(bias_correction=False)",
                               "torch's Adam always corrects the bias")
        if master_weights:
            raise _unsupported("FusedAdam(master_weights=True)",
                               "keep the parameters in float32 and use torch.autocast")
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         decoupled_weight_decay=adam_w_mode)
        self.adam_w_mode = adam_w_mode
        self.set_grad_none = set_grad_none

    def zero_grad(self, set_to_none: "bool | None" = None) -> None:
        """Clear gradients; to None unless ``set_grad_none=False`` was given (apex)."""
        super().zero_grad(set_to_none=self.set_grad_none if set_to_none is None
                          else set_to_none)


class FusedLayerNorm(torch.nn.LayerNorm):
    """apex.normalization.FusedLayerNorm: ``torch.nn.LayerNorm``."""

    def __init__(self, normalized_shape: Shape, eps: float = 1e-5,
                 elementwise_affine: bool = True, memory_efficient: bool = False) -> None:
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine)
        self.memory_efficient = memory_efficient


class FusedRMSNorm(torch.nn.RMSNorm):
    """apex.normalization.FusedRMSNorm: ``torch.nn.RMSNorm`` (no bias)."""

    def __init__(self, normalized_shape: Shape, eps: float = 1e-5,
                 elementwise_affine: bool = True, memory_efficient: bool = False) -> None:
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine)
        self.memory_efficient = memory_efficient

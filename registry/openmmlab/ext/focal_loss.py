"""``sigmoid_focal_loss_forward/backward``: mmcv's sigmoid focal loss kernels.

For each element (sample n, class c) with target t = target[n] and p = sigmoid(x):

    loss = -alpha * (1 - p)^gamma * log(p)            where c == t
    loss = -(1 - alpha) * p^gamma * log(1 - p)        elsewhere

times ``weight[t]`` when a class weight is given (an empty ``weight`` means none), and
the logarithms clamped at the smallest normal float, as mmcv's kernel does. A target
outside ``[0, num_classes)`` (mmdet's background label ``num_classes``) is a negative
for every class. The backward is the derivative of that same expression, written out
(the kernel's formula), and checked against autograd in tests/packs/test_point_ops.py.
"""
from __future__ import annotations

from typing import Tuple

import torch


def _terms(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor
           ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(p, is-the-target mask, log(p), log(1 - p)) with mmcv's clamping; the class weight
    per row (1 where none is given)."""
    p = torch.sigmoid(input)
    classes = torch.arange(input.shape[1], device=input.device)
    positive = target.long()[:, None] == classes[None, :]
    tiny = torch.finfo(input.dtype).tiny
    log_p = torch.log(p.clamp_min(tiny))
    log_not_p = torch.log((1 - p).clamp_min(tiny))
    if weight.numel():
        rows = weight[target.long().clamp(0, weight.numel() - 1)][:, None]
        rows = torch.where((target.long() >= 0)[:, None] & (target.long() < weight.numel())[:, None],
                           rows, torch.ones_like(rows))
    else:
        rows = torch.ones((input.shape[0], 1), dtype=input.dtype, device=input.device)
    return p, positive, torch.stack((log_p, log_not_p)), rows


def sigmoid_focal_loss_forward(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor,
                               output: torch.Tensor, gamma: float, alpha: float) -> None:
    """Write the element-wise focal loss of ``input`` (N, C) into ``output`` (N, C)."""
    p, positive, (log_p, log_not_p), rows = _terms(input, target, weight)
    loss = torch.where(positive, -alpha * (1 - p).pow(gamma) * log_p,
                       -(1 - alpha) * p.pow(gamma) * log_not_p)
    output.copy_(loss * rows)


def sigmoid_focal_loss_backward(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor,
                                grad_input: torch.Tensor, gamma: float, alpha: float) -> None:
    """Write d(loss)/d(input), element-wise, into ``grad_input`` (mmcv's caller scales it
    by the incoming gradient and the reduction afterwards)."""
    p, positive, (log_p, log_not_p), rows = _terms(input, target, weight)
    positive_term = (1 - p).pow(gamma) * (1 - p - gamma * p * log_p)
    negative_term = p.pow(gamma) * (gamma * (1 - p) * log_not_p - p)
    grad = torch.where(positive, -alpha * positive_term, -(1 - alpha) * negative_term)
    grad_input.copy_(grad * rows)

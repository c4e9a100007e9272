"""``sigmoid_focal_loss_forward/backward`` and ``softmax_focal_loss_forward/backward``:
mmcv's focal loss kernels.

Sigmoid:
For each element (sample n, class c) with target t = target[n] and p = sigmoid(x):

    loss = -alpha * (1 - p)^gamma * log(p)            where c == t
    loss = -(1 - alpha) * p^gamma * log(1 - p)        elsewhere

times ``weight[t]`` when a class weight is given (an empty ``weight`` means none), and
the logarithms clamped at the smallest normal float, as mmcv's kernel does. A target
outside ``[0, num_classes)`` (mmdet's background label ``num_classes``) is a negative
for every class. The backward is the derivative of that same expression, written out
(the kernel's formula), and checked against autograd in tests/packs/shared/test_mmcv_ext_kernels.py.

Softmax: mmcv's wrapper hands the kernels the softmax ``s`` of the logits, not the logits.
Per sample n with label t and p = s[n, t]:

    loss[n] = -alpha * (1 - p)^gamma * log(p)          (times weight[t] when given)

and the backward gives the gradient with respect to the *logits* (through the softmax):

    buff[n] = alpha * (gamma * (1 - p)^(gamma - 1) * p * log(p) - (1 - p)^gamma)
    grad[n, c] = buff[n] * ((c == t) - s[n, c])

A sample whose label lies outside ``[0, num_classes)`` contributes nothing (mmcv's
kernel skips negative labels; a label past the last class has no probability to read).
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


def _softmax_terms(softmax: torch.Tensor, target: torch.Tensor, weight: torch.Tensor
                   ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(p = the label's probability, log(p) clamped as mmcv's kernel, the label's class
    weight (1 where none), whether the sample has a label inside the classes)."""
    labels = target.long()
    labelled = (labels >= 0) & (labels < softmax.shape[1])
    safe = labels.clamp(0, softmax.shape[1] - 1)
    p = softmax.gather(1, safe[:, None])[:, 0]
    log_p = torch.log(p.clamp_min(torch.finfo(softmax.dtype).tiny))
    rows = weight[safe] if weight.numel() else torch.ones_like(p)
    return p, log_p, rows, labelled


def softmax_focal_loss_forward(softmax: torch.Tensor, target: torch.Tensor,
                               weight: torch.Tensor, output: torch.Tensor, gamma: float,
                               alpha: float) -> None:
    """Write each sample's focal loss, from the softmax probabilities (N, C) and labels
    (N,), into ``output`` (N,)."""
    if softmax.shape[0] == 0:
        return
    p, log_p, rows, labelled = _softmax_terms(softmax, target, weight)
    loss = -alpha * (1 - p).pow(gamma) * log_p * rows
    output.copy_(torch.where(labelled, loss, torch.zeros_like(loss)))


def softmax_focal_loss_backward(softmax: torch.Tensor, target: torch.Tensor,
                                weight: torch.Tensor, buff: torch.Tensor,
                                grad_input: torch.Tensor, gamma: float, alpha: float) -> None:
    """Write d(loss[n])/d(logits[n, c]) into ``grad_input`` (N, C), using ``buff`` (N,)
    for the per-sample factor as mmcv's two-pass kernel does (its caller scales by the
    incoming gradient and the reduction afterwards)."""
    if softmax.shape[0] == 0:
        return
    p, log_p, rows, labelled = _softmax_terms(softmax, target, weight)
    factor = alpha * (gamma * (1 - p).pow(gamma - 1) * p * log_p - (1 - p).pow(gamma)) * rows
    buff.copy_(torch.where(labelled, factor, torch.zeros_like(factor)))
    classes = torch.arange(softmax.shape[1], device=softmax.device)
    is_label = (target.long()[:, None] == classes[None, :]).to(softmax.dtype)
    grad_input.copy_(buff[:, None] * (is_label - softmax))

"""PAConv's ``assign_score_withk_forward/backward`` (mmcv ships CUDA only).

output[b, o, n, k] = sum_m scores[b, n, k, m] *
    (points[b, knn[b, n, k], m, o] - centers[b, knn[b, n, 0], m, o]),
the sum the CUDA kernel computes whatever ``aggregate`` says (mmcv's kernel
ignores it too). The backward differentiates that same expression.
"""
from __future__ import annotations

from typing import Tuple

import torch


def _neighbour_and_centre(points: torch.Tensor, centers: torch.Tensor,
                          knn_idx: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(B, N, M, O) tables, (B, n, K) indices -> both gathered as (B, n, K, M, O)."""
    bsz = points.shape[0]
    rows = torch.arange(bsz, device=points.device)[:, None, None]
    index = knn_idx.long()
    return points[rows, index], centers[rows, index[:, :, :1]].expand_as(points[rows, index])


def _aggregate(points: torch.Tensor, centers: torch.Tensor, scores: torch.Tensor,
               knn_idx: torch.Tensor) -> torch.Tensor:
    neighbour, centre = _neighbour_and_centre(points, centers, knn_idx)
    # (B, n, K, M) x (B, n, K, M, O) -> (B, O, n, K)
    return torch.einsum('bnkm,bnkmo->bonk', scores, neighbour - centre)


def assign_score_withk_forward(points: torch.Tensor, centers: torch.Tensor,
                               scores: torch.Tensor, knn_idx: torch.Tensor,
                               output: torch.Tensor, B: int, N0: int, N1: int,
                               M: int, K: int, O: int,  # noqa: E741 (mmcv's keyword)
                               aggregate: int) -> None:
    """Write the score-weighted neighbour-minus-centre features into ``output``."""
    output.copy_(_aggregate(points, centers, scores, knn_idx))


def assign_score_withk_backward(grad_out: torch.Tensor, points: torch.Tensor,
                                centers: torch.Tensor, scores: torch.Tensor,
                                knn_idx: torch.Tensor,
                                grad_points: torch.Tensor,
                                grad_centers: torch.Tensor,
                                grad_scores: torch.Tensor, B: int, N0: int,
                                N1: int, M: int, K: int, O: int,  # noqa: E741 (mmcv's keyword)
                                aggregate: int) -> None:
    """Accumulate the gradients of the forward into the three grad tensors."""
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(True) for t in (points, centers, scores)]
        out = _aggregate(leaves[0], leaves[1], leaves[2], knn_idx)
        grads = torch.autograd.grad(out, leaves, grad_out)
    grad_points.add_(grads[0])
    grad_centers.add_(grads[1])
    grad_scores.add_(grads[2])

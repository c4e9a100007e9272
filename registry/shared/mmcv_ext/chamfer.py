"""``chamfer_distance_forward/backward``: mmcv's chamfer distance kernels
(``mmcv.ops.chamfer_distance``, Oriented RepPoints' point-set loss).

For point sets ``xyz1`` (B, N, D) and ``xyz2`` (B, M, D) (mmcv's kernel reads D = 2):

    dist1[b, i] = min_j |xyz1[b, i] - xyz2[b, j]|^2,   idx1[b, i] = its argmin
    dist2[b, j] = min_i |xyz2[b, j] - xyz1[b, i]|^2,   idx2[b, j] = its argmin

squared distances, ties to the lowest index (the kernel keeps the first strict minimum).
The backward is the derivative through the chosen pairs: each pair (i, idx1[i]) adds
``2 * grad_dist1[i] * (xyz1[i] - xyz2[idx1[i]])`` to ``xyz1[i]`` and its negative to
``xyz2[idx1[i]]`` (scatter-added, as the kernel's atomicAdd), and likewise for dist2.
Distance matrices are built a chunk of query points at a time (:mod:`.points`).
"""
from __future__ import annotations

from typing import Tuple

import torch

from .neighbour_search import exact_squared_distances
from .points import _query_chunks


def _nearest(queries: torch.Tensor, points: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(B, Q, D), (B, P, D) -> squared distance to and index of each query's nearest point."""
    b, q = queries.shape[:2]
    best = queries.new_empty((b, q))
    index = torch.empty((b, q), dtype=torch.long, device=queries.device)
    for start, stop in _query_chunks(b, q, points.shape[1]):
        values, arg = exact_squared_distances(queries[:, start:stop], points).min(dim=2)
        best[:, start:stop], index[:, start:stop] = values, arg
    return best, index


def chamfer_distance_forward(xyz1: torch.Tensor, xyz2: torch.Tensor, dist1: torch.Tensor,
                             dist2: torch.Tensor, idx1: torch.Tensor, idx2: torch.Tensor
                             ) -> None:
    """Write each point's squared distance to the other set's nearest point into
    ``dist1`` (B, N) / ``dist2`` (B, M) and that point's index into ``idx1`` / ``idx2``."""
    if xyz1.shape[1] == 0 or xyz2.shape[1] == 0:
        return
    for queries, points, dist, idx in ((xyz1, xyz2, dist1, idx1), (xyz2, xyz1, dist2, idx2)):
        best, index = _nearest(queries, points)
        dist.copy_(best)
        idx.copy_(index)


def _pull(queries: torch.Tensor, points: torch.Tensor, index: torch.Tensor,
          grad_dist: torch.Tensor, grad_queries: torch.Tensor,
          grad_points: torch.Tensor) -> None:
    """Add the gradient of ``sum(grad_dist * |queries - points[index]|^2)`` to both sets."""
    index = index.long()
    partner = torch.gather(points, 1, index[..., None].expand(-1, -1, points.shape[2]))
    pull = 2 * grad_dist[..., None] * (queries - partner)
    grad_queries.add_(pull.to(grad_queries.dtype))
    grad_points.scatter_add_(1, index[..., None].expand_as(pull), -pull.to(grad_points.dtype))


def chamfer_distance_backward(xyz1: torch.Tensor, xyz2: torch.Tensor, idx1: torch.Tensor,
                              idx2: torch.Tensor, grad_dist1: torch.Tensor,
                              grad_dist2: torch.Tensor, grad_xyz1: torch.Tensor,
                              grad_xyz2: torch.Tensor) -> None:
    """Accumulate d(loss)/d(xyz1) and d(loss)/d(xyz2) into ``grad_xyz1`` / ``grad_xyz2``
    (zero-initialised by mmcv's caller) from the gradients of both distances."""
    if xyz1.shape[1] == 0 or xyz2.shape[1] == 0:
        return
    _pull(xyz1, xyz2, idx1, grad_dist1, grad_xyz1, grad_xyz2)
    _pull(xyz2, xyz1, idx2, grad_dist2, grad_xyz2, grad_xyz1)

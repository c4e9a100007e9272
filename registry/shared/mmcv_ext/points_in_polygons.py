"""``points_in_polygons_forward`` (mmcv ships CUDA only): (P, 2) points against
(M, 8) quadrilaterals, writing 1.0/0.0 into a (P, M) tensor.

The crossing-number rule of mmcv's kernel, edge by edge (edges (v0, v3), (v1, v0),
(v2, v1), (v3, v2)): a point on a vertex or on an edge stops the count there, so
what was counted before decides. Float32 arithmetic in the kernel's order; points
in chunks to bound the (points x polygons x 4) intermediates.
"""
from __future__ import annotations

import torch

#: Upper bound on elements of one (points, polygons, 4) chunk.
CHUNK_ELEMENTS = 1 << 22


def points_in_polygons_forward(points: torch.Tensor, polygons: torch.Tensor,
                               output: torch.Tensor) -> None:
    """output[p, m] = 1.0 when point p is inside quadrilateral m, else 0.0."""
    corners = polygons.float().reshape(-1, 4, 2)
    sx, sy = corners[..., 0], corners[..., 1]  # edge i runs from vertex i ...
    tx, ty = corners.roll(1, dims=1)[..., 0], corners.roll(1, dims=1)[..., 1]  # ... to i-1
    step = max(1, CHUNK_ELEMENTS // max(corners.shape[0] * 4, 1))
    for start in range(0, points.shape[0], step):
        chunk = points[start:start + step].float()
        px, py = chunk[:, 0, None, None], chunk[:, 1, None, None]
        in_range = (py >= torch.minimum(sy, ty)) & (py <= torch.maximum(sy, ty))
        at_vertex = ((sx == px) & (sy == py)) | ((tx == px) & (ty == py))
        straddle = ((sy < py) & (ty >= py)) | ((sy >= py) & (ty < py))
        x = sx + (py - sy) * (tx - sx) / torch.where(straddle, ty - sy, torch.ones_like(sy))
        on_edge = straddle & (x == px)
        stop = in_range & (at_vertex | on_edge)
        crossing = in_range & straddle & ~stop & (x > px)
        counted = crossing & (torch.cumsum(stop.int(), dim=-1) == 0)
        inside = counted.sum(-1) % 2 == 1
        output[start:start + step] = inside.to(output.dtype)

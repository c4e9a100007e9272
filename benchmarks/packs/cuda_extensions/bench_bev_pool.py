"""Time the BEV pooling stand-ins of the ``cuda_extensions`` pack (BEVFusion's
``bev_pool_ext``, BEVDet's ``bev_pool_v2_ext``) against straightforward PyTorch.

Each row is one forward and backward on the same inputs (points already sorted into
intervals, as the projects' Python code hands them to the kernel):

* ``bev_pool`` (BEVFusion, LSS view transform): the stand-in against (a) a scatter-add
  of every point into the dense grid (``index_put_`` with ``accumulate``, autograd
  backward), (b) the cumulative-sum trick of Lift-Splat-Shoot that BEVFusion keeps as
  ``QuickCumsum`` for machines without its CUDA build, and (c) at the small size, the
  CUDA kernel's loop written in Python (one interval at a time);
* ``bev_pool_v2`` (BEVDet): the stand-in against a scatter-add of depth x feature
  products (``index_add_``, autograd backward).

Sizes follow the projects' camera branches, scaled down to fit a shared 2-core CPU:
``N`` frustum points, ``C`` channels, a ``G x G`` BEV grid.

    .venv/bin/python benchmarks/packs/cuda_extensions/bench_bev_pool.py [--quick] [--json]
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Dict, List, Tuple

# The repository (this file lies in benchmarks/packs/<pack>/).
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.insert(0, ROOT)
from benchmarks.packs.kernel_timing import Row, command_line, compared, rows_of_script  # noqa: E402


def _kernels() -> Any:
    sys.path.insert(0, ROOT)
    try:
        return importlib.import_module("lazypatch.registry.cuda_extensions.bev_pool")
    except ImportError:
        return importlib.import_module("registry.cuda_extensions.bev_pool")


def _intervals(ranks: Any) -> Tuple[Any, Any]:
    import torch
    kept = torch.ones(ranks.numel(), dtype=torch.bool)
    kept[1:] = ranks[1:] != ranks[:-1]
    starts = torch.where(kept)[0]
    lengths = torch.diff(torch.cat([starts, torch.tensor([ranks.numel()])]))
    return starts.int(), lengths.int()


def bev_pool_rows(kernels: Any, points: int, channels: int, grid: int, depth_bins: int,
                  repetitions: int, with_loop: bool) -> List[Row]:
    import torch
    generator = torch.Generator().manual_seed(0)
    shape = (1, depth_bins, grid, grid)
    geom = torch.stack([torch.randint(0, grid, (points,), generator=generator),
                        torch.randint(0, grid, (points,), generator=generator),
                        torch.randint(0, depth_bins, (points,), generator=generator),
                        torch.zeros(points, dtype=torch.long)], 1)
    ranks = (geom[:, 2] * grid + geom[:, 0]) * grid + geom[:, 1]
    order = ranks.argsort()
    geom, ranks = geom[order].int(), ranks[order]
    x = torch.randn(points, channels, generator=generator)
    starts, lengths = _intervals(ranks)
    grad = torch.randn(*shape, channels, generator=generator)

    def ours() -> None:
        out = kernels.bev_pool_forward(x, geom, lengths, starts, *shape)
        kernels.bev_pool_backward(grad, geom, lengths, starts, *shape)
        del out

    def scatter_add() -> None:
        leaf = x.detach().requires_grad_()
        out = leaf.new_zeros(*shape, channels)
        g = geom.long()
        out = out.index_put((g[:, 3], g[:, 2], g[:, 0], g[:, 1]), leaf, accumulate=True)
        out.backward(grad)

    def cumsum_trick() -> None:
        leaf = x.detach().requires_grad_()
        summed = leaf.cumsum(0)
        last = torch.ones(points, dtype=torch.bool)
        last[:-1] = ranks[1:] != ranks[:-1]
        summed, cells = summed[last], geom[last].long()
        summed = torch.cat((summed[:1], summed[1:] - summed[:-1]))
        out = summed.new_zeros(*shape, channels)
        out[cells[:, 3], cells[:, 2], cells[:, 0], cells[:, 1]] = summed
        out.backward(grad)

    size = f"N={points:,}, C={channels}, {depth_bins}x{grid}x{grid}"
    rows = [compared("bev_pool fwd+bwd", size, ours, scatter_add,
                     "scatter-add into the grid (index_put_)", repetitions),
            compared("bev_pool fwd+bwd", size, ours, cumsum_trick,
                     "cumsum trick (LSS / BEVFusion QuickCumsum)", repetitions)]
    if with_loop:
        def kernel_loop() -> None:
            out = x.new_zeros(*shape, channels)
            for start, length in zip(starts.tolist(), lengths.tolist()):
                h, w, d, b = geom[start].tolist()
                out[b, d, h, w] = x[start:start + length].sum(0)
            x_grad = torch.zeros_like(x)
            for start, length in zip(starts.tolist(), lengths.tolist()):
                h, w, d, b = geom[start].tolist()
                x_grad[start:start + length] = grad[b, d, h, w]
        rows.append(compared("bev_pool fwd+bwd", size, ours, kernel_loop,
                             "the CUDA kernel's loop in Python", 1))
    return rows


def bev_pool_v2_rows(kernels: Any, cameras: int, depth_bins: int, feature_hw: Tuple[int, int],
                     channels: int, grid: int, repetitions: int) -> List[Row]:
    import torch
    generator = torch.Generator().manual_seed(1)
    fh, fw = feature_hw
    depth = torch.rand(1, cameras, depth_bins, fh, fw, generator=generator)
    feat = torch.randn(1, cameras, fh, fw, channels, generator=generator)
    ranks_depth = torch.arange(depth.numel())
    camera, _, row, col = torch.unravel_index(ranks_depth, (cameras, depth_bins, fh, fw))
    ranks_feat = (camera * fh + row) * fw + col
    ranks_bev = torch.randint(0, grid * grid, (depth.numel(),), generator=generator)
    order = ranks_bev.argsort()
    ranks_depth, ranks_feat, ranks_bev = (r[order].int() for r in (ranks_depth, ranks_feat,
                                                                    ranks_bev))
    starts, lengths = _intervals(ranks_bev)
    by_feat = ranks_feat.argsort()
    feat_order = [r[by_feat] for r in (ranks_depth, ranks_feat, ranks_bev)]
    feat_starts, feat_lengths = _intervals(feat_order[1])
    out_shape = (1, 1, grid, grid, channels)
    grad = torch.randn(out_shape, generator=generator)

    def ours() -> None:
        out = feat.new_zeros(out_shape)
        kernels.bev_pool_v2_forward(depth, feat, out, ranks_depth, ranks_feat, ranks_bev,
                                    lengths, starts)
        depth_grad, feat_grad = torch.zeros_like(depth), torch.zeros_like(feat)
        kernels.bev_pool_v2_backward_opt(grad, depth_grad, feat_grad, depth, feat,
                                         *feat_order, feat_lengths, feat_starts)

    def scatter_add() -> None:
        depth_leaf = depth.detach().requires_grad_()
        feat_leaf = feat.detach().requires_grad_()
        products = depth_leaf.reshape(-1)[ranks_depth.long(), None] * \
            feat_leaf.reshape(-1, channels)[ranks_feat.long()]
        out = products.new_zeros(grid * grid, channels).index_add(0, ranks_bev.long(), products)
        out.backward(grad.reshape(-1, channels))

    size = f"N={depth.numel():,}, C={channels}, {grid}x{grid}"
    return [compared("bev_pool_v2 fwd+bwd", size, ours, scatter_add,
                     "scatter-add of depth x feature (index_add)", repetitions)]


def bench(quick: bool) -> List[Row]:
    kernels = _kernels()
    repetitions = 3 if quick else 7
    # The small sizes take a millisecond or two: many more pairs cost little and keep
    # one disturbed pair (a shared machine) from deciding the row.
    small_repetitions = 3 if quick else 61
    rows = bev_pool_rows(kernels, 20_000, 32, 64, 4, small_repetitions, with_loop=True)
    rows += bev_pool_v2_rows(kernels, 1, 16, (8, 22), 32, 64, small_repetitions)
    if not quick:
        rows += bev_pool_rows(kernels, 400_000, 80, 128, 1, repetitions, with_loop=False)
        rows += bev_pool_v2_rows(kernels, 6, 59, (16, 44), 80, 128, repetitions)
    return rows


def run(quick: bool) -> List[Dict[str, Any]]:
    """Rows for ``benchmarks/run.py``."""
    return rows_of_script(__file__, quick)


def main() -> None:
    command_line(bench, __doc__ or "")


if __name__ == "__main__":
    main()

"""Time lazypatch's pure-PyTorch sparse convolution against dense convolution.

Two sections, each with its baseline measured in the same run, on one torch thread
(``torch.set_num_threads(1)``, as bench_mmcv_ops.py: on a shared 2-core machine two
threads made single kernels vary tenfold):

* ``density``: mmcv's ``SubMConv3d`` and ``SparseConv3d`` (stride 2), forward and
  backward, indice pairs included, against ``conv3d`` on the scattered dense tensor
  (forward and backward), at 1%, 5% and 20% of the grid's sites active;
* ``encoder``: one training step (forward, backward) of mmdet3d's ``SparseEncoder``
  as SECOND's config builds it, on a synthetic lidar-like scene (a ground band and
  objects), against the same layers as dense ``Conv3d``/``BatchNorm3d`` on the same
  grid; and the same step on SECOND's full KITTI grid (41x1600x1408; a quarter of its
  extent with ``--quick``), where the dense layers' activations take gigabytes (no
  baseline).

Run from the repository root::

    .venv/bin/python benchmarks/bench_sparse_conv.py [--quick] [--json]
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: (section, case, sparse ms, baseline name, baseline ms or None)
Row = List[Any]


def median_ms(step: Callable[[], object], repetitions: int) -> float:
    """Median wall time of ``step`` in ms, after one warm-up call."""
    step()
    times = []
    for _ in range(repetitions):
        started = time.perf_counter()
        step()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def _load_stack() -> None:
    """torch, mmcv.ops (against lazypatch's mmcv._ext) and mmdet3d, as a user gets them;
    imported here, not at module import, so that benchmarks/run.py can import ``run``."""
    global torch, F, ops
    importlib.import_module("lazypatch.auto")
    import mmcv.ops as ops
    import torch
    import torch.nn.functional as F


def random_sites(shape: Sequence[int], density: float, seed: int):
    """int32 (N, 4) indices of a 1-batch grid with ``density`` of its sites active."""
    generator = torch.Generator().manual_seed(seed)
    active = torch.rand(1, *shape, generator=generator) < density
    return active.nonzero().int()


def scatter_dense(indices, features, shape):
    dense = features.new_zeros((1, *shape, features.shape[1]))
    dense = dense.index_put(tuple(indices.long().t()), features).movedim(-1, 1)
    return dense.clone(memory_format=torch.contiguous_format)


def density_rows(quick: bool) -> List[Row]:
    shape = [16, 64, 64] if quick else [24, 96, 96]
    channels = 16
    repetitions = 2 if quick else 3
    rows: List[Row] = []
    for density in (0.01, 0.05, 0.20):
        indices = random_sites(shape, density, seed=int(density * 100))
        features = torch.randn(len(indices), channels, requires_grad=True)
        size = f"{'x'.join(map(str, shape))}, {len(indices)} active, {channels}->{channels} ch"
        for name, layer, dense_args in (
                ("SubMConv3d k3", ops.SubMConv3d(channels, channels, 3), dict(padding=1)),
                ("SparseConv3d k3 s2", ops.SparseConv3d(channels, channels, 3, stride=2,
                                                        padding=1),
                 dict(stride=2, padding=1))):
            weight = layer.weight.detach().permute(4, 3, 0, 1, 2).contiguous()
            weight.requires_grad_(True)

            def sparse_step(layer=layer, features=features, indices=indices):
                out = layer(ops.SparseConvTensor(features, indices, shape, 1))
                out.features.sum().backward()

            def dense_step(weight=weight, dense_args=dense_args, features=features,
                           indices=indices):
                dense = scatter_dense(indices, features, shape)
                F.conv3d(dense, weight, **dense_args).sum().backward()

            rows.append(["density", f"{name}, fwd+bwd, {density:.0%} [{size}]",
                         median_ms(sparse_step, repetitions), "conv3d on the dense grid",
                         median_ms(dense_step, repetitions)])
    return rows


def lidar_like_sites(shape: Sequence[int], seed: int, objects: int, per_object: int):
    """(N, 4) int32 sites of one scene: a ground band one voxel thick, thinned, and
    compact object blobs above it (a lidar sweep is surfaces, not volume)."""
    generator = torch.Generator().manual_seed(seed)
    depth, height, width = shape
    ground_z = depth // 4
    ground = torch.rand(height, width, generator=generator) < 0.005
    yx = ground.nonzero()
    sites = [torch.cat([torch.full((len(yx), 1), ground_z), yx], 1)]
    for _ in range(objects):
        centre = torch.tensor([ground_z + 4, int(torch.randint(8, height - 8, (1,),
                                                               generator=generator)),
                               int(torch.randint(8, width - 8, (1,), generator=generator))])
        spread = torch.tensor([3, 6, 6])
        offsets = (torch.rand(per_object, 3, generator=generator) * 2 - 1) * spread
        sites.append((centre + offsets.round().long()).clamp(min=0))
    coords = torch.unique(torch.cat(sites), dim=0)
    coords = coords[(coords < torch.tensor(shape)).all(dim=1)]
    return torch.cat([torch.zeros(len(coords), 1, dtype=torch.long), coords], 1).int()


def second_encoder(sparse_shape: Sequence[int]):
    """mmdet3d's SparseEncoder with SECOND's config (configs/_base_/models/
    second_hv_secfpn_kitti.py: 4 input channels, conv-norm-act)."""
    from mmdet3d.registry import MODELS
    from mmdet3d.utils import register_all_modules
    register_all_modules()
    return MODELS.build(dict(type="SparseEncoder", in_channels=4,
                             sparse_shape=list(sparse_shape),
                             order=("conv", "norm", "act")))


def dense_twin(encoder):
    """The encoder's layers, in order, as dense Conv3d/BatchNorm3d/ReLU (SECOND's
    SparseEncoder is one chain: no residual blocks in its default block type)."""
    from torch import nn
    layers = []
    for module in encoder.modules():
        if type(module).__name__ in ("SubMConv3d", "SparseConv3d"):
            padding = [k // 2 for k in module.kernel_size] if module.subm else module.padding
            layers.append(nn.Conv3d(module.in_channels, module.out_channels,
                                    module.kernel_size, stride=module.stride,
                                    padding=padding, bias=module.bias is not None))
        elif isinstance(module, nn.BatchNorm1d):
            layers.append(nn.BatchNorm3d(module.num_features, module.eps, module.momentum))
        elif isinstance(module, nn.ReLU):
            layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


def encoder_rows(quick: bool) -> List[Row]:
    repetitions = 2 if quick else 3
    reduced = [41, 100, 88] if quick else [41, 200, 176]
    rows: List[Row] = []
    # quick mode (CI) stops at a quarter of KITTI's extent: the full grid takes seconds
    cases = [(reduced, True), ([41, 400, 352] if quick else [41, 1600, 1408], False)]
    for shape, with_dense in cases:
        encoder = second_encoder(shape).train()
        scale = shape[1] / 1600
        sites = lidar_like_sites(shape, seed=0, objects=max(2, int(40 * scale)),
                                 per_object=300)
        features = torch.randn(len(sites), 4)

        def sparse_step(encoder=encoder, sites=sites, features=features, shape=shape):
            encoder.zero_grad()
            encoder(features, sites, 1).sum().backward()

        size = f"{'x'.join(map(str, shape))}, {len(sites)} voxels"
        dense_ms: Optional[float] = None
        if with_dense:
            twin = dense_twin(encoder).train()
            dense_input = scatter_dense(sites, features, shape)

            def dense_step(twin=twin, dense_input=dense_input):
                twin.zero_grad()
                twin(dense_input).sum().backward()

            dense_ms = median_ms(dense_step, repetitions)
        rows.append(["encoder", f"SECOND SparseEncoder training step [{size}]",
                     median_ms(sparse_step, repetitions),
                     "same layers as dense Conv3d/BatchNorm3d" if with_dense else
                     "none (the dense layers' activations on this grid take gigabytes)",
                     dense_ms])
    return rows


SECTIONS: Dict[str, Callable[[bool], List[Row]]] = {"density": density_rows,
                                                     "encoder": encoder_rows}


def run(quick: bool) -> List[Dict[str, Any]]:
    """Rows for ``benchmarks/run.py``, measured in a fresh interpreter (torch, mmcv and
    mmdet3d never load into the runner)."""
    command = [sys.executable, os.path.abspath(__file__), "--json"] + (
        ["--quick"] if quick else [])
    output = subprocess.run(command, capture_output=True, text=True, check=True,
                            cwd=ROOT).stdout
    rows = []
    for _, case, sparse_ms, baseline_name, baseline_ms in json.loads(
            output.splitlines()[-1]):
        rows.append({"name": case, "value": sparse_ms, "unit": "ms",
                     "baseline": baseline_ms,
                     "ratio": sparse_ms / baseline_ms if baseline_ms else None,
                     "note": f"baseline: {baseline_name}"})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON line")
    parser.add_argument("--only", default="", help=f"sections: {', '.join(SECTIONS)}")
    args = parser.parse_args()
    _load_stack()
    torch.set_num_threads(1)
    chosen = [name for name in SECTIONS if not args.only or name in args.only.split(",")]
    rows = [row for name in chosen for row in SECTIONS[name](args.quick)]
    if args.json:
        print(json.dumps(rows))
        return
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}\n")
    print("| case | sparse (ms) | baseline | baseline (ms) | sparse / baseline |")
    print("|---|---:|---|---:|---:|")
    for _, case, sparse_ms, baseline_name, baseline_ms in rows:
        ratio = f"{sparse_ms / baseline_ms:.3f}" if baseline_ms else "-"
        baseline = f"{baseline_ms:.1f}" if baseline_ms else "-"
        print(f"| {case} | {sparse_ms:.1f} | {baseline_name} | {baseline} | {ratio} |")


if __name__ == "__main__":
    main()

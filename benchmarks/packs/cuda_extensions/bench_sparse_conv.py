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
  baseline);
* ``spconv``: the ``cuda_extensions`` pack's spconv stand-in against real spconv 2.3.8
  (its CPU build) in the same process, on SECOND's grid (41x1600x1408, two lidar-like
  scenes of about 22k voxels each; 41x400x352 with ``--quick``): ``SubMConv3d``,
  ``SparseConv3d``, ``SparseInverseConv3d`` and SECOND's whole ``SparseEncoder``,
  forward and forward+backward, indice pairs included, same weights and inputs, on
  each thread count of ``--threads``. The numerics are compared first (output sites,
  values, gradients); a case where they disagree gets no time. Each row's ratio is the
  median of per-round ratios, the two sides run back to back in alternating order: CPU
  time (on two threads, that of both). Real spconv needs a one-line fix for its
  backward on a CPU torch (:data:`SPCONV_CPU_STREAM_PATCH`, applied through lazypatch)
  and is only correct on one thread: on two its results change from run to run (its
  CPU kernels race), so there the stand-in is checked against spconv on one thread and
  the row says how far spconv's own two-thread result is.
  spconv is not in the stack's venv (there ``import spconv`` must give the stand-in):
  ``run`` installs it in a venv of its own (benchmarks/environment.py).

Run from the repository root::

    .venv/bin/python benchmarks/packs/cuda_extensions/bench_sparse_conv.py [--quick] [--json]
    <venv with spconv>/bin/python benchmarks/packs/cuda_extensions/bench_sparse_conv.py \
        --only spconv --threads 1,2

(the venv with spconv: benchmarks/.spconv-venv once ``run.py`` has built it; its copy of
lazypatch is refreshed from this checkout first).
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

# The repository (this file lies in benchmarks/packs/<pack>/).
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))

#: (section, case, sparse ms, baseline name, baseline ms or None[, ratio])
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


# ----------------------------------------------------------------- against real spconv

#: spconv's CPU build gets the current CUDA stream in every backward; on a CPU-only torch
#: that raises "Torch not compiled with CUDA enabled". Its CPU kernels ignore the stream,
#: so 0 (the default stream) is what they would get: the one-line fix, applied through
#: lazypatch when spconv's ops module is imported (site-packages is left alone).
SPCONV_CPU_STREAM_PATCH = "benchmarks.spconv_cpu_stream"


def real_spconv_installed() -> bool:
    """Whether this interpreter has spconv itself (a distribution), not the stand-in."""
    import importlib.metadata
    try:
        importlib.metadata.version("spconv")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _spconv_pair():
    """(stand-in, real spconv.pytorch): both in this process, the real one with its
    backward fixed for a CPU torch."""
    import lazypatch

    @lazypatch.when_imported("spconv.pytorch.ops", name=SPCONV_CPU_STREAM_PATCH)
    def cpu_stream(module, patch):
        patch.setattr(module, "get_current_stream", lambda: 0)

    real = importlib.import_module("spconv.pytorch")
    stand_in = importlib.import_module("lazypatch.registry.cuda_extensions.spconv")
    return stand_in, real


def second_scene_batch(shape: Sequence[int]):
    """Two lidar-like scenes of SECOND's grid as one batch: (N, 4) int32 sites."""
    scale = shape[1] / 1600
    scenes = []
    for batch in (0, 1):
        sites = lidar_like_sites(shape, seed=batch, objects=max(2, int(40 * scale)),
                                 per_object=300)
        sites[:, 0] = batch
        scenes.append(sites)
    return torch.cat(scenes)


def second_sparse_encoder(sp):
    """SECOND's SparseEncoder (mmdet3d 1.4, configs/_base_/models/
    second_hv_secfpn_kitti.py) built from ``sp``'s layers: conv-norm-act blocks with
    the same channels, paddings, strides and indice keys; returns (module, forward)."""
    from torch import nn

    def block(conv):
        return sp.SparseSequential(conv, nn.BatchNorm1d(conv.out_channels, eps=1e-3,
                                                        momentum=0.01), nn.ReLU())

    def subm(cin, cout, key):
        return block(sp.SubMConv3d(cin, cout, 3, padding=1, bias=False, indice_key=key))

    def down(cin, cout, padding, key):
        return block(sp.SparseConv3d(cin, cout, 3, stride=2, padding=padding, bias=False,
                                     indice_key=key))

    layers = nn.ModuleList([
        subm(4, 16, "subm1"),
        sp.SparseSequential(subm(16, 16, "subm1")),
        sp.SparseSequential(down(16, 32, 1, "spconv2"), subm(32, 32, "subm2"),
                            subm(32, 32, "subm2")),
        sp.SparseSequential(down(32, 64, 1, "spconv3"), subm(64, 64, "subm3"),
                            subm(64, 64, "subm3")),
        sp.SparseSequential(down(64, 64, (0, 1, 1), "spconv4"), subm(64, 64, "subm4"),
                            subm(64, 64, "subm4")),
        block(sp.SparseConv3d(64, 128, (3, 1, 1), stride=(2, 1, 1), padding=0, bias=False,
                              indice_key="spconv_down2")),
    ])

    def forward(features, sites, shape, batch_size):
        x = sp.SparseConvTensor(features, sites, list(shape), batch_size)
        for layer in layers:
            x = layer(x)
        dense = x.dense()
        n, c, d, h, w = dense.shape
        return dense.view(n, c * d, h, w)
    return layers, forward


def _by_site(tensor, shape):
    """A sparse tensor's features ordered by site (spconv numbers its output sites in
    its own order), for comparing two implementations."""
    keys = tensor.indices[:, 0].long()
    for axis, size in enumerate(shape):
        keys = keys * size + tensor.indices[:, axis + 1].long()
    order = torch.argsort(keys)
    return keys[order], tensor.features[order]


def _relative(actual, expected) -> float:
    actual, expected = actual.detach(), expected.detach()
    return float((actual - expected).abs().max() / expected.abs().max().clamp(min=1e-12))


def _norm_relative(actual, expected) -> float:
    actual, expected = actual.detach(), expected.detach()
    return float((actual - expected).norm() / expected.norm().clamp(min=1e-12))


def spconv_cases(stand_in, real, shape):
    """(name, stand-in step, real step, check) per layer type: a step runs forward
    (``backward=False``) or forward and backward on fresh tensors (pairs included); the
    check returns the worst relative difference of outputs and gradients."""
    sites = second_scene_batch(shape)
    generator = torch.Generator().manual_seed(0)
    size = f"{'x'.join(map(str, shape))}, 2 scenes, {len(sites)} voxels"
    cases = []

    def layer_pair(make):
        mine, theirs = make(stand_in), make(real)
        theirs.load_state_dict(mine.state_dict())
        return mine, theirs

    def conv_case(name, make, channels, before=None):
        mine, theirs = layer_pair(make)
        base = torch.randn(len(sites), channels, generator=generator)
        prepared = {}
        if before is not None:          # the inverse conv runs the pairs of a conv
            first_mine, first_theirs = layer_pair(before)
            for sp, first in ((stand_in, first_mine), (real, first_theirs)):
                # on one thread: spconv's CPU kernels race on more, and its inverse
                # conv would start from wrong features
                with torch.no_grad(), _threads(1):
                    prepared[sp] = first(sp.SparseConvTensor(base, sites, shape, 2))

        def step(sp, layer, backward):
            if before is None:
                features = base.clone().requires_grad_(backward)
                source = sp.SparseConvTensor(features, sites, shape, 2)
            else:
                down = prepared[sp]
                features = down.features.detach().clone().requires_grad_(backward)
                source = down.replace_feature(features)
            if not backward:
                with torch.no_grad():
                    return layer(source), features
            layer.zero_grad()
            out = layer(source)
            (out.features * out.features).sum().backward()
            return out, features

        def check(reference_threads=None):
            out_mine, in_mine = step(stand_in, mine, True)
            with _threads(reference_threads):
                out_theirs, in_theirs = step(real, theirs, True)
            keys_mine, values_mine = _by_site(out_mine, out_mine.spatial_shape)
            keys_theirs, values_theirs = _by_site(out_theirs, out_theirs.spatial_shape)
            if not torch.equal(keys_mine, keys_theirs):
                return float("inf"), "the output sites differ"
            # the inputs of the inverse conv are each implementation's conv outputs,
            # in its own site order
            grad_mine, grad_theirs = in_mine.grad, in_theirs.grad
            if before is not None:
                grad_mine = _by_site(prepared[stand_in].replace_feature(grad_mine),
                                     prepared[stand_in].spatial_shape)[1]
                grad_theirs = _by_site(prepared[real].replace_feature(grad_theirs),
                                       prepared[real].spatial_shape)[1]
            difference = max(_relative(values_mine, values_theirs),
                             _relative(mine.weight.grad, theirs.weight.grad),
                             _relative(grad_mine, grad_theirs))
            return difference, f"agree to {difference:.1g}"
        cases.append((f"{name} [{size}]", lambda backward: step(stand_in, mine, backward),
                      lambda backward: step(real, theirs, backward), check))

    conv_case("SubMConv3d 16->16 k3", lambda sp: sp.SubMConv3d(
        16, 16, 3, padding=1, bias=False, indice_key="subm1"), 16)
    conv_case("SparseConv3d 16->32 k3 s2", lambda sp: sp.SparseConv3d(
        16, 32, 3, stride=2, padding=1, bias=False, indice_key="spconv2"), 16)
    conv_case("SparseInverseConv3d 32->16 k3", lambda sp: sp.SparseInverseConv3d(
        32, 16, 3, indice_key="spconv2", bias=False), 16,
        before=lambda sp: sp.SparseConv3d(16, 32, 3, stride=2, padding=1, bias=False,
                                          indice_key="spconv2"))

    (mine, mine_forward), (theirs, theirs_forward), (exact, exact_forward) = (
        second_sparse_encoder(stand_in), second_sparse_encoder(real),
        second_sparse_encoder(stand_in))
    theirs.load_state_dict(mine.state_dict())
    exact.load_state_dict(mine.state_dict())
    exact.double()
    voxels = torch.randn(len(sites), 4, generator=generator)

    def encoder_step(layers, forward, backward):
        features = voxels.to(next(layers.parameters()).dtype).requires_grad_(backward)
        layers.train()
        if not backward:
            with torch.no_grad():
                return forward(features, sites, shape, 2), features
        layers.zero_grad()
        out = forward(features, sites, shape, 2)
        (out * out).sum().backward()
        return out, features

    def encoder_check(reference_threads=None):
        out_mine, in_mine = encoder_step(mine, mine_forward, True)
        with _threads(reference_threads):
            out_theirs, in_theirs = encoder_step(theirs, theirs_forward, True)
        encoder_step(exact, exact_forward, True)
        difference = max(_relative(out_mine, out_theirs),
                         _relative(in_mine.grad, in_theirs.grad))
        # The parameters' gradients sum over every pair of a layer, and through 14
        # conv-norm-ReLU layers float32 drifts a few percent from a float64 run (a ReLU
        # flips near 0), spconv as much as the stand-in: the stand-in's must be no
        # further from that run than spconv's (or within the tolerance), in norm.
        mine_error, theirs_error = (
            max(_norm_relative(mine_weight.grad, weight.grad.float())
                for mine_weight, weight in zip(layers.parameters(), exact.parameters()))
            for layers in (mine, theirs))
        note = (f"agree to {difference:.1g}; parameter grads vs float64: stand-in "
                f"{mine_error:.1g}, spconv {theirs_error:.1g}")
        if mine_error > max(WEIGHT_GRAD_TOLERANCE, theirs_error):
            return float("inf"), note
        return difference, note
    cases.append((f"SECOND SparseEncoder [{size}]",
                  lambda backward: encoder_step(mine, mine_forward, backward),
                  lambda backward: encoder_step(theirs, theirs_forward, backward),
                  encoder_check))
    return cases


#: Largest relative difference between the stand-in and spconv taken as agreement
#: (float32 sums in another order, through up to 14 layers and batch norms).
SPCONV_TOLERANCE = 1e-3
#: Largest relative difference (in norm) of a parameter's gradient from a float64 run
#: of the encoder.
WEIGHT_GRAD_TOLERANCE = 1e-3


def spconv_rows(quick: bool, threads: Sequence[int] = (1,)) -> List[Row]:
    """The stand-in against real spconv's CPU build, per layer type and for SECOND's
    SparseEncoder, forward and forward+backward: same weights, same inputs, the
    numerics checked first (a disagreement is reported instead of a time).

    spconv's CPU build races on more than one thread (its results change from run to
    run), so there the stand-in is checked against spconv on one thread, and the note
    says how far spconv's own result is; the times are compared all the same."""
    stand_in, real = _spconv_pair()
    shape = [41, 400, 352] if quick else [41, 1600, 1408]
    rows: List[Row] = []
    for count in threads:
        # more rounds on more threads: their per-round ratios spread wider (the workers'
        # spin depends on when the OS runs them)
        repetitions = 3 if quick else 7 if count == 1 else 11
        torch.set_num_threads(count)
        for name, mine, theirs, check in spconv_cases(stand_in, real, shape):
            difference, agreement = check(1)
            if count > 1:
                own, _ = check()
                agreement += (f" with spconv on 1 thread; spconv's own {count}-thread "
                              f"result {'agrees' if own <= SPCONV_TOLERANCE else 'is off'}"
                              f" to {own:.1g}")
            if not difference <= SPCONV_TOLERANCE:
                rows.append(["spconv", f"{name}, {count} thread(s)", None,
                             f"spconv 2.3.8 CPU disagrees: {agreement}", None])
                continue
            for backward in (False, True):
                mine_ms, theirs_ms, ratio, measure = paired_ms(
                    lambda step=mine, backward=backward: step(backward),
                    lambda step=theirs, backward=backward: step(backward), repetitions,
                    count)
                rows.append(["spconv", f"{name}, {'fwd+bwd' if backward else 'fwd'}, "
                             f"{count} thread(s)", mine_ms,
                             f"spconv 2.3.8 CPU ({agreement}; {measure})", theirs_ms, ratio])
    torch.set_num_threads(1)
    return rows


class _threads:
    """Within the block, torch runs on ``count`` threads (None: unchanged)."""

    def __init__(self, count: Optional[int]) -> None:
        self.count = count

    def __enter__(self) -> None:
        self.before = torch.get_num_threads()
        if self.count is not None:
            torch.set_num_threads(self.count)

    def __exit__(self, *exc_info: object) -> None:
        torch.set_num_threads(self.before)


#: Longer than an OpenMP worker spins after a parallel region before it sleeps
#: (libgomp's default of 300,000 spins: about 8.6 ms on this machine, measured), so
#: that after this long idle the workers of the step before are asleep.
SETTLE_SECONDS = 0.02


def paired_ms(first: Callable[[], object], second: Callable[[], object],
              repetitions: int, threads: int = 1) -> "tuple[float, float, float, str]":
    """(median ms of ``first``, of ``second``, median of the per-round ratios, what was
    measured): the two steps run back to back each round, in alternating order, after
    two warm-up calls of each, so that a shared machine's load falls on both alike.
    The clock is the process's CPU time, that of every thread it runs on ``threads``
    (what a step costs, whatever the machine's load makes it wait: on a shared 2-core
    machine the wall time of a two-thread step is mostly how long one thread waited for
    the other). The note adds the median wall times.

    On more than one thread each step starts with idle workers: an OpenMP worker spins
    for several ms after every parallel region (CPU time), so with one step right
    after the other, the spin after the first step's last region was charged to the
    second, the stand-in's tail to spconv in one round and spconv's to the stand-in in
    the next: per-round ratios of steps of 5-50 ms swung by tens of percent. Now each
    step starts after :data:`SETTLE_SECONDS` idle and its clock stops when it returns:
    neither side pays the other's tail. (Keeping the clock running through a sleep
    after the step, to charge each its own tail, spread the ratios several-fold on a
    loaded machine: a sleeping process comes back to a busy CPU.)"""
    clock = time.process_time
    settle = SETTLE_SECONDS if threads > 1 else 0.0
    for step in (first, second, first, second):
        step()
    times: "tuple[List[float], List[float]]" = ([], [])
    walls: "tuple[List[float], List[float]]" = ([], [])
    for round_index in range(repetitions):
        order = ((first, 0), (second, 1)) if round_index % 2 == 0 else \
            ((second, 1), (first, 0))
        for step, bucket in order:
            if settle:
                time.sleep(settle)
            started, wall_started = clock(), time.perf_counter()
            step()
            times[bucket].append((clock() - started) * 1e3)
            walls[bucket].append((time.perf_counter() - wall_started) * 1e3)
    ratios = [mine / theirs for mine, theirs in zip(*times)]
    measure = (f"median of {repetitions} paired ratios of CPU time"
               + (" (both threads, from idle workers)" if threads == 2 else
                  f" ({threads} threads, from idle workers)" if threads > 2 else "")
               + f"; wall {statistics.median(walls[0]):.1f} vs "
               f"{statistics.median(walls[1]):.1f} ms")
    return (statistics.median(times[0]), statistics.median(times[1]),
            statistics.median(ratios), measure)


SECTIONS: Dict[str, Callable[[bool], List[Row]]] = {"density": density_rows,
                                                     "encoder": encoder_rows,
                                                     "spconv": spconv_rows}


#: The stand-in may take at most this multiple of spconv's time (issue 35: on a par).
SPCONV_BUDGET = 1.0


def run(quick: bool) -> List[Dict[str, Any]]:
    """Rows for ``benchmarks/run.py``, measured in fresh interpreters (torch, mmcv and
    mmdet3d never load into the runner): the stack's for the dense baselines, and one
    with real spconv (benchmarks/environment.py installs it beside the stack where its
    CPU build installs) for the comparison with spconv, on one thread and two (one
    with ``quick``)."""
    rows = [_table_row(row) for row in _measured(sys.executable,
                                                 ["--only", "density,encoder"], quick)]
    from benchmarks.environment import spconv_interpreter
    python, why_not = spconv_interpreter()
    if python is None:
        return rows + [{"name": "stand-in vs spconv: not measured", "value": None,
                        "unit": "ms", "verdict": "skipped", "note": why_not}]
    # quick (CI): one thread only; two threads measure nothing there but spconv's
    # wrong results and a shared machine's waits
    threads = "1" if quick else "1,2"
    return rows + [_table_row(row) for row in _measured(
        str(python), ["--only", "spconv", "--threads", threads], quick)]


def _measured(python: str, arguments: List[str], quick: bool) -> List[Row]:
    from benchmarks.harness import process_environment
    command = [python, os.path.abspath(__file__), "--json", *arguments] + (
        ["--quick"] if quick else [])
    # (without PYTHONPATH: the spconv venv's lazypatch is its copy of this checkout's)
    output = subprocess.run(command, capture_output=True, text=True, check=True,
                            cwd=ROOT, env=process_environment()).stdout
    return json.loads(output.splitlines()[-1])


def _table_row(row: Row) -> Dict[str, Any]:
    section, case, sparse_ms, baseline_name, baseline_ms = row[:5]
    # a row of the spconv section carries its median of paired ratios
    ratio = row[5] if len(row) > 5 else (
        sparse_ms / baseline_ms if sparse_ms and baseline_ms else None)
    table: Dict[str, Any] = {
        "name": case, "value": sparse_ms, "unit": "ms", "baseline": baseline_ms,
        "ratio": ratio, "note": f"baseline: {baseline_name}"}
    if section == "spconv":
        table["budget"] = f"ratio ≤ {SPCONV_BUDGET:.1f} (spconv)"
        if sparse_ms is None:           # the numerics disagree: no time was compared
            table["verdict"] = "skipped"
        else:
            table["verdict"] = "met" if table["ratio"] <= SPCONV_BUDGET else "missed"
    return table


def _refresh_copied_lazypatch() -> None:
    """In the spconv venv, whose lazypatch is a copy of a checkout (benchmarks/environment.py
    spconv_interpreter), copy this checkout's again first: run by hand after a change, the
    script measured the copy an earlier ``run.py`` left there."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.find_spec("lazypatch")
    package = Path(spec.origin).parent if spec and spec.origin else None
    if package is None or package.parent == Path(ROOT) or not (package / "registry").is_dir():
        return   # this checkout itself, or an editable install (registry/ mapped, not copied)
    # ROOT on the path only for this import: left there, it would put the checkout's
    # lazypatch (no registry/ inside it) before the copy
    sys.path.insert(0, ROOT)
    try:
        from benchmarks.environment import copy_lazypatch
    finally:
        sys.path.remove(ROOT)
    copy_lazypatch(package.parent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON line")
    parser.add_argument("--only", default="", help=f"sections: {', '.join(SECTIONS)}")
    parser.add_argument("--threads", default="1",
                        help="torch thread counts for the spconv section, e.g. 1,2 "
                             "(the others run on one thread)")
    args = parser.parse_args()
    _refresh_copied_lazypatch()
    _load_stack()
    torch.set_num_threads(1)
    chosen = [name for name in SECTIONS if not args.only or name in args.only.split(",")]
    threads = [int(count) for count in args.threads.split(",")]
    rows: List[Row] = []
    for name in chosen:
        if name == "spconv":
            if real_spconv_installed():
                rows += spconv_rows(args.quick, threads)
            elif args.only:
                raise SystemExit("the spconv section needs real spconv in this interpreter: "
                                 "pip install -r requirements/bench-spconv.txt in a venv of "
                                 "its own (benchmarks/environment.py spconv_interpreter)")
        else:
            rows += SECTIONS[name](args.quick)
    if args.json:
        print(json.dumps(rows))
        return
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}\n")
    print("| case | sparse (ms) | baseline | baseline (ms) | sparse / baseline |")
    print("|---|---:|---|---:|---:|")
    for row in rows:
        table = _table_row(row)
        case, sparse_ms, baseline_name, baseline_ms = row[1:5]
        ratio = f"{table['ratio']:.3f}" if table["ratio"] else "-"
        baseline = f"{baseline_ms:.1f}" if baseline_ms else "-"
        sparse = f"{sparse_ms:.1f}" if sparse_ms else "-"
        print(f"| {case} | {sparse} | {baseline_name} | {baseline} | {ratio} |")


if __name__ == "__main__":
    main()

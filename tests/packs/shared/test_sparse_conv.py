"""Sparse convolution of the pure-PyTorch ``mmcv._ext`` against dense PyTorch.

Property: for random sparse tensors (2-D and 3-D, batch, channels, kernel,
stride, padding, dilation drawn by hypothesis), a dense ``conv{2,3}d`` /
``conv_transpose{2,3}d`` / ``max_pool{2,3}d`` on the scattered tensor gives the
sparse result at the active sites, and the gradients of the features and the
weights agree. The sparse side runs through mmcv's own Python
(``mmcv.ops.sparse_ops.get_indice_pairs`` and the autograd Functions of
``sparse_functional``), so the ext kernels are called exactly as mmcv calls
them. Then mmcv's modules (``SparseConvTensor``, ``SubMConv3d``,
``SparseConv3d``, ``SparseInverseConv3d``, ``SparseMaxPool3d``,
``SparseSequential``, ``ToDense``) run end to end against the same dense chain.

Profiles (``LAZYPATCH_HYPOTHESIS_PROFILE``): ``ci`` (default) runs a fixed,
derandomized number of examples; ``dev`` ten times more, randomized.
"""
from __future__ import annotations

import os
import sys
from typing import List, Sequence

import mmcv  # noqa: F401  (the real mmcv-lite: requirements/stack.txt)
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

PROFILE_VARIABLE = "LAZYPATCH_HYPOTHESIS_PROFILE"
EXAMPLES = {"conv": 60, "pool": 30}
ATOL, RTOL = 1e-5, 1e-4


def examples(variant: str) -> settings:
    profile = os.environ.get(PROFILE_VARIABLE, "ci")
    if profile not in ("ci", "dev"):
        raise SystemExit(f"{PROFILE_VARIABLE}={profile!r}: use 'ci' or 'dev'")
    count = EXAMPLES[variant] * (10 if profile == "dev" else 1)
    return settings(max_examples=count, derandomize=profile == "ci", deadline=None,
                    database=None, suppress_health_check=list(HealthCheck))


# ``ops``: mmcv.ops against the pure-PyTorch mmcv._ext (tests/conftest.py).

@pytest.fixture(scope="module")
def sparse(ops):
    """mmcv's sparse_ops and sparse_functional, bound to the provided ext."""
    return sys.modules["mmcv.ops.sparse_ops"], sys.modules["mmcv.ops.sparse_functional"]


# ---------------------------------------------------------------- dense side

DENSE_CONV = {2: F.conv2d, 3: F.conv3d}
DENSE_TRANSPOSED = {2: F.conv_transpose2d, 3: F.conv_transpose3d}
DENSE_MAX_POOL = {2: F.max_pool2d, 3: F.max_pool3d}


def scatter_dense(indices: torch.Tensor, features: torch.Tensor, batch: int,
                  shape: Sequence[int], fill: float = 0.0) -> torch.Tensor:
    """(B, C, *shape) tensor holding ``features`` at ``indices``, ``fill``
    elsewhere (differentiable in ``features``), in standard strides: torch 2.13's
    conv_transpose3d gives wrong input gradients for a one-channel tensor whose
    strides also read as channels-last (what ``movedim`` leaves)."""
    dense = features.new_full((batch, *shape, features.shape[1]), fill)
    dense = dense.index_put(tuple(indices.long().t()), features)
    return dense.movedim(-1, 1).clone(memory_format=torch.contiguous_format)


def at_sites(dense: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """(N, C) values of a (B, C, *shape) tensor at ``indices``."""
    return dense.movedim(1, -1)[tuple(indices.long().t())]


def torch_layout(weight: torch.Tensor, ndim: int, transposed: bool) -> torch.Tensor:
    """mmcv's (*kernel, C_in, C_out) weight as torch's conv (C_out, C_in, *kernel)
    or conv_transpose (C_in, C_out, *kernel) weight."""
    channels = (ndim + 1, ndim) if not transposed else (ndim, ndim + 1)
    return weight.permute(*channels, *range(ndim)).contiguous()


def conv_output_size(size, kernel, stride, padding, dilation) -> List[int]:
    return [(s + 2 * p - d * (k - 1) - 1) // t + 1
            for s, k, t, p, d in zip(size, kernel, stride, padding, dilation)]


# ---------------------------------------------------------------- random cases

@st.composite
def sparse_inputs(draw, max_size: int = 7):
    ndim = draw(st.sampled_from([2, 3]))
    batch = draw(st.integers(1, 2))
    shape = [draw(st.integers(1, max_size)) for _ in range(ndim)]
    density = draw(st.sampled_from([0.05, 0.2, 0.5, 1.0]))
    seed = draw(st.integers(0, 2 ** 16))
    generator = torch.Generator().manual_seed(seed)
    active = torch.rand(batch, *shape, generator=generator) < density
    active.view(-1)[0] = True     # an empty cloud has its own test
    indices = active.nonzero().int()
    channels = draw(st.integers(1, 4))
    features = torch.randn(indices.shape[0], channels, generator=generator)
    return ndim, batch, shape, indices, features, generator


@st.composite
def geometries(draw, ndim: int):
    """Per-axis kernel, stride, padding, dilation; stride or dilation is 1 per
    axis (mmcv asserts it)."""
    kernel, stride, padding, dilation = [], [], [], []
    for _ in range(ndim):
        k = draw(st.integers(1, 3))
        s = draw(st.integers(1, 2))
        d = 1 if s > 1 else draw(st.integers(1, 2))
        kernel.append(k)
        stride.append(s)
        dilation.append(d)
        padding.append(draw(st.integers(0, k // 2)))
    return kernel, stride, padding, dilation


def backward_pair(sparse_out, dense_out, inputs, generator):
    """Gradients of the same random linear function of both outputs."""
    upstream = torch.randn(sparse_out.shape, generator=generator)
    sparse_grads = torch.autograd.grad((sparse_out * upstream).sum(), inputs,
                                       allow_unused=True)
    dense_grads = torch.autograd.grad((dense_out * upstream).sum(), inputs)
    return sparse_grads, dense_grads


def assert_close(actual, expected):
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)


# ---------------------------------------------------------------- properties

@pytest.fixture
def lookup(sparse, monkeypatch):
    """Choose how pairs find their sites: a direct-address table (small grids) or,
    above TABLE_SITES (such as SECOND's full input grid), a hash table of the input
    sites for submanifold pairs and sorted keys for the output sites of the others;
    and whether candidate keys are broadcast or gathered (above BROADCAST_KEYS)."""
    kernels = sys.modules[sparse[0].ext_module.indice_conv_forward.__module__]

    def choose(table: bool, broadcast: bool) -> None:
        monkeypatch.setattr(kernels, "TABLE_SITES", 1 << 24 if table else 0)
        monkeypatch.setattr(kernels, "BROADCAST_KEYS", 1 << 23 if broadcast else 0)
    return choose


@examples("conv")
@given(case=sparse_inputs(), data=st.data(),
       mode=st.sampled_from(["regular", "subm", "transposed", "inverse"]),
       table=st.booleans(), broadcast=st.booleans())
def test_sparse_conv_equals_dense_conv_at_active_sites_values_and_gradients(
        sparse, lookup, case, data, mode, table, broadcast):
    lookup(table, broadcast)
    ops, functional = sparse
    ndim, batch, shape, indices, features, generator = case
    kernel, stride, padding, dilation = data.draw(geometries(ndim))
    if mode == "subm":
        stride, dilation = [1] * ndim, [1] * ndim
    out_channels = data.draw(st.integers(1, 4))
    transposed = mode == "transposed"
    in_channels = features.shape[1] if mode != "inverse" else out_channels
    weight = torch.randn(*kernel, in_channels, out_channels, generator=generator)
    if mode in ("regular", "inverse"):
        assume(min(conv_output_size(shape, kernel, stride, padding, dilation)) >= 1)
    if transposed:
        assume(min(ops.get_deconv_output_size(shape, kernel, stride, padding,
                                              dilation, [0] * ndim)) >= 1)
    out_ids, pairs, pair_num = ops.get_indice_pairs(
        indices, batch, shape, kernel, stride, padding, dilation, 0,
        subm=mode == "subm", transpose=transposed)
    assert pairs.shape == (len(weight.reshape(-1, in_channels, out_channels)), 2,
                           indices.shape[0])
    assert int(pair_num.sum()) == int((pairs[:, 0] >= 0).sum())

    if mode == "inverse":
        # The inverse of a regular conv reads its pairs backwards: from the
        # conv's output sites (random features here) back to its input sites.
        down = torch.randn(out_ids.shape[0], in_channels, generator=generator)
        down.requires_grad_(True)
        weight.requires_grad_(True)
        sparse_out = functional.indice_inverse_conv(down, weight, pairs, pair_num,
                                                    indices.shape[0])
        down_shape = conv_output_size(shape, kernel, stride, padding, dilation)
        restore = [s - ((o - 1) * t - 2 * p + d * (k - 1) + 1) for s, o, k, t, p, d in
                   zip(shape, down_shape, kernel, stride, padding, dilation)]
        dense = DENSE_TRANSPOSED[ndim](
            scatter_dense(out_ids, down, batch, down_shape),
            torch_layout(weight, ndim, True), stride=stride, padding=padding,
            dilation=dilation, output_padding=restore)
        dense_out = at_sites(dense, indices)
        leaves = (down, weight)
    else:
        features.requires_grad_(True)
        weight.requires_grad_(True)
        apply = {"regular": functional.indice_conv, "subm": functional.indice_subm_conv,
                 "transposed": functional.indice_conv}[mode]
        sparse_out = apply(features, weight, pairs, pair_num, out_ids.shape[0])
        dense_in = scatter_dense(indices, features, batch, shape)
        if transposed:
            dense = DENSE_TRANSPOSED[ndim](dense_in, torch_layout(weight, ndim, True),
                                           stride=stride, padding=padding,
                                           dilation=dilation)
            out_shape = ops.get_deconv_output_size(shape, kernel, stride, padding,
                                                   dilation, [0] * ndim)
            # mmcv's transposed output size leaves dilation out: crop to it.
            dense = dense[(slice(None), slice(None), *(slice(0, s) for s in out_shape))]
        elif mode == "subm":
            dense = DENSE_CONV[ndim](dense_in, torch_layout(weight, ndim, False),
                                     padding=[k // 2 for k in kernel])
        else:
            dense = DENSE_CONV[ndim](dense_in, torch_layout(weight, ndim, False),
                                     stride=stride, padding=padding, dilation=dilation)
        dense_out = at_sites(dense, out_ids)
        leaves = (features, weight)
        if mode != "subm":
            # Every output site the dense conv reaches is an active site.
            reached = scatter_dense(out_ids, torch.ones(len(out_ids), 1), batch,
                                    dense.shape[2:])
            assert float(dense.detach().abs().sum()) == pytest.approx(
                float(dense_out.detach().abs().sum()), rel=1e-4, abs=1e-4)
            assert int(reached.sum()) == len(out_ids)
    assert_close(sparse_out.detach(), dense_out.detach())
    sparse_grads, dense_grads = backward_pair(sparse_out, dense_out, leaves, generator)
    for actual, expected in zip(sparse_grads, dense_grads):
        assert_close(actual, expected)


@examples("pool")
@given(case=sparse_inputs(), data=st.data())
def test_sparse_max_pool_equals_dense_max_pool_clamped_at_zero(sparse, case, data):
    """mmcv's sparse max-pool starts from 0: the dense reference is max_pool over
    active sites only (-inf elsewhere), clamped at 0."""
    ops, functional = sparse
    ndim, batch, shape, indices, features, generator = case
    kernel, stride, padding, dilation = data.draw(geometries(ndim))
    assume(min(conv_output_size(shape, kernel, stride, padding, dilation)) >= 1)
    out_ids, pairs, pair_num = ops.get_indice_pairs(
        indices, batch, shape, kernel, stride, padding, dilation, 0)
    features.requires_grad_(True)
    sparse_out = functional.indice_maxpool(features, pairs, pair_num, out_ids.shape[0])
    dense_in = scatter_dense(indices, features, batch, shape, fill=float("-inf"))
    dense = DENSE_MAX_POOL[ndim](dense_in, kernel, stride, padding, dilation).clamp(min=0)
    dense_out = at_sites(dense, out_ids)
    assert_close(sparse_out.detach(), dense_out.detach())
    sparse_grads, dense_grads = backward_pair(sparse_out, dense_out, (features,),
                                              generator)
    assert_close(sparse_grads[0], dense_grads[0])


# ---------------------------------------------------------------- kernel contract

def test_pairs_layout_output_order_and_submanifold_geometry(sparse):
    ops, _ = sparse
    indices = torch.tensor([[1, 0, 0, 0], [0, 2, 2, 2], [0, 2, 2, 3], [0, 0, 0, 1]],
                           dtype=torch.int32)
    out_ids, pairs, num = ops.get_indice_pairs(indices, 2, [4, 4, 4], 3, 2, 1, 1, 0)
    assert pairs.dtype == num.dtype == out_ids.dtype == torch.int32
    keys = [tuple(row) for row in out_ids.tolist()]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    # Every pair satisfies pos(in) = pos(out) * stride - padding + offset.
    offsets = torch.cartesian_prod(*[torch.arange(3)] * 3)
    for k in range(27):
        for i, o in pairs[k, :, :int(num[k])].t().tolist():
            assert indices[i, 0] == out_ids[o, 0]
            assert (indices[i, 1:] == out_ids[o, 1:] * 2 - 1 + offsets[k]).all()
        assert (pairs[k, :, int(num[k]):] == -1).all()
    # Submanifold: outputs are the inputs; padding kernel // 2 whatever was asked,
    # and the centre offset pairs every site with itself.
    sub_ids, sub_pairs, sub_num = ops.get_indice_pairs(indices, 2, [4, 4, 4], 3, 1, 0, 1,
                                                       0, subm=True)
    assert sub_ids is indices
    assert sub_pairs[13].tolist() == [[0, 1, 2, 3]] * 2
    # (0,2,2,2) and (0,2,2,3) are neighbours along the last axis, in both directions:
    # offset 12 is (1,1,0), whose input lies one step before its output.
    assert sub_num.tolist() == [0] * 12 + [1, 4, 1] + [0] * 12
    assert sub_pairs[12, :, 0].tolist() == [1, 2] and sub_pairs[14, :, 0].tolist() == [2, 1]


def test_empty_input_and_the_grid_variant(sparse):
    ops, _ = sparse
    ext = ops.ext_module
    empty = torch.zeros((0, 4), dtype=torch.int32)
    out_ids, pairs, num = ops.get_indice_pairs(empty, 1, [5, 5, 5], 3, 2, 1, 1, 0)
    assert out_ids.shape == (0, 4) and pairs.shape == (27, 2, 0) and int(num.sum()) == 0
    features = torch.zeros((0, 2))
    assert ext.indice_conv_forward(features, torch.ones(3, 3, 3, 2, 5), pairs, num, 0,
                                   0, 0).shape == (0, 5)
    indices = torch.tensor([[0, 1, 1, 1], [0, 1, 2, 1]], dtype=torch.int32)
    grid = torch.full((5 * 5 * 5,), -1, dtype=torch.int32)
    from_grid = ops.get_indice_pairs(indices, 1, [5, 5, 5], 3, 1, 1, 1, 0, grid=grid)
    plain = ops.get_indice_pairs(indices, 1, [5, 5, 5], 3, 1, 1, 1, 0)
    for a, b in zip(from_grid, plain):
        assert torch.equal(a, b)
    assert (grid == -1).all()


def test_fused_conv_adds_the_bias(sparse):
    ops, _ = sparse
    ext = ops.ext_module
    generator = torch.Generator().manual_seed(3)
    indices = torch.tensor([[0, 1, 1, 1], [0, 1, 2, 1], [0, 3, 3, 3]], dtype=torch.int32)
    features = torch.randn(3, 2, generator=generator)
    weight = torch.randn(3, 3, 3, 2, 4, generator=generator)
    bias = torch.randn(4, generator=generator)
    _, pairs, num = ops.get_indice_pairs(indices, 1, [5, 5, 5], 3, 1, 1, 1, 0, subm=True)
    plain = ext.indice_conv_forward(features, weight, pairs, num, 3, 0, 1)
    fused = ext.fused_indice_conv_forward(features, weight, bias, pairs, num, 3, 0, 1)
    assert_close(fused, plain + bias)
    dense = F.conv3d(scatter_dense(indices, features, 1, [5, 5, 5]),
                     torch_layout(weight, 3, False), padding=1)
    assert_close(plain, at_sites(dense, indices))


# ---------------------------------------------------------------- mmcv modules

def test_mmcv_modules_end_to_end_against_the_dense_chain(ops):
    """SubMConv3d -> ReLU -> SparseConv3d (stride 2) -> SubMConv3d ->
    SparseInverseConv3d -> ToDense, built from mmcv.ops and run on a random
    cloud, equals the dense chain that masks every output to its active sites;
    so do the gradients of the input features and of every parameter."""
    torch.manual_seed(0)
    shape, batch = [9, 10, 8], 2
    active = torch.rand(batch, *shape) < 0.15
    indices = active.nonzero().int()
    features = torch.randn(len(indices), 3, requires_grad=True)
    net = ops.SparseSequential(
        ops.SubMConv3d(3, 8, 3, indice_key="subm1"), torch.nn.ReLU(),
        ops.SparseConv3d(8, 6, 3, stride=2, padding=1, indice_key="down1"),
        ops.SubMConv3d(6, 6, 3, indice_key="subm2"),
        ops.SparseInverseConv3d(6, 4, 3, indice_key="down1"),
        sys.modules["mmcv.ops.sparse_modules"].ToDense())
    out = net(ops.SparseConvTensor(features, indices, shape, batch))
    assert out.shape == (batch, 4, *shape)

    conv1, _, down, conv2, up, _ = net
    weight = lambda layer, transposed=False: torch_layout(  # noqa: E731
        layer.weight, 3, transposed)
    bias = lambda layer: layer.bias.view(1, -1, 1, 1, 1)  # noqa: E731
    mask = active[:, None].float()
    down_mask = (F.conv3d(mask, torch.ones(1, 1, 3, 3, 3), stride=2, padding=1) > 0).float()
    x = scatter_dense(indices, features, batch, shape)
    x = ((F.conv3d(x, weight(conv1), padding=1) + bias(conv1)) * mask).relu()
    x = (F.conv3d(x, weight(down), stride=2, padding=1) + bias(down)) * down_mask
    x = (F.conv3d(x, weight(conv2), padding=1) + bias(conv2)) * down_mask
    restore = [s - (2 * o - 1) for s, o in zip(shape, x.shape[2:])]
    x = (F.conv_transpose3d(x, weight(up, True), stride=2, padding=1,
                            output_padding=restore) + bias(up)) * mask
    assert_close(out, x)
    upstream = torch.randn(out.shape)
    leaves = [features, *net.parameters()]
    sparse_grads = torch.autograd.grad((out * upstream).sum(), leaves)
    dense_grads = torch.autograd.grad((x * upstream).sum(), leaves)
    for actual, expected in zip(sparse_grads, dense_grads):
        assert_close(actual, expected)


def test_mmcv_sparse_max_pool_module_and_registry_built_layers(ops):
    """SparseMaxPool3d on a SparseConvTensor, and the conv layers mmcv registers
    (built by name through mmcv.cnn.build_conv_layer, as mmdet3d does)."""
    from mmcv.cnn import build_conv_layer
    torch.manual_seed(1)
    shape = [6, 7, 5]
    active = torch.rand(1, *shape) < 0.3
    indices = active.nonzero().int()
    features = torch.rand(len(indices), 4) - 0.2
    pooled = ops.SparseMaxPool3d(2, stride=2)(
        ops.SparseConvTensor(features, indices, shape, 1))
    dense = F.max_pool3d(scatter_dense(indices, features, 1, shape, float("-inf")), 2, 2)
    assert pooled.spatial_shape == list(dense.shape[2:])
    assert_close(pooled.dense(), dense.clamp(min=0))
    conv = build_conv_layer(dict(type="SubMConv3d", indice_key="k"), 4, 2, 3, bias=False)
    assert type(conv) is ops.SubMConv3d
    out = conv(ops.SparseConvTensor(features, indices, shape, 1))
    expected = F.conv3d(scatter_dense(indices, features, 1, shape),
                        torch_layout(conv.weight, 3, False), padding=1)
    assert_close(out.features, at_sites(expected, indices))


# ---------------------------------------------------------------- the sites' hash table

@examples("pool")
@given(data=st.data(), colliding=st.booleans())
def test_key_table_finds_every_key_and_only_those(sparse, data, colliding):
    """The hash table behind submanifold pairs on large grids: every inserted key maps
    to its row, every other key to -1, also when keys share their low bits (so that
    they all start probing at one slot and the probe runs cross each other)."""
    kernels = sys.modules[sparse[0].ext_module.indice_conv_forward.__module__]
    count = data.draw(st.integers(1, 300))
    spread = 1 << 20 if colliding else 1
    keys = torch.tensor(data.draw(st.lists(st.integers(0, 5000), min_size=count,
                                           max_size=count, unique=True))) * spread
    absent = torch.tensor(data.draw(st.lists(st.integers(5001, 9000), max_size=200)),
                          dtype=torch.long) * spread
    table = kernels.KeyTable(keys)
    assert table.rows_of(keys).tolist() == list(range(count))
    assert table.rows_of(absent).tolist() == [-1] * len(absent)
    mixed = torch.cat([absent, keys.flip(0)])
    assert table.rows_of(mixed).tolist() == [-1] * len(absent) + list(range(count))[::-1]


# ---------------------------------------------------------------- row search, pair sums

@examples("pool")
@given(data=st.data())
def test_row_search_finds_each_tap_of_a_kernel_row_or_minus_one(sparse, data):
    """Submanifold neighbours on large grids: for every site and kernel row, each of the
    ``width`` consecutive keys below the row's highest one maps to its site's row, and
    only those (a dict of the keys is the reference), in input order or not."""
    kernels = sys.modules[sparse[0].ext_module.indice_conv_forward.__module__]
    row_search = sys.modules[kernels.row_neighbours.__module__]
    keys = data.draw(st.lists(st.integers(0, 400), min_size=1, max_size=120, unique=True))
    if data.draw(st.booleans()):
        keys.sort()
    width = data.draw(st.integers(1, 4))
    shifts = data.draw(st.lists(st.integers(-60, 60), min_size=1, max_size=5))
    # the keys just above each site's own, found without a search
    following = data.draw(st.integers(0, width))
    found = row_search.row_neighbours(torch.tensor(keys), shifts, width, following)
    row_of = {key: row for row, key in enumerate(keys)}
    expected = [[row_of.get(key + shift - tap, -1) for key in keys]
                for shift in shifts for tap in range(width)]
    expected += [[row_of.get(key + following - tap, -1) for key in keys]
                 for tap in range(following)]
    assert found.tolist() == expected


@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("chunk_pairs", [7, 1 << 17])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pair_sums_in_chunks_equal_a_scatter_add_and_its_gradients(sparse, monkeypatch,
                                                                    inverse, chunk_pairs,
                                                                    dtype):
    """The bag sums of a plan cut into several chunks (a small CHUNK_PAIRS) or one (whose
    gathered rows the backward reuses) give the scatter-add of every pair's product,
    forward and backward (autograd of the plain formulation is the reference), in
    float32 and bfloat16."""
    kernels = sys.modules[sparse[0].ext_module.indice_conv_forward.__module__]
    pair_sums = sys.modules[kernels.PairPlan.__module__]
    monkeypatch.setattr(pair_sums, "CHUNK_PAIRS", chunk_pairs)
    generator = torch.Generator().manual_seed(3)
    rows, volume = (40, 25), 5
    counts = [9, 0, 12, 4, 10]
    flat = torch.stack([torch.cat([torch.randperm(rows[0], generator=generator)[:count]
                                   for count in counts]),
                        torch.cat([torch.randperm(rows[1], generator=generator)[:count]
                                   for count in counts])])
    plan = pair_sums.PairPlan(flat, counts, rows, None)
    assert len(plan.chunks) > 2 if chunk_pairs == 7 else len(plan.chunks) == 1
    offsets = torch.repeat_interleave(torch.arange(volume), torch.tensor(counts))
    source, target = (1, 0) if inverse else (0, 1)
    features = torch.randn(rows[source], 3, generator=generator, requires_grad=True)
    weights = torch.randn(volume, 3, 2, generator=generator, requires_grad=True)
    products = torch.bmm(features[flat[source]][:, None], weights[offsets])[:, 0]
    expected = torch.zeros(rows[target], 2).index_add(0, flat[target], products)
    grad = torch.randn(rows[target], 2, generator=generator)
    expected_grads = torch.autograd.grad(expected, (features, weights), grad)
    with torch.no_grad():
        output, gathered = pair_sums.convolve(plan, features.to(dtype), weights.to(dtype),
                                              inverse, True)
        assert (gathered is None) == (chunk_pairs == 7)
        input_grad, weights_grad = pair_sums.convolve_backward(
            plan, features.to(dtype), weights.to(dtype), grad.to(dtype), inverse, gathered)
    assert output.dtype == input_grad.dtype == weights_grad.dtype == dtype
    tolerance = {} if dtype == torch.float32 else {"atol": 0.1, "rtol": 0.05}
    for actual, reference in ((output, expected), (input_grad, expected_grads[0]),
                              (weights_grad, expected_grads[1])):
        torch.testing.assert_close(actual.float(), reference.detach(),
                                   **(tolerance or {"atol": ATOL, "rtol": RTOL}))


def _pair_modules(sparse):
    """(sparse_conv, pair_sums, offset_batches) of the provided ext."""
    kernels = sys.modules[sparse[0].ext_module.indice_conv_forward.__module__]
    pair_sums = sys.modules[kernels.PairPlan.__module__]
    return kernels, pair_sums, sys.modules[pair_sums.OffsetBatches.__module__]


@examples("pool")
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=27),
       group_rows=st.sampled_from([8, 64, 1 << 14]))
def test_offset_batches_group_similar_counts_each_padded_to_the_largest(
        sparse, monkeypatch, sizes, group_rows):
    """Each group's offsets have at least 1 - PADDING of its largest pair count and at
    most GROUP_ROWS rows (or one offset); every pair has its own padded row in its
    offset's slot; the batched products equal one product per pair."""
    batches_module = _pair_modules(sparse)[2]
    monkeypatch.setattr(batches_module, "GROUP_ROWS", group_rows)
    offsets = list(range(len(sizes)))[::-1]       # any offset ids, here reversed
    batches = batches_module.OffsetBatches(offsets, sizes, torch.device("cpu"))
    slot_of = {}
    grouped = batches.weight_order.tolist()
    for first, count, rows in batches.groups:
        members = [offsets.index(offset) for offset in grouped[:count]]
        grouped = grouped[count:]
        assert rows == max(sizes[member] for member in members)
        assert all(sizes[member] >= (1 - batches_module.PADDING) * rows
                   for member in members)
        assert count == 1 or count * rows <= group_rows
        slot_of.update({member: first + slot * rows for slot, member in enumerate(members)})
    assert not grouped and sorted(slot_of) == list(range(len(sizes)))
    expected = [slot_of[member] + row for member, size in enumerate(sizes)
                for row in range(size)]
    assert batches.position.tolist() == expected
    assert batches.rows == sum(count * rows for _, count, rows in batches.groups)
    generator = torch.Generator().manual_seed(len(sizes))
    table = torch.randn(50, 3, generator=generator)
    pair_rows = torch.randint(0, 50, (sum(sizes),), generator=generator)
    padded = batches.padded(pair_rows)
    assert padded[batches.position].tolist() == pair_rows.tolist()
    weights = torch.randn(len(sizes), 3, 2, generator=generator)
    products = torch.empty(batches.rows, 2)
    batches.multiply(lambda first, stop: table[padded[first:stop]], weights, products)
    pair_offsets = torch.repeat_interleave(torch.tensor(offsets), torch.tensor(sizes))
    assert_close(products[batches.position],
                 torch.bmm(table[pair_rows][:, None], weights[pair_offsets])[:, 0])


@pytest.fixture
def torch_threads():
    """Set torch's thread count for the test, restored after it."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def _submanifold_reference(lists, features, weights, grad):
    """Output, input gradient and weight gradient of the plain scatter-add formulation
    of every pair of ``lists`` (autograd)."""
    features = features.detach().requires_grad_(True)
    weights = weights.detach().requires_grad_(True)
    products = torch.bmm(features[lists.row][:, None], weights[lists.offset_id])[:, 0]
    output = torch.zeros(features.shape[0], weights.shape[2]).index_add(
        0, lists.out_row, products)
    return (output.detach(), *torch.autograd.grad(output, (features, weights), grad))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("path", ["chosen", "offsets", "batches"])
@pytest.mark.parametrize("inverse", [False, True])
def test_convolve_by_offsets_or_in_batches_on_one_and_two_threads(
        sparse, monkeypatch, torch_threads, threads, path, inverse):
    """The thread count chooses the products' path (offset by offset on one thread, in
    padded batches on more); either path, on either thread count and with the plan cut
    in chunks, gives the scatter-add of every pair's product."""
    _, pair_sums, _ = _pair_modules(sparse)
    torch_threads(threads)
    monkeypatch.setattr(pair_sums, "CHUNK_PAIRS", 16)
    generator = torch.Generator().manual_seed(threads)
    rows, counts = (30, 20), [9, 8, 0, 12, 3, 10, 11, 1]
    flat = torch.stack([torch.cat([torch.randperm(rows[side], generator=generator)[:count]
                                   for count in counts]) for side in (0, 1)])
    plan = pair_sums.PairPlan(flat, counts, rows, None)
    assert len(plan.chunks) > 1
    if path == "chosen":
        assert pair_sums.batches_pay() == (threads > 1)
    else:
        monkeypatch.setattr(pair_sums, "batches_pay", lambda: path == "batches")
    source, target = (1, 0) if inverse else (0, 1)
    features = torch.randn(rows[source], 4, generator=generator)
    weights = torch.randn(len(counts), 4, 3, generator=generator)
    offsets = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))
    products = torch.bmm(features[flat[source]][:, None], weights[offsets])[:, 0]
    expected = torch.zeros(rows[target], 3).index_add(0, flat[target], products)
    output, gathered = pair_sums.convolve(plan, features, weights, inverse)
    assert gathered is None
    assert_close(output, expected)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("keep", [False, True])
def test_submanifold_convolution_and_gradients_on_one_and_two_threads(
        sparse, torch_threads, threads, keep):
    """A centred submanifold plan (identity offset, mirrored pairs), forward and backward,
    on one thread and two (the backward's input gradient runs the forward's products on
    the mirrored pairs), equals autograd of the plain formulation."""
    kernels, pair_sums, _ = _pair_modules(sparse)
    torch_threads(threads)
    generator = torch.Generator().manual_seed(7)
    active = torch.rand(2, 6, 7, 8, generator=generator) < 0.3
    indices = active.nonzero().int()
    lists = kernels.pair_lists(indices, 2, [6, 7, 8], [3, 3, 3], [1, 1, 1], [1, 1, 1],
                               [1, 1, 1], True, False)
    count = indices.shape[0]
    plan = kernels.plan_of_lists(lists, (count, count), True)
    assert plan.mirrored
    features = torch.randn(count, 5, generator=generator)
    weights = torch.randn(27, 5, 4, generator=generator)
    grad = torch.randn(count, 4, generator=generator)
    output, gathered = pair_sums.convolve(plan, features, weights, False, keep)
    assert (gathered is not None) == keep
    input_grad, weights_grad = pair_sums.convolve_backward(plan, features, weights, grad,
                                                           False, gathered)
    expected = _submanifold_reference(lists, features, weights, grad)
    for actual, reference in zip((output, input_grad, weights_grad), expected):
        assert_close(actual, reference)

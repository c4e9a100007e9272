"""Multi-scale deformable attention kernel against mmcv's own PyTorch version.

lazypatch's ``ms_deform_attn_forward`` / ``ms_deform_attn_backward`` (an
``embedding_bag`` forward and a hand-written backward) must give the values
and the three gradients of mmcv's ``multi_scale_deformable_attn_pytorch``
(``grid_sample`` under autograd), in float32 and float64, for points inside,
outside, exactly on pixel centres and on the borders of several levels of
different sizes. They are called through mmcv's own autograd Function, as
mmcv calls them.
"""
from __future__ import annotations

import gc
import importlib
import sys
import weakref
from typing import List, Sequence, Tuple

import mmcv  # noqa: F401  (the real mmcv-lite must be installed: requirements/stack.txt)
import pytest
import torch

try:
    from lazypatch.registry.shared.mmcv_ext import build_ext_module
except ImportError:
    from registry.shared.mmcv_ext import build_ext_module

msda = importlib.import_module(
    f"{sys.modules[build_ext_module.__module__].__name__}.msda")

#: Levels of different sizes and aspect ratios, one of a single pixel.
SHAPES = [(6, 4), (3, 5), (2, 2), (1, 1)]


@pytest.fixture(scope="module")
def mmcv_msda(ops):
    """(mmcv's autograd Function, mmcv's pytorch version), imported against the
    pure-PyTorch ``mmcv._ext`` (the ``ops`` fixture of tests/conftest.py)."""
    from mmcv.ops.multi_scale_deform_attn import (
        MultiScaleDeformableAttnFunction,
        multi_scale_deformable_attn_pytorch,
    )
    return MultiScaleDeformableAttnFunction, multi_scale_deformable_attn_pytorch


def level_starts(shapes: torch.Tensor) -> torch.Tensor:
    return torch.cat([shapes.new_zeros(1), (shapes[:, 0] * shapes[:, 1]).cumsum(0)[:-1]])


def make_inputs(dtype: torch.dtype, seed: int = 0, shapes: Sequence[Tuple[int, int]] = SHAPES,
                bs: int = 2, heads: int = 3, dim: int = 5, nq: int = 7, points: int = 3,
                spread: float = 1.6):
    """value, shapes, starts, locations, weights; locations reach ``spread / 2``
    beyond [0, 1]'s middle, so some points are outside every level."""
    g = torch.Generator().manual_seed(seed)
    shape_tensor = torch.tensor(shapes, dtype=torch.long)
    keys = int((shape_tensor[:, 0] * shape_tensor[:, 1]).sum())
    value = torch.randn(bs, keys, heads, dim, generator=g, dtype=dtype)
    locations = (torch.rand(bs, nq, heads, len(shapes), points, 2, generator=g,
                            dtype=dtype) - 0.5) * spread + 0.5
    weights = torch.rand(bs, nq, heads, len(shapes), points, generator=g, dtype=dtype)
    return value, shape_tensor, level_starts(shape_tensor), locations, weights


def special_locations(shapes: Sequence[Tuple[int, int]], dtype: torch.dtype) -> torch.Tensor:
    """(levels, n, 2): per level, x/y pairs on pixel centres, on the map's
    edges (pixel -1, -0.5, 0, size - 1, size - 0.5, size) and beyond."""
    columns = []
    for h, w in shapes:
        def along(size: int) -> List[float]:
            pixels = [-2.0, -1.0, -0.5, 0.0, 0.25, size - 1.0, size - 0.5,
                      float(size), size + 0.5] + [k + 0.0 for k in range(size)]
            # location = (pixel + 0.5) / size, the inverse of mmcv's mapping
            return [(p + 0.5) / size for p in pixels]
        xs, ys = along(w), along(h)
        columns.append([(x, y) for x in xs for y in ys])
    count = min(len(c) for c in columns)
    return torch.tensor([c[:count] for c in columns], dtype=dtype)


def outputs_and_gradients(function, value, locations, weights) -> List[torch.Tensor]:
    """[output, d value, d locations, d weights] for a fixed random grad_output."""
    leaves = [t.detach().clone().requires_grad_() for t in (value, locations, weights)]
    out = function(*leaves)
    grad_output = torch.randn(out.shape, generator=torch.Generator().manual_seed(99),
                              dtype=out.dtype)
    out.backward(grad_output)
    return [out.detach()] + [leaf.grad for leaf in leaves]


def assert_same_as_mmcv(mmcv_msda, value, shapes, starts, locations, weights) -> None:
    function, reference = mmcv_msda
    ours = outputs_and_gradients(
        lambda v, loc, a: function.apply(v, shapes, starts, loc, a, 64), value, locations, weights)
    theirs = outputs_and_gradients(lambda v, loc, a: reference(v, shapes, loc, a),
                                   value, locations, weights)
    # float32: the locations' gradient sums products of size, value and
    # weight in another order than grid_sample's backward.
    tolerance = {} if value.dtype == torch.float64 else dict(rtol=1e-4, atol=1e-4)
    for name, got, expected in zip(("output", "value", "locations", "weights"), ours, theirs):
        torch.testing.assert_close(got, expected, msg=lambda m, name=name: f"{name}: {m}",
                                   **tolerance)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_random_points_inside_and_outside_equal_mmcv(mmcv_msda, dtype):
    value, shapes, starts, locations, weights = make_inputs(dtype)
    inside = ((locations >= 0) & (locations <= 1)).all(-1)
    assert inside.any() and not inside.all()
    assert_same_as_mmcv(mmcv_msda, value, shapes, starts, locations, weights)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pixel_centres_and_borders_equal_mmcv(mmcv_msda, dtype):
    # On a pixel centre or an edge the bilinear sample is not differentiable:
    # both must pick the same cell, hence the same one-sided gradient.
    grid = special_locations(SHAPES, dtype)            # (levels, n, 2)
    bs, heads, nq = 2, 2, grid.shape[1]
    value, shapes, starts, _, weights = make_inputs(dtype, seed=3, bs=bs, heads=heads, nq=nq,
                                                    points=1)
    locations = grid.permute(1, 0, 2)[None, :, None, :, None, :].expand(
        bs, nq, heads, len(SHAPES), 1, 2).contiguous()
    assert_same_as_mmcv(mmcv_msda, value, shapes, starts, locations, weights)


@pytest.mark.parametrize("points", [3, 4])
def test_bag_sizes_with_and_without_a_power_of_two(mmcv_msda, points):
    # 4 corners x 4 levels x 4 points = 64 takes the shift, x 3 points the division.
    value, shapes, starts, locations, weights = make_inputs(torch.float64, seed=5,
                                                            points=points)
    assert_same_as_mmcv(mmcv_msda, value, shapes, starts, locations, weights)


@pytest.mark.parametrize("block", [1, 1 << 30])
def test_backward_in_blocks_of_any_size(mmcv_msda, monkeypatch, block):
    # 1: a bag (dot products) or 4 corners per row of value (value gradient)
    # at a time, the smallest blocks; 1 << 30: everything in one block.
    value, shapes, starts, locations, weights = make_inputs(torch.float64, seed=6, nq=11)
    monkeypatch.setattr(msda, "_BACKWARD_BLOCK", block)
    monkeypatch.setattr(msda, "_VALUE_BLOCK", block)
    assert_same_as_mmcv(mmcv_msda, value, shapes, starts, locations, weights)


def test_levels_not_stored_back_to_back(mmcv_msda):
    # The kernel reads each level at its start index, wherever it is; mmcv's
    # pytorch version needs them back to back, so it gets the packed copy.
    function, _ = mmcv_msda
    value, shapes, starts, locations, weights = make_inputs(torch.float64, seed=7)
    sizes = (shapes[:, 0] * shapes[:, 1]).tolist()
    gap = 2
    pieces, spaced_starts, at = [], [], 0
    for piece in value.split(sizes, dim=1):
        filler = torch.full_like(value[:, :gap], 1e3)
        pieces += [filler, piece]
        spaced_starts.append(at + gap)
        at += gap + piece.shape[1]
    spaced = torch.cat(pieces, 1).requires_grad_()
    out = function.apply(spaced, shapes, torch.tensor(spaced_starts), locations, weights, 64)
    out.square().sum().backward()
    packed = value.clone().requires_grad_()
    expected = function.apply(packed, shapes, starts, locations, weights, 64)
    expected.square().sum().backward()
    torch.testing.assert_close(out, expected)
    got_grad = torch.cat([spaced.grad[:, s:s + n] for s, n in zip(spaced_starts, sizes)], 1)
    torch.testing.assert_close(got_grad, packed.grad)
    assert not spaced.grad[:, :gap].any()       # rows no point reads get nothing


def test_gradcheck_float64(mmcv_msda):
    function, _ = mmcv_msda
    value, shapes, starts, locations, weights = make_inputs(torch.float64, seed=8, bs=1,
                                                            heads=2, dim=3, nq=2, points=2)
    inputs = tuple(t.requires_grad_() for t in (value, locations, weights))
    assert torch.autograd.gradcheck(
        lambda v, loc, a: function.apply(v, shapes, starts, loc, a, 64), inputs)


def test_backward_adds_into_the_buffers():
    # The ext contract (as the CUDA kernel): gradients are added, not written.
    value, shapes, starts, locations, weights = make_inputs(torch.float64, seed=9)
    grad_output = torch.randn(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3],
                              dtype=torch.float64)
    expected = msda.msda_backward(value, shapes, starts, locations, weights, grad_output)
    buffers = [torch.ones_like(t) for t in (value, locations, weights)]
    msda.ms_deform_attn_backward(value, shapes, starts, locations, weights, grad_output,
                                 *buffers)
    for buffer, grad in zip(buffers, expected):
        torch.testing.assert_close(buffer, grad + 1)


def test_forward_keeps_no_graph_alive(mmcv_msda):
    # The backward recomputes what it needs: once mmcv's Function (the only
    # holder of the saved inputs) is gone, the inputs go too.
    function, _ = mmcv_msda
    value, shapes, starts, locations, weights = make_inputs(torch.float32, seed=10)
    leaves = [t.requires_grad_() for t in (value, locations, weights)]
    out = function.apply(leaves[0], shapes, starts, leaves[1], leaves[2], 64)
    assert out.grad_fn is not None
    references = [weakref.ref(leaf) for leaf in leaves]
    del out, leaves, value, locations, weights
    gc.collect()
    assert all(reference() is None for reference in references)


def test_strided_inputs_equal_mmcv(mmcv_msda):
    # Slices of larger tensors, as a model's views may hand over.
    value, shapes, starts, locations, weights = make_inputs(torch.float64, seed=11)
    wide_locations = torch.cat([locations, locations.flip(-1)], -1)[..., :2]
    wide_weights = torch.stack([weights, weights], -1)[..., 0]
    assert not wide_locations.is_contiguous() and not wide_weights.is_contiguous()
    assert_same_as_mmcv(mmcv_msda, value, shapes, starts, wide_locations, wide_weights)


def test_no_queries(mmcv_msda):
    function, reference = mmcv_msda
    value, shapes, starts, locations, weights = make_inputs(torch.float64, seed=12, nq=0)
    value.requires_grad_()
    out = function.apply(value, shapes, starts, locations, weights, 64)
    assert out.shape == reference(value, shapes, locations, weights).shape == (2, 0, 15)
    out.sum().backward()
    assert value.grad is not None and not value.grad.any()


def test_nan_and_infinite_locations_give_nan_as_mmcv(mmcv_msda):
    function, reference = mmcv_msda
    value, shapes, starts, locations, weights = make_inputs(torch.float32, seed=13)
    locations[0, 0, 0, 0, 0, 0] = float("nan")
    locations[1, 2, 1, 1, 0, 1] = float("inf")
    locations[1, 3, 2, 2, 1, 0] = -float("inf")
    got = function.apply(value, shapes, starts, locations, weights, 64)
    expected = reference(value, shapes, locations, weights)
    assert got.isnan().any()
    torch.testing.assert_close(got, expected, equal_nan=True)

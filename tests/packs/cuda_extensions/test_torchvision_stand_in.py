"""The stand-in for torchvision's compiled operators (``cuda_extensions.torchvision``:
``registry/cuda_extensions/torchvision_stand_in.py`` and ``torchvision_ops.py``).

Three layers, each runnable where it can be:

* the kernels, in this process, with torch only: loop references written here, adjoint
  identities between every forward and its ``_*_backward`` operator, and ``gradcheck``
  of deformable convolution through its forward/backward pair;
* the kernels against torchvision's own compiled CPU operators, same inputs, forward and
  backward: runs where torchvision's ``_C`` loads in this interpreter (a venv with
  ``torch==2.14.1 torchvision==0.29.1``), skipped elsewhere;
* the patch in fresh interpreters: with a torchvision whose ``_C`` cannot load beside
  the installed torch (PyPI's ``torchvision==0.28.0`` beside the CPU ``torch==2.13.0``,
  as in the OpenMMLab 1.x venv) ``import torchvision`` works and ``torchvision.ops`` run
  and train; where ``_C`` loads the patch reports ``skipped`` and changes nothing. Each
  skips, saying which torchvision it needs, when the installed one is not of its kind.
"""

from __future__ import annotations

import importlib
import itertools
import subprocess
import sys

import pytest
import torch

try:
    ops = importlib.import_module("lazypatch.registry.cuda_extensions.torchvision_ops")
except ImportError:   # running from a checkout without the installed layout
    ops = importlib.import_module("registry.cuda_extensions.torchvision_ops")



@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: on a loaded shared machine a second one makes these small
    tensor operations many times slower, without changing a result."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _torchvision_state() -> str:
    """'loads', 'broken' (installed, its _C cannot load beside this torch) or 'absent',
    found in a fresh interpreter (a failed torchvision import cannot be retried here)."""
    code = ("import importlib.util, sys\n"
            "if importlib.util.find_spec('torchvision') is None: print('absent'); sys.exit()\n"
            "import torch\n"
            "try:\n    import torchvision\nexcept RuntimeError as error:\n"
            "    print('broken' if 'torchvision::' in str(error) else 'other'); sys.exit()\n"
            "print('loads' if torchvision.extension._has_ops() else 'broken')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    return (result.stdout.strip().splitlines() or ["other"])[-1]


_STATE = None


def torchvision_state() -> str:
    global _STATE
    if _STATE is None:
        _STATE = _torchvision_state()
    return _STATE


def needs_torchvision(kind: str) -> None:
    state = torchvision_state()
    if state != kind:
        how = {"broken": "PyPI's torchvision==0.28.0 beside torch==2.13.0 (CPU), e.g. the "
                         "OpenMMLab 1.x venv",
               "loads": "a venv with torch==2.14.1 and torchvision==0.29.1 (both load on "
                        "x86_64 without a GPU)"}[kind]
        pytest.skip(f"needs a torchvision whose compiled library "
                    f"{'cannot load' if kind == 'broken' else 'loads'} here ({state} in this "
                    f"interpreter): run this file with {how}")


def compiled():
    """torch.ops.torchvision of a torchvision whose compiled library loads here."""
    needs_torchvision("loads")
    import torchvision  # noqa: F401
    return torch.ops.torchvision


def random_boxes(count: int, generator: torch.Generator, dtype=torch.float64) -> torch.Tensor:
    corners = torch.rand(count, 2, generator=generator, dtype=dtype) * 200
    sizes = torch.rand(count, 2, generator=generator, dtype=dtype) * 60 + 1
    return torch.cat([corners, corners + sizes], 1)


def random_rois(count: int, batch: int, generator: torch.Generator) -> torch.Tensor:
    """Rois over a 20 x 24 map, some partly or wholly outside, one tiny, one empty."""
    start = torch.rand(count, 2, generator=generator, dtype=torch.float64) * 30 - 5
    size = torch.rand(count, 2, generator=generator, dtype=torch.float64) * 20
    index = torch.randint(0, batch, (count, 1), generator=generator).double()
    rois = torch.cat([index, start, start + size], 1)
    rois[0] = torch.tensor([0, 3, 3, 3.2, 3.1])
    rois[1] = torch.tensor([batch - 1, -10, -10, 50, 60])
    rois[2] = torch.tensor([0, 5, 5, 5, 5])
    return rois


# --------------------------------------------------------------- loop references

def loop_nms(boxes, scores, threshold):
    order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
    kept, suppressed = [], set()
    for position, i in enumerate(order):
        if i in suppressed:
            continue
        kept.append(i)
        for j in order[position + 1:]:
            xx1, yy1 = max(boxes[i][0], boxes[j][0]), max(boxes[i][1], boxes[j][1])
            xx2, yy2 = min(boxes[i][2], boxes[j][2]), min(boxes[i][3], boxes[j][3])
            inter = max(0.0, xx2 - xx1) * max(0.0, yy2 - yy1)
            area_i = (boxes[i][2] - boxes[i][0]) * (boxes[i][3] - boxes[i][1])
            area_j = (boxes[j][2] - boxes[j][0]) * (boxes[j][3] - boxes[j][1])
            if inter / (area_i + area_j - inter) > threshold:
                suppressed.add(j)
    return kept


def loop_bilinear(plane, y, x):
    """roi_align's interpolation of one point, as torchvision's kernel writes it."""
    height, width = plane.shape
    if not (-1.0 <= y <= height and -1.0 <= x <= width):
        return 0.0
    y, x = max(y, 0.0), max(x, 0.0)
    y_low, x_low = int(y), int(x)
    if y_low >= height - 1:
        y_low = y_high = height - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= width - 1:
        x_low = x_high = width - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - y_low, x - x_low
    hy, hx = 1 - ly, 1 - lx
    return (hy * hx * plane[y_low, x_low] + hy * lx * plane[y_low, x_high]
            + ly * hx * plane[y_high, x_low] + ly * lx * plane[y_high, x_high])


def loop_roi_align(features, rois, scale, pooled_h, pooled_w, ratio, aligned):
    import math
    out = torch.zeros(len(rois), features.size(1), pooled_h, pooled_w, dtype=features.dtype)
    offset = 0.5 if aligned else 0.0
    for k, (b, x1, y1, x2, y2) in enumerate(rois.tolist()):
        x1, y1, x2, y2 = (v * scale - offset for v in (x1, y1, x2, y2))
        roi_w, roi_h = x2 - x1, y2 - y1
        if not aligned:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / pooled_h, roi_w / pooled_w
        grid_h = ratio if ratio > 0 else math.ceil(roi_h / pooled_h)
        grid_w = ratio if ratio > 0 else math.ceil(roi_w / pooled_w)
        count = max(grid_h * grid_w, 1)
        for c in range(features.size(1)):
            plane = features[int(b), c].tolist()
            plane = torch.tensor(plane, dtype=features.dtype)
            for ph, pw in itertools.product(range(pooled_h), range(pooled_w)):
                total = 0.0
                for iy, ix in itertools.product(range(grid_h), range(grid_w)):
                    y = y1 + ph * bin_h + (iy + 0.5) * bin_h / grid_h
                    x = x1 + pw * bin_w + (ix + 0.5) * bin_w / grid_w
                    total += float(loop_bilinear(plane, y, x))
                out[k, c, ph, pw] = total / count
    return out


def test_nms_matches_the_greedy_loop_with_ties_and_every_threshold():
    generator = torch.Generator().manual_seed(0)
    for count in (0, 1, 40, 300):
        boxes = random_boxes(count, generator)
        scores = torch.rand(count, generator=generator, dtype=torch.float64)
        scores[: count // 3] = 0.5   # ties: the stable order decides
        for threshold in (0.0, 0.3, 0.7, 1.0):
            kept = ops.nms(boxes, scores, threshold)
            assert kept.dtype == torch.long
            assert kept.tolist() == loop_nms(boxes.tolist(), scores.tolist(), threshold)


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("ratio", [-1, 2])
def test_roi_align_matches_the_kernel_loop(aligned, ratio):
    generator = torch.Generator().manual_seed(1)
    features = torch.randn(2, 2, 20, 24, generator=generator, dtype=torch.float64)
    rois = random_rois(6, 2, generator)
    expected = loop_roi_align(features, rois, 0.5, 3, 2, ratio, aligned)
    torch.testing.assert_close(ops.roi_align(features, rois, 0.5, 3, 2, ratio, aligned),
                               expected, rtol=1e-12, atol=1e-12)


def adjoint_gap(forward, backward, shape, out_shape, generator):
    """<g, f(x)> - <f*(g), x> for a map linear in x (0 up to rounding when f* is f's
    adjoint, i.e. the backward operator is the forward's exact gradient)."""
    x = torch.randn(shape, generator=generator, dtype=torch.float64)
    grad = torch.randn(out_shape, generator=generator, dtype=torch.float64)
    return float((grad * forward(x)).sum() - (backward(grad) * x).sum())


@pytest.mark.parametrize("aligned", [False, True])
def test_roi_align_backward_is_the_adjoint_of_its_forward(aligned):
    generator = torch.Generator().manual_seed(2)
    rois = random_rois(12, 2, generator)
    shape, out_shape = (2, 4, 20, 24), (12, 4, 3, 3)
    gap = adjoint_gap(lambda x: ops.roi_align(x, rois, 0.5, 3, 3, -1, aligned),
                      lambda g: ops._roi_align_backward(g, rois, 0.5, 3, 3, 2, 4, 20, 24, -1,
                                                        aligned),
                      shape, out_shape, generator)
    assert abs(gap) < 1e-9


def test_ps_roi_align_and_ps_roi_pool_backward_are_adjoints():
    generator = torch.Generator().manual_seed(3)
    rois = random_rois(10, 2, generator)[3:]   # no empty roi: its NaN is not linear
    shape, out_shape = (2, 18, 20, 24), (7, 2, 3, 3)
    mapping = ops.ps_roi_align(torch.zeros(shape, dtype=torch.float64), rois, 1.0, 3, 3, 2)[1]
    gap = adjoint_gap(lambda x: ops.ps_roi_align(x, rois, 1.0, 3, 3, 2)[0],
                      lambda g: ops._ps_roi_align_backward(g, rois, mapping, 1.0, 3, 3, 2, 2,
                                                           18, 20, 24),
                      shape, out_shape, generator)
    assert abs(gap) < 1e-9
    # ps_roi_pool: the forward clips bins to the last row/column, the backward does not
    # (as torchvision's kernels): adjoint on rois inside the map away from its border.
    inner = torch.tensor([[0, 2, 3, 12, 15], [1, 0, 0, 9, 9], [1, 4, 1, 20, 11]],
                         dtype=torch.float64)
    gap = adjoint_gap(lambda x: ops.ps_roi_pool(x, inner, 1.0, 3, 3)[0],
                      lambda g: ops._ps_roi_pool_backward(g, inner, mapping, 1.0, 3, 3, 2, 18,
                                                          20, 24),
                      shape, (3, 2, 3, 3), generator)
    assert abs(gap) < 1e-9


def test_roi_pool_takes_the_first_maximum_and_routes_its_gradient_there():
    features = torch.zeros(1, 1, 4, 4, dtype=torch.float64)
    features[0, 0, 1, 2] = features[0, 0, 2, 1] = 5.0      # a tie: row-major first wins
    rois = torch.tensor([[0, 0, 0, 3, 3], [0, 10, 10, 12, 12]], dtype=torch.float64)
    output, argmax = ops.roi_pool(features, rois, 1.0, 1, 1)
    assert output[0].item() == 5.0 and argmax[0].item() == 1 * 4 + 2
    assert output[1].item() == 0.0 and argmax[1].item() == -1   # an empty bin
    grad = ops._roi_pool_backward(torch.ones(2, 1, 1, 1, dtype=torch.float64), rois, argmax,
                                  1.0, 1, 1, 1, 1, 4, 4)
    assert grad.sum().item() == 1.0 and grad[0, 0, 1, 2].item() == 1.0


def test_half_precision_and_empty_batches():
    generator = torch.Generator().manual_seed(8)
    features = torch.rand(1, 4, 6, 6, generator=generator)
    rois = torch.tensor([[0, 0, 0, 5, 5], [0, 1, 2, 4, 4]], dtype=torch.float32)
    full, full_index = ops.roi_pool(features, rois, 1.0, 2, 2)
    half, half_index = ops.roi_pool(features.half(), rois.half(), 1.0, 2, 2)
    assert half.dtype == torch.float16 and torch.equal(half_index, full_index)
    torch.testing.assert_close(half.float(), full, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(ops.roi_align(features.half(), rois.half(), 1.0, 2, 2, -1, True)
                               .float(), ops.roi_align(features, rois, 1.0, 2, 2, -1, True),
                               rtol=4e-3, atol=4e-3)
    weight, bias = torch.rand(3, 4, 3, 3), torch.rand(3)
    empty = ops.deform_conv2d(torch.rand(0, 4, 6, 6), weight, torch.rand(0, 18, 4, 4),
                              torch.rand(0, 9, 4, 4), bias, 1, 1, 0, 0, 1, 1, 1, 1, True)
    assert empty.shape == (0, 3, 4, 4)
    grads = ops._deform_conv2d_backward(torch.rand(0, 3, 4, 4), torch.rand(0, 4, 6, 6), weight,
                                        torch.rand(0, 18, 4, 4), torch.rand(0, 9, 4, 4), bias,
                                        1, 1, 0, 0, 1, 1, 1, 1, True)
    assert [tuple(g.shape) for g in grads] == [(0, 4, 6, 6), (3, 4, 3, 3), (0, 18, 4, 4),
                                                (0, 9, 4, 4), (3,)]
    assert not grads[1].any()


class DeformConv(torch.autograd.Function):
    """The stand-in's deform_conv2d and its backward operator as one function."""

    @staticmethod
    def forward(ctx, x, weight, offset, mask, bias, settings):
        ctx.save_for_backward(x, weight, offset, mask, bias)
        ctx.settings = settings
        return ops.deform_conv2d(x, weight, offset, mask, bias, *settings)

    @staticmethod
    def backward(ctx, grad):
        grads = ops._deform_conv2d_backward(grad, *ctx.saved_tensors, *ctx.settings)
        return (*grads, None)


@pytest.mark.parametrize("use_mask,groups,offset_groups", [(True, 2, 2), (False, 1, 1)])
def test_deform_conv2d_backward_passes_gradcheck(use_mask, groups, offset_groups):
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(1, 4, 4, 5, generator=generator, dtype=torch.float64)
    weight = torch.randn(2, 4 // groups, 2, 3, generator=generator, dtype=torch.float64)
    # offsets away from integers: the bilinear weights' kinks are not differentiable
    offset = torch.rand(1, 2 * offset_groups * 6, 3, 3, generator=generator,
                        dtype=torch.float64) * 2.6 - 1.3 + 0.05
    mask = (torch.rand(1, offset_groups * 6, 3, 3, generator=generator, dtype=torch.float64)
            if use_mask else torch.zeros(1, 1, dtype=torch.float64))
    bias = torch.randn(2, generator=generator, dtype=torch.float64)
    settings = (1, 1, 0, 0, 1, 1, groups, offset_groups, use_mask)
    inputs = [t.requires_grad_() for t in (x, weight, offset, mask, bias)]
    assert torch.autograd.gradcheck(lambda *t: DeformConv.apply(*t, settings), inputs,
                                    eps=1e-6, atol=1e-6)


def test_bad_input_is_named():
    features = torch.zeros(1, 4, 5, 5)
    with pytest.raises(RuntimeError, match=r"rois must have shape as Tensor\[K, 5\]"):
        ops.roi_align(features, torch.zeros(1, 4), 1.0, 2, 2, -1, False)
    with pytest.raises(RuntimeError, match="multiple of pooling height"):
        ops.ps_roi_align(torch.zeros(1, 5, 5, 5), torch.zeros(1, 5), 1.0, 2, 2, -1)
    with pytest.raises(NotImplementedError, match="box_iou_rotated"):
        ops.box_iou_rotated(torch.zeros(1, 5), torch.zeros(1, 5))


# ------------------------------------------- against torchvision's compiled kernels

def assert_same(ours, theirs, tolerance=1e-10):
    if isinstance(ours, tuple):
        for mine, other in zip(ours, theirs):
            assert_same(mine, other, tolerance)
        return
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    if ours.dtype in (torch.int32, torch.int64):
        assert torch.equal(ours, theirs)
    else:
        torch.testing.assert_close(ours, theirs, rtol=tolerance, atol=tolerance, equal_nan=True)


def test_nms_matches_compiled():
    tv = compiled()
    generator = torch.Generator().manual_seed(5)
    for count, threshold in itertools.product((0, 1, 50, 1000), (0.2, 0.5, 0.8)):
        boxes = random_boxes(count, generator, torch.float32)
        scores = torch.rand(count, generator=generator)
        scores[: count // 3] = 0.5
        assert_same(ops.nms(boxes, scores, threshold), tv.nms(boxes, scores, threshold))


ROI_CASES = list(itertools.product((1.0, 0.5), ((3, 3), (2, 4))))


@pytest.mark.parametrize("scale,pooled", ROI_CASES)
def test_roi_ops_match_compiled_forward_and_backward(scale, pooled):
    tv = compiled()
    generator = torch.Generator().manual_seed(6)
    ph, pw = pooled
    x = torch.randn(2, 2 * ph * pw, 20, 24, generator=generator, dtype=torch.float64)
    rois = random_rois(40, 2, generator)
    size = (2, 2 * ph * pw, 20, 24)
    for ratio, aligned in itertools.product((-1, 0, 2), (False, True)):
        output = tv.roi_align(x, rois, scale, ph, pw, ratio, aligned)
        assert_same(ops.roi_align(x, rois, scale, ph, pw, ratio, aligned), output)
        grad = torch.randn_like(output)
        assert_same(ops._roi_align_backward(grad, rois, scale, ph, pw, *size, ratio, aligned),
                    tv._roi_align_backward(grad, rois, scale, ph, pw, *size, ratio, aligned))
    for ratio in (-1, 2):
        output, mapping = tv.ps_roi_align(x, rois, scale, ph, pw, ratio)
        assert_same(ops.ps_roi_align(x, rois, scale, ph, pw, ratio), (output, mapping))
        grad = torch.randn_like(output)
        assert_same(ops._ps_roi_align_backward(grad, rois, mapping, scale, ph, pw, ratio, *size),
                    tv._ps_roi_align_backward(grad, rois, mapping, scale, ph, pw, ratio, *size))
    output, argmax = tv.roi_pool(x, rois, scale, ph, pw)
    assert_same(ops.roi_pool(x, rois, scale, ph, pw), (output, argmax))
    grad = torch.randn_like(output)
    assert_same(ops._roi_pool_backward(grad, rois, argmax, scale, ph, pw, *size),
                tv._roi_pool_backward(grad, rois, argmax, scale, ph, pw, *size))
    output, mapping = tv.ps_roi_pool(x, rois, scale, ph, pw)
    assert_same(ops.ps_roi_pool(x, rois, scale, ph, pw), (output, mapping))
    grad = torch.randn_like(output)
    assert_same(ops._ps_roi_pool_backward(grad, rois, mapping, scale, ph, pw, *size),
                tv._ps_roi_pool_backward(grad, rois, mapping, scale, ph, pw, *size))


def test_quantized_ops_match_compiled():
    """torchvision passes the integer values of quantized tensors, with their parameters."""
    tv = compiled()
    generator = torch.Generator().manual_seed(9)
    features = torch.randint(0, 120, (1, 3, 12, 12), generator=generator).to(torch.uint8)
    rois = torch.tensor([[0, 1, 1, 9, 10], [0, 4, 2, 11, 11], [0, 0, 0, 3, 2]], dtype=torch.uint8)
    for aligned, ratio in itertools.product((False, True), (-1, 2)):
        arguments = (features, rois, 0.5, 3, 1.0, 0, 1.0, 3, 3, ratio, aligned)
        assert_same(ops.qroi_align(*arguments), tv.qroi_align(*arguments))
    boxes = torch.randint(0, 100, (200, 2), generator=generator)
    boxes = torch.cat([boxes, boxes + torch.randint(1, 60, (200, 2), generator=generator)], 1)
    scores = torch.randint(0, 255, (200,), generator=generator)
    for threshold in (0.3, 0.7):
        assert_same(ops.qnms(boxes.to(torch.uint8), scores.to(torch.uint8), threshold),
                    tv.qnms(boxes.to(torch.uint8), scores.to(torch.uint8), threshold))


@pytest.mark.parametrize("groups,offset_groups,use_mask,stride,padding,dilation", [
    (1, 1, False, (1, 1), (1, 1), (1, 1)), (2, 3, True, (2, 2), (0, 0), (1, 1)),
    (3, 1, True, (1, 1), (2, 2), (2, 2)), (1, 2, False, (2, 1), (1, 0), (1, 2))])
def test_deform_conv2d_matches_compiled_forward_and_backward(groups, offset_groups, use_mask,
                                                             stride, padding, dilation):
    tv = compiled()
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(2, 6, 9, 11, generator=generator, dtype=torch.float64)
    weight = torch.randn(6, 6 // groups, 3, 2, generator=generator, dtype=torch.float64)
    out_h = (9 + 2 * padding[0] - dilation[0] * 2 - 1) // stride[0] + 1
    out_w = (11 + 2 * padding[1] - dilation[1] * 1 - 1) // stride[1] + 1
    offset = torch.randn(2, 2 * offset_groups * 6, out_h, out_w, generator=generator,
                         dtype=torch.float64) * 3
    mask = (torch.rand(2, offset_groups * 6, out_h, out_w, generator=generator,
                       dtype=torch.float64) if use_mask else torch.zeros(2, 1, dtype=torch.float64))
    bias = torch.randn(6, generator=generator, dtype=torch.float64)
    settings = (*stride, *padding, *dilation, groups, offset_groups, use_mask)
    output = tv.deform_conv2d(x, weight, offset, mask, bias, *settings)
    assert_same(ops.deform_conv2d(x, weight, offset, mask, bias, *settings), output)
    grad = torch.randn_like(output)
    assert_same(ops._deform_conv2d_backward(grad, x, weight, offset, mask, bias, *settings),
                tv._deform_conv2d_backward(grad, x, weight, offset, mask, bias, *settings),
                1e-9)


def test_schemas_are_torchvisions_own():
    tv = compiled()
    stand_in = importlib.import_module(ops.__name__.replace("torchvision_ops",
                                                            "torchvision_stand_in"))
    for name, schema in stand_in.SCHEMAS.items():
        assert str(getattr(tv, name).default._schema) == f"torchvision::{schema}"


# ----------------------------------------------------------- the patch, end to end

TRAIN = r"""
import json, sys
import lazypatch.auto  # noqa: F401
import lazypatch
import torch
import torchvision
from torchvision import ops
torch.manual_seed(0)
boxes = torch.rand(30, 4) * 50
boxes[:, 2:] += boxes[:, :2]
scores = torch.rand(30)
kept = ops.batched_nms(boxes, scores, torch.randint(0, 3, (30,)), 0.5)
features = torch.randn(2, 8, 16, 16, requires_grad=True)
rois = torch.tensor([[0, 1.0, 1, 9, 12], [1, 0, 0, 15, 15]])
offset = torch.randn(2, 18, 16, 16, requires_grad=True)
weight = torch.randn(4, 8, 3, 3, requires_grad=True)
loss = (ops.roi_align(features, rois, (3, 3), 1.0, -1, True).sum()
        + ops.roi_pool(features, rois, (2, 2), 1.0).sum()
        + ops.ps_roi_align(features, rois, (2, 2), 1.0).sum()
        + ops.ps_roi_pool(features, rois, (2, 2), 1.0).sum()
        + ops.deform_conv2d(features, offset, weight, padding=1).sum())
loss.backward()
record = next(r for r in lazypatch.report() if r["name"] == "cuda_extensions.torchvision")
print(json.dumps({"kept": len(kept), "grads": [float(t.grad.abs().sum()) for t in
                  (features, offset, weight)], "status": record["status"],
                  "notes": record.get("notes") or [], "reason": record.get("reason"),
                  "has_ops": torchvision.extension._has_ops()}))
"""


def test_import_torchvision_and_train_through_its_ops_where_its_library_cannot_load(
        interpreter):
    needs_torchvision("broken")
    result = interpreter.run_json(TRAIN, env={"LAZYPATCH_ENABLE": "cuda_extensions", "OMP_NUM_THREADS": "1"})
    assert result["status"] == "applied", result
    assert result["has_ops"] and result["kept"] > 0
    assert all(value > 0 for value in result["grads"])
    notes = " ".join(result["notes"])
    assert "pure-PyTorch stand-ins for torchvision's compiled operators" in notes
    assert "cannot load" in notes


def test_without_the_pack_the_broken_torchvision_still_fails_as_before(interpreter):
    needs_torchvision("broken")
    result = interpreter.run("import lazypatch.auto\nimport torchvision\n", check=False)
    assert result.returncode != 0
    assert "torchvision::nms does not exist" in result.stderr


def test_unpatch_takes_the_operators_away_again(interpreter):
    needs_torchvision("broken")
    result = interpreter.run_json(r"""
        import json
        import lazypatch.auto, lazypatch, torch, torchvision
        before = torchvision.extension._has_ops()
        lazypatch.unpatch("cuda_extensions.torchvision")
        try:
            torch.ops.torchvision.nms
            defined = True
        except (AttributeError, RuntimeError):
            defined = False
        print(json.dumps([before, torchvision.extension._has_ops(), defined]))
    """, env={"LAZYPATCH_ENABLE": "cuda_extensions", "OMP_NUM_THREADS": "1"})
    assert result == [True, False, False]


def test_a_torchvision_whose_library_loads_is_left_untouched(interpreter):
    needs_torchvision("loads")
    result = interpreter.run_json(TRAIN, env={"LAZYPATCH_ENABLE": "cuda_extensions", "OMP_NUM_THREADS": "1"})
    assert result["status"] == "skipped", result
    assert "compiled operators load" in result["reason"]
    assert result["has_ops"] and all(value > 0 for value in result["grads"])


def test_the_declaration_imports_neither_torch_nor_torchvision(interpreter):
    result = interpreter.run_json(r"""
        import json, sys
        import lazypatch.auto, lazypatch
        lazypatch.enable("cuda_extensions")
        print(json.dumps(sorted(name for name in ("torch", "torchvision") if name in sys.modules)
                         + [r["status"] for r in lazypatch.report()
                            if r["name"] == "cuda_extensions.torchvision"]))
    """)
    assert result == ["pending"]



def test_the_stand_in_registers_autograd_formulas_for_a_torchvision_that_does_not(
        interpreter):
    """Before 0.28 torchvision registered its autograd formulas from _C: simulated here by
    a torchvision whose Python registrations are absent."""
    needs_torchvision("broken")
    result = interpreter.run_json(r"""
        import json, sys, types
        import lazypatch.auto, lazypatch
        import lazypatch.registry.cuda_extensions.torchvision_stand_in as stand_in
        stand_in.ships_autograd_formulas = lambda extension: False
        sys.modules["torchvision._autograd_registrations"] = types.ModuleType(
            "torchvision._autograd_registrations")
        import torch
        from torchvision import ops
        torch.manual_seed(0)
        x = torch.rand(1, 8, 6, 6, dtype=torch.float64, requires_grad=True)
        rois = torch.tensor([[0, 0, 0, 4, 4], [0, 1, 2, 5, 5]], dtype=torch.float64)
        offset = (torch.rand(1, 18, 6, 6, dtype=torch.float64) * 0.8 + 0.1).requires_grad_()
        weight = torch.rand(2, 8, 3, 3, dtype=torch.float64, requires_grad=True)
        checks = {
            "roi_align": torch.autograd.gradcheck(
                lambda t: ops.roi_align(t, rois, (2, 2), 1.0, 2, True), (x,)),
            "ps_roi_align": torch.autograd.gradcheck(
                lambda t: ops.ps_roi_align(t, rois, (2, 2), 1.0, 2), (x,)),
            "ps_roi_pool": torch.autograd.gradcheck(
                lambda t: ops.ps_roi_pool(t, rois, (2, 2), 1.0), (x,)),
            "roi_pool": torch.autograd.gradcheck(
                lambda t: ops.roi_pool(t, rois, (2, 2), 1.0), (x,)),
            "deform_conv2d": torch.autograd.gradcheck(
                lambda t, o, w: ops.deform_conv2d(t, o, w, padding=1), (x, offset, weight)),
        }
        record = next(r for r in lazypatch.report() if r["name"] == "cuda_extensions.torchvision")
        print(json.dumps({"checks": checks, "notes": record["notes"]}))
    """, env={"LAZYPATCH_ENABLE": "cuda_extensions", "OMP_NUM_THREADS": "1"})
    assert all(result["checks"].values()), result
    assert any("autograd formulas registered by the stand-in" in note
               for note in result["notes"])

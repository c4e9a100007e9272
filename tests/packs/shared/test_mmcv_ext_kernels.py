"""Kernel math of the pure-PyTorch ``mmcv._ext`` stand-in.

Each kernel is compared with an independent, deliberately naive reference
written here with plain Python loops (per box, per output pixel, per sampling
point), on small random inputs. Gradients are checked with
``torch.autograd.gradcheck`` in float64 through mmcv's own autograd
Functions, so the ext backward kernels are exercised exactly as mmcv calls
them.

The built module is put into ``sys.modules['mmcv._ext']`` by a module-scoped
fixture (this file tests kernel math, not the import hook) and everything it
imported is removed again afterwards.
"""
from __future__ import annotations

import importlib
import math
import os
import subprocess
import sys
import textwrap
from typing import Dict, List, Sequence, Tuple

import mmcv  # noqa: F401  (the real mmcv-lite must be installed: requirements/stack.txt)
import pytest
import torch

try:
    from lazypatch.registry.shared.mmcv_ext import build_ext_module
except ImportError:
    from registry.shared.mmcv_ext import build_ext_module

ext_pkg = sys.modules[build_ext_module.__module__]


# ``ops``: mmcv.ops against the pure-PyTorch mmcv._ext (tests/conftest.py).


@pytest.fixture(scope="module")
def ext(ops):
    return sys.modules["mmcv.ops.nms"].ext_module


def gen(seed: int) -> "torch.Generator":
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------
# module construction
# ---------------------------------------------------------------------------


def test_module_lists_every_requested_name_and_flags_itself():
    module = build_ext_module()
    assert module.__name__ == "mmcv._ext"
    assert module.__lazypatch_provided__ is True
    requested = ext_pkg.requested_ext_names()
    assert len(requested) > 50  # the installed mmcv really was scanned
    for name in requested | ext_pkg.implemented_names():
        assert callable(getattr(module, name)), name
    assert set(module.__lazypatch_unimplemented__).isdisjoint(
        ext_pkg.implemented_names())


def test_unimplemented_name_raises_with_the_way_out():
    module = build_ext_module()
    missing = module.__lazypatch_unimplemented__
    assert "active_rotated_filter_forward" in missing
    with pytest.raises(NotImplementedError) as info:
        module.active_rotated_filter_forward(1, 2, gamma=2.0)
    message = str(info.value)
    assert "'active_rotated_filter_forward'" in message
    assert "install full mmcv" in message
    assert "'openmmlab.mmcv_ext'" in message


def test_ast_scan_reads_load_ext_calls():
    source = (
        "from ..utils import ext_loader\n"
        "ext_module = ext_loader.load_ext('_ext', ['a_fwd', 'a_bwd'])\n"
        "other = load_ext('_ext', ('b',))\n"
        "ignored = ext_loader.load_ext('_other', ['c'])\n")
    assert ext_pkg._load_ext_names_in_source(source) == {"a_fwd", "a_bwd",
                                                         "b"}
    assert ext_pkg._load_ext_names_in_source("def (") == frozenset()


def test_package_import_does_not_import_torch_or_mmcv():
    code = ("import sys\n"
            f"sys.path.insert(0, {str(_repo_root())!r})\n"
            f"import {ext_pkg.__name__} as e\n"
            "e.requested_ext_names()\n"
            "assert 'torch' not in sys.modules, 'torch'\n"
            "assert 'mmcv' not in sys.modules, 'mmcv'\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env=env)
    assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------------------
# every import path gets the provided mmcv._ext (fresh interpreters)
# ---------------------------------------------------------------------------


def test_load_ext_before_mmcv_ops_gets_the_pure_pytorch_ext(interpreter):
    result = interpreter.run_json("""
        import lazypatch.auto, lazypatch, json, sys
        from mmcv.utils import ext_loader
        ext = ext_loader.load_ext("_ext", ["ms_deform_attn_forward",
                                           "active_rotated_filter_forward"])
        try:
            ext.active_rotated_filter_forward(None, None)
            message = None
        except NotImplementedError as error:
            message = str(error)
        import mmcv.ops, mmcv._ext
        statuses = {r.name: r.status for r in lazypatch.report() if "mmcv_ext" in r.name}
        same_attr = mmcv._ext is ext
        lazypatch.unpatch("openmmlab.mmcv_ext")
        print(json.dumps([ext.__lazypatch_provided__, message,
                          sys.modules["mmcv.ops.nms"].ext_module is ext,
                          same_attr, statuses, "mmcv._ext" in sys.modules]))
    """, timeout=300)
    provided, message, same_in_ops, same_attr, statuses, still_there = result
    assert provided and same_in_ops and same_attr
    assert "'active_rotated_filter_forward'" in message and "install full mmcv" in message
    # mmcv.ops took the early module over: undoing openmmlab.mmcv_ext removes it.
    assert statuses == {"openmmlab.mmcv_ext": "applied",
                        "openmmlab.mmcv_ext.before_mmcv_ops": "reverted"}
    assert not still_there


def test_plain_import_of_mmcv_ext_gets_it_and_fails_without_lazypatch(interpreter):
    code = textwrap.dedent("""
        import json, sys
        import mmcv._ext
        print(json.dumps([mmcv._ext.__spec__.origin, callable(mmcv._ext.nms),
                          "torch.ops" in str(type(mmcv._ext.nms))]))
    """)
    origin, has_nms, _ = interpreter.run_json("import lazypatch.auto\n" + code,
                                              timeout=300)
    assert "pure PyTorch" in origin and has_nms
    failed = interpreter.run(code, env={"LAZYPATCH": "0"}, check=False, timeout=300)
    assert failed.returncode != 0 and "No module named 'mmcv._ext'" in failed.stderr
    disabled = interpreter.run("import lazypatch.auto\n" + code,
                               env={"LAZYPATCH_DISABLE": "openmmlab.mmcv_ext"},
                               check=False, timeout=300)
    assert disabled.returncode != 0 and "No module named 'mmcv._ext'" in disabled.stderr


def _repo_root():
    import pathlib
    path = pathlib.Path(ext_pkg.__file__).resolve()
    # <root>/registry/shared/mmcv_ext/__init__.py: one parent per name part.
    return path.parents[ext_pkg.__name__.count(".") + 1]


def test_collect_env_reports_no_compiled_ops(ops):
    assert "n/a" in ops.get_compiler_version()
    assert "n/a" in ops.get_compiling_cuda_version()


# ---------------------------------------------------------------------------
# naive helpers shared by several references
# ---------------------------------------------------------------------------


def naive_bilinear_zero(img: List[List[float]], y: float, x: float) -> float:
    """Bilinear sample at pixel coords; taps outside the image read 0."""
    h, w = len(img), len(img[0])
    if not (y > -1 and x > -1 and y < h and x < w):
        return 0.0
    y0, x0 = math.floor(y), math.floor(x)
    total = 0.0
    for yy, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
        for xx, wx in ((x0, 1 - (x - x0)), (x0 + 1, x - x0)):
            if 0 <= yy < h and 0 <= xx < w:
                total += wy * wx * img[yy][xx]
    return total


def naive_iou(a: Sequence[float], b: Sequence[float], offset: float = 0.0
              ) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]) + offset)
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]) + offset)
    inter = w * h
    area_a = (a[2] - a[0] + offset) * (a[3] - a[1] + offset)
    area_b = (b[2] - b[0] + offset) * (b[3] - b[1] + offset)
    return inter / (area_a + area_b - inter)


def naive_rect(box: Sequence[float]) -> List[Tuple[float, float]]:
    """Counter-clockwise corners of (cx, cy, w, h, angle)."""
    cx, cy, w, h, a = box[:5]
    c, s = math.cos(a), math.sin(a)
    return [(cx + c * dx - s * dy, cy + s * dx + c * dy)
            for dx, dy in ((-w / 2, -h / 2), (w / 2, -h / 2), (w / 2, h / 2),
                           (-w / 2, h / 2))]


def naive_clip_area(subject, clip) -> float:
    """Sutherland-Hodgman: area of convex ``subject`` clipped by CCW
    convex ``clip``."""
    poly = list(subject)
    for i in range(len(clip)):
        a, b = clip[i], clip[(i + 1) % len(clip)]

        def side(p, a=a, b=b):
            return (b[0] - a[0]) * (p[1] - a[1]) - (b[1] - a[1]) * (p[0] - a[0])

        out = []
        for j in range(len(poly)):
            p, q = poly[j], poly[(j + 1) % len(poly)]
            sp, sq = side(p), side(q)
            if sp >= 0:
                out.append(p)
            if (sp >= 0) != (sq >= 0):
                t = sp / (sp - sq)
                out.append((p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] -
                                                                  p[1])))
        poly = out
        if not poly:
            return 0.0
    area = 0.0
    for j in range(len(poly)):
        p, q = poly[j], poly[(j + 1) % len(poly)]
        area += p[0] * q[1] - q[0] * p[1]
    return abs(area) / 2


def naive_rotated_iou(a, b, mode: str = "iou") -> float:
    area_a, area_b = a[2] * a[3], b[2] * b[3]
    if area_a < 1e-14 or area_b < 1e-14:
        return 0.0
    inter = naive_clip_area(naive_rect(a), naive_rect(b))
    return inter / (area_a if mode == "iof" else area_a + area_b - inter)


def naive_greedy(n: int, order: Sequence[int], overlaps) -> List[int]:
    """Greedy NMS over ``order``; ``overlaps(i, j)`` says i suppresses j."""
    keep: List[int] = []
    removed = set()
    for pos, i in enumerate(order):
        if i in removed:
            continue
        keep.append(i)
        for j in order[pos + 1:]:
            if j not in removed and overlaps(i, j):
                removed.add(j)
    return keep


def random_boxes(n: int, seed: int, scale: float = 30.0) -> "torch.Tensor":
    g = gen(seed)
    xy = torch.rand(n, 2, generator=g) * scale
    wh = torch.rand(n, 2, generator=g) * scale / 3 + 1
    return torch.cat([xy, xy + wh], dim=1)


def random_rotated(n: int, seed: int, scale: float = 10.0) -> "torch.Tensor":
    g = gen(seed)
    ctr = torch.rand(n, 2, generator=g) * scale
    wh = torch.rand(n, 2, generator=g) * scale / 2 + 0.5
    ang = (torch.rand(n, 1, generator=g) - 0.5) * 2 * math.pi
    return torch.cat([ctr, wh, ang], dim=1)


# ---------------------------------------------------------------------------
# multi-scale deformable attention
# ---------------------------------------------------------------------------

MSDA_SHAPES = [(4, 5), (2, 3)]


def msda_inputs(dtype, seed=0, bs=2, heads=2, dim=3, nq=3, points=2):
    g = gen(seed)
    shapes = torch.tensor(MSDA_SHAPES, dtype=torch.long)
    starts = torch.cat([shapes.new_zeros(1), (shapes[:, 0] *
                                              shapes[:, 1]).cumsum(0)[:-1]])
    keys = int((shapes[:, 0] * shapes[:, 1]).sum())
    value = torch.randn(bs, keys, heads, dim, generator=g, dtype=dtype)
    # Some locations fall outside [0, 1] to exercise the zero padding.
    loc = torch.rand(bs, nq, heads, len(MSDA_SHAPES), points, 2, generator=g,
                     dtype=dtype) * 1.2 - 0.1
    attn = torch.rand(bs, nq, heads, len(MSDA_SHAPES), points, generator=g,
                      dtype=dtype)
    attn = attn / attn.sum((-1, -2), keepdim=True)
    return value, shapes, starts, loc, attn


def naive_msda(value, shapes, starts, loc, attn):
    bs, _, heads, dim = value.shape
    _, nq, _, levels, points, _ = loc.shape
    out = torch.zeros(bs, nq, heads * dim, dtype=value.dtype)
    for b in range(bs):
        for q in range(nq):
            for hd in range(heads):
                for lv in range(levels):
                    h, w = (int(v) for v in shapes[lv])
                    s = int(starts[lv])
                    for p in range(points):
                        x = float(loc[b, q, hd, lv, p, 0]) * w - 0.5
                        y = float(loc[b, q, hd, lv, p, 1]) * h - 0.5
                        a = float(attn[b, q, hd, lv, p])
                        for d in range(dim):
                            img = [[float(value[b, s + r * w + c, hd, d])
                                    for c in range(w)] for r in range(h)]
                            out[b, q, hd * dim + d] += a * \
                                naive_bilinear_zero(img, y, x)
    return out


def test_msda_forward_matches_naive_and_mmcv_pytorch(ops):
    from mmcv.ops.multi_scale_deform_attn import (
        MultiScaleDeformableAttnFunction,
        multi_scale_deformable_attn_pytorch,
    )
    value, shapes, starts, loc, attn = msda_inputs(torch.float64)
    got = MultiScaleDeformableAttnFunction.apply(value, shapes, starts, loc,
                                                 attn, 64)
    torch.testing.assert_close(got, naive_msda(value, shapes, starts, loc,
                                               attn))
    torch.testing.assert_close(
        got, multi_scale_deformable_attn_pytorch(value, shapes, loc, attn))


def test_msda_gradcheck(ops):
    from mmcv.ops.multi_scale_deform_attn import MultiScaleDeformableAttnFunction
    value, shapes, starts, loc, attn = msda_inputs(torch.float64, seed=1,
                                                   bs=1, nq=2)
    value.requires_grad_()
    loc.requires_grad_()
    attn.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda v, locations, a: MultiScaleDeformableAttnFunction.apply(
            v, shapes, starts, locations, a, 64), (value, loc, attn))


# ---------------------------------------------------------------------------
# NMS family
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("thr", [0.3, 0.6])
def test_nms_matches_naive(ops, offset, thr):
    boxes = random_boxes(80, seed=2)
    scores = torch.rand(80, generator=gen(3))
    _, keep = ops.nms(boxes, scores, thr, offset=offset)
    order = scores.sort(0, descending=True)[1].tolist()
    b = boxes.tolist()
    ref = naive_greedy(80, order,
                       lambda i, j: naive_iou(b[i], b[j], offset) > thr)
    assert keep.tolist() == ref


def test_nms_empty_and_filters(ops):
    dets, keep = ops.nms(torch.zeros(0, 4), torch.zeros(0), 0.5)
    assert keep.shape == (0, ) and keep.dtype == torch.long
    assert dets.shape == (0, 5)
    boxes = random_boxes(40, seed=4)
    scores = torch.rand(40, generator=gen(5))
    _, keep = ops.nms(boxes, scores, 0.5, score_threshold=0.3, max_num=5)
    assert len(keep) <= 5 and bool((scores[keep] > 0.3).all())


def test_batched_nms_matches_per_class_naive(ops):
    boxes = random_boxes(60, seed=6)
    scores = torch.rand(60, generator=gen(7))
    labels = torch.randint(0, 3, (60, ), generator=gen(8))
    _, keep = ops.batched_nms(boxes, scores, labels,
                              dict(type="nms", iou_threshold=0.4))
    ref = []
    b = boxes.tolist()
    for c in range(3):
        idx = [i for i in range(60) if int(labels[i]) == c]
        order = sorted(idx, key=lambda i: -float(scores[i]))
        ref += naive_greedy(60, order,
                            lambda i, j: naive_iou(b[i], b[j]) > 0.4)
    assert sorted(keep.tolist()) == sorted(ref)
    assert keep.tolist() == sorted(ref, key=lambda i: -float(scores[i]))


def naive_softnms(boxes, scores, thr, sigma, min_score, method, offset):
    """mmcv's CPU soft-NMS, transcribed literally (arrays + swaps)."""
    bx = [list(map(float, r)) for r in boxes]
    sc = [float(s) for s in scores]
    ar = [(r[2] - r[0] + offset) * (r[3] - r[1] + offset) for r in bx]
    ind = list(range(len(bx)))
    dets, n, i = [], len(bx), 0
    while i < n:
        m = max(range(i, n), key=lambda k: (sc[k], -k))
        for arr in (bx, sc, ar, ind):
            arr[i], arr[m] = arr[m], arr[i]
        dets.append(bx[i] + [sc[i]])
        pos = i + 1
        while pos < n:
            ovr = naive_iou(bx[i], bx[pos], offset)
            if method == 0:
                weight = 0.0 if ovr >= thr else 1.0
            elif method == 1:
                weight = 1 - ovr if ovr >= thr else 1.0
            else:
                weight = math.exp(-(ovr * ovr) / sigma)
            sc[pos] *= weight
            if sc[pos] < min_score:
                for arr in (bx, sc, ar, ind):
                    arr[pos] = arr[n - 1]
                n -= 1
                pos -= 1
            pos += 1
        i += 1
    return dets, ind[:n]


@pytest.mark.parametrize("method", ["naive", "linear", "gaussian"])
def test_soft_nms_matches_naive(ops, method):
    boxes = random_boxes(40, seed=9, scale=15)
    scores = torch.rand(40, generator=gen(10))
    dets, inds = ops.soft_nms(boxes, scores, 0.3, sigma=0.5, min_score=0.05,
                              method=method)
    code = {"naive": 0, "linear": 1, "gaussian": 2}[method]
    ref_dets, ref_inds = naive_softnms(boxes.tolist(), scores.tolist(), 0.3,
                                       0.5, 0.05, code, 0)
    assert inds.tolist() == ref_inds
    torch.testing.assert_close(dets, torch.tensor(ref_dets),
                               rtol=1e-5, atol=1e-5)


def test_nms_match_matches_naive(ops):
    boxes = random_boxes(50, seed=11, scale=20)
    scores = torch.rand(50, generator=gen(12))
    dets = torch.cat([boxes, scores[:, None]], dim=1)
    groups = ops.nms_match(dets, 0.3)
    order = scores.sort(0, descending=True)[1].tolist()
    b = boxes.tolist()
    ref, removed = [], set()
    for pos, i in enumerate(order):
        if i in removed:
            continue
        group = [i]
        for j in order[pos + 1:]:
            if j not in removed and naive_iou(b[i], b[j]) >= 0.3:
                removed.add(j)
                group.append(j)
        ref.append(group)
    assert [g.tolist() for g in groups] == ref
    assert ops.nms_match(torch.zeros(0, 5), 0.5) == []


# ---------------------------------------------------------------------------
# rotated boxes
# ---------------------------------------------------------------------------


def special_rotated():
    return torch.tensor([
        [0.0, 0.0, 2.0, 2.0, 0.0],
        [0.0, 0.0, 2.0, 2.0, 0.0],           # identical
        [1.0, 0.0, 2.0, 2.0, 0.0],           # half overlap
        [2.0, 0.0, 2.0, 2.0, 0.0],           # touching edge
        [0.0, 0.0, 2.0, 2.0, math.pi / 4],   # octagon
        [0.2, 0.1, 0.5, 0.4, 0.3],           # contained
        [9.0, 9.0, 1.0, 1.0, 1.0],           # disjoint
        [0.0, 0.0, 0.0, 3.0, 0.5],           # degenerate
    ])


@pytest.mark.parametrize("mode", ["iou", "iof"])
def test_box_iou_rotated_matches_polygon_clipping(ops, mode):
    boxes1 = torch.cat([special_rotated(), random_rotated(12, seed=13)])
    boxes2 = torch.cat([special_rotated(), random_rotated(9, seed=14)])
    got = ops.box_iou_rotated(boxes1, boxes2, mode=mode)
    ref = torch.tensor([[naive_rotated_iou(a, b, mode)
                         for b in boxes2.tolist()] for a in boxes1.tolist()])
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)


def test_rotated_intersection_of_boxes_sharing_a_collinear_edge_is_whole_in_float32():
    # Same angle, shifted along an edge: the earlier angle-sorted kernel returned half
    # the area in float32 (0.839) where float64 and the polygon reference give 1.679.
    from lazypatch.registry.shared.mmcv_ext.rotated import rotated_intersection_area
    box = [2.444, 3.099, 1.3596, 2.4696, 3.5182]
    shifted = [1.812, 2.849, 1.3596, 2.4696, 3.5182]
    reference = naive_rotated_iou(box, shifted, "iof") * box[2] * box[3]
    for dtype in (torch.float32, torch.float64):
        area = rotated_intersection_area(torch.tensor([box], dtype=dtype),
                                         torch.tensor([shifted], dtype=dtype))
        assert abs(float(area[0]) - reference) < 1e-3, (dtype, float(area[0]), reference)


def test_box_iou_rotated_aligned_and_counterclockwise(ops):
    boxes1 = random_rotated(15, seed=15, scale=4)
    boxes2 = random_rotated(15, seed=16, scale=4)
    got = ops.box_iou_rotated(boxes1, boxes2, aligned=True)
    ref = torch.tensor([naive_rotated_iou(a, b) for a, b in zip(
        boxes1.tolist(), boxes2.tolist())])
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    # clockwise=False flips the angle sign before the kernel.
    ccw = ops.box_iou_rotated(boxes1, boxes2, clockwise=False)
    flip = torch.tensor([1, 1, 1, 1, -1.0])
    ref_ccw = torch.tensor([[naive_rotated_iou(a, b)
                             for b in (boxes2 * flip).tolist()]
                            for a in (boxes1 * flip).tolist()])
    torch.testing.assert_close(ccw, ref_ccw, rtol=1e-4, atol=1e-4)


def test_nms_rotated_matches_naive(ops):
    boxes = random_rotated(60, seed=17)
    scores = torch.rand(60, generator=gen(18))
    _, keep = ops.nms_rotated(boxes, scores, 0.2)
    order = scores.sort(0, descending=True)[1].tolist()
    b = boxes.tolist()
    ref = naive_greedy(60, order,
                       lambda i, j: naive_rotated_iou(b[i], b[j]) > 0.2)
    assert keep.tolist() == ref
    # with labels (the label column rides along, as in mmcv)
    labels = torch.randint(0, 2, (60, ), generator=gen(19))
    _, keep_l = ops.nms_rotated(boxes, scores, 0.2, labels=labels)
    assert keep_l.tolist() == ref
    dets, keep_e = ops.nms_rotated(torch.zeros(0, 5), torch.zeros(0), 0.5)
    assert keep_e is None and dets.shape == (0, 5)


def tied_and_degenerate_rotated(n: int, seed: int) -> "torch.Tensor":
    """Random rotated boxes in a small area, with exact duplicates, zero-width
    and zero-height boxes among them."""
    boxes = random_rotated(n, seed=seed, scale=6)
    boxes[1::7] = boxes[0::7][:boxes[1::7].shape[0]]   # duplicates
    boxes[3::11, 2] = 0.0                               # zero width
    boxes[5::13, 3] = 0.0                               # zero height
    return boxes


@pytest.mark.parametrize("seed", [31, 32])
@pytest.mark.parametrize("block", [1, 5, 256])
@pytest.mark.parametrize("thr", [0.0, 0.5, -0.1])
def test_greedy_rotated_keep_equals_plain_greedy(seed, block, thr,
                                                 monkeypatch):
    rotated = importlib.import_module(f"{ext_pkg.__name__}.rotated")
    monkeypatch.setattr(rotated, "GREEDY_BLOCK", block)
    boxes = tied_and_degenerate_rotated(50, seed)
    # Ties: a few equal scores; the order is the caller's (mmcv sorts).
    scores = (torch.rand(50, generator=gen(seed + 100)) * 8).round()
    order = scores.sort(dim=0, descending=True, stable=True)[1]
    b = boxes.tolist()
    ref = naive_greedy(50, order.tolist(),
                       lambda i, j: naive_rotated_iou(b[i], b[j]) > thr)
    kept = rotated.greedy_rotated_keep(boxes[order], thr)
    assert order[kept].tolist() == ref


@pytest.mark.parametrize("scale", [4.0, 40.0, 400.0])
def test_greedy_rotated_keep_equals_all_pairs_greedy(scale):
    rotated = importlib.import_module(f"{ext_pkg.__name__}.rotated")
    greedy = importlib.import_module(f"{ext_pkg.__name__}._greedy")
    boxes = random_rotated(400, seed=34, scale=scale)
    boxes[::17, 2] = 0.0
    iou = rotated.box_iou_rotated_matrix(boxes, boxes)
    for thr in (0.1, 0.5, 0.8):  # 0.8: mmdet3d's FCOS-Mono3D threshold
        all_pairs = greedy.greedy_keep(iou > thr)
        assert torch.equal(rotated.greedy_rotated_keep(boxes, thr),
                           all_pairs)


def test_nms3d_on_degenerate_and_duplicate_boxes(ops):
    boxes = random_boxes3d(40, seed=35, scale=4)
    boxes[1::5] = boxes[0::5]
    boxes[2::9, 3] = 0.0
    scores = torch.rand(40, generator=gen(36))
    order = scores.sort(0, descending=True)[1].tolist()
    l3 = boxes.tolist()

    def bev_iou(i, j):
        p, q = naive_bev(l3[i]), naive_bev(l3[j])
        inter = naive_clip_area(naive_rect(p), naive_rect(q))
        return inter / max(p[2] * p[3] + q[2] * q[3] - inter, 1e-8)

    ref = naive_greedy(40, order, lambda i, j: bev_iou(i, j) > 0.2)
    assert ops.nms3d(boxes, scores, 0.2).tolist() == ref


# ---------------------------------------------------------------------------
# RoIAlign
# ---------------------------------------------------------------------------


def naive_roi_align(x, rois, out_hw, scale, ratio, mode, aligned):
    n, c, h, w = x.shape
    ph_, pw_ = out_hw
    out = torch.zeros(len(rois), c, ph_, pw_, dtype=x.dtype)

    def sample(img, y, xx):
        if y < -1.0 or y > h or xx < -1.0 or xx > w:
            return 0.0
        y, xx = max(y, 0.0), max(xx, 0.0)
        y0, x0 = int(y), int(xx)
        if y0 >= h - 1:
            y0 = y1 = h - 1
            y = float(y0)
        else:
            y1 = y0 + 1
        if x0 >= w - 1:
            x0 = x1 = w - 1
            xx = float(x0)
        else:
            x1 = x0 + 1
        ly, lx = y - y0, xx - x0
        return ((1 - ly) * (1 - lx) * img[y0][x0] + (1 - ly) * lx *
                img[y0][x1] + ly * (1 - lx) * img[y1][x0] +
                ly * lx * img[y1][x1])

    off = 0.5 if aligned else 0.0
    for r, roi in enumerate(rois.tolist()):
        bi = int(roi[0])
        sw, sh = roi[1] * scale - off, roi[2] * scale - off
        rw, rh = roi[3] * scale - off - sw, roi[4] * scale - off - sh
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / ph_, rw / pw_
        gh = ratio if ratio > 0 else math.ceil(rh / ph_)
        gw = ratio if ratio > 0 else math.ceil(rw / pw_)
        for ch in range(c):
            img = x[bi, ch].tolist()
            for i in range(ph_):
                for j in range(pw_):
                    vals = [sample(img, sh + i * bh + (iy + .5) * bh / gh,
                                   sw + j * bw + (ix + .5) * bw / gw)
                            for iy in range(gh) for ix in range(gw)]
                    if mode == "avg":
                        out[r, ch, i, j] = sum(vals) / max(gh * gw, 1)
                    else:
                        out[r, ch, i, j] = max([-10000.0] + vals)
    return out


def roi_inputs(dtype, seed):
    g = gen(seed)
    x = torch.randn(2, 3, 9, 11, generator=g, dtype=dtype)
    rois = torch.tensor([
        [0, 1.0, 2.0, 15.0, 12.0],
        [1, -3.0, -2.0, 6.0, 5.0],   # partly outside the map
        [0, 18.0, 14.0, 25.0, 20.0],  # mostly outside
        [1, 4.0, 4.0, 4.5, 4.2],     # tiny
        [0, 0.0, 0.0, 21.0, 17.0],
    ], dtype=dtype)
    return x, rois


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("ratio", [0, 2])
def test_roi_align_matches_naive(ops, mode, aligned, ratio):
    x, rois = roi_inputs(torch.float64, seed=20)
    got = ops.roi_align(x, rois, (3, 4), 0.5, ratio, mode, aligned)
    ref = naive_roi_align(x, rois, (3, 4), 0.5, ratio, mode, aligned)
    torch.testing.assert_close(got, ref)


@pytest.mark.parametrize("mode,aligned,ratio", [("avg", True, 0),
                                                ("avg", False, 2),
                                                ("max", True, 2)])
def test_roi_align_gradcheck(ops, mode, aligned, ratio):
    x, rois = roi_inputs(torch.float64, seed=21)
    x.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda t: ops.roi_align(t, rois, (2, 3), 0.5, ratio, mode, aligned),
        (x, ))


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ratio", [0, 2])
def test_roi_align_samples_inverted_rois_as_the_cuda_kernel(ops, mode, ratio):
    """Aligned RoIs with x2 < x1 or y2 < y1 (Sparse R-CNN's early boxes): mmcv's CUDA
    kernel samples them backwards (fixed grid) or not at all (adaptive grid), where its
    CPU kernel raises; here as the CUDA kernel, against the same naive reference."""
    x, _ = roi_inputs(torch.float64, seed=23)
    rois = torch.tensor([[0, 9.0, 2.0, 3.0, 12.0],     # x2 < x1
                         [1, 2.0, 14.0, 10.0, 1.0],    # y2 < y1
                         [0, 20.0, 16.0, 1.0, 3.0],    # both, by more than a bin
                         [1, 1.0, 2.0, 15.0, 12.0]], dtype=torch.float64)
    got = ops.roi_align(x, rois, (3, 4), 0.5, ratio, mode, True)
    ref = naive_roi_align(x, rois, (3, 4), 0.5, ratio, mode, True)
    torch.testing.assert_close(got, ref)
    if ratio == 0 and mode == "avg":
        assert got[:3].abs().sum() == 0 and got[3].abs().sum() > 0


def test_roi_align_no_rois(ops):
    x, _ = roi_inputs(torch.float32, seed=22)
    out = ops.roi_align(x, torch.zeros(0, 5), (2, 2), 1.0, 0, "avg", True)
    assert out.shape == (0, 3, 2, 2)


# ---------------------------------------------------------------------------
# deformable convolution
# ---------------------------------------------------------------------------


def naive_deform_conv(x, offset, mask, weight, bias, stride, pad, dil,
                      groups, dgroups):
    b, c, h, w = x.shape
    cout, cg, kh, kw = weight.shape
    ho = (h + 2 * pad - (dil * (kh - 1) + 1)) // stride + 1
    wo = (w + 2 * pad - (dil * (kw - 1) + 1)) // stride + 1
    out = torch.zeros(b, cout, ho, wo, dtype=x.dtype)
    cpd = c // dgroups
    imgs = x.tolist()
    for bi in range(b):
        for oc in range(cout):
            g = oc // (cout // groups)
            for oy in range(ho):
                for ox in range(wo):
                    acc = 0.0 if bias is None else float(bias[oc])
                    for ci in range(cg):
                        cin = g * cg + ci
                        dg = cin // cpd
                        for i in range(kh):
                            for j in range(kw):
                                k = i * kw + j
                                dy = float(offset[bi, dg * 2 * kh * kw + 2 * k,
                                                  oy, ox])
                                dx = float(offset[bi,
                                                  dg * 2 * kh * kw + 2 * k + 1,
                                                  oy, ox])
                                m = 1.0 if mask is None else float(
                                    mask[bi, dg * kh * kw + k, oy, ox])
                                y = oy * stride - pad + i * dil + dy
                                xx = ox * stride - pad + j * dil + dx
                                v = naive_bilinear_zero(imgs[bi][cin], y, xx)
                                acc += float(weight[oc, ci, i, j]) * v * m
                    out[bi, oc, oy, ox] = acc
    return out


def deform_inputs(dtype, seed, groups=2, dgroups=2, stride=1, pad=1, dil=1,
                  b=1, c=4, h=5, w=6, cout=4, k=3, scale=1.5):
    g = gen(seed)
    x = torch.randn(b, c, h, w, generator=g, dtype=dtype)
    weight = torch.randn(cout, c // groups, k, k, generator=g, dtype=dtype)
    ho = (h + 2 * pad - (dil * (k - 1) + 1)) // stride + 1
    wo = (w + 2 * pad - (dil * (k - 1) + 1)) // stride + 1
    offset = (torch.rand(b, dgroups * 2 * k * k, ho, wo, generator=g,
                         dtype=dtype) - 0.5) * 2 * scale
    mask = torch.rand(b, dgroups * k * k, ho, wo, generator=g, dtype=dtype)
    bias = torch.randn(cout, generator=g, dtype=dtype)
    return x, offset, mask, weight, bias


@pytest.mark.parametrize("stride,pad,dil", [(1, 1, 1), (2, 0, 2)])
def test_deform_conv_matches_naive(ops, stride, pad, dil):
    x, off, _, wt, _ = deform_inputs(torch.float64, 23, stride=stride,
                                     pad=pad, dil=dil, h=7, w=7)
    got = ops.deform_conv2d(x, off, wt, stride, pad, dil, 2, 2)
    ref = naive_deform_conv(x, off, None, wt, None, stride, pad, dil, 2, 2)
    torch.testing.assert_close(got, ref)


def test_modulated_deform_conv_matches_naive(ops):
    x, off, mask, wt, bias = deform_inputs(torch.float64, 24, groups=1,
                                           dgroups=2)
    got = ops.modulated_deform_conv2d(x, off, mask, wt, bias, 1, 1, 1, 1, 2)
    ref = naive_deform_conv(x, off, mask, wt, bias, 1, 1, 1, 1, 2)
    torch.testing.assert_close(got, ref)


@pytest.mark.parametrize("stride,pad,dil,groups", [(1, 1, 1, 1),
                                                   (2, 2, 2, 2)])
def test_zero_offsets_equal_conv2d(ops, stride, pad, dil, groups):
    x, off, mask, wt, bias = deform_inputs(torch.float32, 25, groups=groups,
                                           dgroups=1, stride=stride, pad=pad,
                                           dil=dil, b=2, h=8, w=9)
    off = torch.zeros_like(off)
    ref = torch.nn.functional.conv2d(x, wt, None, stride, pad, dil, groups)
    got = ops.deform_conv2d(x, off, wt, stride, pad, dil, groups, 1)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    ones = torch.ones_like(mask)
    got_m = ops.modulated_deform_conv2d(x, off, ones, wt, bias, stride, pad,
                                        dil, groups, 1)
    torch.testing.assert_close(got_m, ref + bias.view(1, -1, 1, 1),
                               rtol=1e-4, atol=1e-4)


def test_deform_conv_gradcheck(ops):
    x, off, _, wt, _ = deform_inputs(torch.float64, 26, c=2, cout=2, h=4,
                                     w=4, groups=1, dgroups=1, b=2)
    for t in (x, off, wt):
        t.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a, o, w_: ops.deform_conv2d(a, o, w_, 1, 1, 1, 1, 1),
        (x, off, wt))


def test_modulated_deform_conv_gradcheck(ops):
    x, off, mask, wt, bias = deform_inputs(torch.float64, 27, c=2, cout=2,
                                           h=4, w=4, groups=1, dgroups=2)
    for t in (x, off, mask, wt, bias):
        t.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a, o, m, w_, b_: ops.modulated_deform_conv2d(
            a, o, m, w_, b_, 1, 1, 1, 1, 2), (x, off, mask, wt, bias))


# ---------------------------------------------------------------------------
# voxelization and voxel scatter
# ---------------------------------------------------------------------------

VOXEL = [0.5, 0.5, 1.0]
RANGE = [0.0, -1.0, -1.0, 2.0, 1.0, 1.0]


def voxel_points(n=300, seed=28):
    g = gen(seed)
    pts = torch.rand(n, 4, generator=g)
    # Spread slightly beyond RANGE so some points must be dropped.
    pts[:, 0] = pts[:, 0] * 2.4 - 0.2
    pts[:, 1] = pts[:, 1] * 2.4 - 1.2
    pts[:, 2] = pts[:, 2] * 2.4 - 1.2
    return pts


def naive_voxel_coord(p):
    grid = [round((RANGE[3 + a] - RANGE[a]) / VOXEL[a]) for a in range(3)]
    c = [math.floor((p[a] - RANGE[a]) / VOXEL[a]) for a in range(3)]
    if any(c[a] < 0 or c[a] >= grid[a] for a in range(3)):
        return None
    return (c[2], c[1], c[0])


def test_dynamic_voxelize_matches_naive(ops):
    pts = voxel_points()
    got = ops.voxelization(pts, VOXEL, RANGE, -1)
    ref = [naive_voxel_coord(p) or (-1, -1, -1)
           for p in pts.double().tolist()]
    assert got.tolist() == [list(r) for r in ref]
    assert (got == -1).all(1).any()  # out-of-range points were dropped


@pytest.mark.parametrize("max_points,max_voxels", [(5, 100), (3, 7),
                                                   (50, 1000)])
def test_hard_voxelize_matches_naive(ops, max_points, max_voxels):
    pts = voxel_points()
    voxels, coors, counts = ops.voxelization(pts, VOXEL, RANGE, max_points,
                                             max_voxels)
    slots: Dict[tuple, int] = {}
    ref_vox, ref_coor, ref_cnt = [], [], []
    for p in pts.tolist():
        c = naive_voxel_coord(p)
        if c is None:
            continue
        if c not in slots:
            if len(slots) >= max_voxels:
                continue
            slots[c] = len(slots)
            ref_coor.append(list(c))
            ref_vox.append([])
            ref_cnt.append(0)
        v = slots[c]
        if ref_cnt[v] < max_points:
            ref_vox[v].append(p)
            ref_cnt[v] += 1
    assert coors.tolist() == ref_coor
    assert counts.tolist() == ref_cnt
    dense = torch.zeros(len(ref_vox), max_points, 4)
    for v, plist in enumerate(ref_vox):
        if plist:
            dense[v, :len(plist)] = torch.tensor(plist)
    torch.testing.assert_close(voxels, dense)


def test_hard_voxelize_all_points_outside(ops):
    pts = torch.full((10, 4), 50.0)
    voxels, coors, counts = ops.voxelization(pts, VOXEL, RANGE, 5, 20)
    assert voxels.shape[0] == coors.shape[0] == counts.shape[0] == 0


def naive_scatter(feats, coors, reduce):
    groups: Dict[tuple, List[int]] = {}
    for i, c in enumerate(coors.tolist()):
        if min(c) < 0:
            continue
        groups.setdefault(tuple(c), []).append(i)
    keys = sorted(groups)
    out = []
    for k in keys:
        rows = feats[groups[k]]
        out.append({"max": rows.max(0).values, "sum": rows.sum(0),
                    "mean": rows.mean(0)}[reduce])
    return torch.stack(out), torch.tensor(keys, dtype=coors.dtype)


@pytest.mark.parametrize("reduce", ["max", "sum", "mean"])
def test_dynamic_scatter_matches_naive_and_gradcheck(ops, reduce):
    from mmcv.ops.scatter_points import dynamic_scatter
    g = gen(29)
    coors = torch.randint(0, 3, (40, 3), generator=g, dtype=torch.int32)
    coors[::7] = -1
    feats = torch.randn(40, 3, generator=g, dtype=torch.float64)
    got, got_coors = dynamic_scatter(feats, coors, reduce)
    ref, ref_coors = naive_scatter(feats, coors, reduce)
    torch.testing.assert_close(got, ref)
    assert got_coors.tolist() == ref_coors.tolist()
    feats.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda f: dynamic_scatter(f, coors, reduce)[0], (feats, ))


# ---------------------------------------------------------------------------
# 3D boxes
# ---------------------------------------------------------------------------


def random_boxes3d(n, seed, scale=6.0):
    g = gen(seed)
    xyz = torch.rand(n, 3, generator=g) * scale
    dims = torch.rand(n, 3, generator=g) * 2 + 0.5
    yaw = (torch.rand(n, 1, generator=g) - 0.5) * 2 * math.pi
    return torch.cat([xyz, dims, yaw], dim=1)


def naive_bev(box):
    return [box[0], box[1], box[3], box[4], box[6]]


def test_boxes_overlap_bev_and_iou3d_match_naive(ops):
    a, b = random_boxes3d(7, seed=30), random_boxes3d(6, seed=31)
    got = ops.boxes_overlap_bev(a, b)
    ref = torch.tensor([[naive_clip_area(naive_rect(naive_bev(p)),
                                         naive_rect(naive_bev(q)))
                         for q in b.tolist()] for p in a.tolist()])
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    iou = ops.boxes_iou3d(a, b)
    ref3d = torch.zeros(7, 6)
    for i, p in enumerate(a.tolist()):
        for j, q in enumerate(b.tolist()):
            hz = max(0.0, min(p[2] + p[5] / 2, q[2] + q[5] / 2) -
                     max(p[2] - p[5] / 2, q[2] - q[5] / 2))
            inter = float(ref[i, j]) * hz
            vol = p[3] * p[4] * p[5] + q[3] * q[4] * q[5]
            ref3d[i, j] = inter / max(vol - inter, 1e-6)
    torch.testing.assert_close(iou, ref3d, rtol=1e-4, atol=1e-4)


def test_nms3d_and_normal_match_naive(ops):
    boxes = random_boxes3d(50, seed=32)
    scores = torch.rand(50, generator=gen(33))
    order = scores.sort(0, descending=True)[1].tolist()
    bl = boxes.tolist()

    def bev_iou(i, j):
        p, q = naive_bev(bl[i]), naive_bev(bl[j])
        inter = naive_clip_area(naive_rect(p), naive_rect(q))
        return inter / max(p[2] * p[3] + q[2] * q[3] - inter, 1e-8)

    def normal_iou(i, j):
        p, q = bl[i], bl[j]
        to_xyxy = (lambda b: [b[0] - b[3] / 2, b[1] - b[4] / 2,
                              b[0] + b[3] / 2, b[1] + b[4] / 2])
        return naive_iou(to_xyxy(p), to_xyxy(q))

    keep = ops.nms3d(boxes, scores, 0.1)
    assert keep.tolist() == naive_greedy(50, order,
                                         lambda i, j: bev_iou(i, j) > 0.1)
    keep_n = ops.nms3d_normal(boxes, scores, 0.1)
    assert keep_n.tolist() == naive_greedy(
        50, order, lambda i, j: normal_iou(i, j) > 0.1)
    assert ops.nms3d(torch.zeros(0, 7), torch.zeros(0), 0.1).numel() == 0


def naive_in_box(p, b):
    cz = b[2] + b[5] / 2
    if abs(p[2] - cz) > b[5] / 2:
        return False
    c, s = math.cos(-b[6]), math.sin(-b[6])
    sx, sy = p[0] - b[0], p[1] - b[1]
    lx, ly = sx * c - sy * s, sx * s + sy * c
    return abs(lx) < b[3] / 2 and abs(ly) < b[4] / 2


def test_points_in_boxes_match_naive(ops, ext):
    boxes = random_boxes3d(5, seed=34, scale=3).view(1, 5, 7)
    pts = (torch.rand(1, 200, 3, generator=gen(35)) * 4 - 0.5)
    ref_all = [[int(naive_in_box(p, b)) for b in boxes[0].tolist()]
               for p in pts[0].tolist()]
    ref_part = [next((k for k, v in enumerate(r) if v), -1) for r in ref_all]
    assert sum(map(sum, ref_all)) > 0  # the test is not vacuous
    got_cpu = ops.points_in_boxes_cpu(pts, boxes)
    assert got_cpu[0].tolist() == ref_all
    part = torch.full((1, 200), -1, dtype=torch.int)
    ext.points_in_boxes_part_forward(boxes, pts, part)
    assert part[0].tolist() == ref_part
    alls = torch.zeros((1, 200, 5), dtype=torch.int)
    ext.points_in_boxes_all_forward(boxes, pts, alls)
    assert alls[0].tolist() == ref_all


# ---------------------------------------------------------------------------
# sigmoid focal loss
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("weighted", [False, True])
def test_sigmoid_focal_loss_matches_the_formula_and_autograd(ops, weighted):
    """mmcv.ops.sigmoid_focal_loss on the kernels against the focal loss written out,
    forward and backward, with mmdet's background label (num_classes) among the targets."""
    from mmcv.ops import sigmoid_focal_loss
    logits = torch.randn(9, 4, generator=gen(3), dtype=torch.float64)
    target = torch.tensor([0, 3, 4, 1, 4, 2, 0, 4, 3])
    weight = torch.rand(4, generator=gen(4), dtype=torch.float64) if weighted else None
    ours = logits.clone().requires_grad_(True)
    loss = sigmoid_focal_loss(ours, target, 2.0, 0.25, weight, "sum")
    loss.backward()
    reference = logits.clone().requires_grad_(True)
    p = torch.sigmoid(reference)
    positive = target[:, None] == torch.arange(4)[None, :]
    elementwise = torch.where(positive, -0.25 * (1 - p) ** 2 * torch.log(p),
                              -0.75 * p ** 2 * torch.log(1 - p))
    if weighted:
        rows = torch.where(target < 4, weight[target.clamp(max=3)], torch.ones(9, dtype=torch.float64))
        elementwise = elementwise * rows[:, None]
    elementwise.sum().backward()
    assert torch.allclose(loss, elementwise.sum().detach())
    assert torch.allclose(ours.grad, reference.grad)


# ---------------------------------------------------------------------------
# softmax focal loss
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_softmax_focal_loss_matches_the_formula_and_autograd(ops, weighted, reduction):
    """mmcv.ops.softmax_focal_loss on the kernels against -alpha (1 - p)^gamma log p of
    the label's softmax probability, written with autograd: values and the gradient
    with respect to the logits (mmcv's kernel differentiates through the softmax).
    mmcv's own backward multiplies the (N, C) gradient by the incoming one, which only
    broadcasts for a reduced loss: with ``reduction='none'`` only values are compared."""
    from mmcv.ops import softmax_focal_loss
    logits = torch.randn(11, 5, generator=gen(5), dtype=torch.float64)
    target = torch.tensor([0, 4, 2, 1, 4, 3, 0, 2, 2, 1, 3])
    weight = torch.rand(5, generator=gen(6), dtype=torch.float64) if weighted else None
    ours = logits.clone().requires_grad_(reduction != "none")
    loss = softmax_focal_loss(ours, target, 1.5, 0.25, weight, reduction)
    reference = logits.clone().requires_grad_(True)
    p = torch.softmax(reference, dim=1).gather(1, target[:, None])[:, 0]
    per_sample = -0.25 * (1 - p) ** 1.5 * torch.log(p)
    if weighted:
        per_sample = per_sample * weight[target]
    expected = {"none": per_sample, "mean": per_sample.sum() / 11,
                "sum": per_sample.sum()}[reduction]
    assert torch.allclose(loss, expected.detach())
    if reduction != "none":
        (loss * 0.7).backward()
        (expected * 0.7).backward()
        assert torch.allclose(ours.grad, reference.grad)


def test_softmax_focal_loss_passes_gradcheck(ops):
    from mmcv.ops.focal_loss import SoftmaxFocalLossFunction
    logits = torch.randn(6, 3, generator=gen(8), dtype=torch.float64, requires_grad=True)
    target = torch.tensor([2, 0, 1, 1, 0, 2])
    weight = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda x: SoftmaxFocalLossFunction.apply(x, target, 2.0, 0.25, weight, "sum"),
        (logits,))


def test_softmax_focal_loss_ignores_negative_labels(ops):
    """mmcv's kernel skips a sample labelled -1: no loss, no gradient."""
    from mmcv.ops import softmax_focal_loss
    logits = torch.randn(4, 3, generator=gen(9), dtype=torch.float64, requires_grad=True)
    target = torch.tensor([1, -1, 0, -1])
    loss = softmax_focal_loss(logits.detach(), target, 2.0, 0.25, None, "none")
    softmax_focal_loss(logits, target, 2.0, 0.25, None, "sum").backward()
    assert loss[1] == 0 and loss[3] == 0 and bool((loss[[0, 2]] > 0).all())
    assert logits.grad[[1, 3]].abs().sum() == 0 and logits.grad[[0, 2]].abs().sum() > 0


# ---------------------------------------------------------------------------
# chamfer distance
# ---------------------------------------------------------------------------

def ref_chamfer(xyz1, xyz2):
    """Loops: each point's squared distance to the other set's first nearest point."""
    def nearest(a, b):
        dist, idx = [], []
        for batch_a, batch_b in zip(a.tolist(), b.tolist()):
            row_d, row_i = [], []
            for point in batch_a:
                best, best_j = None, 0
                for j, other in enumerate(batch_b):
                    d = sum((u - v) ** 2 for u, v in zip(point, other))
                    if best is None or d < best:
                        best, best_j = d, j
                row_d.append(best)
                row_i.append(best_j)
            dist.append(row_d)
            idx.append(row_i)
        return dist, idx
    return nearest(xyz1, xyz2) + nearest(xyz2, xyz1)


@pytest.mark.parametrize("n, m", [(7, 5), (1, 9), (16, 16)])
def test_chamfer_distance_matches_the_loop_reference(ops, n, m):
    from mmcv.ops import chamfer_distance
    xyz1 = torch.rand(2, n, 2, generator=gen(n))
    # a grid of quarter steps: exact ties between candidates, resolved to the lowest index
    xyz2 = torch.randint(0, 4, (2, m, 2), generator=gen(m)).float() / 4
    dist1, dist2, idx1, idx2 = chamfer_distance(xyz1, xyz2)
    ref_d1, ref_i1, ref_d2, ref_i2 = ref_chamfer(xyz1, xyz2)
    assert torch.allclose(dist1, torch.tensor(ref_d1))
    assert torch.allclose(dist2, torch.tensor(ref_d2))
    assert idx1.tolist() == ref_i1 and idx2.tolist() == ref_i2
    assert idx1.dtype == torch.int32


def test_chamfer_distance_gradients(ops):
    """The backward kernel against autograd through the chosen pairs, and gradcheck."""
    from mmcv.ops import chamfer_distance
    xyz1 = torch.rand(2, 6, 2, generator=gen(10), dtype=torch.float64, requires_grad=True)
    xyz2 = torch.rand(2, 4, 2, generator=gen(11), dtype=torch.float64, requires_grad=True)
    dist1, dist2, idx1, idx2 = chamfer_distance(xyz1, xyz2)
    w1 = torch.rand(dist1.shape, generator=gen(12), dtype=torch.float64)
    w2 = torch.rand(dist2.shape, generator=gen(13), dtype=torch.float64)
    ((dist1 * w1).sum() + (dist2 * w2).sum()).backward()
    a = xyz1.detach().clone().requires_grad_(True)
    b = xyz2.detach().clone().requires_grad_(True)
    pairs1 = torch.gather(b, 1, idx1.long()[..., None].expand(-1, -1, 2))
    pairs2 = torch.gather(a, 1, idx2.long()[..., None].expand(-1, -1, 2))
    (((a - pairs1) ** 2).sum(-1) * w1).sum().add(
        (((b - pairs2) ** 2).sum(-1) * w2).sum()).backward()
    assert torch.allclose(xyz1.grad, a.grad) and torch.allclose(xyz2.grad, b.grad)
    assert torch.autograd.gradcheck(
        lambda p, q: tuple(chamfer_distance(p, q)[:2]), (xyz1.detach().requires_grad_(True),
                                                        xyz2.detach().requires_grad_(True)))

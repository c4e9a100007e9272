"""Time lazypatch's pure-PyTorch ``mmcv._ext`` kernels.

Every row compares a kernel with a plain formulation of the same arithmetic, on
the same inputs: MSDA with mmcv's own ``multi_scale_deformable_attn_pytorch``,
the point-cloud kernels with whole distance matrices and advanced indexing, the
others with the naive per-box / per-pixel loop references of
``tests/packs/shared/test_mmcv_ext_kernels.py``. Such a row has the budget "at most 1.0x"
(``LIKE_FOR_LIKE``); a baseline that skips part of the work (``F.conv2d`` for a
deformable convolution) is only a lower bound (``LOWER_BOUND``, no verdict). Both
sides are timed in alternation, in per-thread CPU time on one torch thread, so that
a shared machine's load weighs on both alike. Prints a Markdown table of medians
and their ratio.

Run from the repository root::

    .venv/bin/python benchmarks/packs/shared/bench_mmcv_ops.py [--quick] [--json] [--device cuda]
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Tuple

# The repository (this file lies in benchmarks/packs/<pack>/).
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))


def _load_references():
    path = os.path.join(ROOT, "tests", "packs", "shared", "test_mmcv_ext_kernels.py")
    spec = importlib.util.spec_from_file_location("_ext_refs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_stack() -> None:
    """Import torch and mmcv.ops the way a user does: lazypatch provides mmcv._ext.

    Done in ``bench()``, not at import, so the benchmark runner can import
    this module (for ``run``) without loading torch or mmcv into its process.
    """
    global torch, ops, MultiScaleDeformableAttnFunction, multi_scale_deformable_attn_pytorch
    global dynamic_scatter, ref
    # Activate first (not an `import` line, which isort would move below mmcv):
    # the openmmlab pack then provides mmcv._ext when mmcv.ops is imported.
    importlib.import_module("lazypatch.auto")
    import mmcv.ops as ops
    import torch
    from mmcv.ops.multi_scale_deform_attn import (
        MultiScaleDeformableAttnFunction,
        multi_scale_deformable_attn_pytorch,
    )
    from mmcv.ops.scatter_points import dynamic_scatter

    sys.path.insert(0, os.path.join(ROOT, "tests"))
    ref = _load_references()


def median_ms(fn: Callable[[], object], reps: int, device: str) -> float:
    """Median time of ``fn`` in milliseconds (after warm-up calls): per-thread CPU
    time on the CPU, wall time with a synchronisation on CUDA."""
    for _ in range(2 if reps > 1 else 1):
        fn()
    return statistics.median(_timed_ms(fn, device) for _ in range(reps))


def _timed_ms(fn: Callable[[], object], device: str) -> float:
    """One call of ``fn``: per-thread CPU time on the CPU (the caller runs one torch
    thread, so other sessions' load on a shared machine does not count)."""
    if device == "cuda":
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) * 1e3
    start = time.thread_time()
    fn()
    return (time.thread_time() - start) * 1e3


def paired_ms(ours: Callable[[], object], theirs: Callable[[], object], pairs: int,
              device: str = "cpu") -> Tuple[float, float, float]:
    """Medians (ms) of ``ours`` and ``theirs`` run alternately (A B, then B A, ...), so
    that a change in the machine's load weighs on both alike, and the median of the
    ``pairs`` pairs' ratios."""
    for fn in (ours, theirs):
        fn()
    ours_times: List[float] = []
    theirs_times: List[float] = []
    for pair in range(pairs):
        if pair % 2:
            theirs_times.append(_timed_ms(theirs, device))
            ours_times.append(_timed_ms(ours, device))
        else:
            ours_times.append(_timed_ms(ours, device))
            theirs_times.append(_timed_ms(theirs, device))
    ratio = statistics.median(a / b for a, b in zip(ours_times, theirs_times))
    return statistics.median(ours_times), statistics.median(theirs_times), ratio


#: The baseline computes the same arithmetic: the kernel must not lose to it (≤ 1.0x).
LIKE_FOR_LIKE = "like-for-like"
#: The baseline skips work no kernel can skip: a lower bound, reported without verdict.
LOWER_BOUND = "lower bound"

#: (op, size, ours ms, baseline's name, baseline ms or nan, LIKE_FOR_LIKE / LOWER_BOUND)
Row = Tuple[str, str, float, str, float, str]


def add_compared(add: Callable[..., None], pairs: int, device: str, op: str, size: str,
                 ours: Callable[[], object], reference: str, theirs: Callable[[], object],
                 kind: str = LIKE_FOR_LIKE) -> None:
    """``add`` the row of ``ours`` against ``theirs`` (the baseline named ``reference``),
    both timed ``pairs`` times in alternation."""
    ours_ms, theirs_ms, _ = paired_ms(ours, theirs, pairs, device)
    add(op, size, ours_ms, reference, theirs_ms, kind)


def bench(device: str, quick: bool, only: str = "") -> List[Row]:
    _load_stack()
    dev = torch.device(device)
    reps, naive_reps = (5, 1) if quick else (20, 3)
    rows: List[Row] = []

    def add(op, size, ours, ref_name, theirs, kind=LIKE_FOR_LIKE):
        rows.append((op, size, ours, ref_name, theirs, kind))

    compare = functools.partial(add_compared, add, max(naive_reps, 1), device)

    if only:
        return bench_sections(device, quick, rows, add, dev, reps, only)
    # -- MSDA at Deformable-DETR-like sizes, vs mmcv's pytorch version --
    add_msda_rows(add, dev, device, reps, quick)

    # -- NMS family vs naive loops --
    boxes = ref.random_boxes(500, seed=1, scale=200)
    scores = torch.rand(500, generator=torch.Generator().manual_seed(2))
    order = scores.sort(0, descending=True)[1].tolist()
    bl = boxes.tolist()
    compare("nms", "500 boxes", lambda: ops.nms(boxes.to(dev), scores.to(dev), 0.5),
            "naive loop (greedy, one IoU at a time)",
            lambda: ref.naive_greedy(500, order, lambda i, j: ref.naive_iou(bl[i], bl[j]) > 0.5))
    sb = ref.random_boxes(200, seed=3, scale=60)
    ss = torch.rand(200, generator=torch.Generator().manual_seed(4))
    compare("softnms (linear)", "200 boxes",
            lambda: ops.soft_nms(sb, ss, 0.3, 0.5, 0.001, "linear"),
            "naive loop (rescore every box after each pick)",
            lambda: ref.naive_softnms(sb.tolist(), ss.tolist(), 0.3, 0.5, 0.001, 1, 0))

    # -- rotated boxes --
    rb = ref.random_rotated(200, seed=5, scale=40)
    rs = torch.rand(200, generator=torch.Generator().manual_seed(6))
    rorder = rs.sort(0, descending=True)[1].tolist()
    rl = rb.tolist()
    compare("nms_rotated", "200 boxes", lambda: ops.nms_rotated(rb.to(dev), rs.to(dev), 0.3),
            "naive polygon clipping loop",
            lambda: ref.naive_greedy(200, rorder,
                                     lambda i, j: ref.naive_rotated_iou(rl[i], rl[j]) > 0.3))
    add_rotated_nms_rows(add, dev, device, 1000 if quick else 3500)
    r1, r2 = ref.random_rotated(100, seed=7), ref.random_rotated(100, seed=8)
    l1, l2 = r1.tolist(), r2.tolist()
    compare("box_iou_rotated", "100x100", lambda: ops.box_iou_rotated(r1.to(dev), r2.to(dev)),
            "naive polygon clipping loop",
            lambda: [[ref.naive_rotated_iou(a, b) for b in l2] for a in l1])

    # -- RoIAlign --
    gx = torch.Generator().manual_seed(9)
    x = torch.randn(2, 16, 32, 32, generator=gx)
    xy = torch.rand(32, 2, generator=gx) * 40
    wh = torch.rand(32, 2, generator=gx) * 24 + 4
    rois = torch.cat([torch.randint(0, 2, (32, 1), generator=gx).float(), xy,
                      xy + wh], dim=1)
    for mode in ("avg", "max"):
        compare(f"roi_align_forward ({mode})", "x2x16x32x32, 32 rois, 7x7, sr2",
                lambda mode=mode: ops.roi_align(x.to(dev), rois.to(dev), (7, 7), 0.5, 2, mode,
                                                True),
                "naive loop (bilinear samples one bin at a time)",
                lambda mode=mode: ref.naive_roi_align(x, rois, (7, 7), 0.5, 2, mode, True))
    xg = x.to(dev).requires_grad_()
    add("roi_align fwd+bwd (avg)", "same",
        median_ms(lambda: ops.roi_align(xg, rois.to(dev), (7, 7), 0.5, 2,
                                        "avg", True).sum().backward(), reps,
                  device), "-", float("nan"))

    add_deform_rows(add, dev, device, reps, naive_reps)

    # -- voxelization / scatter --
    pts = ref.voxel_points(20000, seed=12)
    pl = pts.tolist()

    def naive_hard():
        slots, cnt = {}, []
        for p in pl:
            c = ref.naive_voxel_coord(p)
            if c is None:
                continue
            if c not in slots:
                if len(slots) >= 20000:
                    continue
                slots[c] = len(slots)
                cnt.append(0)
            if cnt[slots[c]] < 35:
                cnt[slots[c]] += 1

    compare("hard_voxelize_forward", "20000 points",
            lambda: ops.voxelization(pts.to(dev), ref.VOXEL, ref.RANGE, 35, 20000),
            "naive loop (one point at a time)", naive_hard)
    compare("dynamic_voxelize_forward", "20000 points",
            lambda: ops.voxelization(pts.to(dev), ref.VOXEL, ref.RANGE, -1),
            "naive loop (one point at a time)", lambda: [ref.naive_voxel_coord(p) for p in pl])
    gs = torch.Generator().manual_seed(13)
    coors = torch.randint(0, 20, (5000, 3), generator=gs, dtype=torch.int32)
    feats = torch.randn(5000, 16, generator=gs)
    compare("dynamic_point_to_voxel_forward (max)", "5000 points, 16 ch",
            lambda: dynamic_scatter(feats.to(dev), coors.to(dev), "max"),
            "naive loop (one point at a time)", lambda: ref.naive_scatter(feats, coors, "max"))

    # -- 3D boxes --
    b3 = ref.random_boxes3d(200, seed=14, scale=30)
    s3 = torch.rand(200, generator=torch.Generator().manual_seed(15))
    o3 = s3.sort(0, descending=True)[1].tolist()
    l3 = b3.tolist()

    def bev_iou(i, j):
        p, q = ref.naive_bev(l3[i]), ref.naive_bev(l3[j])
        inter = ref.naive_clip_area(ref.naive_rect(p), ref.naive_rect(q))
        return inter / max(p[2] * p[3] + q[2] * q[3] - inter, 1e-8)

    compare("iou3d_nms3d_forward", "200 boxes", lambda: ops.nms3d(b3.to(dev), s3.to(dev), 0.1),
            "naive polygon clipping loop",
            lambda: ref.naive_greedy(200, o3, lambda i, j: bev_iou(i, j) > 0.1))
    pb = ref.random_boxes3d(10, seed=16, scale=10).view(1, 10, 7)
    pp = torch.rand(1, 2000, 3, generator=torch.Generator().manual_seed(17)
                    ) * 10
    compare("points_in_boxes_cpu_forward", "2000 points, 10 boxes",
            lambda: ops.points_in_boxes_cpu(pp, pb), "naive loop (one point and box at a time)",
            lambda: [[ref.naive_in_box(p, b) for b in pb[0].tolist()] for p in pp[0].tolist()])
    add_point_rows(add, reps, quick)
    return rows


#: (levels (h, w), queries or None for one query per key) of the MSDA sizes:
#: small maps with DETR's 900 queries; Deformable DETR's own levels (an 800 x 1200
#: image at strides 8-64) with 900 decoder queries; the half-size image's encoder,
#: where every key is a query.
MSDA_SIZES = [
    ([(64, 64), (32, 32), (16, 16), (8, 8)], 900),
    ([(100, 150), (50, 75), (25, 38), (13, 19)], 900),
    ([(50, 75), (25, 38), (13, 19), (7, 10)], None),
]


def add_msda_rows(add, dev, device: str, reps: int, quick: bool = False) -> None:
    """MSDA forward and forward+backward against mmcv's own
    ``multi_scale_deformable_attn_pytorch`` (the budget is 1.0x), at each of
    ``MSDA_SIZES``, on one torch thread; prints lazypatch / mmcv to stderr."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for levels, queries in MSDA_SIZES[:2] if quick else MSDA_SIZES:
            add_msda_size(add, dev, device, reps, levels, queries)
    finally:
        torch.set_num_threads(threads)


def add_msda_size(add, dev, device: str, reps: int, levels, queries) -> None:
    g = torch.Generator().manual_seed(0)
    shapes = torch.tensor(levels)
    starts = torch.cat([shapes.new_zeros(1),
                        (shapes[:, 0] * shapes[:, 1]).cumsum(0)[:-1]])
    keys = int((shapes[:, 0] * shapes[:, 1]).sum())
    bs, heads, dim, pts = 2, 8, 32, 4
    nq = keys if queries is None else queries
    value = torch.randn(bs, keys, heads, dim, generator=g).to(dev)
    loc = torch.rand(bs, nq, heads, len(levels), pts, 2, generator=g).to(dev)
    attn = torch.rand(bs, nq, heads, len(levels), pts, generator=g).to(dev)
    shapes, starts = shapes.to(dev), starts.to(dev)
    size = f"bs{bs} q{nq} h{heads} d{dim} L{len(levels)} P{pts}, level 0 {levels[0][0]}x{levels[0][1]}"
    clock = "wall time" if device == "cuda" else "CPU time"
    with torch.no_grad():
        ours, theirs, ratio = paired_ms(
            lambda: MultiScaleDeformableAttnFunction.apply(value, shapes, starts, loc, attn, 64),
            lambda: multi_scale_deformable_attn_pytorch(value, shapes, loc, attn), reps, device)
    add("ms_deform_attn_forward", size, ours, "mmcv multi_scale_deformable_attn_pytorch",
        theirs)
    print(f"msda forward [{size}]: lazypatch / mmcv = {ratio:.2f}x "
          f"(median of paired ratios; 1 torch thread, {clock})", file=sys.stderr)
    leaves = [t.clone().requires_grad_() for t in (value, loc, attn)]

    def ours_fb():
        MultiScaleDeformableAttnFunction.apply(
            leaves[0], shapes, starts, leaves[1], leaves[2], 64).sum().backward()

    def theirs_fb():
        multi_scale_deformable_attn_pytorch(leaves[0], shapes, leaves[1],
                                            leaves[2]).sum().backward()

    ours, theirs, ratio = paired_ms(ours_fb, theirs_fb, reps, device)
    add("ms_deform_attn fwd+bwd", size, ours,
        "mmcv multi_scale_deformable_attn_pytorch (autograd)", theirs)
    print(f"msda fwd+bwd [{size}]: lazypatch / mmcv = {ratio:.2f}x "
          f"(median of paired ratios; 1 torch thread, {clock})", file=sys.stderr)


def bench_sections(device: str, quick: bool, rows: List[Row], add, dev, reps: int,
                   only: str) -> List[Row]:
    """Only the named sections (``--only msda,nms_rotated``)."""
    if "msda" in only:
        add_msda_rows(add, dev, device, reps, quick)
    if "nms_rotated" in only:
        add_rotated_nms_rows(add, dev, device, 1000 if quick else 3500)
    if "points" in only:
        add_point_rows(add, reps, quick)
    if "deform" in only:
        add_deform_rows(add, dev, device, reps, 1 if quick else 3)
    return rows


def add_point_rows(add, reps: int, quick: bool) -> None:
    """Point-cloud kernels (registry/shared/mmcv_ext/points.py) at PointNet++ sizes
    (VoteNet's first set abstraction: 20000 points, 2048 centres, 64 neighbours),
    against straightforward PyTorch: the whole distance matrix at once, advanced
    indexing, and furthest point sampling as the obvious loop (each step: every point's
    distance to the last pick, the running minimum, its argmax)."""
    ext = sys.modules["mmcv.ops.nms"].ext_module
    compare = functools.partial(add_compared, add, reps, "cpu")
    n, m, k = (4000, 512, 16) if quick else (20000, 2048, 64)
    g = torch.Generator().manual_seed(50)
    xyz = torch.rand(1, n, 3, generator=g)
    add_sampling_rows(add, ext, xyz, m, 3 if quick else 5)
    add_neighbour_rows(compare, ext, xyz, m, k, 0.05, g)
    if not quick:  # PointNet++ (SSG) first set abstraction: 1024 points, 512 centres, r 0.2
        small = torch.rand(1, 1024, 3, generator=g)
        add_neighbour_rows(compare, ext, small, 512, 32, 0.2, g)
        # PointNet++ MSG second set abstraction: 512 points, 128 centres, r 0.4
        add_neighbour_rows(compare, ext, torch.rand(1, 512, 3, generator=g), 128, 64, 0.4, g)
        # ScanNet-size clouds (VoteNet's, knn at 8192 points)
        add_neighbour_rows(compare, ext, torch.rand(1, 8192, 3, generator=g), 1024, 32, 0.1, g)
    add_three_nn_row(compare, ext, xyz[:, :m].contiguous(), xyz)
    add_grouping_rows(compare, ext, n, m, k, g)


def add_sampling_rows(add, ext, xyz, m: int, pairs: int) -> None:
    """furthest_point_sampling_forward of ``m`` (and of 256) samples against the
    obvious loop; the picks must agree."""
    n = xyz.shape[1]
    for samples in sorted({min(m, 256), m}):
        def ours(samples=samples):
            out = torch.zeros(1, samples, dtype=torch.int32)
            ext.furthest_point_sampling_forward(xyz, torch.full((1, n), 1e10), out, b=1, n=n,
                                                m=samples)
            return out[0].tolist()

        def plain(samples=samples):
            points, best, pick, picks = xyz[0], torch.full((n,), 1e10), 0, [0]
            for _ in range(1, samples):
                best = torch.minimum(best, ((points - points[pick]) ** 2).sum(1))
                pick = int(best.argmax())
                picks.append(pick)
            return picks

        assert ours() == plain(), "FPS variants disagree"
        add_compared(add, pairs, "cpu", "furthest_point_sampling_forward",
                     f"{n} points, {samples} samples", ours,
                     "the obvious loop: distances to the last pick, running minimum, argmax",
                     plain)


def add_grouping_rows(compare, ext, n: int, m: int, k: int, g) -> None:
    """group_points, gather_points and three_interpolate against advanced indexing;
    each side allocates its output (the kernel's with ``torch.empty``, as the
    baseline's indexing does: mmcv's own zero fill is the caller's, not the kernel's)."""
    features = torch.rand(1, 64, n, generator=g)
    index = torch.randint(0, n, (1, m, k), generator=g, dtype=torch.int32)

    def ours_group():
        out = torch.empty(1, 64, m, k)
        ext.group_points_forward(features, index, out, b=1, c=64, n=n, npoints=m, nsample=k)
        return out

    assert torch.equal(ours_group()[0], features[0][:, index[0].long()])
    compare("group_points_forward", f"64 channels, {m}x{k} groups", ours_group,
            "advanced indexing", lambda: features[0][:, index[0].long()])
    picks = torch.randint(0, n, (1, m), generator=g, dtype=torch.int32)

    def ours_gather():
        out = torch.empty(1, 64, m)
        ext.gather_points_forward(features, picks, out, b=1, c=64, n=n, npoints=m)
        return out

    assert torch.equal(ours_gather()[0], features[0][:, picks[0].long()])
    compare("gather_points_forward", f"64 channels, {n} -> {m}", ours_gather,
            "advanced indexing", lambda: features[0][:, picks[0].long()])
    weight = torch.rand(1, n, 3, generator=g)
    near = torch.randint(0, m, (1, n, 3), generator=g, dtype=torch.int32)
    coarse = torch.rand(1, 64, m, generator=g)

    def ours_interp():
        out = torch.empty(1, 64, n)
        ext.three_interpolate_forward(coarse, near, weight, out, b=1, c=64, m=m, n=n)
        return out

    compare("three_interpolate_forward", f"64 channels, {m} -> {n}", ours_interp,
            "advanced indexing, weighted sum",
            lambda: (coarse[0][:, near[0].long()] * weight[0]).sum(-1))


def add_three_nn_row(compare, ext, source, target) -> None:
    """three_nn_forward (feature propagation: each of the ``target`` points' three
    nearest ``source`` points) against ``cdist`` + ``topk``; the results must agree."""
    n, m = target.shape[1], source.shape[1]

    def ours():
        dist2 = torch.empty(1, n, 3)
        idx = torch.empty(1, n, 3, dtype=torch.int32)
        ext.three_nn_forward(target, source, dist2, idx, b=1, n=n, m=m)
        return idx

    def plain():
        return torch.cdist(target[0], source[0]).topk(3, largest=False)

    differing = ours()[0].long().sort(1)[0].ne(plain()[1].sort(1)[0]).any(1).sum()
    assert differing <= n // 1000 + 1, f"three_nn variants disagree on {differing} points"
    compare("three_nn_forward", f"{m} -> {n} points", ours, "full cdist + topk", plain)


def add_neighbour_rows(compare, ext, xyz, m: int, k: int, radius: float, g) -> None:
    """ball_query_forward and knn_forward on ``xyz`` (1, n, 3) with ``m`` centres picked
    among the points, against the same arithmetic in plain PyTorch: the whole distance
    matrix (``cdist``), then ranks by ``cumsum`` or ``topk``; the results must agree."""
    n = xyz.shape[1]
    centres = xyz[:, torch.randperm(n, generator=g)[:m]].contiguous()
    size = f"{n} points, {m} centres"

    def ours_ball():
        idx = torch.zeros(1, m, k, dtype=torch.int32)
        ext.ball_query_forward(centres, xyz, idx, b=1, n=n, m=m, min_radius=0.0,
                               max_radius=radius, nsample=k)
        return idx

    def plain_ball():
        d2 = torch.cdist(centres[0], xyz[0]) ** 2
        hit = d2 < radius ** 2
        rank = hit.cumsum(1)
        out = torch.zeros(m, k, dtype=torch.long)
        rows, cols = torch.nonzero(hit & (rank <= k), as_tuple=True)
        out[rows, rank[rows, cols] - 1] = cols
        first = out[:, :1].expand(m, k)
        return torch.where(torch.arange(k) < rank[:, -1:], out, first)

    # cdist rounds differently from the kernels (which round as CUDA does): a point
    # within rounding of the radius may fall on either side, nothing more may differ.
    differing = ours_ball()[0].long().ne(plain_ball()).any(1).sum()
    assert differing <= m // 1000 + 1, f"ball query variants disagree on {differing} centres"
    compare("ball_query_forward", f"{size}, {k} neighbours", ours_ball,
            "full distance matrix (cdist), cumsum ranks", plain_ball)

    def ours_knn():
        idx = torch.zeros(1, m, 16, dtype=torch.int32)
        ext.knn_forward(xyz, centres, idx, torch.zeros(1, m, 16), b=1, n=n, m=m, nsample=16)
        return idx

    def plain_knn():
        return torch.cdist(centres[0], xyz[0]).topk(16, largest=False)

    differing = ours_knn()[0].long().sort(1)[0].ne(plain_knn()[1].sort(1)[0]).any(1).sum()
    assert differing <= m // 1000 + 1, f"knn variants disagree on {differing} centres"
    compare("knn_forward", f"{size}, k=16", ours_knn, "full cdist + topk", plain_knn)


def add_deform_rows(add, dev, device: str, reps: int, naive_reps: int) -> None:
    """deform_conv2d and modulated_deform_conv2d: small sizes against the naive loop,
    a detector-size layer against plain PyTorch (like-for-like) and F.conv2d (bound)."""
    dx, doff, dmask, dw, db = ref.deform_inputs(torch.float32, 10, c=8,
                                                cout=8, h=12, w=12, groups=1,
                                                dgroups=1)
    naive = functools.partial(add_compared, add, max(naive_reps, 1), device)
    naive("deform_conv_forward", "1x8x12x12 -> 8, k3",
          lambda: ops.deform_conv2d(dx.to(dev), doff.to(dev), dw.to(dev), 1, 1, 1, 1, 1),
          "naive loop (one bilinear sample at a time)",
          lambda: ref.naive_deform_conv(dx, doff, None, dw, None, 1, 1, 1, 1, 1))
    naive("modulated_deform_conv_forward", "1x8x12x12 -> 8, k3",
          lambda: ops.modulated_deform_conv2d(dx.to(dev), doff.to(dev), dmask.to(dev),
                                              dw.to(dev), db.to(dev), 1, 1, 1, 1, 1),
          "naive loop (one bilinear sample at a time)",
          lambda: ref.naive_deform_conv(dx, doff, dmask, dw, db, 1, 1, 1, 1, 1))
    big = [t.to(dev) for t in ref.deform_inputs(
        torch.float32, 11, b=2, c=64, cout=64, h=64, w=64, groups=1,
        dgroups=1)]
    torch.testing.assert_close(ops.deform_conv2d(big[0], big[1], big[3], 1, 1, 1, 1, 1),
                               plain_deform_conv(big[0], big[1], big[3]), rtol=1e-4, atol=1e-3)
    compare = functools.partial(add_compared, add, reps, device)
    compare("deform_conv_forward", "2x64x64x64 -> 64, k3",
            lambda: ops.deform_conv2d(big[0], big[1], big[3], 1, 1, 1, 1, 1),
            "plain PyTorch im2col: 4 bilinear corners gathered per tap, weighted, one matmul "
            "(the same arithmetic)",
            lambda: plain_deform_conv(big[0], big[1], big[3]))
    compare("deform_conv_forward", "2x64x64x64 -> 64, k3",
            lambda: ops.deform_conv2d(big[0], big[1], big[3], 1, 1, 1, 1, 1),
            "F.conv2d (no deformation), same size: a lower bound, not the same arithmetic (the "
            "same products without sampling 9 offset taps per output, which no deformable "
            "kernel can skip: the gap is the price of the sampling; the like-for-like row is "
            "the one above)",
            lambda: torch.nn.functional.conv2d(big[0], big[3], None, 1, 1), kind=LOWER_BOUND)


def plain_deform_conv(x, offset, weight):
    """Deformable convolution (3x3, stride 1, padding 1, one group) as plain PyTorch:
    per tap, the sample point's four integer neighbours gathered from the flattened
    input (zero outside), weighted bilinearly, then the columns times the weights."""
    b, c, h, w = x.shape
    kernel = weight.shape[-1]
    flat = x.reshape(b, c, h * w)
    rows = torch.arange(h, dtype=x.dtype)[:, None]
    cols = torch.arange(w, dtype=x.dtype)[None, :]
    offset = offset.view(b, kernel * kernel, 2, h, w)
    taps = []
    for tap in range(kernel * kernel):
        y = rows - 1 + tap // kernel + offset[:, tap, 0]
        x_ = cols - 1 + tap % kernel + offset[:, tap, 1]
        y0, x0 = y.floor(), x_.floor()
        sample = x.new_zeros(b, c, h * w)
        for dy, dx in ((0, 0), (0, 1), (1, 0), (1, 1)):
            yy, xx = y0 + dy, x0 + dx
            weight_yx = (1 - (y - yy).abs()) * (1 - (x_ - xx).abs())
            inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            index = (yy.clamp(0, h - 1) * w + xx.clamp(0, w - 1)).long().view(b, 1, h * w)
            picked = flat.gather(2, index.expand(b, c, h * w))
            sample += picked * (weight_yx * inside).view(b, 1, h * w)
        taps.append(sample)
    columns = torch.stack(taps, 2).reshape(b, c * kernel * kernel, h * w)
    return (weight.reshape(weight.shape[0], -1) @ columns).view(b, -1, h, w)


def all_pairs_nms_rotated(boxes, scores, threshold: float):
    """The previous kernel: every pair's rotated IoU, then the greedy pass."""
    from lazypatch.registry.shared.mmcv_ext._greedy import greedy_keep
    from lazypatch.registry.shared.mmcv_ext.rotated import box_iou_rotated_matrix
    order = scores.sort(0, descending=True)[1]
    ordered = boxes[order]
    return order[greedy_keep(box_iou_rotated_matrix(ordered, ordered) > threshold)]


def add_rotated_nms_rows(add, dev, device: str, count: int) -> None:
    """nms_rotated on ``count`` overlapping boxes (mmdet3d's FCOS-Mono3D head test
    sends about 3,500 per call), against the previous all-pairs kernel and against
    mmcv's greedy algorithm run one pair at a time (Python polygon clipping)."""
    boxes = ref.random_rotated(count, seed=40, scale=10)
    scores = torch.rand(count, generator=torch.Generator().manual_seed(41))
    order = scores.sort(0, descending=True)[1].tolist()
    listed = boxes.tolist()
    kept = ops.nms_rotated(boxes, scores, 0.3)[1].tolist()
    previous_kept = all_pairs_nms_rotated(boxes, scores, 0.3).tolist()
    plain_kept = ref.naive_greedy(count, order,
                                  lambda i, j: ref.naive_rotated_iou(listed[i], listed[j]) > 0.3)
    # The three must agree, or the timing compares different work.
    assert kept == previous_kept == plain_kept, "nms_rotated variants disagree"
    size = f"{count} overlapping boxes, {len(kept)} kept"
    add_compared(add, 1, device, "nms_rotated", size,
                 lambda: ops.nms_rotated(boxes.to(dev), scores.to(dev), 0.3),
                 "the plain vectorized formulation (all pairs' rotated IoU in torch, then greedy: "
                 "the previous kernel)",
                 lambda: all_pairs_nms_rotated(boxes.to(dev), scores.to(dev), 0.3))
    add_compared(add, 2, device, "nms_rotated", size,
                 lambda: ops.nms_rotated(boxes.to(dev), scores.to(dev), 0.3),
                 "plain greedy, one pair at a time (mmcv's loop)",
                 lambda: ref.naive_greedy(
                     count, order, lambda i, j: ref.naive_rotated_iou(listed[i], listed[j]) > 0.3))


def run(quick: bool) -> List[Dict[str, Any]]:
    """Rows for ``benchmarks/run.py``, measured in a fresh interpreter (so that
    torch, mmcv and the provided ``mmcv._ext`` never load into the runner)."""
    from benchmarks.packs.kernel_timing import script_output
    measured, load = script_output(__file__, quick)
    return [kernel_row(f"{op} [{size}]", ours, reference, theirs, kind, load)
            for op, size, ours, reference, theirs, kind in measured]


#: How the kernel rows are timed (said in each row's note).
TIMING = "per-thread CPU time, both sides interleaved, one torch thread"


def kernel_row(name: str, ours: float, reference: str, theirs: "float | None",
               kind: str, load: str) -> Dict[str, Any]:
    """A row for ``run.py``: like-for-like baselines get the budget ≤ 1.0x and a verdict,
    a lower bound is reported as information; the note names the baseline and the
    machine's ``load`` during the run."""
    from benchmarks import harness
    if theirs is None or math.isnan(theirs):
        return {"name": name, "value": ours, "unit": "ms",
                "note": f"no baseline; {TIMING}; {load}"}
    row = {"name": name, "value": ours, "unit": "ms", "baseline": theirs, "ratio": ours / theirs,
           "note": f"baseline: {reference}; {TIMING}; {load}"}
    if kind == LIKE_FOR_LIKE:
        row.update(budget="≤ 1.0× (the same arithmetic in plain PyTorch)",
                   verdict=harness.verdict(ours <= theirs))
    else:
        row["note"] = f"baseline ({kind}): {reference}; {TIMING}; {load}"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON line")
    parser.add_argument("--only", default="", help="sections to run: msda, nms_rotated, points, deform")
    args = parser.parse_args()
    # Every kernel on one torch thread: on a shared 2-core machine two threads made one
    # kernel read anywhere from 2.4 to 136 ms (3D NMS), and the ratios meant nothing.
    _load_stack()  # torch is imported there, not at module import
    torch.set_num_threads(1)
    rows = bench(args.device, args.quick, args.only)
    if args.json:
        print(json.dumps([[op, size, ours, name, None if math.isnan(theirs) else theirs, kind]
                          for op, size, ours, name, theirs, kind in rows]))
        return
    print(f"device: {args.device}, torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}\n")
    print("| op | size | lazypatch (ms) | reference | reference (ms) "
          "| reference / lazypatch |")
    print("|---|---|---:|---|---:|---:|")
    for op, size, ours, ref_name, theirs, _ in rows:
        ratio = "-" if math.isnan(theirs) else f"{theirs / ours:.2f}x"
        theirs_s = "-" if math.isnan(theirs) else f"{theirs:.2f}"
        print(f"| {op} | {size} | {ours:.2f} | {ref_name} | {theirs_s} "
              f"| {ratio} |")


if __name__ == "__main__":
    main()

"""Time lazypatch's pure-PyTorch ``mmcv._ext`` kernels.

Every row compares a kernel with a plain formulation of the same arithmetic, on
the same inputs: MSDA with mmcv's own ``multi_scale_deformable_attn_pytorch``,
the point-cloud kernels with whole distance matrices and advanced indexing at the
sizes of mmdet3d's PointNet++ configs, the others with the naive per-box /
per-pixel loop references of ``tests/packs/shared/test_mmcv_ext_kernels.py``. Such
a row has the budget "at most 1.0x"; a baseline that skips part of the work
(``F.conv2d`` for a deformable convolution) is only a lower bound (no verdict).
Timing: benchmarks/packs/kernel_timing.py (both sides in alternation, per-thread
CPU time, one torch thread). Prints a Markdown table of medians and their ratio.

Run from the repository root::

    .venv/bin/python benchmarks/packs/shared/bench_mmcv_ops.py [--quick] [--json] [--only points]
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import math
import os
import sys
from typing import Any, Callable, Dict, List

# The repository (this file lies in benchmarks/packs/<pack>/).
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
if ROOT not in sys.path:  # run as a script: the benchmarks package lies in ROOT
    sys.path.insert(0, ROOT)

from benchmarks.packs.kernel_timing import Row, command_line, compared, rows_of_script  # noqa: E402

#: The sections ``--only`` can pick, in the order ``bench`` runs them.
SECTIONS = ("msda", "nms", "nms_rotated", "roi_align", "deform", "voxel", "boxes3d", "points")


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


def bench(quick: bool, only: str = "") -> List[Row]:
    """The rows of every section (of those named in ``only``, comma-separated)."""
    _load_stack()
    reps, naive_reps = (5, 1) if quick else (20, 3)
    rows: List[Row] = []
    wanted = only.split(",") if only else SECTIONS
    for name in SECTIONS:
        if name in wanted:
            SECTION_ROWS[name](rows.append, reps, naive_reps, quick)
    return rows


def add_nms_rows(add, reps: int, naive_reps: int, quick: bool) -> None:
    """nms and soft-nms against the naive greedy loops."""
    boxes = ref.random_boxes(500, seed=1, scale=200)
    scores = torch.rand(500, generator=torch.Generator().manual_seed(2))
    order = scores.sort(0, descending=True)[1].tolist()
    bl = boxes.tolist()
    add(compared("nms", "500 boxes", lambda: ops.nms(boxes, scores, 0.5),
                 lambda: ref.naive_greedy(500, order,
                                          lambda i, j: ref.naive_iou(bl[i], bl[j]) > 0.5),
                 "naive loop (greedy, one IoU at a time)", naive_reps))
    sb = ref.random_boxes(200, seed=3, scale=60)
    ss = torch.rand(200, generator=torch.Generator().manual_seed(4))
    add(compared("softnms (linear)", "200 boxes",
                 lambda: ops.soft_nms(sb, ss, 0.3, 0.5, 0.001, "linear"),
                 lambda: ref.naive_softnms(sb.tolist(), ss.tolist(), 0.3, 0.5, 0.001, 1, 0),
                 "naive loop (rescore every box after each pick)", naive_reps))


def add_rotated_rows(add, reps: int, naive_reps: int, quick: bool) -> None:
    """nms_rotated and box_iou_rotated against polygon clipping loops."""
    rb = ref.random_rotated(200, seed=5, scale=40)
    rs = torch.rand(200, generator=torch.Generator().manual_seed(6))
    rorder = rs.sort(0, descending=True)[1].tolist()
    rl = rb.tolist()
    add(compared("nms_rotated", "200 boxes", lambda: ops.nms_rotated(rb, rs, 0.3),
                 lambda: ref.naive_greedy(
                     200, rorder, lambda i, j: ref.naive_rotated_iou(rl[i], rl[j]) > 0.3),
                 "naive polygon clipping loop", naive_reps))
    add_rotated_nms_rows(add, 1000 if quick else 3500)
    r1, r2 = ref.random_rotated(100, seed=7), ref.random_rotated(100, seed=8)
    l1, l2 = r1.tolist(), r2.tolist()
    add(compared("box_iou_rotated", "100x100", lambda: ops.box_iou_rotated(r1, r2),
                 lambda: [[ref.naive_rotated_iou(a, b) for b in l2] for a in l1],
                 "naive polygon clipping loop", naive_reps))


def add_roi_align_rows(add, reps: int, naive_reps: int, quick: bool) -> None:
    """RoIAlign forward, average and max, against the naive per-bin loop."""
    gx = torch.Generator().manual_seed(9)
    x = torch.randn(2, 16, 32, 32, generator=gx)
    xy = torch.rand(32, 2, generator=gx) * 40
    wh = torch.rand(32, 2, generator=gx) * 24 + 4
    rois = torch.cat([torch.randint(0, 2, (32, 1), generator=gx).float(), xy, xy + wh], dim=1)
    for mode in ("avg", "max"):
        add(compared(f"roi_align_forward ({mode})", "x2x16x32x32, 32 rois, 7x7, sr2",
                     lambda mode=mode: ops.roi_align(x, rois, (7, 7), 0.5, 2, mode, True),
                     lambda mode=mode: ref.naive_roi_align(x, rois, (7, 7), 0.5, 2, mode, True),
                     "naive loop (bilinear samples one bin at a time)", naive_reps))


def add_voxel_rows(add, reps: int, naive_reps: int, quick: bool) -> None:
    """Hard and dynamic voxelization, dynamic scatter, against per-point loops."""
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

    add(compared("hard_voxelize_forward", "20000 points",
                 lambda: ops.voxelization(pts, ref.VOXEL, ref.RANGE, 35, 20000), naive_hard,
                 "naive loop (one point at a time)", naive_reps))
    add(compared("dynamic_voxelize_forward", "20000 points",
                 lambda: ops.voxelization(pts, ref.VOXEL, ref.RANGE, -1),
                 lambda: [ref.naive_voxel_coord(p) for p in pl],
                 "naive loop (one point at a time)", naive_reps))
    gs = torch.Generator().manual_seed(13)
    coors = torch.randint(0, 20, (5000, 3), generator=gs, dtype=torch.int32)
    feats = torch.randn(5000, 16, generator=gs)
    add(compared("dynamic_point_to_voxel_forward (max)", "5000 points, 16 ch",
                 lambda: dynamic_scatter(feats, coors, "max"),
                 lambda: ref.naive_scatter(feats, coors, "max"),
                 "naive loop (one point at a time)", naive_reps))


def add_boxes3d_rows(add, reps: int, naive_reps: int, quick: bool) -> None:
    """3D NMS and points in boxes against polygon and per-point loops."""
    b3 = ref.random_boxes3d(200, seed=14, scale=30)
    s3 = torch.rand(200, generator=torch.Generator().manual_seed(15))
    o3 = s3.sort(0, descending=True)[1].tolist()
    l3 = b3.tolist()

    def bev_iou(i, j):
        p, q = ref.naive_bev(l3[i]), ref.naive_bev(l3[j])
        inter = ref.naive_clip_area(ref.naive_rect(p), ref.naive_rect(q))
        return inter / max(p[2] * p[3] + q[2] * q[3] - inter, 1e-8)

    add(compared("iou3d_nms3d_forward", "200 boxes", lambda: ops.nms3d(b3, s3, 0.1),
                 lambda: ref.naive_greedy(200, o3, lambda i, j: bev_iou(i, j) > 0.1),
                 "naive polygon clipping loop", naive_reps))
    pb = ref.random_boxes3d(10, seed=16, scale=10).view(1, 10, 7)
    pp = torch.rand(1, 2000, 3, generator=torch.Generator().manual_seed(17)) * 10
    add(compared("points_in_boxes_cpu_forward", "2000 points, 10 boxes",
                 lambda: ops.points_in_boxes_cpu(pp, pb),
                 lambda: [[ref.naive_in_box(p, b) for b in pb[0].tolist()]
                          for p in pp[0].tolist()],
                 "naive loop (one point and box at a time)", naive_reps))


#: (levels (h, w), queries or None for one query per key) of the MSDA sizes:
#: small maps with DETR's 900 queries; Deformable DETR's own levels (an 800 x 1200
#: image at strides 8-64) with 900 decoder queries; the half-size image's encoder,
#: where every key is a query.
MSDA_SIZES = [
    ([(64, 64), (32, 32), (16, 16), (8, 8)], 900),
    ([(100, 150), (50, 75), (25, 38), (13, 19)], 900),
    ([(50, 75), (25, 38), (13, 19), (7, 10)], None),
]


def add_msda_rows(add, reps: int, naive_reps: int, quick: bool) -> None:
    """MSDA forward and forward+backward against mmcv's own
    ``multi_scale_deformable_attn_pytorch`` (the budget is 1.0x), at each of
    ``MSDA_SIZES``."""
    for levels, queries in MSDA_SIZES[:2] if quick else MSDA_SIZES:
        add_msda_size(add, reps, levels, queries)


def add_msda_size(add, reps: int, levels, queries) -> None:
    g = torch.Generator().manual_seed(0)
    shapes = torch.tensor(levels)
    starts = torch.cat([shapes.new_zeros(1), (shapes[:, 0] * shapes[:, 1]).cumsum(0)[:-1]])
    keys = int((shapes[:, 0] * shapes[:, 1]).sum())
    bs, heads, dim, pts = 2, 8, 32, 4
    nq = keys if queries is None else queries
    value = torch.randn(bs, keys, heads, dim, generator=g)
    loc = torch.rand(bs, nq, heads, len(levels), pts, 2, generator=g)
    attn = torch.rand(bs, nq, heads, len(levels), pts, generator=g)
    size = f"bs{bs} q{nq} h{heads} d{dim} L{len(levels)} P{pts}, level 0 {levels[0][0]}x{levels[0][1]}"

    def ours_forward():
        with torch.no_grad():
            return MultiScaleDeformableAttnFunction.apply(value, shapes, starts, loc, attn, 64)

    def theirs_forward():
        with torch.no_grad():
            return multi_scale_deformable_attn_pytorch(value, shapes, loc, attn)

    add(compared("ms_deform_attn_forward", size, ours_forward, theirs_forward,
                 "mmcv multi_scale_deformable_attn_pytorch", reps))
    leaves = [t.clone().requires_grad_() for t in (value, loc, attn)]

    def ours_fb():
        MultiScaleDeformableAttnFunction.apply(
            leaves[0], shapes, starts, leaves[1], leaves[2], 64).sum().backward()

    def theirs_fb():
        multi_scale_deformable_attn_pytorch(leaves[0], shapes, leaves[1],
                                            leaves[2]).sum().backward()

    add(compared("ms_deform_attn fwd+bwd", size, ours_fb, theirs_fb,
                 "mmcv multi_scale_deformable_attn_pytorch (autograd)", reps))


#: PointNet++ set abstractions of mmdet3d's configs (configs/_base_/models/): (model,
#: points in, centres, neighbours, feature channels grouped); ScanNet's 8,192 input
#: points for the SSG segmentor, VoteNet's 20,000. The configs' radii (metres) are
#: chosen to hold about ``neighbours`` points of real scenes, whose points lie on
#: surfaces; in the uniform unit cube here, ``radius_holding`` gives that count.
SET_ABSTRACTIONS = [
    ("VoteNet SA1", 20000, 2048, 64, 1),
    ("VoteNet SA2", 2048, 1024, 32, 128),
    ("VoteNet SA3", 1024, 512, 16, 256),
    ("VoteNet SA4", 512, 256, 16, 256),
    ("PointNet++ SSG SA1", 8192, 1024, 32, 3),
    ("PointNet++ SSG SA2", 1024, 256, 32, 64),
    ("PointNet++ SSG SA3", 256, 64, 32, 128),
    ("PointNet++ SSG SA4", 64, 16, 32, 256),
]


def radius_holding(neighbours: int, points: int) -> float:
    """The radius of a ball holding ``neighbours`` of ``points`` uniform points of the
    unit cube on average."""
    return (neighbours / (points * 4 / 3 * math.pi)) ** (1 / 3)


#: Feature propagations: (model, coarse points, fine points, coarse channels).
FEATURE_PROPAGATIONS = [
    ("VoteNet FP1", 256, 512, 256),
    ("VoteNet FP2", 512, 1024, 256),
    ("PointNet++ SSG FP1", 16, 64, 512),
    ("PointNet++ SSG FP2", 64, 256, 256),
    ("PointNet++ SSG FP3", 256, 1024, 256),
    ("PointNet++ SSG FP4", 1024, 8192, 128),
]

#: PV-RCNN's stacked ball queries (configs/pv_rcnn): its 2,048 keypoints per sample
#: grouping the raw points (16,384 per sample after sampling), and the RoI grid (100
#: RoIs x 6^3 grid points per sample, at test time) grouping the keypoints: (name,
#: centres, points, neighbours) per sample of a batch of two, radius as above.
STACKED_QUERIES = [
    ("PV-RCNN keypoints", 2048, 16384, 16),
    ("PV-RCNN RoI grid", 100 * 216, 2048, 16),
]


def add_point_rows(add, reps: int, naive_reps: int, quick: bool) -> None:
    """Point-cloud kernels (registry/shared/mmcv_ext/points.py) at the sizes of
    mmdet3d's PointNet++ configs, against straightforward PyTorch: the whole distance
    matrix at once, advanced indexing, and furthest point sampling as the obvious
    loop (each step: every point's distance to the last pick, the running minimum,
    its argmax)."""
    ext = sys.modules["mmcv.ops.nms"].ext_module
    compare = functools.partial(_compared, add, reps)
    g = torch.Generator().manual_seed(50)
    for model, n, m, k, channels in SET_ABSTRACTIONS[:1] + SET_ABSTRACTIONS[5:6] \
            if quick else SET_ABSTRACTIONS:
        xyz, radius = torch.rand(1, n, 3, generator=g), radius_holding(k, n)
        size = f"{model}: {n} points, {m} centres"
        add(_sampling_row(ext, xyz, m, size, 3 if n > 10000 else reps))
        add_neighbour_rows(compare, ext, xyz, m, k, radius, size, g)
        add_grouping_rows(compare, ext, n, m, k, channels, size, g)
    for model, m, n, channels in FEATURE_PROPAGATIONS[2:4] if quick else FEATURE_PROPAGATIONS:
        add_propagation_rows(compare, ext, m, n, channels, f"{model}: {m} -> {n} points", g)
    for name, centres, count, k in [] if quick else STACKED_QUERIES:
        add_stacked_query_row(compare, ext, centres, count, radius_holding(k, count), k, name, g)


def _compared(add, reps: int, op: str, size: str, ours, reference: str, theirs) -> None:
    add(compared(op, size, ours, theirs, reference, reps))


def _sampling_row(ext, xyz, m: int, size: str, pairs: int) -> Row:
    """furthest_point_sampling_forward of ``m`` samples against the obvious loop;
    the picks must agree."""
    n = xyz.shape[1]

    def ours():
        out = torch.zeros(1, m, dtype=torch.int32)
        ext.furthest_point_sampling_forward(xyz, torch.full((1, n), 1e10), out, b=1, n=n, m=m)
        return out[0].tolist()

    def plain():
        points, best, pick, picks = xyz[0], torch.full((n,), 1e10), 0, [0]
        for _ in range(1, m):
            best = torch.minimum(best, ((points - points[pick]) ** 2).sum(1))
            pick = int(best.argmax())
            picks.append(pick)
        return picks

    assert ours() == plain(), "FPS variants disagree"
    return compared("furthest_point_sampling_forward", size, ours, plain,
                    "the obvious loop: distances to the last pick, running minimum, argmax",
                    pairs)


def add_grouping_rows(compare, ext, n: int, m: int, k: int, channels: int, size: str,
                      g) -> None:
    """group_points (the neighbours' features) and gather_points (the centres' ones)
    against advanced indexing; each side allocates its output (the kernel's with
    ``torch.empty``, as the baseline's indexing does: mmcv's own zero fill is the
    caller's, not the kernel's)."""
    features = torch.rand(1, channels, n, generator=g)
    index = torch.randint(0, n, (1, m, k), generator=g, dtype=torch.int32)

    def ours_group():
        out = torch.empty(1, channels, m, k)
        ext.group_points_forward(features, index, out, b=1, c=channels, n=n, npoints=m,
                                 nsample=k)
        return out

    assert torch.equal(ours_group()[0], features[0][:, index[0].long()])
    compare("group_points_forward", f"{size}, {k} neighbours, {channels} channels", ours_group,
            "advanced indexing", lambda: features[0][:, index[0].long()])
    picks = torch.randint(0, n, (1, m), generator=g, dtype=torch.int32)

    def ours_gather():
        out = torch.empty(1, channels, m)
        ext.gather_points_forward(features, picks, out, b=1, c=channels, n=n, npoints=m)
        return out

    assert torch.equal(ours_gather()[0], features[0][:, picks[0].long()])
    compare("gather_points_forward", f"{size}, {channels} channels", ours_gather,
            "advanced indexing", lambda: features[0][:, picks[0].long()])


def add_propagation_rows(compare, ext, m: int, n: int, channels: int, size: str, g) -> None:
    """A feature propagation: three_nn_forward (each of the ``n`` fine points' three
    nearest of the ``m`` coarse ones) against ``cdist`` + ``topk`` (the results must
    agree), three_interpolate_forward against advanced indexing and a weighted sum."""
    source, target = torch.rand(1, m, 3, generator=g), torch.rand(1, n, 3, generator=g)

    def ours():
        dist2 = torch.empty(1, n, 3)
        idx = torch.empty(1, n, 3, dtype=torch.int32)
        ext.three_nn_forward(target, source, dist2, idx, b=1, n=n, m=m)
        return idx

    def plain():
        return torch.cdist(target[0], source[0]).topk(3, largest=False)

    differing = ours()[0].long().sort(1)[0].ne(plain()[1].sort(1)[0]).any(1).sum()
    assert differing <= n // 1000 + 1, f"three_nn variants disagree on {differing} points"
    compare("three_nn_forward", size, ours, "full cdist + topk", plain)
    weight = torch.rand(1, n, 3, generator=g)
    near = torch.randint(0, m, (1, n, 3), generator=g, dtype=torch.int32)
    coarse = torch.rand(1, channels, m, generator=g)

    def ours_interp():
        out = torch.empty(1, channels, n)
        ext.three_interpolate_forward(coarse, near, weight, out, b=1, c=channels, m=m, n=n)
        return out

    compare("three_interpolate_forward", f"{size}, {channels} channels", ours_interp,
            "advanced indexing, weighted sum",
            lambda: (coarse[0][:, near[0].long()] * weight[0]).sum(-1))


def add_neighbour_rows(compare, ext, xyz, m: int, k: int, radius: float, size: str,
                       g) -> None:
    """ball_query_forward and knn_forward on ``xyz`` (1, n, 3) with ``m`` centres picked
    among the points, against the same arithmetic in plain PyTorch: the whole distance
    matrix (``cdist``), then ranks by ``cumsum`` or ``topk``; the results must agree."""
    n = xyz.shape[1]
    centres = xyz[:, torch.randperm(n, generator=g)[:m]].contiguous()

    def ours_ball():
        idx = torch.zeros(1, m, k, dtype=torch.int32)
        ext.ball_query_forward(centres, xyz, idx, b=1, n=n, m=m, min_radius=0.0,
                               max_radius=radius, nsample=k)
        return idx

    # cdist rounds differently from the kernels (which round as CUDA does): a point
    # within rounding of the radius may fall on either side, nothing more may differ.
    differing = ours_ball()[0].long().ne(plain_ball_query(centres[0], xyz[0], radius, k)[0]).any(1)
    assert differing.sum() <= m // 1000 + 1, f"ball query variants disagree on {differing.sum()}"
    compare("ball_query_forward", f"{size}, radius {radius:.3g}, {k} neighbours", ours_ball,
            "full distance matrix (cdist), cumsum ranks",
            lambda: plain_ball_query(centres[0], xyz[0], radius, k))

    def ours_knn():
        idx = torch.zeros(1, m, 16, dtype=torch.int32)
        ext.knn_forward(xyz, centres, idx, torch.zeros(1, m, 16), b=1, n=n, m=m, nsample=16)
        return idx

    def plain_knn():
        return torch.cdist(centres[0], xyz[0]).topk(16, largest=False)

    differing = ours_knn()[0].long().sort(1)[0].ne(plain_knn()[1].sort(1)[0]).any(1).sum()
    assert differing <= m // 1000 + 1, f"knn variants disagree on {differing} centres"
    compare("knn_forward", f"{size}, k=16", ours_knn, "full cdist + topk", plain_knn)


def plain_ball_query(centres, points, radius: float, k: int):
    """Ball query in plain PyTorch: (m, 3) centres, (n, 3) points -> (m, k) indices of
    the first k points within ``radius``, padded with the first, 0 when none; and the
    (m,) counts of points within ``radius``."""
    m = centres.shape[0]
    hit = torch.cdist(centres, points) ** 2 < radius ** 2
    rank = hit.cumsum(1)
    out = torch.zeros(m, k, dtype=torch.long)
    rows, cols = torch.nonzero(hit & (rank <= k), as_tuple=True)
    out[rows, rank[rows, cols] - 1] = cols
    return torch.where(torch.arange(k) < rank[:, -1:], out, out[:, :1].expand(m, k)), rank[:, -1]


def add_stacked_query_row(compare, ext, centres: int, count: int, radius: float, k: int,
                          name: str, g) -> None:
    """stack_ball_query_forward on a batch of two samples stacked, against the plain
    ball query of each sample (``plain_ball_query``, -1 for a centre with no point);
    the results must agree."""
    xyz, centre_xyz = torch.rand(2 * count, 3, generator=g), torch.rand(2 * centres, 3,
                                                                          generator=g)
    counts = torch.tensor([count, count], dtype=torch.int32)
    centre_counts = torch.tensor([centres, centres], dtype=torch.int32)

    def ours():
        idx = torch.zeros(2 * centres, k, dtype=torch.int32)
        ext.stack_ball_query_forward(centre_xyz, centre_counts, xyz, counts, idx,
                                     max_radius=radius, nsample=k)
        return idx

    def plain():
        out = []
        for sample in range(2):
            found, hits = plain_ball_query(centre_xyz[sample * centres:(sample + 1) * centres],
                                           xyz[sample * count:(sample + 1) * count], radius, k)
            found[:, 0].masked_fill_(hits == 0, -1)
            out.append(found)
        return torch.cat(out)

    differing = ours().long().ne(plain()).any(1).sum()
    assert differing <= centres // 500 + 1, f"stacked ball queries disagree on {differing}"
    compare("stack_ball_query_forward",
            f"{name}: 2 x {centres} centres, 2 x {count} points, radius {radius:.3g}, "
            f"{k} neighbours", ours, "plain ball query per sample (cdist, cumsum ranks)", plain)


def add_deform_rows(add, reps: int, naive_reps: int, quick: bool) -> None:
    """deform_conv2d and modulated_deform_conv2d: small sizes against the naive loop,
    a detector-size layer against plain PyTorch (like-for-like) and F.conv2d (bound)."""
    dx, doff, dmask, dw, db = ref.deform_inputs(torch.float32, 10, c=8, cout=8, h=12, w=12,
                                                groups=1, dgroups=1)
    add(compared("deform_conv_forward", "1x8x12x12 -> 8, k3",
                 lambda: ops.deform_conv2d(dx, doff, dw, 1, 1, 1, 1, 1),
                 lambda: ref.naive_deform_conv(dx, doff, None, dw, None, 1, 1, 1, 1, 1),
                 "naive loop (one bilinear sample at a time)", naive_reps))
    add(compared("modulated_deform_conv_forward", "1x8x12x12 -> 8, k3",
                 lambda: ops.modulated_deform_conv2d(dx, doff, dmask, dw, db, 1, 1, 1, 1, 1),
                 lambda: ref.naive_deform_conv(dx, doff, dmask, dw, db, 1, 1, 1, 1, 1),
                 "naive loop (one bilinear sample at a time)", naive_reps))
    big = ref.deform_inputs(torch.float32, 11, b=2, c=64, cout=64, h=64, w=64, groups=1,
                            dgroups=1)
    torch.testing.assert_close(ops.deform_conv2d(big[0], big[1], big[3], 1, 1, 1, 1, 1),
                               plain_deform_conv(big[0], big[1], big[3]), rtol=1e-4, atol=1e-3)
    add(compared("deform_conv_forward", "2x64x64x64 -> 64, k3",
                 lambda: ops.deform_conv2d(big[0], big[1], big[3], 1, 1, 1, 1, 1),
                 lambda: plain_deform_conv(big[0], big[1], big[3]),
                 "plain PyTorch im2col: 4 bilinear corners gathered per tap, weighted, one "
                 "matmul (the same arithmetic)", reps))
    add(compared("deform_conv_forward", "2x64x64x64 -> 64, k3",
                 lambda: ops.deform_conv2d(big[0], big[1], big[3], 1, 1, 1, 1, 1),
                 lambda: torch.nn.functional.conv2d(big[0], big[3], None, 1, 1),
                 "F.conv2d (no deformation), same size: the same products without sampling "
                 "9 offset taps per output, which no deformable kernel can skip: the gap is "
                 "the price of the sampling; the like-for-like row is the one above", reps,
                 lower_bound=True))


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


def add_rotated_nms_rows(add, count: int) -> None:
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
    add(compared("nms_rotated", size, lambda: ops.nms_rotated(boxes, scores, 0.3),
                 lambda: all_pairs_nms_rotated(boxes, scores, 0.3),
                 "the plain vectorized formulation (all pairs' rotated IoU in torch, then "
                 "greedy: the previous kernel)", 1))
    add(compared("nms_rotated", size, lambda: ops.nms_rotated(boxes, scores, 0.3),
                 lambda: ref.naive_greedy(
                     count, order,
                     lambda i, j: ref.naive_rotated_iou(listed[i], listed[j]) > 0.3),
                 "plain greedy, one pair at a time (mmcv's loop)", 2))


#: Each section's rows: ``--only`` names them.
SECTION_ROWS: Dict[str, Callable[..., None]] = {
    "msda": add_msda_rows, "nms": add_nms_rows, "nms_rotated": add_rotated_rows,
    "roi_align": add_roi_align_rows, "deform": add_deform_rows, "voxel": add_voxel_rows,
    "boxes3d": add_boxes3d_rows, "points": add_point_rows,
}


def run(quick: bool) -> List[Dict[str, Any]]:
    """Rows for ``benchmarks/run.py``, measured in a fresh interpreter (so that
    torch, mmcv and the provided ``mmcv._ext`` never load into the runner)."""
    return rows_of_script(__file__, quick)


if __name__ == "__main__":
    command_line(bench, __doc__ or "", SECTIONS)

"""Point-cloud kernels of the pure-PyTorch ``mmcv._ext`` against loop references.

Each kernel is called with mmcv's binding signature (results written into
preallocated tensors) and compared with a deliberately naive reference written
here with Python loops over a small input. Gradients go through mmcv's own
autograd Functions with ``gradcheck`` where mmcv has a backward. Random shapes
come from hypothesis (fixed, derandomized examples so CI stays fast).
"""
from __future__ import annotations

import math
import sys

import mmcv  # noqa: F401  (the real mmcv-lite: requirements/stack.txt)
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

EXAMPLES = settings(max_examples=20, deadline=None, derandomize=True)


@pytest.fixture(scope="module")
def ext(ops):
    return sys.modules["mmcv.ops.nms"].ext_module


def cloud(seed: int, *shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def d2(a, b) -> float:
    return float(sum((float(a[i]) - float(b[i])) ** 2 for i in range(3)))


# ---------------------------------------------------------------- references

def ref_fps(xyz, m):
    out = []
    for pts in xyz:
        n = len(pts)
        best = [1e10] * n
        picks = [0]
        for _ in range(1, m):
            last = pts[picks[-1]]
            for k in range(n):
                best[k] = min(best[k], d2(pts[k], last))
            top = max(range(n), key=lambda k: (best[k], -k))
            picks.append(top)
        out.append(picks)
    return out


def ref_ball_row(c, points, nsample, inside, fill=0):
    """The CUDA kernel's loop for one centre: the first ``nsample`` points ``inside``
    (a test of the squared distance), padded with the first found; ``None`` for none."""
    row, cnt = [fill] * nsample, 0
    for k, p in enumerate(points):
        if inside(d2(c, p)):
            if cnt == 0:
                row = [k] * nsample
            row[cnt] = k
            cnt += 1
            if cnt >= nsample:
                break
    return row if cnt else None


def ref_ball_query(center, xyz, min_r, max_r, nsample):
    def inside(dist):
        return dist == 0 or (min_r ** 2 <= dist < max_r ** 2)
    return [[ref_ball_row(c, ps, nsample, inside) or [0] * nsample for c in cs]
            for cs, ps in zip(center, xyz)]


def ref_knn_sets(center, xyz, k):
    """Per centre, the sorted distances of the k nearest points."""
    return [[sorted(d2(c, p) for p in ps)[:k] for c in cs] for cs, ps in zip(center, xyz)]


# ---------------------------------------------------------------- kernels

@EXAMPLES
@given(b=st.integers(1, 2), n=st.integers(1, 40), m=st.integers(1, 12), seed=st.integers(0, 99))
def test_furthest_point_sampling_matches_loop_reference(ext, b, n, m, seed):
    m = min(m, n)
    xyz = cloud(seed, b, n, 3)
    temp = torch.full((b, n), 1e10)
    out = torch.zeros(b, m, dtype=torch.int32)
    ext.furthest_point_sampling_forward(xyz, temp, out, b=b, n=n, m=m)
    assert out.tolist() == ref_fps(xyz.tolist(), m)


@EXAMPLES
@given(b=st.integers(1, 2), n=st.integers(1, 30), m=st.integers(1, 10), seed=st.integers(0, 99))
def test_furthest_point_sampling_with_dist_agrees_with_xyz_version(ext, b, n, m, seed):
    m = min(m, n)
    xyz = cloud(seed, b, n, 3)
    dist = ((xyz[:, :, None] - xyz[:, None]) ** 2).sum(-1)
    out = torch.zeros(b, m, dtype=torch.int32)
    ext.furthest_point_sampling_with_dist_forward(dist, torch.full((b, n), 1e10), out,
                                                  b=b, n=n, m=m)
    assert out.tolist() == ref_fps(xyz.tolist(), m)


@EXAMPLES
@given(b=st.integers(1, 2), n=st.integers(1, 30), m=st.integers(1, 8),
       k=st.integers(1, 6), seed=st.integers(0, 99))
def test_knn_returns_the_k_nearest_in_order(ext, b, n, m, k, seed):
    xyz, center = cloud(seed, b, n, 3), cloud(seed + 1, b, m, 3)
    idx = torch.zeros(b, m, k, dtype=torch.int32)
    dist2 = torch.zeros(b, m, k)
    ext.knn_forward(xyz, center, idx, dist2, b=b, n=n, m=m, nsample=k)
    want = ref_knn_sets(center.tolist(), xyz.tolist(), k)
    kk = min(k, n)
    assert torch.allclose(dist2[:, :, :kk], torch.tensor(want), atol=1e-6)
    # the indices point at points at those distances
    again = ((center[:, :, None] - torch.gather(
        xyz, 1, idx[:, :, :kk].long().reshape(b, -1, 1).expand(-1, -1, 3)
    ).view(b, m, kk, 3)) ** 2).sum(-1)
    assert torch.allclose(again, dist2[:, :, :kk], atol=1e-6)


@EXAMPLES
@given(b=st.integers(1, 2), n=st.integers(1, 20), m=st.integers(3, 20), seed=st.integers(0, 99))
def test_three_nn_matches_loop_reference(ext, b, n, m, seed):
    target, source = cloud(seed, b, n, 3), cloud(seed + 1, b, m, 3)
    dist2 = torch.empty(b, n, 3)
    idx = torch.empty(b, n, 3, dtype=torch.int32)
    ext.three_nn_forward(target, source, dist2, idx, b=b, n=n, m=m)
    want = ref_knn_sets(target.tolist(), source.tolist(), 3)
    assert torch.allclose(dist2, torch.tensor(want), atol=1e-6)
    for bi in range(b):
        for j in range(n):
            for s in range(3):
                got = d2(target[bi, j], source[bi, int(idx[bi, j, s])])
                assert math.isclose(got, float(dist2[bi, j, s]), abs_tol=1e-6)


@EXAMPLES
@given(b=st.integers(1, 2), n=st.integers(1, 30), m=st.integers(1, 8),
       nsample=st.integers(1, 8), min_r=st.sampled_from([0.0, 0.1]),
       max_r=st.sampled_from([0.2, 0.4, 2.0]), seed=st.integers(0, 99))
def test_ball_query_matches_loop_reference(ext, b, n, m, nsample, min_r, max_r, seed):
    xyz = cloud(seed, b, n, 3)
    center = torch.cat([xyz[:, :1], cloud(seed + 1, b, m - 1, 3)], 1)  # one exact hit
    idx = torch.zeros(b, m, nsample, dtype=torch.int32)
    ext.ball_query_forward(center, xyz, idx, b=b, n=n, m=m, min_radius=min_r,
                           max_radius=max_r, nsample=nsample)
    assert idx.tolist() == ref_ball_query(center.tolist(), xyz.tolist(), min_r, max_r, nsample)


def large_cloud(kind: str, b: int, n: int) -> torch.Tensor:
    """Clouds for either side of the kernels' size limits (points.py DENSE_KNN_POINTS,
    DENSE_BALL_QUERY_POINTS): uniform, on a half-unit grid (many exactly equal
    distances, so the k-th neighbour ties with non-candidates and rows fall back to
    the exact search), with repeated points, and far from the origin."""
    g = torch.Generator().manual_seed(n)
    if kind == "grid":
        return torch.randint(0, 8, (b, n, 3), generator=g).float() / 2
    xyz = torch.rand(b, n, 3, generator=g)
    if kind == "repeated":
        xyz[:, 1::3] = xyz[:, ::3][:, :xyz[:, 1::3].shape[1]]
    if kind == "far":
        xyz = xyz * 4 + 1000
    return xyz


def exact_order(center: torch.Tensor, xyz: torch.Tensor):
    """Exact squared distances (per axis, as the CUDA kernels round them) of every
    point, sorted nearest first with equal distances in index order."""
    diff = center[:, :, None, :] - xyz[:, None, :, :]
    d = diff[..., 0] * diff[..., 0]
    d = d + diff[..., 1] * diff[..., 1]
    d = d + diff[..., 2] * diff[..., 2]
    return d.sort(dim=2, stable=True)


@pytest.mark.parametrize("kind", ["uniform", "grid", "repeated", "far"])
@pytest.mark.parametrize("n,k", [(300, 16), (2000, 16), (600, 40), (300, 291), (9000, 16), (4500, 300)])
def test_knn_on_large_clouds_equals_the_exact_search(ext, kind, n, k):
    # Both formulations of points.knn_forward: whole exact rows (up to
    # DENSE_KNN_POINTS points) and the block search with its proof, whose failures
    # (the grid's many equal distances) fall back to whole rows.
    xyz = large_cloud(kind, 2, n)
    center = torch.cat([xyz[:, :5], large_cloud(kind, 2, 70 + n)[:, :60]], 1)  # 5 zero distances
    m = center.shape[1]
    idx = torch.zeros(2, m, k, dtype=torch.int32)
    dist2 = torch.zeros(2, m, k)
    ext.knn_forward(xyz, center, idx, dist2, b=2, n=n, m=m, nsample=k)
    values, order = exact_order(center, xyz)
    assert torch.equal(dist2, values[:, :, :k])
    assert torch.equal(idx.long(), order[:, :, :k])


@pytest.mark.parametrize("kind", ["uniform", "grid", "repeated", "far"])
@pytest.mark.parametrize("min_r,max_r,nsample", [(0.0, 0.1, 16), (0.0, 1.0, 8), (0.5, 1.0, 32),
                                                 (0.05, 0.2, 64)])
def test_ball_query_on_large_clouds_matches_loop_reference(ext, kind, min_r, max_r, nsample):
    n = 400
    xyz = large_cloud(kind, 1, n)
    center = torch.cat([xyz[:, :4], large_cloud(kind, 1, n + 1)[:, :12]], 1)
    m = center.shape[1]
    idx = torch.zeros(1, m, nsample, dtype=torch.int32)
    ext.ball_query_forward(center, xyz, idx, b=1, n=n, m=m, min_radius=min_r,
                           max_radius=max_r, nsample=nsample)
    assert idx.tolist() == ref_ball_query(center.tolist(), xyz.tolist(), min_r, max_r, nsample)


#: Either side of a size at which a kernel changes formulation (points.py).
BOUNDARY = settings(max_examples=16, deadline=None, derandomize=True)


@BOUNDARY
@given(kind=st.sampled_from(["uniform", "grid", "repeated", "far"]), offset=st.integers(-1, 1),
       k=st.sampled_from([1, 3, 16, 40]), centres=st.integers(1, 140))
def test_knn_equals_the_exact_search_either_side_of_the_dense_limit(ext, kind, offset, k,
                                                                      centres):
    # Up to DENSE_KNN_POINTS whole distance rows, above it the block search; 140
    # centres of 512 points are two query chunks (DENSE_CHUNK_ELEMENTS).
    n = points_module().DENSE_KNN_POINTS + offset
    xyz = large_cloud(kind, 1, n)
    center = torch.cat([xyz[:, :2], large_cloud(kind, 1, n + 3)[:, :centres]], 1)
    m = center.shape[1]
    idx = torch.zeros(1, m, k, dtype=torch.int32)
    dist2 = torch.zeros(1, m, k)
    ext.knn_forward(xyz, center, idx, dist2, b=1, n=n, m=m, nsample=k)
    values, order = exact_order(center, xyz)
    assert torch.equal(dist2, values[:, :, :k])
    assert torch.equal(idx.long(), order[:, :, :k])


@BOUNDARY
@given(kind=st.sampled_from(["uniform", "grid", "repeated", "far"]), offset=st.integers(-1, 1),
       shell=st.sampled_from([(0.0, 0.4), (0.0, 1.0), (0.2, 0.5), (0.0, 0.0)]),
       nsample=st.sampled_from([1, 32, 64]), centres=st.integers(1, 140))
def test_ball_query_matches_loop_reference_either_side_of_the_dense_limit(ext, kind, offset,
                                                                         shell, nsample,
                                                                         centres):
    n = points_module().DENSE_BALL_QUERY_POINTS + offset
    xyz = large_cloud(kind, 1, n)
    center = torch.cat([xyz[:, :2], large_cloud(kind, 1, n + 3)[:, :centres]], 1)
    m = center.shape[1]
    idx = torch.zeros(1, m, nsample, dtype=torch.int32)
    ext.ball_query_forward(center, xyz, idx, b=1, n=n, m=m, min_radius=shell[0],
                           max_radius=shell[1], nsample=nsample)
    assert idx.tolist() == ref_ball_query(center.tolist(), xyz.tolist(), *shell, nsample)


@BOUNDARY
@given(kind=st.sampled_from(["uniform", "grid", "repeated", "far"]), b=st.integers(1, 2),
       n=st.integers(1, 120), m=st.integers(1, 12), whole=st.booleans())
def test_furthest_point_sampling_matches_loop_reference_with_and_without_the_matrix(
        ext, kind, b, n, m, whole):
    # Small clouds take the whole distance matrix (FPS_MATRIX_ELEMENTS), larger ones the
    # per-pick loop: both must pick as the CUDA kernel, and leave the same distances.
    from unittest import mock
    m = min(m, n)
    xyz = large_cloud(kind, b, n)
    temp = torch.full((b, n), 1e10)
    out = torch.zeros(b, m, dtype=torch.int32)
    with mock.patch.object(points_module(), "FPS_MATRIX_ELEMENTS", 1 << 22 if whole else 0):
        ext.furthest_point_sampling_forward(xyz, temp, out, b=b, n=n, m=m)
    assert out.tolist() == ref_fps(xyz.tolist(), m)
    # temp: each point's distance to the picks but the last (the loop's last update)
    picked = xyz[torch.arange(b)[:, None], out.long()[:, :m - 1]]
    want = exact_order(xyz, picked)[0][:, :, 0] if m > 1 else torch.full((b, n), 1e10)
    assert torch.equal(temp, want)


def test_furthest_point_sampling_at_votenet_sizes_is_the_same_with_and_without_the_matrix(ext):
    # 2,048 -> 1,024 points (VoteNet's second set abstraction) takes the matrix.
    from unittest import mock
    xyz = large_cloud("repeated", 1, 2048)
    results = []
    for limit in (1 << 22, 0):
        temp, out = torch.full((1, 2048), 1e10), torch.zeros(1, 1024, dtype=torch.int32)
        with mock.patch.object(points_module(), "FPS_MATRIX_ELEMENTS", limit):
            ext.furthest_point_sampling_forward(xyz, temp, out, b=1, n=2048, m=1024)
        results.append((out, temp))
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])


@BOUNDARY
@given(kind=st.sampled_from(["uniform", "grid", "repeated", "far"]), n=st.integers(1, 70),
       m=st.integers(1, 40), k=st.sampled_from([1, 3, 16]))
def test_small_knn_and_three_nn_equal_the_exact_search_ties_by_index(ext, kind, n, m, k):
    # PointNet++'s smallest layers (64 points, 16 centres) take one broadcast difference
    # (neighbour_search.BROADCAST_ELEMENTS) and a topk of (distance, index) keys; either
    # side of that limit, the same bits: distances, order, ties by index.
    xyz = large_cloud(kind, 1, n)
    center = torch.cat([xyz[:, :1], large_cloud(kind, 1, n + 5)[:, :m]], 1)
    m = center.shape[1]
    values, order = exact_order(center, xyz)
    idx = torch.zeros(1, m, k, dtype=torch.int32)
    dist2 = torch.zeros(1, m, k)
    ext.knn_forward(xyz, center, idx, dist2, b=1, n=n, m=m, nsample=k)
    kk = min(k, n)
    assert torch.equal(dist2[:, :, :kk], values[:, :, :kk])
    assert torch.equal(idx[:, :, :kk].long(), order[:, :, :kk])
    if n >= 3:
        dist2, idx = torch.empty(1, m, 3), torch.empty(1, m, 3, dtype=torch.int32)
        ext.three_nn_forward(center, xyz, dist2, idx, b=1, n=m, m=n)
        assert torch.equal(dist2, values[:, :, :3])
        assert torch.equal(idx.long(), order[:, :, :3])


@BOUNDARY
@given(kind=st.sampled_from(["uniform", "grid", "repeated", "far"]), b=st.integers(2, 3),
       n=st.integers(1, 70), m=st.integers(1, 40), k=st.sampled_from([1, 3, 16]))
def test_batched_small_knn_and_three_nn_equal_the_exact_search(ext, kind, b, n, m, k):
    # Several clouds at once: one batch broadcasts without a view, more take one; each
    # batch's answer is its own cloud's, bit for bit, ties by index.
    xyz = large_cloud(kind, b, n)
    center = torch.cat([xyz[:, :1], large_cloud(kind, b, n + 5)[:, :m]], 1)
    m = center.shape[1]
    values, order = exact_order(center, xyz)
    idx = torch.zeros(b, m, k, dtype=torch.int32)
    dist2 = torch.zeros(b, m, k)
    ext.knn_forward(xyz, center, idx, dist2, b=b, n=n, m=m, nsample=k)
    kk = min(k, n)
    assert torch.equal(dist2[:, :, :kk], values[:, :, :kk])
    assert torch.equal(idx[:, :, :kk].long(), order[:, :, :kk])
    if n >= 3:
        dist2, idx = torch.empty(b, m, 3), torch.empty(b, m, 3, dtype=torch.int32)
        ext.three_nn_forward(center, xyz, dist2, idx, b=b, n=m, m=n)
        assert torch.equal(dist2, values[:, :, :3])
        assert torch.equal(idx.long(), order[:, :, :3])


@EXAMPLES
@given(rows=st.integers(1, 6), n=st.integers(1, 90), k=st.integers(1, 90),
       levels=st.integers(1, 6), seed=st.integers(0, 999))
def test_nearest_in_rows_is_a_stable_sort_of_the_distances(rows, n, k, levels, seed):
    # The (distance, index) keys against the plain formulation: a stable sort. Few
    # distinct levels (zeros among them) make ties at every position, the boundary too.
    from lazypatch.registry.shared.mmcv_ext.neighbour_search import nearest_in_rows
    g = torch.Generator().manual_seed(seed)
    distances = torch.randint(0, levels, (rows, n), generator=g).float() * 0.37
    k = min(k, n)
    want = distances.sort(dim=1, stable=True).indices[:, :k]
    assert torch.equal(nearest_in_rows(distances, k), want)


@EXAMPLES
@given(b=st.integers(1, 3), q=st.integers(1, 90), n=st.integers(1, 300), axes=st.sampled_from([2, 3]),
       kind=st.sampled_from(["uniform", "grid", "far"]), public=st.booleans())
def test_exact_squared_distances_equal_the_per_axis_formulation(b, q, n, axes, kind, public):
    # Either form (one broadcast difference up to BROADCAST_ELEMENTS pairs, one mse_loss
    # call of every axis above) against the plain formulation: per axis a difference
    # squared, summed in axis order; the same bits, with or without scratch tensors, and
    # with the public calls that stand in for the private mse_loss (``public``).
    from lazypatch.registry.shared.mmcv_ext import neighbour_search
    from lazypatch.registry.shared.mmcv_ext.neighbour_search import (
        exact_squared_distances,
        squares_shape,
        subtract_and_square,
    )
    with pytest.MonkeyPatch.context() as patch:
        if public:
            patch.setattr(neighbour_search, "squared_differences", subtract_and_square)
        check_exact_squared_distances(exact_squared_distances, squares_shape, b, q, n, axes, kind)


def check_exact_squared_distances(exact_squared_distances, squares_shape, b, q, n, axes, kind):
    queries = large_cloud(kind, b, q + 3)[:, 3:, :axes].contiguous()
    points = large_cloud(kind, b, n)[:, :, :axes].contiguous()
    diff = queries[:, :, None, :] - points[:, None, :, :]
    want = diff[..., 0] * diff[..., 0]
    for axis in range(1, axes):
        want = want + diff[..., axis] * diff[..., axis]
    assert torch.equal(exact_squared_distances(queries, points), want)
    if b == 1 and axes == 3:
        squares, out = torch.empty(squares_shape(q, n)), torch.empty(1, q, n)
        assert torch.equal(exact_squared_distances(queries, points, squares, out), want)


def test_subtract_and_square_refuses_a_reduction():
    from lazypatch.registry.shared.mmcv_ext.neighbour_search import subtract_and_square
    with pytest.raises(ValueError, match="reduction must be NO_REDUCTION"):
        subtract_and_square(torch.ones(2), torch.zeros(2), 1)


@BOUNDARY
@given(kind=st.sampled_from(["uniform", "grid", "repeated", "far"]), offset=st.integers(-1, 1),
       k=st.sampled_from([1, 3, 16]))
def test_knn_and_three_nn_equal_the_exact_search_either_side_of_the_scratch_limit(
        ext, kind, offset, k):
    # One cloud of up to scratch.SCRATCH_ELEMENTS (query, point) pairs is searched with
    # per-thread scratch tensors, a larger one without: the same bits either side,
    # ties by index, with sizes changing from call to call (the scratch of each kept).
    from lazypatch.registry.shared.mmcv_ext.scratch import SCRATCH_ELEMENTS
    n = 256 + offset
    m = SCRATCH_ELEMENTS // 256
    xyz = large_cloud(kind, 1, n)
    center = torch.cat([xyz[:, :1], large_cloud(kind, 1, m + 5)[:, :m - 1]], 1)
    values, order = exact_order(center, xyz)
    for _ in range(2):
        idx, dist2 = torch.zeros(1, m, k, dtype=torch.int32), torch.zeros(1, m, k)
        ext.knn_forward(xyz, center, idx, dist2, b=1, n=n, m=m, nsample=k)
        assert torch.equal(dist2, values[:, :, :k])
        assert torch.equal(idx.long(), order[:, :, :k])
        dist2, idx = torch.empty(1, m, 3), torch.empty(1, m, 3, dtype=torch.int32)
        ext.three_nn_forward(center, xyz, dist2, idx, b=1, n=m, m=n)
        assert torch.equal(dist2, values[:, :, :3])
        assert torch.equal(idx.long(), order[:, :, :3])


def test_small_searches_in_threads_and_many_sizes_equal_the_exact_search(ext):
    # Each thread has its own scratch tensors, a few sizes each (the oldest dropped):
    # threads searching the same and different sizes at once, over more sizes than a
    # thread keeps, all get the exact answer.
    import threading

    from lazypatch.registry.shared.mmcv_ext.scratch import KEPT_SIZES
    clouds = [(large_cloud("grid", 1, 20 + size), large_cloud("uniform", 1, 8 + size))
              for size in range(KEPT_SIZES + 3)]
    wanted = [exact_order(center, xyz) for xyz, center in clouds]
    failures = []

    def search(rounds: int) -> None:
        for _ in range(rounds):
            for (xyz, center), (values, order) in zip(clouds, wanted):
                m, n = center.shape[1], xyz.shape[1]
                idx, dist2 = torch.zeros(1, m, 4, dtype=torch.int32), torch.zeros(1, m, 4)
                ext.knn_forward(xyz, center, idx, dist2, b=1, n=n, m=m, nsample=4)
                if not (torch.equal(dist2, values[:, :, :4])
                        and torch.equal(idx.long(), order[:, :, :4])):
                    failures.append((m, n))

    threads = [threading.Thread(target=search, args=(20,)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_point_kernels_leave_no_inference_tensors_behind(ext):
    # The kernels run in inference mode, the caller's tensors stay ordinary: usable in
    # an autograd graph afterwards, with inputs that require grad, and from a caller
    # that is itself in inference mode.
    xyz = cloud(1, 1, 40, 3).requires_grad_()
    center = cloud(2, 1, 8, 3)
    idx, dist2 = torch.zeros(1, 8, 4, dtype=torch.int32), torch.zeros(1, 8, 4)
    ext.knn_forward(xyz, center, idx, dist2, b=1, n=40, m=8, nsample=4)
    assert not idx.is_inference() and not dist2.is_inference()
    weight = torch.ones(1, 8, 4, requires_grad=True)
    (dist2 * weight).sum().backward()
    assert torch.equal(weight.grad, dist2)
    out = torch.zeros(1, 3, 8)
    ext.gather_points_forward(xyz.detach().transpose(1, 2).contiguous(), idx[:, :, 0], out,
                              b=1, c=3, n=40, npoints=8)
    assert not out.is_inference()
    with torch.inference_mode():
        inner_idx, inner_dist2 = torch.zeros(1, 8, 4, dtype=torch.int32), torch.zeros(1, 8, 4)
        ext.knn_forward(xyz, center, inner_idx, inner_dist2, b=1, n=40, m=8, nsample=4)
    assert torch.equal(inner_idx, idx) and torch.equal(inner_dist2, dist2)
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()


def points_module():
    """The pack's point kernels (for their size limits), as the ops fixture loaded them."""
    from lazypatch.registry.shared.mmcv_ext import points
    return points


@EXAMPLES
@given(b=st.integers(1, 2), c=st.integers(1, 4), n=st.integers(1, 12),
       p=st.integers(1, 6), s=st.integers(1, 4), seed=st.integers(0, 99))
def test_group_and_gather_points_match_loop_reference(ext, b, c, n, p, s, seed):
    features = cloud(seed, b, c, n)
    g = torch.Generator().manual_seed(seed)
    index = torch.randint(0, n, (b, p, s), generator=g, dtype=torch.int32)
    out = torch.zeros(b, c, p, s)
    ext.group_points_forward(features, index, out, b=b, c=c, n=n, npoints=p, nsample=s)
    want = [[[[features[bi, ci, index[bi, j, k]].item() for k in range(s)] for j in range(p)]
             for ci in range(c)] for bi in range(b)]
    assert torch.equal(out, torch.tensor(want))
    grad = torch.zeros(b, c, n)
    ext.group_points_backward(out, index, grad, b=b, c=c, n=n, npoints=p, nsample=s)
    want_grad = torch.zeros(b, c, n)
    for bi in range(b):
        for j in range(p):
            for k in range(s):
                want_grad[bi, :, index[bi, j, k]] += out[bi, :, j, k]
    assert torch.allclose(grad, want_grad, atol=1e-6)
    flat = index[:, :, 0].contiguous()
    gathered = torch.zeros(b, c, p)
    ext.gather_points_forward(features, flat, gathered, b=b, c=c, n=n, npoints=p)
    assert torch.equal(gathered, out[:, :, :, 0])


def test_point_gradients_through_mmcv_functions(ops):
    from mmcv.ops import gather_points, grouping_operation, three_interpolate
    g = torch.Generator().manual_seed(0)
    features = torch.rand(2, 3, 7, dtype=torch.float64, generator=g, requires_grad=True)
    index = torch.randint(0, 7, (2, 4, 3), generator=g, dtype=torch.int32)
    weight = torch.rand(2, 4, 3, dtype=torch.float64, generator=g)
    assert torch.autograd.gradcheck(lambda f: three_interpolate(f, index, weight), (features,))
    assert torch.autograd.gradcheck(lambda f: grouping_operation(f, index), (features,))
    assert torch.autograd.gradcheck(lambda f: gather_points(f, index[:, :, 0].contiguous()),
                                    (features,))
    # three_interpolate forward against a loop
    out = three_interpolate(features, index, weight)
    for bi in range(2):
        for j in range(4):
            want = sum(weight[bi, j, k] * features[bi, :, index[bi, j, k]] for k in range(3))
            assert torch.allclose(out[bi, :, j], want)


def test_assign_score_withk_against_loop_and_gradcheck(ops):
    from mmcv.ops import assign_score_withk
    g = torch.Generator().manual_seed(1)
    b, n, npoint, k, m, o = 2, 6, 4, 3, 2, 3
    scores = torch.rand(b, npoint, k, m, dtype=torch.float64, generator=g, requires_grad=True)
    points = torch.rand(b, n, m, o, dtype=torch.float64, generator=g, requires_grad=True)
    centers = torch.rand(b, n, m, o, dtype=torch.float64, generator=g, requires_grad=True)
    knn = torch.randint(0, n, (b, npoint, k), generator=g)
    out = assign_score_withk(scores, points, centers, knn, 'sum')
    for bi in range(b):
        for oi in range(o):
            for j in range(npoint):
                for kk in range(k):
                    want = sum(scores[bi, j, kk, mi] * (points[bi, knn[bi, j, kk], mi, oi]
                                                        - centers[bi, knn[bi, j, 0], mi, oi])
                               for mi in range(m))
                    assert torch.allclose(out[bi, oi, j, kk], want)
    assert torch.autograd.gradcheck(
        lambda s, p, c: assign_score_withk(s, p, c, knn, 'sum'), (scores, points, centers))


EPS = 1e-8


def before(x1, y1, x2, y2):
    """Whether vertex 1 comes before vertex 2 counter-clockwise from +x (equal: no)."""
    if abs(x1 - x2) < EPS and abs(y1 - y2) < EPS:
        return False
    if (y1 > 0) != (y2 > 0):
        return y1 > 0
    return math.atan2(y1, x1) % (2 * math.pi) < math.atan2(y2, x2) % (2 * math.pi)


def ref_sort_vertices(vertices, mask, count):
    """One polygon, one vertex at a time: each pick is the smallest vertex strictly
    after the previous pick (index 0 when there is none)."""
    pad = next(j for j in range(8, len(mask)) if not mask[j])
    if count < 3:
        return [pad] * 9
    picks = []
    for j in range(count):
        take = 0
        best = None
        for k, (x, y) in enumerate(vertices):
            if not mask[k] or (j and not before(*vertices[picks[-1]], x, y)):
                continue
            if best is None or before(x, y, *best):
                best, take = (x, y), k
        picks.append(take)
    row = picks + [picks[0]] + [pad] * (8 - count)
    if count == 8 and sum(row[k] == row[j] for j in range(4) for k in range(4, 8)) == 4:
        row = row[:4] + [row[0]] + [pad] * 4
    return row


@EXAMPLES
@given(seed=st.integers(0, 999), valid=st.integers(0, 8), twins=st.integers(0, 4))
def test_sort_vertices_matches_one_at_a_time_reference(ext, seed, valid, twins):
    g = torch.Generator().manual_seed(seed)
    vertices = torch.rand(1, 1, 24, 2, generator=g) - 0.5
    mask = torch.zeros(1, 1, 24, dtype=torch.bool)
    chosen = torch.randperm(23, generator=g)[:valid]  # slot 23 stays free to pad with
    mask[0, 0, chosen] = True
    vertices[0, 0, 4:4 + twins] = vertices[0, 0, :twins]  # shared corners, found twice
    count = int(mask.sum())
    vertices[~mask] = 0
    idx = ext.diff_iou_rotated_sort_vertices_forward(vertices, mask, torch.tensor([[count]]))
    assert idx.shape == (1, 1, 9) and idx.dtype == torch.int64
    assert idx[0, 0].tolist() == ref_sort_vertices(vertices[0, 0].tolist(),
                                                   mask[0, 0].tolist(), count)


def test_diff_iou_rotated_matches_polygon_overlap(ops):
    from mmcv.ops import diff_iou_rotated_2d
    boxes1 = torch.tensor([[[0.0, 0.0, 2.0, 2.0, 0.0], [0.0, 0.0, 2.0, 1.0, 0.3],
                            [1.0, 1.0, 1.0, 1.0, 0.0], [0.5, 0.5, 1.0, 1.0, 0.0]]],
                          requires_grad=True)
    boxes2 = torch.tensor([[[1.0, 0.0, 2.0, 2.0, 0.0], [0.0, 0.0, 2.0, 1.0, 0.3],
                            [5.0, 5.0, 1.0, 1.0, 0.0], [0.5, 0.5, 1.0, 1.0, math.pi / 4]]])
    iou = diff_iou_rotated_2d(boxes1, boxes2)
    # a unit square and itself turned by 45 degrees overlap in an octagon: 2(sqrt2 - 1)
    octagon = 2 * (math.sqrt(2) - 1)
    assert torch.allclose(iou, torch.tensor([[2.0 / 6.0, 1.0, 0.0, octagon / (2 - octagon)]]),
                          atol=1e-4)
    iou.sum().backward()
    assert torch.isfinite(boxes1.grad).all()


@EXAMPLES
@given(counts=st.lists(st.integers(1, 12), min_size=1, max_size=3),
       centres=st.lists(st.integers(1, 5), min_size=3, max_size=3),
       nsample=st.integers(1, 6), radius=st.sampled_from([0.2, 0.5, 2.0]), seed=st.integers(0, 99))
def test_stack_ball_query_and_grouping_match_loop_reference(ext, counts, centres, nsample,
                                                            radius, seed):
    centres = centres[:len(counts)]
    xyz, center = cloud(seed, sum(counts), 3), cloud(seed + 1, sum(centres), 3)
    xyz_cnt, center_cnt = torch.tensor(counts, dtype=torch.int32), torch.tensor(centres,
                                                                               dtype=torch.int32)
    idx = torch.zeros(sum(centres), nsample, dtype=torch.int32)
    ext.stack_ball_query_forward(center, center_cnt, xyz, xyz_cnt, idx, max_radius=radius,
                                 nsample=nsample)
    assert idx.tolist() == ref_stack_ball_query(center, xyz, centres, counts, radius, nsample)
    # grouping with those (in-range) indices, and its backward
    idx = idx.clamp(min=0)
    features = cloud(seed + 2, sum(counts), 4)
    out = torch.zeros(sum(centres), 4, nsample)
    ext.stack_group_points_forward(features, xyz_cnt, idx, center_cnt, out, b=len(counts),
                                   m=sum(centres), c=4, nsample=nsample)
    grad = torch.zeros_like(features)
    ext.stack_group_points_backward(out, idx, center_cnt, xyz_cnt, grad, b=len(counts), c=4,
                                    m=sum(centres), n=sum(counts), nsample=nsample)
    want_grad = torch.zeros_like(features)
    j, p0 = 0, 0
    for n_points, n_centres in zip(counts, centres):
        for _ in range(n_centres):
            for s in range(nsample):
                assert torch.equal(out[j, :, s], features[p0 + idx[j, s]])
                want_grad[p0 + idx[j, s]] += out[j, :, s]
            j += 1
        p0 += n_points
    assert torch.allclose(grad, want_grad, atol=1e-6)


def ref_stack_ball_query(center, xyz, centres, counts, radius, nsample, fill=0):
    """The CUDA kernel's loop on stacked batches: per centre its own batch's first
    ``nsample`` points closer than ``radius`` (local indices, padded with the first),
    slot 0 -1 when none and the others left at ``fill`` (as the caller allocated)."""
    want, p0, c0 = [], 0, 0
    for n_points, n_centres in zip(counts, centres):
        pts = xyz[p0:p0 + n_points].tolist()
        for c in center[c0:c0 + n_centres].tolist():
            row = ref_ball_row(c, pts, nsample, lambda dist: dist < radius ** 2, fill)
            want.append(row if row is not None else [-1] + [fill] * (nsample - 1))
        p0, c0 = p0 + n_points, c0 + n_centres
    return want


@pytest.mark.parametrize("kind", ["uniform", "grid", "repeated", "far"])
def test_stack_ball_query_on_large_batches_matches_loop_reference(ext, kind):
    # Batches either side of DENSE_BALL_QUERY_POINTS (whole rows below, candidates by
    # matrix product above), an empty batch of points, centres with no point in range
    # (their rows keep the caller's fill but for slot 0's -1), and zero distances.
    limit = points_module().DENSE_BALL_QUERY_POINTS
    counts, centres = [limit + 90, 0, limit - 1], [20, 3, 25]
    xyz = large_cloud(kind, 1, sum(counts))[0]
    center = torch.cat([xyz[:4], large_cloud(kind, 1, 77)[0, :16] + 0.3, xyz[-3:],
                        large_cloud(kind, 1, 78)[0, :25]])
    nsample, radius = 32, 0.3
    idx = torch.full((sum(centres), nsample), 7, dtype=torch.int32)
    ext.stack_ball_query_forward(center, torch.tensor(centres, dtype=torch.int32), xyz,
                                 torch.tensor(counts, dtype=torch.int32), idx,
                                 max_radius=radius, nsample=nsample)
    assert idx.tolist() == ref_stack_ball_query(center, xyz, centres, counts, radius, nsample,
                                                fill=7)


def ref_point_in_quad(px, py, quad):
    """mmcv's crossing-number loop for one point and one quadrilateral."""
    crossings = 0
    j = 3
    for i in range(4):
        sx, sy, tx, ty = quad[2 * i], quad[2 * i + 1], quad[2 * j], quad[2 * j + 1]
        j = i
        if py < min(sy, ty) or py > max(sy, ty):
            continue
        if (sx == px and sy == py) or (tx == px and ty == py):
            break
        if (sy < py <= ty) or (ty < py <= sy):
            x = torch.tensor(sx) + (torch.tensor(py) - sy) * (torch.tensor(tx) - sx) / (
                torch.tensor(ty) - sy)  # float32, in the kernel's order
            if float(x) == px:
                break
            if float(x) > px:
                crossings += 1
    return float(crossings % 2)


@EXAMPLES
@given(points=st.integers(1, 20), quads=st.integers(1, 5), seed=st.integers(0, 999))
def test_points_in_polygons_match_crossing_loop(ops, points, quads, seed):
    from mmcv.ops import points_in_polygons
    g = torch.Generator().manual_seed(seed)
    pts = torch.randint(0, 8, (points, 2), generator=g).float()  # grid: vertex/edge hits
    polys = torch.randint(0, 8, (quads, 8), generator=g).float()
    got = points_in_polygons(pts, polys)
    want = [[ref_point_in_quad(float(p[0]), float(p[1]), q.tolist()) for q in polys] for p in pts]
    assert got.tolist() == want


def inside_box(p, box):
    x, y, z = p
    cx, cy, cz, dx, dy, dz, rz = box
    cz += dz / 2
    if abs(z - cz) > dz / 2:
        return False
    c, s = math.cos(-rz), math.sin(-rz)
    lx = (x - cx) * c - (y - cy) * s
    ly = (x - cx) * s + (y - cy) * c
    return -dx / 2 < lx < dx / 2 and -dy / 2 < ly < dy / 2


@EXAMPLES
@given(n=st.integers(1, 30), boxes=st.integers(1, 4), sampled=st.integers(1, 6),
       seed=st.integers(0, 999))
def test_roipoint_pool3d_matches_loop_reference(ops, n, boxes, sampled, seed):
    from mmcv.ops import RoIPointPool3d
    g = torch.Generator().manual_seed(seed)
    xyz = torch.rand(1, n, 3, generator=g, dtype=torch.float64) * 4
    feats = torch.rand(1, n, 2, generator=g, dtype=torch.float64)
    box = torch.cat([torch.rand(1, boxes, 3, generator=g, dtype=torch.float64) * 4,
                     torch.rand(1, boxes, 3, generator=g, dtype=torch.float64) * 3 + 0.5,
                     torch.rand(1, boxes, 1, generator=g, dtype=torch.float64) * 3], -1)
    pooled, empty = RoIPointPool3d(num_sampled_points=sampled)(xyz, feats, box)
    for m in range(boxes):
        hits = [k for k in range(n) if inside_box(xyz[0, k].tolist(), box[0, m].tolist())]
        hits = hits[:sampled]
        assert int(empty[0, m]) == (not hits)
        for s in range(sampled):
            want = (torch.cat([xyz[0, hits[s % len(hits)]], feats[0, hits[s % len(hits)]]])
                    if hits else torch.zeros(5, dtype=torch.float64))
            assert torch.equal(pooled[0, m, s], want)


def ref_roiaware_cells(rois, pts, out_size, max_pts):
    """Per box, cell (x, y, z) -> the first ``max_pts - 1`` inside points, index order."""
    cells = []
    for box in rois.tolist():
        cx, cy, cz, dx, dy, dz, rz = box
        found = {}
        for k, p in enumerate(pts.tolist()):
            if not inside_box(p, box):
                continue
            c, s = math.cos(-rz), math.sin(-rz)
            local = ((p[0] - cx) * c - (p[1] - cy) * s + dx / 2,
                     (p[0] - cx) * s + (p[1] - cy) * c + dy / 2, p[2] - cz)
            key = tuple(min(max(int(v / (size / n)), 0), n - 1)
                        for v, size, n in zip(local, (dx, dy, dz), out_size))
            members = found.setdefault(key, [])
            if len(members) < max_pts - 1:
                members.append(k)
        cells.append(found)
    return cells


@EXAMPLES
@given(n=st.integers(1, 40), boxes=st.integers(1, 3), grid=st.tuples(*[st.integers(1, 3)] * 3),
       max_pts=st.integers(2, 5), seed=st.integers(0, 999))
def test_roiaware_pool3d_matches_loop_reference(ops, ext, n, boxes, grid, max_pts, seed):
    from mmcv.ops import RoIAwarePool3d
    g = torch.Generator().manual_seed(seed)
    xyz = torch.rand(n, 3, generator=g, dtype=torch.float64) * 3
    feats = torch.randn(n, 3, generator=g, dtype=torch.float64)
    rois = torch.cat([torch.rand(boxes, 3, generator=g, dtype=torch.float64) * 3,
                      torch.rand(boxes, 3, generator=g, dtype=torch.float64) * 2 + 0.5,
                      torch.rand(boxes, 1, generator=g, dtype=torch.float64) * 3], -1)
    cells = ref_roiaware_cells(rois, xyz, grid, max_pts)
    max_out = RoIAwarePool3d(grid, max_pts, "max")(rois, xyz, feats)
    avg_out = RoIAwarePool3d(grid, max_pts, "avg")(rois, xyz, feats)
    argmax = torch.zeros(boxes, *grid, 3, dtype=torch.int32)
    slots = torch.zeros(boxes, *grid, max_pts, dtype=torch.int32)
    ext.roiaware_pool3d_forward(rois, xyz, feats, argmax, slots,
                                torch.zeros(boxes, *grid, 3, dtype=torch.float64), pool_method=0)
    for m in range(boxes):
        for x in range(grid[0]):
            for y in range(grid[1]):
                for z in range(grid[2]):
                    members = cells[m].get((x, y, z), [])
                    assert slots[m, x, y, z, 0] == len(members)
                    assert slots[m, x, y, z, 1:len(members) + 1].tolist() == members
                    if not members:
                        assert not max_out[m, x, y, z].any() and not avg_out[m, x, y, z].any()
                        assert argmax[m, x, y, z].tolist() == [-1] * 3
                        continue
                    rows = feats[members]
                    assert torch.equal(max_out[m, x, y, z], rows.max(0).values)
                    winners = [members[int(rows[:, c].argmax())] for c in range(3)]
                    assert argmax[m, x, y, z].tolist() == winners
                    assert torch.allclose(avg_out[m, x, y, z], rows.mean(0))


@pytest.mark.parametrize("mode", ["max", "avg"])
def test_roiaware_pool3d_gradcheck(ops, mode):
    from mmcv.ops import RoIAwarePool3d
    g = torch.Generator().manual_seed(3)
    xyz = torch.rand(60, 3, generator=g, dtype=torch.float64) * 3
    feats = torch.randn(60, 2, generator=g, dtype=torch.float64, requires_grad=True)
    rois = torch.tensor([[1.5, 1.5, 0.2, 2.5, 2.0, 2.5, 0.4], [1.0, 2.0, 0.5, 1.5, 1.5, 2.0, 2.0]],
                        dtype=torch.float64)
    pool = RoIAwarePool3d((2, 3, 2), max_pts_per_voxel=4, mode=mode)
    assert torch.autograd.gradcheck(lambda f: pool(rois, xyz, f), (feats,))
    pool(rois, xyz, feats).sum().backward()
    assert feats.grad.abs().sum() > 0   # some points are pooled: the check saw gradients


@pytest.mark.parametrize("kind", ["uniform", "grid", "repeated", "far"])
@pytest.mark.parametrize("m", [300, 2001])
def test_three_nn_on_large_clouds_equals_the_exact_search(ext, kind, m):
    # knn's search: whole rows up to points.DENSE_KNN_POINTS sources, blocks above.
    source = large_cloud(kind, 2, m)
    target = torch.cat([source[:, :5], large_cloud(kind, 2, 70 + m)[:, :60]], 1)
    n = target.shape[1]
    idx = torch.zeros(2, n, 3, dtype=torch.int32)
    dist2 = torch.zeros(2, n, 3)
    ext.three_nn_forward(target, source, dist2, idx, b=2, n=n, m=m)
    values, order = exact_order(target, source)
    assert torch.equal(dist2, values[:, :, :3])
    assert torch.equal(idx.long(), order[:, :, :3])

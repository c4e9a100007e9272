"""Stand-ins for the compiled extensions that research projects build themselves
(``registry/cuda_extensions/project_extensions.py``): BEVFusion's ``bev_pool_ext`` and
``voxel_layer``, BEVDet's ``bev_pool_v2_ext``, DSVT's ``ingroup_inds_cuda``, and
``declare_extension`` for one more.

The kernels are checked in this process against references written here with Python
loops (gradients through autograd of the loop reference); how the stand-ins are found,
provided and reported is checked in fresh interpreters on temporary packages laid out
like the projects (``interpreter`` fixture), with the real torch.
"""

from __future__ import annotations

import importlib
import math
import os
import sys

import pytest
import torch
from conftest import last_json
from hypothesis import given, settings
from hypothesis import strategies as st

try:
    import lazypatch.registry.cuda_extensions as pack
except ImportError:   # running from a checkout without the installed layout
    import registry.cuda_extensions as pack

bev_pool = importlib.import_module(f"{pack.__name__}.bev_pool")
voxel_layer = importlib.import_module(f"{pack.__name__}.voxel_layer")
ingroup_inds = importlib.import_module(f"{pack.__name__}.ingroup_inds")

EXAMPLES = settings(max_examples=15, deadline=None, derandomize=True)


def intervals_of(ranks: torch.Tensor):
    """Starts and lengths of the runs of equal values of sorted ``ranks`` (int32), as
    the projects' Python code computes them before calling the kernels."""
    kept = torch.ones(ranks.numel(), dtype=torch.bool)
    kept[1:] = ranks[1:] != ranks[:-1]
    starts = torch.where(kept)[0]
    lengths = torch.diff(torch.cat([starts, torch.tensor([ranks.numel()])]))
    return starts.int(), lengths.int()


# ------------------------------------------------------------- BEVFusion bev_pool

class BevPool(torch.autograd.Function):
    """The stand-in's forward and backward as one differentiable function."""

    @staticmethod
    def forward(ctx, x, geom, starts, lengths, shape):
        ctx.saved = (geom, starts, lengths, shape)
        return bev_pool.bev_pool_forward(x, geom, lengths, starts, *shape)

    @staticmethod
    def backward(ctx, grad):
        geom, starts, lengths, shape = ctx.saved
        return (bev_pool.bev_pool_backward(grad.contiguous(), geom, lengths, starts, *shape),
                None, None, None, None)


def loop_bev_pool(x, geom, shape):
    """(B, D, H, W, C) sums of the rows of ``x`` per (batch, depth, h, w) cell, one point
    at a time."""
    b, d, h, w = shape
    out = [[[[torch.zeros(x.shape[1], dtype=x.dtype) for _ in range(w)] for _ in range(h)]
            for _ in range(d)] for _ in range(b)]
    for row, (gh, gw, gd, gb) in zip(x, geom.tolist()):
        out[gb][gd][gh][gw] = out[gb][gd][gh][gw] + row
    return torch.stack([torch.stack([torch.stack([torch.stack(cells) for cells in plane])
                                     for plane in depth]) for depth in out])


@EXAMPLES
@given(n=st.integers(1, 60), c=st.integers(1, 4), shape=st.tuples(
    st.integers(1, 2), st.integers(1, 3), st.integers(1, 4), st.integers(1, 4)),
    seed=st.integers(0, 999))
def test_bev_pool_matches_loop_reference_forward_and_backward(n, c, shape, seed):
    g = torch.Generator().manual_seed(seed)
    b, d, h, w = shape
    geom = torch.stack([torch.randint(0, size, (n,), generator=g) for size in (h, w, d, b)], 1)
    x = torch.randn(n, c, generator=g, dtype=torch.float64)
    ranks = ((geom[:, 3] * d + geom[:, 2]) * h + geom[:, 0]) * w + geom[:, 1]
    order = ranks.argsort(stable=True)
    x, geom, ranks = x[order], geom[order].int(), ranks[order]
    starts, lengths = intervals_of(ranks)
    ours = x.clone().requires_grad_()
    reference = x.clone().requires_grad_()
    out = BevPool.apply(ours, geom, starts, lengths, shape)
    expected = loop_bev_pool(reference, geom, shape)
    assert torch.allclose(out, expected)
    weights = torch.randn(out.shape, generator=g, dtype=torch.float64)
    (out * weights).sum().backward()
    (expected * weights).sum().backward()
    assert torch.allclose(ours.grad, reference.grad)


def test_bev_pool_points_outside_every_interval_get_no_gradient():
    x = torch.randn(5, 2, dtype=torch.float64)
    geom = torch.tensor([[0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0], [0, 1, 0, 0]],
                        dtype=torch.int32)
    # Interval (0, 2) and (3, 1): point 2 and point 4 are in none.
    starts, lengths = torch.tensor([0, 3], dtype=torch.int32), torch.tensor([2, 1],
                                                                               dtype=torch.int32)
    out = bev_pool.bev_pool_forward(x, geom, lengths, starts, 1, 1, 2, 2)
    assert torch.equal(out[0, 0, 0, 0], x[0] + x[1])
    assert torch.equal(out[0, 0, 1, 1], x[3])
    assert not out[0, 0, 0, 1].any()
    grad = bev_pool.bev_pool_backward(torch.ones(1, 1, 2, 2, 2, dtype=torch.float64), geom,
                                      lengths, starts, 1, 1, 2, 2)
    assert grad[:, 0].tolist() == [1, 1, 0, 1, 0]


# ------------------------------------------------------------- BEVDet bev_pool_v2

class BevPoolV2(torch.autograd.Function):
    """BEVDet's calling convention: forward intervals by BEV cell, backward intervals by
    feature row (re-sorted), gradients added by ``bev_pool_v2_backward_opt``."""

    @staticmethod
    def forward(ctx, depth, feat, ranks_depth, ranks_feat, ranks_bev, out_shape, backward):
        starts, lengths = intervals_of(ranks_bev)
        out = feat.new_zeros(out_shape)
        bev_pool.bev_pool_v2_forward(depth, feat, out, ranks_depth, ranks_feat, ranks_bev,
                                     lengths, starts)
        ctx.save_for_backward(depth, feat, ranks_depth, ranks_feat, ranks_bev)
        ctx.backward_kernel = backward
        return out

    @staticmethod
    def backward(ctx, grad):
        depth, feat, ranks_depth, ranks_feat, ranks_bev = ctx.saved_tensors
        order = ranks_feat.argsort(stable=True)
        ranks_depth, ranks_feat, ranks_bev = ranks_depth[order], ranks_feat[order], \
            ranks_bev[order]
        starts, lengths = intervals_of(ranks_feat)
        depth_grad, feat_grad = torch.zeros_like(depth), torch.zeros_like(feat)
        getattr(bev_pool, ctx.backward_kernel)(
            grad.contiguous(), depth_grad, feat_grad, depth, feat, ranks_depth, ranks_feat,
            ranks_bev, lengths, starts)
        return depth_grad, feat_grad, None, None, None, None, None


def loop_bev_pool_v2(depth, feat, ranks_depth, ranks_feat, ranks_bev, out_shape):
    channels = feat.shape[-1]
    rows = [torch.zeros(channels, dtype=feat.dtype) for _ in range(
        out_shape[0] * out_shape[1] * out_shape[2] * out_shape[3])]
    flat_depth, flat_feat = depth.reshape(-1), feat.reshape(-1, channels)
    for rd, rf, rb in zip(ranks_depth.tolist(), ranks_feat.tolist(), ranks_bev.tolist()):
        rows[rb] = rows[rb] + flat_depth[rd] * flat_feat[rf]
    return torch.stack(rows).view(out_shape)


@EXAMPLES
@given(cams=st.integers(1, 2), d=st.integers(1, 4), fh=st.integers(1, 3), fw=st.integers(1, 3),
       c=st.integers(1, 3), keep=st.floats(0.3, 1.0), seed=st.integers(0, 999),
       backward=st.sampled_from(["bev_pool_v2_backward_opt", "bev_pool_v2_backward"]))
def test_bev_pool_v2_matches_loop_reference_forward_and_backward(cams, d, fh, fw, c, keep, seed,
                                                                  backward):
    g = torch.Generator().manual_seed(seed)
    out_shape = (1, 2, 3, 3, c)   # (B, Z, Y, X, C)
    depth = torch.rand(1, cams, d, fh, fw, generator=g, dtype=torch.float64)
    feat = torch.randn(1, cams, fh, fw, c, generator=g, dtype=torch.float64)
    # Every frustum point (camera, depth bin, pixel) once, as BEVDet builds them; some
    # fall outside the grid and are dropped.
    ranks_depth = torch.arange(depth.numel())
    cam, _, row, col = torch.unravel_index(ranks_depth, (cams, d, fh, fw))
    ranks_feat = (cam * fh + row) * fw + col
    ranks_bev = torch.randint(0, 2 * 3 * 3, (depth.numel(),), generator=g)
    chosen = torch.rand(depth.numel(), generator=g) < keep
    ranks_depth, ranks_feat, ranks_bev = ranks_depth[chosen], ranks_feat[chosen], \
        ranks_bev[chosen]
    if ranks_bev.numel() == 0:
        return
    order = ranks_bev.argsort(stable=True)
    ranks = [r[order].int() for r in (ranks_depth, ranks_feat, ranks_bev)]
    ours = [t.clone().requires_grad_() for t in (depth, feat)]
    reference = [t.clone().requires_grad_() for t in (depth, feat)]
    out = BevPoolV2.apply(*ours, *ranks, out_shape, backward)
    expected = loop_bev_pool_v2(*reference, *ranks, out_shape)
    assert torch.allclose(out, expected)
    weights = torch.randn(out_shape, generator=g, dtype=torch.float64)
    (out * weights).sum().backward()
    (expected * weights).sum().backward()
    assert torch.allclose(ours[0].grad, reference[0].grad)
    assert torch.allclose(ours[1].grad, reference[1].grad)


# ------------------------------------------------------------- voxel_layer

def loop_voxels(points, voxel_size, coors_range, max_points, max_voxels):
    """Hard voxelization one point at a time: voxels numbered by first point, (z, y, x)."""
    voxels, order = {}, []
    for p in points.tolist():
        key = []
        for axis in range(3):
            cells = round((coors_range[axis + 3] - coors_range[axis]) / voxel_size[axis])
            index = int((p[axis] - coors_range[axis]) // voxel_size[axis])
            if not 0 <= index < cells:
                break
            key.append(index)
        else:
            key = tuple(reversed(key))
            if key not in voxels:
                if len(order) == max_voxels:
                    continue
                voxels[key] = []
                order.append(key)
            if len(voxels[key]) < max_points:
                voxels[key].append(p)
    return order, voxels


@EXAMPLES
@given(n=st.integers(1, 80), max_points=st.integers(1, 4), max_voxels=st.integers(1, 30),
       seed=st.integers(0, 999))
def test_voxel_layer_hard_and_dynamic_voxelize_match_loop_reference(n, max_points, max_voxels,
                                                                    seed):
    g = torch.Generator().manual_seed(seed)
    voxel_size, coors_range = [0.5, 0.5, 1.0], [0.0, -1.0, 0.0, 2.0, 1.0, 2.0]
    points = torch.rand(n, 4, generator=g) * torch.tensor([2.6, 2.6, 2.4, 1.0]) \
        - torch.tensor([0.3, 1.3, 0.2, 0.0])
    voxels = points.new_zeros(max_voxels, max_points, 4)
    coors = points.new_zeros(max_voxels, 3, dtype=torch.int)
    counts = points.new_zeros(max_voxels, dtype=torch.int)
    # BEVFusion's argument order: tensors to fill, then size and range as lists.
    made = voxel_layer.hard_voxelize(points, voxels, coors, counts, voxel_size, coors_range,
                                     max_points, max_voxels, 3, True)
    order, members = loop_voxels(points, voxel_size, coors_range, max_points, max_voxels)
    assert made == len(order)
    assert coors[:made].tolist() == [list(key) for key in order]
    assert counts[:made].tolist() == [len(members[key]) for key in order]
    for slot, key in enumerate(order):
        rows = torch.tensor(members[key])
        assert torch.equal(voxels[slot, :len(rows)], rows)
        assert not voxels[slot, len(rows):].any()
    dynamic = points.new_zeros(n, 3, dtype=torch.int)
    voxel_layer.dynamic_voxelize(points, dynamic, voxel_size, coors_range, 3)
    inside = {tuple(row) for row in dynamic.tolist() if row != [-1, -1, -1]}
    assert set(order) <= inside   # every voxel made holds points of dynamic voxelization
    for p, row in zip(points.tolist(), dynamic.tolist()):
        expected = loop_voxels(torch.tensor([p]), voxel_size, coors_range, 1, 1)[0]
        assert row == (list(expected[0]) if expected else [-1, -1, -1])


def test_voxel_layer_scatter_is_the_mmcv_kernel_with_gradients():
    feats = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    coors = torch.tensor([[0, 0, 1], [0, 0, 1], [1, 0, 0], [-1, 0, 0], [1, 0, 0], [0, 0, 1],
                          [2, 2, 2]], dtype=torch.int32)
    voxel_feats, voxel_coors, point_to_voxel, counts = \
        voxel_layer.dynamic_point_to_voxel_forward(feats.detach(), coors, "mean")
    assert voxel_coors.tolist() == [[0, 0, 1], [1, 0, 0], [2, 2, 2]]
    assert counts.tolist() == [3, 2, 1] and point_to_voxel.tolist() == [0, 0, 1, -1, 1, 0, 2]
    assert torch.allclose(voxel_feats[0], feats[[0, 1, 5]].mean(0))
    grad_feats = torch.zeros_like(feats)
    voxel_layer.dynamic_point_to_voxel_backward(grad_feats, torch.ones_like(voxel_feats),
                                                feats.detach(), voxel_feats, point_to_voxel,
                                                counts, "mean")
    assert torch.allclose(grad_feats[:, 0], torch.tensor(
        [1 / 3, 1 / 3, 1 / 2, 0, 1 / 2, 1 / 3, 1], dtype=torch.float64))


# ------------------------------------------------------------- DSVT ingroup_inds

@EXAMPLES
@given(groups=st.lists(st.integers(0, 6), min_size=0, max_size=60),
       scale=st.sampled_from([1, 10 ** 12]))
def test_ingroup_inds_counts_earlier_members_of_each_group(groups, scale):
    group_inds = torch.tensor(groups, dtype=torch.long) * scale
    out = torch.zeros_like(group_inds) - 1
    ingroup_inds.ingroup_inds_forward(group_inds, out)
    seen = {}
    expected = []
    for value in group_inds.tolist():
        expected.append(seen.get(value, 0))
        seen[value] = expected[-1] + 1
    assert out.tolist() == expected


# ------------------------------------------------------------- found, provided, reported

#: A package laid out like projects/BEVFusion and projects/DSVT of mmdetection3d 1.4,
#: with Python code of our own that calls the compiled modules as the projects do.
PROJECT_FILES = {
    "projects/__init__.py": "",
    "projects/BEVFusion/__init__.py": "",
    "projects/BEVFusion/bevfusion/__init__.py": "from .ops import bev_pool, voxelize\n",
    "projects/BEVFusion/bevfusion/ops/__init__.py": """
        from .bev_pool import bev_pool
        from .voxel import voxelize
    """,
    "projects/BEVFusion/bevfusion/ops/bev_pool/__init__.py": "from .bev_pool import bev_pool\n",
    "projects/BEVFusion/bevfusion/ops/bev_pool/bev_pool.py": """
        import torch
        from . import bev_pool_ext

        class Pool(torch.autograd.Function):
            @staticmethod
            def forward(ctx, feats, coords, starts, lengths, b, d, h, w):
                ctx.saved = (coords, starts, lengths, (b, d, h, w))
                return bev_pool_ext.bev_pool_forward(feats, coords, lengths, starts, b, d, h, w)

            @staticmethod
            def backward(ctx, grad):
                coords, starts, lengths, shape = ctx.saved
                return (bev_pool_ext.bev_pool_backward(grad.contiguous(), coords, lengths,
                                                       starts, *shape),) + (None,) * 7

        def bev_pool(feats, coords, b, d, h, w):
            ranks = ((coords[:, 3] * d + coords[:, 2]) * h + coords[:, 0]) * w + coords[:, 1]
            order = ranks.argsort()
            feats, coords, ranks = feats[order], coords[order].int(), ranks[order]
            new = torch.ones_like(ranks, dtype=torch.bool)
            new[1:] = ranks[1:] != ranks[:-1]
            starts = torch.where(new)[0]
            lengths = torch.diff(torch.cat([starts, starts.new_tensor([len(ranks)])]))
            return Pool.apply(feats, coords, starts.int(), lengths.int(), b, d, h, w)
    """,
    "projects/BEVFusion/bevfusion/ops/voxel/__init__.py": "from .voxelize import voxelize\n",
    "projects/BEVFusion/bevfusion/ops/voxel/voxelize.py": """
        import torch
        from .voxel_layer import dynamic_voxelize, hard_voxelize

        def voxelize(points, voxel_size, coors_range, max_points, max_voxels):
            voxels = points.new_zeros(max_voxels, max_points, points.shape[1])
            coors = points.new_zeros(max_voxels, 3, dtype=torch.int)
            counts = points.new_zeros(max_voxels, dtype=torch.int)
            made = hard_voxelize(points, voxels, coors, counts, voxel_size, coors_range,
                                 max_points, max_voxels, 3, True)
            return voxels[:made], coors[:made], counts[:made]
    """,
    # DSVT's ops folders have no __init__.py: namespace packages.
    "projects/DSVT/dsvt/__init__.py": "",
    "projects/DSVT/dsvt/ops/ingroup_inds/ingroup_inds_op.py": """
        import torch
        from . import ingroup_inds_cuda

        def ingroup_inds(group_inds):
            out = torch.zeros_like(group_inds) - 1
            ingroup_inds_cuda.forward(group_inds, out)
            return out
    """,
}

RUN_PROJECT = '''
import json, sys
import lazypatch.auto
import lazypatch, torch
from projects.BEVFusion.bevfusion import bev_pool, voxelize
from projects.DSVT.dsvt.ops.ingroup_inds.ingroup_inds_op import ingroup_inds
feats = torch.arange(12.0).view(6, 2).requires_grad_()
coords = torch.tensor([[0, 1, 0, 0], [0, 1, 0, 0], [1, 0, 0, 1], [0, 0, 0, 0], [1, 0, 0, 1],
                       [0, 1, 0, 0]])
out = bev_pool(feats, coords, 2, 1, 2, 2)
(out * torch.arange(out.numel()).view(out.shape)).sum().backward()
points = torch.tensor([[0.1, 0.1, 0.1, 1.0], [0.2, 0.1, 0.1, 2.0], [1.6, 0.1, 0.1, 3.0]])
voxels, coors, counts = voxelize(points, [1.0, 1.0, 1.0], [0, 0, 0, 2, 2, 2], 4, 10)
ext = sys.modules["projects.BEVFusion.bevfusion.ops.bev_pool.bev_pool_ext"]
records = {r.name[len("cuda_extensions."):]: [r.status, r.reason, r.notes]
           for r in lazypatch.report() if r.name.startswith("cuda_extensions.projects.")}
print(json.dumps({"cell": out[0, 0, 0, 1].tolist(), "other": out[1, 0, 1, 0].tolist(),
                  "grad": feats.grad[:, 0].tolist(), "coors": coors.tolist(),
                  "counts": counts.tolist(), "ranks": ingroup_inds(torch.tensor([5, 2, 5, 5])).tolist(),
                  "marked": getattr(ext, "__lazypatch_pure_pytorch__", None),
                  "records": records}))
'''


def test_projects_import_and_run_with_the_stand_ins_and_report_them(interpreter):
    interpreter.write(PROJECT_FILES)
    result = interpreter.run_json(RUN_PROJECT, env={"LAZYPATCH_ENABLE": "device,cuda_extensions"})
    assert result["cell"] == [0 + 2 + 10, 1 + 3 + 11]       # points 0, 1, 5 in (b0, h0, w1)
    assert result["other"] == [4 + 8, 5 + 9]                  # points 2, 4 in (b1, h1, w0)
    # d out / d feats[k, 0] is the flat index of the point's cell (channel 0)
    assert result["grad"] == [2, 2, 12, 0, 12, 2]
    assert result["coors"] == [[0, 0, 0], [0, 0, 1]] and result["counts"] == [2, 1]
    assert result["ranks"] == [0, 0, 1, 2]
    assert result["marked"] == "cuda_extensions"
    used = {"projects.BEVFusion.bevfusion.ops.bev_pool.bev_pool_ext",
            "projects.BEVFusion.bevfusion.ops.voxel.voxel_layer",
            "projects.DSVT.dsvt.ops.ingroup_inds.ingroup_inds_cuda"}
    # The other projects' extensions (Sparse4D's) wait for a package never imported here.
    records = result["records"]
    assert used <= set(records)
    assert {records[name][0] for name in set(records) - used} == {"pending"}
    for name, (status, reason, notes) in records.items():
        if name not in used:
            continue
        assert status == "applied", (name, reason)
        assert any("pure-PyTorch" in note and "not built" in note for note in notes), notes


def test_without_the_pack_the_project_import_fails_as_without_lazypatch(interpreter):
    interpreter.write(PROJECT_FILES)
    result = interpreter.run_json('''
import json
import lazypatch.auto
import lazypatch
import lazypatch.registry.cuda_extensions   # declared, not enabled
try:
    import projects.BEVFusion.bevfusion
    outcome = "imported"
except ImportError as error:
    outcome = type(error).__name__ + ": " + str(error)
statuses = {r.name: r.status for r in lazypatch.report() if "project_extensions" in r.tags}
print(json.dumps({"outcome": outcome, "statuses": statuses}))
''')
    assert "bev_pool_ext" in result["outcome"] and result["outcome"].startswith("ImportError")
    # one patch per extension in a package; a top-level one has a boundary and a fill; and
    # one per mmdetection3d 0.17 module whose layer registrations clash with mmcv's
    declared = pack.project_extensions.PROJECT_EXTENSIONS
    forks = importlib.import_module(f"{pack.__name__}.fork_registrations").FORK_MODULES
    assert len(result["statuses"]) == len(declared) + sum(
        "." not in name for name in declared) + len(forks)
    assert set(result["statuses"].values()) == {"disabled"}


def test_a_compiled_module_that_cannot_load_gets_the_stand_in_with_the_reason(interpreter):
    from importlib.machinery import EXTENSION_SUFFIXES
    broken = f"projects/BEVFusion/bevfusion/ops/bev_pool/bev_pool_ext{EXTENSION_SUFFIXES[0]}"
    interpreter.write(PROJECT_FILES)
    (interpreter.root / broken).write_bytes(b"not an ELF file: built for another machine")
    result = interpreter.run_json(RUN_PROJECT, env={"LAZYPATCH_ENABLE": "cuda_extensions"})
    status, _, notes = result["records"]["projects.BEVFusion.bevfusion.ops.bev_pool.bev_pool_ext"]
    assert status == "applied"
    assert any("cannot load" in note and "ImportError" in note for note in notes), notes
    assert result["cell"] == [12, 15]


def test_functions_the_project_sources_bind_beyond_the_stand_in_raise_naming_themselves(
        interpreter):
    interpreter.write({**PROJECT_FILES, "projects/BEVFusion/bevfusion/ops/bev_pool/src/pool.cpp": """
        #include <torch/extension.h>
        PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
          module.def("bev_pool_forward", &pool_forward, "forward");
          module.def( "bev_pool_backward", &pool_backward);
          module.def("bev_pool_statistics", &pool_statistics);
        }
    """})
    result = interpreter.run_json('''
import json, sys
import lazypatch.auto
import lazypatch
import projects.BEVFusion.bevfusion
ext = sys.modules["projects.BEVFusion.bevfusion.ops.bev_pool.bev_pool_ext"]
try:
    ext.bev_pool_statistics()
    raised = None
except NotImplementedError as error:
    raised = str(error)
record = [r for r in lazypatch.report() if r.name.endswith("bev_pool.bev_pool_ext")][0]
print(json.dumps({"raised": raised, "notes": record.notes, "all": ext.__all__}))
''', env={"LAZYPATCH_ENABLE": "cuda_extensions"})
    assert "bev_pool_statistics" in result["raised"] and "src/pool.cpp" in result["raised"]
    assert result["all"] == ["bev_pool_backward", "bev_pool_forward", "bev_pool_statistics"]
    assert result["notes"][0].startswith(
        "pure-PyTorch bev_pool stand-in (bev_pool_backward, bev_pool_forward)")
    assert "also bind bev_pool_statistics" in result["notes"][1]


def test_a_real_extension_that_loads_is_used_untouched_and_reported_skipped(interpreter):
    import _bisect
    import shutil
    from importlib.machinery import EXTENSION_SUFFIXES
    # A real compiled module (the standard library's _bisect, under its own name, so its
    # PyInit_ symbol matches) inside a package, and a Python module at another name.
    interpreter.write({"tool/__init__.py": "from . import _bisect, pyext\n",
                       "tool/pyext.py": "def forward(*args):\n    return 'python'\n"})
    shutil.copy(_bisect.__file__, interpreter.root / f"tool/_bisect{EXTENSION_SUFFIXES[0]}")
    result = interpreter.run_json('''
import json
import lazypatch
from lazypatch.registry.cuda_extensions import declare_extension
declare_extension("tool._bisect", like="ingroup_inds")
declare_extension("tool.pyext", functions={"forward": "json:dumps"})
import tool
records = {r.name: [r.status, r.reason] for r in lazypatch.report()
           if r.name.startswith("cuda_extensions.tool")}
print(json.dumps({"bisect": tool._bisect.bisect_left([1, 3, 5], 4), "file": tool._bisect.__file__,
                  "python": tool.pyext.forward(), "records": records}))
''')
    assert result["bisect"] == 2 and result["file"].startswith(str(interpreter.root))
    assert result["python"] == "python"
    for name in ("cuda_extensions.tool._bisect", "cuda_extensions.tool.pyext"):
        status, reason = result["records"][name]
        assert status == "skipped" and "built and loads" in reason, (name, reason)


DECLARED = '''
import json, sys
import lazypatch
from lazypatch.registry.cuda_extensions import declare_extension

# The worked example of docs/point_cloud_ops.md: a BEVDet-style fork keeps bev_pool_v2
# at another path, and one more kernel of its own.
declare_extension("my_bev.ops.bev_pool_v2.bev_pool_v2_ext", like="bev_pool_v2",
                  functions={"count_points": "my_bev.kernels:count_points"})
import torch
from my_bev.ops.bev_pool_v2 import pool
out = pool(torch.tensor([0.5, 2.0]), torch.tensor([[1.0, 1.0], [3.0, 5.0]]))
ext = sys.modules["my_bev.ops.bev_pool_v2.bev_pool_v2_ext"]
record = [r for r in lazypatch.report() if r.name.startswith("cuda_extensions.my_bev")][0]
summary = {"out": out.tolist(), "count": ext.count_points(torch.ones(3)),
           "names": sorted(ext.__all__), "status": record.status, "notes": record.notes}
lazypatch.unpatch_all()
summary["after_undo"] = "my_bev.ops.bev_pool_v2.bev_pool_v2_ext" in sys.modules
print(json.dumps(summary))
'''

DECLARED_FILES = {
    "my_bev/__init__.py": "",
    "my_bev/kernels.py": "def count_points(points):\n    return int(points.shape[0])\n",
    "my_bev/ops/__init__.py": "",
    "my_bev/ops/bev_pool_v2/__init__.py": """
        import torch
        from . import bev_pool_v2_ext

        def pool(depth, feat):
            out = feat.new_zeros(1, 1, 1, 1, feat.shape[1])
            ranks = torch.tensor([0, 1], dtype=torch.int32)
            bev_pool_v2_ext.bev_pool_v2_forward(
                depth, feat, out, ranks, ranks, torch.zeros(2, dtype=torch.int32),
                torch.tensor([2], dtype=torch.int32), torch.tensor([0], dtype=torch.int32))
            return out.flatten()
    """,
}


def test_declare_extension_worked_example_provides_the_kind_and_extra_functions(interpreter):
    interpreter.write(DECLARED_FILES)
    result = interpreter.run_json(DECLARED)
    assert result["out"] == [0.5 * 1 + 2 * 3, 0.5 * 1 + 2 * 5]
    assert result["count"] == 3
    assert result["names"] == ["bev_pool_v2_backward", "bev_pool_v2_backward_opt",
                               "bev_pool_v2_forward", "count_points"]
    assert result["status"] == "applied" and "not built" in " ".join(result["notes"])
    assert result["after_undo"] is False


@pytest.mark.parametrize("arguments, keywords, error", [
    (("my-project.ops.ext",), {"like": "bev_pool"}, "dotted name of the compiled module"),
    (("pkg..ext",), {"like": "bev_pool"}, "dotted name of the compiled module"),
    (("",), {"like": "bev_pool"}, "dotted name of the compiled module"),
    (("pkg.ext", "nonexistent"), {}, "not a known kind"),
    (("pkg.ext",), {"like": 3}, "not a known kind"),
    (("pkg.ext",), {}, "say what it exposes"),
    (("TopLevelExt",), {}, "say what it exposes"),
    (("pkg.ext",), {"like": "bev_pool", "name": ""}, "non-empty patch name"),
    (("pkg.ext",), {"functions": {"not a name": "json:dumps"}}, "not a function name"),
])
def test_declare_extension_refuses_bad_declarations(forget_new_patches, arguments, keywords,
                                                    error):
    with pytest.raises(ValueError, match=error):
        pack.declare_extension(*arguments, **keywords)


def test_declare_extension_refuses_a_value_that_is_not_a_function(forget_new_patches):
    with pytest.raises(TypeError, match="callable"):
        pack.declare_extension("pkg.ext", functions={"forward": 3})
    with pytest.raises(TypeError, match="functions must map"):
        pack.declare_extension("pkg.ext", functions=["forward"])


def test_like_names_every_kind_and_every_module_the_pack_stands_in_for():
    kinds = pack.project_extensions.known_kinds()
    assert set(pack.project_extensions.KINDS) <= set(kinds)
    assert {"deformable_aggregation", "geometric_kernel_attention", "torch_scatter",
            "multi_scale_deformable_attention",
            "flash_attn.flash_attn_interface", "flash_attn.bert_padding"} <= set(kinds)
    # a stand-in's own submodules are not functions it exposes
    assert "amp" not in kinds["apex.amp"][1] and "core" not in kinds["spconv.pytorch"][1]


def test_declaring_imports_no_torch(interpreter):
    result = interpreter.run_json('''
import json, sys
import lazypatch
import lazypatch.registry.cuda_extensions as pack
pack.declare_extension("pkg.ops.ext", like="bev_pool")
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in ("torch", "numpy"))))
''')
    assert result == []


# ------------------------------------------------------------- the real projects

#: An extracted mmdetection3d v1.4.0 (``git archive v1.4.0 projects configs``): the
#: research projects train one step from their own configs. Without it these skip.
MMDET3D_CHECKOUT = os.environ.get("LAZYPATCH_MMDET3D_CHECKOUT", "")

ONE_STEP = '''
"""Build a project's model from its own config; train one step on a synthetic cloud."""
import importlib, json, sys, time
import numpy as np
import torch
from mmengine.config import Config
from mmengine.optim import OptimWrapper
from mmengine.registry import init_default_scope
from mmengine.structures import InstanceData

config, box_dim, cameras = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cfg = Config.fromfile(config)
init_default_scope("mmdet3d")
for name in cfg.custom_imports.imports:
    importlib.import_module(name)
from mmdet3d.registry import MODELS
from mmdet3d.structures import Det3DDataSample, LiDARInstance3DBoxes
if cfg.model.get("img_backbone", {}).get("init_cfg"):
    cfg.model.img_backbone.init_cfg = None   # no network: pretrained weights are a URL
torch.manual_seed(0)
model = MODELS.build(cfg.model).train()
low, high = torch.tensor(cfg.point_cloud_range[:3]), torch.tensor(cfg.point_cloud_range[3:])
points = torch.cat([low + (high - low) * (0.25 + 0.5 * torch.rand(2000, 3)), torch.rand(2000, 2)], 1)
sample = Det3DDataSample()
gt = InstanceData()
gt.bboxes_3d = LiDARInstance3DBoxes(torch.tensor(
    [[5.0, 5.0, -1.0, 4.0, 2.0, 1.6, 0.3, 1.0, 0.5],
     [-8.0, 3.0, -1.0, 0.8, 0.8, 1.7, 1.0, 0.0, 0.2]])[:, :box_dim], box_dim=box_dim)
gt.labels_3d = torch.tensor([0, 1])
sample.gt_instances_3d = gt
meta = dict(box_type_3d=LiDARInstance3DBoxes, sample_idx=0)
inputs = dict(points=[points])
if cameras:
    # Cameras at the origin looking out around the car, so the frustums cover the grid.
    intrinsic = np.eye(4)
    intrinsic[:3, :3] = [[500, 0, 352], [0, 500, 128], [0, 0, 1]]
    to_lidar = []
    for k in range(cameras):
        yaw = 2 * np.pi * k / cameras
        pose = np.eye(4)
        pose[:3, :3] = np.stack([[np.sin(yaw), -np.cos(yaw), 0], [0, 0, -1.0],
                                 [np.cos(yaw), np.sin(yaw), 0]], 1)
        pose[:3, 3] = [0, 0, 1.5]
        to_lidar.append(pose)
    meta.update(cam2img=np.stack([intrinsic] * cameras), cam2lidar=np.stack(to_lidar),
                lidar2img=np.stack([intrinsic @ np.linalg.inv(pose) for pose in to_lidar]),
                img_aug_matrix=np.stack([np.eye(4)] * cameras), lidar_aug_matrix=np.eye(4),
                img_shape=(256, 704), pad_shape=(256, 704), batch_input_shape=(256, 704))
    inputs["img"] = [torch.rand(cameras, 3, 256, 704) * 255]
sample.set_metainfo(meta)
optimizer = OptimWrapper(torch.optim.SGD(model.parameters(), lr=1e-3))
started = time.perf_counter()
losses = model.train_step(dict(inputs=inputs, data_samples=[sample]), optimizer)
import lazypatch
print(json.dumps({"losses": {key: float(value) for key, value in losses.items()},
                  "seconds": time.perf_counter() - started,
                  "stand_ins": {r.name: r.status for r in lazypatch.report()
                                if r.name.startswith("cuda_extensions.projects.")}}))
'''

PROJECT_CONFIGS = {
    "DSVT": ("projects/DSVT/configs/dsvt_voxel032_res-second_secfpn_8xb1-cyclic-12e_waymoD5"
             "-3d-3class.py", 7, 0, ["projects.DSVT.dsvt.ops.ingroup_inds.ingroup_inds_cuda"]),
    "BEVFusion-lidar": ("projects/BEVFusion/configs/bevfusion_lidar_voxel0075_second_secfpn_"
                        "8xb4-cyclic-20e_nus-3d.py", 9, 0,
                        ["projects.BEVFusion.bevfusion.ops.voxel.voxel_layer"]),
    "BEVFusion-lidar-cam": ("projects/BEVFusion/configs/bevfusion_lidar-cam_voxel0075_second_"
                            "secfpn_8xb4-cyclic-20e_nus-3d.py", 9, 6,
                            ["projects.BEVFusion.bevfusion.ops.voxel.voxel_layer",
                             "projects.BEVFusion.bevfusion.ops.bev_pool.bev_pool_ext"]),
}


@pytest.mark.stack
@pytest.mark.parametrize("project", sorted(PROJECT_CONFIGS))
def test_research_project_trains_one_step_from_its_own_config(interpreter, project):
    if not MMDET3D_CHECKOUT:
        pytest.skip("set LAZYPATCH_MMDET3D_CHECKOUT to an extracted mmdetection3d v1.4.0 "
                    "(projects/ and configs/) to train its research projects one step")
    checkout = os.path.abspath(MMDET3D_CHECKOUT)
    config, box_dim, cameras, stand_ins = PROJECT_CONFIGS[project]
    if not os.path.isfile(os.path.join(checkout, config)):
        pytest.skip(f"{config} is not in {checkout}")
    if project.startswith("BEVFusion") and not _sparse_convolution_provided():
        pytest.skip("BEVFusion's lidar branch needs sparse convolution in the pure-PyTorch "
                    "mmcv._ext (get_indice_pairs_3d_forward), which it does not have yet")
    (interpreter.root / "one_step.py").write_text(ONE_STEP)
    result = interpreter.run_command(
        [sys.executable, "-m", "lazypatch", "run", "--enable", "device", "--enable",
         "cuda_extensions", "--", sys.executable, str(interpreter.root / "one_step.py"),
         os.path.join(checkout, config), str(box_dim), str(cameras)],
        env={"PYTHONPATH": checkout}, timeout=900)
    summary = last_json(result.stdout)
    assert summary["losses"] and all(math.isfinite(v) for v in summary["losses"].values())
    for name in stand_ins:
        assert summary["stand_ins"][f"cuda_extensions.{name}"] == "applied", summary


def _sparse_convolution_provided() -> bool:
    try:
        from lazypatch.registry.shared.mmcv_ext import implemented_names
    except ImportError:
        from registry.shared.mmcv_ext import implemented_names
    return "get_indice_pairs_3d_forward" in implemented_names()


if __name__ == "__main__":   # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))

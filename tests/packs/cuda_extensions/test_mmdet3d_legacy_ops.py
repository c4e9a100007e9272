"""mmdetection3d 0.17's compiled op modules (``mmdet3d.ops.ball_query.ball_query_ext`` and
the others its ``setup.py`` builds, in BEVDet's fork and MapTR's vendored copy) as
stand-ins of the ``cuda_extensions`` pack, and the layer-registry clash of its sparse
convolution with mmcv's.

The 0.17 bindings are checked in this process against what they compute (brute force
written here) under 0.17's argument order; the provision and the registry clash in fresh
interpreters on packages laid out as mmdetection3d 0.17, with the real torch and
mmengine's real ``Registry``. With ``LAZYPATCH_BEVDET_CHECKOUT`` the fork's own Python
wrappers run on the stand-ins unchanged.
"""

from __future__ import annotations

import importlib
import os
import shutil

import pytest
import torch

try:
    import lazypatch.registry.cuda_extensions as pack
except ImportError:   # running from a checkout without the installed layout
    import registry.cuda_extensions as pack

legacy = importlib.import_module(f"{pack.__name__}.mmdet3d_ops")
kernels = importlib.import_module(pack.__name__.replace("cuda_extensions", "shared.mmcv_ext"))


def cloud(seed: int, batch: int = 2, count: int = 24) -> torch.Tensor:
    return torch.rand(batch, count, 3, generator=torch.Generator().manual_seed(seed))


def test_ball_query_and_knn_take_the_sizes_first():
    xyz = cloud(0)
    centers = xyz[:, :5].contiguous()
    idx = torch.zeros(2, 5, 4, dtype=torch.int32)
    legacy.ball_query_wrapper(2, 24, 5, 0.0, 0.3, 4, centers, xyz, idx)
    distance = torch.cdist(centers, xyz)
    for b in range(2):
        for m in range(5):
            inside = (distance[b, m] < 0.3).nonzero().flatten().tolist()
            expected = inside[:4] + [inside[0]] * (4 - len(inside[:4]))
            assert idx[b, m].tolist() == expected
    knn_idx = torch.zeros(2, 5, 3, dtype=torch.int32)
    dist2 = torch.zeros(2, 5, 3)
    legacy.knn_wrapper(2, 24, 5, 3, xyz, centers, knn_idx, dist2)
    nearest = distance.pow(2).topk(3, largest=False)
    assert torch.equal(knn_idx.long().sort(-1).values, nearest.indices.sort(-1).values)
    assert torch.allclose(dist2.sort(-1).values, nearest.values, atol=1e-6)


def test_grouping_gathering_and_interpolation_with_their_gradients():
    g = torch.Generator().manual_seed(1)
    features = torch.randn(2, 3, 10, generator=g)
    idx = torch.randint(0, 10, (2, 4, 5), generator=g, dtype=torch.int32)
    out = torch.zeros(2, 3, 4, 5)
    legacy.group_points_wrapper(2, 3, 10, 4, 5, features, idx, out)
    expected = torch.stack([features[b][:, idx[b].long()] for b in range(2)])
    assert torch.equal(out, expected)
    grad = torch.zeros(2, 3, 10)
    legacy.group_points_grad_wrapper(2, 3, 10, 4, 5, torch.ones(2, 3, 4, 5), idx, grad)
    counts = torch.stack([torch.bincount(idx[b].flatten().long(), minlength=10) for b in range(2)])
    assert torch.equal(grad, counts[:, None].expand(2, 3, 10).float())
    picked = idx[:, 0].contiguous()
    gathered = torch.zeros(2, 3, 5)
    legacy.gather_points_wrapper(2, 3, 10, 5, features, picked, gathered)
    assert torch.equal(gathered, torch.stack([features[b][:, picked[b].long()] for b in range(2)]))
    grad = torch.zeros(2, 3, 10)
    legacy.gather_points_grad_wrapper(2, 3, 10, 5, torch.ones(2, 3, 5), picked, grad)
    assert grad.sum().item() == 2 * 3 * 5
    unknown, known = cloud(2, count=7), cloud(3, count=9)
    dist2 = torch.zeros(2, 7, 3)
    nn_idx = torch.zeros(2, 7, 3, dtype=torch.int32)
    legacy.three_nn_wrapper(2, 7, 9, unknown, known, dist2, nn_idx)
    nearest = torch.cdist(unknown, known).pow(2).topk(3, largest=False)
    assert torch.equal(nn_idx.long(), nearest.indices)
    weight = torch.rand(2, 7, 3, generator=g)
    known_features = torch.randn(2, 4, 9, generator=g)
    interpolated = torch.zeros(2, 4, 7)
    legacy.three_interpolate_wrapper(2, 4, 9, 7, known_features, nn_idx, weight, interpolated)
    expected = torch.stack([(known_features[b][:, nn_idx[b].long()] * weight[b]).sum(-1)
                            for b in range(2)])
    assert torch.allclose(interpolated, expected, atol=1e-6)
    grad = torch.zeros(2, 4, 9)
    legacy.three_interpolate_grad_wrapper(2, 4, 7, 9, torch.ones(2, 4, 7), nn_idx, weight, grad)
    assert torch.allclose(grad.sum((1, 2)), 4 * weight.sum((1, 2)), atol=1e-5)


def test_furthest_point_sampling_takes_the_farthest_point_each_time():
    xyz = cloud(4, batch=1, count=30)
    idx = torch.zeros(1, 6, dtype=torch.int32)
    legacy.furthest_point_sampling_wrapper(1, 30, 6, xyz, torch.full((1, 30), 1e10), idx)
    chosen = [0]
    for _ in range(5):
        nearest = torch.cdist(xyz[0], xyz[0][chosen]).min(1).values
        chosen.append(int(nearest.argmax()))
    assert idx[0].tolist() == chosen
    with_dist = torch.zeros(1, 6, dtype=torch.int32)
    distances = torch.cdist(xyz, xyz).pow(2)
    legacy.furthest_point_sampling_with_dist_wrapper(1, 30, 6, distances,
                                                     torch.full((1, 30), 1e10), with_dist)
    assert with_dist[0].tolist() == chosen


def test_iou3d_takes_corner_boxes_and_gives_ious():
    boxes = torch.tensor([[0.0, 0.0, 2.0, 2.0, 0.0], [1.0, 1.0, 3.0, 3.0, 0.0],
                          [0.0, 0.0, 2.0, 2.0, 0.7853981633974483], [10.0, 10.0, 11.0, 11.0, 0.3]])
    iou = torch.zeros(4, 4)
    legacy.boxes_iou_bev_gpu(boxes, boxes, iou)
    assert torch.allclose(iou.diagonal(), torch.ones(4))
    assert abs(iou[0, 1].item() - 1 / 7) < 1e-6
    # a square and itself turned 45 degrees about its centre: overlap is the octagon
    octagon = 8 * (2 ** 0.5 - 1)
    assert abs(iou[0, 2].item() - octagon / (8 - octagon)) < 1e-5
    overlap = torch.zeros(4, 4)
    legacy.boxes_overlap_bev_gpu(boxes, boxes, overlap)
    assert abs(overlap[0, 1].item() - 1.0) < 1e-6 and overlap[0, 3].item() == 0
    keep = torch.zeros(4, dtype=torch.long)
    count = legacy.nms_gpu(boxes, keep, 0.5, 0)
    assert keep[:count].tolist() == [0, 1, 3]          # box 2 overlaps box 0 by IoU 0.7
    count = legacy.nms_normal_gpu(boxes, keep, 0.1, 0)
    assert keep[:count].tolist() == [0, 3]             # the angle ignored: 2 is box 0


def test_the_other_bindings_call_the_mmcv_kernel_with_the_same_arguments():
    boxes = torch.tensor([[[0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 0.0]]])
    pts = torch.tensor([[[0.5, 0.5, 0.5], [3.0, 3.0, 0.5]]])
    part = torch.full((1, 2), -1, dtype=torch.int32)
    legacy.points_in_boxes_gpu(boxes, pts, part)
    assert part.tolist() == [[0, -1]]
    both = torch.zeros(1, 2, 1, dtype=torch.int32)
    legacy.points_in_boxes_batch(boxes, pts, both)
    assert both.tolist() == [[[1], [0]]]
    mask = torch.zeros(1, 2, dtype=torch.int32)
    legacy.points_in_boxes_cpu(boxes[0], pts[0], mask)
    assert mask.tolist() == [[1, 0]]
    # sparse convolution: one submanifold 3x3x3 layer on three active voxels
    indices = torch.tensor([[0, 1, 1, 1], [0, 1, 1, 2], [0, 3, 3, 3]], dtype=torch.int32)
    shape = [5, 5, 5]
    ours = legacy.get_indice_pairs_3d(indices, 1, shape, shape, [3, 3, 3], [1, 1, 1],
                                      [1, 1, 1], [1, 1, 1], [0, 0, 0], 1, 0)
    theirs = kernels.sparse_conv.get_indice_pairs_3d_forward(
        indices, 1, shape, shape, [3, 3, 3], [1, 1, 1], [1, 1, 1], [1, 1, 1], [0, 0, 0], 1, 0)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    _, pairs, counts = ours
    features = torch.randn(3, 2, generator=torch.Generator().manual_seed(5))
    filters = torch.randn(3, 3, 3, 2, 4, generator=torch.Generator().manual_seed(6))
    out = legacy.indice_conv(features, filters, pairs, counts, 3, 0, 1)
    # voxels 0 and 1 are neighbours along the last axis; voxel 2 sees only itself
    centre = filters[1, 1, 1]
    assert torch.allclose(out[2], features[2] @ centre, atol=1e-6)
    assert torch.allclose(out[0], features[0] @ centre + features[1] @ filters[1, 1, 2],
                          atol=1e-6)


#: mmdetection3d 0.17's layout for two of its op modules, with wrappers of our own that
#: call them as 0.17 does; and its spconv/conv.py registering its own layers into a real
#: mmengine Registry that another module ("mmcv's ops") filled first.
LEGACY_FILES = {
    "mmdet3d/__init__.py": "",
    "mmdet3d/ops/__init__.py": """
        import layers_home.sparse_conv   # mmcv.ops registering its SparseConv2d first
        from .knn import knn
        from .spconv.conv import SparseConv2d, SubMConv3d
    """,
    "mmdet3d/ops/knn/__init__.py": """
        import torch
        from . import knn_ext

        def knn(k, xyz, center_xyz):
            b, n, m = xyz.shape[0], xyz.shape[1], center_xyz.shape[1]
            idx = torch.zeros(b, m, k, dtype=torch.int32)
            dist2 = torch.zeros(b, m, k)
            knn_ext.knn_wrapper(b, n, m, k, xyz, center_xyz, idx, dist2)
            return idx
    """,
    "mmdet3d/ops/spconv/__init__.py": "",
    "mmdet3d/ops/spconv/ops.py": "from . import sparse_conv_ext\n",
    "mmdet3d/ops/spconv/conv.py": """
        from layers_home import CONV_LAYERS
        from . import ops

        @CONV_LAYERS.register_module()
        class SparseConv2d:
            pass

        @CONV_LAYERS.register_module()
        class SubMConv3d:
            pass

        @CONV_LAYERS.register_module(name="Renamed")
        class NotCompared:
            pass
    """,
    "layers_home/__init__.py": """
        from mmengine.registry import Registry
        CONV_LAYERS = Registry("conv layer")
    """,
    "layers_home/sparse_conv.py": """
        from layers_home import CONV_LAYERS

        @CONV_LAYERS.register_module()
        class SparseConv2d:
            pass
    """,
}

RUN_LEGACY = '''
import json, sys
import lazypatch.auto
import lazypatch
import torch
import mmdet3d.ops
from layers_home import CONV_LAYERS
xyz = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [5, 0, 0]]])
idx = mmdet3d.ops.knn(2, xyz, xyz[:, :1].contiguous())
spconv_ext = sys.modules["mmdet3d.ops.spconv.sparse_conv_ext"]
records = {r.name: [r.status, r.notes] for r in lazypatch.report()
           if r.name.startswith("cuda_extensions.mmdet3d.ops.")}
summary = {"knn": sorted(idx.flatten().tolist()),
           "conv": CONV_LAYERS.get("SparseConv2d").__module__,
           "subm": CONV_LAYERS.get("SubMConv3d").__module__,
           "spconv": sorted(name for name in spconv_ext.__all__ if "maxpool" in name),
           "records": records}
lazypatch.unpatch_all()
summary["after_undo"] = CONV_LAYERS.get("SparseConv2d").__module__
print(json.dumps(summary))
'''


def test_legacy_modules_are_provided_and_the_fork_registers_its_own_layers(interpreter):
    interpreter.write(LEGACY_FILES)
    result = interpreter.run_json(RUN_LEGACY, env={"LAZYPATCH_ENABLE": "cuda_extensions"})
    assert result["knn"] == [0, 1]
    assert result["conv"] == "mmdet3d.ops.spconv.conv"
    assert result["subm"] == "mmdet3d.ops.spconv.conv"
    assert result["spconv"] == ["indice_maxpool_backward_fp32", "indice_maxpool_backward_half",
                                "indice_maxpool_fp32", "indice_maxpool_half"]
    records = result["records"]
    for name in ("knn.knn_ext", "spconv.sparse_conv_ext"):
        assert records[f"cuda_extensions.mmdet3d.ops.{name}"][0] == "applied", records
    status, notes = records["cuda_extensions.mmdet3d.ops.spconv.conv.registrations"]
    assert status == "applied"
    assert "CONV_LAYERS['SparseConv2d'] (from layers_home.sparse_conv)" in notes[0]
    assert "SubMConv3d" not in notes[0]   # nobody registered it before the fork
    assert result["after_undo"] == "layers_home.sparse_conv"


def test_without_the_pack_the_fork_stops_at_the_missing_extension(interpreter):
    interpreter.write(LEGACY_FILES)
    result = interpreter.run('''
import lazypatch.auto
import mmdet3d.ops
''', check=False)
    assert result.returncode != 0 and "knn_ext" in result.stderr


#: BEVDet's fork of mmdetection3d 0.17: ``mmdet3d/models/backbones/swin.py`` registers its
#: own ``SwinTransformer`` into mmdet's ``BACKBONES`` (a relative import of its builder),
#: which a newer mmdet ("models_home", a real mmengine Registry) filled first.
FORK_BACKBONE_FILES = {
    "models_home/__init__.py": """
        from mmengine.registry import Registry
        BACKBONES = Registry("models")

        @BACKBONES.register_module()
        class SwinTransformer:
            pass
    """,
    "mmdet3d/__init__.py": "",
    "mmdet3d/models/__init__.py": "from .backbones import SwinTransformer\n",
    "mmdet3d/models/builder.py": "from models_home import BACKBONES\n",
    "mmdet3d/models/backbones/__init__.py": "from .swin import SwinTransformer\n",
    "mmdet3d/models/backbones/swin.py": """
        from ..builder import BACKBONES

        @BACKBONES.register_module()
        class SwinTransformer:
            pass
    """,
}

RUN_FORK_BACKBONE = '''
import json
import lazypatch.auto
import lazypatch
import mmdet3d.models
from models_home import BACKBONES
record = [r for r in lazypatch.report()
          if r.name == "cuda_extensions.mmdet3d.models.backbones.swin.registrations"][0]
summary = {"swin": BACKBONES.get("SwinTransformer").__module__, "status": record.status,
           "notes": record.notes}
lazypatch.unpatch_all()
summary["after_undo"] = BACKBONES.get("SwinTransformer").__module__
print(json.dumps(summary))
'''


def test_the_fork_backbone_takes_its_name_over_from_the_newer_mmdet(interpreter):
    interpreter.write(FORK_BACKBONE_FILES)
    result = interpreter.run_json(RUN_FORK_BACKBONE, env={"LAZYPATCH_ENABLE": "cuda_extensions"})
    assert result["swin"] == "mmdet3d.models.backbones.swin"
    assert result["status"] == "applied"
    assert "BACKBONES['SwinTransformer'] (from models_home)" in result["notes"][0]
    assert result["after_undo"] == "models_home"
    clash = interpreter.run("import lazypatch.auto\nimport mmdet3d.models\n", check=False)
    assert clash.returncode != 0 and "SwinTransformer is already registered" in clash.stderr


def test_relative_imports_of_a_registry_are_resolved_against_the_package():
    forks = importlib.import_module(f"{pack.__name__}.fork_registrations")
    source = "from ..builder import BACKBONES\nfrom . import ATTENTION\nfrom mmcv.cnn import CONV\n"
    package = "mmdet3d.models.backbones"
    assert forks.imported_from(source, "BACKBONES", package) == "mmdet3d.models.builder"
    assert forks.imported_from(source, "ATTENTION", package) == "mmdet3d.models.backbones"
    assert forks.imported_from(source, "CONV", package) == "mmcv.cnn"
    assert forks.imported_from(source, "BACKBONES") is None          # no package to resolve in
    assert forks.imported_from("from ....x import BACKBONES\n", "BACKBONES", "a.b") is None


#: An extracted BEVDet fork (HuangJunJie2017/BEVDet, ``git archive HEAD mmdet3d/ops``): its
#: own wrappers of the 0.17 op modules run on the stand-ins. Without it this skips.
BEVDET_CHECKOUT = os.environ.get("LAZYPATCH_BEVDET_CHECKOUT", "")

RUN_BEVDET = '''
import json
import lazypatch.auto
import lazypatch
import torch
from mmdet3d.ops.ball_query import ball_query
from mmdet3d.ops.knn import knn
from mmdet3d.ops.gather_points import gather_points
from mmdet3d.ops.interpolate import three_nn, three_interpolate
from mmdet3d.ops.iou3d import boxes_iou_bev, nms_gpu
xyz = torch.tensor([[[0.0, 0, 0], [0.1, 0, 0], [1, 0, 0], [3, 0, 0]]])
centers = xyz[:, :2].contiguous()
features = torch.arange(8.0).view(1, 2, 4).requires_grad_()
gathered = gather_points(features, torch.tensor([[3, 0]], dtype=torch.int32))
gathered.sum().backward()
distances, nearest = three_nn(centers, xyz)
boxes = torch.tensor([[0.0, 0, 2, 2, 0], [1, 1, 3, 3, 0]])
# BEVDet passes the grid sizes as 0-d tensors (the compiled op converts them to ints)
from mmdet3d.ops.bev_pool import bev_pool
pool_feats = torch.tensor([[1.0], [2.0], [4.0]], requires_grad=True)
coords = torch.tensor([[0, 1, 0, 0], [0, 1, 0, 0], [1, 0, 0, 1]])   # (h, w, depth, batch)
pooled = bev_pool(pool_feats, coords, *(torch.tensor(size) for size in (2, 1, 2, 2)))
pooled.sum().backward()
print(json.dumps({
    "pooled": [pooled[0, 0, 0, 0, 1].item(), pooled[1, 0, 0, 1, 0].item(), pooled.sum().item()],
    "pool_grad": pool_feats.grad.flatten().tolist(),
    "ball": ball_query(0, 0.5, 2, xyz, centers).tolist(),
    "knn": knn(2, xyz, centers).tolist(),
    "gathered": gathered.tolist(), "grad": features.grad.tolist(),
    "nearest": nearest.tolist(),
    "interpolated": three_interpolate(features.detach(), nearest,
                                      torch.full((1, 2, 3), 1 / 3)).tolist(),
    "iou": boxes_iou_bev(boxes, boxes)[0, 1].item(),
    "nms": nms_gpu(boxes, torch.tensor([0.9, 0.8]), 0.1).tolist(),
    "statuses": sorted({r.status for r in lazypatch.report()
                        if r.name.startswith("cuda_extensions.mmdet3d.ops.")
                        and r.status != "pending"})}))
'''


def test_bevdet_own_op_wrappers_run_unchanged_on_the_stand_ins(interpreter):
    if not BEVDET_CHECKOUT:
        pytest.skip("set LAZYPATCH_BEVDET_CHECKOUT to an extracted HuangJunJie2017/BEVDet "
                    "(git archive HEAD mmdet3d/ops | tar -x) to run its own op wrappers "
                    "on the stand-ins")
    ops = os.path.join(BEVDET_CHECKOUT, "mmdet3d", "ops")
    if not os.path.isdir(os.path.join(ops, "ball_query")):
        pytest.skip(f"{ops} has no ball_query/")
    # Its op packages that import torch only (the others need mmcv 1.x), unchanged; its
    # mmdet3d/ops/__init__ imports mmcv 1.x's ops and is left out.
    interpreter.write({"mmdet3d/__init__.py": "", "mmdet3d/ops/__init__.py": ""})
    for name in ("ball_query", "knn", "gather_points", "interpolate", "iou3d", "bev_pool"):
        shutil.copytree(os.path.join(ops, name), interpreter.root / "mmdet3d" / "ops" / name,
                        ignore=shutil.ignore_patterns("*.so", "src"))
    result = interpreter.run_json(RUN_BEVDET, env={"LAZYPATCH_ENABLE": "device,cuda_extensions"})
    assert result["ball"] == [[[0, 1], [0, 1]]]
    assert result["knn"] == [[[0, 1], [1, 0]]]          # (B, k, npoint): transposed back
    assert result["gathered"] == [[[3.0, 0.0], [7.0, 4.0]]]
    assert result["grad"] == [[[1.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 1.0]]]
    assert result["nearest"] == [[[0, 1, 2], [1, 0, 2]]]
    assert torch.allclose(torch.tensor(result["interpolated"]),
                          torch.tensor([[[1.0, 1.0], [5.0, 5.0]]]))
    assert abs(result["iou"] - 1 / 7) < 1e-6 and result["nms"] == [0]
    assert result["pooled"] == [3.0, 4.0, 7.0] and result["pool_grad"] == [1.0, 1.0, 1.0]
    assert result["statuses"] == ["applied"]

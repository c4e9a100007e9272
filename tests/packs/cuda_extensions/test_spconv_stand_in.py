"""The ``spconv`` stand-in of the ``cuda_extensions`` pack (spconv 2's ``spconv.pytorch``
on lazypatch's pure-PyTorch sparse kernels), in fresh interpreters.

A network of every layer kind mmdet3d and research code use (submanifold, strided,
transposed and inverse convolutions, max-pool with its inverse, batch norm, ReLU,
``ToDense``), in spconv 2's weight layout, is checked against the same network written
with dense ``torch.nn.functional`` on the scattered tensor, values and gradients; then
the API contract (read-only features, int32 indices, indice keys, refusals), mmdet3d's
own detection of spconv 2, and a real spconv left untouched.
"""

from __future__ import annotations

PROLOGUE = '''
import json, sys
import lazypatch
import lazypatch.registry.cuda_extensions
# mmdet 3.3 refuses mmcv 2.2 without the openmmlab pack's gates (declared by its own
# import: a pack registers no other pack's patches)
import lazypatch.registry.openmmlab
lazypatch.enable("cuda_extensions")
import torch
import torch.nn.functional as F
import spconv.pytorch as spconv
torch.manual_seed(0)
'''

DENSE_CHAIN = PROLOGUE + '''
def scatter(indices, features, batch, shape, fill=0.0):
    dense = features.new_full((batch, *shape, features.shape[1]), fill)
    dense = dense.index_put(tuple(indices.long().t()), features).movedim(-1, 1)
    return dense.clone(memory_format=torch.contiguous_format)  # see test_sparse_conv.py

def conv_weight(layer):          # spconv 2's (out, *k, in) -> conv's (out, in, *k)
    return layer.weight.movedim(-1, 1).contiguous()

def transposed_weight(layer):    # -> conv_transpose's (in, out, *k)
    return layer.weight.permute(4, 0, 1, 2, 3).contiguous()

def with_bias(x, layer, mask):
    return (x + layer.bias.view(1, -1, 1, 1, 1)) * mask

batch, shape = 2, [8, 9, 7]
active = torch.rand(batch, *shape) < 0.25
indices = active.nonzero().int()
features = torch.randn(len(indices), 3, requires_grad=True)
net = spconv.SparseSequential(
    spconv.SubMConv3d(3, 4, 3, indice_key="subm1"),
    spconv.SparseBatchNorm(4).eval(),
    spconv.SparseMaxPool3d(2, indice_key="pool1"),
    spconv.SparseReLU(),
    spconv.SparseConv3d(4, 5, 3, stride=2, padding=1, indice_key="down1"),
    spconv.SubMConv3d(5, 5, 3, indice_key="subm2"),
    spconv.SubMConv3d(5, 5, 3, indice_key="subm2"),             # reuses the pairs
    spconv.SparseInverseConv3d(5, 4, 3, indice_key="down1"),   # back to the pooled sites
    spconv.SparseInverseConv3d(4, 3, 2, indice_key="pool1"),   # back to the input sites
    spconv.SparseConvTranspose3d(3, 2, 3, padding=1),
    spconv.ToDense())
with torch.no_grad():
    for module in net.modules():
        if isinstance(module, torch.nn.BatchNorm1d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
net[1].weight.data.uniform_(0.5, 1.5)
out = net(spconv.SparseConvTensor(features, indices, shape, batch))

sub1, norm, _, _, down, sub2a, sub2b, inv_down, inv_pool, deconv, _ = net
mask0 = active[:, None].float()
ones = lambda k: torch.ones(1, 1, k, k, k)
mask1 = (F.max_pool3d(mask0, 2) > 0).float()
mask2 = (F.conv3d(mask1, ones(3), stride=2, padding=1) > 0).float()
mask3 = (F.conv_transpose3d(mask0, ones(3), padding=1) > 0).float()
x = scatter(indices, features, batch, shape)
x = with_bias(F.conv3d(x, conv_weight(sub1), padding=1), sub1, mask0)
x = F.batch_norm(x, norm.running_mean, norm.running_var, norm.weight, norm.bias,
                 eps=norm.eps) * mask0
# spconv's max-pool starts from 0 and only sees active sites
x = F.max_pool3d(x.masked_fill(mask0 == 0, float("-inf")), 2).clamp(min=0) * mask1
x = x.relu()
x = with_bias(F.conv3d(x, conv_weight(down), stride=2, padding=1), down, mask2)
x = with_bias(F.conv3d(x, conv_weight(sub2a), padding=1), sub2a, mask2)
x = with_bias(F.conv3d(x, conv_weight(sub2b), padding=1), sub2b, mask2)
# an inverse conv restores the grid its key's layer started from: pad the output to it
pooled, downed = mask1.shape[2:], mask2.shape[2:]
x = with_bias(F.conv_transpose3d(x, transposed_weight(inv_down), stride=2, padding=1,
                                 output_padding=[p - (2 * d - 1) for p, d in
                                                 zip(pooled, downed)]), inv_down, mask1)
x = with_bias(F.conv_transpose3d(x, transposed_weight(inv_pool), stride=2,
                                 output_padding=[s - 2 * p for s, p in zip(shape, pooled)]),
              inv_pool, mask0)
x = with_bias(F.conv_transpose3d(x, transposed_weight(deconv), padding=1), deconv, mask3)

upstream = torch.randn(out.shape)
leaves = [features] + [p for p in net.parameters()]
sparse_grads = torch.autograd.grad((out * upstream).sum(), leaves)
dense_grads = torch.autograd.grad((x * upstream).sum(), leaves)
close = lambda a, b: bool(torch.allclose(a, b, atol=1e-5, rtol=1e-4))  # noqa: E731
print(json.dumps({
    "shape": list(out.shape), "values": close(out, x), "nonzero": int((out != 0).sum()),
    "grads": [close(a, b) for a, b in zip(sparse_grads, dense_grads)],
    "weight_shapes": [list(m.weight.shape) for m in (sub1, down, inv_pool)]}))
'''


def test_every_layer_kind_equals_the_dense_network_values_and_gradients(interpreter):
    result = interpreter.run_json(DENSE_CHAIN)
    assert result["shape"] == [2, 2, 8, 9, 7]
    assert result["values"] and result["nonzero"] > 100
    assert result["grads"] and all(result["grads"]), result["grads"]
    # spconv 2's (out, *kernel, in) layout
    assert result["weight_shapes"] == [[4, 3, 3, 3, 3], [5, 3, 3, 3, 4], [3, 2, 2, 2, 4]]


CONTRACT = PROLOGUE + '''
import spconv as top
from spconv.pytorch import functional as Fsp
from spconv.pytorch.core import SparseConvTensor
checks = {}
indices = torch.tensor([[0, 1, 1], [0, 2, 3], [1, 0, 0]], dtype=torch.int32)
x = spconv.SparseConvTensor(torch.randn(3, 2), indices, [4, 5], 2)
checks["same_class"] = SparseConvTensor is spconv.SparseConvTensor
checks["version"] = top.__version__ >= "2.0.0" and top.SPCONV_VERSION_NUMBERS[0] == 2
checks["marked"] = getattr(top, "__lazypatch_pure_pytorch__", None) == "cuda_extensions"

def raises(kind, action):
    try:
        action()
    except kind as error:
        return str(error)
    return None

checks["read_only"] = "replace_feature" in (raises(ValueError, lambda: setattr(
    x, "features", torch.zeros(3, 2))) or "")
checks["int32"] = "int32" in (raises(TypeError, lambda: spconv.SparseConvTensor(
    torch.randn(3, 2), indices.long(), [4, 5], 2)) or "")
checks["inverse_needs_key"] = "down" in (raises(ValueError, lambda: spconv.SparseInverseConv2d(
    2, 2, 3, indice_key="down")(x)) or "")
dense = x.dense()
checks["dense"] = list(dense.shape) == [2, 2, 4, 5] and bool(
    torch.equal(dense[0, :, 2, 3], x.features[1]))
back = spconv.SparseConvTensor.from_dense(dense.movedim(1, -1))
checks["from_dense"] = sorted(back.indices.tolist()) == sorted(indices.tolist())
y = x.replace_feature(x.features * 2)
checks["replace"] = y.indices is x.indices and bool(torch.equal(y.features, x.features * 2))
checks["add"] = bool(torch.equal((x + y).features, x.features * 3))
other = spconv.SparseConvTensor(torch.ones(1, 2), torch.tensor([[0, 1, 1]], dtype=torch.int32),
                                [4, 5], 2)
summed = Fsp.sparse_add(x, other)
row = summed.indices.tolist().index([0, 1, 1])
checks["sparse_add"] = len(summed.indices) == 3 and bool(
    torch.allclose(summed.features[row], x.features[0] + 1))
down = spconv.SparseConv2d(2, 3, 3, stride=2, padding=1, indice_key="d")
subm = spconv.SubMConv2d(3, 3, 3, indice_key="d")
checks["subm_reuse_of_a_regular_key"] = "submanifold" in (raises(ValueError, lambda: subm(down(x)))
                                                          or "")
conv1x1 = spconv.SubMConv2d(2, 4, 1, bias=False)
with torch.no_grad():
    conv1x1.weight.copy_(torch.arange(8.0).reshape(4, 1, 1, 2))
# spconv 2's own 1x1 path (conv.py, FILTER_HWIO off): mm(features, weight.view(in, out));
# a transposed (out, in) reading differs for this non-symmetric weight.
spconv_1x1 = x.features @ torch.arange(8.0).reshape(2, 4)
checks["conv1x1"] = bool(torch.allclose(conv1x1(x).features, spconv_1x1)) and not bool(
    torch.allclose(spconv_1x1, x.features @ torch.arange(8.0).reshape(4, 2).t()))
checks["even_subm_kernel_refused_as_spconv_does"] = "odd ksize" in (raises(
    RuntimeError, lambda: spconv.SubMConv2d(2, 2, 2)(x)) or "")
print(json.dumps(checks))
'''


def test_api_contract_of_the_stand_in(interpreter):
    checks = interpreter.run_json(CONTRACT)
    assert all(checks.values()), {name: ok for name, ok in checks.items() if not ok}


def test_mmdet3d_takes_it_for_spconv_2_and_builds_its_layers_from_it(interpreter):
    result = interpreter.run_json(PROLOGUE + '''
from mmdet3d.models.layers.spconv import IS_SPCONV2_AVAILABLE
from mmdet3d.models.layers import make_sparse_convmodule
from mmdet3d.registry import MODELS
block = make_sparse_convmodule(4, 8, 3, "k", norm_cfg=dict(type="BN1d"))
indices = torch.tensor([[0, 1, 2, 3], [0, 1, 2, 4]], dtype=torch.int32)
out = block(spconv.SparseConvTensor(torch.randn(2, 4), indices, [5, 6, 7], 1))
print(json.dumps({"available": IS_SPCONV2_AVAILABLE,
                  "registered": MODELS.get("SubMConv3d") is spconv.SubMConv3d,
                  "conv": type(block[0]).__name__, "out": list(out.features.shape)}))
''')
    assert result == {"available": True, "registered": True, "conv": "SubMConv3d",
                      "out": [2, 8]}


def test_a_real_spconv_is_imported_untouched(interpreter):
    interpreter.write({"spconv/__init__.py": "__version__ = '2.3.6'\n",
                       "spconv/pytorch/__init__.py": "SparseConvTensor = 'real'\n"})
    result = interpreter.run_json('''
import json, sys
import lazypatch
import lazypatch.registry.cuda_extensions
lazypatch.enable("cuda_extensions")
import spconv.pytorch
records = {r.name: [r.status, r.reason] for r in lazypatch.report()
           if r.name.startswith("cuda_extensions.spconv") and r.status != "pending"}
print(json.dumps({"value": spconv.pytorch.SparseConvTensor,
                  "torch": "torch" in sys.modules, "records": records}))
''')
    assert result["value"] == "real" and result["torch"] is False
    assert set(result["records"]) == {"cuda_extensions.spconv",
                                      "cuda_extensions.spconv.pure_pytorch",
                                      "cuda_extensions.spconv.pytorch",
                                      "cuda_extensions.spconv.pytorch.pytorch"}
    for name, (status, reason) in result["records"].items():
        assert status == "skipped" and "installed" in reason, (name, reason)


POINT_TO_VOXEL = PROLOGUE + '''
from spconv.pytorch.utils import PointToVoxel, gather_features_by_pc_voxel_id

def reference(points, vsize, low, high, max_voxels, max_points, features):
    """spconv's generator written as a loop: voxels numbered by first point."""
    grid = [round((h - l) / s) for l, h, s in zip(low, high, vsize)]
    ids, members, coords, pc_id = {}, [], [], []
    for row, point in enumerate(points.tolist()):
        cell = tuple(int((p - l) // s) for p, l, s in zip(point[:3], low, vsize))
        if not all(0 <= c < g for c, g in zip(cell, grid)):
            pc_id.append(-1)
            continue
        if cell not in ids:
            if len(ids) == max_voxels:
                pc_id.append(-1)
                continue
            ids[cell] = len(ids)
            members.append([])
            coords.append(list(reversed(cell)))
        voxel = ids[cell]
        if len(members[voxel]) < max_points:
            members[voxel].append(point[:features])
            pc_id.append(voxel)
        else:
            pc_id.append(-1)
    return members, coords, pc_id

results = {}
# coordinates on a 0.25 lattice: no point sits within rounding of a voxel face
points = torch.cat([torch.randint(-4, 44, (300, 3)).float() / 4,
                    torch.randn(300, 2)], dim=1)
vsize, low, high = [0.5, 1.0, 2.0], [0.0, -1.0, 0.0], [8.0, 7.0, 8.0]
for max_voxels, max_points in ((1000, 5), (20, 3), (1000, 100)):
    gen = PointToVoxel(vsize, low + high, num_point_features=4,
                       max_num_voxels=max_voxels, max_num_points_per_voxel=max_points)
    voxels, indices, counts, pc_id = gen.generate_voxel_with_id(points)
    members, coords, ref_id = reference(points, vsize, low, high, max_voxels, max_points, 4)
    expected = torch.zeros(len(members), max_points, 4)
    for voxel, rows in enumerate(members):
        expected[voxel, :len(rows)] = torch.tensor(rows)
    results[f"{max_voxels}/{max_points}"] = {
        "voxels": torch.equal(voxels, expected),
        "indices": indices.tolist() == coords and indices.dtype == torch.int32,
        "counts": counts.tolist() == [len(rows) for rows in members]
                  and counts.dtype == torch.int32,
        "pc_voxel_id": pc_id.tolist() == ref_id,
        "call": all(torch.equal(a, b) for a, b in zip(gen(points), (voxels, indices, counts))),
    }
gen = PointToVoxel(vsize, low + high, 4, 1000, 6)
voxels, indices, counts = gen(points, empty_mean=True)
members, _, _ = reference(points, vsize, low, high, 1000, 6, 4)
expected = torch.stack([torch.tensor(rows + [torch.tensor(rows).mean(0).tolist()]
                                     * (6 - len(rows))) for rows in members])
results["empty_mean"] = torch.allclose(voxels, expected)
results["grid_size"] = gen.grid_size == [16, 8, 4]
_, _, _, pc_id = gen.generate_voxel_with_id(points)
per_voxel = torch.arange(counts.numel(), dtype=torch.float32)[:, None] * 10
gathered = gather_features_by_pc_voxel_id(per_voxel, pc_id, invalid_value=-5)
results["gather"] = gathered[:, 0].tolist() == [float(v) * 10 if v >= 0 else -5.0
                                                for v in pc_id.tolist()]
import spconv.pytorch
results["attribute"] = spconv.pytorch.utils.PointToVoxel is PointToVoxel
print(json.dumps(results))
'''


def test_point_to_voxel_matches_spconvs_generator_written_as_a_loop(interpreter):
    """``spconv.pytorch.utils.PointToVoxel`` on the OpenMMLab voxelization kernel, against
    a loop reference: voxel order, per-voxel and voxel-count limits, (z, y, x) int32
    indices, ``pc_voxel_id``, ``empty_mean``, ``gather_features_by_pc_voxel_id``."""
    results = interpreter.run_json(POINT_TO_VOXEL)
    flat = {f"{case}.{key}": ok for case, checks in results.items()
            for key, ok in (checks.items() if isinstance(checks, dict) else [("", checks)])}
    assert all(flat.values()), {name: ok for name, ok in flat.items() if not ok}

"""The rest of spconv 2's public API in the ``spconv`` stand-in, in fresh interpreters:
``spconv.core``, ``spconv.constants``, the average and global pools, the tables
(``AddTable``, ``ConcatTable``, ``JoinTable``), ``Identity`` and
``assign_name_for_sparse_modules``, each against the dense computation it stands for.
"""

from __future__ import annotations

PROLOGUE = '''
import json
import lazypatch
import lazypatch.registry.cuda_extensions
lazypatch.enable("cuda_extensions")
import torch
import torch.nn.functional as F
import spconv.pytorch as spconv
torch.manual_seed(0)

def raises(kind, action):
    try:
        action()
    except kind as error:
        return str(error)
    return ""

def scatter(indices, features, batch, shape):
    dense = features.new_zeros((batch, *shape, features.shape[1]))
    return dense.index_put(tuple(indices.long().t()), features).movedim(-1, 1)

batch, shape = 2, [6, 7, 5]
active = torch.rand(batch, *shape) < 0.3
indices = active.nonzero().int()
features = torch.randn(len(indices), 4, dtype=torch.float64, requires_grad=True)
x = spconv.SparseConvTensor(features, indices, shape, batch)
checks = {}
'''

NAMES = PROLOGUE + '''
import spconv as top
from spconv.core import ConvAlgo
from spconv.constants import ALL_WEIGHT_IS_KRSC, FILTER_HWIO
from spconv.pytorch.pool import SparseAvgPool3d, SparseGlobalMaxPool
from spconv.pytorch.tables import AddTable, ConcatTable, JoinTable
from spconv.pytorch.identity import Identity
checks["one_conv_algo"] = ConvAlgo is spconv.ConvAlgo is top.ConvAlgo and [
    member.name for member in ConvAlgo] == ["Native", "MaskImplicitGemm",
                                            "MaskSplitImplicitGemm"]
checks["constants_of_spconv_2_layout"] = (ALL_WEIGHT_IS_KRSC, FILTER_HWIO) == (True, False)
checks["submodules_bound"] = top.core.ConvAlgo is ConvAlgo and top.constants.NDIM_DONT_CARE == 3
checks["same_classes"] = (SparseAvgPool3d is spconv.SparseAvgPool3d
                          and SparseGlobalMaxPool is spconv.SparseGlobalMaxPool
                          and (AddTable, ConcatTable, JoinTable, Identity) == (
                              spconv.AddTable, spconv.ConcatTable, spconv.JoinTable,
                              spconv.Identity))
net = spconv.SparseSequential(spconv.SubMConv3d(4, 4, 3, indice_key="a"),
                              spconv.SparseSequential(spconv.SparseMaxPool3d(2)))
spconv.assign_name_for_sparse_modules(net)
checks["names_assigned"] = [m._sparse_unique_name for m in net.modules()
                            if isinstance(m, spconv.SparseModule)] == ["", "0", "1", "1.0"]
print(json.dumps(checks))
'''


def test_spconv_core_constants_and_the_module_names(interpreter):
    checks = interpreter.run_json(NAMES)
    assert all(checks.values()), {name: ok for name, ok in checks.items() if not ok}


GLOBAL_POOLS = PROLOGUE + '''
dense = scatter(indices, features, batch, shape)
mask = scatter(indices, torch.ones(len(indices), 1, dtype=torch.float64), batch, shape)
count = mask.sum(dim=(2, 3, 4))
expected_max = dense.masked_fill(mask == 0, float("-inf")).amax(dim=(2, 3, 4))
expected_mean = dense.sum(dim=(2, 3, 4)) / count
out_max = spconv.SparseSequential(spconv.SparseGlobalMaxPool())(x)
out_mean = spconv.SparseGlobalAvgPool()(x)
checks["max_values"] = out_max.shape == (2, 4) and bool(torch.allclose(out_max, expected_max))
checks["mean_values"] = out_mean.shape == (2, 4) and bool(torch.allclose(out_mean, expected_mean))
weights = torch.randn(2, 4, dtype=torch.float64)
grad, = torch.autograd.grad((out_max * weights).sum() + (out_mean * weights).sum(), features)
reference = features.detach().clone().requires_grad_(True)
dense_reference = scatter(indices, reference, batch, shape)
reference_max = dense_reference.masked_fill(mask == 0, float("-inf")).amax(dim=(2, 3, 4))
reference_mean = dense_reference.sum(dim=(2, 3, 4)) / count
expected_grad, = torch.autograd.grad((reference_max * weights).sum()
                                     + (reference_mean * weights).sum(), reference)
checks["gradients"] = bool(torch.allclose(grad, expected_grad))
lonely = spconv.SparseConvTensor(features[:3], indices[:3], shape, 3)
checks["empty_batch_element_refused"] = "no sites" in raises(
    ValueError, lambda: spconv.SparseGlobalMaxPool()(lonely))
print(json.dumps(checks))
'''


def test_global_pools_equal_the_dense_reductions_values_and_gradients(interpreter):
    checks = interpreter.run_json(GLOBAL_POOLS)
    assert all(checks.values()), {name: ok for name, ok in checks.items() if not ok}


AVERAGE_POOL = PROLOGUE + '''
pool = spconv.SparseAvgPool3d(2, stride=2, indice_key="p")
out = pool(x)
dense = scatter(indices, features, batch, shape)
mask = scatter(indices, torch.ones(len(indices), 1, dtype=torch.float64), batch, shape)
window_sum = F.avg_pool3d(dense, 2, 2) * 8
window_count = F.avg_pool3d(mask, 2, 2) * 8
expected_sites = (window_count[:, 0] > 0).nonzero().tolist()
checks["sites"] = sorted(out.indices.tolist()) == sorted(expected_sites)
checks["shape"] = out.spatial_shape == [3, 3, 2]
site = tuple(out.indices.long().t())
expected = (window_sum / window_count.clamp(min=1)).movedim(1, -1)[site]
checks["mean_of_present_sites"] = bool(torch.allclose(out.features, expected))
weights = torch.randn_like(out.features)
grad, = torch.autograd.grad((out.features * weights).sum(), features)
reference = features.detach().clone().requires_grad_(True)
dense_reference = scatter(indices, reference, batch, shape)
reference_out = ((F.avg_pool3d(dense_reference, 2, 2) * 8) / window_count.clamp(min=1)
                 ).movedim(1, -1)[site]
expected_grad, = torch.autograd.grad((reference_out * weights).sum(), reference)
checks["gradients"] = bool(torch.allclose(grad, expected_grad))
back = spconv.SparseInverseConv3d(4, 4, 2, indice_key="p").double()(out)
checks["inverse_back_to_input_sites"] = torch.equal(back.indices, x.indices)
checks["algo_as_spconv"] = pool.algo is spconv.ConvAlgo.MaskImplicitGemm
checks["key_reuse_refused"] = "already exists" in raises(
    ValueError, lambda: spconv.SparseAvgPool3d(2, indice_key="p")(out))
checks["kernel_volume_limit"] = "at most 32" in raises(
    ValueError, lambda: spconv.SparseAvgPool3d(4))
checks["2d"] = spconv.SparseAvgPool2d(3, stride=1, padding=1)(spconv.SparseConvTensor(
    torch.ones(2, 1), torch.tensor([[0, 0, 0], [0, 0, 1]], dtype=torch.int32), [3, 3], 1)
    ).features.eq(1).all().item()
print(json.dumps(checks))
'''


def test_average_pool_divides_by_the_sites_present_values_and_gradients(interpreter):
    checks = interpreter.run_json(AVERAGE_POOL)
    assert all(checks.values()), {name: ok for name, ok in checks.items() if not ok}


TABLES = PROLOGUE + '''
first = spconv.SubMConv3d(4, 3, 3, indice_key="s").double()
second = spconv.SubMConv3d(4, 3, 3, indice_key="s").double()
branches = spconv.ConcatTable().add(first).add(second)
outputs = branches(x)
summed = spconv.SparseSequential(branches, spconv.AddTable())(x)
joined = spconv.SparseSequential(branches, spconv.JoinTable())(x)
checks["concat_is_a_list"] = isinstance(outputs, list) and len(outputs) == 2
checks["add"] = torch.equal(summed.indices, x.indices) and bool(torch.allclose(
    summed.features, outputs[0].features + outputs[1].features))
checks["join"] = joined.features.shape == (len(indices), 6) and bool(torch.allclose(
    joined.features, torch.cat([outputs[0].features, outputs[1].features], 1)))
checks["pairs_kept"] = "s" in summed.indice_dict
down = spconv.SparseConv3d(4, 4, 3, stride=2).double()(x)
checks["different_sites_refused"] = "spatial shape" in raises(
    ValueError, lambda: spconv.AddTable()([x, down]))
checks["identity"] = spconv.Identity()(x) is x and spconv.SparseSequential(
    spconv.Identity())(x).features is x.features
print(json.dumps(checks))
'''


def test_tables_and_identity_merge_branches_as_spconv_does(interpreter):
    checks = interpreter.run_json(TABLES)
    assert all(checks.values()), {name: ok for name, ok in checks.items() if not ok}

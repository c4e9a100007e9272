"""The Ascend pack (``registry/ascend``) against the real torch / mmcv-lite / mmdet /
mmengine stack, with FAKE ``torch_npu`` and ``mx_driving`` packages (see
``fakes_ascend.py``) standing in for the NPU software we cannot install.

Every scenario runs in a fresh interpreter. "Same numbers" is checked by
running the same computation patched and again after ``unpatch_all()``,
which must also restore the identity of everything the pack touched.
"""

from __future__ import annotations

from packs.ascend.fakes_ascend import ASCEND_FAKES, PROLOGUE

ASCEND_PATCHES = {
    "ascend.resnet_add_relu", "ascend.resnet_maxpool", "ascend.resnet_fp16",
    "ascend.tensor_bool_index", "ascend.batch_matmul", "ascend.optim_wrapper_clip",
    "ascend.sparse_conv", "ascend.mmcv1_optimizer_hook", "ascend.mmcv1_scatter_stream",
    "ascend.mmcv1_ddp", "ascend.mmcv1_fp16_scaler", "ascend.pseudo_sampler",
    "ascend.pseudo_sampler_mmdet2", "ascend.nuscenes_metric",
}
MMCV1_PATCHES = {"ascend.mmcv1_optimizer_hook", "ascend.mmcv1_scatter_stream", "ascend.mmcv1_ddp",
                 "ascend.mmcv1_fp16_scaler"}


def test_ascend_pack_without_npu_stack_skips_every_patch_and_imports_nothing(interpreter):
    result = interpreter.run_json(PROLOGUE + '''
watched = ("torch", "torch_npu", "mx_driving", "mmcv", "mmdet", "mmengine", "numpy")
after_declaring = sorted(name for name in watched if name in sys.modules)
import torch, mmengine.optim, mmcv.ops, mmdet.models.backbones.resnet
import mmdet3d.evaluation.metrics.nuscenes_metric
try:
    import mmcv.parallel            # mmcv 1.x only
except ImportError as error:
    mmcv1_error = type(error).__name__
print(json.dumps({
    "after_declaring": after_declaring,
    "npu_imported": sorted(name for name in ("torch_npu", "mx_driving") if name in sys.modules),
    "mmcv1_error": mmcv1_error,
    "report": {name: [r.status, r.reason, sorted(r.tags), r.description]
               for name, r in ascend_report().items()},
}))
''')
    assert result["after_declaring"] == [], "declaring the pack must import no target"
    assert result["npu_imported"] == []
    report = result["report"]
    assert set(report) == ASCEND_PATCHES
    for name, (status, reason, tags, description) in report.items():
        assert "ascend" in tags
        if name == "ascend.resnet_fp16":
            assert status == "disabled"
        elif name in MMCV1_PATCHES:
            # Their targets do not exist in mmcv 2.x: they never fire, and say why.
            assert result["mmcv1_error"] == "ModuleNotFoundError"
            assert status == "pending" and "mmcv 1.x" in description
        elif name == "ascend.pseudo_sampler_mmdet2":
            # mmdet 2.x's module does not exist in mmdet 3: it waits, never fires
            assert status == "pending" and "mmdet 2.x" in description
        else:
            assert status == "skipped", name
            assert "torch_npu is not installed" in reason, reason


def test_ascend_fake_resnet_same_numbers_conflict_and_exact_undo(interpreter):
    interpreter.write(ASCEND_FAKES)
    result = interpreter.run_json(PROLOGUE + '''
import torch
import mmdet.models.backbones.resnet as resnet
import mx_driving

classes = {"BasicBlock": resnet.BasicBlock, "Bottleneck": resnet.Bottleneck,
           "ResNet": resnet.ResNet}
originals = {name: lazypatch.original(cls, "forward") for name, cls in classes.items()}
# Each installed forward is the installed one, edited: it wraps it and runs in its module.
edited_from_installed = {
    name: cls.__dict__["forward"] is not originals[name]
    and cls.__dict__["forward"].__wrapped__ is originals[name]
    and cls.__dict__["forward"].__globals__ is vars(resnet)
    for name, cls in classes.items()}

torch.manual_seed(0)
models = [resnet.ResNet(depth=18, base_channels=8), resnet.ResNet(depth=50, base_channels=8)]
for model in models:
    model.eval()
torch.set_num_threads(1)   # the suite runs two workers on two cores
image = torch.randn(1, 3, 16, 16)

def run():
    with torch.no_grad():
        return [[out.clone() for out in model(image)] for model in models]

patched = run()
calls = dict(mx_driving.CALLS)
# Training-style input (requires grad): the stem pool must stay PyTorch's.
models[0](image.clone().requires_grad_())
pool_calls_with_grad = mx_driving.CALLS["npu_max_pool2d"] - calls["npu_max_pool2d"]

lazypatch.enable("ascend.resnet_fp16")
fp16 = run()
records = ascend_report()
conflicts = records["ascend.resnet_fp16"].conflicts + records["ascend.resnet_maxpool"].conflicts

lazypatch.unpatch_all()
plain = run()
print(json.dumps({
    "statuses": {name: records[name].status for name in
                 ("ascend.resnet_add_relu", "ascend.resnet_maxpool", "ascend.resnet_fp16")},
    "edited_from_installed": edited_from_installed, "calls": calls,
    "pool_calls_with_grad": pool_calls_with_grad, "conflicts": conflicts,
    "same_numbers": all(torch.equal(a, b) for x, y in zip(patched, plain) for a, b in zip(x, y)),
    "fp16_dtypes": sorted({str(out.dtype) for outs in fp16 for out in outs}),
    "fp16_close": all(torch.allclose(a, b, rtol=0.05, atol=0.05)
                      for x, y in zip(fp16, plain) for a, b in zip(x, y)),
    "restored": all(cls.__dict__["forward"] is originals[name] for name, cls in classes.items()),
}))
''')
    assert set(result["statuses"].values()) == {"applied"}
    # The installed mmdet's forwards have the steps the edits change.
    assert result["edited_from_installed"] == {"BasicBlock": True, "Bottleneck": True,
                                               "ResNet": True}
    assert result["calls"]["npu_add_relu"] == 8 + 16   # one per residual block (ResNet-18, -50)
    assert result["calls"]["npu_max_pool2d"] == 2
    assert result["pool_calls_with_grad"] == 0
    assert result["same_numbers"]
    assert any("'ascend.resnet_fp16' wins" in text for text in result["conflicts"])
    assert result["fp16_dtypes"] == ["torch.float32"] and result["fp16_close"]
    assert result["restored"]


# Forwards of other (imagined) mmdet releases, in a module of their own so that their
# source can be read, as an installed release's can.
RESNET_VARIANTS = {"resnet_variants.py": '''
"""ResNet forwards written differently from the installed mmdet's."""


def basic_block_forward(self, x):
    # No inner function and no checkpointing: the add and the ReLU in line.
    identity = x if self.downsample is None else self.downsample(x)
    out = self.relu(self.norm1(self.conv1(x)))
    out = self.norm2(self.conv2(out))
    out += identity
    out = self.relu(out)
    return out


def bottleneck_forward(self, x):
    identity = x if self.downsample is None else self.downsample(x)
    out = self.relu(self.norm1(self.conv1(x)))
    out = self.relu(self.norm2(self.conv2(out)))
    out = self.norm3(self.conv3(out)) * 0.5     # a step the installed release lacks
    out += identity
    out = self.relu(out)
    return out


def resnet_forward(self, x):
    x = self.stem(x) if self.deep_stem else self.relu(self.norm1(self.conv1(x)))
    x = self.maxpool(x)
    outs = []
    for i, layer_name in enumerate(self.res_layers):
        x = getattr(self, layer_name)(x)
        if i in self.out_indices:
            outs.append(x)
    return tuple(outs)


def basic_block_relu_before_add(self, x):
    # The ReLU before the residual add: there is no add+ReLU to fuse.
    identity = x if self.downsample is None else self.downsample(x)
    out = self.norm2(self.conv2(self.relu(self.norm1(self.conv1(x)))))
    return self.relu(out) + identity
'''}


def test_ascend_fake_resnet_edits_fit_forwards_written_differently(interpreter):
    interpreter.write(ASCEND_FAKES)
    interpreter.write(RESNET_VARIANTS)
    result = interpreter.run_json(PROLOGUE + '''
import torch
import resnet_variants as variants

FORWARDS = {"BasicBlock": variants.basic_block_forward,
            "Bottleneck": variants.bottleneck_forward, "ResNet": variants.resnet_forward}

@lazypatch.when_imported("mmdet.models.backbones.resnet", name="test.other_release", priority=-10)
def other_release(resnet, patch):
    for name, forward in FORWARDS.items():
        patch.setattr(getattr(resnet, name), "forward", forward)

import mmdet.models.backbones.resnet as resnet
import mx_driving
records = ascend_report()
edited_from = {name: getattr(resnet, name).__dict__["forward"].__wrapped__.__name__
               for name in FORWARDS}
torch.manual_seed(0)
models = [resnet.ResNet(depth=18, base_channels=8), resnet.ResNet(depth=50, base_channels=8)]
for model in models:
    model.eval()
torch.set_num_threads(1)
image = torch.randn(1, 3, 16, 16)

def run():
    with torch.no_grad():
        return [[out.clone() for out in model(image)] for model in models]

patched = run()
calls = dict(mx_driving.CALLS)
lazypatch.unpatch("ascend.resnet_add_relu")
lazypatch.unpatch("ascend.resnet_maxpool")
variant = run()
print(json.dumps({
    "statuses": [records[name].status for name in ("ascend.resnet_add_relu",
                                                   "ascend.resnet_maxpool")],
    "edited_from": edited_from, "calls": calls,
    "same_numbers": all(torch.equal(a, b) for x, y in zip(patched, variant)
                        for a, b in zip(x, y)),
    "variants_back": all(getattr(resnet, name).__dict__["forward"] is forward
                         for name, forward in FORWARDS.items()),
}))
''')
    assert result["statuses"] == ["applied", "applied"]
    assert result["edited_from"] == {"BasicBlock": "basic_block_forward",
                                     "Bottleneck": "bottleneck_forward",
                                     "ResNet": "resnet_forward"}
    assert result["calls"]["npu_add_relu"] == 8 + 16
    assert result["calls"]["npu_max_pool2d"] == 2
    # The variant's own extra step (the 0.5 scale) is kept: same numbers as the variant.
    assert result["same_numbers"]
    assert result["variants_back"]


def test_ascend_fake_resnet_edit_skips_forwards_without_the_steps_it_changes(interpreter):
    interpreter.write(ASCEND_FAKES)
    interpreter.write(RESNET_VARIANTS)
    result = interpreter.run_json(PROLOGUE + '''
import functools
import resnet_variants as variants

@lazypatch.when_imported("mmdet.models.backbones.resnet", name="test.earlier_edit", priority=-10)
def earlier_edit(resnet, patch):
    patch.setattr(resnet.BasicBlock, "forward", variants.basic_block_relu_before_add)
    original = resnet.ResNet.__dict__["forward"]
    patch.setattr(resnet.ResNet, "forward", functools.wraps(original)(lambda self, x: original(self, x)))

import mmdet.models.backbones.resnet as resnet
records = ascend_report()
print(json.dumps({name: [records[name].status, records[name].reason]
                  for name in ("ascend.resnet_add_relu", "ascend.resnet_maxpool")}
                 | {"bottleneck_untouched": resnet.Bottleneck.__dict__["forward"]
                    is lazypatch.original(resnet.Bottleneck, "forward")}))
''')
    status, reason = result["ascend.resnet_add_relu"]
    assert status == "skipped"
    assert reason.startswith("BasicBlock.forward left as it is: BasicBlock.forward has no "
                             "residual add ('out += identity') whose result goes straight "
                             "into self.relu"), reason
    # All-or-nothing: Bottleneck (which fits) was not replaced either.
    assert result["bottleneck_untouched"]
    status, reason = result["ascend.resnet_maxpool"]
    assert status == "skipped" and "already wrapped" in reason


def test_ascend_fake_resnet_and_nuscenes_apply_whatever_the_version_string(interpreter):
    interpreter.write(ASCEND_FAKES)
    # Installed metadata saying other releases, in front of the real ones on sys.path:
    # the same source under another version string.
    interpreter.write({
        "mmdet-2.28.2.dist-info/METADATA": "Metadata-Version: 2.1\nName: mmdet\nVersion: 2.28.2\n",
        "mmdet3d-1.0.0rc6.dist-info/METADATA":
            "Metadata-Version: 2.1\nName: mmdet3d\nVersion: 1.0.0rc6\n",
    })
    result = interpreter.run_json(PROLOGUE + '''
from importlib.metadata import version
import mmdet.models.backbones.resnet
import mmdet3d.evaluation.metrics.nuscenes_metric
records = ascend_report()
print(json.dumps({"versions": [version("mmdet"), version("mmdet3d")],
                  "statuses": {name: records[name].status for name in (
                      "ascend.resnet_add_relu", "ascend.resnet_maxpool",
                      "ascend.nuscenes_metric")}}))
''')
    assert result["versions"] == ["2.28.2", "1.0.0rc6"]
    assert set(result["statuses"].values()) == {"applied"}, result["statuses"]


def test_ascend_fake_torch_bool_index_and_batch_matmul(interpreter):
    interpreter.write(ASCEND_FAKES)
    result = interpreter.run_json(PROLOGUE + '''
import torch
import mx_driving

original_matmul = lazypatch.original(torch, "matmul")
torch.manual_seed(0)
vector, matrix = torch.randn(6), torch.randn(5, 3)
row_mask = torch.tensor([True, False, True, True, False])
square, column = torch.randn(2, 3, 4, 4), torch.randn(2, 1, 4, 1)
out = torch.empty(2, 3, 4, 1)

def compute():
    """Each case: (result tensor, or the error text)."""
    leaf = matrix.clone().requires_grad_()
    picked = leaf[row_mask]
    picked.sum().backward()
    cases = {
        "1d": lambda: vector[vector > 0],
        "2d_rows": lambda: matrix[row_mask],
        "2d_full": lambda: matrix[matrix > 0],
        "int": lambda: matrix[1],
        "slice_mask": lambda: matrix[row_mask, 1:],
        "3d": lambda: square[0][square[0] > 0],
        "wrong_length": lambda: matrix[torch.tensor([True, False])],
        "grad": lambda: leaf.grad,
        "matmul": lambda: torch.matmul(square, column),
        "method": lambda: square.matmul(column),
        "operator": lambda: square @ column,
        "keywords": lambda: torch.matmul(input=square, other=column),
        "out": lambda: (torch.matmul(square, column, out=out), out.clone())[1],
        "other_shape": lambda: matrix @ matrix.T,
        "mismatch": lambda: square @ torch.randn(2, 1, 3, 1),
    }
    results = {}
    for name, case in cases.items():
        try:
            results[name] = case()
        except Exception as error:
            results[name] = f"{type(error).__name__}: {error}"
    return results

before = dict(mx_driving.CALLS)
patched = compute()
calls = {name: mx_driving.CALLS[name] - before.get(name, 0) for name in mx_driving.CALLS}
records = ascend_report()
lazypatch.unpatch_all()
plain = compute()

def same(a, b):
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-6, atol=1e-6)

print(json.dumps({
    "statuses": [records["ascend.tensor_bool_index"].status, records["ascend.batch_matmul"].status],
    "calls": calls,
    "differences": [name for name in plain if not same(patched[name], plain[name])],
    "errors_kept": isinstance(patched["wrong_length"], str),
    "restored": ["__getitem__" not in torch.Tensor.__dict__, "matmul" not in torch.Tensor.__dict__,
                 "__matmul__" not in torch.Tensor.__dict__, torch.matmul is original_matmul],
}))
''')
    assert result["statuses"] == ["applied", "applied"]
    assert result["differences"] == []
    assert result["errors_kept"]
    # matmul, method, operator: the NPU kernel; keywords, out=, other shapes: upstream.
    assert result["calls"] == {"npu_batch_matmul": 3}
    assert result["restored"] == [True, True, True, True]


def test_ascend_fake_matmul_rebinds_copies_made_before_activation(interpreter):
    interpreter.write(ASCEND_FAKES)
    interpreter.write({"user_model.py": "from torch import matmul\n"})
    result = interpreter.run_json('''
import json, warnings
import torch, user_model
kept = [torch.matmul]          # in a list: a module global would be rebound too
warnings.simplefilter("ignore")
import lazypatch, lazypatch.registry.ascend      # torch already imported: applies at once
rebound = user_model.matmul is torch.matmul and torch.matmul is not kept[0]
lazypatch.unpatch_all()
print(json.dumps([rebound, user_model.matmul is kept[0]]))
''')
    assert result == [True, True]


def test_ascend_fake_optim_wrapper_fused_clip_same_numbers(interpreter):
    interpreter.write(ASCEND_FAKES)
    result = interpreter.run_json(PROLOGUE + '''
import torch
from mmengine.optim import OptimWrapper
from mmengine.logging import MessageHub
import torch_npu
from torch_npu.optim import NpuFusedSGD

original_init = lazypatch.original(OptimWrapper, "__init__")

def train(optimizer_class=NpuFusedSGD, **clip):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    wrapper = OptimWrapper(optimizer_class(model.parameters(), lr=0.5),
                           clip_grad=dict(clip) if clip else None)
    for _ in range(3):
        loss = (model(torch.randn(8, 4)) ** 2).sum()
        wrapper.update_params(loss)
    norm = MessageHub.get_current_instance().get_scalar("train/grad_norm").current()
    params = [p.detach().clone() for p in model.parameters()]
    return params, float(norm), repr(wrapper.__dict__.get("clip_func"))

cases = {"fused": dict(max_norm=0.1), "norm_type": dict(max_norm=0.1, norm_type=1.0),
         "extra_option": dict(max_norm=0.1, error_if_nonfinite=True)}

def run_all():
    counts, out = {}, {}
    for name, clip in cases.items():
        before = torch_npu.CALLS["clip_grad_norm_fused_"]
        out[name] = train(**clip)
        counts[name] = torch_npu.CALLS["clip_grad_norm_fused_"] - before
    before = torch_npu.CALLS["clip_grad_norm_fused_"]
    out["plain_sgd"] = train(torch.optim.SGD, max_norm=0.1)
    counts["plain_sgd"] = torch_npu.CALLS["clip_grad_norm_fused_"] - before
    return counts, out

patched_counts, patched = run_all()
status = ascend_report()["ascend.optim_wrapper_clip"].status
lazypatch.unpatch_all()
_, plain = run_all()
print(json.dumps({
    "status": status, "counts": patched_counts,
    "clip_funcs": {name: value[2] for name, value in patched.items()},
    "same": {name: patched[name][1] == plain[name][1] and
             all(torch.equal(a, b) for a, b in zip(patched[name][0], plain[name][0]))
             for name in plain},
    "restored": OptimWrapper.__dict__["__init__"] is original_init,
}))
''')
    assert result["status"] == "applied"
    # Fused only where it computes the same thing: norm clipping with options it takes.
    assert result["counts"] == {"fused": 3, "norm_type": 3, "extra_option": 0, "plain_sgd": 0}
    assert "FusedNormClip" in result["clip_funcs"]["fused"]
    assert "FusedNormClip" not in result["clip_funcs"]["plain_sgd"]
    assert all(result["same"].values()), result["same"]
    assert result["restored"]


def test_ascend_fake_sparse_conv_classes_registry_and_undo(interpreter):
    interpreter.write(ASCEND_FAKES)
    interpreter.write({"user_layers.py": "from mmcv.ops import SubMConv3d, SparseConvTensor\n"})
    result = interpreter.run_json(PROLOGUE + '''
import mmcv.ops
import mx_driving.spconv as mx
from mmengine.registry import MODELS
import user_layers

names = ["SubMConv3d", "SparseConv3d", "SparseInverseConv3d", "SparseConvTensor",
         "SparseSequential", "SparseModule"]
holders = {"SparseConvTensor": mmcv.ops.sparse_structure, "SparseSequential": mmcv.ops.sparse_modules,
           "SparseModule": mmcv.ops.sparse_modules}
def home(name):
    return holders.get(name, mmcv.ops.sparse_conv)
originals = {name: lazypatch.original(home(name), name) for name in names}
registered = ["SubMConv3d", "SparseConv3d", "SparseInverseConv3d"]
layer = MODELS.build(dict(type="SubMConv3d", in_channels=4, out_channels=8, kernel_size=3,
                          indice_key="subm1"))
patched = {
    "status": ascend_report()["ascend.sparse_conv"].status,
    "ops": all(getattr(mmcv.ops, name) is getattr(mx, name) for name in names),
    "defining": all(home(name).__dict__[name] is getattr(mx, name) for name in names),
    "user_copy": (user_layers.SubMConv3d is mx.SubMConv3d
                  and user_layers.SparseConvTensor is mx.SparseConvTensor),
    "registry": all(MODELS.get(name) is getattr(mx, name) for name in registered),
    "built": type(layer) is mx.SubMConv3d,
    "untouched": mmcv.ops.SparseConv2d.__module__ == "mmcv.ops.sparse_conv",
}
lazypatch.unpatch_all()
restored = {
    "ops": all(getattr(mmcv.ops, name) is originals[name] for name in names),
    "defining": all(home(name).__dict__[name] is originals[name] for name in names),
    "registry": all(MODELS.get(name) is originals[name] for name in registered),
    "originals_are_mmcv": all(cls.__module__.startswith("mmcv.ops.") for cls in originals.values()),
    # copied while patched (after mmcv.ops imported): undo of a rebinding change reaches it
    "user_copy": (user_layers.SubMConv3d is originals["SubMConv3d"]
                  and user_layers.SparseConvTensor is originals["SparseConvTensor"]),
    # the replacement's own home keeps its classes
    "mx_untouched": all(getattr(mx, name).__module__.startswith("mx_driving") for name in names),
}
print(json.dumps({"patched": patched, "restored": restored}))
''')
    assert result["patched"].pop("status") == "applied"
    assert all(result["patched"].values()), result["patched"]
    assert all(result["restored"].values()), result["restored"]


# mmcv 1.x cannot be installed beside mmcv 2.2 here, so the 1.x patch functions are
# applied to a module written by the test with the same shape as mmcv 1.7's
# ``mmcv/runner/hooks/optimizer.py`` and ``mmcv/parallel/_functions.py`` call sites.
MMCV1_SHAPED = {
    "legacy_hooks.py": '''
from torch.nn.utils import clip_grad

class OptimizerHook:
    def __init__(self, grad_clip=None):
        self.grad_clip = grad_clip
    def clip_grads(self, params):
        params = list(filter(lambda p: p.requires_grad and p.grad is not None, params))
        if len(params) > 0:
            return clip_grad.clip_grad_norm_(params, **self.grad_clip)
    def after_train_iter(self, runner):
        runner.optimizer.zero_grad()
        runner.outputs["loss"].backward()
        runner.grad_norm = self.clip_grads(runner.model.parameters())
        runner.optimizer.step()

class Fp16OptimizerHook(OptimizerHook):
    def after_train_iter(self, runner):
        OptimizerHook.after_train_iter(self, runner)
''',
    "legacy_functions.py": "from torch.nn.parallel._functions import _get_stream\n",
}


def test_ascend_fake_mmcv1_hook_and_stream_logic(interpreter):
    interpreter.write(ASCEND_FAKES)
    interpreter.write(MMCV1_SHAPED)
    result = interpreter.run_json('''
import json, types
import torch
import lazypatch
from lazypatch.registry.ascend.optim import patch_mmcv1_optimizer_hooks
from lazypatch.registry.ascend.mmcv1 import patch_scatter_stream
lazypatch.register(patch_mmcv1_optimizer_hooks, "legacy_hooks", name="test.hooks")
lazypatch.register(patch_scatter_stream, "legacy_functions", name="test.stream")
import legacy_hooks, legacy_functions, torch_npu
from torch_npu.optim import NpuFusedSGD

def train(hook_class):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    runner = types.SimpleNamespace(model=model, optimizer=NpuFusedSGD(model.parameters(), lr=0.5))
    for _ in range(2):
        runner.outputs = {"loss": (model(torch.randn(3, 4)) ** 2).sum()}
        hook_class(grad_clip=dict(max_norm=0.1)).after_train_iter(runner)
    return float(runner.grad_norm), [p.detach().clone() for p in model.parameters()]

original_get_stream = legacy_functions._get_stream.__wrapped__
patched = [train(legacy_hooks.OptimizerHook), train(legacy_hooks.Fp16OptimizerHook)]
fused_calls = torch_npu.CALLS["clip_grad_norm_fused_"]
adapter = legacy_functions._get_stream
stream_args = [adapter(-1)]
try:
    adapter(0)
except Exception as error:      # no NPU: the device type reaching torch is what matters
    stream_args.append(str(error))
lazypatch.unpatch_all()
plain = [train(legacy_hooks.OptimizerHook), train(legacy_hooks.Fp16OptimizerHook)]
print(json.dumps({
    "fused_calls": fused_calls,
    "same": all(a[0] == b[0] and all(torch.equal(x, y) for x, y in zip(a[1], b[1]))
                for a, b in zip(patched, plain)),
    "stream": [stream_args[0], "npu" in stream_args[1] if len(stream_args) > 1 else "no error"],
    "restored": [legacy_functions._get_stream is original_get_stream,
                 "clip_grads" in legacy_hooks.OptimizerHook.__dict__
                 and not hasattr(legacy_hooks.OptimizerHook.__dict__["clip_grads"], "__wrapped__")],
}))
''')
    assert result["fused_calls"] == 4          # 2 hooks x 2 iterations
    assert result["same"]
    assert result["stream"] == [None, True]
    assert result["restored"] == [True, True]

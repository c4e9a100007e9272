"""The CUDA-extension pack (``registry/cuda_extensions``): pure-PyTorch stand-ins for
``flash_attn``, ``torch_scatter`` and ``apex`` when they are not installed.

Each scenario runs in a fresh interpreter against the real CPU torch, and checks
values and gradients against a plain PyTorch reference written in the scenario
(explicit softmax attention, Python loops over the scatter indices, torch's own
optimizers and normalizations).
"""

from __future__ import annotations

import pytest

PROLOGUE = '''
import json, sys
import lazypatch
import lazypatch.registry.cuda_extensions
lazypatch.enable("cuda_extensions")
'''

MODULES = ["flash_attn", "flash_attn.flash_attn_interface", "flash_attn.bert_padding",
           "torch_scatter", "apex", "apex.amp",
           "apex.optimizers", "apex.normalization", "spconv", "spconv.core",
           "spconv.constants", "spconv.pytorch",
           "spconv.pytorch.core", "spconv.pytorch.conv", "spconv.pytorch.pool",
           "spconv.pytorch.modules", "spconv.pytorch.functional", "spconv.pytorch.utils",
           "spconv.pytorch.tables", "spconv.pytorch.identity"]


def fill_name(module: str) -> str:
    """The patch that fills a stand-in: ``<boundary>.pytorch``, but ``spconv``'s own
    submodule ``spconv.pytorch`` holds that name, so spconv's is ``.pure_pytorch``."""
    return f"cuda_extensions.{module}." + ("pure_pytorch" if module == "spconv" else "pytorch")


def test_pack_off_by_default_imports_fail_as_without_lazypatch_and_declaring_imports_nothing(interpreter):
    result = interpreter.run_json('''
import json, sys
import lazypatch
import lazypatch.registry.cuda_extensions
imported = sorted(name for name in ("torch", "numpy") if name in sys.modules)
failures = {}
for name in ("flash_attn", "flash_attn.flash_attn_interface", "torch_scatter", "apex.amp",
             "apex", "spconv.pytorch"):
    try:
        __import__(name)
        failures[name] = "imported"
    except ImportError as error:
        failures[name] = [type(error).__name__, error.name]
statuses = {r.name: r.status for r in lazypatch.report() if r.name.startswith("cuda_extensions")
            and "project_extensions" not in r.tags   # test_project_extensions.py
            and r.name != "cuda_extensions.torchvision"}   # test_torchvision_stand_in.py
print(json.dumps({"imported": imported, "failures": failures, "statuses": statuses}))
''')
    assert result["imported"] == []
    top = {"flash_attn": "flash_attn", "flash_attn.flash_attn_interface": "flash_attn",
           "torch_scatter": "torch_scatter", "apex.amp": "apex", "apex": "apex",
           "spconv.pytorch": "spconv"}
    assert result["failures"] == {name: ["ModuleNotFoundError", missing]
                                  for name, missing in top.items()}
    assert set(result["statuses"]) == {f"cuda_extensions.{name}" for name in MODULES} | {
        fill_name(name) for name in MODULES}
    assert set(result["statuses"].values()) == {"disabled"}


def test_enabled_by_the_environment_through_activation_and_undone_exactly(interpreter):
    result = interpreter.run_json('''
import json, sys
import lazypatch.auto
import lazypatch
import flash_attn, flash_attn.bert_padding, torch_scatter, spconv.pytorch
from apex import amp
from apex.optimizers import FusedAdam
from flash_attn.flash_attn_interface import flash_attn_func
same_function = flash_attn.flash_attn_func is flash_attn_func
amp_filled = callable(amp.scale_loss) and FusedAdam.__module__.endswith("apex_modules")
statuses = {r.name: r.status for r in lazypatch.report() if r.name.startswith("cuda_extensions")
            and "project_extensions" not in r.tags   # test_project_extensions.py
            and r.name != "cuda_extensions.torchvision"}   # test_torchvision_stand_in.py
lazypatch.unpatch_all()
left = sorted(name for name in sys.modules if name.split(".")[0] in ("flash_attn", "apex",
                                                                      "torch_scatter", "spconv"))
try:
    import torch_scatter
    after = "imported"
except ModuleNotFoundError as error:
    after = error.name
print(json.dumps({"same_function": same_function, "statuses": statuses, "left": left,
                  "after": after, "amp": amp_filled}))
''', env={"LAZYPATCH_ENABLE": "cuda_extensions"})
    assert result["same_function"] and result["amp"]
    assert set(result["statuses"].values()) == {"applied"}, result["statuses"]
    assert result["left"] == [] and result["after"] == "torch_scatter"


def test_real_modules_installed_are_imported_untouched(interpreter):
    interpreter.write({
        "flash_attn/__init__.py": "def flash_attn_func(*args):\n    return 'real'\n",
        "flash_attn/flash_attn_interface.py": "from flash_attn import flash_attn_func\n",
        "torch_scatter/__init__.py": "def scatter(*args):\n    return 'real'\n",
        "apex/__init__.py": "from . import amp\n",
        "apex/amp.py": "def initialize(*args):\n    return 'real'\n",
    })
    result = interpreter.run_json(PROLOGUE + '''
import flash_attn, flash_attn.flash_attn_interface, torch_scatter, apex, apex.amp
records = {r.name: [r.status, r.reason] for r in lazypatch.report()
           if r.name.startswith("cuda_extensions") and r.status != "pending"}
print(json.dumps({"values": [flash_attn.flash_attn_func(), torch_scatter.scatter(),
                             apex.amp.initialize()],
                  "marked": [hasattr(m, "__lazypatch_pure_pytorch__") for m in
                             (flash_attn, torch_scatter, apex, apex.amp)],
                  "torch": "torch" in sys.modules, "records": records}))
''')
    assert result["values"] == ["real", "real", "real"]
    assert result["marked"] == [False] * 4 and result["torch"] is False
    expected = {f"cuda_extensions.{name}{suffix}" for name in
                ("flash_attn", "flash_attn.flash_attn_interface", "torch_scatter", "apex",
                 "apex.amp") for suffix in ("", ".pytorch")}
    assert set(result["records"]) == expected
    for name, (status, reason) in result["records"].items():
        assert status == "skipped" and "installed" in reason, (name, reason)


FLASH_REFERENCE = '''
import torch
from flash_attn import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                        flash_attn_varlen_func)
import flash_attn.flash_attn_interface as interface
torch.manual_seed(0)

def reference(q, k, v, scale=None, causal=False, window=(-1, -1)):
    """softmax(q k^T * scale + mask) v in flash-attn layout, masks written out by loops."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    k = k.repeat_interleave(h // hk, dim=2)
    v = v.repeat_interleave(h // hk, dim=2)
    scale = d ** -0.5 if scale is None else scale
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    allowed = torch.zeros(sq, sk, dtype=torch.bool)
    for i in range(sq):
        for j in range(sk):
            ok = True
            diagonal = i + sk - sq
            if causal and j > diagonal:
                ok = False
            if window[1] >= 0 and j > diagonal + window[1]:
                ok = False
            if window[0] >= 0 and j < diagonal - window[0]:
                ok = False
            allowed[i, j] = ok
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)   # rows seeing nothing: zeros
    return torch.einsum("bhqk,bkhd->bqhd", weights, v)

def inputs(b, sq, sk, h, hk, d):
    return [torch.randn(b, s, heads, d, dtype=torch.float64, requires_grad=True)
            for s, heads in ((sq, h), (sk, hk), (sk, hk))]

def compare(function, reference_function):
    out = function()
    expected = reference_function()
    return out, expected

results = {}
cases = {
    "plain": dict(shape=(2, 5, 5, 4, 4, 8), kwargs={}),
    "scale": dict(shape=(2, 5, 7, 4, 4, 8), kwargs=dict(softmax_scale=0.3)),
    "causal_square": dict(shape=(1, 6, 6, 2, 2, 4), kwargs=dict(causal=True)),
    "causal_fewer_queries": dict(shape=(1, 3, 7, 2, 2, 4), kwargs=dict(causal=True)),
    "causal_more_queries": dict(shape=(1, 7, 3, 2, 2, 4), kwargs=dict(causal=True)),
    "window": dict(shape=(1, 8, 8, 2, 2, 4), kwargs=dict(window_size=(2, 1))),
    "causal_window": dict(shape=(1, 8, 8, 2, 2, 4), kwargs=dict(causal=True, window_size=(3, -1))),
    "grouped_query": dict(shape=(2, 5, 6, 4, 2, 8), kwargs=dict(causal=True)),
}
for name, case in cases.items():
    q, k, v = inputs(*case["shape"])
    kwargs = case["kwargs"]
    out = flash_attn_func(q, k, v, **kwargs)
    expected = reference(q, k, v, kwargs.get("softmax_scale"), kwargs.get("causal", False),
                         kwargs.get("window_size", (-1, -1)))
    weight = torch.randn_like(out)
    grads = torch.autograd.grad((out * weight).sum(), (q, k, v))
    expected_grads = torch.autograd.grad((expected * weight).sum(), (q, k, v))
    results[name] = [torch.allclose(out, expected, atol=1e-10),
                     all(torch.allclose(a, b, atol=1e-10) for a, b in zip(grads, expected_grads)),
                     bool(torch.isfinite(out).all())]

q, k, v = inputs(2, 6, 6, 3, 3, 4)
packed = flash_attn_qkvpacked_func(torch.stack([q, k, v], dim=2), causal=True)
kv_packed = flash_attn_kvpacked_func(q, torch.stack([k, v], dim=2), causal=True)
expected = reference(q, k, v, causal=True)
results["qkvpacked"] = [torch.allclose(packed, expected, atol=1e-10)]
results["kvpacked"] = [torch.allclose(kv_packed, expected, atol=1e-10)]

lengths_q, lengths_k = [3, 5, 1], [4, 5, 2]
cu_q = torch.tensor([0, 3, 8, 9], dtype=torch.int32)
cu_k = torch.tensor([0, 4, 9, 11], dtype=torch.int32)
q = torch.randn(9, 2, 4, dtype=torch.float64, requires_grad=True)
k = torch.randn(11, 1, 4, dtype=torch.float64, requires_grad=True)
v = torch.randn(11, 1, 4, dtype=torch.float64, requires_grad=True)
out = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 5, causal=True)
pieces = [reference(q[cu_q[i]:cu_q[i + 1]][None], k[cu_k[i]:cu_k[i + 1]][None],
                    v[cu_k[i]:cu_k[i + 1]][None], causal=True)[0] for i in range(3)]
expected = torch.cat(pieces)
grads = torch.autograd.grad(out.sum(), (q, k, v))
expected_grads = torch.autograd.grad(expected.sum(), (q, k, v))
results["varlen"] = [torch.allclose(out, expected, atol=1e-10),
                     all(torch.allclose(a, b, atol=1e-10) for a, b in zip(grads, expected_grads))]

q, k, v = inputs(1, 16, 16, 2, 2, 8)
dropped = flash_attn_func(q, k, v, dropout_p=0.5)
results["dropout_changes_output"] = [not torch.allclose(dropped, flash_attn_func(q, k, v)),
                                     bool(torch.isfinite(dropped).all())]
errors = {}
for name, kwargs in {"alibi_slopes": dict(alibi_slopes=torch.ones(2)),
                     "softcap": dict(softcap=30.0),
                     "return_attn_probs": dict(return_attn_probs=True)}.items():
    try:
        flash_attn_func(q, k, v, **kwargs)
        errors[name] = "no error"
    except NotImplementedError as error:
        errors[name] = str(error)
print(json.dumps({"results": results, "errors": errors,
                  "interface": [getattr(interface, n) is getattr(sys.modules["flash_attn"], n)
                                for n in ("flash_attn_func", "flash_attn_varlen_func",
                                          "flash_attn_qkvpacked_func")]}))
'''


def test_flash_attention_matches_explicit_softmax_attention_values_and_gradients(interpreter):
    result = interpreter.run_json(PROLOGUE + FLASH_REFERENCE)
    for name, checks in result["results"].items():
        assert all(checks), (name, checks)
    assert result["interface"] == [True, True, True]
    for name, message in result["errors"].items():
        assert name in message and "flash_attn is not installed" in message, (name, message)


SCATTER_REFERENCE = '''
import torch
import torch_scatter
from torch_scatter import (scatter, scatter_add, scatter_max, scatter_mean, scatter_min,
                           scatter_mul, scatter_sum, segment_csr, gather_csr)
torch.manual_seed(0)

def loop_reference(src, index, size, reduce):
    """Along dim 0 of a 2-D src, index 1-D: explicit loops, empty rows 0, arg = len(src)."""
    out = torch.zeros(size, src.shape[1], dtype=src.dtype)
    arg = torch.full((size, src.shape[1]), src.shape[0], dtype=torch.long)
    for column in range(src.shape[1]):
        for row in range(size):
            members = [i for i in range(src.shape[0]) if int(index[i]) == row]
            values = [src[i, column] for i in members]
            if not values:
                out[row, column] = 1 if reduce == "mul" else 0
                continue
            if reduce == "sum":
                out[row, column] = sum(values)
            elif reduce == "mul":
                product = values[0]
                for value in values[1:]:
                    product = product * value
                out[row, column] = product
            elif reduce == "mean":
                out[row, column] = sum(values) / len(values)
            else:
                best = members[0]
                for i in members:
                    better = src[i, column] > src[best, column] if reduce == "max" \\
                        else src[i, column] < src[best, column]
                    if better:
                        best = i
                out[row, column] = src[best, column]
                arg[row, column] = best
    return out, arg

src = torch.randn(9, 3, dtype=torch.float64)
src[4, 1] = src[2, 1]                          # a tie: the first position wins
index = torch.tensor([0, 2, 2, 0, 2, 5, 0, 1, 5])   # rows 3 and 4 receive nothing
checks = {}
for reduce in ("sum", "mul", "mean", "max", "min"):
    expected, expected_arg = loop_reference(src, index, 6, reduce)
    got = scatter(src, index, dim=0, reduce=reduce)
    checks[f"scatter_{reduce}"] = torch.allclose(got, expected) and got.shape == (6, 3)
    if reduce in ("max", "min"):
        function = scatter_max if reduce == "max" else scatter_min
        values, arg = function(src, index, dim=0, dim_size=6)
        checks[f"{reduce}_arg"] = torch.equal(arg, expected_arg) and torch.allclose(values, expected)

# dim=-1 with a 1-D index broadcast over the rows; dim_size larger than needed
transposed, _ = loop_reference(src, index, 8, "sum")
checks["last_dim"] = torch.allclose(scatter_sum(src.t(), index, dim=-1, dim_size=8), transposed.t())
checks["add_alias"] = torch.allclose(scatter_add(src, index, 0), scatter_sum(src, index, 0))
checks["mul"] = torch.allclose(scatter_mul(src, index, 0), loop_reference(src, index, 6, "mul")[0])
checks["mean_int"] = torch.equal(scatter_mean(torch.tensor([1, 2, 4, 7]), torch.tensor([0, 0, 1, 1])),
                                 torch.tensor([1, 5]))
out = torch.ones(6, 3, dtype=torch.float64)
checks["sum_into_out"] = torch.allclose(scatter_sum(src, index, 0, out=out),
                                        loop_reference(src, index, 6, "sum")[0] + 1) and \\
    torch.allclose(out, loop_reference(src, index, 6, "sum")[0] + 1)

# gradients: sum/mean against the loop reference, max only to the winning element
leaf = src.clone().requires_grad_()
weight = torch.randn(6, 3, dtype=torch.float64)
for reduce in ("sum", "mean", "max"):
    grad, = torch.autograd.grad((scatter(leaf, index, 0, reduce=reduce) * weight).sum(), leaf)
    reference_leaf = src.clone().requires_grad_()
    expected_grad, = torch.autograd.grad(
        (loop_reference(reference_leaf, index, 6, reduce)[0] * weight).sum(), reference_leaf)
    checks[f"grad_{reduce}"] = torch.allclose(grad, expected_grad)

# CSR segments: rows 1:3, 3:3 (empty), 3:7 of src
indptr = torch.tensor([1, 3, 3, 7])
segment_index = torch.tensor([0, 0, 1, 1, 1, 1]) + 0
for reduce in ("sum", "mean", "max", "min"):
    got = segment_csr(src, indptr, reduce=reduce)
    dense = {0: [1, 2], 1: [], 2: [3, 4, 5, 6]}
    expected = torch.zeros(3, 3, dtype=torch.float64)
    expected_arg = torch.full((3, 3), src.shape[0])
    for segment, rows in dense.items():
        if not rows:
            continue
        block = src[rows]
        if reduce == "sum":
            expected[segment] = block.sum(0)
        elif reduce == "mean":
            expected[segment] = block.mean(0)
        else:
            value, position = (block.max(0) if reduce == "max" else block.min(0))
            expected[segment] = value
            expected_arg[segment] = torch.tensor(rows)[position]
    if reduce in ("max", "min"):
        checks[f"segment_{reduce}"] = torch.allclose(got[0], expected) and \\
            torch.equal(got[1], expected_arg)
    else:
        checks[f"segment_{reduce}"] = torch.allclose(got, expected)
gathered = gather_csr(torch.tensor([[1.0], [2.0], [3.0]]), torch.tensor([0, 2, 2, 5]))
checks["gather_csr"] = gathered.flatten().tolist() == [1.0, 1.0, 3.0, 3.0, 3.0]
try:
    scatter(src, index, 0, reduce="median")
    checks["bad_reduce"] = False
except ValueError as error:
    checks["bad_reduce"] = "median" in str(error)
print(json.dumps(checks))
'''


def test_torch_scatter_matches_loops_values_argmax_and_gradients(interpreter):
    checks = interpreter.run_json(PROLOGUE + SCATTER_REFERENCE)
    assert all(checks.values()), {name: ok for name, ok in checks.items() if not ok}


APEX_REFERENCE = '''
import copy
import torch
import torch.nn.functional as F
from apex import amp
from apex.optimizers import FusedAdam
from apex.normalization import FusedLayerNorm, FusedRMSNorm
torch.manual_seed(0)
checks = {}

def model():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))

def train(optimizer_factory, steps=4, scaled=False):
    net = model()
    optimizer = optimizer_factory(net.parameters())
    torch.manual_seed(2)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = (net(torch.randn(5, 4)) ** 2).mean()
        if scaled:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        optimizer.step()
    return [p.detach().clone() for p in net.parameters()]

def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))

# FusedAdam: AdamW (adam_w_mode, apex's default) or Adam with L2
checks["fused_adam_w"] = same(train(lambda p: FusedAdam(p, lr=0.01, weight_decay=0.1)),
                              train(lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1)))
checks["fused_adam_l2"] = same(
    train(lambda p: FusedAdam(p, lr=0.01, weight_decay=0.1, adam_w_mode=False)),
    train(lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.1)))
checks["fused_adam_is_optimizer"] = isinstance(FusedAdam(model().parameters()), torch.optim.Optimizer)
try:
    FusedAdam(model().parameters(), amsgrad=True)
    checks["amsgrad_refused"] = False
except RuntimeError as error:
    checks["amsgrad_refused"] = "AMSGrad" in str(error)

# normalizations: values and gradients against the functional forms
x = torch.randn(3, 5, 6, dtype=torch.float64, requires_grad=True)
layer = FusedLayerNorm(6).double()
with torch.no_grad():
    layer.weight.uniform_(0.5, 1.5)
    layer.bias.uniform_(-0.5, 0.5)
out = layer(x)
expected = F.layer_norm(x, (6,), layer.weight, layer.bias, 1e-5)
g1 = torch.autograd.grad(out.sum(), (x, layer.weight))
g2 = torch.autograd.grad(expected.sum(), (x, layer.weight))
checks["layer_norm"] = torch.allclose(out, expected) and all(torch.allclose(a, b) for a, b in zip(g1, g2))
rms = FusedRMSNorm([5, 6]).double()
with torch.no_grad():
    rms.weight.uniform_(0.5, 1.5)
out = rms(x)
expected = x * torch.rsqrt(x.pow(2).mean(dim=(-2, -1), keepdim=True) + 1e-5) * rms.weight
g1 = torch.autograd.grad(out.sum(), (x, rms.weight))
g2 = torch.autograd.grad(expected.sum(), (x, rms.weight))
checks["rms_norm"] = torch.allclose(out, expected) and all(torch.allclose(a, b) for a, b in zip(g1, g2))
checks["state_dict_names"] = sorted(layer.state_dict()) == ["bias", "weight"] and \\
    sorted(rms.state_dict()) == ["weight"]

# amp O0 with dynamic loss scaling: the scale is a power of two, so the unscaled
# gradients, hence the parameters, are exactly those of plain float32 training
plain = train(lambda p: torch.optim.SGD(p, lr=0.1))
net = model()
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
net, optimizer = amp.initialize(net, optimizer, opt_level="O0", loss_scale="dynamic")
torch.manual_seed(2)
for _ in range(4):
    optimizer.zero_grad()
    loss = (net(torch.randn(5, 4)) ** 2).mean()
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    optimizer.step()
checks["o0_dynamic_same_as_plain"] = same([p.detach() for p in net.parameters()], plain)
checks["scale"] = amp.state_dict() == {"loss_scaler0": {"loss_scale": 65536.0, "unskipped": 4}}

# overflow: the step is skipped once and the scale halves; the next step runs
before = [p.detach().clone() for p in net.parameters()]
optimizer.zero_grad()
with amp.scale_loss(net(torch.randn(5, 4)).sum() * float("inf"), optimizer) as scaled_loss:
    scaled_loss.backward()
optimizer.step()
checks["overflow_skipped"] = same([p.detach() for p in net.parameters()], before)
checks["overflow_halved"] = amp.state_dict()["loss_scaler0"] == {"loss_scale": 32768.0, "unskipped": 0}
optimizer.zero_grad()
with amp.scale_loss((net(torch.randn(5, 4)) ** 2).mean(), optimizer) as scaled_loss:
    scaled_loss.backward()
optimizer.step()
checks["next_step_runs"] = not same([p.detach() for p in net.parameters()], before)
checks["step_restored"] = "step" not in vars(optimizer)
saved = amp.state_dict()
amp.load_state_dict({"loss_scaler0": {"loss_scale": 8.0, "unskipped": 1}})
checks["load_state_dict"] = amp.state_dict()["loss_scaler0"] == {"loss_scale": 8.0, "unskipped": 1}

# O1: forward under autocast (float16 matmuls), float32 parameters, close to float32
reference_net = model()
net16 = amp.initialize(copy.deepcopy(reference_net), opt_level="O1")
inputs = torch.randn(5, 4)
out16 = net16(inputs)
checks["o1_dtype"] = out16.dtype == torch.float16 and \\
    all(p.dtype == torch.float32 for p in net16.parameters())
checks["o1_close"] = torch.allclose(out16.float(), reference_net(inputs), atol=1e-2, rtol=1e-2)
for level in ("O2", "O3"):
    try:
        amp.initialize(model(), opt_level=level)
        checks[f"{level}_refused"] = False
    except NotImplementedError as error:
        checks[f"{level}_refused"] = "opt_level" in str(error) and "O1" in str(error)
print(json.dumps(checks))
'''


def test_apex_fused_adam_norms_and_amp_against_plain_pytorch(interpreter):
    checks = interpreter.run_json(PROLOGUE + APEX_REFERENCE)
    assert all(checks.values()), {name: ok for name, ok in checks.items() if not ok}


@pytest.mark.parametrize("module", ["flash_attn", "torch_scatter", "apex.amp"])
def test_a_single_module_can_be_turned_off_by_name(interpreter, module):
    result = interpreter.run_json(PROLOGUE + f'''
lazypatch.disable("cuda_extensions.{module}")
try:
    import {module}
    outcome = "imported"
except ModuleNotFoundError as error:
    outcome = error.name
print(json.dumps(outcome))
''')
    assert result == module

"""The NPU stand-in (``registry/npu_stand_in``): code written for an Ascend NPU imports and
runs on this CPU machine, which has neither torch_npu nor DrivingSDK.

Each scenario runs in a fresh interpreter against the real CPU torch. The operators are
checked against references written out in the scenario (softmax attention as explicit
loops, the RMS norm and rotary formulas, scatter maxima by a Python loop, multi-scale
deformable attention by ``grid_sample``), gradients by ``gradcheck``. Tests that pretend
an NPU stack is installed build FAKE ``torch_npu``/``mx_driving`` packages on disk and
say "fake" in their names.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from packs.ascend.fakes_ascend import ASCEND_FAKES  # noqa: E402

PROLOGUE = '''
import json, sys
import lazypatch
import lazypatch.registry.npu_stand_in
import lazypatch.registry.driving_sdk_api   # lazypatch's mx_driving, as activation declares it
lazypatch.enable("npu_stand_in")
'''

MODULES = ("torch_npu", "torch_npu.npu", "torch_npu.npu.amp", "torch_npu.profiler",
           "torch_npu.optim", "torch_npu.contrib", "torch_npu.contrib.transfer_to_npu")


def test_off_by_default_torch_npu_fails_as_without_lazypatch_and_declaring_imports_nothing(
        interpreter):
    result = interpreter.run_json('''
import json, sys
import lazypatch
import lazypatch.registry.npu_stand_in
heavy = sorted(name for name in ("torch", "numpy") if name in sys.modules)
try:
    import torch_npu
    outcome = "imported"
except ModuleNotFoundError as error:
    outcome = error.name
statuses = {r.name: r.status for r in lazypatch.report() if r.name.startswith("npu_stand_in")}
print(json.dumps({"heavy": heavy, "outcome": outcome, "statuses": statuses}))
''')
    assert result["heavy"] == []
    assert result["outcome"] == "torch_npu"
    expected = {f"npu_stand_in.{name}" for name in MODULES} | \
        {f"npu_stand_in.{name}.pytorch" for name in MODULES} | {"npu_stand_in.mx_driving_operators"}
    assert set(result["statuses"]) == expected
    assert set(result["statuses"].values()) == {"disabled"}


def test_torch_npu_surface_runs_on_the_cpu_and_is_undone_exactly(interpreter):
    result = interpreter.run_json(PROLOGUE + '''
import torch
originals = {"tensor_npu": hasattr(torch.Tensor, "npu"), "torch_npu": hasattr(torch, "npu")}
import torch_npu
from torch_npu.npu.amp import autocast, GradScaler
out = {"torch.npu is torch_npu.npu": torch.npu is torch_npu.npu,
       "is_available": torch.npu.is_available(), "device_count": torch.npu.device_count(),
       "current_device": torch.npu.current_device()}
torch.npu.set_device(0)
torch.npu.set_device("npu:0")
torch.npu.synchronize()
torch.npu.set_compile_mode(jit_compile=False)
torch.npu.config.allow_internal_format = False
torch_npu.npu.manual_seed_all(7)
first = torch.rand(3)
torch_npu.npu.manual_seed(7)
out["seeded"] = torch.equal(first, torch.rand(3))
out["default_generator"] = torch.npu.default_generators[0] is torch.default_generator
out["tensor_device"] = str(torch.ones(2).npu().device)
out["module_device"] = str(next(torch.nn.Linear(2, 2).npu().parameters()).device)
with torch.npu.amp.autocast(False):
    out["autocast_off"] = str((torch.ones(2, 2) @ torch.ones(2, 2)).dtype)
with autocast(dtype=torch.bfloat16):
    out["autocast_on"] = str(torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype)
out["scale"] = GradScaler(init_scale=8.0).get_scale()
with torch.npu.stream(torch.npu.Stream()):
    out["stream"] = type(torch.npu.current_stream()).__name__
out["memory"] = torch.npu.memory_allocated()
out["name"] = torch_npu.npu.get_device_name(0)
# torch_npu.optim: torch's update rules
torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
twin = torch.nn.Linear(3, 1)
twin.load_state_dict(model.state_dict())
fused = torch_npu.optim.NpuFusedAdamW(model.parameters(), lr=0.1)
plain = torch.optim.AdamW(twin.parameters(), lr=0.1)
for net, optimizer in ((model, fused), (twin, plain)):
    net(torch.ones(4, 3)).sum().backward()
    optimizer.step()
out["adamw_same"] = all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters()))
out["clip_norm"] = float(fused.clip_grad_norm_fused_(0.5)) > 0
# torch_npu.profiler: NPU activities profile the CPU here
profiler = torch_npu.profiler
with profiler.profile(activities=[profiler.ProfilerActivity.CPU, profiler.ProfilerActivity.NPU],
                      experimental_config=profiler._ExperimentalConfig(
                          profiler_level=profiler.ProfilerLevel.Level1)) as prof:
    torch.ones(8).sum()
out["profiled"] = len(prof.key_averages()) > 0
out["not_undoable"] = {r.name: r.untracked_changes for r in lazypatch.report()
                       if r.name.startswith("npu_stand_in") and not r.undoable}
lazypatch.unpatch_all()
out["after"] = {"tensor_npu": hasattr(torch.Tensor, "npu"), "torch_npu": hasattr(torch, "npu"),
                "module_npu": hasattr(torch.nn.Module, "npu"),
                "in_sys_modules": sorted(n for n in sys.modules if n.startswith("torch_npu"))}
out["originals"] = originals
print(json.dumps(out))
''')
    assert result["torch.npu is torch_npu.npu"] is True
    assert result["is_available"] is False          # honest: there is no NPU here
    assert result["device_count"] == 1 and result["current_device"] == 0
    assert result["seeded"] and result["default_generator"]
    assert result["tensor_device"] == "cpu" and result["module_device"] == "cpu"
    assert result["autocast_off"] == "torch.float32" and result["autocast_on"] == "torch.bfloat16"
    assert result["scale"] == 8.0
    assert result["stream"] == "Stream" and result["memory"] == 0
    assert result["name"] == "cpu (lazypatch NPU stand-in)"
    assert result["adamw_same"] and result["clip_norm"] and result["profiled"]
    # the submodules torch_npu imports bind themselves through their own stand-in patches
    assert result["not_undoable"] == {}
    assert result["originals"] == {"tensor_npu": False, "torch_npu": False}
    assert result["after"] == {"tensor_npu": False, "torch_npu": False, "module_npu": False,
                               "in_sys_modules": []}


ATTENTION_REFERENCE = '''
import math
def reference(q, k, v, scale, masked):
    """Softmax attention over (B, N, S, D) by explicit loops; masked[b][n][i][j] True drops."""
    B, N, Sq, D = q.shape
    Sk = k.shape[2]
    out = torch.zeros(B, N, Sq, D, dtype=torch.float64)
    for b in range(B):
        for n in range(N):
            for i in range(Sq):
                scores = [float(q[b, n, i] @ k[b, n, j]) * scale for j in range(Sk)]
                kept = [j for j in range(Sk) if not masked(b, n, i, j)]
                top = max(scores[j] for j in kept)
                weights = {j: math.exp(scores[j] - top) for j in kept}
                total = sum(weights.values())
                for j in kept:
                    out[b, n, i] += weights[j] / total * v[b, n, j]
    return out
'''


def test_npu_fusion_attention_matches_explicit_softmax_in_every_layout_and_mask(interpreter):
    result = interpreter.run_json(PROLOGUE + '''
import torch
import torch_npu
''' + ATTENTION_REFERENCE + '''
torch.manual_seed(0)
B, N, Sq, Sk, D = 2, 3, 4, 6, 5
q = torch.randn(B, N, Sq, D, dtype=torch.float64)
k = torch.randn(B, N, Sk, D, dtype=torch.float64)
v = torch.randn(B, N, Sk, D, dtype=torch.float64)
mask = torch.rand(B, 1, Sq, Sk) > 0.6
mask[..., 0] = False                     # every row keeps a key
errors = {}
def check(label, got, want):
    errors[label] = float((got - want).abs().max())
none = lambda b, n, i, j: False
layouts = {
    "BNSD": (lambda t: t, lambda t: t),
    "BSND": (lambda t: t.transpose(1, 2), lambda t: t.transpose(1, 2)),
    "BSH": (lambda t: t.transpose(1, 2).reshape(t.shape[0], t.shape[2], -1),
            lambda t: t.reshape(B, t.shape[1], N, D).transpose(1, 2)),
    "SBH": (lambda t: t.transpose(1, 2).reshape(t.shape[0], t.shape[2], -1).transpose(0, 1),
            lambda t: t.transpose(0, 1).reshape(B, t.shape[0], N, D).transpose(1, 2)),
}
for layout, (to, back) in layouts.items():
    got = torch_npu.npu_fusion_attention(to(q), to(k), to(v), N, layout, scale=0.3)
    check(layout, back(got[0]), reference(q, k, v, 0.3, none))
# the default scale is 1.0, as torch_npu's
check("default scale", torch_npu.npu_fusion_attention(q, k, v, N, "BNSD")[0],
      reference(q, k, v, 1.0, none))
# atten_mask True drops the key (sparse_mode 0 and 1)
for mode in (0, 1):
    got = torch_npu.npu_fusion_attention(q, k, v, N, "BNSD", atten_mask=mask, scale=0.5,
                                         sparse_mode=mode)[0]
    check(f"mask mode {mode}", got, reference(q, k, v, 0.5, lambda b, n, i, j: bool(mask[b, 0, i, j])))
# causal from the top left (2) and from the bottom right (3)
check("mode 2", torch_npu.npu_fusion_attention(q, k, v, N, "BNSD", sparse_mode=2,
                                               atten_mask=mask)[0],
      reference(q, k, v, 1.0, lambda b, n, i, j: j > i))
check("mode 3", torch_npu.npu_fusion_attention(q, k, v, N, "BNSD", sparse_mode=3,
                                               atten_mask=mask)[0],
      reference(q, k, v, 1.0, lambda b, n, i, j: j > i + (Sk - Sq)))
# a band of pre/next tokens (sparse_mode 0)
check("band", torch_npu.npu_fusion_attention(q, k, v, N, "BNSD", pre_tockens=1,
                                             next_tockens=2)[0],
      reference(q, k, v, 1.0, lambda b, n, i, j: j < i - 1 or j > i + 2))
outputs = torch_npu.npu_fusion_attention(q, k, v, N, "BNSD")
shapes = [list(outputs[1].shape), list(outputs[2].shape), len(outputs)]
dropped = torch_npu.npu_fusion_attention(q, k, v, N, "BNSD", keep_prob=0.5)[0]
refused = {}
for name, kwargs in (("TND", {"input_layout": "TND"}), ("padding", {"padding_mask": mask}),
                     ("band mode", {"sparse_mode": 4})):
    arguments = dict({"input_layout": "BNSD"}, **kwargs)
    try:
        torch_npu.npu_fusion_attention(q, k, v, N, **arguments)
    except NotImplementedError as error:
        refused[name] = str(error)
print(json.dumps({"errors": errors, "shapes": shapes, "refused": refused,
                  "dropout_changed": not torch.allclose(dropped, outputs[0])}))
''')
    assert all(error < 1e-12 for error in result["errors"].values()), result["errors"]
    assert len(result["errors"]) == 10
    assert result["shapes"] == [[2, 3, 4, 8], [2, 3, 4, 8], 7]
    assert result["dropout_changed"] is True
    assert set(result["refused"]) == {"TND", "padding", "band mode"}
    assert all("torch_npu.npu_fusion_attention" in text for text in result["refused"].values())


def test_rms_norm_and_rotary_mul_match_their_formulas_written_out(interpreter):
    result = interpreter.run_json(PROLOGUE + '''
import torch
import torch_npu
x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.5, -0.5, 2.0, 0.0]], dtype=torch.float64)
gamma = torch.tensor([1.0, 0.5, 2.0, -1.0], dtype=torch.float64)
y, rstd = torch_npu.npu_rms_norm(x, gamma, epsilon=1e-6)
# row 0: mean of squares (1 + 4 + 9 + 16) / 4 = 7.5
expected_rstd = [1 / (7.5 + 1e-6) ** 0.5, 1 / (1.125 + 1e-6) ** 0.5]
expected_y = [[xi * r * g for xi, g in zip(row, gamma.tolist())]
              for row, r in zip(x.tolist(), expected_rstd)]
rms = {"y": float((y - torch.tensor(expected_y, dtype=torch.float64)).abs().max()),
       "rstd": float((rstd.flatten() - torch.tensor(expected_rstd, dtype=torch.float64)).abs().max()),
       "rstd_shape": list(rstd.shape)}
v = torch.tensor([1.0, 2.0, 3.0, 4.0])
r1 = torch.tensor([0.5, 0.5, 0.5, 0.5])
r2 = torch.tensor([1.0, 2.0, 3.0, 4.0])
half = torch_npu.npu_rotary_mul(v, r1, r2).tolist()                 # rotate: [-3, -4, 1, 2]
interleave = torch_npu.npu_rotary_mul(v, r1, r2, rotary_mode="interleave").tolist()  # [-2, 1, -4, 3]
print(json.dumps({"rms": rms, "half": half, "interleave": interleave}))
''')
    assert result["rms"]["y"] < 1e-12 and result["rms"]["rstd"] < 1e-12
    assert result["rms"]["rstd_shape"] == [2, 1]
    assert result["half"] == [0.5 - 3.0, 1.0 - 8.0, 1.5 + 3.0, 2.0 + 8.0]
    assert result["interleave"] == [0.5 - 2.0, 1.0 + 2.0, 1.5 - 12.0, 2.0 + 12.0]


def test_other_operators_import_and_raise_naming_themselves_when_called_and_the_report_says_so(
        interpreter):
    result = interpreter.run_json(PROLOGUE + '''
import torch
from torch_npu import npu_confusion_transpose_d       # imports: torch_npu has hundreds
import mx_driving
from mx_driving import bev_pool_v3, SparseConv3d, multi_scale_deformable_attn
import mx_driving._C
errors = []
for call in (lambda: npu_confusion_transpose_d(torch.ones(2)),
             lambda: npu_confusion_transpose_d(torch.ones(2)),
             lambda: bev_pool_v3(torch.ones(1)), lambda: SparseConv3d(4, 8, 3),
             lambda: mx_driving._C.sigmoid_focal_loss(torch.ones(1))):
    try:
        call()
        errors.append(None)
    except NotImplementedError as error:
        errors.append(str(error))
try:
    import torch_npu
    torch_npu.not_an_operator
    missing = None
except AttributeError as error:
    missing = str(error)
notes = {r.name: r.notes for r in lazypatch.report() if r.name.startswith("npu_stand_in")}
print(json.dumps({"errors": errors, "missing": missing, "notes": notes}))
''')
    errors = result["errors"]
    assert errors[0].startswith("torch_npu.npu_confusion_transpose_d has no kernel")
    assert errors[2].startswith("mx_driving.bev_pool_v3 has no kernel")
    assert "Run on an Ascend host with mx_driving installed" in errors[2]
    assert errors[3].startswith("mx_driving.SparseConv3d has no kernel")
    assert errors[4].startswith("mx_driving._C.sigmoid_focal_loss has no kernel")
    assert "not_an_operator" in result["missing"]
    notes = "\n".join(note for notes in result["notes"].values() for note in notes)
    assert "torch_npu.npu_confusion_transpose_d: called 2 time(s) and raised" in notes
    assert "mx_driving.bev_pool_v3: called 1 time(s) and raised" in notes
    assert "mx_driving.SparseConv3d: called 1 time(s) and raised" in notes
    assert "pure-PyTorch torch_npu.npu_fusion_attention" in notes
    assert "pure-PyTorch mx_driving.multi_scale_deformable_attn" in notes


def test_driving_sdk_operators_match_references_and_pass_gradcheck(interpreter):
    result = interpreter.run_json(PROLOGUE + '''
import torch
import torch.nn.functional as F
import mx_driving
from mx_driving import (multi_scale_deformable_attn, npu_multi_scale_deformable_attn_function,
                        deformable_aggregation, scatter_max, scatter_mean, scatter_add,
                        npu_add_relu, npu_max_pool2d, npu_batch_matmul)
torch.manual_seed(0)
def msda_reference(value, shapes, locations, weights):
    """Deformable attention by grid_sample, level by level (mmcv's PyTorch formulation)."""
    bs, _, heads, dim = value.shape
    _, nq, _, levels, points, _ = locations.shape
    parts = value.split([int(h * w) for h, w in shapes], dim=1)
    grids = 2 * locations - 1
    sampled = []
    for level, (h, w) in enumerate(shapes.tolist()):
        plane = parts[level].flatten(2).transpose(1, 2).reshape(bs * heads, dim, h, w)
        grid = grids[:, :, :, level].transpose(1, 2).flatten(0, 1)
        sampled.append(F.grid_sample(plane, grid, mode="bilinear", padding_mode="zeros",
                                     align_corners=False))
    weights = weights.transpose(1, 2).reshape(bs * heads, 1, nq, levels * points)
    out = (torch.stack(sampled, dim=-2).flatten(-2) * weights).sum(-1)
    return out.view(bs, heads * dim, nq).transpose(1, 2)
shapes = torch.tensor([[3, 4], [2, 2]])
starts = torch.tensor([0, 12])
value = torch.randn(1, 16, 2, 3, dtype=torch.float64, requires_grad=True)
locations = torch.rand(1, 5, 2, 2, 3, 2, dtype=torch.float64, requires_grad=True)
weights = torch.rand(1, 5, 2, 2, 3, dtype=torch.float64, requires_grad=True)
got = multi_scale_deformable_attn(value, shapes, starts, locations, weights)
msda_error = float((got - msda_reference(value, shapes, locations, weights)).abs().max())
same_alias = torch.equal(got, npu_multi_scale_deformable_attn_function(
    value, shapes, starts, locations, weights))
gradcheck = torch.autograd.gradcheck(
    lambda v, w: multi_scale_deformable_attn(v, shapes, starts, locations.detach(), w),
    (value, weights))
def aggregation_reference(feat, shapes, starts, locations, weights):
    """Sparse4D's deformable aggregation by explicit loops: per anchor, the weighted bilinear
    samples at pixel (y * h - 0.5, x * w - 0.5), corners off the map counting zero, and a
    location not strictly inside (0, 1) contributing nothing."""
    bs, _, channels = feat.shape
    _, anchors, points, cameras, _ = locations.shape
    scales, groups = shapes.shape[1], weights.shape[-1]
    out = torch.zeros(bs, anchors, channels, dtype=feat.dtype)
    for b in range(bs):
        for a in range(anchors):
            for p in range(points):
                for cam in range(cameras):
                    x, y = locations[b, a, p, cam].tolist()
                    if not (0 < x < 1 and 0 < y < 1):
                        continue
                    for sc in range(scales):
                        h, w = shapes[cam, sc].tolist()
                        row, col = y * h - 0.5, x * w - 0.5
                        top, left = math.floor(row), math.floor(col)
                        for dr, dc in ((0, 0), (0, 1), (1, 0), (1, 1)):
                            r, c = top + dr, left + dc
                            if not (0 <= r < h and 0 <= c < w):
                                continue
                            share = (1 - abs(row - r)) * (1 - abs(col - c))
                            sample = feat[b, int(starts[cam, sc]) + r * w + c]
                            for ch in range(channels):
                                group = ch // (channels // groups)
                                out[b, a, ch] += weights[b, a, p, cam, sc, group] * share * sample[ch]
    return out
import math
shapes_da = torch.tensor([[[3, 4], [2, 2]], [[2, 3], [1, 2]]], dtype=torch.int32)
starts_da = torch.tensor([[0, 12], [16, 22]], dtype=torch.int32)
feat = torch.randn(1, 24, 4, dtype=torch.float64, requires_grad=True)
where = torch.rand(1, 3, 2, 2, 2, dtype=torch.float64) * 0.9 + 0.05
where[0, 0, 0, 1] = torch.tensor([1.2, 0.5])            # off the image: contributes nothing
where.requires_grad_()
mix = torch.rand(1, 3, 2, 2, 2, 2, dtype=torch.float64, requires_grad=True)
aggregated = deformable_aggregation(feat, shapes_da, starts_da, where, mix)
aggregation_error = float((aggregated - aggregation_reference(
    feat.detach(), shapes_da, starts_da, where.detach(), mix.detach())).abs().max())
aggregation_gradcheck = torch.autograd.gradcheck(
    lambda f, l, m: deformable_aggregation(f, shapes_da, starts_da, l, m), (feat, where, mix))
updates = torch.tensor([[2.0, 0.0], [0.0, 5.0], [3.0, 1.0], [-1.0, -2.0]], requires_grad=True)
indices = torch.tensor([0, 2, 0, 2], dtype=torch.int32)
out, argmax = scatter_max(updates, indices)
out.sum().backward()
started = torch.full((3, 2), 2.5)
out_started, argmax_started = scatter_max(updates.detach(), indices, started)
src = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
index = torch.tensor([1, 0, 1])
print(json.dumps({
    "msda": msda_error, "alias": same_alias, "gradcheck": gradcheck,
    "aggregation": aggregation_error, "aggregation_gradcheck": aggregation_gradcheck,
    "aggregation_shape": list(aggregated.shape),
    "max": out.tolist(), "argmax": argmax.tolist(), "argmax_dtype": str(argmax.dtype),
    "max_grad": updates.grad.tolist(),
    "max_started": out_started.tolist(), "argmax_started": argmax_started.tolist(),
    "mean": scatter_mean(src, index).tolist(),
    "mean_dim_size": list(scatter_mean(src, index, None, 0, 4).shape),
    "add": scatter_add(src, index).tolist(),
    "add_relu": npu_add_relu(torch.tensor([-1.0, 2.0]), torch.tensor([0.5, 0.5])).tolist(),
    "max_pool": npu_max_pool2d(torch.arange(16.0).view(1, 1, 4, 4), 3, 2, 1).flatten().tolist(),
    "matmul": npu_batch_matmul(torch.ones(2, 2, 3), torch.ones(2, 3, 1)).flatten().tolist(),
}))
''')
    assert result["msda"] < 1e-12 and result["alias"] and result["gradcheck"]
    assert result["aggregation"] < 1e-12 and result["aggregation_gradcheck"]
    assert result["aggregation_shape"] == [1, 3, 4]
    # row 0: max(2, 3) = 3 at 2, max(0, 1) = 1 at 2; row 1: nothing (0, argmax 4)
    assert result["max"] == [[3.0, 1.0], [0.0, 0.0], [0.0, 5.0]]
    assert result["argmax"] == [[2, 2], [4, 4], [1, 1]]
    assert result["argmax_dtype"] == "torch.int32"
    assert result["max_grad"] == [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]
    # started from out: out[i] = max(out[i], updates sent to i)
    assert result["max_started"] == [[3.0, 2.5], [2.5, 2.5], [2.5, 5.0]]
    assert result["argmax_started"] == [[2, 4], [4, 4], [4, 1]]
    assert result["mean"] == [[3.0, 4.0], [3.0, 4.0]]
    assert result["mean_dim_size"] == [4, 2]
    assert result["add"] == [[3.0, 4.0], [6.0, 8.0]]
    assert result["add_relu"] == [0.0, 2.5]
    assert result["max_pool"] == [5.0, 7.0, 13.0, 15.0]
    assert result["matmul"] == [3.0, 3.0, 3.0, 3.0]


def test_transfer_to_npu_turns_on_the_device_pack_and_its_undo_turns_it_off(interpreter):
    result = interpreter.run_json(PROLOGUE + '''
import torch
before = str(torch.zeros(1, device="meta").device)
from torch_npu.contrib import transfer_to_npu
on = str(torch.zeros(2, device="cuda").device)
lazypatch.unpatch("npu_stand_in.torch_npu.contrib.transfer_to_npu.pytorch")
try:
    torch.zeros(2, device="cuda")
    off = "created"
except (AssertionError, RuntimeError) as error:
    off = type(error).__name__
device = sorted({r.status for r in lazypatch.report() if "device" in r.tags})
print(json.dumps({"on": on, "off": off, "device_statuses": device}))
''')
    assert result["on"] == "cpu"
    assert result["off"] in ("AssertionError", "RuntimeError")   # CPU torch: no CUDA again
    assert "applied" not in result["device_statuses"]


def test_installed_torch_npu_and_driving_sdk_are_left_untouched_fake(interpreter):
    interpreter.write(ASCEND_FAKES)
    result = interpreter.run_json(PROLOGUE + '''
import torch_npu, mx_driving
statuses = {r.name: r.status for r in lazypatch.report()
            if r.name in ("npu_stand_in.torch_npu", "npu_stand_in.torch_npu.pytorch",
                          "npu_stand_in.mx_driving_operators")}
print(json.dumps({"statuses": statuses, "fake": torch_npu.__file__.endswith("__init__.py"),
                  "own_add_relu": mx_driving.npu_add_relu.__module__}))
''')
    assert result["statuses"] == {"npu_stand_in.torch_npu": "skipped",
                                  "npu_stand_in.torch_npu.pytorch": "skipped",
                                  "npu_stand_in.mx_driving_operators": "skipped"}
    assert result["own_add_relu"] == "mx_driving"


# DrivingSDK's model patch files on a host with neither torch_npu nor DrivingSDK, the
# stand-in on: setup ``npu_stand_in_without_torch_npu`` of tests/driving_sdk/driving_sdk_model_files.py,
# run by tests/driving_sdk/test_model_files.py with the other host setups.

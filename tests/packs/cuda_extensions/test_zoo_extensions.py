"""The autonomous-driving zoo's own compiled ops as stand-ins of the ``cuda_extensions``
pack: Sparse4D's ``deformable_aggregation_ext`` (also SparseDrive's and DiffusionDrive's)
and the BEVDet way of calling ``bev_pool_ext``.

The kernel is checked in this process against a literal loop over the CUDA kernel's
threads (``deformable_aggregation_cuda.cu`` of HorizonRobotics/Sparse4D c41df4bb,
rewritten here in Python: one iteration per thread, same arithmetic) and with
``torch.autograd.gradcheck``; how the stand-in is found and reported is checked in a
fresh interpreter on a package laid out like the projects.
"""

from __future__ import annotations

import importlib
import math
import os
import shutil

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

try:
    import lazypatch.registry.cuda_extensions as pack
except ImportError:   # running from a checkout without the installed layout
    import registry.cuda_extensions as pack

aggregation = importlib.import_module(
    pack.__name__.replace("cuda_extensions", "shared.deformable_aggregation"))
bev_pool = importlib.import_module(f"{pack.__name__}.bev_pool")

EXAMPLES = settings(max_examples=12, deadline=None, derandomize=True)


# ------------------------------------------------------------- the kernel, as a loop

def _kernel_sample(feat, height, width, channels, h_im, w_im, base):
    """``bilinear_sampling`` of the .cu: (value, corner offsets and weights)."""
    h_low, w_low = math.floor(h_im), math.floor(w_im)
    h_high, w_high = h_low + 1, w_low + 1
    lh, lw = h_im - h_low, w_im - w_low
    hh, hw = 1 - lh, 1 - lw
    corners = []
    for h, w, weight, ok in ((h_low, w_low, hh * hw, h_low >= 0 and w_low >= 0),
                             (h_low, w_high, hh * lw, h_low >= 0 and w_high <= width - 1),
                             (h_high, w_low, lh * hw, h_high <= height - 1 and w_low >= 0),
                             (h_high, w_high, lh * lw,
                              h_high <= height - 1 and w_high <= width - 1)):
        pointer = (h * width + w) * channels + base
        corners.append((pointer, weight, feat[pointer] if ok else 0.0, ok))
    return corners, (lh, lw, hh, hw)


def _threads(feat, spatial_shape, scale_start_index, location, weights):
    """Every thread of the kernel: (indices, value offset, sizes, h_im, w_im, weight
    pointer, location offset), skipping those that return early as the kernel does."""
    batch, features, channels = feat.shape
    cameras, scales = spatial_shape.shape[:2]
    anchors, points = location.shape[1:3]
    groups = weights.shape[5]
    flat_location = location.reshape(-1).tolist()
    shapes = spatial_shape.reshape(-1).tolist()
    starts = scale_start_index.reshape(-1).tolist()
    count = batch * points * channels * anchors * cameras * scales
    for thread in range(count):
        idx = thread
        weight_pointer = idx // (channels // groups)
        channel = idx % channels
        idx //= channels
        scale = idx % scales
        idx //= scales
        camera = idx % cameras
        idx //= cameras
        point = idx % points
        idx //= points
        anchor = idx % anchors
        idx //= anchors
        b = idx % batch
        anchor = b * anchors + anchor
        location_offset = ((anchor * points + point) * cameras + camera) * 2
        loc_w, loc_h = flat_location[location_offset], flat_location[location_offset + 1]
        if loc_w <= 0 or loc_w >= 1 or loc_h <= 0 or loc_h >= 1:
            continue
        camera_scale = camera * scales + scale
        base = (b * features + starts[camera_scale]) * channels + channel
        height, width = shapes[2 * camera_scale], shapes[2 * camera_scale + 1]
        yield (anchor, channel, base, height, width, loc_h * height - 0.5,
               loc_w * width - 0.5, weight_pointer, location_offset)


def loop_forward(feat, spatial_shape, scale_start_index, location, weights):
    channels = feat.shape[2]
    flat_feat, flat_weights = feat.reshape(-1).tolist(), weights.reshape(-1).tolist()
    output = [0.0] * (location.shape[0] * location.shape[1] * channels)
    for anchor, channel, base, height, width, h_im, w_im, pointer, _ in _threads(
            feat, spatial_shape, scale_start_index, location, weights):
        corners, _ = _kernel_sample(flat_feat, height, width, channels, h_im, w_im, base)
        value = sum(weight * sampled for _, weight, sampled, _ in corners)
        output[anchor * channels + channel] += value * flat_weights[pointer]
    return torch.tensor(output, dtype=feat.dtype).view(location.shape[0], location.shape[1],
                                                       channels)


def loop_backward(feat, spatial_shape, scale_start_index, location, weights, grad_output):
    """``deformable_aggregation_grad_kernel`` / ``bilinear_sampling_grad``, thread by thread."""
    channels = feat.shape[2]
    flat_feat, flat_weights = feat.reshape(-1).tolist(), weights.reshape(-1).tolist()
    flat_grad = grad_output.reshape(-1).tolist()
    grad_feat = [0.0] * feat.numel()
    grad_location = [0.0] * location.numel()
    grad_weights = [0.0] * weights.numel()
    for anchor, channel, base, height, width, h_im, w_im, pointer, offset in _threads(
            feat, spatial_shape, scale_start_index, location, weights):
        grad = flat_grad[anchor * channels + channel]
        weight = flat_weights[pointer]
        corners, (lh, lw, hh, hw) = _kernel_sample(flat_feat, height, width, channels, h_im,
                                                   w_im, base)
        top = grad * weight
        grad_h_weight = grad_w_weight = 0.0
        signs = ((-hw, -hh), (-lw, hh), (hw, -lh), (lw, lh))
        for (corner_pointer, corner_weight, value, ok), (sign_h, sign_w) in zip(corners, signs):
            if ok:
                grad_h_weight += sign_h * value
                grad_w_weight += sign_w * value
                grad_feat[corner_pointer] += corner_weight * top
        value = sum(corner_weight * sampled for _, corner_weight, sampled, _ in corners)
        grad_weights[pointer] += grad * value
        grad_location[offset] += width * grad_w_weight * top
        grad_location[offset + 1] += height * grad_h_weight * top
    return tuple(torch.tensor(values, dtype=feat.dtype).view_as(like) for values, like in (
        (grad_feat, feat), (grad_location, location), (grad_weights, weights)))


def problem(batch, cameras, shapes, anchors, points, groups, width_per_group, seed,
            dtype=torch.float64, outside=0.3):
    """Inputs laid out as Sparse4D's ``feature_maps_format`` lays them out: cameras
    major, then scales; some locations outside their image (and on its edges)."""
    g = torch.Generator().manual_seed(seed)
    scales = len(shapes)
    spatial_shape = torch.tensor([shapes] * cameras, dtype=torch.int32)
    sizes = (spatial_shape[..., 0] * spatial_shape[..., 1]).reshape(-1)
    scale_start_index = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]]).view(
        cameras, scales).int()
    channels = groups * width_per_group
    feat = torch.randn(batch, int(sizes.sum()), channels, generator=g, dtype=dtype)
    location = torch.rand(batch, anchors, points, cameras, 2, generator=g, dtype=dtype)
    away = torch.rand(location.shape, generator=g) < outside
    location = torch.where(away, location * 1.6 - 0.3, location)
    weights = torch.rand(batch, anchors, points, cameras, scales, groups, generator=g,
                         dtype=dtype)
    return feat, spatial_shape, scale_start_index, location, weights


SIZES = dict(batch=st.integers(1, 2), cameras=st.integers(1, 3),
             shapes=st.lists(st.tuples(st.integers(1, 5), st.integers(1, 5)), min_size=1,
                             max_size=3),
             anchors=st.integers(1, 3), points=st.integers(1, 3), groups=st.integers(1, 3),
             width_per_group=st.integers(1, 2), seed=st.integers(0, 999))


@EXAMPLES
@given(**SIZES)
def test_deformable_aggregation_matches_the_kernel_loop_forward_and_backward(
        batch, cameras, shapes, anchors, points, groups, width_per_group, seed):
    inputs = problem(batch, cameras, shapes, anchors, points, groups, width_per_group, seed)
    out = aggregation.deformable_aggregation_forward(*inputs)
    expected = loop_forward(*inputs)
    assert torch.allclose(out, expected, rtol=0, atol=1e-13)
    grad_output = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed),
                              dtype=out.dtype)
    # The kernel adds into the tensors it is given: start from non-zero ones.
    given_tensors = [torch.full_like(inputs[index], 0.5) for index in (0, 3, 4)]
    aggregation.deformable_aggregation_backward(*inputs, grad_output, *given_tensors)
    for ours, reference in zip(given_tensors, loop_backward(*inputs, grad_output)):
        assert torch.allclose(ours - 0.5, reference, rtol=0, atol=1e-12)


def test_locations_on_the_image_border_or_outside_contribute_nothing():
    feat, spatial_shape, scale_start_index, location, weights = problem(
        1, 1, [(3, 4)], 1, 5, 1, 2, seed=0, outside=0.0)
    location[0, 0, :, 0] = torch.tensor([[0.0, 0.5], [1.0, 0.5], [0.5, 0.0], [-0.2, 0.5],
                                         [0.5, 1.3]], dtype=location.dtype)
    out = aggregation.deformable_aggregation_forward(feat, spatial_shape, scale_start_index,
                                                     location, weights)
    assert not out.any()
    grads = [torch.zeros_like(tensor) for tensor in (feat, location, weights)]
    aggregation.deformable_aggregation_backward(feat, spatial_shape, scale_start_index,
                                                location, weights, torch.ones_like(out),
                                                *grads)
    assert not any(grad.any() for grad in grads)


class Aggregation(torch.autograd.Function):
    """The stand-in's forward and backward as Sparse4D's wrapper combines them."""

    @staticmethod
    def forward(ctx, feat, spatial_shape, scale_start_index, location, weights):
        ctx.save_for_backward(feat, spatial_shape, scale_start_index, location, weights)
        return aggregation.deformable_aggregation_forward(feat, spatial_shape,
                                                          scale_start_index, location, weights)

    @staticmethod
    def backward(ctx, grad_output):
        feat, spatial_shape, scale_start_index, location, weights = ctx.saved_tensors
        grads = [torch.zeros_like(tensor) for tensor in (feat, location, weights)]
        aggregation.deformable_aggregation_backward(feat, spatial_shape, scale_start_index,
                                                    location, weights,
                                                    grad_output.contiguous(), *grads)
        return grads[0], None, None, grads[1], grads[2]


def test_deformable_aggregation_passes_gradcheck_in_double():
    feat, spatial_shape, scale_start_index, location, weights = problem(
        2, 2, [(4, 5), (2, 3)], 3, 2, 2, 2, seed=7)
    # Keep locations away from pixel centres and image borders, where the bilinear
    # sample has a kink that finite differences straddle.
    location = (location.clamp(0.02, 0.98) * 0.96 + 0.02).detach()
    inputs = (feat.requires_grad_(), spatial_shape, scale_start_index,
              location.requires_grad_(), weights.requires_grad_())
    assert torch.autograd.gradcheck(Aggregation.apply, inputs, eps=1e-7, atol=1e-6)


def test_deformable_aggregation_refuses_mismatched_weights():
    feat, spatial_shape, scale_start_index, location, weights = problem(
        1, 2, [(2, 2)], 2, 2, 2, 2, seed=1)
    with pytest.raises(ValueError, match="weights has shape"):
        aggregation.deformable_aggregation_forward(feat, spatial_shape, scale_start_index,
                                                   location, weights[:, :, :, :1])
    with pytest.raises(ValueError, match="cannot be split"):
        aggregation.deformable_aggregation_forward(feat[..., :3], spatial_shape,
                                                   scale_start_index, location, weights)


def test_deformable_aggregation_bounds_its_memory_by_chunks(monkeypatch):
    inputs = problem(1, 2, [(4, 4), (2, 2)], 4, 3, 2, 2, seed=3, dtype=torch.float32)
    whole = aggregation.deformable_aggregation_forward(*inputs)
    grad_output = torch.randn(whole.shape, generator=torch.Generator().manual_seed(0))
    whole_grads = [torch.zeros_like(inputs[index]) for index in (0, 3, 4)]
    aggregation.deformable_aggregation_backward(*inputs, grad_output, *whole_grads)
    monkeypatch.setattr(aggregation, "CHUNK_ELEMENTS", 8)   # one entry at a time
    assert torch.allclose(aggregation.deformable_aggregation_forward(*inputs), whole,
                          atol=1e-6)
    grads = [torch.zeros_like(inputs[index]) for index in (0, 3, 4)]
    aggregation.deformable_aggregation_backward(*inputs, grad_output, *grads)
    for ours, reference in zip(grads, whole_grads):
        assert torch.allclose(ours, reference, atol=1e-5)


# ------------------------------------------------------------- BEVDet's bev_pool_ext call

def test_bev_pool_takes_grid_sizes_as_zero_dimensional_tensors_as_bevdet_passes_them():
    x = torch.arange(6.0).view(3, 2)
    geom = torch.tensor([[0, 1, 0, 0], [0, 1, 0, 0], [1, 0, 0, 1]], dtype=torch.int32)
    starts, lengths = torch.tensor([0, 2], dtype=torch.int32), torch.tensor([2, 1],
                                                                             dtype=torch.int32)
    sizes = (2, 1, 2, 2)
    tensors = tuple(torch.tensor(size) for size in sizes)
    out = bev_pool.bev_pool_forward(x, geom, lengths, starts, *tensors)
    assert torch.equal(out, bev_pool.bev_pool_forward(x, geom, lengths, starts, *sizes))
    assert out[0, 0, 0, 1].tolist() == [2.0, 4.0] and out[1, 0, 1, 0].tolist() == [4.0, 5.0]
    grad = bev_pool.bev_pool_backward(torch.ones_like(out), geom, lengths, starts, *tensors)
    assert grad.shape == x.shape and grad.sum().item() == 6.0
    with pytest.raises(TypeError, match="one-element tensor"):
        bev_pool.bev_pool_forward(x, geom, lengths, starts, torch.tensor([1, 2]), 1, 2, 2)


# ------------------------------------------------------------- found, provided, reported

#: Sparse4D's layout: projects/mmdet3d_plugin/ops holds the wrapper and, once built,
#: deformable_aggregation_ext. The wrapper here is ours, calling the module as Sparse4D's does.
SPARSE4D_FILES = {
    "projects/__init__.py": "",
    "projects/mmdet3d_plugin/__init__.py": "",
    "projects/mmdet3d_plugin/ops/__init__.py": """
        import torch
        from . import deformable_aggregation_ext

        class Aggregate(torch.autograd.Function):
            @staticmethod
            def forward(ctx, *inputs):
                ctx.save_for_backward(*inputs)
                return deformable_aggregation_ext.deformable_aggregation_forward(*inputs)

            @staticmethod
            def backward(ctx, grad_output):
                feat, shape, start, location, weights = ctx.saved_tensors
                grads = [torch.zeros_like(t) for t in (feat, location, weights)]
                deformable_aggregation_ext.deformable_aggregation_backward(
                    feat, shape, start, location, weights, grad_output.contiguous(), *grads)
                return grads[0], None, None, grads[1], grads[2]
    """,
}

RUN_SPARSE4D = '''
import json, sys
import lazypatch.auto
import lazypatch
import torch
from projects.mmdet3d_plugin.ops import *
import projects.mmdet3d_plugin.ops as ops
function = getattr(ops, "deformable_aggregation_function", None) or ops.Aggregate.apply
feat = torch.zeros(1, 6, 2, requires_grad=True)
shape = torch.tensor([[[2, 3]]], dtype=torch.int32)
start = torch.tensor([[0]], dtype=torch.int32)
location = torch.tensor([[[[[0.5, 0.25]]]]], requires_grad=True)   # pixel (0, 1): x 1, y 0
weights = torch.full((1, 1, 1, 1, 1, 1), 2.0, requires_grad=True)
with torch.no_grad():
    feat[0, 1] = torch.tensor([3.0, 4.0])
out = function(feat, shape, start, location, weights)
out.sum().backward()
ext = sys.modules["projects.mmdet3d_plugin.ops.deformable_aggregation_ext"]
record = [r for r in lazypatch.report()
          if r.name == "cuda_extensions.projects.mmdet3d_plugin.ops.deformable_aggregation_ext"][0]
print(json.dumps({"out": out.tolist(), "feat_grad": feat.grad[0, 1].tolist(),
                  "weights_grad": weights.grad.flatten().tolist(),
                  "marked": getattr(ext, "__lazypatch_pure_pytorch__", None),
                  "status": record.status, "notes": record.notes}))
'''


def _check_sparse4d_run(result):
    assert result["out"] == [[[6.0, 8.0]]]                 # 2 x the pixel's value
    assert result["feat_grad"] == [2.0, 2.0]
    assert result["weights_grad"] == [7.0]
    assert result["marked"] == "cuda_extensions"
    assert result["status"] == "applied"
    assert any("pure-PyTorch deformable_aggregation stand-in" in note and "not built" in note
               for note in result["notes"]), result["notes"]


def test_sparse4d_layout_gets_the_stand_in_and_reports_it(interpreter):
    interpreter.write(SPARSE4D_FILES)
    result = interpreter.run_json(RUN_SPARSE4D, env={"LAZYPATCH_ENABLE": "cuda_extensions"})
    _check_sparse4d_run(result)


#: An extracted HorizonRobotics/Sparse4D c41df4bb (at least projects/mmdet3d_plugin/ops):
#: its own Python wrapper runs on the stand-in, unchanged. Without it this skips.
SPARSE4D_CHECKOUT = os.environ.get("LAZYPATCH_SPARSE4D_CHECKOUT", "")


def test_sparse4d_own_wrapper_runs_unchanged_on_the_stand_in(interpreter):
    if not SPARSE4D_CHECKOUT:
        pytest.skip("set LAZYPATCH_SPARSE4D_CHECKOUT to an extracted HorizonRobotics/Sparse4D "
                    "c41df4bb (git archive c41df4bb projects/mmdet3d_plugin/ops | tar -x) to "
                    "run its own deformable_aggregation wrapper on the stand-in")
    ops = os.path.join(SPARSE4D_CHECKOUT, "projects", "mmdet3d_plugin", "ops")
    if not os.path.isfile(os.path.join(ops, "deformable_aggregation.py")):
        pytest.skip(f"{ops} has no deformable_aggregation.py")
    # Its ops package alone, unchanged (projects/mmdet3d_plugin/__init__ needs mmdet 2.x).
    interpreter.write({"projects/__init__.py": "", "projects/mmdet3d_plugin/__init__.py": ""})
    shutil.copytree(ops, interpreter.root / "projects" / "mmdet3d_plugin" / "ops",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "build"))
    result = interpreter.run_json(RUN_SPARSE4D, env={"LAZYPATCH_ENABLE": "cuda_extensions"})
    _check_sparse4d_run(result)


# ------------------------------------------------------------- flash-attn 1.x names

FLASH_ATTENTION_1 = '''
import json
import torch
from flash_attn.flash_attn_interface import (flash_attn_unpadded_func,
    flash_attn_unpadded_kvpacked_func, flash_attn_unpadded_qkvpacked_func,
    flash_attn_varlen_kvpacked_func)
from flash_attn.bert_padding import unpad_input, pad_input, index_first_axis
import lazypatch

def reference(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d) + mask) v, one sequence, heads in dim 1 of (s, h, d)."""
    scores = torch.einsum("qhd,khd->hqk", q, k) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)

g = torch.Generator().manual_seed(0)
batch, seqlen_q, seqlen_k, heads, dim = 2, 3, 5, 2, 4
q = torch.randn(batch, seqlen_q, heads, dim, generator=g, dtype=torch.float64)
kv = torch.randn(batch, seqlen_k, 2, heads, dim, generator=g, dtype=torch.float64)
results = {}

# StreamPETR's FlashAttention without a padding mask: sequences of one length each.
cu_q = torch.arange(0, (batch + 1) * seqlen_q, seqlen_q, dtype=torch.int32)
cu_k = torch.arange(0, (batch + 1) * seqlen_k, seqlen_k, dtype=torch.int32)
out = flash_attn_unpadded_kvpacked_func(q.flatten(0, 1), kv.flatten(0, 1), cu_q, cu_k,
                                        seqlen_q, seqlen_k, 0.0).view(batch, seqlen_q, heads, dim)
expected = torch.stack([reference(q[b], kv[b, :, 0], kv[b, :, 1]) for b in range(batch)])
results["kvpacked"] = torch.allclose(out, expected)

# ... and with a key padding mask, through unpad_input as StreamPETR does.
key_padding_mask = torch.tensor([[True] * 5, [True, True, False, True, False]])
rows, indices, cu_seqlens_k, max_k = unpad_input(kv.flatten(2), key_padding_mask)
results["unpadded"] = [list(rows.shape), indices.tolist(), cu_seqlens_k.tolist(), max_k]
out = flash_attn_unpadded_kvpacked_func(q.flatten(0, 1), rows.view(-1, 2, heads, dim), cu_q,
                                        cu_seqlens_k, seqlen_q, max_k, 0.0)
second = reference(q[1], kv[1, key_padding_mask[1], 0], kv[1, key_padding_mask[1], 1])
results["masked"] = torch.allclose(out.view(batch, seqlen_q, heads, dim)[1], second)
padded = pad_input(rows, indices, batch, seqlen_k)
results["round_trip"] = torch.equal(padded[key_padding_mask], kv.flatten(2)[key_padding_mask]) \\
    and not padded[~key_padding_mask].any()
results["index_first_axis"] = torch.equal(index_first_axis(kv.flatten(0, 1), indices),
                                          kv.flatten(0, 1)[indices])

# 1.x aligns causal top-left (query i sees keys 0..i); 2.x bottom-right.
one_q, one_k, one_v = q[0], kv[0, :, 0], kv[0, :, 1]
lengths_q = torch.tensor([0, seqlen_q], dtype=torch.int32)
lengths_k = torch.tensor([0, seqlen_k], dtype=torch.int32)
top_left = torch.arange(seqlen_k)[None, :] <= torch.arange(seqlen_q)[:, None]
bottom_right = torch.arange(seqlen_k)[None, :] <= torch.arange(seqlen_q)[:, None] + 2
old = flash_attn_unpadded_func(one_q, one_k, one_v, lengths_q, lengths_k, 3, 5, 0.0, causal=True)
new = flash_attn_varlen_kvpacked_func(one_q, kv[0], lengths_q, lengths_k, 3, 5, causal=True)
results["causal_1x"] = torch.allclose(old, reference(one_q, one_k, one_v, top_left))
results["causal_2x"] = torch.allclose(new, reference(one_q, one_k, one_v, bottom_right))

# qkvpacked, sequences of different lengths, with gradients.
qkv = torch.randn(7, 3, heads, dim, generator=g, dtype=torch.float64, requires_grad=True)
cu = torch.tensor([0, 3, 7], dtype=torch.int32)
out = flash_attn_unpadded_qkvpacked_func(qkv, cu, 4, 0.0)
pieces = [reference(qkv[a:b, 0], qkv[a:b, 1], qkv[a:b, 2]) for a, b in ((0, 3), (3, 7))]
results["qkvpacked"] = torch.allclose(out, torch.cat(pieces))
out.sum().backward()
results["gradient"] = bool(qkv.grad.abs().sum() > 0)
try:
    flash_attn_unpadded_func(one_q, one_k, one_v, lengths_q, lengths_k, 3, 5, 0.0,
                             return_attn_probs=True)
    results["refused"] = None
except NotImplementedError as error:
    results["refused"] = str(error)
results["records"] = {r.name: r.status for r in lazypatch.report()
                      if r.name.startswith("cuda_extensions.flash_attn")}
print(json.dumps(results))
'''


def test_flash_attention_1_names_and_bert_padding_compute_attention(interpreter):
    result = interpreter.run_json("import lazypatch.auto\n" + FLASH_ATTENTION_1,
                                  env={"LAZYPATCH_ENABLE": "cuda_extensions"})
    for check in ("kvpacked", "masked", "round_trip", "index_first_axis", "causal_1x",
                  "causal_2x", "qkvpacked", "gradient"):
        assert result[check] is True, check
    assert result["unpadded"] == [[8, 16], [0, 1, 2, 3, 4, 5, 6, 8], [0, 5, 8], 5]
    assert "return_attn_probs" in result["refused"]
    records = result["records"]
    for name in ("cuda_extensions.flash_attn.bert_padding",
                 "cuda_extensions.flash_attn.bert_padding.pytorch",
                 "cuda_extensions.flash_attn.flash_attn_interface.pytorch"):
        assert records[name] == "applied", records


# A module written as StreamPETR's FlashAttention is (its checks, then the 1.x function on
# half-precision inputs from mmcv's auto_fp16), run on the CPU with the device pack
# claiming CUDA.
CUDA_CHECKING_ATTENTION = '''
import torch
from flash_attn.flash_attn_interface import flash_attn_unpadded_kvpacked_func


def attend(q, kv):
    assert q.dtype in [torch.float16, torch.bfloat16] and kv.dtype in [torch.float16, torch.bfloat16]
    assert q.is_cuda and kv.is_cuda
    batch, seqlen_q, seqlen_k = q.shape[0], q.shape[1], kv.shape[1]
    cu_q = torch.arange(0, (batch + 1) * seqlen_q, step=seqlen_q, dtype=torch.int32, device=q.device)
    cu_k = torch.arange(0, (batch + 1) * seqlen_k, step=seqlen_k, dtype=torch.int32, device=kv.device)
    out = flash_attn_unpadded_kvpacked_func(q.flatten(0, 1), kv.flatten(0, 1), cu_q, cu_k,
                                            seqlen_q, seqlen_k, 0.0)
    return out.view(batch, seqlen_q, *out.shape[1:])
'''


def test_flash_attention_asserting_is_cuda_runs_in_half_on_the_cpu(interpreter):
    """With LAZYPATCH_CUDA_AVAILABLE=1 the module's `assert q.is_cuda` holds for the
    tensors moved with .cuda(), and the stand-in computes in half precision on the CPU,
    matching float64 attention, gradients included. Without the setting the check fails
    as it would on a machine without CUDA."""
    interpreter.write({"cudacheck.py": CUDA_CHECKING_ATTENTION})
    script = '''
        import lazypatch.auto
        import json, torch, cudacheck
        g = torch.Generator().manual_seed(0)
        q = torch.randn(2, 5, 4, 8, generator=g).cuda().half().requires_grad_()
        kv = torch.randn(2, 7, 2, 4, 8, generator=g).cuda().half().requires_grad_()
        try:
            out = cudacheck.attend(q, kv)
        except AssertionError:
            print(json.dumps({"asserted": True}))
            raise SystemExit
        scores = torch.einsum("bqhd,bkhd->bhqk", q.double(), kv[:, :, 0].double()) / 8 ** 0.5
        expected = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), kv[:, :, 1].double())
        out.float().sum().backward()
        print(json.dumps({"asserted": False, "dtype": str(out.dtype), "device": str(out.device),
                          "error": float((out.double() - expected).abs().max()),
                          "gradients": bool(q.grad.abs().sum() > 0 and kv.grad.abs().sum() > 0)}))
    '''
    enabled = {"LAZYPATCH_ENABLE": "device,cuda_extensions"}
    claimed = interpreter.run_json(script, env={**enabled, "LAZYPATCH_CUDA_AVAILABLE": "1"})
    assert claimed["asserted"] is False, claimed
    assert claimed["dtype"] == "torch.float16" and claimed["device"] == "cpu"
    assert claimed["error"] < 5e-3 and claimed["gradients"] is True
    assert interpreter.run_json(script, env=enabled) == {"asserted": True}


# ------------------------------------------------------------- MapTR GeometricKernelAttention

geometric = importlib.import_module(f"{pack.__name__}.geometric_kernel_attention")


def loop_geometric(value, spatial_shapes, level_start_index, sampling_loc, attn_weight,
                   grad_output):
    """The .cuh's forward and backward, one (batch, query, head, channel) at a time."""
    batch, _, heads, channels = value.shape
    queries, levels, points = sampling_loc.shape[1], sampling_loc.shape[3], sampling_loc.shape[4]
    out = torch.zeros(batch, queries, heads, channels, dtype=value.dtype)
    grad_value = torch.zeros_like(value)
    grad_weight = torch.zeros_like(attn_weight)
    grad = grad_output.view(batch, queries, heads, channels)
    for b in range(batch):
        for q in range(queries):
            for m in range(heads):
                for level in range(levels):
                    h, w = spatial_shapes[level].tolist()
                    start = int(level_start_index[level])
                    for p in range(points):
                        x, y = sampling_loc[b, q, m, level, p].tolist()
                        x, y = min(max(x, 0), w - 1), min(max(y, 0), h - 1)
                        row = value[b, start + y * w + x, m]
                        weight = attn_weight[b, q, m, level, p]
                        out[b, q, m] += row * weight
                        grad_value[b, start + y * w + x, m] += grad[b, q, m] * weight
                        grad_weight[b, q, m, level, p] = (grad[b, q, m] * row).sum()
    return out.view(batch, queries, heads * channels), grad_value, grad_weight


@EXAMPLES
@given(batch=st.integers(1, 2), heads=st.integers(1, 2), channels=st.integers(1, 3),
       shapes=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4)), min_size=1, max_size=3),
       queries=st.integers(1, 3), points=st.integers(1, 3), seed=st.integers(0, 999))
def test_geometric_kernel_attention_matches_the_kernel_loop(batch, heads, channels, shapes,
                                                            queries, points, seed):
    g = torch.Generator().manual_seed(seed)
    spatial_shapes = torch.tensor(shapes)
    sizes = spatial_shapes[:, 0] * spatial_shapes[:, 1]
    level_start_index = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])
    value = torch.randn(batch, int(sizes.sum()), heads, channels, generator=g,
                        dtype=torch.float64)
    # integer pixels, some outside the map (the kernel clamps them)
    sampling_loc = torch.randint(-2, 7, (batch, queries, heads, len(shapes), points, 2),
                                 generator=g)
    attn_weight = torch.rand(batch, queries, heads, len(shapes), points, generator=g,
                             dtype=torch.float64)
    grad_output = torch.randn(batch, queries, heads * channels, generator=g, dtype=torch.float64)
    out = geometric.geometric_kernel_attn_cuda_forward(value, spatial_shapes, level_start_index,
                                                       sampling_loc, attn_weight, 64)
    grad_value, grad_weight = geometric.geometric_kernel_attn_cuda_backward(
        value, spatial_shapes, level_start_index, sampling_loc, attn_weight, grad_output, 64)
    expected = loop_geometric(value, spatial_shapes, level_start_index, sampling_loc,
                              attn_weight, grad_output)
    for ours, reference in zip((out, grad_value, grad_weight), expected):
        assert torch.allclose(ours, reference, rtol=0, atol=1e-12)


def test_geometric_kernel_attention_refuses_a_step_that_does_not_divide_the_batch():
    value = torch.zeros(3, 4, 1, 2)
    with pytest.raises(ValueError, match="im2col_step"):
        geometric.geometric_kernel_attn_cuda_forward(
            value, torch.tensor([[2, 2]]), torch.tensor([0]),
            torch.zeros(3, 1, 1, 1, 1, 2, dtype=torch.long), torch.ones(3, 1, 1, 1, 1), 2)


#: MapTR's layout: the plugin imports the top-level compiled module at import time.
MAPTR_FILES = {
    "maptr_plugin/__init__.py": """
        import torch
        import GeometricKernelAttention as GKA

        class Attend(torch.autograd.Function):
            @staticmethod
            def forward(ctx, value, shapes, starts, locations, weights, step):
                ctx.save_for_backward(value, shapes, starts, locations, weights)
                ctx.step = step
                return GKA.geometric_kernel_attn_cuda_forward(value, shapes, starts, locations,
                                                              weights, step)

            @staticmethod
            def backward(ctx, grad_output):
                grad_value, grad_weights = GKA.geometric_kernel_attn_cuda_backward(
                    *ctx.saved_tensors, grad_output.contiguous(), ctx.step)
                return grad_value, None, None, None, grad_weights, None
    """,
}

RUN_MAPTR = '''
import json, sys
import lazypatch.auto
import lazypatch
import torch
import maptr_plugin
value = torch.arange(8.0).view(1, 4, 1, 2).requires_grad_()     # one 2x2 map, 2 channels
weights = torch.tensor([[[[[0.5, 2.0]]]]], requires_grad=True)
locations = torch.tensor([[[[[[1, 0], [5, 5]]]]]])                # pixel (x1, y0); clamped (1, 1)
out = maptr_plugin.Attend.apply(value, torch.tensor([[2, 2]]), torch.tensor([0]), locations,
                                weights, 64)
out.sum().backward()
records = {r.name: [r.status, r.notes] for r in lazypatch.report()
           if r.name.startswith("cuda_extensions.GeometricKernelAttention")}
print(json.dumps({"out": out.tolist(), "weights_grad": weights.grad.flatten().tolist(),
                  "module": sys.modules["GeometricKernelAttention"].__all__,
                  "records": records}))
'''


def test_a_top_level_extension_maptr_imports_gets_the_stand_in(interpreter):
    interpreter.write(MAPTR_FILES)
    result = interpreter.run_json(RUN_MAPTR, env={"LAZYPATCH_ENABLE": "cuda_extensions"})
    assert result["out"] == [[[0.5 * 2 + 2.0 * 6, 0.5 * 3 + 2.0 * 7]]]
    assert result["weights_grad"] == [2 + 3, 6 + 7]
    assert result["module"] == ["geometric_kernel_attn_cuda_backward",
                                "geometric_kernel_attn_cuda_forward"]
    records = result["records"]
    assert records["cuda_extensions.GeometricKernelAttention"][0] == "applied"
    status, notes = records["cuda_extensions.GeometricKernelAttention.pytorch"]
    assert status == "applied" and "geometric_kernel_attention stand-in" in notes[0], notes


def test_an_installed_top_level_extension_is_used_untouched(interpreter):
    interpreter.write({**MAPTR_FILES, "GeometricKernelAttention.py": """
        def geometric_kernel_attn_cuda_forward(*args):
            return "installed"
    """})
    result = interpreter.run_json('''
import json
import lazypatch.auto
import lazypatch
import GeometricKernelAttention
print(json.dumps({"call": GeometricKernelAttention.geometric_kernel_attn_cuda_forward(),
                  "records": {r.name: r.status for r in lazypatch.report()
                              if r.name.startswith("cuda_extensions.GeometricKernelAttention")}}))
''', env={"LAZYPATCH_ENABLE": "cuda_extensions"})
    assert result["call"] == "installed"
    assert set(result["records"].values()) == {"skipped"}, result["records"]


def test_declare_extension_points_a_top_level_name_at_a_stand_in_module_kind(interpreter):
    result = interpreter.run_json('''
import json, sys
import lazypatch
from lazypatch.registry.cuda_extensions import declare_extension
name = declare_extension("vendored_scatter", like="torch_scatter",
                         functions={"version": "json:dumps"})
import torch
import vendored_scatter
out = vendored_scatter.scatter_sum(torch.tensor([1.0, 2.0, 4.0]), torch.tensor([0, 1, 0]))
version = vendored_scatter.version(1)
statuses = {r.name: r.status for r in lazypatch.report() if r.name.startswith(name)}
lazypatch.unpatch_all()
print(json.dumps({"name": name, "out": out.tolist(), "version": version,
                  "statuses": statuses, "left": "vendored_scatter" in sys.modules}))
''')
    assert result["name"] == "cuda_extensions.vendored_scatter"
    assert result["out"] == [5.0, 2.0] and result["version"] == "1"
    assert result["statuses"] == {"cuda_extensions.vendored_scatter": "applied",
                                  "cuda_extensions.vendored_scatter.pytorch": "applied"}
    assert result["left"] is False


#: An extracted hustvl/MapTR fa420a2e (at least projects/mmdet3d_plugin/maptr/modules/ops/
#: geometric_kernel_attn): its own autograd function runs on the stand-in, unchanged.
MAPTR_CHECKOUT = os.environ.get("LAZYPATCH_MAPTR_CHECKOUT", "")


def test_maptr_own_geometric_kernel_attention_function_runs_unchanged(interpreter):
    if not MAPTR_CHECKOUT:
        pytest.skip("set LAZYPATCH_MAPTR_CHECKOUT to an extracted hustvl/MapTR fa420a2e (git "
                    "archive fa420a2e projects/mmdet3d_plugin/maptr/modules/ops | tar -x) to "
                    "run its own GeometricKernelAttentionFunc on the stand-in")
    ops = os.path.join(MAPTR_CHECKOUT, "projects", "mmdet3d_plugin", "maptr", "modules", "ops",
                       "geometric_kernel_attn")
    if not os.path.isdir(os.path.join(ops, "function")):
        pytest.skip(f"{ops} has no function/ package")
    shutil.copytree(ops, interpreter.root / "geometric_kernel_attn",
                    ignore=shutil.ignore_patterns("*.so", "build", "src", "setup.py", "test.py"))
    interpreter.write({"maptr_plugin/__init__.py": """
        from geometric_kernel_attn import GeometricKernelAttentionFunc as Attend
    """})
    result = interpreter.run_json(RUN_MAPTR, env={"LAZYPATCH_ENABLE": "cuda_extensions"})
    assert result["out"] == [[[0.5 * 2 + 2.0 * 6, 0.5 * 3 + 2.0 * 7]]]
    assert result["weights_grad"] == [2 + 3, 6 + 7]


# ------------------------------------------------------------- Deformable-DETR MultiScaleDeformableAttention

multi_scale = importlib.import_module(f"{pack.__name__}.multi_scale_deformable_attention")


def grid_sample_attention(value, spatial_shapes, sampling_loc, attn_weight):
    """Deformable-DETR's own reference (``ms_deform_attn_core_pytorch``): each level
    sampled with ``grid_sample`` (bilinear, zeros outside, align_corners=False)."""
    batch, _, heads, channels = value.shape
    _, queries, _, levels, points, _ = sampling_loc.shape
    per_level = value.split([int(h) * int(w) for h, w in spatial_shapes.tolist()], dim=1)
    samples = []
    for level, (height, width) in enumerate(spatial_shapes.tolist()):
        maps = per_level[level].flatten(2).transpose(1, 2).reshape(batch * heads, channels,
                                                                 height, width)
        grid = (2 * sampling_loc[:, :, :, level] - 1).transpose(1, 2).flatten(0, 1)
        samples.append(torch.nn.functional.grid_sample(maps, grid, mode="bilinear",
                                                       padding_mode="zeros",
                                                       align_corners=False))
    weights = attn_weight.transpose(1, 2).reshape(batch * heads, 1, queries, levels * points)
    out = (torch.stack(samples, dim=-2).flatten(-2) * weights).sum(-1)
    return out.view(batch, heads * channels, queries).transpose(1, 2)


@EXAMPLES
@given(batch=st.integers(1, 2), heads=st.integers(1, 2), channels=st.integers(1, 3),
       shapes=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4)), min_size=1, max_size=3),
       queries=st.integers(1, 3), points=st.integers(1, 3), seed=st.integers(0, 999))
def test_multi_scale_deformable_attention_matches_grid_sample_values_and_gradients(
        batch, heads, channels, shapes, queries, points, seed):
    g = torch.Generator().manual_seed(seed)
    spatial_shapes = torch.tensor(shapes)
    sizes = spatial_shapes[:, 0] * spatial_shapes[:, 1]
    level_start_index = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])
    value = torch.randn(batch, int(sizes.sum()), heads, channels, generator=g,
                        dtype=torch.float64)
    # normalised locations, some outside [0, 1] (zero padding there)
    sampling_loc = torch.rand(batch, queries, heads, len(shapes), points, 2, generator=g,
                              dtype=torch.float64) * 1.4 - 0.2
    attn_weight = torch.rand(batch, queries, heads, len(shapes), points, generator=g,
                             dtype=torch.float64)
    grad_output = torch.randn(batch, queries, heads * channels, generator=g, dtype=torch.float64)
    out = multi_scale.ms_deform_attn_forward(value, spatial_shapes, level_start_index,
                                             sampling_loc, attn_weight, 64)
    grads = multi_scale.ms_deform_attn_backward(value, spatial_shapes, level_start_index,
                                                sampling_loc, attn_weight, grad_output, 64)
    inputs = [tensor.clone().requires_grad_() for tensor in (value, sampling_loc, attn_weight)]
    reference = grid_sample_attention(inputs[0], spatial_shapes, inputs[1], inputs[2])
    expected_grads = torch.autograd.grad(reference, inputs, grad_output)
    assert out.shape == (batch, queries, heads * channels) and not out.requires_grad
    assert torch.allclose(out, reference.detach(), rtol=0, atol=1e-12)
    assert isinstance(grads, list) and len(grads) == 3
    for ours, expected in zip(grads, expected_grads):
        assert ours.shape == expected.shape and ours.dtype == expected.dtype
        assert torch.allclose(ours, expected, rtol=0, atol=1e-10)


def test_multi_scale_deformable_attention_refuses_a_step_that_does_not_divide_the_batch():
    value = torch.zeros(3, 4, 1, 2)
    with pytest.raises(ValueError, match="im2col_step"):
        multi_scale.ms_deform_attn_forward(value, torch.tensor([[2, 2]]), torch.tensor([0]),
                                           torch.zeros(3, 1, 1, 1, 1, 2),
                                           torch.ones(3, 1, 1, 1, 1), 2)


#: Deformable-DETR's layout (PanoOcc's, DINO's): ops/functions imports the top-level
#: compiled module at import time, and its autograd Function calls it.
DEFORMABLE_DETR_FILES = {
    "ops/__init__.py": "",
    "ops/functions/__init__.py": "from .ms_deform_attn_func import MSDeformAttnFunction\n",
    "ops/functions/ms_deform_attn_func.py": """
        import torch
        import MultiScaleDeformableAttention as MSDA

        class MSDeformAttnFunction(torch.autograd.Function):
            @staticmethod
            def forward(ctx, value, shapes, starts, locations, weights, step):
                ctx.step = step
                ctx.save_for_backward(value, shapes, starts, locations, weights)
                return MSDA.ms_deform_attn_forward(value, shapes, starts, locations, weights,
                                                   step)

            @staticmethod
            def backward(ctx, grad_output):
                grad_value, grad_locations, grad_weights = MSDA.ms_deform_attn_backward(
                    *ctx.saved_tensors, grad_output, ctx.step)
                return grad_value, None, None, grad_locations, grad_weights, None
    """,
}

RUN_DEFORMABLE_DETR = '''
import json, sys
import lazypatch.auto
import lazypatch
import torch
from ops.functions import MSDeformAttnFunction
value = torch.arange(8.0).view(1, 4, 1, 2).requires_grad_()   # one 2x2 map, 2 channels
weights = torch.tensor([[[[[0.5, 2.0]]]]], requires_grad=True)
# pixel centres (0, 0) and (1, 1): normalised (x + 0.5) / 2, (y + 0.5) / 2
locations = torch.tensor([[[[[[0.25, 0.25], [0.75, 0.75]]]]]], requires_grad=True)
out = MSDeformAttnFunction.apply(value, torch.tensor([[2, 2]]), torch.tensor([0]), locations,
                                 weights, 64)
out.sum().backward()
records = {r.name: [r.status, r.notes] for r in lazypatch.report()
           if r.name.startswith("cuda_extensions.MultiScaleDeformableAttention")}
result = {"out": out.tolist(), "weights_grad": weights.grad.flatten().tolist(),
          "value_grad": value.grad.flatten().tolist(),
          "locations_grad_shape": list(locations.grad.shape),
          "module": sys.modules["MultiScaleDeformableAttention"].__all__, "records": records}
lazypatch.unpatch_all()
result["left"] = "MultiScaleDeformableAttention" in sys.modules
print(json.dumps(result))
'''


def test_deformable_detr_top_level_extension_gets_the_stand_in_and_its_undo(interpreter):
    interpreter.write(DEFORMABLE_DETR_FILES)
    result = interpreter.run_json(RUN_DEFORMABLE_DETR,
                                  env={"LAZYPATCH_ENABLE": "cuda_extensions"})
    assert result["out"] == [[[0.5 * 0 + 2.0 * 6, 0.5 * 1 + 2.0 * 7]]]
    assert result["weights_grad"] == [0 + 1, 6 + 7]
    assert result["value_grad"] == [0.5, 0.5, 0, 0, 0, 0, 2.0, 2.0]
    assert result["locations_grad_shape"] == [1, 1, 1, 1, 2, 2]
    assert result["module"] == ["ms_deform_attn_backward", "ms_deform_attn_forward"]
    records = result["records"]
    assert records["cuda_extensions.MultiScaleDeformableAttention"][0] == "applied"
    status, notes = records["cuda_extensions.MultiScaleDeformableAttention.pytorch"]
    assert status == "applied" and "multi_scale_deformable_attention stand-in" in notes[0], notes
    assert result["left"] is False


def test_deformable_detr_extension_is_not_provided_without_the_pack(interpreter):
    interpreter.write(DEFORMABLE_DETR_FILES)
    result = interpreter.run_json('''
import json
import lazypatch.auto
try:
    import MultiScaleDeformableAttention
    print(json.dumps({"error": None}))
except ModuleNotFoundError as error:
    print(json.dumps({"error": error.name}))
''')
    assert result["error"] == "MultiScaleDeformableAttention"


def test_an_installed_multi_scale_deformable_attention_is_used_untouched(interpreter):
    interpreter.write({"MultiScaleDeformableAttention.py": """
        def ms_deform_attn_forward(*args):
            return "installed"
    """})
    result = interpreter.run_json('''
import json
import lazypatch.auto
import lazypatch
import MultiScaleDeformableAttention as MSDA
print(json.dumps({"call": MSDA.ms_deform_attn_forward(),
                  "backward": hasattr(MSDA, "ms_deform_attn_backward"),
                  "records": {r.name: r.status for r in lazypatch.report()
                              if r.name.startswith("cuda_extensions.MultiScale")}}))
''', env={"LAZYPATCH_ENABLE": "cuda_extensions"})
    assert result["call"] == "installed" and result["backward"] is False
    assert set(result["records"].values()) == {"skipped"}, result["records"]


#: An extracted PanoOcc checkout (DrivingSDK's model_examples/PanoOcc runs one): its own
#: MSDeformAttnFunction runs unchanged on the stand-in, against its own grid_sample core.
PANOOCC_CHECKOUT = os.environ.get("LAZYPATCH_PANOOCC_CHECKOUT", "")


def test_panoocc_own_ms_deform_attn_function_runs_unchanged(interpreter):
    if not PANOOCC_CHECKOUT:
        pytest.skip("set LAZYPATCH_PANOOCC_CHECKOUT to an extracted PanoOcc checkout (the "
                    "folder holding ops/functions/ms_deform_attn_func.py) to run its own "
                    "MSDeformAttnFunction on the stand-in")
    ops = os.path.join(PANOOCC_CHECKOUT, "ops", "functions")
    if not os.path.isfile(os.path.join(ops, "ms_deform_attn_func.py")):
        pytest.skip(f"{ops} has no ms_deform_attn_func.py")
    shutil.copytree(ops, interpreter.root / "panoocc_functions")
    result = interpreter.run_json('''
import json, warnings
warnings.simplefilter("ignore", FutureWarning)   # its torch.cuda.amp decorators
import lazypatch.auto
import torch
from panoocc_functions.ms_deform_attn_func import MSDeformAttnFunction, ms_deform_attn_core_pytorch
g = torch.Generator().manual_seed(0)
shapes = torch.tensor([[4, 5], [2, 3]])
starts = torch.tensor([0, 20])
value = torch.randn(2, 26, 2, 4, generator=g, dtype=torch.float64, requires_grad=True)
locations = torch.rand(2, 3, 2, 2, 4, 2, generator=g, dtype=torch.float64, requires_grad=True)
weights = torch.rand(2, 3, 2, 2, 4, generator=g, dtype=torch.float64, requires_grad=True)
ours = MSDeformAttnFunction.apply(value, shapes, starts, locations, weights, 64)
grads = torch.autograd.grad(ours.sum(), (value, locations, weights))
theirs = ms_deform_attn_core_pytorch(value, shapes, locations, weights)
expected = torch.autograd.grad(theirs.sum(), (value, locations, weights))
print(json.dumps({"out": (ours - theirs).abs().max().item(),
                  "grads": [(a - b).abs().max().item() for a, b in zip(grads, expected)]}))
''', env={"LAZYPATCH_ENABLE": "cuda_extensions"})
    assert result["out"] < 1e-12 and max(result["grads"]) < 1e-10, result

"""The DrivingSDK default patches added to the Ascend pack: mmdet's ``PseudoSampler``
without ``unique``, mmdet3d's nuScenes ``output_to_nusc_box``, and gradient
accumulation / FP16 training with fused clipping (mmengine's ``OptimWrapper`` and
``AmpOptimWrapper``, mmcv 1.x's FP16 optimizer hooks).

Real torch / mmengine / mmdet / mmdet3d, FAKE ``torch_npu`` and ``mx_driving``
(``fakes_ascend.py``; NPUs cannot exist here), fresh interpreters. "Same results"
means: the same computation patched and again after ``unpatch_all()``, compared
exactly, and the identity of everything touched restored.
"""

from __future__ import annotations

from packs.ascend.fakes_ascend import ASCEND_FAKES, PROLOGUE, TORCH_NPU_INIT

# The fake torch_npu, plus the torch.npu.amp.GradScaler the real one registers
# (a CPU GradScaler here, counting how often it is built).
FAKES_WITH_AMP = dict(ASCEND_FAKES)
FAKES_WITH_AMP["torch_npu/__init__.py"] = TORCH_NPU_INIT + '''

class GradScaler(torch.amp.GradScaler):
    def __init__(self, *args, **kwargs):
        CALLS["GradScaler"] += 1
        super().__init__("cpu", *args, **kwargs)


npu.amp = types.SimpleNamespace(GradScaler=GradScaler)
'''


def test_ascend_fake_pseudo_sampler_same_sampling_without_unique(interpreter):
    interpreter.write(ASCEND_FAKES)
    result = interpreter.run_json(PROLOGUE + '''
import torch
from mmengine.structures import InstanceData
from mmdet.models.task_modules.assigners import AssignResult
from mmdet.models.task_modules.samplers import PseudoSampler
from mmdet.models.task_modules.samplers import pseudo_sampler as module
original = lazypatch.original(PseudoSampler, "sample")
pinned = PseudoSampler.__dict__["sample"].__wrapped__ is original   # derived from the installed one
unique_calls = []
plain_unique = torch.Tensor.unique
def counting_unique(self, *args, **kwargs):
    unique_calls.append(1)
    return plain_unique(self, *args, **kwargs)
torch.Tensor.unique = counting_unique

def sample():
    torch.manual_seed(0)
    gt_inds = torch.randint(-1, 4, (40,))
    assign = AssignResult(num_gts=3, gt_inds=gt_inds, max_overlaps=torch.rand(40),
                          labels=torch.randint(0, 5, (40,)))
    priors = InstanceData(priors=torch.rand(40, 4))
    gts = InstanceData(bboxes=torch.rand(3, 4), labels=torch.tensor([1, 2, 3]))
    result = PseudoSampler().sample(assign, priors, gts)
    return {name: getattr(result, name) for name in
            ("pos_inds", "neg_inds", "pos_priors", "neg_priors", "pos_assigned_gt_inds",
             "pos_gt_bboxes", "pos_gt_labels", "pos_is_gt", "avg_factor")}

patched = sample()
patched_unique_calls = len(unique_calls)
status = ascend_report()["ascend.pseudo_sampler"].status
lazypatch.unpatch_all()
plain = sample()
print(json.dumps({
    "status": status, "pinned": pinned, "patched_unique_calls": patched_unique_calls,
    "plain_unique_calls": len(unique_calls) - patched_unique_calls,
    "same": {name: (torch.equal(value, plain[name]) and value.dtype == plain[name].dtype)
             if isinstance(value, torch.Tensor) else value == plain[name]
             for name, value in patched.items()},
    "restored": PseudoSampler.__dict__["sample"] is original,
}))
''')
    assert result["status"] == "applied" and result["pinned"]
    assert result["patched_unique_calls"] == 0 and result["plain_unique_calls"] == 2
    assert all(result["same"].values()), result["same"]
    assert result["restored"]


NUSCENES_SCENARIO = '''
import numpy as np
import torch
from mmdet3d.structures import (CameraInstance3DBoxes, DepthInstance3DBoxes,
                                LiDARInstance3DBoxes)
import mmdet3d.evaluation.metrics.nuscenes_metric as metric

original = lazypatch.original(metric, "output_to_nusc_box")
# The installed function, edited: it wraps it and runs in its module.
edited_from_installed = (metric.output_to_nusc_box.__wrapped__ is original
                         and metric.output_to_nusc_box.__globals__ is vars(metric))

def detections():
    torch.manual_seed(0)
    boxes = torch.randn(30, 9)
    boxes[:, 3:6] = boxes[:, 3:6].abs() + 0.5          # sizes
    boxes[:, 6] = torch.rand(30) * 12 - 6                # yaw beyond +-pi too
    common = dict(scores_3d=torch.rand(30), labels_3d=torch.randint(0, 10, (30,)))
    return [dict(bboxes_3d=LiDARInstance3DBoxes(boxes, box_dim=9), **common),
            dict(bboxes_3d=CameraInstance3DBoxes(boxes.clone(), box_dim=9),
                 attr_labels=torch.randint(0, 9, (30,)), **common),
            dict(bboxes_3d=LiDARInstance3DBoxes(torch.zeros(0, 9), box_dim=9),
                 scores_3d=torch.zeros(0), labels_3d=torch.zeros(0, dtype=torch.long))]

def convert():
    out = []
    for detection in detections():
        boxes, attrs = metric.output_to_nusc_box(detection)
        out.append(([[box.center, box.wlh, box.orientation.q, box.velocity,
                      np.array([box.label, box.score])] for box in boxes], attrs))
    try:
        metric.output_to_nusc_box(dict(bboxes_3d=DepthInstance3DBoxes(torch.randn(2, 7)),
                                       scores_3d=torch.rand(2),
                                       labels_3d=torch.zeros(2, dtype=torch.long)))
        error = None
    except NotImplementedError as caught:
        error = str(caught)
    return out, error

patched, patched_error = convert()
record = ascend_report()["ascend.nuscenes_metric"]
replaced = metric.output_to_nusc_box is not original
lazypatch.unpatch_all()
plain, plain_error = convert()

def same_boxes(a, b):
    return len(a) == len(b) and all(
        len(x) == len(y) and all(np.array_equal(u, v) and u.dtype == v.dtype
                                 for u, v in zip(x, y)) for x, y in zip(a, b))

print(json.dumps({
    "status": record.status, "reason": record.reason,
    "edited_from_installed": edited_from_installed, "replaced": replaced,
    "counts": [len(boxes) for boxes, _ in patched],
    "same": [same_boxes(p[0], q[0]) and ((p[1] is None and q[1] is None) or
                                         np.array_equal(p[1], q[1]))
             for p, q in zip(patched, plain)],
    "errors": patched_error == plain_error and "Do not support convert" in patched_error,
    "restored": metric.output_to_nusc_box is original,
}))
'''


def test_ascend_fake_nuscenes_boxes_are_the_same_numbers(interpreter):
    interpreter.write(ASCEND_FAKES)
    result = interpreter.run_json(PROLOGUE + NUSCENES_SCENARIO)
    assert result["status"] == "applied", result["reason"]
    assert result["edited_from_installed"] and result["replaced"]
    assert result["counts"] == [30, 30, 0]
    assert result["same"] == [True, True, True]
    assert result["errors"] and result["restored"]


# output_to_nusc_box of other (imagined) mmdet3d releases, in a module of their own so
# that their source can be read, as an installed release's can.
NUSCENES_VARIANTS = {"nuscenes_variants.py": '''
"""output_to_nusc_box written differently from the installed mmdet3d's."""
import numpy as np
import pyquaternion
from nuscenes.utils.data_classes import Box as NuScenesBox


def output_to_nusc_box(detection):
    # mmdet3d 0.x's conventions: the yaw turned by -pi/2, no width/length swap.
    box3d = detection["bboxes_3d"]
    scores = detection["scores_3d"].numpy()
    labels = detection["labels_3d"].numpy()
    box_gravity_center = box3d.gravity_center.numpy()
    box_dims = box3d.dims.numpy()
    box_yaw = -box3d.yaw.numpy() - np.pi / 2
    box_list = []
    for i in range(len(box3d)):
        quat = pyquaternion.Quaternion(axis=[0, 0, 1], radians=box_yaw[i])
        velocity = (*box3d.tensor[i, 7:9], 0.0)
        box_list.append(NuScenesBox(box_gravity_center[i], box_dims[i], quat,
                                    label=labels[i], score=scores[i], velocity=velocity))
    return box_list, None


def output_to_nusc_box_prebuilt(detection):
    # Rotations given as quaternions already: nothing the patch rewrites.
    return [NuScenesBox(center, size, pyquaternion.Quaternion(rotation))
            for center, size, rotation in detection["boxes"]], None
'''}


def test_ascend_fake_nuscenes_edit_fits_another_release_and_keeps_its_conventions(interpreter):
    interpreter.write(ASCEND_FAKES)
    interpreter.write(NUSCENES_VARIANTS)
    result = interpreter.run_json(PROLOGUE + '''
import numpy as np
import torch
import nuscenes_variants as variants
from mmdet3d.structures import LiDARInstance3DBoxes

@lazypatch.when_imported("mmdet3d.evaluation.metrics.nuscenes_metric",
                         name="test.other_release", priority=-10)
def other_release(module, patch):
    patch.setattr(module, "output_to_nusc_box", variants.output_to_nusc_box)

# Held in a list: the patch rebinds module-level copies of the function it replaces
# (variants.output_to_nusc_box too), as it does for every `from x import y` copy.
variant_function = [variants.output_to_nusc_box]

import mmdet3d.evaluation.metrics.nuscenes_metric as metric
record = ascend_report()["ascend.nuscenes_metric"]
torch.manual_seed(0)
boxes = torch.randn(30, 9)
boxes[:, 3:6] = boxes[:, 3:6].abs() + 0.5
detection = dict(bboxes_3d=LiDARInstance3DBoxes(boxes, box_dim=9), scores_3d=torch.rand(30),
                 labels_3d=torch.randint(0, 10, (30,)))

def convert():
    return [[box.center, box.wlh, box.orientation.q, box.velocity]
            for box in metric.output_to_nusc_box(detection)[0]]

patched = convert()
edited_from = metric.output_to_nusc_box.__wrapped__ is variant_function[0]
lazypatch.unpatch("ascend.nuscenes_metric")
variant = convert()
print(json.dumps({
    "status": record.status, "reason": record.reason, "edited_from": edited_from,
    "same": len(patched) == len(variant) == 30 and all(
        np.array_equal(u, v) and u.dtype == v.dtype
        for x, y in zip(patched, variant) for u, v in zip(x, y)),
    "variant_back": metric.output_to_nusc_box is variants.output_to_nusc_box
    is variant_function[0],
}))
''')
    assert result["status"] == "applied", result["reason"]
    assert result["edited_from"]
    # Its yaw convention and dimension order are kept: the variant's own numbers.
    assert result["same"] and result["variant_back"]


def test_ascend_copies_skip_when_upstream_source_differs(interpreter):
    interpreter.write(ASCEND_FAKES)
    interpreter.write(NUSCENES_VARIANTS)
    result = interpreter.run_json(PROLOGUE + '''
import nuscenes_variants

@lazypatch.when_imported("mmdet.models.task_modules.samplers.pseudo_sampler",
                         name="test.earlier_edit", priority=-10)
def earlier_edit(module, patch):
    # Stands for a different mmdet release on the method the copy replaces.
    patch.setattr(module.PseudoSampler, "sample", lambda self, *args, **kwargs: "other")

@lazypatch.when_imported("mmdet3d.evaluation.metrics.nuscenes_metric",
                         name="test.earlier_edit3d", priority=-10)
def earlier_edit3d(module, patch):
    patch.setattr(module, "output_to_nusc_box", nuscenes_variants.output_to_nusc_box_prebuilt)

from mmdet.models.task_modules.samplers import PseudoSampler
import mmdet3d.evaluation.metrics.nuscenes_metric as metric
records = ascend_report()
print(json.dumps({name: [records[name].status, records[name].reason]
                  for name in ("ascend.pseudo_sampler", "ascend.nuscenes_metric")}
                 | {"kept": [PseudoSampler().sample(None, None, None) == "other",
                             metric.output_to_nusc_box
                             is nuscenes_variants.output_to_nusc_box_prebuilt]}))
''')
    status, reason = result["ascend.nuscenes_metric"]
    assert status == "skipped" and reason == (
        "output_to_nusc_box left as it is: its source has neither Quaternion(axis=<x, y or z "
        "axis>, radians=...) nor per-box <boxes>.tensor[i, ...] reads in a loop over i: "
        "nothing to rewrite")
    # The sampler's change is derived from the installed source: a method without the
    # idiom (another release, another patch's) has nothing to remove.
    status, reason = result["ascend.pseudo_sampler"]
    assert status == "skipped" and "PseudoSampler.sample left as it is" in reason
    assert result["kept"] == [True, True]


OPTIM_WRAPPER_SCENARIO = '''
import torch
import torch_npu
from torch_npu.optim import NpuFusedSGD
from mmengine.logging import MessageHub
from mmengine.optim import AmpOptimWrapper, OptimWrapper
import mmengine.optim.optimizer.amp_optimizer_wrapper as amp_module

# No accelerator here: AmpOptimWrapper asserts one, and picks CUDA's GradScaler
# when mmengine's import-time probe found no NPU. Stand in for the NPU machine.
amp_module.is_cuda_available = lambda: True
amp_module.GradScaler = torch_npu.npu.amp.GradScaler

def train(wrapper_class, **options):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    wrapper = wrapper_class(optimizer=NpuFusedSGD(model.parameters(), lr=0.5),
                            clip_grad=dict(max_norm=0.1), **options)
    for step in range(6):
        wrapper.update_params((model(torch.randn(8, 4)) ** 2).sum())
    norms = [MessageHub.get_current_instance().get_scalar("train/grad_norm").current()]
    scale = wrapper.loss_scaler.get_scale() if hasattr(wrapper, "loss_scaler") else None
    return [p.detach().clone() for p in model.parameters()], [float(n) for n in norms], scale

cases = {"accumulate": (OptimWrapper, dict(accumulative_counts=3)),
         "fp16": (AmpOptimWrapper, dict(loss_scale="dynamic")),
         "fp16_accumulate": (AmpOptimWrapper, dict(loss_scale=512.0, accumulative_counts=2))}

def run_all():
    counts, out = {}, {}
    for name, (wrapper_class, options) in cases.items():
        before = torch_npu.CALLS["clip_grad_norm_fused_"]
        out[name] = train(wrapper_class, **options)
        counts[name] = torch_npu.CALLS["clip_grad_norm_fused_"] - before
    return counts, out

patched_counts, patched = run_all()
status = ascend_report()["ascend.optim_wrapper_clip"].status
lazypatch.unpatch_all()
plain_counts, plain = run_all()
print(json.dumps({
    "status": status, "patched_counts": patched_counts, "plain_counts": plain_counts,
    "scalers": torch_npu.CALLS["GradScaler"],
    "scales": {name: value[2] for name, value in patched.items()},
    "same": {name: patched[name][1] == plain[name][1] and patched[name][2] == plain[name][2]
             and all(torch.equal(a, b) for a, b in zip(patched[name][0], plain[name][0]))
             for name in cases},
}))
'''


def test_ascend_fake_optim_wrapper_accumulation_and_fp16_fused_clip_same_numbers(interpreter):
    interpreter.write(FAKES_WITH_AMP)
    result = interpreter.run_json(PROLOGUE + OPTIM_WRAPPER_SCENARIO)
    assert result["status"] == "applied"
    # One fused clipping per optimizer step: 6 iterations / 3, 6 / 1, 6 / 2.
    assert result["patched_counts"] == {"accumulate": 2, "fp16": 6, "fp16_accumulate": 3}
    assert result["plain_counts"] == {"accumulate": 0, "fp16": 0, "fp16_accumulate": 0}
    assert result["scalers"] == 4          # two AmpOptimWrappers per run, two runs
    assert result["scales"]["fp16"] == 65536.0 and result["scales"]["fp16_accumulate"] == 512.0
    assert all(result["same"].values()), result["same"]


# mmcv 1.x cannot be installed beside mmcv 2.2 here, so the FP16 patch is applied to
# a module written by the test with the shape of mmcv 1.7's
# ``mmcv/runner/hooks/optimizer.py`` (GradScaler bound from torch.cuda.amp at import,
# hooks building their scaler from that global).
MMCV1_FP16_HOOKS = {"legacy_fp16_hooks.py": '''
from torch.cuda.amp import GradScaler
from torch.nn.utils import clip_grad


class OptimizerHook:
    def __init__(self, grad_clip=None):
        self.grad_clip = grad_clip

    def clip_grads(self, params):
        params = list(filter(lambda p: p.requires_grad and p.grad is not None, params))
        if len(params) > 0:
            return clip_grad.clip_grad_norm_(params, **self.grad_clip)


class GradientCumulativeOptimizerHook(OptimizerHook):
    def __init__(self, cumulative_iters=1, **kwargs):
        super().__init__(**kwargs)
        self.cumulative_iters = cumulative_iters


class Fp16OptimizerHook(OptimizerHook):
    def __init__(self, grad_clip=None, loss_scale=512.0):
        self.grad_clip = grad_clip
        self._scale_update_param = None
        if loss_scale == "dynamic":
            self.loss_scaler = GradScaler()
        else:
            self._scale_update_param = loss_scale
            self.loss_scaler = GradScaler(init_scale=loss_scale)

    def after_train_iter(self, runner):
        runner.model.zero_grad()
        runner.optimizer.zero_grad()
        self.loss_scaler.scale(runner.outputs["loss"]).backward()
        self.loss_scaler.unscale_(runner.optimizer)
        runner.grad_norm = self.clip_grads(runner.model.parameters())
        self.loss_scaler.step(runner.optimizer)
        self.loss_scaler.update(self._scale_update_param)


class GradientCumulativeFp16OptimizerHook(GradientCumulativeOptimizerHook, Fp16OptimizerHook):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)

    def after_train_iter(self, runner):
        loss = runner.outputs["loss"] / self.cumulative_iters
        self.loss_scaler.scale(loss).backward()
        if (runner.iter + 1) % self.cumulative_iters == 0:
            self.loss_scaler.unscale_(runner.optimizer)
            runner.grad_norm = self.clip_grads(runner.model.parameters())
            self.loss_scaler.step(runner.optimizer)
            self.loss_scaler.update(self._scale_update_param)
            runner.model.zero_grad()
            runner.optimizer.zero_grad()
'''}


def test_ascend_fake_mmcv1_fp16_hooks_scale_with_the_npu_grad_scaler(interpreter):
    interpreter.write(FAKES_WITH_AMP)
    interpreter.write(MMCV1_FP16_HOOKS)
    result = interpreter.run_json('''
import json, types, warnings
import torch
import lazypatch
from lazypatch.registry.ascend.mmcv1 import patch_fp16_grad_scaler
from lazypatch.registry.ascend.optim import patch_mmcv1_optimizer_hooks
lazypatch.register(patch_fp16_grad_scaler, "legacy_fp16_hooks", name="test.fp16")
lazypatch.register(patch_mmcv1_optimizer_hooks, "legacy_fp16_hooks", name="test.hooks")
warnings.simplefilter("ignore")         # torch.cuda.amp's deprecation / no-CUDA warnings
import legacy_fp16_hooks as hooks, torch_npu
from torch_npu.optim import NpuFusedSGD
from torch.cuda.amp import GradScaler as cuda_scaler
replaced = hooks.GradScaler is torch.npu.amp.GradScaler

def train(make_hook):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    runner = types.SimpleNamespace(model=model, optimizer=NpuFusedSGD(model.parameters(), lr=0.5))
    hook = make_hook()
    for iteration in range(4):
        runner.iter = iteration
        runner.outputs = {"loss": (model(torch.randn(3, 4)) ** 2).sum()}
        hook.after_train_iter(runner)
    return ([float(runner.grad_norm)] + [p.detach().clone() for p in model.parameters()],
            type(hook.loss_scaler).__module__, hook.loss_scaler.is_enabled())

makers = [lambda: hooks.Fp16OptimizerHook(grad_clip=dict(max_norm=0.1)),
          lambda: hooks.Fp16OptimizerHook(grad_clip=dict(max_norm=0.1), loss_scale="dynamic"),
          lambda: hooks.GradientCumulativeFp16OptimizerHook(cumulative_iters=2,
                                                            grad_clip=dict(max_norm=0.1))]
patched = [train(make) for make in makers]
fused_calls = torch_npu.CALLS["clip_grad_norm_fused_"]
lazypatch.unpatch_all()
plain = [train(make) for make in makers]

def same(a, b):
    return a[0] == b[0] and all(torch.equal(x, y) for x, y in zip(a[1:], b[1:]))

print(json.dumps({
    "patched_scalers": [[module, enabled] for _, module, enabled in patched],
    "plain_scalers": [[module, enabled] for _, module, enabled in plain],
    "fused_calls": fused_calls,
    "same": [same(p[0], q[0]) for p, q in zip(patched, plain)],
    "replaced": replaced, "restored": hooks.GradScaler is cuda_scaler,
}))
''')
    # Patched: torch_npu's scaler, enabled; unpatched: CUDA's, which disables itself here.
    assert result["patched_scalers"] == [["torch_npu", True]] * 3
    assert all(enabled is False for _, enabled in result["plain_scalers"])
    assert result["fused_calls"] == 4 + 4 + 2     # one per optimizer step
    # Power-of-two scales cancel exactly: the same training as without scaling.
    assert result["same"] == [True, True, True]
    assert result["replaced"] and result["restored"]


def test_ascend_fake_drivingsdk_names_turn_the_new_defaults_off_in_the_compat_builder(interpreter):
    interpreter.write(ASCEND_FAKES)
    result = interpreter.run_json('''
import json
import lazypatch
from lazypatch.driving_sdk.mx_driving import default_patcher_builder
with default_patcher_builder.disable_patches("pseudo_sampler", "nuscenes_metric").build():
    from mmdet.models.task_modules.samplers import PseudoSampler
    import mmdet3d.evaluation.metrics.nuscenes_metric as metric
    inside = {"sampler": PseudoSampler.sample.__module__,
              "nuscenes": metric.output_to_nusc_box.__module__,
              "statuses": {r.name: r.status for r in lazypatch.report()
                           if r.name in ("ascend.pseudo_sampler", "ascend.nuscenes_metric",
                                         "ascend.optim_wrapper_clip")}}
print(json.dumps(inside))
''')
    assert result["sampler"] == "mmdet.models.task_modules.samplers.pseudo_sampler"
    assert result["nuscenes"] == "mmdet3d.evaluation.metrics.nuscenes_metric"
    assert result["statuses"]["ascend.pseudo_sampler"] != "applied"
    assert result["statuses"]["ascend.nuscenes_metric"] != "applied"
    assert result["statuses"]["ascend.optim_wrapper_clip"] == "applied"

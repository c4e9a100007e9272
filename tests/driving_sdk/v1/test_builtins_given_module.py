"""DrivingSDK 1.0's built-in functions given a module object that is not the imported
module (a stand-in holding the names they use): the changes are made on that object at
once, as 1.0 made them. The optimizer hook family trains a real torch model; the loop
functions drive real loops, with a FAKE ``torch_npu.profiler`` (no NPU here) recording
what it is asked. Each scenario in a fresh interpreter."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.stack

# A stand-in for mmcv 1.x's ``mmcv.runner.hooks.optimizer``: its Hook base (mmcv 1.x's
# iteration helpers), a real registry, torch's BatchNorm base and GradScaler, and an
# optimizer whose FAKE fused clipping (torch_npu's NpuFused* optimizers have the method)
# counts its calls and clips as torch does.
MMCV1_STAND_IN = '''
import json, logging, types
import torch
from mmengine.registry import Registry
from lazypatch.driving_sdk.v2.builtin_patches import optimizer_hooks


class Hook:
    def every_n_iters(self, runner, n):
        return (runner.iter + 1) % n == 0 if n > 0 else False

    def is_last_iter(self, runner):
        return runner.iter + 1 == runner.max_iters


FUSED_CALLS = []


class FakeFusedSGD(torch.optim.SGD):
    def clip_grad_norm_fused_(self, max_norm, norm_type=2):
        FUSED_CALLS.append(max_norm)
        params = [p for group in self.param_groups for p in group["params"]]
        return torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)


optimizer_module = types.SimpleNamespace(
    HOOKS=Registry("hook"), Hook=Hook, logging=logging,
    _BatchNorm=torch.nn.modules.batchnorm._BatchNorm, GradScaler=torch.cuda.amp.GradScaler,
    wrap_fp16_model=lambda model: WRAPPED.append(model), Tensor=torch.Tensor, nn=torch.nn)
WRAPPED = []
mmcv = types.ModuleType("mmcv_stand_in")
mmcv.__name__ = "mmcv"
mmcv.runner = types.SimpleNamespace(hooks=types.SimpleNamespace(optimizer=optimizer_module))


class Logs:
    def __init__(self):
        self.records = []

    def log(self, level, msg):
        self.records.append((level, msg))

    def warning(self, msg):
        self.records.append((logging.WARNING, msg))


class LogBuffer:
    def __init__(self):
        self.norms = []

    def update(self, values, count):
        self.norms.append(values["grad_norm"])


def make_runner(seed=0, max_iters=3):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 1))
    return types.SimpleNamespace(
        model=model, optimizer=FakeFusedSGD(model.parameters(), lr=0.5), iter=0,
        max_iters=max_iters, logger=Logs(), log_buffer=LogBuffer(), meta={}, outputs={})


def batch(index):
    generator = torch.Generator().manual_seed(100 + index)
    return torch.randn(5, 4, generator=generator), torch.randn(5, 1, generator=generator)


def loss_of(model, index):
    inputs, targets = batch(index)
    return torch.nn.functional.mse_loss(model(inputs), targets)
'''


def test_optimizer_hooks_on_a_given_mmcv_train_as_mmcv_1x_with_fake_fused_clipping(interpreter):
    result = interpreter.run_json(MMCV1_STAND_IN + '''
optimizer_hooks(mmcv, {})
HOOKS = optimizer_module.HOOKS
names = sorted(HOOKS.module_dict)
OptimizerHook = HOOKS.get("OptimizerHook")
Cumulative = HOOKS.get("GradientCumulativeOptimizerHook")
Fp16 = HOOKS.get("Fp16OptimizerHook")
CumulativeFp16 = HOOKS.get("GradientCumulativeFp16OptimizerHook")

# OptimizerHook: zero, backward, clip (fused), step; the same numbers as by hand.
runner = make_runner()
hook = OptimizerHook(grad_clip=dict(max_norm=0.05))
for index in range(3):
    runner.iter = index
    runner.outputs = {"loss": loss_of(runner.model, index), "num_samples": 5}
    hook.after_train_iter(runner)
by_hand = make_runner()
for index in range(3):
    by_hand.optimizer.zero_grad()
    loss_of(by_hand.model, index).backward()
    torch.nn.utils.clip_grad_norm_(list(by_hand.model.parameters()), 0.05)
    by_hand.optimizer.step()
plain_same = all(torch.equal(a, b) for a, b in zip(runner.model.parameters(),
                                                   by_hand.model.parameters()))
plain_fused = len(FUSED_CALLS)

# Gradients accumulated over 2 iterations of 3: steps after the 2nd and the 3rd (the
# last, alone: its loss divided by the 1 iteration left).
runner = make_runner()
hook = Cumulative(cumulative_iters=2)
for index in range(3):
    runner.iter = index
    runner.outputs = {"loss": loss_of(runner.model, index), "num_samples": 5}
    hook.after_train_iter(runner)
by_hand = make_runner()
(loss_of(by_hand.model, 0) / 2 + loss_of(by_hand.model, 1) / 2).backward()
by_hand.optimizer.step()
by_hand.optimizer.zero_grad()
loss_of(by_hand.model, 2).backward()
by_hand.optimizer.step()
cumulative_same = all(torch.allclose(a, b, atol=1e-6) for a, b in zip(
    runner.model.parameters(), by_hand.model.parameters()))

errors = []
for bad in ("2", 0):
    try:
        Cumulative(cumulative_iters=bad)
    except ValueError as error:
        errors.append(str(error))
try:
    Fp16(loss_scale="sometimes")
except ValueError as error:
    errors.append(str(error))

# FP16: the scaler's state kept in runner.meta and read back by before_run.
fp16 = Fp16(loss_scale=dict(init_scale=256.0))
fp16_runner = make_runner()
fp16_runner.outputs = {"loss": loss_of(fp16_runner.model, 0), "num_samples": 5}
fp16.after_train_iter(fp16_runner)
fp16_meta = sorted(fp16_runner.meta.get("fp16", {}))
fp16.before_run(fp16_runner)
both = CumulativeFp16(cumulative_iters=2, loss_scale="dynamic")

# A parameter the loss does not use is reported.
runner = make_runner()
unused = torch.nn.Parameter(torch.zeros(2))
runner.model.register_parameter("unused", unused)
OptimizerHook(detect_anomalous_params=True).detect_anomalous_parameters(
    loss_of(runner.model, 0), runner)
print(json.dumps({
    "names": names, "plain_same": plain_same, "plain_fused": plain_fused,
    "cumulative_same": cumulative_same, "errors": errors,
    "fp16_meta": fp16_meta,
    "wrapped": len(WRAPPED), "both_bases": [c.__name__ for c in type(both).__mro__[1:4]],
    "anomalous": [msg.split(" ")[0] for level, msg in runner.logger.records
                  if level == logging.ERROR],
}))
''')
    assert result["names"] == ["Fp16OptimizerHook", "GradientCumulativeFp16OptimizerHook",
                               "GradientCumulativeOptimizerHook", "OptimizerHook"]
    assert result["plain_same"] and result["plain_fused"] == 3
    assert result["cumulative_same"]
    assert len(result["errors"]) == 3 and "positive int" in result["errors"][0]
    assert "loss_scale must be" in result["errors"][2]
    assert result["fp16_meta"] == ["loss_scaler"] and result["wrapped"] == 1
    assert result["both_bases"] == ["GradientCumulativeOptimizerHook", "Fp16OptimizerHook",
                                    "OptimizerHook"]
    assert result["anomalous"] == ["unused"]


# FAKE torch_npu: no NPU here. Its profiler records what it is asked and counts steps.
FAKE_TORCH_NPU_PROFILER = {
    "torch_npu/__init__.py": "from . import profiler\n",
    "torch_npu/profiler.py": '''
import enum

CALLS = []


class ProfilerActivity(enum.Enum):
    CPU = "CPU"
    NPU = "NPU"


class ProfilerLevel(enum.Enum):
    Level0 = 0
    Level1 = 1
    Level2 = 2


def schedule(**arguments):
    return ("schedule", arguments)


def tensorboard_trace_handler(path):
    return ("trace handler", path)


class _ExperimentalConfig:
    def __init__(self, profiler_level):
        self.profiler_level = profiler_level


class profile:
    def __init__(self, **arguments):
        self.arguments = arguments
        self.steps = 0
        CALLS.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.exited = True

    def step(self):
        self.steps += 1
''',
}

LOOPS_STAND_IN = '''
import json, types
import torch_npu
from lazypatch.driving_sdk.v1.loops import (epoch_runner, epoch_train_loop, iter_runner,
                                                 iter_train_loop)

HOOKS_CALLED = []


class Runner:
    def __init__(self):
        self.model = types.SimpleNamespace(train=lambda mode=True: None)
        self.val_loop = None

    def call_hook(self, name):
        HOOKS_CALLED.append(name)


class EpochBasedTrainLoop:
    def __init__(self, batches, start=0):
        self.runner, self.dataloader, self._iter, self._epoch = Runner(), range(batches), start, 0
        self.seen = []

    def run_epoch(self):
        raise AssertionError("the loop was not replaced")

    def run_iter(self, index, data_batch):
        self.seen.append(data_batch)
        self._iter += 1


class IterBasedTrainLoop:
    def __init__(self, max_iters):
        self.runner, self._iter, self._max_iters = Runner(), 0, max_iters
        self.stop_training, self.val_begin, self.val_interval = False, 1, 2
        self.dataloader_iterator = iter(range(100))
        self.runner.val_loop = types.SimpleNamespace(run=lambda: VALIDATIONS.append(self._iter))

    def run(self):
        raise AssertionError("the loop was not replaced")

    def run_iter(self, data_batch):
        self._iter += 1

    def _decide_current_val_interval(self):
        pass


VALIDATIONS = []
LOGGED = []
mmengine = types.ModuleType("mmengine_stand_in")
mmengine.__name__ = "mmengine"
mmengine.runner = types.SimpleNamespace(EpochBasedTrainLoop=EpochBasedTrainLoop,
                                        IterBasedTrainLoop=IterBasedTrainLoop)
mmengine.logging = types.SimpleNamespace(print_log=lambda *a, **k: LOGGED.append(a[0]))


class IterBasedRunner:
    def __init__(self, max_iters):
        self._iter, self._max_iters, self.ran = 0, max_iters, []
        self.logger = types.SimpleNamespace(info=lambda *args: None)

    @property
    def iter(self):
        return self._iter

    def call_hook(self, name):
        HOOKS_CALLED.append(name)

    def run(self, data_loaders, workflow, max_iters=None, **kwargs):
        raise AssertionError("the loop was not replaced")

    def train(self, loader, **kwargs):
        self.ran.append(("train", next(loader)))
        self._iter += 1

    def val(self, loader, **kwargs):
        self.ran.append(("val", next(loader)))


mmcv = types.ModuleType("mmcv_stand_in")
mmcv.__name__ = "mmcv"
mmcv.runner = types.SimpleNamespace(IterBasedRunner=IterBasedRunner,
                                    iter_based_runner=types.SimpleNamespace(IterLoader=iter))
'''


def test_loop_functions_on_a_given_module_profile_with_fake_torch_npu_and_brake(interpreter):
    interpreter.write(FAKE_TORCH_NPU_PROFILER)
    result = interpreter.run_json(LOOPS_STAND_IN + '''
epoch_train_loop(mmengine, {"enable_profiler": True, "profiling_path": "traces",
                            "profiling_level": 1, "step_ctrl": (2, 3, 4, 5, 6),
                            "enable_brake": True, "brake_step": 3})
loop = EpochBasedTrainLoop(batches=5)
try:
    loop.run_epoch()
    braked = None
except SystemExit as stop:
    braked = stop.code
session = torch_npu.profiler.CALLS[-1]
arguments = dict(session.arguments)
profiled = {
    "activities": [activity.name for activity in arguments.pop("activities")],
    "schedule": arguments.pop("schedule"), "level": arguments.pop(
        "experimental_config").profiler_level.name,
    "trace": arguments.pop("on_trace_ready"), "rest": arguments,
    "steps": session.steps, "exited": getattr(session, "exited", False)}

# A run resumed past the brake step stops after its next iteration.
resumed = EpochBasedTrainLoop(batches=5, start=10)
try:
    resumed.run_epoch()
except SystemExit:
    pass

iter_train_loop(mmengine, {"enable_profiler": True, "profiling_path": "traces",
                           "profiling_level": 0, "enable_brake": False})
iteration_loop = IterBasedTrainLoop(max_iters=5)
iteration_loop._iter = 2                      # resumed: two batches already trained
iteration_loop.run()

iter_runner(mmcv, {"enable_profiler": False, "enable_brake": False})
runner = IterBasedRunner(max_iters=3)
runner.run([iter(range(10, 20)), iter(range(20, 30))], [("train", 2), ("val", 1)])
bad = IterBasedRunner(max_iters=3)
try:
    bad.run([iter(range(3))], [("test", 1)])
except ValueError as error:
    bad_mode = str(error)
missing = types.ModuleType("mmcv_without_runner_loop")
missing.__name__ = "mmcv"
missing.runner = types.SimpleNamespace(EpochBasedRunner=object)
try:
    epoch_runner(missing, {"enable_profiler": False, "enable_brake": False})
except AttributeError as error:
    missing_error = str(error)
print(json.dumps({
    "braked": braked, "iterations": loop._iter, "seen": loop.seen, "profiled": profiled,
    "resumed": resumed._iter,
    "iteration_loop": [iteration_loop._iter, torch_npu.profiler.CALLS[-1].steps,
                       [a.name for a in torch_npu.profiler.CALLS[-1].arguments["activities"]],
                       VALIDATIONS, LOGGED],
    "runner": runner.ran, "bad_mode": bad_mode, "missing": missing_error,
}))
''')
    assert result["braked"] == 0 and result["iterations"] == 3 and result["seen"] == [0, 1, 2]
    assert result["profiled"] == {
        "activities": ["NPU", "CPU"], "level": "Level1", "trace": ["trace handler", "traces"],
        "schedule": ["schedule", {"wait": 2, "warmup": 3, "active": 4, "repeat": 5,
                                  "skip_first": 6}],
        "rest": {"with_stack": False, "record_shapes": True, "profile_memory": False},
        "steps": 3, "exited": True}
    assert result["resumed"] == 11
    # Resumed at 2 of 5: two batches skipped, three trained and profiled at level 0;
    # validation at iterations 4 (interval) and 5 (the last).
    assert result["iteration_loop"] == [5, 3, ["NPU"], [4, 5],
                                        ["Advance dataloader 2 steps to skip data that has "
                                         "already been trained"]]
    # The workflow in turn (train twice, validate once) until 3 training iterations: the
    # second round's training stops at the limit, its validation still runs.
    assert result["runner"] == [["train", 10], ["train", 11], ["val", 20], ["train", 12],
                                ["val", 21]]
    assert result["bad_mode"] == 'runner has no method named "test" to run a workflow'
    assert result["missing"] == "mmcv.runner.EpochBasedRunner.train not found"


def test_loop_functions_on_the_imported_module_turn_the_training_pack_on(interpreter):
    result = interpreter.run_json('''
import json
import mmengine
import mmengine.runner
from lazypatch.driving_sdk.v1.loops import iter_train_loop
from lazypatch.registry.training.settings import STATE
loop_before = mmengine.runner.IterBasedTrainLoop.__dict__["run"]
iter_train_loop(mmengine, {"enable_profiler": True, "profiling_path": "traces",
                           "profiling_level": 2, "enable_brake": True, "brake_step": 7})
print(json.dumps({"brake": STATE.brake_step, "level": STATE.profile.level,
                  "path": STATE.profile.path,
                  "loop_kept": mmengine.runner.IterBasedTrainLoop.__dict__["run"] is loop_before}))
''')
    # The pack hooks the imported loop; the loop itself is mmengine's own.
    assert result == {"brake": 7, "level": 2, "path": "traces", "loop_kept": True}


def test_a_patch_function_importing_the_registry_package_leaves_register_module_as_it_was(
        interpreter):
    # A 1.0 patch function that imports the registry's package itself and registers into
    # it (VAD's `@ATTENTION.register_module(force=True)` inside its function): the registry
    # class is copied when that import returns, while lazypatch routes registrations
    # through the patch; that routing must not read as the patch's change (left by undo).
    interpreter.write({"userpkg/__init__.py": "VALUE = 1\n"})
    result = interpreter.run_json("""
        import importlib, json, logging, warnings
        warnings.simplefilter("ignore")
        logging.disable(logging.CRITICAL)
        registry_module = importlib.import_module("mmengine.registry.registry")
        own = registry_module.Registry._register_module
        import lazypatch.auto
        from lazypatch.driving_sdk.mx_driving import Patch, PatcherBuilder

        def flash_attention(userpkg, options):
            from mmengine.registry import MODELS   # a package the globals do not name

            @MODELS.register_module(name="LazypatchFlashAttention", force=True)
            class NpuFlashAttention:
                pass
            userpkg.VALUE = 2

        def registered():
            return "LazypatchFlashAttention" in registry_module_tables()

        def registry_module_tables():
            return importlib.import_module("mmengine.registry").MODELS.module_dict

        builder = PatcherBuilder().add_module_patch("userpkg", Patch(flash_attention))
        with builder.build():
            import userpkg
            during = [userpkg.VALUE, registered()]
        print(json.dumps({
            "during": during, "after": [userpkg.VALUE, registered()],
            "register_module_is_the_registry_own": registry_module.Registry._register_module is own}))
    """)
    assert result == {"during": [2, True], "after": [1, False],
                      "register_module_is_the_registry_own": True}

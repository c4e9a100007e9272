"""lazypatch.driving_sdk.mx_driving: the DrivingSDK patcher API, lazy and exactly undone.

The custom-patch example of the DrivingSDK documentation (seed 002) runs
with only its import line changed, against real packages written to disk.
"""

from __future__ import annotations

import pytest

# The seed's example package: root_module.xxx.yyy.zzz.gpu_affine_func, imported by
# the root package's __init__ (as the original patcher also required).
ROOT_MODULE = {
    "root_module/__init__.py": "from . import xxx\n",
    "root_module/xxx/__init__.py": "from . import yyy\n",
    "root_module/xxx/yyy/__init__.py": "from . import zzz\n",
    "root_module/xxx/yyy/zzz.py": """
        def gpu_affine_func(x):
            return ("gpu", x)

        class Block:
            def forward(self, x):
                return ("gpu-block", x)
    """,
}

# Seed 002, "自定义Patch": only the import line differs from the original.
PATCH_PY = """
from types import ModuleType
from typing import Dict

from lazypatch.driving_sdk.mx_driving import Patch, Patcher, PatcherBuilder  # was mx_driving.patcher


def my_patch(root_module: ModuleType, options: Dict):
    if hasattr(root_module.xxx.yyy.zzz, "gpu_affine_func"):
        def npu_affine_func(x):
            return ("npu", x, options["option1"])

        # Monkey Patching i.e. dynamic attribute replacement
        root_module.xxx.yyy.zzz.gpu_affine_func = npu_affine_func
        root_module.xxx.yyy.zzz.Block.forward = lambda self, x: ("npu-block", x)
    else:
        raise AttributeError("root_module.xxx.yyy.zzz.gpu_affine_func not found")


my_patcher_builder = PatcherBuilder()
my_patcher_builder.add_module_patch('root_module', Patch(my_patch, {'option1': 'xxx', 'option2': 'yyy'}))
"""

TRAIN_PY = """
import json, sys
from patch import my_patcher_builder

def main():
    from root_module.xxx.yyy import zzz
    return [zzz.gpu_affine_func(1), zzz.Block().forward(2)]

if __name__ == '__main__':
    built = my_patcher_builder.build()
    imported_at_enter = None
    with built as patcher:
        imported_at_enter = "root_module" in sys.modules
        inside = main()
    from root_module.xxx.yyy import zzz
    import lazypatch
    record = [r for r in lazypatch.report() if r.name.startswith("mx_driving.root_module")][0]
    print(json.dumps({"imported_at_enter": imported_at_enter, "inside": inside,
                      "after": [zzz.gpu_affine_func(1), zzz.Block().forward(2)],
                      "status": record.status, "changes": len(record.changes) if record.changes else 0,
                      "history": record.history}))
"""


def test_seed_custom_patch_example_runs_lazily_and_is_undone(interpreter):
    interpreter.write({**ROOT_MODULE, "patch.py": PATCH_PY, "train.py": TRAIN_PY})
    result = interpreter.run_json(open(interpreter.root / "train.py").read())
    assert result["imported_at_enter"] is False                # build()/with import nothing
    assert result["inside"] == [["npu", 1, "xxx"], ["npu-block", 2]]
    assert result["after"] == [["gpu", 1], ["gpu-block", 2]]   # plain assignments undone
    assert result["status"] == "reverted"
    assert any(entry.startswith("applied") for entry in result["history"])


def test_already_imported_module_is_patched_at_enter_and_restored_by_identity(interpreter):
    interpreter.write({**ROOT_MODULE, "patch.py": PATCH_PY})
    result = interpreter.run_json("""
        import json
        from root_module.xxx.yyy import zzz
        original_function, original_forward = zzz.gpu_affine_func, zzz.Block.__dict__["forward"]
        from patch import my_patcher_builder
        with my_patcher_builder.build():
            inside = zzz.gpu_affine_func(3)
        print(json.dumps([inside, zzz.gpu_affine_func is original_function,
                          zzz.Block.__dict__["forward"] is original_forward]))
    """)
    assert result == [["npu", 3, "xxx"], True, True]


def test_failing_patch_is_rolled_back_and_blacklist_and_quiet_warning(interpreter):
    interpreter.write({**ROOT_MODULE})
    result = interpreter.run_json("""
        import json, warnings
        from lazypatch.driving_sdk.mx_driving import Patch, PatcherBuilder

        def half_done(root_module, options):
            root_module.xxx.yyy.zzz.gpu_affine_func = None     # changed, then it fails
            raise AttributeError("target renamed in this version")

        def quiet_failure(root_module, options):
            raise RuntimeError("quiet")

        def never(root_module, options):
            root_module.never_applied = True

        builder = (PatcherBuilder()
                   .add_module_patch("root_module", Patch(half_done),
                                     Patch(quiet_failure, patch_failure_warning=False),
                                     Patch(never))
                   .disable_patches("never"))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with builder.build():
                import root_module
                value = root_module.xxx.yyy.zzz.gpu_affine_func(5)   # rolled back: original
                applied_never = hasattr(root_module, "never_applied")
        import lazypatch
        statuses = {r.name: r.status for r in lazypatch.report()}
        print(json.dumps([value, applied_never, statuses,
                          sorted(str(w.message)[:60] for w in caught
                                 if issubclass(w.category, lazypatch.PatchFailedWarning))]))
    """)
    value, applied_never, statuses, failure_warnings = result
    assert value == ["gpu", 5]
    assert applied_never is False
    # DrivingSDK's rule: a patch function meeting a missing attribute (another version of
    # its target) is skipped, not failed; its partial change is rolled back all the same.
    assert statuses["mx_driving.root_module.half_done"] == "skipped"
    assert statuses["mx_driving.root_module.quiet_failure"] == "failed"
    assert "mx_driving.root_module.never" not in statuses
    assert failure_warnings == []      # the one failure asked to stay quiet


def test_default_builder_selects_builtin_packs_lazily(interpreter):
    result = interpreter.run_json("""
        import json, sys
        import lazypatch
        from lazypatch.driving_sdk.mx_driving import default_patcher_builder
        with default_patcher_builder.disable_patches("function_aliases").build():
            eager = [name for name in ("numpy", "torch", "mmcv", "mmdet") if name in sys.modules]
            import numpy
            inside = {r.name: r.status for r in lazypatch.report() if "numpy" in r.tags}
            has_alias = hasattr(numpy, "float")
            optional = {r.name: r.enabled for r in lazypatch.report() if "optional" in r.tags}
        after = {r.name: r.status for r in lazypatch.report() if "numpy" in r.tags}
        print(json.dumps([eager, inside, has_alias, after, hasattr(numpy, "float"), optional]))
    """)
    eager, inside, has_alias, after, alias_after, optional = result
    # optional patches (off by default) are not part of DrivingSDK's default set
    assert optional == {"ascend.resnet_fp16": False}
    assert eager == []
    assert inside["numpy_compat.type_aliases"] == "applied"
    assert inside["numpy_compat.function_aliases"] != "applied"   # disabled by name
    assert has_alias is True
    # the packs were loaded by the patcher (no activation): nothing of them stays applied
    assert "applied" not in after.values()
    assert alias_after is False


def test_default_builder_leaves_activated_packs_as_they_were(interpreter):
    result = interpreter.run_json("""
        import json
        import lazypatch.auto
        import lazypatch
        from lazypatch.driving_sdk.mx_driving import default_patcher_builder
        with default_patcher_builder.disable_patches("function_aliases").build():
            import numpy
            inside = {r.name: r.status for r in lazypatch.report() if "numpy" in r.tags}
        after = {r.name: r.status for r in lazypatch.report() if "numpy" in r.tags}
        print(json.dumps([inside, after]))
    """)
    inside, after = result
    assert inside["numpy_compat.type_aliases"] == "applied"
    assert inside["numpy_compat.function_aliases"] != "applied"
    assert after["numpy_compat.type_aliases"] == "applied"       # on by activation: stays
    assert after["numpy_compat.function_aliases"] == "applied"   # re-enabled as it was


def test_fake_torch_npu_allow_internal_format_and_training_utilities(interpreter):
    """torch_npu cannot be installed here: a small fake package stands in for it."""
    interpreter.write({"torch_npu/__init__.py": "from . import npu\n",
                       "torch_npu/npu/__init__.py": """
        class _Config:
            allow_internal_format = True
        config = _Config()
    """})
    result = interpreter.run_json("""
        import json
        from lazypatch.driving_sdk.mx_driving import PatcherBuilder
        from lazypatch.registry.training.settings import STATE
        builder = PatcherBuilder().with_profiling("prof", 1).brake_at(1000)
        with builder.build(allow_internal_format=False):
            import torch_npu
            inside = [torch_npu.npu.config.allow_internal_format, STATE.brake_step,
                      STATE.profile.level]
        after = [torch_npu.npu.config.allow_internal_format, STATE.brake_step, STATE.profile]
        print(json.dumps([inside, after]))
    """)
    assert result == [[False, 1000, 1], [True, None, None]]


def test_bad_builder_input_fails_early():
    from lazypatch.driving_sdk.mx_driving import Patch, PatcherBuilder
    with pytest.raises(TypeError, match="func must be a function"):
        Patch("not callable")
    with pytest.raises(TypeError, match="Patch"):
        PatcherBuilder().add_module_patch("mmcv", lambda module, options: None)
    with pytest.raises(ValueError, match="not a valid dotted module"):
        PatcherBuilder().add_module_patch("mm-cv", Patch(lambda module, options: None))
    with pytest.raises(ValueError, match="level"):
        PatcherBuilder().with_profiling("dir", 5)
    with pytest.raises(ValueError, match="positive integer"):
        PatcherBuilder().brake_at(0)


def test_with_profiling_takes_drivingsdks_schedule_and_refuses_a_bad_one(interpreter):
    result = interpreter.run_json("""
        import json
        from lazypatch.driving_sdk.mx_driving import PatcherBuilder
        from lazypatch.registry.training.settings import STATE
        builder = PatcherBuilder().with_profiling("prof", 2, skip_first=3, wait=2, warmup=1,
                                                  active=4, repeat=2)
        with builder.build():
            profile = STATE.profile
            inside = [profile.level, profile.skip_first, profile.wait, profile.warmup,
                      profile.active, profile.repeat]
        print(json.dumps([inside, STATE.profile is None]))
    """)
    assert result == [[2, 3, 2, 1, 4, 2], True]
    from lazypatch.driving_sdk.mx_driving import PatcherBuilder
    with pytest.raises((TypeError, ValueError), match="active"):
        PatcherBuilder().with_profiling("dir", 0, active=0)


def test_drivingsdk_group_names_leave_out_the_builtin_patches_doing_their_work(interpreter):
    result = interpreter.run_json("""
        import json, warnings
        import lazypatch
        from lazypatch.driving_sdk.mx_driving import default_patcher_builder
        with default_patcher_builder.disable_patches("numpy_type").build():
            import numpy
            by_legacy_name = {r.name: r.status for r in lazypatch.report() if "numpy" in r.tags}
        with default_patcher_builder.disable_patches("tensor_index").build():
            enabled = {r.name: r.enabled for r in lazypatch.report()
                       if r.name == "ascend.tensor_bool_index"}
        print(json.dumps([by_legacy_name, enabled]))
    """)
    by_legacy_name, enabled = result
    assert by_legacy_name and "applied" not in by_legacy_name.values(), by_legacy_name
    assert enabled == {"ascend.tensor_bool_index": False}


@pytest.mark.stack
def test_registrations_made_inside_a_legacy_patch_function_are_undone(interpreter):
    """`@ATTENTION.register_module()` run by a 1.0 patch function is taken back when the
    builder's `with` block ends (the report says reverted, and it is)."""
    interpreter.write({"my_project/__init__.py": "", "my_project/layers.py": "X = 1\n"})
    result = interpreter.run_json("""
import json
from mmengine.registry import Registry
from lazypatch.driving_sdk.mx_driving import Patch, PatcherBuilder

ATTENTION = Registry("attention")

@ATTENTION.register_module()
class Original:
    pass

def register_npu_attention(module, options):
    @ATTENTION.register_module(name="NPUAttention")
    class NPUAttention:
        pass

    @ATTENTION.register_module(name="Original", force=True)
    class Replacement:
        pass

with PatcherBuilder().add_module_patch("my_project", Patch(register_npu_attention)).build():
    import my_project
    inside = [ATTENTION.get("NPUAttention").__name__, ATTENTION.get("Original").__name__]
after = [ATTENTION.get("NPUAttention"), ATTENTION.get("Original").__name__]
print(json.dumps({"inside": inside, "after": [after[0], after[1]]}))
""")
    assert result["inside"] == ["NPUAttention", "Replacement"]
    assert result["after"] == [None, "Original"]


@pytest.mark.stack   # needs mmengine
def test_legacy_function_changes_to_its_own_imports_other_packages_and_tables_are_undone(
        interpreter):
    """A 1.0 patch function that imports a submodule itself and changes it, changes a
    class of another package, and writes a registry's table directly: leaving the
    builder's `with` block puts every one of them back."""
    interpreter.write({
        "host_pkg/__init__.py": "",                  # does not import host_pkg.sub
        "host_pkg/sub.py": "class Sub:\n    def f(self):\n        return 'original'\n",
        "other_pkg/__init__.py": "class Other:\n    def g(self):\n        return 'original'\n",
        "regs.py": "from mmengine.registry import Registry\nHEADS = Registry('heads')\n\n"
                   "@HEADS.register_module()\nclass Head:\n    pass\n",
        "port.py": """
            import other_pkg
            import regs

            def port(module, options):
                import host_pkg.sub
                host_pkg.sub.Sub.f = lambda self: "npu"
                other_pkg.Other.g = lambda self: "npu"

                class NpuHead:
                    pass
                regs.HEADS._module_dict["Head"] = NpuHead
                regs.HEADS._module_dict["Extra"] = NpuHead
        """})
    result = interpreter.run_json("""
import json
import other_pkg, regs
from lazypatch.driving_sdk.mx_driving import Patch, PatcherBuilder
from port import port

def state():
    import host_pkg.sub
    return [host_pkg.sub.Sub().f(), other_pkg.Other().g(), regs.HEADS.get("Head").__name__,
            "Extra" in regs.HEADS.module_dict]

with PatcherBuilder().add_module_patch("host_pkg", Patch(port)).build():
    import host_pkg
    inside = state()
print(json.dumps({"inside": inside, "after": state()}))
""")
    assert result["inside"] == ["npu", "npu", "NpuHead", True]
    assert result["after"] == ["original", "original", "Head", False]


def test_legacy_function_whose_hasattr_meets_an_unimported_submodule_waits_for_it(interpreter):
    """FBOCC's pattern: ``if hasattr(pkg.models, "encoder"): ... else: raise
    AttributeError(...)`` on a submodule its package does not import: the patch waits for
    that submodule and lands when the program imports it (and is undone after)."""
    interpreter.write({
        "fb/__init__.py": "from . import models\n",
        "fb/models/__init__.py": "",
        "fb/models/encoder.py": "def point_sampling():\n    return 'cuda'\n",
        "fb_port.py": """
            def port(fb, options):
                if hasattr(fb.models, "encoder"):
                    fb.models.encoder.point_sampling = lambda: "npu"
                else:
                    raise AttributeError("encoder.point_sampling attr not found")
        """})
    result = interpreter.run_json("""
import json
import lazypatch
from lazypatch.driving_sdk.mx_driving import Patch, PatcherBuilder
from fb_port import port
with PatcherBuilder().add_module_patch("fb", Patch(port)).build():
    import fb
    import fb.models.encoder
    inside = fb.models.encoder.point_sampling()
    status = [r.status for r in lazypatch.report() if r.name.endswith(".port")]
print(json.dumps({"inside": inside, "status": status,
                  "after": fb.models.encoder.point_sampling()}))
""")
    assert result == {"inside": "npu", "status": ["applied"], "after": "cuda"}


def test_builder_builds_on_the_2_0_patcher_and_expands_builtin_functions(interpreter):
    """As DrivingSDK 2.0 builds a 1.0 builder: a 2.0 Patcher with a LegacyPatch per patch
    function, and a built-in 1.0 function (``batch_matmul``) as its group's patches."""
    interpreter.write({"legacy_target.py": "def f():\n    return 'original'\n"})
    result = interpreter.run_json("""
import json, logging
import lazypatch.auto
from lazypatch.driving_sdk.v2 import patcher as v2
from lazypatch.driving_sdk.v2.builtin_patches import batch_matmul
from lazypatch.driving_sdk.v2.patches import LegacyPatch
from lazypatch.driving_sdk.mx_driving import Patch, PatcherBuilder
notices = []
logging.getLogger("mx_driving.patcher").addHandler(type("Keep", (logging.Handler,), {
    "emit": lambda self, record: notices.append(record.getMessage())})())
logging.getLogger("mx_driving.patcher").setLevel(logging.INFO)

def second(module, options):
    module.f = lambda: module.f_first() + "+second"

def first(module, options):
    module.f_first = module.f
    module.f = lambda: "first"

custom = Patch(second, priority=2)
builder = (PatcherBuilder().add_module_patch("legacy_target", custom, Patch(first, priority=1))
           .add_module_patch("torch", Patch(batch_matmul)))
built = builder.build()
collected = [(type(patch).__name__, group) for patch, group in built._patcher._collect_all_patches()]
with built:
    import legacy_target
    inside, applied = legacy_target.f(), custom.is_applied
def build_mmcv_epoch_runner_patch():
    def _apply(module, options):
        return None
    return LegacyPatch(_apply, target_module="mmcv")
print(json.dumps({"patcher": isinstance(built._patcher, v2.Patcher),
                  "collected": collected, "inside": inside, "applied": applied,
                  "after": [legacy_target.f(), custom.is_applied],
                  "builder_state": sorted(builder._module_patches),
                  "inferred": build_mmcv_epoch_runner_patch().name,
                  "notices": sum("compatibility-layer notice" in n for n in notices)}))
""")
    assert result["patcher"] is True
    assert result["collected"] == [["LegacyPatch", "first"], ["LegacyPatch", "second"]] + \
        [["BuiltinAtomicPatch", "batch_matmul"]] * 3
    assert result["inside"] == "original+second" and result["applied"] is True
    assert result["after"] == ["original", False]
    assert result["builder_state"] == ["legacy_target", "torch"]
    assert result["inferred"] == "mmcv_epoch_runner"
    assert result["notices"] == 1                       # once per process


@pytest.mark.stack   # needs torch
def test_builtin_1_0_functions_patch_a_given_module_object_as_drivingsdk_1_0_did():
    """``ddp(mmcv, options)`` on a module object that is not the imported module (a
    stand-in built by hand): the changes are made on that object, its own helpers used;
    a missing part of the target is an AttributeError, as in DrivingSDK 1.0."""
    import types

    import pytest

    from lazypatch.driving_sdk.v2.builtin_patches import ddp, numpy_type, stream

    def module(name, **attributes):
        made = types.ModuleType(name)
        made.__dict__.update(attributes)
        return made

    class DistributedDataParallel:
        def _run_ddp_forward(self, *inputs, **kwargs):
            return "cuda"

    class NPUDistributedDataParallel(DistributedDataParallel):
        pass

    calls = []
    functions = module("_functions", Scatter=type("Scatter", (), {"forward": None}),
                       get_input_device=lambda value: 0,
                       scatter=lambda value, gpus, streams: calls.append(streams) or [value],
                       synchronize_stream=None, _get_stream=None)
    mmcv = module("mmcv",
                  parallel=module("parallel", _functions=functions,
                                  distributed=module("distributed",
                                                     MMDistributedDataParallel=DistributedDataParallel)),
                  device=module("device", npu=module("npu",
                                                     NPUDistributedDataParallel=NPUDistributedDataParallel)))
    ddp(mmcv, {})
    stream(mmcv, {})
    assert mmcv.parallel.distributed.MMDistributedDataParallel is NPUDistributedDataParallel
    wrapped = types.SimpleNamespace(device_ids=None, module=lambda *args: ("module", args))
    assert DistributedDataParallel._run_ddp_forward(wrapped, 1) == ("module", (1,))
    assert functions.Scatter.forward([0], "batch") == ("batch",) and calls == [None]
    fake_numpy = module("numpy")
    numpy_type(fake_numpy, {})
    assert (fake_numpy.bool, fake_numpy.float, fake_numpy.int) == (bool, float, int)
    with pytest.raises(AttributeError):
        stream(module("mmcv", parallel=module("parallel", _functions=module("_functions"))), {})


@pytest.mark.stack   # needs torch
def test_1_0_functions_on_a_module_object_keep_runtime_checks_and_the_replaced_method(
        interpreter):
    """``index(torch_like, {})``: the mask path where the runtime check says so, the
    original elsewhere; ``resnet_fp16(mmdet_like, {})``: the forward it replaced, under
    autocast (and no recursion into itself)."""
    result = interpreter.run_json("""
import json, types, warnings
import torch
from lazypatch.driving_sdk.v2.builtin_patches import index, resnet_fp16
warnings.simplefilter("ignore")                    # CPU autocast may not take float16

class Tensor(torch.Tensor):
    pass

torch_like = types.ModuleType("torch")
torch_like.Tensor = Tensor
index(torch_like, {})
values = torch.arange(4.0).as_subclass(Tensor)
masked = values[torch.tensor([True, False, True, False])].tolist()
plain = values[1].item()

class ResNet:
    def forward(self, x):
        return (x * 2,)

backbones = types.SimpleNamespace(resnet=types.SimpleNamespace(ResNet=ResNet))
mmdet_like = types.ModuleType("mmdet")
mmdet_like.models = types.SimpleNamespace(backbones=backbones)
resnet_fp16(mmdet_like, {})
outs = ResNet().forward(torch.ones(2))
print(json.dumps({"masked": masked, "plain": plain,
                  "fp16": [outs[0].tolist(), str(outs[0].dtype)]}))
""", timeout=120)
    assert result == {"masked": [0.0, 2.0], "plain": 1.0, "fp16": [[2.0, 2.0], "torch.float32"]}


def test_default_builder_holds_drivingsdk_default_groups_in_its_order(interpreter):
    result = interpreter.run_json("""
import json
import lazypatch.auto
from lazypatch.driving_sdk.mx_driving import default_patcher_builder
groups = [group for _, group in default_patcher_builder.build()._patcher._collect_all_patches()]
print(json.dumps(list(dict.fromkeys(groups))))
""")
    # as DrivingSDK's default builder: by target module, NumPy's aliases before mmdet3d's
    assert result == ["multi_scale_deformable_attention", "deform_conv", "modulated_deform_conv",
                      "spconv3d", "stream", "ddp", "resnet_add_relu", "resnet_maxpool",
                      "numpy_compat", "nuscenes_dataset", "nuscenes_metric", "tensor_index",
                      "batch_matmul"]

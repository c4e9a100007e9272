"""lazypatch.driving_sdk.v2.patcher: DrivingSDK patcher 2.0's documented examples, lazily and undone.

The examples of DrivingSDK's ``mx_driving/patcher/README.md`` and
``FEATURES.md`` (skip_import, replace_import with replace_with, inject_import,
AtomicPatch with aliases / precheck / runtime_check / target_wrapper /
replacement_wrapper, Patch classes, RegistryPatch, with_imports,
configure_patcher_logging, print_info(diff=True)) run with only their import
line changed, against packages written to disk and the real mmengine / mmdet,
each in a fresh interpreter. Also the 1.0 custom-patch pattern of the seed
whose function reaches a submodule its package does not import.
"""

from __future__ import annotations

import pytest

# The model of the examples: my_model/ops/gaussian.py (README, "具体示例").
MODEL = {
    "my_model/__init__.py": "",
    "my_model/ops/__init__.py": "from .gaussian import compute_gaussian_weights\n",
    "my_model/ops/gaussian.py": """
        import math
        import torch

        def compute_gaussian_weights(distances, sigma):
            '''Gaussian kernel weights (the CUDA version).'''
            variance = 2.0 * sigma * sigma
            weights = torch.exp(-distances * distances / variance)
            norm_factor = 1.0 / (sigma * math.sqrt(2 * math.pi))
            return weights * norm_factor
    """,
    "my_model/layers.py": """
        class Block:
            def forward(self, x):
                return ("cuda block", x)

        def helper(x):
            return ("cuda helper", x)

        def legacy(x):
            return ("cuda legacy", x)
    """,
    # A fake torch_npu (there is no NPU here): the one fused op the example calls.
    "torch_npu/__init__.py": """
        import torch
        CALLS = []

        def npu_exp(tensor):
            CALLS.append(tensor.dtype)
            return torch.exp(tensor)
    """,
}

# README, "Step 3": only the import lines differ from the documentation.
GAUSSIAN_PATCH = """
from lazypatch.driving_sdk.v2.patcher import Patcher, Patch, AtomicPatch, with_imports
import torch

class GaussianWeightsPatch(Patch):
    name = "gaussian_weights"

    @classmethod
    def patches(cls, options=None):
        return [
            AtomicPatch(
                "my_model.ops.gaussian.compute_gaussian_weights",
                cls._compute_gaussian_weights_npu,
                aliases=["my_model.ops.compute_gaussian_weights"],
                runtime_check=cls._check_fp32,
            ),
        ]

    @staticmethod
    def _check_fp32(distances, sigma):
        return distances.dtype == torch.float32

    @staticmethod
    @with_imports("math", "torch_npu")
    def _compute_gaussian_weights_npu(distances, sigma):
        variance = 2.0 * sigma * sigma
        weights = torch_npu.npu_exp(-distances * distances / variance)  # noqa: F821
        norm_factor = 1.0 / (sigma * math.sqrt(2 * math.pi))  # noqa: F821
        return weights * norm_factor
"""


@pytest.mark.stack
def test_fake_torch_npu_gaussian_example_with_runtime_check_alias_and_diff(interpreter):
    interpreter.write({**MODEL, "patch.py": GAUSSIAN_PATCH})
    result = interpreter.run_json("""
    import json, sys, io, contextlib, torch
    from patch import GaussianWeightsPatch, Patcher
    patcher = Patcher()
    patcher.add(GaussianWeightsPatch)
    patcher.apply()
    imported_by_apply = [m for m in ("my_model", "torch_npu") if m in sys.modules]
    from my_model.ops import compute_gaussian_weights       # the alias the model uses
    import torch_npu
    distances = torch.tensor([0.0, 1.0, 2.0])
    fp32 = compute_gaussian_weights(distances, 1.0)
    fp64 = compute_gaussian_weights(distances.double(), 1.0)   # falls back to the original
    calls = [str(dtype) for dtype in torch_npu.CALLS]
    import logging
    shown = io.StringIO()
    logging.getLogger("mx_driving.patcher").addHandler(logging.StreamHandler(shown))
    patcher.print_info(diff=True)     # logged on DrivingSDK's logger, as DrivingSDK does
    patcher.restore()
    import my_model.ops
    torch_npu.CALLS.clear()
    my_model.ops.compute_gaussian_weights(distances, 1.0)
    print(json.dumps({"imported": imported_by_apply, "fp32": fp32.tolist(),
                      "fp64": fp64.tolist(), "calls": calls, "info": shown.getvalue(),
                      "after_restore": len(torch_npu.CALLS)}))
    """, timeout=300)
    assert result["imported"] == []
    assert result["calls"] == ["torch.float32"]          # only the fp32 call took the NPU path
    assert result["fp32"] == pytest.approx(result["fp64"], rel=1e-6)
    info = result["info"]
    assert "[applied] my_model.ops.gaussian.compute_gaussian_weights" in info
    assert "-    weights = torch.exp(-distances * distances / variance)" in info
    assert "+        weights = torch_npu.npu_exp(-distances * distances / variance)" in info
    assert result["after_restore"] == 0


IMPORT_CONTROL = {
    **MODEL,
    "projects/__init__.py": "",
    "projects/ops/__init__.py": "",
    "projects/ops/cuda_op.py": "raise ImportError('needs the CUDA extension')\n",
    "projects/ops/npu_op.py": "def run():\n    return 'npu run'\n",
    "projects/models/__init__.py": "__all__ = ['Existing']\nExisting = 'kept'\n",
    "projects/models/sparsedrive_v1.py": "class V1SparseDrive:\n    pass\nExisting = 'other'\n",
    "old_module.py": "raise ImportError('cuda only')\n",
    "new_module.py": "def special():\n    return 'template'\ndef other():\n    return 'other'\n",
}


def test_skip_replace_and_inject_import_examples(interpreter):
    interpreter.write(IMPORT_CONTROL)
    result = interpreter.run_json("""
    import json, sys
    from lazypatch.driving_sdk.v2.patcher import Patcher, replace_with

    class NPUImpl:
        pass

    patcher = Patcher()
    patcher.skip_import("flash_attn", "torch_scatter")
    patcher.replace_import("projects.ops.cuda_op", "projects.ops.npu_op")
    patcher.replace_import("projects.ops.kernels", replace_with.module(MyFunction=NPUImpl))
    patcher.replace_import("old_module", replace_with.module("new_module", special=lambda: "custom"))
    patcher.replace_import("legacy_form", MyFunction=NPUImpl)          # the compatible form
    patcher.inject_import("projects.models.sparsedrive_v1", "V1SparseDrive", "projects.models")
    patcher.inject_import("projects.models.sparsedrive_v1", "Existing", "projects.models")
    patcher.apply()
    imported_early = [m for m in ("projects", "new_module", "flash_attn") if m in sys.modules]

    from flash_attn.flash_attn_interface import flash_attn_func
    from flash_attn.any.deep.path import anything
    import torch_scatter
    from projects.ops.cuda_op import run
    from projects.ops.kernels import MyFunction
    import old_module
    from legacy_form import MyFunction as Legacy
    from projects.models import V1SparseDrive, Existing
    import projects.models
    outcome = {
        "imported_early": imported_early,
        "stub_call": flash_attn_func(1, 2), "stub_bool": bool(anything),
        "scatter_attr": repr(torch_scatter.scatter_add)[:20],
        "run": run(), "kernel": MyFunction is NPUImpl, "legacy": Legacy is NPUImpl,
        "scatter_iterates_empty": list(torch_scatter) == [] and not torch_scatter,
        "module_call": torch_scatter(1, key=2), "module_repr": repr(torch_scatter),
        "template": [old_module.special(), old_module.other()],
        "injected": V1SparseDrive.__name__, "existing": Existing,
        "all": projects.models.__all__,
    }
    patcher.restore()
    outcome["after"] = sorted(m for m in sys.modules
                              if m.split(".")[0] in ("flash_attn", "torch_scatter", "old_module",
                                                     "legacy_form") or m == "projects.ops.cuda_op")
    outcome["injected_after"] = hasattr(projects.models, "V1SparseDrive")
    outcome["all_after"] = projects.models.__all__
    try:
        import flash_attn
        outcome["import_after"] = "imported"
    except ImportError:
        outcome["import_after"] = "ImportError"
    print(json.dumps(outcome))
    """)
    # A skipped module that is not installed is in sys.modules at once, as DrivingSDK's
    # skip_import leaves it (a stub: no code of anyone's runs); nothing else is imported.
    assert result["imported_early"] == ["flash_attn"]
    assert result["stub_call"] is None and result["stub_bool"] is False
    assert result["scatter_attr"].startswith("<Stub 'scatter_add'")
    # The skipped module itself is callable (None) and says "Stub", as DrivingSDK's does.
    assert result["module_call"] is None
    assert result["module_repr"] == "<StubModule 'torch_scatter' (driving_sdk skip_import)>"
    assert result["scatter_iterates_empty"]
    assert result["run"] == "npu run" and result["kernel"] and result["legacy"]
    assert result["template"] == ["custom", "other"]
    assert result["injected"] == "V1SparseDrive"
    assert result["existing"] == "kept"                    # an existing name is left alone
    assert result["all"] == ["Existing", "V1SparseDrive"]
    assert result["after"] == []                           # every stand-in and replacement gone
    assert result["injected_after"] is False and result["all_after"] == ["Existing"]
    assert result["import_after"] == "ImportError"


def test_atomic_patch_wrappers_precheck_and_disable(interpreter):
    interpreter.write(MODEL)
    result = interpreter.run_json("""
    import json
    from lazypatch.driving_sdk.v2.patcher import Patcher, Patch, AtomicPatch

    def add_stream_sync(original):          # FEATURES.md, target_wrapper
        def wrapper(self, *args, **kwargs):
            return ("synced",) + original(self, *args, **kwargs)
        return wrapper

    def add_logging(func):                  # FEATURES.md, replacement_wrapper
        def wrapper(*args, **kwargs):
            return ("logged", func(*args, **kwargs))
        return wrapper

    class Layers(Patch):
        @classmethod
        def patches(cls, options=None):
            return [
                AtomicPatch("my_model.layers.Block.forward", target_wrapper=add_stream_sync),
                AtomicPatch("my_model.layers.helper", lambda x: ("npu helper", x),
                            replacement_wrapper=add_logging),
                AtomicPatch("my_model.layers.missing", lambda: None,
                            precheck=lambda target: target.endswith("never")),
            ]

    class Unwanted(Patch):
        @classmethod
        def patches(cls, options=None):
            return [AtomicPatch("my_model.layers.helper", lambda x: "unwanted")]

    patcher = Patcher().add(Layers, Unwanted).disable(Unwanted)
    with patcher:
        import my_model.layers as layers
        inside = [layers.Block().forward(1), layers.helper(2)]
        import lazypatch
        statuses = {r.name: r.status for r in lazypatch.report()
                    if r.name.startswith("driving_sdk.")}
    print(json.dumps({"inside": inside, "statuses": statuses,
                      "after": [layers.Block().forward(1), layers.helper(2)]}))
    """)
    assert result["inside"] == [["synced", "cuda block", 1], ["logged", ["npu helper", 2]]]
    assert result["statuses"] == {
        "driving_sdk.Layers.my_model.layers.Block.forward": "applied",
        "driving_sdk.Layers.my_model.layers.helper": "applied",
        "driving_sdk.Layers.my_model.layers.missing": "skipped"}       # precheck said no
    assert result["after"] == [["cuda block", 1], ["cuda helper", 2]]


@pytest.mark.stack
def test_registry_patch_on_real_mmdet_registry_with_class_and_factory(interpreter):
    result = interpreter.run_json("""
    import lazypatch.auto
    import json
    from lazypatch.driving_sdk.v2.patcher import Patcher, RegistryPatch

    class MyNeck:
        def __init__(self, **config):
            self.config = config

    def create_hook():                           # FEATURES.md, module_factory
        from mmengine.hooks import Hook
        class MyHook(Hook):
            pass
        return MyHook

    patcher = Patcher().add(
        RegistryPatch("mmdet.registry.MODELS", MyNeck, name="FPN"),
        RegistryPatch("mmengine.registry.HOOKS", name="MyHook", module_factory=create_hook),
    )
    patcher.apply()
    from mmdet.registry import MODELS
    from mmengine.registry import HOOKS
    built = MODELS.build(dict(type="FPN", in_channels=[4], out_channels=4, num_outs=1))
    hook = HOOKS.build(dict(type="MyHook"))
    # force=False: an entry registered by the time the patch applies is not replaced.
    careful = Patcher().add(RegistryPatch("mmdet.registry.MODELS", MyNeck, name="RPNHead",
                                          force=False))
    import warnings
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        careful.apply()
    import lazypatch
    statuses = {r.name: r.status for r in lazypatch.report() if r.name.startswith("driving_sdk.")}
    careful.restore()
    patcher.restore()
    restored = MODELS.build(dict(type="FPN", in_channels=[4, 8], out_channels=4, num_outs=2))
    print(json.dumps({"built": type(built).__name__, "hook": type(hook).__name__,
                      "statuses": statuses, "restored": type(restored).__name__,
                      "hook_gone": HOOKS.get("MyHook") is None}))
    """, timeout=300)
    assert result["built"] == "MyNeck" and result["hook"] == "MyHook"
    assert result["statuses"] == {"driving_sdk.mmdet.registry.MODELS.FPN": "applied",
                                  "driving_sdk.mmengine.registry.HOOKS.MyHook": "applied",
                                  "driving_sdk.mmdet.registry.MODELS.RPNHead": "failed"}
    assert result["restored"] == "FPN" and result["hook_gone"] is True


@pytest.mark.stack
def test_configure_patcher_logging_strict_and_quiet_modes(interpreter):
    interpreter.write(MODEL)
    result = interpreter.run_json("""
    import json, logging, warnings
    from lazypatch.driving_sdk.v2.patcher import (Patcher, AtomicPatch, configure_patcher_logging,
                                               set_patcher_log_level)
    records = []
    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.levelname)
    logging.getLogger("mx_driving.patcher").addHandler(Keep())   # DrivingSDK's logger
    set_patcher_log_level(logging.INFO)

    # FEATURES.md, "严格模式": a failure raises PatchError from the import
    configure_patcher_logging(on_apply="info", on_skip="warning", on_fail="exception",
                              on_error="exception")
    Patcher().add(AtomicPatch("my_model.layers.legacy", "my_model.nowhere.legacy"),   # fails
                  AtomicPatch("my_model.ops.gaussian.compute_gaussian_weights", lambda *a: 0),
                  ).apply()
    import lazypatch
    try:
        import my_model.layers
        strict = "imported"
    except lazypatch.PatchError as error:
        strict = "PatchError"
    import my_model.ops.gaussian                      # applies: logged at INFO
    # "安静模式": a failure is only logged at WARNING
    configure_patcher_logging(on_apply="debug", on_skip="silent", on_fail="warning",
                              on_error="error")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import my_model.layers
    print(json.dumps({"strict": strict, "records": records, "warnings": len(caught)}))
    """, timeout=300)
    assert result["strict"] == "PatchError"
    assert result["records"] == ["INFO", "WARNING"]
    assert result["warnings"] == 0


def test_chained_default_patcher_selects_builtin_packs_and_restores_them(interpreter):
    interpreter.write(MODEL)
    result = interpreter.run_json("""
    import json, sys
    import lazypatch
    from lazypatch.driving_sdk.v2.patcher import default_patcher, Patch, AtomicPatch

    class MyPatch(Patch):
        @classmethod
        def patches(cls, options=None):
            return [AtomicPatch("my_model.layers.helper", lambda x: ("npu helper", x))]

    # FEATURES.md, "链式调用" (profiling and the brake belong to the training pack's tests)
    (default_patcher
        .skip_import("flash_attn", "torch_scatter")
        .add(MyPatch)
        .apply())
    imported = [m for m in ("torch", "numpy", "mmcv", "my_model") if m in sys.modules]
    enabled = sorted({tag for r in lazypatch.report() if r.enabled
                      for tag in r.tags if tag in ("ascend", "numpy", "openmmlab")})
    import my_model.layers, flash_attn
    inside = my_model.layers.helper(1)
    default_patcher.restore()
    still_enabled = [r.name for r in lazypatch.report() if r.enabled
                     and {"ascend", "numpy", "openmmlab"} & set(r.tags)]
    print(json.dumps({"imported": imported, "enabled": enabled, "inside": inside,
                      "after": my_model.layers.helper(1), "still_enabled": still_enabled,
                      "flash_attn_gone": "flash_attn" not in sys.modules}))
    """, timeout=300)
    assert result["imported"] == []                        # apply() imports no target
    assert result["enabled"] == ["ascend", "numpy", "openmmlab"]
    assert result["inside"] == ["npu helper", 1] and result["after"] == ["cuda helper", 1]
    assert result["still_enabled"] == [] and result["flash_attn_gone"] is True


@pytest.mark.parametrize("call, message", [
    ("AtomicPatch('my_model.f')", "replacement or target_wrapper"),
    ("AtomicPatch('a.b c', print)", "dotted path"),
    ("Patcher().add(AtomicPatch('toplevel', print)).apply()", "invalid target path: 'toplevel'"),
    ("AtomicPatch('a.b', print, runtime_check=3)", "callable"),
    ("RegistryPatch('mmdet.registry.MODELS')", "module_cls or module_factory"),
    ("RegistryPatch('mmdet.registry.MODELS', module_factory=list)", "name is required"),
    ("Patcher().add(42)", "Patch class"),
    ("configure_patcher_logging(on_fail='loud')", "not an action"),
    ("Patcher().replace_import('a.b', 'c', base_module='d')", "not both"),
    ("with_imports(42)", "module"),
])
def test_bad_driving_sdk2_input_fails_at_the_call(forget_new_patches, call, message):
    from lazypatch.driving_sdk.v2 import patcher as v2
    with pytest.raises((TypeError, ValueError), match=message):
        eval(call, vars(v2))


# --- the seed's 1.0 custom-patch pattern: a patch on pkg that changes pkg.sub.attr ---

SEED_PACKAGE = {
    # pkg/__init__ does not import pkg.sub: the patch on "pkg" runs when pkg's body ends.
    "pkg/__init__.py": "TOP = True\n",
    "pkg/sub/__init__.py": "",
    "pkg/sub/deeper.py": "def gpu_affine_func(x):\n    return ('gpu', x)\n",
    "patch.py": """
        from lazypatch.driving_sdk.mx_driving import Patch, PatcherBuilder

        def my_patch(pkg, options):
            def npu_affine_func(x):
                return ("npu", x, options["option1"])
            pkg.sub.deeper.gpu_affine_func = npu_affine_func

        builder = PatcherBuilder().add_module_patch("pkg", Patch(my_patch, {"option1": "x"}))
    """,
}


def test_seed_pattern_patch_on_a_package_reaching_an_unimported_submodule(interpreter):
    interpreter.write(SEED_PACKAGE)
    result = interpreter.run_json("""
    import json, warnings
    from patch import builder
    with warnings.catch_warnings():
        warnings.simplefilter("error")               # no failure warning may be emitted
        with builder.build():
            import pkg
            import lazypatch
            mine = lambda: [r for r in lazypatch.report() if r.name == "mx_driving.pkg.my_patch"][0]
            waiting = (mine().status, mine().reason)
            from pkg.sub.deeper import gpu_affine_func
            inside = gpu_affine_func(1)
            record = mine()
    import pkg.sub.deeper
    print(json.dumps({"waiting": waiting, "inside": inside, "applied_on": record.target,
                      "status": record.status, "after": pkg.sub.deeper.gpu_affine_func(2)}))
    """)
    assert result["waiting"][0] == "skipped" and "waiting for 'pkg.sub'" in result["waiting"][1]
    assert result["inside"] == ["npu", 1, "x"]
    assert result["applied_on"] == "pkg.sub.deeper" and result["status"] == "applied"
    assert result["after"] == ["gpu", 2]


# --- conflicts_with, legacy_name, apply_before_collect, version helpers, profiling, summary ---

# ResNet-style groups of FEATURES.md ("resnet_fp16 conflicts with resnet_maxpool"),
# on a model written to disk.
GROUPS = """
from lazypatch.driving_sdk.v2.patcher import Patch, AtomicPatch

class MaxPool(Patch):
    name = "resnet_maxpool"
    legacy_name = "maxpool_v1"

    @classmethod
    def patches(cls, options=None):
        return [AtomicPatch("my_model.layers.Block.forward", lambda self, x: ("maxpool", x))]

class FP16(Patch):
    name = "resnet_fp16"
    conflicts_with = ["maxpool_v1"]            # an old name: mapped to resnet_maxpool

    @classmethod
    def patches(cls, options=None):
        return [AtomicPatch("my_model.layers.Block.forward", lambda self, x: ("fp16", x))]
"""


def test_conflicting_groups_in_one_patcher_warn_when_added_and_refuse_to_apply(interpreter):
    interpreter.write({**MODEL, "groups.py": GROUPS})
    result = interpreter.run_json("""
    import json, sys, warnings, logging
    import lazypatch
    from lazypatch.driving_sdk.v2.patcher import Patcher
    from groups import MaxPool, FP16
    records = []
    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
    logging.getLogger("mx_driving.patcher").addHandler(Keep())   # DrivingSDK's logger
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        patcher = Patcher().add(MaxPool).add(FP16)
        try:
            patcher.apply()
            refused = None
        except ValueError as error:
            refused = str(error)
    declared = [r.name for r in lazypatch.report() if r.name.startswith("driving_sdk.")]
    kinds = sorted({(w.category.__name__, str(w.message)) for w in caught})
    patcher.disable("resnet_maxpool").apply()      # DrivingSDK's fix: keep one of them
    import my_model.layers
    print(json.dumps({"refused": refused, "declared": declared, "kinds": kinds, "logged": records,
                      "applied": patcher.is_applied, "forward": my_model.layers.Block().forward(1),
                      "imported": "my_model" in sys.modules}))
    """)
    assert result["refused"].startswith("Patch conflict: 'resnet_maxpool' conflicts with "
                                         "'resnet_fp16'. Both are enabled.")
    assert "patcher.disable('resnet_fp16').add(MaxPool)" in result["refused"]
    assert "patcher.disable('resnet_maxpool').add(FP16)" in result["refused"]
    assert result["declared"] == []                  # refused before anything was declared
    kinds = result["kinds"]
    assert len(kinds) == 1, kinds
    logged = [text for text in result["logged"] if "conflicts with" in text]
    assert len(logged) == 1 and logged[0].startswith(
        "Patch 'resnet_fp16' conflicts with already-enabled patch 'resnet_maxpool'.")
    assert "patcher.disable('resnet_maxpool').add(FP16)" in logged[0]
    assert kinds[0] == ["FutureWarning", "lazypatch: conflicts_with('maxpool_v1'): 'maxpool_v1' "
                        "is the old (legacy_name) name of the patch group 'resnet_maxpool'; "
                        "write conflicts_with('resnet_maxpool')"]
    assert result["applied"] is True and result["forward"] == ["fp16", 1]


def test_conflict_with_a_group_applied_first_elsewhere_skips_with_the_reason(interpreter):
    interpreter.write({**MODEL, "groups.py": GROUPS})
    result = interpreter.run_json("""
    import json
    import lazypatch
    from lazypatch.driving_sdk.v2.patcher import Patcher, Patch, AtomicPatch
    from groups import MaxPool, FP16

    lazypatch.replace("my_model.layers.helper", lambda x: ("user", x), name="mine.helper")

    class Helper(Patch):
        conflicts_with = ["mine.helper"]            # a lazypatch patch by its name

        @classmethod
        def patches(cls, options=None):
            return [AtomicPatch("my_model.layers.helper", lambda x: ("group", x))]

    first = Patcher().add(MaxPool).apply()
    second = Patcher().add(FP16, Helper).apply()
    import my_model.layers
    records = {r.name: [r.status, r.reason] for r in lazypatch.report()}
    outcome = {"forward": my_model.layers.Block().forward(1),
               "helper": my_model.layers.helper(2),
               "fp16": records["driving_sdk.resnet_fp16.my_model.layers.Block.forward"],
               "helper_group": records["driving_sdk.Helper.my_model.layers.helper"],
               "maxpool": records["driving_sdk.resnet_maxpool.my_model.layers.Block.forward"][0]}
    second.restore(); first.restore()
    # Restored, the first patcher no longer takes precedence: a new patcher's FP16 applies.
    third = Patcher().add(FP16).apply()
    import importlib
    importlib.reload(my_model.layers)
    outcome["after_restore"] = my_model.layers.Block().forward(3)
    print(json.dumps(outcome))
    """)
    assert result["forward"] == ["maxpool", 1] and result["maxpool"] == "applied"
    status, reason = result["fp16"]
    assert status == "skipped"
    assert "conflicts with patch group 'resnet_maxpool', applied first by another" in reason
    assert "patcher.disable('resnet_maxpool')" in reason
    status, reason = result["helper_group"]
    assert status == "skipped" and "LAZYPATCH_DISABLE=mine.helper" in reason
    assert result["helper"] == ["user", 2]
    assert result["after_restore"] == ["fp16", 3]


def test_conflict_with_a_builtin_patch_of_default_patcher_names_the_fix(interpreter):
    interpreter.write({**MODEL, "groups.py": GROUPS})
    result = interpreter.run_json("""
    import json, sys
    import lazypatch
    from lazypatch.driving_sdk.v2.patcher import default_patcher, Patch, AtomicPatch

    class FP16(Patch):                  # FEATURES.md: default_patcher.disable(...).add(...)
        name = "my_resnet_fp16"
        conflicts_with = ["resnet_maxpool"]

        @classmethod
        def patches(cls, options=None):
            return [AtomicPatch("my_model.layers.Block.forward", lambda self, x: ("fp16", x))]

    try:
        default_patcher.add(FP16).apply()
        refused = None
    except ValueError as error:
        refused = str(error)
    default_patcher.disable("resnet_maxpool").apply()
    records = {r.name: r.enabled for r in lazypatch.report()}
    print(json.dumps({"refused": refused, "maxpool": records.get("ascend.resnet_maxpool"),
                      "fp16": records.get("driving_sdk.my_resnet_fp16.my_model.layers.Block.forward"),
                      "imported": [m for m in ("torch", "mmdet", "my_model") if m in sys.modules]}))
    """)
    assert "the built-in patch 'ascend.resnet_maxpool' this patcher enables" in result["refused"]
    assert "patcher.disable('resnet_maxpool').add(FP16)" in result["refused"]
    assert result["maxpool"] is False and result["fp16"] is True
    assert result["imported"] == []


@pytest.mark.parametrize("in_force", [False, True])
def test_conflict_with_a_builtin_patch_enabled_elsewhere_counts_only_where_it_applies(
        interpreter, in_force):
    interpreter.write({**MODEL, "groups.py": GROUPS})
    result = interpreter.run_json(f"""
    import json
    import lazypatch
    from lazypatch.driving_sdk.v2.patcher import Patcher, default_patcher
    from groups import FP16

    class BuiltinFP16(FP16):
        # resnet_maxpool: DrivingSDK's group, here ascend.resnet_maxpool (no torch_npu
        # here: it never applies); my_maxpool: the last part of a pack patch that does.
        conflicts_with = ["my_maxpool"] if {in_force} else ["resnet_maxpool"]

    default_patcher.apply()
    lazypatch.replace("my_model.layers.helper", lambda x: x, name="mypack.my_maxpool",
                      tags=("ascend",))          # a patch of DrivingSDK's default set's packs
    Patcher().add(BuiltinFP16).apply()
    import my_model.layers
    record = [r for r in lazypatch.report()
              if r.name == "driving_sdk.BuiltinFP16.my_model.layers.Block.forward"][0]
    print(json.dumps([record.status, record.reason, my_model.layers.Block().forward(1)]))
    """)
    status, reason, forward = result
    if in_force:
        assert status == "skipped" and "LAZYPATCH_DISABLE=mypack.my_maxpool" in reason
        assert forward == ["cuda block", 1]
    else:
        assert status == "applied" and forward == ["fp16", 1]


def test_builtin_groups_by_drivingsdk_names_disable_enable_and_conflict(interpreter):
    result = interpreter.run_json("""
    import json, sys, warnings
    import lazypatch
    from lazypatch.driving_sdk.v2.patcher import default_patcher
    def enabled(*names):
        records = {r.name: r.enabled for r in lazypatch.report()}
        return [records[name] for name in names]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        default_patcher.disable("tensor_index", "numpy_type")     # a 2.0 and a 1.0 name
        default_patcher.enable("resnet_fp16")      # DrivingSDK: default_patcher.add(ResNetFP16)
        try:
            default_patcher.apply()
            refused = None
        except ValueError as error:
            refused = str(error)
        default_patcher.disable("resnet_maxpool").apply()
    inside = enabled("ascend.tensor_bool_index", "numpy_compat.type_aliases",
                     "ascend.resnet_fp16", "ascend.resnet_maxpool", "ascend.batch_matmul")
    summary = default_patcher.summary()
    default_patcher.restore()
    after = enabled("ascend.resnet_fp16", "ascend.resnet_maxpool")
    print(json.dumps({"refused": refused, "inside": inside, "after": after,
                      "notices": [str(w.message) for w in caught
                                  if w.category is FutureWarning],
                      "summary_groups": [line.strip() for line in summary.splitlines()
                                         if line.strip() in ("resnet_fp16:", "tensor_index:",
                                                             "batch_matmul:")],
                      "imported": [m for m in ("torch", "numpy", "mmdet") if m in sys.modules]}))
    """)
    assert result["refused"].startswith("Patch conflict: 'resnet_fp16' conflicts with "
                                         "'resnet_maxpool'. Both are enabled.")
    assert "patcher.disable('resnet_maxpool').enable('resnet_fp16')" in result["refused"]
    # tensor_index, numpy_compat off; resnet_fp16 on instead of resnet_maxpool; others as usual
    assert result["inside"] == [False, False, True, False, True]
    assert result["after"] == [False, False]   # packs loaded by apply(): all taken back
    assert result["notices"] == ["lazypatch: disable('numpy_type'): 'numpy_type' is the old "
                                 "(legacy_name) name of the patch group 'numpy_compat'; write "
                                 "disable('numpy_compat')"]
    assert sorted(result["summary_groups"]) == ["batch_matmul:", "resnet_fp16:"]
    assert result["imported"] == []


def test_legacy_name_disables_and_enables_the_group_with_a_notice(interpreter):
    interpreter.write({**MODEL, "groups.py": GROUPS})
    result = interpreter.run_json("""
    import json, warnings
    import lazypatch
    from lazypatch.driving_sdk.v2.patcher import Patcher
    from groups import MaxPool
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        early = Patcher().disable("maxpool_v1").add(MaxPool)    # before the group is added
        early.apply()
        late = Patcher().add(MaxPool).disable("maxpool_v1").enable("maxpool_v1")
        late.apply()
    names = sorted(r.name for r in lazypatch.report() if r.name.startswith("driving_sdk."))
    import my_model.layers
    print(json.dumps({"names": names, "forward": my_model.layers.Block().forward(1),
                      "notices": sorted({(w.category.__name__, str(w.message)) for w in caught})}))
    """)
    assert result["names"] == ["driving_sdk.resnet_maxpool.my_model.layers.Block.forward"]
    assert result["forward"] == ["maxpool", 1]
    notices = result["notices"]
    assert all(category == "FutureWarning" for category, _ in notices)
    assert any("disable('maxpool_v1'): 'maxpool_v1' is the old (legacy_name) name of the patch "
               "group 'resnet_maxpool'; write disable('resnet_maxpool')" in text
               for _, text in notices)
    assert any("write enable('resnet_maxpool')" in text for _, text in notices)


BOOTSTRAP = {
    **MODEL,
    "oldapi.py": "VALUE = 1   # upstream changed it; the compat group sets 2 back\n",
    "groups_bootstrap.py": """
        from lazypatch.driving_sdk.v2.patcher import Patch, AtomicPatch

        class Reader(Patch):
            @classmethod
            def patches(cls, options=None):
                import oldapi                        # collection imports its target
                seen = oldapi.VALUE
                return [AtomicPatch("my_model.layers.helper", lambda x: (seen, x))]

        class Compat(Patch):
            apply_before_collect = True

            @classmethod
            def patches(cls, options=None):
                return [AtomicPatch("oldapi.VALUE", 2)]

        class LateCompat(Compat):
            apply_before_collect = False
    """,
}


@pytest.mark.parametrize("compat, seen", [("Compat", 2), ("LateCompat", 1)])
def test_apply_before_collect_declares_a_group_before_others_collect(interpreter, compat, seen):
    interpreter.write(BOOTSTRAP)
    result = interpreter.run_json(f"""
    import json
    from lazypatch.driving_sdk.v2.patcher import Patcher
    from groups_bootstrap import Reader, {compat} as Compat
    patcher = Patcher().add(Reader, Compat).apply()     # Compat added last
    import my_model.layers, oldapi
    inside = [my_model.layers.helper(1), oldapi.VALUE]
    patcher.restore()
    print(json.dumps(inside + [oldapi.VALUE]))
    """)
    assert result == [[seen, 1], 2, 1]


def test_a_bad_patches_result_takes_back_what_apply_declared(interpreter):
    interpreter.write(BOOTSTRAP)
    result = interpreter.run_json("""
    import json
    import lazypatch
    from lazypatch.driving_sdk.v2.patcher import Patcher, Patch, AtomicPatch
    from groups_bootstrap import Compat

    class Broken(Patch):
        @classmethod
        def patches(cls, options=None):
            return [AtomicPatch("my_model.layers.helper", print), "my_model.layers.Block"]

    patcher = Patcher().skip_import("flash_attn").add(Compat, Broken)
    try:
        patcher.apply()
        error = None
    except TypeError as refused:
        error = str(refused)
    live = lambda: sorted(r.name for r in lazypatch.report()
                          if r.name.startswith("driving_sdk.") and r.enabled)
    after_error = [live(), patcher.is_applied]
    patcher.disable(Broken).apply()
    print(json.dumps({"error": error, "after_error": after_error, "after_fix": live()}))
    """)
    assert "Broken.patches() returned 'my_model.layers.Block', not an AtomicPatch" in \
        result["error"]
    # Compat (apply_before_collect) had been declared: taken back; skip_import stays.
    assert result["after_error"] == [["driving_sdk.skip_import:flash_attn"], False]
    assert [name.split("#")[0] for name in result["after_fix"]] == [   # "#2": a new name
        "driving_sdk.Compat.oldapi.VALUE", "driving_sdk.skip_import:flash_attn"]


@pytest.mark.stack
def test_version_helpers_read_metadata_and_map_onto_requires(interpreter):
    interpreter.write(MODEL)
    result = interpreter.run_json("""
    import json, sys
    import lazypatch
    from lazypatch.driving_sdk.v2.patcher import (Patcher, AtomicPatch, mmcv_version, get_version,
                                               check_version, version_requirement,
                                               is_mmcv_v1x, is_mmcv_v2x)
    answers = {
        "version": mmcv_version.version, "called": mmcv_version(), "bool": bool(mmcv_version),
        "v1": [mmcv_version.is_v1x, is_mmcv_v1x()], "v2": [mmcv_version.is_v2x, is_mmcv_v2x()],
        "mmengine": mmcv_version.has_mmengine, "torch": get_version("torch"),
        "torch_2": check_version("torch", major=2),
        "mmcv_minor": [check_version("mmcv", 2, 2), check_version("mmcv", 2, 1)],
        "missing": [get_version("no_such_package_here"), check_version("no_such_package_here", 1)],
        "requirement": [version_requirement("mmcv", 2), version_requirement("mmcv", 2, 1)],
    }
    answers["imported"] = [m for m in ("mmcv", "torch", "mmengine") if m in sys.modules]
    Patcher().add(
        AtomicPatch("my_model.layers.helper", lambda x: "v1 path",
                    requires=[version_requirement("mmcv", 1)]),
        AtomicPatch("my_model.layers.Block.forward", lambda self, x: "v2 path",
                    requires=version_requirement("mmcv", 2)),
    ).apply()
    import my_model.layers
    answers["statuses"] = {r.name.rsplit(".", 1)[-1]: [r.status, r.reason]
                           for r in lazypatch.report() if r.name.startswith("driving_sdk.")}
    print(json.dumps(answers))
    """)
    from lazypatch.decide.requirements import find_version
    mmcv = find_version("mmcv")[0]
    torch_version = find_version("torch")[0]
    assert result["version"] == result["called"] == mmcv and result["bool"] is True
    assert result["v1"] == [False, False] and result["v2"] == [True, True]
    assert result["mmengine"] is True and result["torch"] == torch_version
    assert result["torch_2"] is (torch_version.split(".")[0] == "2")
    minor = int(mmcv.split(".")[1])
    assert result["mmcv_minor"] == [minor == 2, minor == 1]
    assert result["missing"] == [None, False]
    assert result["requirement"] == ["mmcv>=2,<3", "mmcv>=2.1,<2.2"]
    assert result["imported"] == []                      # metadata only, as requires= reads it
    statuses = result["statuses"]
    assert statuses["helper"][0] == "skipped"
    assert f"requires mmcv>=1,<2: installed mmcv is {mmcv}" in statuses["helper"][1]
    assert statuses["forward"][0] == "applied"


@pytest.mark.stack
def test_with_profiling_schedule_drives_the_training_pack_profiler(interpreter):
    profile = interpreter.root / "profile"
    result = interpreter.run_json(f"""
    import json
    import torch
    from lazypatch.driving_sdk.v2.patcher import Patcher
    from lazypatch.registry.training.settings import STATE
    patcher = Patcher().with_profiling({str(profile)!r}, 1, skip_first=1, wait=0, warmup=1,
                                       active=2, repeat=2).apply()
    settings = repr(STATE.profile)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(12):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    patcher.restore()
    print(json.dumps({{"settings": settings, "after": STATE.profile is None}}))
    """, timeout=300)
    assert result["settings"] == ("ProfileSettings(path=" + repr(str(profile)) + ", level=1, "
                                  "skip_first=1, wait=0, warmup=1, active=2, repeat=2)")
    assert result["after"] is True
    import json
    documents = [json.loads(path.read_text()) for path in sorted(profile.glob("*.pt.trace.json"))]
    assert len(documents) == 2                           # repeat=2 cycles, each written
    for document in documents:
        steps = {event["name"] for event in document["traceEvents"]
                 if event.get("name", "").startswith("ProfilerStep#")}
        assert len(steps) == 2                           # active=2 steps recorded per cycle


SUMMARY_SCENARIO = """
import json, logging, sys
from lazypatch.driving_sdk.v2.patcher import (Patcher, Patch, AtomicPatch, configure_summary,
                                           configure_patcher_logging, set_patcher_log_level,
                                           patcher_logger)

class Layers(Patch):
    @classmethod
    def patches(cls, options=None):
        return [AtomicPatch("my_model.layers.helper", lambda x: x),
                AtomicPatch("my_model.layers.legacy", "my_model.nowhere.legacy"),      # fails
                AtomicPatch("my_model.layers.Block.forward", lambda self, x: x,
                            precheck=lambda: False),                                   # skipped
                AtomicPatch("my_model.ops.gaussian.compute_gaussian_weights", print)]  # pending

def run():
    patcher = (Patcher().skip_import("flash_attn", "torch_scatter")
               .inject_import("projects.models.sparsedrive_v1", "V1SparseDrive", "projects.models")
               .add(Layers))
    with patcher:
        import flash_attn, my_model.layers, projects.models
        print("--- block ends ---", file=sys.stderr, flush=True)
    print("--- restored ---", file=sys.stderr, flush=True)
"""


@pytest.mark.parametrize("setup, env, shown", [
    ("", {}, {"Skipped Modules", "Injected Imports", "Applied", "Skipped", "Failed", "Pending"}),
    ("configure_summary(show_skipped=False, show_import_events=False)", {},
     {"Applied", "Failed"}),
    ("configure_patcher_logging(on_apply='silent', on_fail='debug')", {},
     {"Skipped Modules", "Injected Imports", "Skipped", "Failed", "Pending"}),
    ("patcher_logger.configure_summary(show_applied=True).configure(on_apply='silent')", {},
     {"Skipped Modules", "Injected Imports", "Applied", "Skipped", "Failed", "Pending"}),
    ("set_patcher_log_level(logging.WARNING)", {}, set()),
    ("set_patcher_log_level(logging.WARNING); configure_summary(level='WARNING')", {},
     {"Skipped Modules", "Injected Imports", "Applied", "Skipped", "Failed", "Pending"}),
    ("configure_summary(enabled=False)", {}, set()),
    ("", {"RANK": "1"}, set()),
    ("patcher_logger.set_rank(2)", {}, set()),
    ("patcher_logger.set_rank(2).set_rank_from_env()", {"SLURM_PROCID": "0"},
     {"Skipped Modules", "Injected Imports", "Applied", "Skipped", "Failed", "Pending"}),
])
def test_configure_summary_sections_level_and_rank(interpreter, setup, env, shown):
    interpreter.write({**IMPORT_CONTROL, "scenario.py": SUMMARY_SCENARIO})
    result = interpreter.run(f"""
    import warnings
    warnings.simplefilter("ignore")
    from scenario import *
    {setup}
    run()
    """, env=env)
    before, _, after = result.stderr.partition("--- block ends ---")
    block, _, exiting = after.partition("--- restored ---")
    titles = {"Skipped Modules": "  Skipped Modules:", "Injected Imports": "  Injected Imports:",
              "Applied": "  Applied Patches:", "Skipped": "  Skipped Patches:",
              "Failed": "  Failed Patches:", "Pending": "  Pending Patches"}
    assert {key for key, title in titles.items() if title in block} == shown, result.stderr
    assert "PATCHER SUMMARY" not in before + exiting       # once, when the block ends
    if shown:
        level = "WARNING" if "level='WARNING'" in setup else "INFO"
        assert f"[Patcher] {level}: " in block
    if "Applied" in shown:
        assert "    [my_model]\n      Layers:\n        + my_model.layers.helper\n" in block
    if "Skipped" in shown:
        assert "~ my_model.layers.Block.forward (precheck" in block
    if "Failed" in shown:
        assert "! my_model.layers.legacy (" in block
    if "Pending" in shown:
        assert "? my_model.ops.gaussian.compute_gaussian_weights" in block
    if "Skipped Modules" in shown:
        assert "    - flash_attn (imported)\n    - torch_scatter (imported)" in block
        assert "    - projects.models.V1SparseDrive (imported)" in block


def test_summary_goes_to_drivingsdks_logger_and_at_exit_for_a_patcher_left_applied(interpreter):
    interpreter.write({**IMPORT_CONTROL, "scenario.py": SUMMARY_SCENARIO})
    result = interpreter.run("""
    import logging, sys, warnings
    warnings.simplefilter("ignore")
    handler = logging.StreamHandler(sys.stderr)     # the user configures DrivingSDK's logger
    handler.setFormatter(logging.Formatter("LOGGED %(name)s %(levelname)s %(message)s"))
    logging.getLogger("mx_driving.patcher").addHandler(handler)
    from scenario import *
    run()                                         # summary through the logger
    left = Patcher().add(Layers).apply()          # never restored: summary at exit
    import my_model.layers
    print("program ends", flush=True)
    """)
    assert result.stderr.count("PATCHER SUMMARY") == 2
    first, _, second = result.stderr.partition("--- restored ---")
    assert "LOGGED mx_driving.patcher INFO ====" in first and "[Patcher]" not in result.stderr
    assert "LOGGED mx_driving.patcher INFO ====" in second
    assert "+ my_model.layers.helper" in second


@pytest.mark.parametrize("call, error, message", [
    ("check_version('mmcv', major='2')", ValueError, "non-negative integer"),
    ("check_version('mmcv', minor=-1)", ValueError, "non-negative integer"),
    ("get_version('')", ValueError, "a name such as 'mmcv'"),
    ("version_requirement('mmcv', None)", ValueError, "give the major version"),
    ("AtomicPatch('a.b', print, requires=['mmcv>>2'])", ValueError, "requires must be"),
    ("RegistryPatch('a.b', list, requires=[3])", TypeError, "requires must be"),
    ("type('G', (Patch,), {'conflicts_with': 'resnet_maxpool'})", TypeError,
     r"list of patch names such as \['resnet_maxpool'\]"),
    ("type('G', (Patch,), {'conflicts_with': ['G']})", ValueError, "names the group itself"),
    ("type('G', (Patch,), {'legacy_name': 3})", TypeError, "legacy_name must be"),
    ("type('G', (Patch,), {'apply_before_collect': 'yes'})", TypeError, "True or False"),
    ("configure_summary(level='LOUD')", ValueError, "logging level such as logging.INFO"),
    ("configure_summary(show_applied='yes')", TypeError, "True, False or None"),
    ("Patcher().with_profiling('prof', 1, active=0)", ValueError, "active must be an integer >= 1"),
    ("Patcher().with_profiling('prof', wait=-1)", ValueError, "wait must be an integer >= 0"),
    ("Patcher().with_profiling('prof', every=5)", TypeError, "every"),
    ("Patcher().enable(3)", TypeError, "expected a patch name"),
    ("patcher_logger.set_rank(-1)", ValueError, "integer >= 0"),
])
def test_bad_input_of_the_added_features_fails_at_the_call(forget_new_patches, call, error,
                                                           message):
    from lazypatch.driving_sdk.v2 import patcher as v2
    with pytest.raises(error, match=message):
        eval(call, vars(v2))


def test_configure_patcher_logging_sets_nothing_when_one_value_is_bad(forget_new_patches):
    from lazypatch.decide.events import action_for
    from lazypatch.driving_sdk.v2 import summary
    from lazypatch.driving_sdk.v2.patcher import AtomicPatch, Patcher, configure_patcher_logging
    from lazypatch.state import STATE
    patcher = Patcher().add(AtomicPatch("never_imported_pkg.f", print)).apply()
    [name] = patcher.names
    patch = STATE.catalog.by_name[name]
    logger = summary.patcher_logger
    before = logger._on_apply, logger._on_fail, action_for(patch, "apply")
    with pytest.raises(ValueError, match="'loud' is not an action"):
        configure_patcher_logging(on_apply="silent", on_fail="loud")
    # on_apply was not set either: not on the logger (the summary's sections), not in the engine
    assert (logger._on_apply, logger._on_fail, action_for(patch, "apply")) == before
    patcher.restore()


def test_get_info_names_original_and_replacement_and_imports_nothing(interpreter):
    interpreter.write(MODEL)
    result = interpreter.run_json("""
    import json, sys
    from lazypatch.driving_sdk.v2.patcher import AtomicPatch

    def npu_helper(x):
        return ("npu helper", x)

    waiting = AtomicPatch("my_model.layers.helper", npu_helper)
    by_string = AtomicPatch("my_model.layers.helper", "my_model.ops.gaussian:compute_gaussian_weights")
    before = [waiting.get_info(), by_string.get_info(), "my_model" in sys.modules]
    import my_model.layers
    waiting.apply()
    print(json.dumps({"before": before, "applied": waiting.get_info(),
                      "diff": waiting.get_info(show_diff=True),
                      "string_module_imported": "my_model.ops" in sys.modules}))
    """)
    # Nothing imported to describe a patch: the original is <missing> until its module is.
    assert result["before"] == [
        "my_model.layers.helper: <missing> -> npu_helper",
        "my_model.layers.helper: <missing> -> my_model.ops.gaussian:compute_gaussian_weights",
        False]
    # Once applied, the original is the value before the patch, not the replacement.
    assert result["applied"] == "my_model.layers.helper: helper -> npu_helper"
    diff = result["diff"].splitlines()
    assert diff[0] == result["applied"]
    assert diff[1:3] == ["--- original: helper", "+++ replacement: npu_helper"]
    assert '-    return ("cuda helper", x)' in diff and '+    return ("npu helper", x)' in diff
    assert result["string_module_imported"] is False


def test_patch_group_repr_and_a_bad_add_say_what_they_are(interpreter):
    result = interpreter.run_json("""
    import json
    from lazypatch.driving_sdk.v2.patcher import Patcher, Patch

    class Named(Patch):
        name = "my_group"

        @classmethod
        def patches(cls, options=None):
            return []

    class Unnamed(Named):
        name = None

    try:
        Patcher().add("not a patch")
        error = None
    except TypeError as refused:
        error = str(refused)
    print(json.dumps({"named": repr(Named()), "unnamed": repr(Unnamed()), "error": error}))
    """)
    assert result["named"] == "<Patch group Named name='my_group'>"
    assert result["unnamed"] == "<Patch group Unnamed name='Unnamed'>"
    assert result["error"].startswith("Patcher.add: Expected Patch class or BasePatch instance")
    assert result["error"].endswith("got 'not a patch'")


def test_replace_import_with_a_module_and_overrides(interpreter):
    interpreter.write({"npu_shim.py": """
        VALUE = 42

        def func(x):
            return x * 3
    """})
    result = interpreter.run_json("""
    import json, sys
    from lazypatch.driving_sdk.v2.patcher import Patcher

    patcher = Patcher().replace_import("cuda_only_ext", "npu_shim", VALUE=100)
    patcher.apply()
    import cuda_only_ext
    try:
        Patcher().replace_import("other_ext", exports={"VALUE": 1}, VALUE=2)
        conflict = None
    except ValueError as refused:
        conflict = str(refused)
    seen = [cuda_only_ext.VALUE, cuda_only_ext.func(5), sys.modules["npu_shim"].VALUE]
    patcher.restore()
    print(json.dumps({"seen": seen, "conflict": conflict,
                      "after": "cuda_only_ext" in sys.modules}))
    """)
    # The shim's names, VALUE overridden; the shim itself is left as it is.
    assert result["seen"] == [100, 15, 42]
    assert result["conflict"] == ("replace_import('other_ext'): VALUE given both in exports= "
                                  "and as a keyword; give each name once")
    assert result["after"] is False


def test_patcher_logger_instances_hold_their_own_actions_rank_and_buffer():
    """DrivingSDK's PatcherLogger: each instance its own event actions (info, info,
    warning), rank (only rank 0 logs; exception acts on every rank) and buffer for
    flush_summary; the module's patcher_logger is the one configure_patcher_logging sets."""
    import io
    import logging

    from lazypatch.driving_sdk.v2.summary import PatcherLogger, patcher_logger
    from lazypatch.errors import PatchError
    logger = PatcherLogger()
    stream = io.StringIO()
    logger._logger = logging.getLogger("test_compat_driving_sdk2.patcher_logger")
    logger._logger.handlers = [logging.StreamHandler(stream)]
    logger._logger.propagate = False
    logger.set_level(logging.DEBUG).set_rank(0).set_buffer_enabled(False)
    assert (logger._on_apply, logger._on_skip, logger._on_fail) == ("info", "info", "warning")
    logger.configure(on_skip="silent")
    logger.applied("pkg.f")
    logger.skipped("pkg.g", "precheck")
    logger.failed("pkg.h", "boom")
    assert stream.getvalue().splitlines() == ["Applied: pkg.f", "Failed: pkg.h (boom)"]
    assert patcher_logger._on_skip == "info"            # another instance: untouched
    logger.set_rank(1).configure(on_fail="exception")
    logger.applied("pkg.quiet")
    with pytest.raises(PatchError, match="Failed: pkg.h"):
        logger.failed("pkg.h")                          # every rank raises
    assert "pkg.quiet" not in stream.getvalue()
    logger.configure(on_error="exit")
    with pytest.raises(SystemExit):
        logger.error("unexpected")                      # error() acts as on_error says
    buffered = PatcherLogger().set_rank(0).set_buffer_enabled(True)
    buffered.applied("mmcv.ops.f", package="mmcv", patch_name="f_patch")
    assert "=== MX-DRIVING PATCHER SUMMARY ===" in buffered.buffered_summary()
    assert "    [mmcv]\n      f_patch:\n        + mmcv.ops.f" in buffered.buffered_summary()
    buffered._logger = logger._logger
    buffered.flush_summary()
    assert buffered._applied_patches == [] and "+ mmcv.ops.f" in stream.getvalue()


def test_late_replace_import_and_stacked_with_imports_warn_on_the_patcher_logger(caplog):
    import sys
    import types

    from lazypatch.driving_sdk.v2.patcher import Patcher, with_imports
    from lazypatch.driving_sdk.v2.summary import patcher_logger
    sys.modules["already_imported_for_replace"] = types.ModuleType("already_imported_for_replace")
    try:
        # DrivingSDK's logger does not propagate (as DrivingSDK sets it): listen on it
        patcher_logger._logger.addHandler(caplog.handler)
        with caplog.at_level("WARNING", logger="mx_driving.patcher"):
            Patcher().replace_import("already_imported_for_replace", "json")

            @with_imports("json")
            @with_imports(("os", "sep"))
            def stacked():
                return sep  # noqa: F821
        texts = [record.getMessage() for record in caplog.records]
        assert any("replace_import skipped for already_imported_for_replace" in text and
                   "Call replace_import() before importing" in text for text in texts)
        assert any("stacking multiple @with_imports on 'stacked'" in text for text in texts)
        assert "already_imported_for_replace -> json (skipped: already imported)" in \
            patcher_logger._replaced_imports
    finally:
        patcher_logger._logger.removeHandler(caplog.handler)
        del sys.modules["already_imported_for_replace"]
        patcher_logger._replaced_imports.clear()


def test_basepatch_is_abstract_and_a_drivingsdk_subclass_runs_its_own_apply(forget_new_patches):
    from lazypatch.driving_sdk.v2.patcher import BasePatch, Patcher
    from lazypatch.driving_sdk.v2.results import PatchResult, PatchStatus
    with pytest.raises(TypeError):
        BasePatch()

    class NoApply(BasePatch):
        @property
        def name(self):
            return "no_apply"
    with pytest.raises(TypeError):
        NoApply()
    ran = []

    class OwnApply(BasePatch):       # written for DrivingSDK: it changes things itself
        @property
        def name(self):
            return "own_apply"

        def apply(self):
            ran.append(True)
            return PatchResult(PatchStatus.APPLIED, self.name, "")

    patcher = Patcher().add(OwnApply())
    assert [group for _, group in patcher._collect_all_patches()] == ["own_apply"]
    patcher.apply()
    assert ran == [True] and patcher.names == []     # nothing of lazypatch's to undo
    patcher.restore()


def test_registry_patch_on_an_object_without_an_entry_table_says_it_is_not_undoable(interpreter):
    """DrivingSDK calls ``register_module`` on any object that has one; so does this
    layer, and the report says that change cannot be undone (no table to restore)."""
    interpreter.write({"reg_host.py": """
class OwnRegistry:
    def __init__(self):
        self.calls = []

    def register_module(self, name=None, force=False, module=None):
        self.calls.append([name, force, module.__name__])
        return module

REG = OwnRegistry()
BAD = "not a registry"
"""})
    result = interpreter.run_json("""
import json
import lazypatch
from lazypatch.driving_sdk.v2.patcher import Patcher, RegistryPatch

class NpuHead:
    pass

patcher = Patcher().add(RegistryPatch("reg_host.REG", NpuHead, name="Head"),
                        RegistryPatch("reg_host.BAD", NpuHead))
patcher.apply()
import reg_host
rows = {r.name.split(".", 1)[1]: [r.status, r.reason, r.untracked_changes, r.undoable]
        for r in lazypatch.report() if r.name.startswith("driving_sdk.reg_host")}
print(json.dumps({"calls": reg_host.REG.calls, "rows": rows}))
""")
    assert result["calls"] == [["Head", True, "NpuHead"]]
    status, _, untracked, undoable = result["rows"]["reg_host.REG.Head"]
    assert status == "applied" and undoable is False
    assert "register_module(name='Head')" in untracked[0]
    assert result["rows"]["reg_host.BAD.NpuHead"][:2] == [
        "skipped", "invalid registry: reg_host.BAD is str, which has no register_module"]


def test_with_imports_function_reads_and_assigns_its_modules_globals_live(interpreter):
    """A ``with_imports`` replacement sees later assignments to its module's globals, and
    ``global X; X += 1`` inside it changes the module; the imported names stay out of it."""
    interpreter.write({"host_module.py": """
from lazypatch.driving_sdk.v2.patcher import with_imports

COUNTER = 0
SCALE = 1


@with_imports(("math", "sqrt"), "os.path")
def scaled_root(x):
    global COUNTER
    COUNTER += 1
    return sqrt(x) * SCALE, path.sep
"""})
    result = interpreter.run_json("""
import json
import host_module
first = host_module.scaled_root(16)
host_module.SCALE = 10                 # assigned after the first call
second = host_module.scaled_root(16)
print(json.dumps({"first": first, "second": second, "counter": host_module.COUNTER,
                  "leaked": [name for name in ("sqrt", "path") if hasattr(host_module, name)]}))
""")
    assert result["first"][0] == 4.0 and result["second"][0] == 40.0
    assert result["counter"] == 2
    assert result["leaked"] == []


PANOOCC_STYLE_GROUP = {
    "occ_model/__init__.py": "",
    "occ_model/heads.py": """
from mmengine.registry import Registry
HEADS = Registry("heads")


@HEADS.register_module()
class OccHead:
    def forward(self):
        return "cuda"
""",
    "occ_port.py": """
from lazypatch.driving_sdk.v2.patcher import AtomicPatch, Patch


def _build_head():
    # as PanoOcc's patch file does: the replacement is built (and registered) in patches()
    from occ_model.heads import HEADS, OccHead

    @HEADS.register_module(force=True)
    class OccHead(OccHead):
        def forward(self):
            return "npu"
    return OccHead


class OccHeadPatch(Patch):
    name = "occ_head"

    @classmethod
    def patches(cls, options=None):
        return [AtomicPatch("occ_model.heads.OccHead", _build_head())]
""",
}


@pytest.mark.stack   # needs mmengine
@pytest.mark.parametrize("imported_first", [False, True])
def test_group_whose_patches_imports_its_target_waits_for_it_and_is_undone(interpreter,
                                                                           imported_first):
    """PanoOcc's ``patches()`` imports its model and registers its head with force=True:
    ``apply()`` imports nothing (the group is collected when the program imports the
    model), and ``restore()`` takes the registration back."""
    interpreter.write(PANOOCC_STYLE_GROUP)
    result = interpreter.run_json(f"""
import json, sys
import lazypatch
if {imported_first}:
    import occ_model.heads
from lazypatch.driving_sdk.v2.patcher import Patcher
from occ_port import OccHeadPatch
patcher = Patcher().add(OccHeadPatch)
patcher.apply()
imported_by_apply = "occ_model.heads" in sys.modules and not {imported_first}
row = {{r.name: r.status for r in lazypatch.report()}}.get("driving_sdk.occ_head.patches")
import occ_model.heads
inside = [occ_model.heads.HEADS.get("OccHead")().forward(), occ_model.heads.OccHead().forward()]
patcher.restore()
after = [occ_model.heads.HEADS.get("OccHead")().forward(), occ_model.heads.OccHead().forward()]
print(json.dumps({{"imported_by_apply": imported_by_apply, "row": row, "inside": inside,
                  "after": after}}))
""")
    assert result["imported_by_apply"] is False
    assert result["row"] == ("applied" if imported_first else "pending")
    assert result["inside"] == ["npu", "npu"]
    assert result["after"] == ["cuda", "cuda"]


def test_group_whose_patches_imports_a_module_below_a_missing_projects_stand_in_waits(
        interpreter):
    """PanoOcc's patch file run outside its project's checkout: ``skip_import`` of a
    module inside ``projects`` makes ``projects`` an empty stand-in, and a group whose
    ``patches()`` imports ``projects.plugin.core`` waits for that module (listed, with
    the reason) instead of failing on the stand-in."""
    interpreter.write({"occ_port.py": '''
from lazypatch.driving_sdk.v2.patcher import AtomicPatch, Patch

class CoreHeadPatch(Patch):
    name = "core_head"

    @staticmethod
    def patches(options=None):
        from projects.plugin.core import Head
        return [AtomicPatch("projects.plugin.core.Head.forward", lambda self: "npu")]
'''})
    result = interpreter.run_json("""
import json, logging
logging.disable(logging.CRITICAL)
import lazypatch
from lazypatch.driving_sdk.v2.patcher import Patcher
from occ_port import CoreHeadPatch
patcher = Patcher().add(CoreHeadPatch)
patcher.skip_import("projects.plugin.backbones.unused")
patcher.apply()
rows = {r.name: (r.status, r.target, r.reason) for r in lazypatch.report()}
print(json.dumps(rows["driving_sdk.core_head.patches"]))
""")
    status, target, reason = result
    assert (status, target) == ("pending", "projects.plugin.core")

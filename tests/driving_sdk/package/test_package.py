"""`from mx_driving.patcher import ...` as DrivingSDK's users write it, on lazypatch: the
package provided where DrivingSDK is not installed, an installed one left in charge
(unless LAZYPATCH_DRIVING_SDK=lazypatch), the NPU device handling on an Ascend host
(a FAKE torch_npu here), and the per-patch API's results. Each in a fresh interpreter."""

from __future__ import annotations

# A migration file in DrivingSDK's style, its import lines unchanged.
MIGRATION = {
    "model_ops/__init__.py": "",
    "model_ops/gaussian.py": "def weights(x):\n    return ('cuda', x)\n",
    "npu_ops.py": "def weights(x):\n    return ('npu', x)\n",
    "migration_patch.py": """
from mx_driving.patcher import (AtomicPatch, Patch, Patcher, PatchStatus, ResNetFP16,
                                ResNetMaxPool, default_patcher, numpy_type, msda,
                                PatcherBuilder, ensure_mmcv_version)


class GaussianPatch(Patch):
    name = "gaussian"

    @classmethod
    def patches(cls, options=None):
        return [AtomicPatch("model_ops.gaussian.weights", "npu_ops.weights")]


patcher = Patcher().add(GaussianPatch)
""",
}


def test_mx_driving_patcher_is_provided_lazily_where_drivingsdk_is_absent(interpreter):
    interpreter.write(MIGRATION)
    result = interpreter.run_json("""
import json, sys
import lazypatch.auto
before = "mx_driving" in sys.modules
import migration_patch
import mx_driving
with migration_patch.patcher:
    from model_ops.gaussian import weights     # imported after apply(): patched lazily
    inside = weights(1)
record = next(r for r in lazypatch.report() if r["name"] == "driving_sdk_api.mx_driving_patcher")
import model_ops.gaussian
print(json.dumps({"before": before, "inside": inside,
                  "after": model_ops.gaussian.weights(1),
                  "package": mx_driving.__path__[0].endswith("package"),
                  "status": record["status"]}))
""")
    assert result["before"] is False           # nothing of it until the program imports it
    assert result["inside"] == ["npu", 1] and result["after"] == ["cuda", 1]
    assert result["package"] and result["status"] == "applied"


FAKE_INSTALLED = {   # a FAKE DrivingSDK: its NPU operators cannot exist here
    "site/mx_driving/__init__.py": "def deformable_aggregation(*args):\n    return 'npu kernel'\n",
    "site/mx_driving/patcher/__init__.py": "WHO = 'the installed DrivingSDK'\n",
}


def test_fake_installed_drivingsdk_stays_in_charge_unless_lazypatch_is_chosen(interpreter):
    interpreter.write(FAKE_INSTALLED)
    code = """
import json, sys
import lazypatch.auto
import mx_driving.patcher as patcher
record = next(r for r in lazypatch.report() if r["name"] == "driving_sdk_api.mx_driving_patcher")
import mx_driving
print(json.dumps({"who": getattr(patcher, "WHO", "lazypatch"), "status": record["status"],
                  "has_api": hasattr(patcher, "AtomicPatch"),
                  "kernel": mx_driving.deformable_aggregation()}))
"""
    site = str(interpreter.root / "site")
    theirs = interpreter.run_json(code, env={"PYTHONPATH": site})
    assert theirs == {"who": "the installed DrivingSDK", "status": "skipped", "has_api": False,
                      "kernel": "npu kernel"}
    ours = interpreter.run_json(code, env={"PYTHONPATH": site, "LAZYPATCH_DRIVING_SDK": "lazypatch"})
    assert ours["who"] == "lazypatch" and ours["has_api"] and ours["status"] == "applied"
    assert ours["kernel"] == "npu kernel"     # DrivingSDK's operators stay its own


FAKE_OPERATORS_WITHOUT_PATCHER = {   # a FAKE DrivingSDK built without its patcher
    "site/mx_driving/__init__.py": "def deformable_aggregation(*args):\n    return 'npu kernel'\n",
}


def test_fake_installed_operators_without_a_patcher_get_lazypatchs_with_no_setting(interpreter):
    interpreter.write(FAKE_OPERATORS_WITHOUT_PATCHER)
    result = interpreter.run_json("""
import json, sys
import lazypatch.auto
import lazypatch
from mx_driving.patcher import AtomicPatch, PatcherBuilder
import mx_driving
rows = {r["name"]: [r["status"], r["reason"]] for r in lazypatch.report()
        if r["name"].startswith("driving_sdk_api.")}
kernel = mx_driving.deformable_aggregation()
lazypatch.unpatch_all()
print(json.dumps({"rows": rows, "kernel": kernel, "path": mx_driving.__path__,
                  "patcher": sys.modules["mx_driving.patcher"].__name__}))
""", env={"PYTHONPATH": str(interpreter.root / "site")})
    assert result["kernel"] == "npu kernel"             # DrivingSDK's operators stay its own
    assert result["rows"]["driving_sdk_api.mx_driving_patcher_beside_operators"] == ["applied", ""]
    assert result["rows"]["driving_sdk_api.mx_driving_patcher"][0] == "skipped"
    assert result["path"] == [str(interpreter.root / "site" / "mx_driving")]   # undone exactly


def test_fake_installed_patcher_is_not_shadowed_and_the_report_says_why(interpreter):
    interpreter.write(FAKE_INSTALLED)
    result = interpreter.run_json("""
import json
import lazypatch.auto
import lazypatch
import mx_driving.patcher as patcher
row = next(r for r in lazypatch.report()
           if r["name"] == "driving_sdk_api.mx_driving_patcher_beside_operators")
print(json.dumps({"who": getattr(patcher, "WHO", "lazypatch"), "row": [row["status"], row["reason"]]}))
""", env={"PYTHONPATH": str(interpreter.root / "site")})
    assert result["who"] == "the installed DrivingSDK"
    assert result["row"][0] == "skipped" and "LAZYPATCH_DRIVING_SDK=lazypatch" in result["row"][1]


FAKE_TORCH_NPU = {"npu_site/torch_npu/__init__.py": "# FAKE torch_npu: found, never used\n"}


def test_fake_ascend_host_importing_the_patcher_turns_the_device_pack_on(interpreter):
    interpreter.write(FAKE_TORCH_NPU)
    code = """
import json
import lazypatch.auto
import mx_driving.patcher
device = [r for r in lazypatch.report() if r["name"].startswith("device.")]
print(json.dumps({"device_patches": len(device), "enabled": sum(r["enabled"] for r in device)}))
"""
    on_npu = interpreter.run_json(code, env={"PYTHONPATH": str(interpreter.root / "npu_site")})
    assert on_npu["device_patches"] > 0 and on_npu["enabled"] == on_npu["device_patches"]
    on_cpu = interpreter.run_json(code)
    assert on_cpu["enabled"] == 0


def test_per_patch_apply_returns_drivingsdk_results(interpreter):
    interpreter.write(MIGRATION)
    result = interpreter.run_json("""
import json
import lazypatch.auto
from mx_driving.patcher import AtomicPatch, LegacyPatch, PatchStatus, PatchResult, RegistryPatch
import model_ops.gaussian
applied = AtomicPatch("model_ops.gaussian.weights", "npu_ops.weights").apply()
waiting = AtomicPatch("colorsys.rgb_to_yiq", print).apply()     # installed, not imported
missing = AtomicPatch("not_installed_anywhere.f", print).apply()
missing_registry = RegistryPatch("not_installed_anywhere.MODELS", dict).apply()
def legacy(module, options):
    module.EXTRA = options["value"]
legacy_result = LegacyPatch(legacy, {"value": 7}, target_module="model_ops").apply()
import model_ops
print(json.dumps({"applied": [applied.status.value, applied.name, applied.module],
                  "waiting": [waiting.status.value, waiting.reason],
                  "missing": [missing.status.value, missing.reason],
                  "missing_registry": missing_registry.reason,
                  "registry_info": [RegistryPatch("pkg.MODELS", dict).get_info(),
                                    RegistryPatch("pkg.MODELS", name="X",
                                                  module_factory=dict).get_info()],
                  "legacy": legacy_result.status.value, "extra": model_ops.EXTRA,
                  "is_result": isinstance(applied, PatchResult),
                  "weights": model_ops.gaussian.weights(2)}))
""")
    assert result["applied"] == ["applied", "model_ops.gaussian.weights", "model_ops"]
    assert result["waiting"] == ["skipped", "colorsys not imported yet: applies when it is imported"]
    # DrivingSDK's words where nothing is installed under the name; the patch still waits.
    assert result["missing"] == ["skipped", "module not found: not_installed_anywhere is not "
                                            "installed (the patch applies if it is imported later)"]
    assert result["missing_registry"].startswith("registry not found: not_installed_anywhere ")
    assert result["registry_info"] == ["pkg.MODELS.dict: registers dict",
                                       "pkg.MODELS.X: registers <factory>"]
    assert result["legacy"] == "applied" and result["extra"] == 7
    assert result["is_result"] and result["weights"] == ["npu", 2]


def test_a_runtime_check_that_raises_keeps_the_original_and_says_so_once(interpreter):
    interpreter.write({"checked_target.py": "def compute(x):\n    return x * 2\n"})
    result = interpreter.run("""
import json, warnings
import lazypatch.auto
from mx_driving.patcher import AtomicPatch
import checked_target

def check(x):
    if x == 0:
        raise ValueError("cannot check zero")
    return x > 5

AtomicPatch("checked_target.compute", lambda x: x * 100, runtime_check=check).apply()
print(json.dumps([checked_target.compute(10), checked_target.compute(0),
                  checked_target.compute(0), checked_target.compute(1)]))
""")
    assert result.stdout.strip().splitlines()[-1] == "[1000, 0, 0, 2]"
    assert result.stderr.count("raised ValueError: cannot check zero") == 1, result.stderr


def test_with_imports_binds_every_listed_name_as_drivingsdk_does(interpreter):
    interpreter.write({"names_source.py": "A, B, C, D = 1, 2, 3, 4\n"})
    result = interpreter.run_json("""
import json
import lazypatch.auto
from mx_driving.patcher import with_imports

@with_imports(("names_source", "A", "B", "C", "D", "MISSING"), "os.path",
              ("names_source", "A as first"))
def use():
    return [A, B, C, D, first, path.sep]      # noqa: F821 (bound on the first call)

print(json.dumps({"values": use(), "module_untouched": "A" not in globals()}))
""")
    assert result == {"values": [1, 2, 3, 4, 1, "/"], "module_untouched": True}


def test_a_precheck_waits_for_its_module_and_does_not_make_the_patch_eager(interpreter):
    """A patch on pkg.sub.f declared while only pkg is imported: its precheck (which
    imports pkg.sub itself) is asked when pkg.sub is imported, not at once."""
    interpreter.write({"eager_pkg/__init__.py": "",
                       "eager_pkg/sub.py": "def f():\n    return 'original'\n"})
    result = interpreter.run_json("""
import json, os, sys
import lazypatch.auto
import eager_pkg
from mx_driving.patcher import AtomicPatch

asked = []
def precheck():
    import eager_pkg.sub            # a precheck that reaches for its own target
    asked.append(True)
    return True

AtomicPatch("eager_pkg.sub.f", lambda: "patched", precheck=precheck).apply()
before = ["eager_pkg.sub" in sys.modules, len(asked)]
import eager_pkg.sub
print(json.dumps({"before": before, "after": eager_pkg.sub.f(), "asked": len(asked)}))
""")
    assert result["before"] == [False, 0]
    assert result["after"] == "patched" and result["asked"] == 1


def test_builtin_groups_have_drivingsdk_shape_and_the_packs_do_the_work(interpreter):
    """DrivingSDK's built-in classes list its patches (targets, kinds, counts); adding one
    to a Patcher turns on the lazypatch pack doing that work, undone by restore() (a pack
    already on before stays on)."""
    code = """
import json, sys
import lazypatch.auto
if not os.environ.get("ALREADY_ON"):
    lazypatch.disable("numpy_compat")    # off: the Patcher turns it on, and off again
from mx_driving.patcher import (AtomicPatch, LegacyPatch, NumpyCompat, OptimizerHooks,
                                Patcher, RegistryPatch, TensorIndex, TorchScatter)
shape = {"index": [isinstance(p, AtomicPatch)
                   for p in TensorIndex.patches()] + [p.target for p in TensorIndex.patches()],
         "hooks": [isinstance(p, RegistryPatch) and p.registry for p in OptimizerHooks.patches()],
         "scatter": sorted(p.target for p in TorchScatter.patches()),
         "numpy": [isinstance(p, LegacyPatch) and p.target_module for p in NumpyCompat.patches()]}
patcher = Patcher().add(NumpyCompat)
with patcher:
    import numpy
    inside = numpy.float is float
    status = {r["name"]: r["status"] for r in lazypatch.report()}
collected = patcher._collect_all_patches()
print(json.dumps({"shape": shape, "inside": inside, "after": hasattr(numpy, "float"),
                  "type_aliases": status.get("numpy_compat.type_aliases"),
                  "collected": [group for _, group in collected],
                  "cached": collected is patcher._collect_all_patches(),
                  "refreshed": collected is not patcher._collect_all_patches(force_refresh=True)}))
"""
    result = interpreter.run_json(code.replace("import json, sys", "import json, os, sys"))
    assert result["shape"]["index"] == [True, "torch.Tensor.__getitem__"]
    assert result["shape"]["hooks"] == ["mmcv.runner.hooks.optimizer.HOOKS"] * 4
    assert result["shape"]["scatter"] == sorted(
        f"{module}.scatter_{op}" for module in ("torch_scatter", "torch_scatter.scatter")
        for op in ("sum", "mean", "max"))
    assert result["shape"]["numpy"] == ["numpy"]
    # numpy 1.24 removed np.float: the numpy_compat pack brings it back while the patcher is in force
    assert result["inside"] is True and result["type_aliases"] == "applied"
    assert result["after"] is False
    assert result["collected"] == ["numpy_compat"]
    assert result["cached"] and result["refreshed"]
    already_on = interpreter.run_json(code.replace("import json, sys", "import json, os, sys"),
                                      env={"ALREADY_ON": "1"})
    assert already_on["inside"] is True and already_on["after"] is True


def test_errors_of_a_patch_s_own_callbacks_and_a_missing_target_read_as_drivingsdk_words_them(
        interpreter):
    interpreter.write({"callback_target.py": "class Thing:\n    def run(self):\n"
                                             "        return 'original'\n\ndef f():\n"
                                             "    return 'original'\n"})
    result = interpreter.run_json("""
import json
import lazypatch.auto
import callback_target
from mx_driving.patcher import AtomicPatch, PatchStatus

def boom(*args):
    raise RuntimeError("boom")

results = {
    "no": AtomicPatch("callback_target.f", lambda: 1, precheck=lambda: False).apply(),
    "precheck": AtomicPatch("callback_target.f", lambda: 1, precheck=boom).apply(),
    "replacement_wrapper": AtomicPatch("callback_target.f", lambda: 1,
                                       replacement_wrapper=boom).apply(),
    "target_wrapper": AtomicPatch("callback_target.Thing.run", target_wrapper=boom).apply(),
    "missing": AtomicPatch("callback_target.Thing.renamed", lambda self: 1).apply(),
}
print(json.dumps({key: [result.status.value, result.reason] for key, result in results.items()}
                 | {"untouched": [callback_target.f(), callback_target.Thing().run()]}))
""")
    assert result["no"] == ["skipped", "precheck failed"]
    # another version of the target: skipped, as DrivingSDK skips it (not failed)
    assert result["missing"] == ["skipped", "target not found: callback_target.Thing.renamed"]
    for callback in ("precheck", "replacement_wrapper", "target_wrapper"):
        assert result[callback] == ["failed", f"RuntimeError: {callback} error: boom"]
    assert result["untouched"] == ["original", "original"]


def test_apply_leaves_the_outcomes_it_decided_in_patcher_logger_buffers(interpreter):
    """DrivingSDK's apply() leaves each outcome in patcher_logger's buffers (its own code
    reads them); here those decided by apply() itself, the summary clearing them."""
    interpreter.write({"decided_now.py": "def f():\n    return 1\n"})
    result = interpreter.run_json("""
import json
import lazypatch.auto
import decided_now
from mx_driving.patcher import AtomicPatch, Patch, Patcher, patcher_logger

class Group(Patch):
    name = "group"

    @classmethod
    def patches(cls, options=None):
        return [AtomicPatch("decided_now.f", lambda: 2),
                AtomicPatch("decided_now.gone", lambda: 3),
                AtomicPatch("not_imported_yet_anywhere.f", print)]

patcher = Patcher().add(Group).apply()
buffered = {"applied": [(i.target, i.package, i.patch_name) for i in patcher_logger._applied_patches],
            "skipped": [(i.target, i.reason) for i in patcher_logger._skipped_patches]}
patcher.restore()
print(json.dumps(buffered | {"after": len(patcher_logger._applied_patches)}))
""")
    assert result["applied"] == [["decided_now.f", "decided_now", "group"]]
    assert result["skipped"] == [["decided_now.gone", "target not found: decided_now.gone"]]
    assert result["after"] == 0


def test_a_target_whose_owner_is_a_dict_replaces_that_key_and_is_undone(interpreter):
    """DrivingSDK's targets reach into dicts (``MODELS._module_dict.SubMConv3d``)."""
    interpreter.write({"keyed_registry.py": "class Registry:\n    def __init__(self):\n"
                                            "        self._module_dict = {'Conv': 'cuda conv',"
                                            " 'Pool': 'cuda pool'}\n\nMODELS = Registry()\n"})
    result = interpreter.run_json("""
import json
import lazypatch.auto
from mx_driving.patcher import AtomicPatch, Patcher
patcher = Patcher().add(
    AtomicPatch("keyed_registry.MODELS._module_dict.Conv", ["npu conv"]),
    AtomicPatch("keyed_registry.MODELS._module_dict.Pool", target_wrapper=lambda old: old.upper()),
    AtomicPatch("keyed_registry.MODELS._module_dict.Gone", ["npu gone"]))
with patcher:
    import keyed_registry
    inside = dict(keyed_registry.MODELS._module_dict)
print(json.dumps({"inside": inside, "after": keyed_registry.MODELS._module_dict}))
""")
    assert result["inside"] == {"Conv": ["npu conv"], "Pool": "CUDA POOL"}   # no "Gone" added
    assert result["after"] == {"Conv": "cuda conv", "Pool": "cuda pool"}


def test_pseudo_sampler_replacement_runs_the_replaced_sample_without_unique(interpreter):
    """PseudoSampler._sample_replacement as a class's sample (DrivingSDK's AtomicPatch)
    runs the sample it replaced, recompiled without unique; so does the 1.0 function."""
    interpreter.write({"fake_sampler.py": """
class Indices(list):
    def squeeze(self, dim):
        return self

    def unique(self):
        raise AssertionError("unique() is the host sort the patch removes")


def nonzero(values):
    return Indices(index for index, value in enumerate(values) if value)


class Sampler:
    def sample(self, assigned):
        positive = nonzero(assigned).squeeze(-1).unique()
        return list(positive)
"""})
    result = interpreter.run_json("""
import json, types
import lazypatch.auto
import fake_sampler
from mx_driving.patcher import AtomicPatch, PseudoSampler, pseudo_sampler
original = fake_sampler.Sampler.sample
AtomicPatch("fake_sampler.Sampler.sample", PseudoSampler._sample_replacement).apply()
through_lazypatch = fake_sampler.Sampler().sample([0, 3, 0, 1])
fake_sampler.Sampler.sample = original
# the 1.0 function on a module object: its PseudoSampler's own sample, rebuilt
mmdet = types.ModuleType("mmdet")
mmdet.core = types.SimpleNamespace(bbox=types.SimpleNamespace(samplers=types.SimpleNamespace(
    pseudo_sampler=types.SimpleNamespace(PseudoSampler=fake_sampler.Sampler))))
pseudo_sampler(mmdet, {})
print(json.dumps([through_lazypatch, fake_sampler.Sampler().sample([2, 0, 5])]))
""")
    assert result == [[1, 3], [0, 2]]


def test_without_activation_a_patch_file_stops_at_mx_driving_as_the_docs_show(interpreter):
    # docs/driving_sdk.md "How to activate": the provided mx_driving exists only in a process
    # where lazypatch is active; without it, a patch file's first import fails.
    result = interpreter.run("from mx_driving.patcher import PatcherBuilder\n", check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == \
        "ModuleNotFoundError: No module named 'mx_driving'"
    activated = interpreter.run("import lazypatch.auto\n"
                                "from mx_driving.patcher import PatcherBuilder\n"
                                "print(PatcherBuilder.__name__)\n")
    assert activated.stdout.strip() == "PatcherBuilder"


def test_from_import_of_a_missing_operator_names_lazypatchs_mx_driving_and_the_pack(interpreter):
    # `from mx_driving import npu_x` fails in the interpreter's own code (an ImportError
    # naming the module's location), not through the module's __getattr__.
    result = interpreter.run("import lazypatch.auto\n"
                             "from mx_driving import npu_deformable_aggregation\n", check=False)
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: cannot import name 'npu_deformable_aggregation'")
    assert "unknown location" not in last and "--enable npu_stand_in" in last

"""Import boundaries, programs run by runpy, hand-placed modules and patches by dotted path.

Every scenario writes real packages to a temporary directory and runs a fresh
interpreter on them (``interpreter`` fixture), so the finders, loaders and
runpy are CPython's own.
"""

from __future__ import annotations

import json
import sys

import pytest

# --- modules placed into sys.modules by hand ---------------------------------


def test_notify_module_loaded_applies_patches_to_a_hand_made_module_and_unpatch_undoes(interpreter):
    result = interpreter.run_json("""
    import json, sys, types, lazypatch

    @lazypatch.when_imported("handmade.tools", name="tools-patch")
    def add(module, patch):
        patch.setattr(module, "value", "patched")

    module = types.ModuleType("handmade.tools")
    module.value = "original"
    sys.modules["handmade.tools"] = module          # as DrivingSDK 1.0 tells users to do
    before = module.value                            # no import happened: nothing fired
    applied = lazypatch.notify_module_loaded(module)
    again = lazypatch.notify_module_loaded(module)   # idempotent: at most once per object
    after = module.value
    lazypatch.unpatch("tools-patch")
    print(json.dumps({"before": before, "applied": applied, "again": again, "after": after,
                      "undone": module.value}))
    """)
    assert result == {"before": "original", "applied": ["tools-patch"], "again": ["tools-patch"],
                      "after": "patched", "undone": "original"}


# --- programs: python -m, runpy ------------------------------------------------

PROGRAM_FILES = {
    "app/__init__.py": "",
    "app/main.py": """
        import json
        def greet():
            return "original"
        RESULT = {"name": __name__, "early": globals().get("EARLY"), "greet": greet()}
        if __name__ == "__main__":
            print(json.dumps(RESULT))
    """,
    "app/__main__.py": """
        import json
        print(json.dumps({"package_main_early": globals().get("EARLY")}))
    """,
    # Registered at interpreter start, before runpy looks the program up.
    "sitecustomize.py": """
        import lazypatch

        @lazypatch.before_import("app.main")
        def early(module, patch):
            patch.setattr(module, "EARLY", "before " + module.__name__)
            patch.setattr(module, "greet_patched", True)

        @lazypatch.when_imported("app.main")
        def after(module, patch):
            import json
            print(json.dumps({"after_patch_saw": module.__name__, "early": module.EARLY}))

        @lazypatch.before_import("app.__main__")
        def package_main(module, patch):
            patch.setattr(module, "EARLY", "package main patched")
    """,
}


def test_python_dash_m_runs_the_program_module_patches_around_its_body(interpreter):
    interpreter.write(PROGRAM_FILES)
    result = interpreter.run_command([sys.executable, "-m", "app.main"])
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    # The before patch ran in __main__'s namespace before the body; the after patch when it ended.
    assert lines == ['{"name": "__main__", "early": "before __main__", "greet": "original"}',
                     '{"after_patch_saw": "__main__", "early": "before __main__"}']


def test_a_program_ending_with_sys_exit_keeps_its_exit_code_and_its_patches(interpreter):
    interpreter.write(dict(PROGRAM_FILES, **{"app/main.py": """
        import atexit, json, sys, lazypatch

        def show():
            statuses = {item["name"]: item["status"] for item in lazypatch.report()}
            print(json.dumps({"early": EARLY, "status": statuses["sitecustomize.early"]}))
        atexit.register(show)
        sys.exit(3)
    """}))
    result = interpreter.run_command([sys.executable, "-m", "app.main"], check=False)
    assert result.returncode == 3, result.stderr
    # The after patch still ran (it prints first); nothing was rolled back.
    assert result.stdout.strip().splitlines() == [
        '{"after_patch_saw": "__main__", "early": "before __main__"}',
        '{"early": "before __main__", "status": "applied"}']


def test_python_dash_m_package_runs_the_patches_of_its_main_module(interpreter):
    interpreter.write(PROGRAM_FILES)
    result = interpreter.run_command([sys.executable, "-m", "app"])
    assert result.stdout.strip() == '{"package_main_early": "package main patched"}'


def test_runpy_run_module_patches_the_program_and_keeps_its_real_loader(interpreter):
    interpreter.write(PROGRAM_FILES)
    result = interpreter.run_json("""
    import json, runpy, lazypatch
    from importlib.machinery import SourceFileLoader
    namespace = runpy.run_module("app.main", run_name="__main__", alter_sys=True)
    records = {item["name"]: item["status"] for item in lazypatch.report()}
    print(json.dumps({"early": namespace["EARLY"],
                      "real_loader": type(namespace["__loader__"]) is SourceFileLoader,
                      "spec_loader": type(namespace["__spec__"].loader) is SourceFileLoader,
                      "status": records["sitecustomize.early"]}))
    """)
    assert result == {"early": "before __main__", "real_loader": True, "spec_loader": True,
                      "status": "applied"}


def test_get_code_of_a_watched_module_is_the_real_code_for_callers_other_than_runpy(interpreter):
    interpreter.write(PROGRAM_FILES)
    result = interpreter.run_json("""
    import json, importlib.util
    spec = importlib.util.find_spec("app.main")     # watched: its exec_module is lazypatch's
    code = spec.loader.get_code("app.main")
    hook = vars(spec.loader).get("exec_module")
    print(json.dumps({"hooked": hook.__func__.__module__.startswith("lazypatch."),
                      "file": code.co_filename, "names": "greet" in code.co_names}))
    """)
    assert result["hooked"] is True
    assert result["file"].endswith("main.py") and result["names"] is True


# --- stand-ins for modules that are not installed --------------------------------


def test_stand_in_at_depth_creates_parents_carries_attributes_and_names_the_patch(interpreter):
    result = interpreter.run_json("""
    import json, sys, lazypatch
    name = lazypatch.stand_in("flash_attn.ops.triton", attributes={"VERSION": "stand-in"})
    import flash_attn.ops.triton as triton
    from flash_attn.ops.triton import VERSION
    import flash_attn
    try:
        triton.rotary_kernel
        error = None
    except lazypatch.StandInError as caught:
        error = str(caught)
    records = {item["name"]: item["status"] for item in lazypatch.report()}
    print(json.dumps({"name": name, "version": VERSION, "parent_holds": flash_attn.ops.triton is triton,
                      "hasattr": hasattr(triton, "rotary_kernel"), "error": error,
                      "records": records}))
    """)
    assert result["name"] == "stand_in:flash_attn.ops.triton"
    assert result["version"] == "stand-in" and result["parent_holds"] is True
    assert result["hasattr"] is False          # feature checks keep working
    assert "stand_in:flash_attn.ops.triton" in result["error"]
    assert "attributes={'rotary_kernel': ...}" in result["error"]
    assert "LAZYPATCH_DISABLE=stand_in:flash_attn.ops.triton" in result["error"]
    assert result["records"] == {
        "stand_in:flash_attn.ops.triton": "applied",
        "stand_in:flash_attn.ops.triton.parent:flash_attn": "applied",
        "stand_in:flash_attn.ops.triton.parent:flash_attn.ops": "applied"}


def test_stand_in_with_submodules_provides_any_depth_and_unpatch_takes_all_back(interpreter):
    result = interpreter.run_json("""
    import json, sys, lazypatch
    name = lazypatch.stand_in("cuda_ext", attributes={"AVAILABLE": False}, submodules=True)
    from cuda_ext.ops.deep import AVAILABLE
    import cuda_ext.ops.deep as deep
    try:
        deep.fused_kernel
        error = ""
    except lazypatch.StandInError as caught:
        error = str(caught)
    names = sorted(r.name for r in lazypatch.report())
    lazypatch.unpatch(name)
    left = sorted(m for m in sys.modules if m.startswith("cuda_ext"))
    try:
        import cuda_ext.ops
        again = "imported"
    except ImportError:
        again = "ImportError"
    print(json.dumps({"available": AVAILABLE, "error": error, "names": names, "left": left,
                      "again": again}))
    """)
    deep = "stand_in:cuda_ext.sub:cuda_ext.ops.sub:cuda_ext.ops.deep"
    assert result["available"] is False
    assert f"patch {deep!r}" in result["error"] and "cuda_ext.ops.deep.fused_kernel" in result["error"]
    assert result["names"] == ["stand_in:cuda_ext", "stand_in:cuda_ext.sub:cuda_ext.ops", deep]
    assert result["left"] == [] and result["again"] == "ImportError"


def test_undo_of_stand_ins_with_submodules_leaves_the_import_system_as_before(interpreter):
    # Two stand-ins with submodules share one meta-path finder: undoing the first must
    # keep the second working; undoing both must leave sys.meta_path, sys.path_hooks and
    # sys.path_importer_cache as they were (skip_import is such a stand-in). Their
    # __path__ is [], as DrivingSDK's stubs have it.
    result = interpreter.run_json("""
    import json, os, sys, lazypatch
    from lazypatch.driving_sdk.v2.patcher import Patcher
    first = lazypatch.stand_in("cuda_ext", submodules=True)
    meta, hooks, cache = list(sys.meta_path), list(sys.path_hooks), dict(sys.path_importer_cache)
    patcher = Patcher().skip_import("flash_attn")
    patcher.apply()
    import cuda_ext.ops.deep, flash_attn.layers
    paths = [cuda_ext.__path__, cuda_ext.ops.__path__, flash_attn.__path__]
    during = len(sys.meta_path) - len(meta)
    lazypatch.unpatch(first)
    import flash_attn.ops.fused          # the other stand-in still provides submodules
    kept = len(sys.meta_path) - len(meta)
    patcher.restore()
    # Only what is not a real directory: ordinary imports meanwhile (the stdlib's
    # packages the compat layer loads) add their own directories, as they should.
    added = sorted(str(key) for key in sys.path_importer_cache
                   if key not in cache and not os.path.isdir(str(key)))
    print(json.dumps({"paths": paths, "during": during, "kept": kept,
                      "meta_equal": sys.meta_path == meta, "hooks_equal": sys.path_hooks == hooks,
                      "added": added, "left": [m for m in sys.modules
                                               if m.startswith(("cuda_ext", "flash_attn"))]}))
    """)
    assert result == {"paths": [[], [], []], "during": 1, "kept": 1, "meta_equal": True,
                      "hooks_equal": True, "added": [], "left": []}


def test_unpatching_a_stand_in_makes_the_import_fail_again_and_leaves_nothing(interpreter):
    result = interpreter.run_json("""
    import json, sys, lazypatch
    lazypatch.stand_in("torch_scatter", attributes={"scatter": len})
    import torch_scatter
    provided = torch_scatter.scatter is len
    lazypatch.unpatch_all()
    try:
        import torch_scatter
        failure = None
    except ModuleNotFoundError as error:
        failure = error.name
    print(json.dumps({"provided": provided, "failure": failure,
                      "left": [key for key in sys.modules if "torch_scatter" in key]}))
    """)
    assert result == {"provided": True, "failure": "torch_scatter", "left": []}


def test_stand_in_for_an_installed_module_is_skipped_and_the_real_one_imported(interpreter):
    interpreter.write({"present/__init__.py": "REAL = True\n"})
    result = interpreter.run_json("""
    import json, lazypatch
    lazypatch.stand_in("present", attributes={"REAL": False})
    import present
    record = lazypatch.report()[0]
    print(json.dumps({"real": present.REAL, "status": record["status"], "reason": record["reason"]}))
    """)
    assert result["real"] is True
    assert result["status"] == "skipped" and "is installed" in result["reason"]


def test_stand_in_declared_after_the_real_module_was_imported_says_skipped_at_once(interpreter):
    interpreter.write({"present/__init__.py": "REAL = True\n", "present/sub.py": "X = 1\n"})
    result = interpreter.run_json("""
    import json, lazypatch
    import present.sub
    lazypatch.stand_in("present.sub")
    print(json.dumps([[item["name"], item["status"]] for item in lazypatch.report()]))
    """)
    assert result == [["stand_in:present.sub", "skipped"]]   # no stand-in for the parent either


def test_a_stand_in_disabled_by_the_environment_provides_nothing(interpreter):
    result = interpreter.run_json("""
    import json, lazypatch
    lazypatch.stand_in("apex.amp")
    try:
        import apex.amp
        outcome = "imported"
    except ModuleNotFoundError as error:
        outcome = error.name
    statuses = sorted({item["status"] for item in lazypatch.report()})
    print(json.dumps({"outcome": outcome, "statuses": statuses}))
    """, env={"LAZYPATCH_DISABLE": "stand_in:apex.amp"})   # the family: parents too
    assert result == {"outcome": "apex", "statuses": ["disabled"]}


def test_boundaries_follow_enable_and_disable_by_their_tag(interpreter):
    result = interpreter.run_json("""
    import json, lazypatch
    lazypatch.stand_in("cuda_only_ext")
    lazypatch.disable("tag:import-boundary")
    try:
        import cuda_only_ext
        first = "imported"
    except ModuleNotFoundError:
        first = "missing"
    lazypatch.enable("tag:import-boundary")
    import cuda_only_ext
    print(json.dumps({"first": first, "then": repr(cuda_only_ext)}))
    """)
    assert result["first"] == "missing"
    assert result["then"] == ("<lazypatch stand-in module 'cuda_only_ext' provided by patch "
                              "'stand_in:cuda_only_ext'>")


# --- replaced modules ----------------------------------------------------------------

REPLACEMENT_FILES = {
    "heavy/__init__.py": "raise RuntimeError('the real heavy module must not run')\n",
    "heavy_shim.py": "import sys\nNAME = 'shim'\nsys.modules.setdefault('shim_was_imported', sys)\n",
}


def test_replace_module_gives_the_replacement_resolved_at_import_and_never_runs_the_real_body(interpreter):
    interpreter.write(REPLACEMENT_FILES)
    result = interpreter.run_json("""
    import json, sys, lazypatch
    lazypatch.replace_module("heavy", "heavy_shim")
    resolved_early = "shim_was_imported" in sys.modules
    import heavy
    import heavy_shim
    same = heavy is heavy_shim
    lazypatch.unpatch("replace_module:heavy")
    try:
        import heavy
        after = "imported"
    except RuntimeError as error:
        after = str(error)
    print(json.dumps({"resolved_early": resolved_early, "same": same, "name": heavy_shim.NAME,
                      "shim_spec": heavy_shim.__spec__.name, "after_unpatch": after}))
    """)
    assert result == {"resolved_early": False, "same": True, "name": "shim",
                      "shim_spec": "heavy_shim",   # the replacement's own spec is untouched
                      "after_unpatch": "the real heavy module must not run"}


def test_replace_module_with_an_attribute_of_a_module(interpreter):
    interpreter.write({"provider.py": "import types\nAPI = types.SimpleNamespace(version='2')\n"})
    result = interpreter.run_json("""
    import json, lazypatch
    lazypatch.replace_module("vendor.api", "provider:API")   # parent 'vendor' is missing too
    import vendor.api
    from vendor import api
    print(json.dumps({"version": vendor.api.version, "same": api is vendor.api}))
    """)
    assert result == {"version": "2", "same": True}


def test_replace_module_that_cannot_be_resolved_fails_the_import_naming_the_patch(interpreter):
    result = interpreter.run_json("""
    import json, warnings, lazypatch
    lazypatch.replace_module("apex", "no_such_shim_module")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            import apex
            outcome = "imported"
        except ModuleNotFoundError as error:
            outcome = str(error)
    record = lazypatch.report()[0]
    print(json.dumps({"outcome": outcome, "status": record["status"],
                      "warned": any("replace_module:apex" in str(w.message) for w in caught)}))
    """)
    assert "replace_module:apex" in result["outcome"]
    assert result["status"] == "failed" and result["warned"] is True


def test_replace_module_declared_after_the_import_replaces_the_entry_and_undo_restores_it(interpreter):
    interpreter.write({"early_mod.py": "NAME = 'real'\n", "late_shim.py": "NAME = 'shim'\n"})
    result = interpreter.run_json("""
    import json, sys, lazypatch
    import early_mod
    real = early_mod
    lazypatch.replace_module("early_mod", "late_shim")
    import early_mod as now
    record = lazypatch.report()[0]
    lazypatch.unpatch_all()
    print(json.dumps({"now": now.NAME, "notes": record["notes"],
                      "restored": sys.modules["early_mod"] is real}))
    """)
    assert result["now"] == "shim" and result["restored"] is True
    assert "imported before the replacement" in result["notes"][0]


# --- injected names -----------------------------------------------------------------


def test_inject_sets_names_resolved_when_the_module_is_imported(interpreter):
    interpreter.write({"ops_target/__init__.py": "HAS = 1\n",
                       "extra_ops.py": "def nms(boxes):\n    return 'pure python nms'\n"})
    result = interpreter.run_json("""
    import json, sys, lazypatch
    lazypatch.inject("ops_target", {"nms": "extra_ops:nms", "FLAG": True})
    resolved_early = "extra_ops" in sys.modules
    from ops_target import nms, FLAG
    lazypatch.unpatch("inject:ops_target")
    import ops_target
    print(json.dumps({"resolved_early": resolved_early, "nms": nms(None), "flag": FLAG,
                      "undone": hasattr(ops_target, "nms") or hasattr(ops_target, "FLAG")}))
    """)
    assert result == {"resolved_early": False, "nms": "pure python nms", "flag": True,
                      "undone": False}


# --- declarative patches by dotted path -----------------------------------------------

DOTTED_FILES = {
    # pkg/__init__ does not import pkg.sub: the DrivingSDK custom-patch pattern.
    "pkg/__init__.py": "TOP = True\n",
    "pkg/sub/__init__.py": """
        class Model:
            def forward(self):
                return "original forward"

            @staticmethod
            def make():
                return "original make"

        def helper():
            return "original helper"
    """,
    "pkg/consumer.py": "from pkg.sub import helper\n",
    "replacements.py": """
        def forward(self):
            return "patched forward of " + type(self).__name__

        def make():
            return "patched make"

        def helper():
            return "patched helper"
    """,
}


def test_replace_by_path_waits_for_a_submodule_its_package_does_not_import(interpreter):
    interpreter.write(DOTTED_FILES)
    result = interpreter.run_json("""
    import json, sys, lazypatch
    lazypatch.replace("pkg.sub.Model.forward", "replacements:forward")
    imported_by_registration = [name for name in ("pkg", "pkg.sub", "replacements")
                                if name in sys.modules]
    import pkg
    waiting = lazypatch.report()[0]
    import pkg.sub
    applied = lazypatch.report()[0]
    patched = pkg.sub.Model().forward()
    lazypatch.unpatch("replace:pkg.sub.Model.forward")
    print(json.dumps({"imported_by_registration": imported_by_registration,
                      "waiting": [waiting["status"], waiting["target"], waiting["reason"]],
                      "applied": [applied["status"], applied["target"]], "patched": patched,
                      "undone": pkg.sub.Model().forward()}))
    """)
    assert result["imported_by_registration"] == []
    assert result["waiting"][:2] == ["skipped", "pkg.sub"]
    assert "waiting for 'pkg.sub'" in result["waiting"][2]
    assert result["applied"] == ["applied", "pkg.sub"]
    assert result["patched"] == "patched forward of Model"
    assert result["undone"] == "original forward"


def test_replace_by_path_on_imported_modules_keeps_a_staticmethod_and_rebinds_copies(interpreter):
    interpreter.write(DOTTED_FILES)
    result = interpreter.run_json("""
    import json, lazypatch
    import pkg.sub, pkg.consumer
    lazypatch.replace("pkg.sub:Model.make", "replacements:make")
    lazypatch.replace("pkg.sub.helper", "replacements:helper", rebind=True)
    outcome = {"make": pkg.sub.Model.make(), "on_instance": pkg.sub.Model().make(),
               "helper": pkg.sub.helper(), "consumer_copy": pkg.consumer.helper()}
    lazypatch.unpatch_all()
    outcome["undone"] = [pkg.sub.Model.make(), pkg.consumer.helper()]
    print(json.dumps(outcome))
    """)
    assert result == {"make": "patched make", "on_instance": "patched make",
                      "helper": "patched helper", "consumer_copy": "patched helper",
                      "undone": ["original make", "original helper"]}


def test_replace_by_path_with_runtime_check_falls_back_per_call_and_precheck_skips(interpreter):
    interpreter.write(DOTTED_FILES)
    result = interpreter.run_json("""
    import json, lazypatch
    lazypatch.replace("pkg.sub.Model.forward", "replacements:forward",
                      runtime_check=lambda self: getattr(self, "fast", False))
    lazypatch.replace("pkg.sub.helper", "replacements:helper", precheck=lambda: False,
                      name="not-here")
    import pkg.sub
    fast = pkg.sub.Model()
    fast.fast = True
    statuses = {item["name"]: item["status"] for item in lazypatch.report()}
    print(json.dumps({"fast": fast.forward(), "plain": pkg.sub.Model().forward(),
                      "helper": pkg.sub.helper(), "statuses": statuses}))
    """)
    assert result == {"fast": "patched forward of Model", "plain": "original forward",
                      "helper": "original helper",
                      "statuses": {"replace:pkg.sub.Model.forward": "applied",
                                   "not-here": "skipped"}}


def test_wrap_by_path_and_a_missing_attribute_fails_with_the_path_named(interpreter):
    interpreter.write(DOTTED_FILES)
    result = interpreter.run_json("""
    import json, warnings, lazypatch

    def loud(wrapped, instance, args, kwargs):
        return wrapped(*args, **kwargs).upper()

    lazypatch.wrap("pkg.sub.Model.forward", loud)
    lazypatch.replace("pkg.sub.Model.renamed_method", "replacements:forward", name="stale")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        import pkg.sub
    stale = [item for item in lazypatch.report() if item["name"] == "stale"][0]
    print(json.dumps({"wrapped": pkg.sub.Model().forward(), "stale": stale["status"],
                      "reason": stale["reason"]}))
    """)
    assert result["wrapped"] == "ORIGINAL FORWARD"
    assert result["stale"] == "failed" and "renamed_method" in result["reason"]


@pytest.mark.stack
def test_replace_by_path_on_real_mmdet_fpn_forward(interpreter):
    interpreter.write({"fpn_shim.py": """
        def forward(self, inputs):
            return ("replacement called", len(inputs))
    """})
    result = interpreter.run_json("""
    import lazypatch.auto
    import json, sys, lazypatch, torch
    name = lazypatch.replace("mmdet.models.necks.fpn.FPN.forward", "fpn_shim:forward")
    registered_on = lazypatch.report()[-1]["target"]
    imported_by_registration = "mmdet" in sys.modules
    from mmdet.models.necks import FPN
    neck = FPN(in_channels=[4, 8], out_channels=4, num_outs=2)
    inputs = (torch.zeros(1, 4, 8, 8), torch.zeros(1, 8, 4, 4))
    patched = list(neck(inputs))
    lazypatch.unpatch(name)
    shapes = [list(output.shape) for output in neck(inputs)]
    record = [item for item in lazypatch.report() if item["name"] == name][0]
    print(json.dumps({"registered_on": registered_on, "imported": imported_by_registration,
                      "patched": patched, "shapes": shapes, "target": record["target"]}))
    """, timeout=300)
    assert result["imported"] is False and result["registered_on"] == "mmdet"
    assert result["patched"] == ["replacement called", 2]
    assert result["shapes"] == [[1, 4, 8, 8], [1, 4, 4, 4]]
    # It waited for mmdet.models (mmdet does not import it), whose body imports the rest.
    assert result["target"] == "mmdet.models"


# --- bad input, refused at the declaration line -----------------------------------------


@pytest.mark.parametrize("declare, message", [
    (lambda lazypatch: lazypatch.stand_in("1bad"), "not a valid dotted module name"),
    (lambda lazypatch: lazypatch.stand_in("ok", attributes={"not an identifier": 1}), "identifier"),
    (lambda lazypatch: lazypatch.replace_module("apex", "shim:"), "package.module:attribute"),
    (lambda lazypatch: lazypatch.inject("mmcv.ops", {}), "non-empty mapping"),
    (lambda lazypatch: lazypatch.replace("toplevel", "x:y"), "dotted path"),
    (lambda lazypatch: lazypatch.wrap("pkg.mod.f", 42), "callable"),
])
def test_bad_declarations_raise_and_register_nothing(forget_new_patches, declare, message):
    import lazypatch
    with pytest.raises((TypeError, ValueError), match=message):
        declare(lazypatch)
    assert lazypatch.report() == []


def test_a_path_into_an_empty_stand_in_waits_and_names_the_missing_project_not_a_rename(
        interpreter):
    # A patch file run outside its project's checkout: `projects` is not importable, so
    # the patches into it meet empty stand-ins. Like a patch on a package that is not
    # installed, each waits for the module it is inside (it never failed to patch
    # anything), and its reason says why that module is not there.
    result = interpreter.run("""
        import json, warnings
        warnings.simplefilter("ignore")
        import lazypatch
        lazypatch.stand_in("projects.mmdet3d_plugin")
        lazypatch.replace("projects.mmdet3d_plugin.models.utils.thing", lambda: 1)
        import projects.mmdet3d_plugin
        [record] = [r for r in lazypatch.report() if r["name"].endswith(".thing")]
        print(json.dumps([record["status"], record["target"], record["reason"]]))
    """)
    status, target, reason = json.loads(result.stdout.strip().splitlines()[-1])
    assert (status, target) == ("skipped", "projects.mmdet3d_plugin.models")
    assert reason.startswith("waiting for 'projects.mmdet3d_plugin.models' to be imported")
    assert "is an empty stand-in" in reason and "not on sys.path" in reason
    assert "renamed or moved" not in reason and len(reason) < 500


def test_a_skip_import_stub_under_an_installed_parent_leaves_nothing_after_restore(interpreter):
    # DrivingSDK's skip_import of modules below an installed package (PanoOcc's
    # "mmdet3d.ops.scatter_v2"), one of them two levels down: the missing middle package
    # is a stand-in too, and restore() takes it back with the stub.
    interpreter.write({"installed/__init__.py": "VALUE = 1\n"})
    result = interpreter.run_json("""
        import json, logging, sys, warnings
        warnings.simplefilter("ignore")
        logging.disable(logging.CRITICAL)
        import lazypatch
        from lazypatch.driving_sdk.v2.patcher import Patcher
        import installed
        patcher = Patcher()
        patcher.skip_import("installed.missing", "installed.absent.deeper")
        patcher.apply()
        import installed.missing, installed.absent.deeper
        during = sorted(name for name in vars(installed) if not name.startswith("__"))
        patcher.restore()
        print(json.dumps({
            "during": during,
            "after": sorted(name for name in vars(installed) if not name.startswith("__")),
            "modules": sorted(name for name in sys.modules if name.startswith("installed.")),
            "statuses": sorted({record["status"] for record in lazypatch.report()
                                if "installed." in record["target"]})}))
    """)
    assert result["during"] == ["VALUE", "absent", "missing"]
    assert result == dict(result, after=["VALUE"], modules=[], statuses=["reverted"])


def test_a_missing_parent_shared_by_two_stand_ins_stays_until_the_last_is_undone(interpreter):
    interpreter.write({"installed/__init__.py": ""})
    result = interpreter.run_json("""
        import json, sys, warnings
        warnings.simplefilter("ignore")
        import lazypatch
        import installed
        first = lazypatch.stand_in("installed.shared.first")
        second = lazypatch.stand_in("installed.shared.second")
        import installed.shared.first, installed.shared.second
        lazypatch.unpatch(first)
        one_undone = sorted(name for name in sys.modules if name.startswith("installed."))
        lazypatch.unpatch(second)
        print(json.dumps({"one_undone": one_undone, "both_undone": sorted(
            name for name in sys.modules if name.startswith("installed.")),
            "bound": "shared" in vars(installed)}))
    """)
    assert result == {"one_undone": ["installed.shared", "installed.shared.second"],
                      "both_undone": [], "bound": False}


def test_a_stand_in_with_submodules_provides_one_a_disabled_stand_in_is_declared_on(
        interpreter):
    # The cuda_extensions pack declares (disabled) stand-ins for flash_attn's submodules;
    # DiffusionDrive's skip_import("flash_attn") must still give flash_attn.flash_attn_interface.
    result = interpreter.run_json("""
    import json, sys, lazypatch
    lazypatch.stand_in("cuda_pkg.interface", name="pack.cuda_pkg.interface", enabled=False)
    lazypatch.stand_in("cuda_pkg", submodules=True)
    import cuda_pkg.interface
    print(json.dumps({"provided_by": vars(cuda_pkg.interface)["__lazypatch_stand_in__"],
                      "parent_path": cuda_pkg.__path__}))
    """)
    assert result == {"provided_by": "stand_in:cuda_pkg.sub:cuda_pkg.interface", "parent_path": []}


def test_a_stand_in_bound_by_a_module_imported_meanwhile_is_said_at_undo(interpreter):
    # mmdet3d 1.0's `try: import spconv` under PanoOcc's skip_import("spconv"): the module
    # keeps the stub after restore(), and a module cannot be un-imported. The undo says so
    # (a warning whatever the filters, and the record), naming the global.
    interpreter.write({"holder.py": "try:\n    import missing_backend\nexcept ImportError:\n"
                                    "    missing_backend = None\n"})
    result = interpreter.run_json("""
        import json, sys, warnings
        warnings.simplefilter("error")
        import lazypatch
        name = lazypatch.stand_in("missing_backend")
        import holder
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lazypatch.unpatch(name)
        record = [r for r in lazypatch.report() if r["name"] == name][0]
        print(json.dumps({"messages": [str(w.message) for w in caught],
                          "categories": [w.category.__name__ for w in caught],
                          "late": record["late_references"], "status": record["status"],
                          "gone": "missing_backend" not in sys.modules}))
    """)
    assert result["gone"] and result["status"] == "reverted"
    assert result["late"] == ["holder.missing_backend"]
    assert result["categories"] == ["LatePatchWarning"]
    assert "holder.missing_backend" in result["messages"][0]
    assert "cannot be un-imported" in result["messages"][0]


def test_a_stand_in_nobody_kept_is_undone_without_a_word(interpreter):
    result = interpreter.run_json("""
        import json, sys, warnings
        import lazypatch
        name = lazypatch.stand_in("missing_backend")
        import missing_backend
        del missing_backend
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lazypatch.unpatch(name)
        print(json.dumps([str(w.message) for w in caught]))
    """)
    assert result == []

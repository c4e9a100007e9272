"""The import semantics the engine promises, each in a fresh interpreter over real modules.

Every test writes a small package to a temporary directory and runs a new
Python on it, so the finder, the module locks and the loaders are the real ones.
"""

from __future__ import annotations

import sys
import zipfile

import pytest

COUNTING_PATCH = """
import json, lazypatch
calls = []

@lazypatch.when_imported("{target}")
def count(module, patch):
    calls.append(module.__name__)
    patch.setattr(module, "PATCHED", True)
"""


def test_unimported_target_is_patched_when_imported_and_never_imported_by_registration(interpreter):
    interpreter.write({"target_pkg/__init__.py": "VALUE = 1\nimport sys\nsys.stdout.write('body ran\\n')\n"})
    result = interpreter.run_json(COUNTING_PATCH.format(target="target_pkg") + """
import sys
before = "target_pkg" in sys.modules
import target_pkg
print(json.dumps({"imported_by_registration": before, "calls": calls,
                  "patched": target_pkg.PATCHED,
                  "status": lazypatch.report()[0]["status"]}))
""")
    assert result == {"imported_by_registration": False, "calls": ["target_pkg"],
                      "patched": True, "status": "applied"}


def test_already_imported_target_is_patched_at_once_and_warning_names_stale_holders(interpreter):
    interpreter.write({
        "lib/__init__.py": "def helper():\n    return 'original'\n",
        "consumer.py": "from lib import helper\n",
    })
    result = interpreter.run_json("""
import json, warnings, lazypatch
import lib, consumer
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")

    @lazypatch.when_imported("lib")
    def replace(module, patch):
        patch.setattr(module, "helper", lambda: "patched")
late = [str(w.message) for w in caught if issubclass(w.category, lazypatch.LatePatchWarning)]
record = lazypatch.report()[0]
print(json.dumps({"lib": lib.helper(), "consumer": consumer.helper(), "late": late,
                  "holders": record["late_references"], "status": record["status"]}))
""")
    assert result["lib"] == "patched"
    assert result["consumer"] == "original"
    assert result["status"] == "applied"
    assert result["holders"] == ["consumer.helper"]
    assert len(result["late"]) == 1 and "consumer.helper" in result["late"][0]


def test_rebind_replaces_from_import_copies_and_undo_restores_them(interpreter):
    interpreter.write({
        "lib/__init__.py": "def helper():\n    return 'original'\n",
        "consumer.py": "from lib import helper\n",
    })
    result = interpreter.run_json("""
import json, warnings, lazypatch
import lib, consumer
original = lib.helper
warnings.simplefilter("error", lazypatch.LatePatchWarning)  # rebinding leaves no stale holder

@lazypatch.when_imported("lib", name="rebinding")
def replace(module, patch):
    patch.setattr(module, "helper", lambda: "patched", rebind=True)
patched = [lib.helper(), consumer.helper()]
lazypatch.unpatch("rebinding")
print(json.dumps({"patched": patched, "restored": [lib.helper is original, consumer.helper is original]}))
""")
    assert result == {"patched": ["patched", "patched"], "restored": [True, True]}


def test_registration_while_target_executes_is_deferred_until_body_finished(interpreter):
    # The target registers a patch on itself half-way through its body (as a plugin
    # imported from a package's __init__ would). The patch must see the whole module.
    interpreter.write({
        "selfpatching/__init__.py": """
            FIRST = 1
            from . import plugin
            SECOND = 2
        """,
        "selfpatching/plugin.py": """
            import lazypatch
            seen = []

            @lazypatch.when_imported("selfpatching")
            def inspect_module(module, patch):
                seen.append(sorted(name for name in ("FIRST", "SECOND") if hasattr(module, name)))
                patch.setattr(module, "SECOND", 20)
        """,
    })
    result = interpreter.run_json("""
import json, importlib.util, lazypatch, selfpatching
from selfpatching import plugin
spec_class = type(selfpatching.__spec__).__name__
print(json.dumps({"seen": plugin.seen, "second": selfpatching.SECOND, "spec_class": spec_class}))
""")
    assert result == {"seen": [["FIRST", "SECOND"]], "second": 20, "spec_class": "ModuleSpec"}


def test_failing_patch_is_rolled_back_import_succeeds_and_others_still_apply(interpreter):
    interpreter.write({"victim/__init__.py": "A = 'a'\nB = 'b'\n"})
    result = interpreter.run_json("""
import json, warnings, lazypatch

@lazypatch.when_imported("victim", name="first", priority=0)
def first(module, patch):
    patch.setattr(module, "A", "first")

@lazypatch.when_imported("victim", name="broken", priority=1)
def broken(module, patch):
    patch.setattr(module, "B", "half-done")
    raise RuntimeError("the upstream API changed")

@lazypatch.when_imported("victim", name="last", priority=2)
def last(module, patch):
    patch.setattr(module, "C", "last")

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import victim
statuses = {r["name"]: r["status"] for r in lazypatch.report()}
broken_record = [r for r in lazypatch.report() if r["name"] == "broken"][0]
messages = [str(w.message) for w in caught if issubclass(w.category, lazypatch.PatchFailedWarning)]
print(json.dumps({"A": victim.A, "B": victim.B, "C": victim.C, "statuses": statuses,
                  "reason": broken_record["reason"], "has_traceback": "Traceback" in broken_record["error"],
                  "messages": messages}))
""")
    assert result["A"] == "first" and result["B"] == "b" and result["C"] == "last"
    assert result["statuses"] == {"first": "applied", "broken": "failed", "last": "applied"}
    assert result["reason"] == "RuntimeError: the upstream API changed"
    assert result["has_traceback"]
    assert len(result["messages"]) == 1
    assert "'broken'" in result["messages"][0] and "LAZYPATCH_DISABLE=broken" in result["messages"][0]


def test_strict_mode_turns_a_failing_patch_into_an_import_error_naming_it(interpreter):
    interpreter.write({"victim/__init__.py": "A = 1\n", "patches_mod.py": """
        import lazypatch

        @lazypatch.when_imported("victim", name="broken")
        def broken(module):
            raise ValueError("nope")
    """})
    result = interpreter.run("import patches_mod\nimport victim\n",
                             env={"LAZYPATCH_STRICT": "1"}, check=False)
    assert result.returncode != 0
    assert "PatchError" in result.stderr and "'broken'" in result.stderr
    assert "LAZYPATCH_STRICT=1" in result.stderr
    # set_strict() is the in-code spelling of the same switch
    result = interpreter.run("import lazypatch, patches_mod\nlazypatch.set_strict()\nimport victim\n",
                             check=False)
    assert result.returncode != 0 and "PatchError" in result.stderr


def test_reload_reapplies_once_and_repeated_imports_apply_once(interpreter):
    interpreter.write({"reloaded/__init__.py": "VALUE = 'fresh'\n"})
    result = interpreter.run_json(COUNTING_PATCH.format(target="reloaded") + """
import importlib
import reloaded
import reloaded
first_value = reloaded.PATCHED
reloaded.VALUE = "changed by user"
importlib.reload(reloaded)
record = lazypatch.report()[0]
print(json.dumps({"calls": calls, "patched": reloaded.PATCHED, "value": reloaded.VALUE,
                  "applications": record["applications"], "status": record["status"],
                  "first": first_value}))
""")
    assert result == {"calls": ["reloaded", "reloaded"], "patched": True, "value": "fresh",
                      "applications": 2, "status": "applied", "first": True}


def test_namespace_package_fires(interpreter):
    interpreter.write({"nspkg/sub.py": "X = 1\n"})  # no __init__.py: a namespace package
    result = interpreter.run_json(COUNTING_PATCH.format(target="nspkg") + """
import nspkg, nspkg.sub
print(json.dumps({"calls": calls, "patched": nspkg.PATCHED,
                  "loader": type(nspkg.__loader__).__name__, "sub": nspkg.sub.X}))
""")
    assert result == {"calls": ["nspkg"], "patched": True, "loader": "NamespaceLoader", "sub": 1}


def test_zip_imported_module_fires(interpreter, tmp_path):
    archive = tmp_path / "bundle.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("zipped/__init__.py", "X = 1\n")
    result = interpreter.run_json(f"""
import sys
sys.path.insert(0, {str(archive)!r})
""" + COUNTING_PATCH.format(target="zipped") + """
import zipped
print(json.dumps({"calls": calls, "patched": zipped.PATCHED, "loader": type(zipped.__loader__).__name__}))
""")
    assert result == {"calls": ["zipped"], "patched": True, "loader": "zipimporter"}


@pytest.mark.parametrize("target, kind", [("array", "ExtensionFileLoader"),
                                          ("xxsubtype", "BuiltinImporter")])
def test_extension_and_builtin_modules_fire(interpreter, target, kind):
    result = interpreter.run_json(COUNTING_PATCH.format(target=target) + f"""
import sys
assert {target!r} not in sys.modules
import {target}
loader = {target}.__loader__
name = loader.__name__ if isinstance(loader, type) else type(loader).__name__
print(json.dumps({{"calls": calls, "patched": {target}.PATCHED, "loader": name}}))
""")
    assert result == {"calls": [target], "patched": True, "loader": kind}


def test_python_dash_m_program_gets_patched_imports(interpreter):
    interpreter.write({
        "app/__init__.py": "",
        "app/__main__.py": """
            import lazypatch
            import json
            from app import patches
            import app.worker
            print(json.dumps({"patched": app.worker.PATCHED, "name": __name__}))
        """,
        "app/patches.py": """
            import lazypatch

            @lazypatch.when_imported("app.worker")
            def mark(module, patch):
                patch.setattr(module, "PATCHED", True)
        """,
        "app/worker.py": "PATCHED = False\n",
    })
    result = interpreter.run_command([sys.executable, "-m", "app"])
    assert result.stdout.strip().endswith('{"patched": true, "name": "__main__"}')


def test_lazy_loader_module_fires_only_when_its_body_runs(interpreter):
    interpreter.write({"lazytarget/__init__.py": "import sys\nsys.modules['lazy_ran'] = True\nVALUE = 1\n"})
    result = interpreter.run_json("""
import importlib.util, json, sys
spec = importlib.util.find_spec("lazytarget")
loader = importlib.util.LazyLoader(spec.loader)
spec.loader = loader
module = importlib.util.module_from_spec(spec)
sys.modules["lazytarget"] = module
loader.exec_module(module)
import lazypatch
calls = []

@lazypatch.when_imported("lazytarget")
def count(module, patch):
    calls.append(1)
    patch.setattr(module, "PATCHED", True)

# Registration (and the reference scan of a late patch) must not load it.
ran_after_registration = "lazy_ran" in sys.modules
value = module.VALUE       # first attribute access runs the body
print(json.dumps({"ran_after_registration": ran_after_registration, "calls": calls,
                  "patched": module.PATCHED, "value": value}))
""")
    assert result == {"ran_after_registration": False, "calls": [1], "patched": True, "value": 1}


def test_lazy_loader_package_submodules_fire_when_used(interpreter):
    # scientific-python's lazy_loader: attach() defers submodule imports to first use.
    interpreter.write({
        "lazypkg/__init__.py": """
            import lazy_loader
            __getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submodules=["heavy"])
        """,
        "lazypkg/heavy.py": "VALUE = 1\n",
    })
    result = interpreter.run_json(COUNTING_PATCH.format(target="lazypkg.heavy") + """
import sys, lazypkg
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")

    @lazypatch.when_imported("lazypkg", name="scan")
    def touch(module, patch):
        patch.setattr(module, "SCANNED", True)
heavy_loaded_early = "lazypkg.heavy" in sys.modules
value = lazypkg.heavy.VALUE
print(json.dumps({"early": heavy_loaded_early, "calls": calls, "patched": lazypkg.heavy.PATCHED}))
""")
    assert result == {"early": False, "calls": ["lazypkg.heavy"], "patched": True}


def test_self_replacing_module_patch_receives_what_the_importer_receives(interpreter):
    interpreter.write({"replacer/__init__.py": """
        import sys, types

        class _Replacement(types.ModuleType):
            pass
        replacement = _Replacement(__name__)
        replacement.VALUE = "replacement"
        sys.modules[__name__] = replacement
    """})
    result = interpreter.run_json("""
import json, lazypatch
received = []

@lazypatch.when_imported("replacer")
def capture(module, patch):
    received.append(module)
    patch.setattr(module, "PATCHED", True)
import replacer
print(json.dumps({"same": received[0] is replacer, "type": type(replacer).__name__,
                  "patched": replacer.PATCHED}))
""")
    assert result == {"same": True, "type": "_Replacement", "patched": True}


def test_eight_threads_importing_a_watched_module_run_each_patch_once(interpreter):
    interpreter.write({"slow/__init__.py": "import time\ntime.sleep(0.2)\nVALUE = 1\n"})
    result = interpreter.run_json(COUNTING_PATCH.format(target="slow") + """
import threading, importlib
barrier = threading.Barrier(8)
results = []

def worker():
    barrier.wait()
    module = importlib.import_module("slow")
    results.append(module.PATCHED)
threads = [threading.Thread(target=worker) for _ in range(8)]
for thread in threads: thread.start()
for thread in threads: thread.join()
print(json.dumps({"calls": calls, "results": results}))
""")
    assert result == {"calls": ["slow"], "results": [True] * 8}


def test_package_init_waiting_for_thread_importing_watched_submodule_does_not_stall(interpreter):
    # wrapt's finder calls importlib.util.find_spec inside find_spec, which imports
    # the parent package and blocks on its module lock: this stalls until join() times out.
    interpreter.write({
        "threaded/__init__.py": """
            import threading, importlib
            result = {}

            def load():
                result["sub"] = importlib.import_module("threaded.sub")
            worker = threading.Thread(target=load)
            worker.start()
            worker.join(timeout=5)
            STALLED = worker.is_alive()
        """,
        "threaded/sub.py": "VALUE = 1\n",
    })
    result = interpreter.run_json(COUNTING_PATCH.format(target="threaded.sub") + """
import time
started = time.monotonic()
import threaded
print(json.dumps({"stalled": threaded.STALLED, "calls": calls,
                  "patched": threaded.result["sub"].PATCHED}))
""")
    assert result == {"stalled": False, "calls": ["threaded.sub"], "patched": True}


def test_before_import_runs_on_the_empty_module_before_its_body(interpreter):
    interpreter.write({"early/__init__.py": "SEEN = globals().get('INJECTED')\n"})
    result = interpreter.run_json("""
import json, lazypatch
order = []

@lazypatch.before_import("early")
def inject(module, patch):
    order.append(("before", hasattr(module, "SEEN")))
    patch.setattr(module, "INJECTED", "from before_import")

@lazypatch.when_imported("early")
def after(module):
    order.append(("after", module.SEEN))
import early
print(json.dumps({"order": order}))
""")
    assert result == {"order": [["before", False], ["after", "from before_import"]]}


def test_before_import_revert_after_import_presents_a_value_only_during_the_body(interpreter):
    interpreter.write({
        "gate/__init__.py": "__version__ = '2.2.0'\n",
        "consumer_pkg/__init__.py": """
            import gate
            assert gate.__version__ < "2.2", f"gate {gate.__version__} is too new"
            SEEN = gate.__version__
        """,
    })
    result = interpreter.run_json("""
import json, lazypatch

@lazypatch.before_import("consumer_pkg", name="present_old_gate")
def present(module, patch):
    import gate
    patch.setattr(gate, "__version__", "2.1.0")
    patch.revert_after_import()
import consumer_pkg, gate
record = lazypatch.report()[0]
print(json.dumps({"seen": consumer_pkg.SEEN, "after": gate.__version__, "status": record["status"]}))
""")
    assert result == {"seen": "2.1.0", "after": "2.2.0", "status": "reverted"}


def test_two_patches_on_one_attribute_are_reported_as_a_conflict_naming_the_winner(interpreter):
    interpreter.write({"contested/__init__.py": "VALUE = 0\n"})
    result = interpreter.run_json("""
import json, warnings, lazypatch
warnings.simplefilter("ignore")

@lazypatch.when_imported("contested", name="low", priority=0)
def low(module, patch):
    patch.setattr(module, "VALUE", "low")

@lazypatch.when_imported("contested", name="high", priority=10)
def high(module, patch):
    patch.setattr(module, "VALUE", "high")
import contested
records = {r["name"]: r for r in lazypatch.report()}
print(json.dumps({"value": contested.VALUE, "low": records["low"]["conflicts"],
                  "high": records["high"]["conflicts"]}))
""")
    assert result["value"] == "high"
    assert result["low"] == result["high"]
    (text,) = result["high"]
    assert "'low'" in text and "'high' wins" in text and "contested.VALUE" in text


def test_wrapt_post_import_hooks_keep_firing_beside_lazypatch(interpreter):
    interpreter.write({"shared_target/__init__.py": "VALUE = 1\n", "other_target/__init__.py": ""})
    result = interpreter.run_json("""
import json, wrapt, lazypatch
fired = []
wrapt.register_post_import_hook(lambda module: fired.append("wrapt"), "shared_target")

@lazypatch.when_imported("shared_target")
def ours(module):
    fired.append("lazypatch")
wrapt.register_post_import_hook(lambda module: fired.append("wrapt-other"), "other_target")
import shared_target, other_target
print(json.dumps(sorted(fired)))
""")
    assert result == ["lazypatch", "wrapt", "wrapt-other"]


def test_wrapt_finder_in_front_of_lazypatch_still_lets_both_fire(interpreter):
    # wrapt inserts its finder at sys.meta_path[0] on its first hook; registered after
    # lazypatch, it sits in front and re-enters the import system from its find_spec.
    interpreter.write({"both_target/__init__.py": "VALUE = 1\n"})
    result = interpreter.run_json("""
import json, sys, lazypatch
fired = []

@lazypatch.when_imported("both_target")
def ours(module, patch):
    fired.append("lazypatch")
    patch.setattr(module, "VALUE", 2)
import wrapt
wrapt.register_post_import_hook(lambda module: fired.append(("wrapt", module.VALUE)), "both_target")
first = type(sys.meta_path[0]).__module__
import both_target
print(json.dumps({"first": first, "fired": fired, "loader": type(both_target.__loader__).__name__}))
""")
    assert result["first"].startswith("wrapt")
    assert result["fired"] == ["lazypatch", ["wrapt", 2]]
    assert result["loader"] == "SourceFileLoader"


def test_priority_orders_patches_on_one_module_and_ties_keep_registration_order(interpreter):
    interpreter.write({"ordered/__init__.py": ""})
    result = interpreter.run_json("""
import json, lazypatch
order = []

def recorder(name):
    def record(module):
        order.append(name)
    return record
for name, priority in [("c", 5), ("a", -1), ("b", 5), ("d", 0)]:
    lazypatch.register(recorder(name), "ordered", name=name, priority=priority)
import ordered
print(json.dumps(order))
""")
    assert result == ["a", "d", "c", "b"]


def test_requirements_are_checked_without_importing_and_unmet_means_skipped(interpreter):
    interpreter.write({"needy/__init__.py": ""})
    result = interpreter.run_json("""
import json, sys, lazypatch

@lazypatch.when_imported("needy", name="old_numpy", requires=["numpy<1.0"])
def old(module): pass

@lazypatch.when_imported("needy", name="missing_dist", requires=["surely-not-installed-dist>=1"])
def missing(module): pass

@lazypatch.when_imported("needy", name="met", requires=["numpy>=2", "wrapt>=2,<3; python_version >= '3.8'"])
def met(module): pass
import needy
records = {r["name"]: (r["status"], r["reason"]) for r in lazypatch.report()}
print(json.dumps({"records": records, "numpy_imported": "numpy" in sys.modules,
                  "wrapt_imported": "wrapt" in sys.modules}))
""")
    records = result["records"]
    assert records["met"] == ["applied", ""]
    assert records["old_numpy"][0] == "skipped" and "installed numpy is 2." in records["old_numpy"][1]
    assert records["missing_dist"] == ["skipped", "requires surely-not-installed-dist>=1: "
                                       "surely-not-installed-dist is not installed"]
    assert result["numpy_imported"] is False and result["wrapt_imported"] is False


def test_plain_assignments_work_but_are_reported_not_undoable(interpreter):
    interpreter.write({"plain/__init__.py": "A = 1\n"})
    result = interpreter.run_json("""
import json, lazypatch

@lazypatch.when_imported("plain")
def assign(module):
    module.A = 2
    module.NEW = 3
import plain
record = lazypatch.report()[0]
print(json.dumps({"A": plain.A, "untracked": record["untracked_changes"], "undoable": record["undoable"]}))
""")
    assert result == {"A": 2, "untracked": ["A", "NEW"], "undoable": False}


def test_plain_assignments_are_told_apart_from_tracked_changes_and_held_by_name_only(interpreter):
    """Tracked changes are not reported as plain assignments; a deleted name and a value
    whose ``==`` raises are; and what an application keeps grows with what it changed,
    not with the module: 300 applications on a module of 20,000 names hold well under
    one copy of that namespace each (they held two until the report was built)."""
    names = "\n".join(f"name_{index} = {index}" for index in range(20_000))
    interpreter.write({"wide/__init__.py": names + "\n",
                       "arrays/__init__.py": "class Raising:\n"
                                             "    def __eq__(self, other):\n"
                                             "        raise ValueError('ambiguous truth value')\n"
                                             "    __hash__ = object.__hash__\n"
                                             "A = Raising()\nB = 1\nC = 2\n"})
    result = interpreter.run_json("""
import gc, json, sys, tracemalloc, lazypatch

@lazypatch.when_imported("arrays", name="mixed")
def mixed(module, patch):
    patch.setattr(module, "B", 10)       # tracked
    module.A = type(module.A)()          # plain, and == raises
    del module.C                         # plain deletion

for index in range(300):
    def change(module, patch, index=index):
        patch.setattr(module, f"name_{index}", -index)
    lazypatch.register(change, "wide", name=f"wide.{index}")

import arrays
gc.collect()
tracemalloc.start()
import wide
gc.collect()
held = tracemalloc.get_traced_memory()[0]
records = {record["name"]: record for record in lazypatch.report()}
namespace = sys.getsizeof(dict(vars(wide)))
print(json.dumps({"mixed": records["mixed"]["untracked_changes"],
                  "wide": sorted({tuple(records[f"wide.{i}"]["untracked_changes"]) for i in range(300)}),
                  "held_per_application": held / 300, "namespace": namespace}))
""")
    assert result["mixed"] == ["A", "C"]
    assert result["wide"] == [[]]
    assert result["held_per_application"] < result["namespace"] / 10, result


def test_disabled_patches_wait_for_enable_and_patched_scope(interpreter):
    interpreter.write({"optional/__init__.py": "VALUE = 'original'\n"})
    result = interpreter.run_json("""
import json, lazypatch

@lazypatch.when_imported("optional", name="opt.value", tags=["compat"], enabled=False)
def change(module, patch):
    patch.setattr(module, "VALUE", "patched")
import optional
states = [optional.VALUE, lazypatch.report()[0]["status"]]
with lazypatch.patched(tags=["compat"]) as scope:
    states += [optional.VALUE, lazypatch.report()[0]["status"], scope.names]
states += [optional.VALUE, lazypatch.report()[0]["status"]]
with lazypatch.patched("opt.*"):
    states.append(optional.VALUE)
print(json.dumps(states))
""")
    assert result == ["original", "disabled", "patched", "applied", ["opt.value"],
                      "original", "disabled", "patched"]


def test_environment_enable_and_disable_select_by_name_glob_and_tag(interpreter):
    interpreter.write({"envtarget/__init__.py": "", "envpatches.py": """
        import lazypatch
        for name, tags, enabled in [("pack.one", ["alpha"], True), ("pack.two", ["beta"], False),
                                    ("other.three", [], True)]:
            lazypatch.register(lambda module: None, "envtarget", name=name, tags=tags, enabled=enabled)
    """})
    code = """
import json, warnings
warnings.simplefilter("always")
import lazypatch.auto, envtarget, lazypatch
print(json.dumps({r["name"]: r["status"] for r in lazypatch.report() if r["target"] == "envtarget"}))
"""
    result = interpreter.run_json(code, env={"LAZYPATCH_MODULES": "envpatches",
                                             "LAZYPATCH_ENABLE": "beta",
                                             "LAZYPATCH_DISABLE": "other.*"})
    assert result == {"pack.one": "applied", "pack.two": "applied", "other.three": "disabled"}
    warned = interpreter.run(code, env={"LAZYPATCH_MODULES": "envpatches",
                                        "LAZYPATCH_DISABLE": "no.such.patch"})
    assert "LAZYPATCH_DISABLE names 'no.such.patch'" in warned.stderr
    assert "ConfigurationWarning" in warned.stderr


def test_patch_can_skip_itself_with_a_reason_and_leave_notes(interpreter):
    interpreter.write({"conditional/__init__.py": "A = 1\n"})
    result = interpreter.run_json("""
import json, lazypatch

@lazypatch.when_imported("conditional", name="maybe")
def maybe(module, patch):
    patch.setattr(module, "A", 2)
    patch.skip("nothing to fix here: A is already fine")

@lazypatch.when_imported("conditional", name="noted")
def noted(module, patch):
    patch.note("presented A=3")
    patch.setattr(module, "A", 3)
import conditional
records = {r["name"]: r for r in lazypatch.report()}
lazypatch.unpatch("noted")
print(json.dumps({"A": conditional.A, "maybe": [records["maybe"]["status"], records["maybe"]["reason"]],
                  "notes": lazypatch.report()[1]["notes"]}))
""")
    assert result == {"A": 1, "maybe": ["skipped", "nothing to fix here: A is already fine"],
                      "notes": ["presented A=3"]}


def test_wrap_with_rebind_reaches_from_import_copies_and_undo_restores_them(interpreter):
    interpreter.write({
        "lib/__init__.py": "def helper():\n    return 'original'\n",
        "consumer.py": "from lib import helper\n",
    })
    result = interpreter.run_json("""
import json, lazypatch
import lib, consumer
original = lib.helper

@lazypatch.when_imported("lib", name="wrapping")
def wrap_helper(module, patch):
    patch.wrap(module, "helper", lambda wrapped, instance, args, kwargs: "wrapped " + wrapped(),
               rebind=True)
during = [lib.helper(), consumer.helper()]
lazypatch.unpatch("wrapping")
print(json.dumps({"during": during, "restored": [lib.helper is original, consumer.helper is original]}))
""")
    assert result == {"during": ["wrapped original", "wrapped original"], "restored": [True, True]}


def test_undo_of_a_rebinding_patch_also_reaches_copies_made_while_it_was_live(interpreter):
    interpreter.write({
        "lib/__init__.py": "def helper():\n    return 'original'\n",
        "early_user.py": "from lib import helper\n",
        "late_user.py": "from lib import helper\n",
        "replacement_home.py": "def helper():\n    return 'patched'\n",
    })
    result = interpreter.run_json("""
import json, lazypatch
import lib, early_user, replacement_home
original, replacement = lib.helper, replacement_home.helper

@lazypatch.when_imported("lib", name="rebinding")
def replace(module, patch):
    patch.setattr(module, "helper", replacement_home.helper, rebind=True)
import late_user                      # copies the replacement
during = [early_user.helper(), late_user.helper()]
lazypatch.unpatch_all()
print(json.dumps({"during": during,
                  "restored": [m.helper is original for m in (lib, early_user, late_user)],
                  "home_untouched": replacement_home.helper is replacement}))
""")
    assert result == {"during": ["patched", "patched"], "restored": [True, True, True],
                      "home_untouched": True}


def test_note_providers_and_on_undo_callbacks(interpreter):
    interpreter.write({"counted/__init__.py": "def work():\n    return 1\n"})
    result = interpreter.run_json("""
import json, lazypatch
undone = []

@lazypatch.when_imported("counted", name="counting")
def counting(module, patch):
    calls = {"n": 0}

    def wrapper(wrapped, instance, args, kwargs):
        calls["n"] += 1
        return wrapped(*args, **kwargs)
    patch.wrap(module, "work", wrapper)
    patch.note_provider(lambda: f"work() called {calls['n']} time(s)")
    patch.on_undo(lambda: undone.append("hook removed"))
import counted
counted.work(); counted.work()
notes = lazypatch.report()[0]["notes"]
lazypatch.unpatch("counting")
table = lazypatch.render_report()
print(json.dumps({"notes": notes, "undone": undone, "table": "called 2 time(s)" in table}))
""")
    assert result == {"notes": ["work() called 2 time(s)"], "undone": ["hook removed"], "table": True}

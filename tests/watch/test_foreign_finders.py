"""A finder that puts itself in front of lazypatch's after activation (pytest's assertion
rewriter, typeguard/beartype import hooks) keeps its place, and the watched modules it
imports are patched all the same, instead of being reported as not imported."""

from __future__ import annotations

import os
import subprocess
import sys


def test_a_hand_written_finder_at_the_front_claiming_a_watched_module(interpreter):
    interpreter.write({"claimed/target.py": "VALUE = 'original'\n", "claimed/__init__.py": ""})
    result = interpreter.run_json("""
import importlib.machinery, json, sys
import lazypatch.auto, lazypatch

@lazypatch.when_imported("claimed.target", name="foreign.patch")
def patched(module, patch):
    patch.setattr(module, "VALUE", "patched")

class Instrumenting:                  # claims claimed.* as an instrumenting hook would
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("claimed"):
            return importlib.machinery.PathFinder.find_spec(fullname, path)
        return None

hook = Instrumenting()
sys.meta_path.insert(0, hook)   # noticed as it is inserted: the very next import is claimed
import claimed.target
record = next(r for r in lazypatch.report() if r["name"] == "foreign.patch")
print(json.dumps({"value": claimed.target.VALUE, "status": record["status"],
                  "front": sys.meta_path[0] is hook}))
""")
    assert result == {"value": "patched", "status": "applied", "front": True}


def test_a_finder_assigned_to_the_front_by_slice_is_guarded_as_well(interpreter):
    interpreter.write({"claimed2/__init__.py": "VALUE = 'original'\n"})
    result = interpreter.run_json("""
import importlib.machinery, json, sys
import lazypatch.auto, lazypatch

@lazypatch.when_imported("claimed2", name="foreign.slice")
def patched(module, patch):
    patch.setattr(module, "VALUE", "patched")

class Claiming:
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "claimed2":
            return importlib.machinery.PathFinder.find_spec(fullname, path)
        return None

hook = Claiming()
sys.meta_path[:0] = [hook]
import claimed2
print(json.dumps({"value": claimed2.VALUE, "front": sys.meta_path[0] is hook,
                  "a_list": isinstance(sys.meta_path, list)}))
""")
    assert result == {"value": "patched", "front": True, "a_list": True}


def test_pytest_assertion_rewriting_under_lazypatch_run(tmp_path):
    """`lazypatch run -- python -m pytest`: the test module, imported by pytest's
    rewriter, is patched as it is imported."""
    (tmp_path / "patches_for_tests.py").write_text(
        "import lazypatch\n"
        "@lazypatch.when_imported('test_patched_module', name='rewrite.patch')\n"
        "def patched(module, patch):\n"
        "    patch.setattr(module, 'VALUE', 'patched')\n")
    (tmp_path / "test_patched_module.py").write_text(
        "VALUE = 'original'\n\n"
        "def test_value():\n"
        "    assert VALUE == 'patched'\n")
    environment = dict(os.environ, PYTHONPATH=str(tmp_path))
    for name in [name for name in environment if name.startswith("LAZYPATCH")]:
        del environment[name]
    result = subprocess.run([sys.executable, "-m", "lazypatch", "run", "--modules",
                             "patches_for_tests", "--", sys.executable, "-m", "pytest", "-q",
                             "-p", "no:cacheprovider", "test_patched_module.py"],
                            cwd=tmp_path, env=environment, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


REBUILT_PROGRAM = """
import importlib.machinery, json, pickle, sys
import lazypatch.auto, lazypatch

@lazypatch.when_imported("rebuilt_one", name="rebuilt.one")
def one(module, patch):
    patch.setattr(module, "VALUE", "patched")

@lazypatch.when_imported("rebuilt_two", name="rebuilt.two")
def two(module, patch):
    patch.setattr(module, "VALUE", "patched")

class Claiming:
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("rebuilt_"):
            return importlib.machinery.PathFinder.find_spec(fullname, path)
        return None

class ClaimingClass:                 # a class: cannot be guarded like an instance
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.startswith("rebuilt_"):
            return importlib.machinery.PathFinder.find_spec(fullname, path)
        return None

sys.meta_path = list(sys.meta_path)      # rebuilt, as programs do
sys.meta_path.insert(0, Claiming())
import rebuilt_one
sys.meta_path = [ClaimingClass] + [f for f in sys.meta_path if f is not ClaimingClass]
sys.meta_path.reverse()
import rebuilt_two
status = {r["name"]: r["status"] for r in lazypatch.report()}
restored = pickle.loads(pickle.dumps(sys.meta_path))
print(json.dumps({"one": rebuilt_one.VALUE, "two": rebuilt_two.VALUE,
                  "status": [status["rebuilt.one"], status["rebuilt.two"]],
                  "pickled": [type(f).__name__ if not isinstance(f, type) else f.__name__
                              for f in restored][:2],
                  "same_finder": any(f is lazypatch.watch.importer.installed_finder()
                                     for f in restored)}))
"""


def test_a_program_that_rebuilds_and_reorders_sys_meta_path_still_gets_its_patches(interpreter):
    interpreter.write({"rebuilt_one.py": "VALUE = 'original'\n",
                       "rebuilt_two.py": "VALUE = 'original'\n"})
    result = interpreter.run_json(REBUILT_PROGRAM)
    assert result["one"] == result["two"] == "patched", result
    assert result["status"] == ["applied", "applied"], result
    assert result["same_finder"] is True, result


# A program that serves its modules from its own finder and leaves the import system's
# path finder off sys.meta_path: lazypatch's own modules, which the engine imports when
# first needed (the machinery at the first watched import, undo, the report), are still
# found, as a list assigned in place or as the list changed in place.
OWN_FINDER_ONLY = """
import importlib.abc, importlib.machinery, importlib.util, json, sys
import lazypatch.auto, lazypatch

class Serving(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "served":
            return importlib.util.spec_from_loader(fullname, self)
        return None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        module.VALUE = "original"

@lazypatch.when_imported("served", name="own.served")
def fix(module, patch):
    patch.setattr(module, "VALUE", "patched")

serving = Serving()
if sys.argv[1] == "assigned":
    sys.meta_path = [serving]
else:
    sys.meta_path.remove(importlib.machinery.PathFinder)
    sys.meta_path.append(serving)
import served
during = served.VALUE
lazypatch.unpatch("own.served")
status = {r["name"]: r["status"] for r in lazypatch.report()}["own.served"]
after = served.VALUE
sys.meta_path.append(importlib.machinery.PathFinder)   # back: files import again
import colorsys
print(json.dumps({"during": during, "after": after, "status": status,
                  "files_import": colorsys.__name__}))
"""


def test_a_program_that_leaves_the_path_finder_out_still_gets_its_patches(interpreter):
    for how in ("assigned", "changed"):
        result = interpreter.run_json(OWN_FINDER_ONLY, args=[how])
        assert result == {"during": "patched", "after": "original", "status": "reverted",
                          "files_import": "colorsys"}, how


# Used as a library (no activation), lazypatch leaves sys.meta_path the program's list
# (docs/activation.md). A program that assigns a list of its own without lazypatch's
# finder imports its targets unpatched from then on: the report says so, with the two
# calls that mend it, rather than leaving the patch "pending" as if never imported.
LIBRARY_FINDER_DROPPED = """
import importlib.machinery, json, sys
import lazypatch

@lazypatch.when_imported("dropped_target", name="library.dropped")
def fix(module, patch):
    patch.setattr(module, "VALUE", "patched")

@lazypatch.when_imported("dropped_later", name="library.later")
def fix_later(module, patch):
    patch.setattr(module, "VALUE", "patched")

sys.meta_path = [importlib.machinery.BuiltinImporter, importlib.machinery.FrozenImporter,
                 importlib.machinery.PathFinder]
import dropped_target
record = lambda name: {r["name"]: r for r in lazypatch.report()}[name]
dropped = record("library.dropped")
seen = {"value": dropped_target.VALUE, "status": dropped["status"], "reason": dropped["reason"]}
lazypatch.install()
seen["after_install"] = record("library.dropped")["reason"]
applied = lazypatch.notify_module_loaded(sys.modules["dropped_target"], "dropped_target")
import dropped_later
seen.update(applied=applied, value_applied=dropped_target.VALUE, later=dropped_later.VALUE)
print(json.dumps(seen))
"""


def test_a_library_use_says_when_the_program_dropped_its_finder(interpreter):
    interpreter.write({"dropped_target.py": "VALUE = 'original'\n",
                       "dropped_later.py": "VALUE = 'original'\n"})
    result = interpreter.run_json(LIBRARY_FINDER_DROPPED)
    assert result["value"] == "original" and result["status"] == "pending"
    reason = result["reason"]
    assert reason.startswith("dropped_target was imported without lazypatch seeing it: "
                             "lazypatch's finder is not on sys.meta_path"), reason
    assert "lazypatch.install() puts it back first" in reason, reason
    assert reason.endswith("lazypatch.notify_module_loaded(sys.modules['dropped_target'], "
                           "'dropped_target')"), reason
    # Back on the list, the finder patches the imports to come; the missed one is still named.
    assert result["after_install"].startswith("dropped_target was imported without lazypatch "
                                              "seeing it: lazypatch's finder was not on "
                                              "sys.meta_path then"), result["after_install"]
    assert result["applied"] == ["library.dropped"] and result["value_applied"] == "patched"
    assert result["later"] == "patched"


# Used as a library, lazypatch guards a finder put in front of its own at the next import
# that reaches its finder (docs/activation.md), whether the program changed its list in
# place or assigned a new one holding lazypatch's finder.
LIBRARY_FRONT = """
import importlib.abc, importlib.machinery, json, sys
import lazypatch

class Front(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("front_served"):
            return importlib.machinery.PathFinder.find_spec(fullname, path)
        return None

@lazypatch.when_imported("front_served", name="library.front")
def fix(module, patch):
    patch.setattr(module, "VALUE", "patched")

if sys.argv[1] == "assigned":
    sys.meta_path = [Front(), *sys.meta_path]
else:
    sys.meta_path.insert(0, Front())
import colorsys   # declined by Front: reaches lazypatch's finder, which guards Front
import front_served
print(json.dumps({"value": front_served.VALUE, "list": type(sys.meta_path).__name__}))
"""


def test_a_library_use_guards_a_finder_put_in_front_of_a_new_list_too(interpreter):
    interpreter.write({"front_served.py": "VALUE = 'original'\n"})
    for how in ("changed", "assigned"):
        result = interpreter.run_json(LIBRARY_FRONT, args=[how])
        assert result == {"value": "patched", "list": "list"}, how

"""A watched import whose loader is the path finder's own (a new ``SourceFileLoader``,
``SourcelessFileLoader`` or ``ExtensionFileLoader`` per spec) gets no loader proxy:
``run_body`` is put on that loader instance as its ``exec_module`` and taken off before
the body runs (importer.OWN_LOADER_TYPES). These tests hold that shadow to its promises
in fresh interpreters: the module sees its real loader all along, the shadow is gone
after every outcome of the import, a spec asked for without an import carries a harmless
one, runpy still gets its patches, and threads importing different modules at once each
get theirs exactly once.
"""

from __future__ import annotations

import importlib.util
import py_compile
import sys

import pytest

# Standard modules that CPython builds as extension files (ExtensionFileLoader); a
# distribution may build some in (Debian's 3.13 and 3.14 have ``array`` built in, served
# by BuiltinImporter): extension_module() takes the first that is a file here.
EXTENSION_CANDIDATES = ("array", "cmath", "mmap", "_bisect", "_lzma")


def extension_module() -> str:
    """A standard module this interpreter loads from an extension file."""
    for name in EXTENSION_CANDIDATES:
        spec = importlib.util.find_spec(name)
        if spec is not None and type(spec.loader).__name__ == "ExtensionFileLoader":
            return name
    pytest.skip(f"none of {EXTENSION_CANDIDATES} is an extension file in this interpreter")


RECORDER = {
    # Each watched body records, while it runs, what it sees of its loader.
    "recorder.py": """
        SEEN = {}

        def look(namespace):
            loader = namespace["__loader__"]
            SEEN[namespace["__name__"]] = {
                "loader": type(loader).__name__,
                "spec_loader_is_loader": namespace["__spec__"].loader is loader,
                "shadow": "exec_module" in vars(loader)}
            return loader
    """,
    "patches_mod.py": f"""
        import lazypatch
        CALLS = []

        def mark(module):
            CALLS.append(module.__name__)
            module.PATCHED = True

        for target in ("plain_target", "compiled_target") + {EXTENSION_CANDIDATES!r}:
            lazypatch.when_imported(target, name="mark." + target)(mark)
    """,
    "plain_target.py": "import recorder\nrecorder.look(globals())\nVALUE = 1\n",
}


def after_import(module_name: str) -> str:
    """Script lines adding what ``module_name``'s module shows of its loader after it."""
    return f"""
loader = {module_name}.__loader__
after[{module_name!r}] = {{"loader": type(loader).__name__,
                         "spec_loader_is_loader": {module_name}.__spec__.loader is loader,
                         "shadow": "exec_module" in vars(loader),
                         "patched": {module_name}.PATCHED}}
"""


@pytest.mark.parametrize("runpy_loaded", [False, True])
def test_source_sourceless_and_extension_modules_see_their_real_loader_during_and_after(
        interpreter, runpy_loaded):
    interpreter.write(RECORDER)
    # A module present only as a .pyc (SourcelessFileLoader)
    source = interpreter.root / "compiled_source.py"
    source.write_text("import recorder\nrecorder.look(globals())\nVALUE = 2\n")
    py_compile.compile(str(source), cfile=str(interpreter.root / "compiled_target.pyc"))
    source.unlink()
    extension = extension_module()
    result = interpreter.run_json(("import runpy\n" if runpy_loaded else "") + f"""
import json, sys, patches_mod, recorder
assert {extension!r} not in sys.modules
import plain_target, compiled_target, {extension}
after = {{}}
""" + after_import("plain_target") + after_import("compiled_target") + after_import(extension)
        + """
print(json.dumps({"during": recorder.SEEN, "after": after, "calls": patches_mod.CALLS}))
""")
    real = {"spec_loader_is_loader": True, "shadow": False}
    assert result["during"] == {
        "plain_target": dict(real, loader="SourceFileLoader"),
        "compiled_target": dict(real, loader="SourcelessFileLoader")}
    assert result["after"] == {
        "plain_target": dict(real, loader="SourceFileLoader", patched=True),
        "compiled_target": dict(real, loader="SourcelessFileLoader", patched=True),
        extension: dict(real, loader="ExtensionFileLoader", patched=True)}
    assert result["calls"] == ["plain_target", "compiled_target", extension]


FAILING_BODIES = {
    "error": "raise ValueError('the body failed')",
    "interrupt": "raise KeyboardInterrupt",
}
VICTIM = {
    "victim_patches.py": """
        import lazypatch
        LOADERS = []     # the loader of every import attempt, as the patches see it
        FAIL = []        # what the patches raise: "after" (strict mode), "before"

        @lazypatch.before_import("victim", name="victim.before")
        def before(module):
            LOADERS.append(module.__loader__)
            if "before" in FAIL:
                raise KeyboardInterrupt

        @lazypatch.when_imported("victim", name="victim.after")
        def after(module):
            if "after" in FAIL:
                raise ValueError("nope")
    """,
}


@pytest.mark.parametrize("outcome", ["error", "interrupt", "strict", "before_interrupt",
                                     "reload", "success"])
def test_the_shadow_is_gone_after_every_outcome_of_the_import(interpreter, outcome):
    body = FAILING_BODIES.get(outcome, "")
    interpreter.write(dict(VICTIM, **{"victim.py": f"VALUE = 1\n{body}\n"}))
    result = interpreter.run_json("""
import importlib, json, lazypatch, victim_patches
outcome = %r
if outcome == "strict":
    lazypatch.set_strict()
    victim_patches.FAIL.append("after")
if outcome == "before_interrupt":
    victim_patches.FAIL.append("before")
try:
    import victim
    if outcome == "reload":
        importlib.reload(victim)
except BaseException as error:
    raised = type(error).__name__
else:
    raised = None
loaders = victim_patches.LOADERS
print(json.dumps({"raised": raised, "loaders": [type(loader).__name__ for loader in loaders],
                  "shadows": [("exec_module" in vars(loader)) for loader in loaders],
                  "status": {r["name"]: r["status"] for r in lazypatch.report()}}))
""" % outcome)
    expected_raise = {"error": "ValueError", "interrupt": "KeyboardInterrupt",
                      "strict": "PatchError", "before_interrupt": "KeyboardInterrupt"}
    assert result["raised"] == expected_raise.get(outcome)
    attempts = 2 if outcome == "reload" else 1
    assert result["loaders"] == ["SourceFileLoader"] * attempts
    assert result["shadows"] == [False] * attempts
    if outcome in ("success", "reload"):
        assert result["status"] == {"victim.before": "applied", "victim.after": "applied"}
    if outcome == "strict":
        assert result["status"]["victim.after"] == "failed"


@pytest.mark.parametrize("runpy_loaded", [False, True])
def test_a_spec_found_without_an_import_carries_a_harmless_shadow(interpreter, runpy_loaded):
    # importlib.util.find_spec asks the finders without importing: the loader of the spec
    # it returns keeps the shadow (nobody runs a body), which then does what a proxy did:
    # the module imported by hand from that spec gets its patches. With runpy loaded, such
    # a spec gets a proxy (runpy reads get_code from it, see programs.py). An import of
    # the name afterwards gets a loader of its own.
    interpreter.write(dict(RECORDER))
    result = interpreter.run_json(("import runpy\n" if runpy_loaded else "") + """
import importlib.util, json, sys, patches_mod
spec = importlib.util.find_spec("plain_target")
shadowed = "exec_module" in vars(spec.loader)
proxy = type(spec.loader).__name__ == "LoaderProxy"
source = spec.loader.get_source("plain_target")
by_hand = importlib.util.module_from_spec(spec)     # importlib's recipe of an import
sys.modules["plain_target"] = by_hand
spec.loader.exec_module(by_hand)
del sys.modules["plain_target"]
import plain_target     # a new spec and loader of its own
print(json.dumps({"shadowed": shadowed, "proxy": proxy, "source": "VALUE = 1" in source,
                  "imported": [plain_target.PATCHED, "exec_module" in vars(plain_target.__loader__),
                               plain_target.__loader__ is not spec.loader],
                  "by_hand": [by_hand.PATCHED, type(by_hand.__loader__).__name__,
                              "exec_module" in vars(by_hand.__loader__)],
                  "calls": patches_mod.CALLS}))
""")
    assert result["shadowed"] is not runpy_loaded and result["proxy"] is runpy_loaded
    assert result["source"] is True
    assert result["imported"] == [True, False, True]
    assert result["by_hand"] == [True, "SourceFileLoader", False]
    assert result["calls"] == ["plain_target", "plain_target"]


def test_a_shadow_called_for_a_module_of_another_spec_says_which_loader_to_call(interpreter):
    # The shadow is one method object shared by every own loader (importer.SPEC_LOADER):
    # it runs the body with the loader the module's spec names. Called for a module whose
    # spec names another loader, it refuses, naming the module and the loader to call,
    # and runs no patch; the module's own spec then imports it with its patches.
    interpreter.write(dict(RECORDER))
    result = interpreter.run_json("""
import importlib.util, json, sys, types, patches_mod
spec = importlib.util.find_spec("plain_target")
stranger = types.ModuleType("plain_target")     # no spec of its own
try:
    spec.loader.exec_module(stranger)
    error = None
except ImportError as caught:
    error = [str(caught), caught.name]
by_hand = importlib.util.module_from_spec(spec)
sys.modules["plain_target"] = by_hand
spec.loader.exec_module(by_hand)
print(json.dumps({"error": error, "calls": patches_mod.CALLS, "patched": by_hand.PATCHED}))
""")
    message, name = result["error"]
    assert name == "plain_target"
    assert "spec names another loader (None)" in message
    assert "call exec_module of the loader its spec names" in message
    assert result["calls"] == ["plain_target"] and result["patched"] is True


def test_threads_importing_different_watched_modules_at_once_each_get_their_patches_once(
        interpreter):
    files = {f"worker_{index}.py": "import time\ntime.sleep(0.05)\nimport recorder\n"
                                   "recorder.look(globals())\nVALUE = 1\n"
             for index in range(8)}
    files["recorder.py"] = RECORDER["recorder.py"]
    interpreter.write(files)
    result = interpreter.run_json("""
import importlib, json, threading, lazypatch, recorder
calls = []

def mark(module):
    calls.append(module.__name__)
    module.PATCHED = True

names = ["worker_%d" % index for index in range(8)]
for name in names:
    lazypatch.when_imported(name, name="mark." + name)(mark)
barrier = threading.Barrier(8)
modules = {}

def work(name):
    barrier.wait()
    modules[name] = importlib.import_module(name)
threads = [threading.Thread(target=work, args=(name,)) for name in names]
for thread in threads: thread.start()
for thread in threads: thread.join()
print(json.dumps({"calls": sorted(calls),
                  "patched": all(module.PATCHED for module in modules.values()),
                  "during": sorted(set(map(json.dumps, recorder.SEEN.values()))),
                  "shadows": [("exec_module" in vars(module.__loader__))
                              for module in modules.values()],
                  "status": sorted({r["status"] for r in lazypatch.report()})}))
""")
    assert result["calls"] == sorted(f"worker_{index}" for index in range(8))
    assert result["patched"] is True
    assert result["during"] == [
        '{"loader": "SourceFileLoader", "spec_loader_is_loader": true, "shadow": false}']
    assert result["shadows"] == [False] * 8
    assert result["status"] == ["applied"]


def test_python_dash_m_program_and_its_imports_are_patched_with_runpy_loaded(interpreter):
    # python -m loads runpy: the program's own spec, asked for by runpy without an
    # import, gets a proxy (its get_code runs the patches); the imports it makes hold
    # their module lock, so they get the shadow.
    interpreter.write(dict(RECORDER, **{
        "app/__init__.py": "",
        "app/__main__.py": """
            import json, recorder
            import app.worker
            print(json.dumps({"main": MAIN_PATCHED, "worker": app.worker.PATCHED,
                              "seen": recorder.SEEN}))
        """,
        "app/worker.py": "import recorder\nrecorder.look(globals())\nPATCHED = False\n",
        "sitecustomize.py": """
            import lazypatch

            @lazypatch.before_import("app.__main__")
            def early(module):
                module.MAIN_PATCHED = True

            @lazypatch.when_imported("app.worker")
            def mark(module):
                module.PATCHED = True
        """,
    }))
    result = interpreter.run_command([sys.executable, "-m", "app"])
    assert result.stdout.strip().endswith(
        '{"main": true, "worker": true, "seen": {"app.worker": {"loader": "SourceFileLoader", '
        '"spec_loader_is_loader": true, "shadow": false}}}')

"""Shared fixtures: real packages written to disk, imported in a fresh interpreter.

Import semantics cannot be tested by editing ``sys.modules`` in the test
process: each scenario writes its modules to a temporary directory and runs
a new ``python`` on them, so the finder, the import locks and the loaders
are the real ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent


def write_tree(root: Path, files: Mapping[str, str]) -> None:
    """Write ``{"pkg/__init__.py": "source", ...}`` under ``root`` (dedented)."""
    for relative, source in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))


def clean_environment(extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The test process's environment without any LAZYPATCH_* setting."""
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("LAZYPATCH") and key not in ("PYTHONPATH",)}
    environment["PYTHONDONTWRITEBYTECODE"] = "1"
    environment["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    if extra:
        environment.update(extra)
    return environment


def last_json(text: str) -> object:
    """The JSON document a scenario printed as its last non-empty line of ``text``."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines, "no output"
    return json.loads(lines[-1])


class Interpreter:
    """Runs Python code in a fresh interpreter with a temporary directory on sys.path."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, files: Mapping[str, str]) -> "Interpreter":
        write_tree(self.root, files)
        return self

    def run(self, code: str, *, env: Optional[Mapping[str, str]] = None,
            args: Sequence[str] = (), check: bool = True, timeout: float = 120,
            python_args: Sequence[str] = ()) -> subprocess.CompletedProcess:
        """Run ``code`` (dedented) as a script; fail the test with its output if it fails."""
        script = self.root / "_scenario.py"
        script.write_text(textwrap.dedent(code))
        return self.run_command([sys.executable, *python_args, str(script), *args],
                                env=env, check=check, timeout=timeout)

    def run_command(self, command: Sequence[str], *, env: Optional[Mapping[str, str]] = None,
                    check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        environment = clean_environment(env)
        # The checkout under test comes before an installed lazypatch (a worktree's
        # scenarios must run the worktree's code, not the editable install's).
        environment["PYTHONPATH"] = os.pathsep.join(
            [str(self.root), str(REPOSITORY)]
            + ([environment["PYTHONPATH"]] if environment.get("PYTHONPATH") else []))
        result = subprocess.run(list(command), cwd=self.root, env=environment,
                                capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            pytest.fail(f"command failed with exit code {result.returncode}: {command}\n"
                        f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}")
        return result

    def run_json(self, code: str, **kwargs) -> object:
        """Run ``code``, which must print one JSON document as its last stdout line."""
        result = self.run(code, **kwargs)
        assert result.stdout.strip(), f"no output; stderr:\n{result.stderr}"
        return last_json(result.stdout)


@pytest.fixture
def interpreter(tmp_path: Path) -> Interpreter:
    """A fresh-interpreter runner rooted at a temporary directory."""
    return Interpreter(tmp_path)


# --- the demo of the many-machines tests (test_many_machines*.py) -------------

# A package and two patches on it that every launcher scenario imports; the
# workers' tests add patches of their own (``many_machines_demo(more)``).
MANY_MACHINES_DEMO_PATCHES = """
        import lazypatch

        @lazypatch.when_imported("demo_target", name="demo.value")
        def value(module, patch):
            patch.setattr(module, "VALUE", "patched")

        @lazypatch.when_imported("demo_target", name="demo.other")
        def other(module, patch):
            patch.setattr(module, "OTHER", "patched")
"""


def many_machines_demo(more_patches: str = "") -> Dict[str, str]:
    """``demo_target`` (VALUE and OTHER 'original') and ``demo_patches`` (demo.value,
    demo.other, then ``more_patches``, indented as they are)."""
    return {"demo_target/__init__.py": "VALUE = 'original'\nOTHER = 'original'\n",
            "demo_patches.py": MANY_MACHINES_DEMO_PATCHES + more_patches}


# --- the demo of the report tests (test_reports.py, test_report_merge.py) ------

def report_demo(more_patches: str) -> Dict[str, str]:
    """``demo_target`` (VALUE = 1) and ``demo_patches``: demo.ok (VALUE = 2), then
    ``more_patches`` (indented as they are; ``os`` and ``lazypatch`` are imported)."""
    return {"demo_target.py": "VALUE = 1\n",
            "demo_patches.py": """
        import os, lazypatch

        @lazypatch.when_imported("demo_target", name="demo.ok")
        def ok(module, patch):
            patch.setattr(module, "VALUE", 2)
""" + more_patches}


def write_demo_report(interpreter: "Interpreter", path: "object",
                      env: Optional[Mapping[str, str]] = None) -> subprocess.CompletedProcess:
    """One fresh process that imports demo_target under lazypatch with demo_patches and
    writes its report to ``path`` (placeholders filled in) at exit."""
    environment = {"LAZYPATCH_MODULES": "demo_patches", "LAZYPATCH_REPORT": str(path)}
    environment.update(env or {})
    return interpreter.run("import warnings; warnings.simplefilter('ignore'); "
                           "import lazypatch.auto, demo_target", env=environment)


# --- fixtures of the trust suite (tests/trust/) ---------------------

TRUST_HELPERS = '''
"""Helpers the trust scenarios import (written beside each scenario)."""

import json
import sys
import threading

import lazypatch


def record(name):
    """The report record of patch ``name``."""
    for item in lazypatch.report():
        if item["name"] == name:
            return item
    raise KeyError(f"no report record for {name!r}")


def status(name):
    return record(name)["status"]


def apply_now(how, function, target, name):
    """Make patch ``name`` on ``target`` (already imported) apply now, the way ``how``
    says: registered then ("register"; ``function`` its function), or registered
    disabled before and now enabled ("enable") or scoped ("scope")."""
    if how == "register":
        lazypatch.register(function, target, name=name)
    elif how == "enable":
        lazypatch.enable(name)
    else:
        lazypatch.patched(name).__enter__()


def live_changes():
    """(patch name, change) for every change the report still shows as live."""
    return [(item["name"], change) for item in lazypatch.report()
            for change in item["changes"] if change.get("live")]


def plain(module):
    """A module's own names without the dunder ones, as a dict."""
    return {key: value for key, value in vars(module).items()
            if not (key.startswith("__") and key.endswith("__"))}


def globals_by_identity(exclude_names=()):
    """{(module name, global name): id(value)} of every loaded module, and the values
    (returned so that they stay alive and no id is reused while comparing)."""
    identities, keep = {}, []
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name in exclude_names:
            continue
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            identities[(module_name, key)] = id(value)
            keep.append(value)
    return identities, keep


def changed_globals(before, after):
    """'module.name' for every global whose object differs between two snapshots."""
    return sorted(f"{module}.{key}" for (module, key), identity in before.items()
                  if (module, key) in after and after[(module, key)] != identity)


def run_threads(functions, timeout=60.0):
    """Run each function in its own thread; return their exceptions (as repr strings).

    Fails with "deadlock" when a thread is still running after ``timeout`` seconds.
    """
    errors = []

    def guarded(function):
        try:
            function()
        except BaseException as error:   # reported to the test, KeyboardInterrupt included
            errors.append(repr(error))

    threads = [threading.Thread(target=guarded, args=(function,), daemon=True)
               for function in functions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    stuck = [thread.name for thread in threads if thread.is_alive()]
    if stuck:
        print(json.dumps({"deadlock": stuck}), flush=True)
        raise SystemExit(f"deadlock: threads {stuck} still running after {timeout} s")
    return errors


def emit(document):
    """Print the scenario's result as the last stdout line (JSON)."""
    print(json.dumps(document, default=repr), flush=True)
'''


@pytest.fixture
def trust_interpreter(interpreter: Interpreter) -> Interpreter:
    """A fresh-interpreter runner whose directory also holds ``trust_helpers.py``."""
    return interpreter.write({"trust_helpers.py": TRUST_HELPERS})


@pytest.fixture
def forget_new_patches():
    """For in-process tests: undo and forget every patch registered during the test."""
    import lazypatch
    lazypatch.reset()
    yield
    lazypatch.reset()


# --- fixtures of the pack tests (tests/packs/) -------------------------------------

@pytest.fixture(scope="module")
def ops():
    """``mmcv.ops`` imported against the pure-PyTorch ``mmcv._ext``, as lazypatch
    provides it; what the import added is removed afterwards, and mmengine's layer
    registry is left as it was found.

    mmengine refuses to register a layer twice: the layers of an ``mmcv.ops`` that
    another test module imported and removed again are set aside first, so that
    this module's import can register its own.
    """
    import mmcv
    from mmengine.registry import MODELS
    try:
        from lazypatch.registry.shared.mmcv_ext import build_ext_module
    except ImportError:
        from registry.shared.mmcv_ext import build_ext_module
    before = set(sys.modules)
    saved_ext = sys.modules.get("mmcv._ext")
    had_ops_attribute = "ops" in vars(mmcv)
    registered = dict(MODELS._module_dict)
    if "mmcv.ops" not in sys.modules:
        for name, cls in registered.items():
            if getattr(cls, "__module__", "").startswith("mmcv.ops"):
                del MODELS._module_dict[name]
    sys.modules["mmcv._ext"] = build_ext_module()
    try:
        import mmcv.ops
        import mmcv.ops.multi_scale_deform_attn  # noqa: F401
        yield mmcv.ops
    finally:
        for name in set(sys.modules) - before:
            if name.startswith("mmcv.ops") or name == "mmcv._ext":
                del sys.modules[name]
        if saved_ext is not None:
            sys.modules["mmcv._ext"] = saved_ext
        else:
            sys.modules.pop("mmcv._ext", None)
        if not had_ops_attribute:
            vars(mmcv).pop("ops", None)
        MODELS._module_dict.clear()
        MODELS._module_dict.update(registered)


# --- the slow tier ------------------------------------------------------------------
# `./dev test` leaves out tests marked `slow` (setup.cfg) so that it finishes in under
# 10 minutes on 2 cores; `./dev test --all` and CI run them. A new slow test is marked
# where it is written (`@pytest.mark.slow`); the files below are slow as a whole (each
# test builds and trains a real model, runs a whole external suite or starts a cluster),
# so they are marked here, in one place, rather than test by test.
SLOW_FILES = frozenset({
    "tests/packs/openmmlab/test_mmdet3d_point_configs.py",
    "tests/packs/openmmlab/test_mmdet3d_sparse_configs.py",
    "tests/packs/openmmlab/test_mmdet3d_own_heads.py",
    "tests/packs/device/test_mmdet3d_cuda_suite.py",
    "tests/packs/openmmlab/test_models.py",
    "tests/packs/shared/test_mmcv_own_op_tests.py",
    "tests/packs/ascend/test_defaults.py",
    "tests/integrations/test_ray_and_dask_workers.py",
    "tests/driving_sdk/test_migrations.py",
    "tests/project/test_demo.py",
    "tests/packs/openmmlab/test_1x_models.py",
    "tests/driving_sdk/test_model_files.py",
})


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.fspath)).resolve()
        try:
            relative = path.relative_to(REPOSITORY).as_posix()
        except ValueError:
            continue
        if relative in SLOW_FILES:
            item.add_marker(pytest.mark.slow)

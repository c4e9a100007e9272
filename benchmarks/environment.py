"""The places benchmark processes run in: a clean virtual environment and generated modules.

Why a clean environment: the development venv has an *editable* install of
lazypatch, whose setuptools finder imports ``re``, ``pathlib`` and
``importlib.util`` at every start. Those would then look free to lazypatch
and hide its real import costs. The clean venv has only the standard library,
a copy of this checkout's ``lazypatch`` (with ``registry/`` placed as
``lazypatch.registry``, as the distribution ships it) and a copy of ``wrapt``
(for the wrapt baselines), and is made from the base interpreter, so a bare
start there loads the ~32 modules a user's venv does.

Measurements that need torch, numpy or the OpenMMLab stack use the
interpreter running the benchmarks (the development venv) for both sides.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple

from benchmarks.harness import last_json_line, process_environment, run_process

REPOSITORY = Path(__file__).resolve().parent.parent
BENCHMARKS = REPOSITORY / "benchmarks"
MODULE_PREFIX = "bm_"


@dataclass
class Environment:
    """Paths every measurement needs; build it with ``build_environment``."""

    root: Path
    clean_python: Path      # venv without the editable finder: lazypatch + wrapt copies only
    stack_python: Path      # the interpreter running the benchmarks (torch, numpy, mm*)
    modules: Path           # generated tiny modules bm_0 ... bm_{count-1}
    module_count: int
    scripts: Path           # benchmark scripts written by the measure_* modules

    def script(self, name: str, source: str) -> Path:
        """Write a benchmark script (dedented) and return its path."""
        path = self.scripts / name
        path.write_text(textwrap.dedent(source))
        return path

    def env(self) -> Dict[str, str]:
        return process_environment()


def base_interpreter() -> str:
    """The interpreter the current venv was made from (no site-packages of the venv)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def build_environment(root: Path, module_count: int) -> Environment:
    """Create the clean venv, copy lazypatch and wrapt into it, generate the modules.

    All ``.py`` files are compiled up front, so that no measured process pays
    for writing bytecode.
    """
    root.mkdir(parents=True, exist_ok=True)
    venv = root / "venv"
    run_process([base_interpreter(), "-m", "venv", "--without-pip", str(venv)])
    clean_python = venv / "bin" / "python"
    site = _purelib(clean_python)
    copy_lazypatch(site)
    copy_wrapt(site)
    modules = root / "modules"
    write_tiny_modules(modules, module_count)
    scripts = root / "scripts"
    scripts.mkdir()
    run_process([str(clean_python), "-m", "compileall", "-q", str(site / "lazypatch"),
                 str(site / "wrapt"), str(modules)])
    return Environment(root=root, clean_python=clean_python, stack_python=Path(sys.executable),
                       modules=modules, module_count=module_count, scripts=scripts)


def copy_lazypatch(site: Path) -> None:
    """Copy this checkout's ``lazypatch`` into ``site``, with ``registry/`` placed as
    ``lazypatch.registry`` (as the distribution ships it); an older copy is replaced."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.rmtree(site / "lazypatch", ignore_errors=True)
    shutil.copytree(REPOSITORY / "lazypatch", site / "lazypatch", ignore=ignore)
    shutil.copytree(REPOSITORY / "registry", site / "lazypatch" / "registry", ignore=ignore)


#: Real spconv's CPU build, for the stand-in's comparison
#: (benchmarks/packs/cuda_extensions/bench_sparse_conv.py).
SPCONV_REQUIREMENTS = REPOSITORY / "requirements" / "bench-spconv.txt"
#: Where its venv is kept between runs (installing it takes a minute or two; a changed
#: requirements file rebuilds it).
SPCONV_VENV = BENCHMARKS / ".spconv-venv"


def spconv_interpreter(venv: Path = SPCONV_VENV) -> "Tuple[Optional[Path], str]":
    """An interpreter where ``import spconv`` is real spconv (requirements/bench-spconv.txt)
    and torch, mmcv, mmdet3d are the running interpreter's (a ``.pth`` adds its
    site-packages), with this checkout's lazypatch copied in: ``(python, "")``, or
    ``(None, why)`` when spconv does not install on this machine (the reason, from pip)."""
    python = venv / "bin" / "python"
    stamp = venv / ".requirements"
    wanted = SPCONV_REQUIREMENTS.read_text()
    if not (python.exists() and stamp.exists() and stamp.read_text() == wanted):
        shutil.rmtree(venv, ignore_errors=True)
        run_process([base_interpreter(), "-m", "venv", str(venv)])
        site = _purelib(python)
        (site / "stack.pth").write_text(str(_purelib(Path(sys.executable))) + "\n")
        installed = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "-r", str(SPCONV_REQUIREMENTS)], capture_output=True, text=True)
        if installed.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            lines = (installed.stderr or installed.stdout).strip().splitlines()
            return None, "spconv does not install here: " + (lines[-1] if lines else "pip failed")
        stamp.write_text(wanted)
    copy_lazypatch(_purelib(python))
    return python, ""


def _purelib(python: Path) -> Path:
    """The site-packages directory of ``python``."""
    return Path(str(last_json_line(run_process(
        [str(python), "-c", "import json, sysconfig; "
                            "print(json.dumps(sysconfig.get_paths()['purelib']))"]).stdout)))


def copy_wrapt(site: Path) -> None:
    """Copy the installed wrapt package (with its C extension) into ``site``."""
    spec = importlib.util.find_spec("wrapt")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("wrapt is not installed in the interpreter running the benchmarks; "
                           "install requirements/dev.txt")
    source = Path(list(spec.submodule_search_locations)[0])
    shutil.copytree(source, site / "wrapt", ignore=shutil.ignore_patterns("__pycache__"))


def write_tiny_modules(directory: Path, count: int) -> None:
    """``bm_<i>.py`` modules with a one-line body: an import that costs almost only
    the import machinery, so that a finder's overhead shows."""
    directory.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        (directory / f"{MODULE_PREFIX}{index}.py").write_text(f"value = {index}\n")
    (directory / "bm_wrap_target.py").write_text(
        "def hot(x):\n    return x\n")

"""The distribution ships the engine, every built-in pack and the typing marker."""

from __future__ import annotations

import configparser
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPOSITORY


def _installed_package_names():
    names = set()
    for source_root, installed_root in (("lazypatch", "lazypatch"), ("registry", "lazypatch.registry")):
        for init in (REPOSITORY / source_root).rglob("__init__.py"):
            relative = init.parent.relative_to(REPOSITORY / source_root)
            names.add(".".join([installed_root, *relative.parts]))
    return names


def test_setup_cfg_lists_every_package_directory():
    config = configparser.ConfigParser()
    config.read(REPOSITORY / "setup.cfg")
    listed = {line.strip() for line in config["options"]["packages"].splitlines() if line.strip()}
    assert listed == _installed_package_names()


@pytest.mark.stack
def test_wheel_contains_packs_bootstrap_and_py_typed(tmp_path: Path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(tmp_path), str(REPOSITORY)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("lazypatch-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("lazypatch/py.typed", "lazypatch/auto.py",
                     "lazypatch/activate/bootstrap/sitecustomize.py",
                     "lazypatch/registry/__init__.py", "lazypatch/registry/shared/mmcv_ext/msda.py",
                     "lazypatch/registry/numpy_compat/__init__.py", "lazypatch/registry/device/__init__.py"):
        assert required in names, required
    assert not any(name.startswith("registry/") for name in names)
    entry_points = next(name for name in names if name.endswith("entry_points.txt"))
    assert "lazypatch = lazypatch.cli.main:main" in zipfile.ZipFile(wheel).read(entry_points).decode()

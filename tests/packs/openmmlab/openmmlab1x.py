"""What the tests of the OpenMMLab 1.x stack share: whether they run in it, and how
to run a script there under ``lazypatch run``.

The 1.x stack is a second environment (``requirements/stack1x*.txt``; ``.ci/run``
builds it): mmcv 1.7.2 installed without ops, mmdet 2.28.2, mmdet3d 1.0.0rc4,
mmsegmentation 0.30.0, beside torch 2.13 (CPU) and NumPy 2. Tests that need it skip
elsewhere, saying so; the installed mmcv's version tells which environment this is.
"""
from __future__ import annotations

import glob
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

import pytest

from lazypatch import installed_version

MMCV_1X = installed_version("mmcv") or ""
IN_STACK_1X = MMCV_1X.startswith("1.")

#: Skips a test outside the 1.x stack, saying how to run it.
needs_stack_1x = pytest.mark.skipif(
    not IN_STACK_1X,
    reason="needs the OpenMMLab 1.x stack (mmcv 1.x without ops, mmdet 2.x, mmdet3d "
           "1.0.0rc4): build it as requirements/stack1x.txt says (.ci/run does) and run "
           "pytest with that environment's python")


#: In the 1.x stack ``mmcv.ops`` imports ``mmcv.runner``, which imports torchvision: the
#: index's CUDA build of it imports only with the cuda_extensions pack's stand-in for its
#: compiled operators. Scenarios reaching mmcv.ops there need that stand-in.
needs_torchvision_stand_in = pytest.mark.skipif(
    IN_STACK_1X and importlib.util.find_spec(
        "lazypatch.registry.cuda_extensions.torchvision_stand_in") is None,
    reason="in the 1.x stack, mmcv.ops imports torchvision, which needs the cuda_extensions "
           "pack's torchvision stand-in (registry/cuda_extensions/torchvision_stand_in.py)")


def run_under_lazypatch(command: Sequence[str], *, cwd: Path, report_directory: Path,
                        enable: Sequence[str] = ("device", "cuda_extensions"),
                        disable: Sequence[str] = (), env: Optional[Mapping[str, str]] = None,
                        timeout: float = 1800) -> subprocess.CompletedProcess:
    """``lazypatch run --enable ... -- <command>`` with this interpreter, writing one
    report per process into ``report_directory``."""
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("LAZYPATCH")}
    environment.update(env or {})
    report_directory.mkdir(parents=True, exist_ok=True)
    options: List[str] = [f"--enable={name}" for name in enable]
    options += [f"--disable={name}" for name in disable]
    options.append(f"--report={report_directory / 'report-{pid}.json'}")
    return subprocess.run([sys.executable, "-m", "lazypatch", "run", *options, "--",
                           *command], cwd=cwd, env=environment, capture_output=True,
                          text=True, timeout=timeout)


def patch_statuses(report_directory: Path) -> Dict[str, str]:
    """{patch name: status} of the patches that did something (applied, reverted after
    presenting, failed) in any report of ``report_directory``."""
    statuses: Dict[str, str] = {}
    for path in sorted(glob.glob(str(report_directory / "*.json"))):
        with open(path, encoding="utf-8") as handle:
            for record in json.load(handle)["patches"]:
                if record["status"] in ("applied", "reverted", "failed"):
                    statuses[record["name"]] = record["status"]
    return statuses


def last_json_line(text: str) -> dict:
    """The JSON document a script printed as its last line starting with ``{``."""
    lines = [line for line in text.splitlines() if line.startswith("{")]
    assert lines, f"no JSON line in the output:\n{text[-3000:]}"
    return json.loads(lines[-1])

"""Run DrivingSDK's own patcher tests, unchanged, against lazypatch's ``mx_driving.patcher``.

DrivingSDK's tests load the patcher's files by path (``<root>/mx_driving/patcher/X.py``,
``<root>`` three folders above the test file) and fake ``torch_npu`` with mocks. This
runner builds such a root in a temporary directory: lazypatch's stand-in files
(``lazypatch/driving_sdk/package``) as ``mx_driving/``, DrivingSDK's test files
copied unchanged beside them, and runs pytest there in a fresh interpreter.

Nothing is downloaded: give it an extracted checkout of Ascend/DrivingSDK, e.g.

    git -C <clone> archive HEAD tests/patcher | tar -x -C /tmp/dsdk            # 2.0
    git -C <clone> archive c0809f71~1 tests/torch | tar -x -C /tmp/dsdk-v1     # 1.0

    python tests/driving_sdk/driving_sdk_suite.py /tmp/dsdk tests/patcher
    python tests/driving_sdk/driving_sdk_suite.py /tmp/dsdk-v1 'tests/torch/test_patcher*.py'

It prints passed / failed / skipped per file.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Dict, List, Tuple

REPOSITORY = Path(__file__).resolve().parents[2]
PACKAGE = REPOSITORY / "lazypatch" / "driving_sdk" / "package"


def test_files(checkout: Path, pattern: str) -> List[Path]:
    """The test files ``pattern`` names in ``checkout`` (a folder: every test_*.py in it)."""
    target = checkout / pattern
    if target.is_dir():
        return sorted(target.glob("test_*.py"))
    return sorted(Path(path) for path in glob.glob(str(target)))


# DrivingSDK 1.0's tests subclass torch_npu's TestCase (torch_npu.testing.testcase), which
# needs an Ascend host. A FAKE torch_npu holding what those tests use stands in for it:
# unittest's TestCase and a run_tests() that runs unittest's main, and torch_npu's
# profiler API (its activities and levels, ``profile``, ``schedule``, the experimental
# config and the trace handler) over torch.profiler on the CPU.
FAKE_TORCH_NPU = {
    "torch_npu/__init__.py": '"""FAKE torch_npu: what DrivingSDK 1.0\'s tests use."""\n'
                             "from . import profiler  # noqa: F401\n",
    "torch_npu/profiler.py": '''"""FAKE torch_npu.profiler: its API over torch.profiler (CPU)."""
import enum

import torch.profiler as _torch_profiler


class ProfilerActivity(enum.Enum):
    CPU = "CPU"
    NPU = "NPU"


class ProfilerLevel(enum.Enum):
    Level0 = "Level0"
    Level1 = "Level1"
    Level2 = "Level2"


class _ExperimentalConfig:
    def __init__(self, profiler_level=ProfilerLevel.Level0, **options):
        self.profiler_level = profiler_level
        self.options = options


schedule = _torch_profiler.schedule
tensorboard_trace_handler = _torch_profiler.tensorboard_trace_handler


def profile(activities=None, experimental_config=None, **options):
    """No NPU here: the CPU activity is what torch.profiler records."""
    return _torch_profiler.profile(activities=[_torch_profiler.ProfilerActivity.CPU], **options)
''',
    "torch_npu/testing/__init__.py": "",
    "torch_npu/testing/testcase.py": "import unittest\n\nTestCase = unittest.TestCase\n\n\n"
                                     "def run_tests():\n    unittest.main()\n",
}


def build_root(checkout: Path, pattern: str, root: Path) -> List[Path]:
    """Lay out ``root`` as DrivingSDK's tests expect; the copied test files."""
    shutil.copytree(PACKAGE, root / "mx_driving", ignore=shutil.ignore_patterns("__pycache__"))
    needs_fake = any("torch_npu.testing" in path.read_text(encoding="utf-8", errors="replace")
                     for path in test_files(checkout, pattern))
    if needs_fake:
        for name, text in FAKE_TORCH_NPU.items():
            (root / "fake_torch_npu" / name).parent.mkdir(parents=True, exist_ok=True)
            (root / "fake_torch_npu" / name).write_text(text)
    copied = []
    for source in test_files(checkout, pattern):
        destination = root / source.relative_to(checkout)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)
        copied.append(destination)
    return copied


def run(checkout: Path, pattern: str, timeout: float = 1500) -> Dict[str, Tuple[int, int, int]]:
    """{test file: (passed, failed, skipped)} of DrivingSDK's tests against lazypatch."""
    with tempfile.TemporaryDirectory(prefix="driving-sdk-suite-") as directory:
        root = Path(directory)
        copied = build_root(checkout, pattern, root)
        if not copied:
            raise FileNotFoundError(f"no test file matches {pattern!r} in {checkout}")
        junit = root / "junit.xml"
        environment = dict(os.environ)
        environment.pop("LAZYPATCH", None)
        environment["PYTHONPATH"] = os.pathsep.join(
            [str(root), str(root / "fake_torch_npu")]
            + ([environment["PYTHONPATH"]] if environment.get("PYTHONPATH") else []))
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-p", "no:randomly", f"--junitxml={junit}", "--rootdir", str(root),
                        *[str(path) for path in copied]],
                       cwd=root, env=environment, capture_output=True, text=True, timeout=timeout)
        counts: Dict[str, List[int]] = {}
        for case in ElementTree.parse(junit).getroot().iter("testcase"):
            module = (case.get("classname") or "").split(".")
            name = next((part for part in module if part.startswith("test_")), "?") + ".py"
            tally = counts.setdefault(name, [0, 0, 0])
            if case.find("skipped") is not None:
                tally[2] += 1
            elif case.find("failure") is not None or case.find("error") is not None:
                tally[1] += 1
            else:
                tally[0] += 1
        return {name: (passed, failed, skipped)
                for name, (passed, failed, skipped) in sorted(counts.items())}


def table(counts: Dict[str, Tuple[int, int, int]]) -> str:
    lines = [f"{'file':40} {'passed':>6} {'failed':>6} {'skipped':>7}"]
    for name, (passed, failed, skipped) in counts.items():
        lines.append(f"{name:40} {passed:6} {failed:6} {skipped:7}")
    total = [sum(values[index] for values in counts.values()) for index in range(3)]
    lines.append(f"{'total':40} {total[0]:6} {total[1]:6} {total[2]:7}")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(table(run(Path(sys.argv[1]), sys.argv[2])))

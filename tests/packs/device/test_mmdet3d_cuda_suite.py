"""mmdet3d 1.4's and mmdet 3.3's own tests that skip on a CPU machine for lack of
CUDA, run unchanged on the CPU with the device pack and CUDA claimed available.

Nothing is downloaded: give an extracted checkout of each project's tests,

    git -C <mmdetection3d clone> archive v1.4.0 mmdet3d tests configs | tar -x -C /tmp/mmdet3d
    git -C <mmdetection clone> archive v3.3.0 mmdet tests configs | tar -x -C /tmp/mmdet

(the detector tests find ``configs/`` beside the imported package, so the package is
extracted too: pytest runs in the checkout and imports it from there.) An installed
mmdet 3.3.0 wheel holds the same package and, in ``mmdet/.mim/configs``, the same
configs: its ``mmdet/`` with that folder as ``configs/`` beside it, plus the suite's
``tests/`` files, is an equivalent checkout where the repository is too large to clone.
mmdet's tests need ``parameterized`` (requirements/dev.txt).
    LAZYPATCH_MMDET3D_CHECKOUT=/tmp/mmdet3d LAZYPATCH_MMDET_CHECKOUT=/tmp/mmdet pytest ...

(or ``python tests/packs/device/test_mmdet3d_cuda_suite.py <checkout>`` to print the table).
Without them these tests skip, saying so.

The files run are the ones whose source asks ``torch.cuda.is_available()`` (found by
reading the checkout, so the set follows the version), in a fresh interpreter with
``LAZYPATCH_ENABLE=device,cuda_extensions LAZYPATCH_CUDA_AVAILABLE=1`` and lazypatch
activated as a pytest plugin (``-p lazypatch.auto``). Judged by: no test may still skip
for lack of CUDA, every failure must be listed in :data:`KNOWN_FAILURES` with its reason,
and the pass count may not drop below the floor measured when this file last changed.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

MMDET3D_CHECKOUT = os.environ.get("LAZYPATCH_MMDET3D_CHECKOUT", "")
MMDET_CHECKOUT = os.environ.get("LAZYPATCH_MMDET_CHECKOUT", "")

#: Folders of each suite that the device pack is judged on (models, structures, transforms).
SUITE_FOLDERS = ("tests/test_models", "tests/test_structures", "tests/test_datasets/test_transforms")

#: Skip reasons that mean "no CUDA here" (pytest's text for skipif/skip).
CUDA_SKIP = re.compile(r"cuda|gpu", re.IGNORECASE)

#: test-id prefix -> why it cannot pass on the CPU under lazypatch's pure-PyTorch mmcv._ext.
KNOWN_FAILURES: Dict[str, str] = {
    "tests.test_models.test_detectors.test_mvxnet":
        "the test's data has no images, so 64-channel voxel features reach "
        "SparseEncoder(in_channels=128); spconv 2 (here the cuda_extensions stand-in, as "
        "the real one) refuses the channel mismatch, where mmcv's kernel reinterprets the "
        "filter silently (the test passes on mmcv's sparse ops, LAZYPATCH_ENABLE=device)",
}

#: The same for mmdet 3.3's run.
KNOWN_FAILURES_MMDET: Dict[str, str] = {
    "tests.test_models.test_detectors.test_kd_single_stage":
        "the LD config builds its teacher from a checkpoint URL (teacher_ckpt) at model "
        "construction: it needs the network, whatever the device",
    "tests.test_structures.test_bbox.test_base_boxes.TestBaseBoxes::test_tensor_like_functions":
        "asserts that boxes moved to 'cuda' and back with .cpu() are not is_cuda: on the CPU "
        "both are the same tensor, and under LAZYPATCH_CUDA_AVAILABLE=1 Tensor.is_cuda "
        "answers True for tensors on the target (see registry/device/SURFACE.md)",
    "tests.test_models.test_detectors.test_two_stage.TestTwoStageMask::"
    "test_two_stage_forward_predict_mode_2_queryinst":
        "the untrained QueryInst can predict inverted boxes (x2 < x1); mmdet's "
        "FCNMaskHead pastes masks box by box on a CPU tensor (device.type == 'cpu', "
        "skip_empty=True) and torch.arange refuses the inverted range; on a GPU it pastes "
        "over the whole image. Tensor.device stays honest under the device pack",
}

#: Passed tests of the mmdet3d run, as last measured (raise it when more pass).
FLOOR_MMDET3D = 76
#: Passed tests of the mmdet run, as last measured (raise it when more pass).
FLOOR_MMDET = 126


def cuda_test_files(checkout: Path) -> List[Path]:
    """Test files under :data:`SUITE_FOLDERS` whose source consults CUDA availability."""
    found = []
    for folder in SUITE_FOLDERS:
        for path in sorted((checkout / folder).rglob("test_*.py")):
            if "cuda.is_available" in path.read_text(encoding="utf-8", errors="replace"):
                found.append(path)
    return found


def run_suite(checkout: Path, files: List[Path], junit: Path,
              timeout: float = 3000) -> Dict[str, Tuple[str, str]]:
    """{test id: (outcome, message)} of ``files`` run under the device pack, outcome one
    of passed / failed / skipped."""
    environment = dict(os.environ)
    environment.pop("LAZYPATCH", None)
    environment.update(LAZYPATCH_ENABLE="device,cuda_extensions", LAZYPATCH_CUDA_AVAILABLE="1")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "no:randomly", "-p", "lazypatch.auto", f"--junitxml={junit}",
                          "--rootdir", str(checkout), *[str(path) for path in files]],
                         cwd=checkout, env=environment, capture_output=True, text=True,
                         timeout=timeout)
    if not junit.exists():  # pytest stopped before collecting (a missing plugin, ...)
        raise AssertionError(f"pytest wrote no report (exit {run.returncode}):\n"
                             f"{(run.stdout + run.stderr)[-3000:]}")
    outcomes: Dict[str, Tuple[str, str]] = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        for tag, outcome in (("skipped", "skipped"), ("failure", "failed"), ("error", "failed")):
            element = case.find(tag)
            if element is not None:
                outcomes[test_id] = (outcome, element.get("message") or "")
                break
        else:
            outcomes[test_id] = ("passed", "")
    return outcomes


def table(outcomes: Dict[str, Tuple[str, str]]) -> str:
    counts = {kind: sum(1 for outcome, _ in outcomes.values() if outcome == kind)
              for kind in ("passed", "failed", "skipped")}
    lines = [f"passed {counts['passed']}  failed {counts['failed']}  skipped {counts['skipped']}"]
    lines += [f"  {outcome:7} {test_id}  {message[:150]}"
              for test_id, (outcome, message) in sorted(outcomes.items()) if outcome != "passed"]
    return "\n".join(lines)


def known_reason(test_id: str, known: Dict[str, str]) -> str:
    return next((reason for prefix, reason in known.items()
                 if test_id.startswith(prefix)), "")


def needs(path: str, variable: str) -> Path:
    if not path or not (Path(path) / "tests").is_dir() or not (Path(path) / "configs").is_dir():
        pytest.skip(f"no extracted checkout with tests/ and configs/ (set {variable}; see this file's "
                    f"docstring for the git archive command)")
    return Path(path)


def judge(checkout: Path, tmp_path: Path, floor: int, known: Dict[str, str], capsys) -> None:
    files = cuda_test_files(checkout)
    assert files, f"no test file consulting torch.cuda.is_available under {checkout}"
    outcomes = run_suite(checkout, files, tmp_path / "junit.xml")
    with capsys.disabled():
        print(f"\n{checkout} CUDA-gated tests on the CPU under the device pack:\n"
              + table(outcomes))
    still_skipping = [test_id for test_id, (outcome, message) in outcomes.items()
                      if outcome == "skipped" and CUDA_SKIP.search(message)]
    unexplained = [test_id for test_id, (outcome, _) in outcomes.items()
                   if outcome == "failed" and not known_reason(test_id, known)]
    assert not still_skipping, f"still skipped for lack of CUDA: {still_skipping}"
    assert not unexplained, f"failures without a listed reason: {unexplained}"
    assert sum(outcome == "passed" for outcome, _ in outcomes.values()) >= floor


@pytest.mark.stack
def test_mmdet3d_cuda_gated_tests_run_on_the_cpu(tmp_path, capsys):
    judge(needs(MMDET3D_CHECKOUT, "LAZYPATCH_MMDET3D_CHECKOUT"), tmp_path, FLOOR_MMDET3D,
          KNOWN_FAILURES, capsys)


@pytest.mark.stack
def test_mmdet_cuda_gated_tests_run_on_the_cpu(tmp_path, capsys):
    judge(needs(MMDET_CHECKOUT, "LAZYPATCH_MMDET_CHECKOUT"), tmp_path, FLOOR_MMDET,
          KNOWN_FAILURES_MMDET, capsys)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    import tempfile
    with tempfile.TemporaryDirectory() as directory:
        root = Path(sys.argv[1]).resolve()
        print(table(run_suite(root, cuda_test_files(root), Path(directory) / "junit.xml")))

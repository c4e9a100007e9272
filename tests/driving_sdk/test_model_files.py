"""DrivingSDK's 18 model patch files, unchanged, in the host setups of
tests/driving_sdk/driving_sdk_model_files.py: each imports, lands every patch lazily when its target
is imported, lists it in the report, and its undo leaves every touched object as before.

Needs an extracted DrivingSDK checkout (LAZYPATCH_DRIVING_SDK_CHECKOUT; nothing is
downloaded). The files import their model's stack at the top (mmcv 1.x for the mmdet3d
models, megatron for Cosmos): LAZYPATCH_MODEL_FILES_PYTHON names an interpreter that has
it (default: this one); a file whose stack this host lacks skips, naming the module.
LAZYPATCH_MODEL_PROJECTS names a folder holding the models' own checkouts
(``<folder>/BEVFormer``...), put on ``sys.path`` as the READMEs have them; without one,
a target inside the model's project is not importable and its patch stays pending.
Each case runs two fresh interpreters (about 20-70 s on two cores): marked ``stack``, and
slow (tests/conftest.py SLOW_FILES). Three host setups: DrivingSDK's operators with its
patcher and ``LAZYPATCH_DRIVING_SDK=lazypatch``, its operators without the patcher and no
setting, and neither torch_npu nor DrivingSDK with ``LAZYPATCH_ENABLE=npu_stand_in``. A file
in ``KNOWN_SHORTFALLS`` xfails on exactly the problem named there, with the reason.
The 1.x interpreter needs, besides mmcv 1.7.2 / mmdet 2.28.2 / mmdet3d 1.0.0rc4:
megatron-core 0.10.0 (Cosmos-Transfer1), for DiffusionDrive's project einops,
diffusers 0.34.0 and huggingface_hub, and for PanoOcc's timm 1.0.9 (its own compiled
``MultiScaleDeformableAttention`` is the cuda_extensions pack's stand-in: HOST_REPAIRS).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import driving_sdk_model_files as model_files  # noqa: E402

CHECKOUT = os.environ.get("LAZYPATCH_DRIVING_SDK_CHECKOUT", "")
PYTHON = os.environ.get("LAZYPATCH_MODEL_FILES_PYTHON", sys.executable)
SETUPS = ("fake_operators_setting_lazypatch", "fake_operators_without_patcher",
          "npu_stand_in_without_torch_npu")
# What the FAKE host provides; a file failing to import one of these is a failure here.
PROVIDED = ("mx_driving", "torch_npu")


def checkout() -> Path:
    path = Path(CHECKOUT) if CHECKOUT else None
    if path is None or not (path / "model_examples").is_dir():
        pytest.skip("no DrivingSDK checkout: set LAZYPATCH_DRIVING_SDK_CHECKOUT to a folder "
                    "extracted with `git --git-dir=<mirror of Ascend/DrivingSDK> archive HEAD "
                    "| tar -x -C <folder>`")
    return path


@pytest.mark.stack
@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("model_file", model_files.MODEL_FILES, ids=lambda item: item.path)
def test_model_file_lands_lazily_and_is_undone_exactly_fake(model_file, setup, tmp_path):
    run = model_files.run_model_file(checkout(), model_file, setup, tmp_path, python=PYTHON)
    missing = ""
    if run.error.startswith("ModuleNotFoundError"):
        missing = run.error.split("No module named ", 1)[-1].strip("'")
    elif run.error.startswith("ImportError: cannot import name") and " from '" in run.error:
        missing = run.error.split(" from '", 1)[1].split("'", 1)[0]   # another major version
    if missing and missing.split(".")[0] not in PROVIDED:
        pytest.skip(f"{model_file.path} imports {missing!r}, which this host does not have "
                    f"(set LAZYPATCH_MODEL_FILES_PYTHON to an interpreter with the model's stack)")
    problems = run.problems()
    known = model_files.KNOWN_SHORTFALLS.get(model_file.path)
    if known is not None:
        text, reason = known
        assert problems, f"{model_file.path} passes now: remove it from KNOWN_SHORTFALLS"
        assert all(text in problem for problem in problems), "\n".join(problems)
        pytest.xfail(reason)
    assert problems == [], "\n".join(problems)


def test_model_file_list_names_every_file_that_uses_the_patcher():
    """The runner's list is DrivingSDK's: every model file importing mx_driving.patcher."""
    root = checkout()
    found = sorted(str(path.relative_to(root)) for path in (root / "model_examples").rglob("*.py")
                   if "mx_driving.patcher" in path.read_text(encoding="utf-8", errors="replace"))
    assert found == sorted(item.path for item in model_files.MODEL_FILES)
    assert len(found) == 18

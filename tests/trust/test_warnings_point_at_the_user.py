"""A bad setting's warning names the user's own line, never a file of lazypatch's:
not a pack's module (the training pack's settings), not the `lazypatch` console script."""

from __future__ import annotations

import os
import sys

import pytest


def test_a_pack_setting_warns_at_the_users_import_line(interpreter):
    result = interpreter.run("import lazypatch.auto\n",
                             env={"LAZYPATCH_BRAKE_STEP": "x", "LAZYPATCH_ENABLE": "training"})
    lines = [line for line in result.stderr.splitlines() if "LAZYPATCH_BRAKE_STEP" in line]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{interpreter.root / '_scenario.py'}:1: ConfigurationWarning"), \
        lines[0]


def test_a_bad_setting_under_lazypatch_run_points_at_the_activation(interpreter):
    console_script = os.path.join(os.path.dirname(sys.executable), "lazypatch")
    result = interpreter.run_command([console_script, "run", "--", sys.executable, "-c", "pass"],
                                     env={"LAZYPATCH_STRICT": "maybe"})
    lines = [line for line in result.stderr.splitlines() if "LAZYPATCH_STRICT" in line]
    # once for the command (its child, told by the parent, stays quiet), and not at the
    # console script's own line
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("<lazypatch activation>:0: ConfigurationWarning"), lines[0]


def test_a_rank_variable_of_non_ascii_digits_is_no_rank_and_activation_completes(interpreter):
    result = interpreter.run_json(
        "import json, lazypatch.auto, lazypatch\n"
        "info = lazypatch.activation_info()\n"
        "print(json.dumps([info['active'], len(info['sources']) > 10]))\n",
        env={"RANK": "\u00b2", "LOCAL_RANK": "\u0663", "LAZYPATCH_LOG": "INFO"})
    assert result == [True, True]


def test_a_too_deeply_nested_config_file_is_ignored_with_a_message(interpreter):
    interpreter.write({"deep.toml": "[lazypatch]\nvalue = " + "[" * 5000 + "]" * 5000 + "\n"})
    result = interpreter.run(
        "import json, lazypatch.auto, lazypatch\n"
        "print(json.dumps(lazypatch.activation_info()['active']))\n",
        env={"LAZYPATCH_CONFIG": str(interpreter.root / "deep.toml")})
    assert result.stdout.strip().splitlines()[-1] == "true"
    assert "nested too deeply" in result.stderr


def test_a_misspelled_attribute_is_named_and_a_meant_new_name_is_not(interpreter):
    interpreter.write({"typo_target.py": "def norm(x):\n    return x\n"})
    result = interpreter.run("""
import json
import lazypatch

@lazypatch.when_imported("typo_target", name="typo.patch")
def typo(module, patch):
    patch.setattr(module, "nrom", lambda x: -x)           # a typo of norm
    patch.setattr(module, "norm_v2", lambda x: x, new=True)  # meant to be new
    patch.setattr(module, "helper_added", 1)               # new, nothing close

import typo_target
record = next(r for r in lazypatch.report() if r["name"] == "typo.patch")
print(json.dumps(record["notes"]))
""")
    notes = result.stdout.strip().splitlines()[-1]
    assert "did you mean 'norm'?" in notes and "norm_v2" not in notes
    assert "helper_added" not in notes
    assert result.stderr.count("NewAttributeWarning") == 1, result.stderr
    assert "_scenario.py" in result.stderr.split("NewAttributeWarning")[0]   # the user's line


def test_a_patch_waiting_for_a_misspelled_module_says_what_was_meant(interpreter):
    result = interpreter.run_json("""
import json
import lazypatch

@lazypatch.when_imported("nunpy", name="typo.module")
def never(module):
    pass

@lazypatch.when_imported("json_later_module", name="typo.not_imported_yet")
def later(module):
    pass

import numpy
notes = {r["name"]: r["notes"] for r in lazypatch.report() if r["name"].startswith("typo.")}
print(json.dumps(notes))
""")
    assert result["typo.module"] == [
        "no module named 'nunpy' can be imported here (did you mean 'numpy'?)"]
    assert any("can be imported here" in note for note in result["typo.not_imported_yet"])


@pytest.mark.stack   # torch.distributed
def test_looking_through_a_package_for_changes_raises_no_warning_of_its_own(interpreter):
    # The DrivingSDK layer snapshots a package's namespaces around a 1.0 patch function;
    # reading torch.distributed.reduce_op's __class__ made torch warn from lazypatch.
    result = interpreter.run("""
        import sys, warnings
        warnings.simplefilter("error")
        import torch.distributed
        from lazypatch.driving_sdk.capture import module_owners, registry_types
        owners = [owner for name, module in list(sys.modules.items())
                  if name.startswith("torch.distributed") and module is not None
                  for owner in module_owners(name, module, set(), registry_types())]
        print(len(owners) > 10)
    """)
    assert result.stdout.strip() == "True" and "FutureWarning" not in result.stderr

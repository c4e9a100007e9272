"""Where settings may come from (docs/configuration.md): a pyproject.toml found in the
current directory, which nobody named, may not import modules, write outside its folder
or enable an unsafe patch; a file the user named may do the first two; only the user's
environment or command line enables an unsafe patch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import clean_environment

CHECK = """
import json, os
import lazypatch.auto, lazypatch
unsafe = next(r for r in lazypatch.report()
              if r["name"] == "openmmlab.mmengine_checkpoint_load_unsafe")
print(json.dumps({"unsafe_enabled": unsafe["enabled"],
                  "module_imported": "planted" in __import__("sys").modules,
                  "report": lazypatch.activation_info()["report_path"]}))
"""

HOSTILE = """
[tool.lazypatch]
enable = ["openmmlab.mmengine_checkpoint_load_unsafe", "training"]
modules = ["planted"]
report = "../outside/owned.json"
"""


def _run(interpreter, env=None):
    result = interpreter.run(CHECK, env=env)
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def test_a_project_file_nobody_named_cannot_enable_unsafe_import_or_write_elsewhere(interpreter):
    interpreter.write({"pyproject.toml": HOSTILE, "planted.py": "print('planted ran')\n"})
    seen, stderr = _run(interpreter)
    assert seen == {"unsafe_enabled": False, "module_imported": False, "report": ""}
    assert "sets modules, which imports modules" in stderr
    assert "sets report, which writes outside" in stderr and "LAZYPATCH_TRUST_PROJECT_CONFIG=1" in stderr


def test_a_file_the_user_named_may_import_and_write_but_not_enable_unsafe(interpreter):
    interpreter.write({"named.toml": HOSTILE.replace("[tool.lazypatch]", "[lazypatch]"),
                       "planted.py": "X = 1\n"})
    seen, _ = _run(interpreter, env={"LAZYPATCH_CONFIG": str(interpreter.root / "named.toml")})
    assert seen["module_imported"] is True
    assert seen["report"] == str(interpreter.root / ".." / "outside" / "owned.json")
    assert seen["unsafe_enabled"] is False


def test_the_environment_enables_an_unsafe_patch(interpreter):
    interpreter.write({"pyproject.toml": HOSTILE})
    seen, _ = _run(interpreter, env={
        "LAZYPATCH_ENABLE": "openmmlab.mmengine_checkpoint_load_unsafe"})
    assert seen["unsafe_enabled"] is True


def test_trusting_the_project_file_is_the_users_choice(interpreter):
    interpreter.write({"pyproject.toml": HOSTILE, "planted.py": "X = 1\n"})
    seen, _ = _run(interpreter, env={"LAZYPATCH_TRUST_PROJECT_CONFIG": "1"})
    assert seen["module_imported"] is True and seen["unsafe_enabled"] is False


def test_typos_get_the_nearest_name_under_every_activation_path(interpreter):
    import os
    import subprocess
    import sys
    interpreter.write({"bad.toml": "[lazypatch]\nenabel = [\"device\"]\n"})
    environment = dict(os.environ, PYTHONPATH=str(interpreter.root))
    for name in [name for name in environment if name.startswith("LAZYPATCH")]:
        del environment[name]
    under_run = subprocess.run([sys.executable, "-m", "lazypatch", "run", "--config",
                                str(interpreter.root / "bad.toml"), "--", sys.executable, "-c",
                                "pass"], env=environment, capture_output=True, text=True,
                               timeout=120)
    assert "unknown key 'enabel'" in under_run.stderr and "did you mean 'enable'" in under_run.stderr
    pack = interpreter.run("import lazypatch.auto\n", env={"LAZYPATCH_ENABLE": "devcie"})
    assert "did you mean 'device'" in pack.stderr, pack.stderr


TRAINING = """
import os, sys
import lazypatch.auto
import torch
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(6):
    optimizer.zero_grad()
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
print("trained")
"""

PROFILING_PROJECT = """
[tool.lazypatch]
profile = "{folder}"
profile_skip = 0
profile_wait = 0
profile_warmup = 0
"""


def _files_under(folder):
    return sorted(str(path) for path in folder.rglob("*") if path.is_file())


@pytest.mark.stack   # the real torch profiler
def test_a_project_file_nobody_named_cannot_send_profiler_traces_outside_it(interpreter):
    """Every path-valued setting, a pack's too (training's `profile`), stays inside the
    project when the project file was found rather than named; inside, it works."""
    project = interpreter.root / "project"
    outside = interpreter.root / "outside"
    project.mkdir()
    (project / "pyproject.toml").write_text(PROFILING_PROJECT.format(folder="../outside/traces"))
    (project / "train.py").write_text(TRAINING)
    environment = clean_environment()
    refused = subprocess.run([sys.executable, "train.py"], cwd=project, env=environment,
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 0 and "trained" in refused.stdout, refused.stderr
    assert "sets profile, which writes outside" in refused.stderr, refused.stderr
    assert not outside.exists(), _files_under(outside)
    via_run = subprocess.run([sys.executable, "-m", "lazypatch", "run", "--", sys.executable,
                              "train.py"], cwd=project, env=environment,
                             capture_output=True, text=True, timeout=300)
    assert via_run.returncode == 0 and "trained" in via_run.stdout, via_run.stderr
    assert not outside.exists(), _files_under(outside)
    # The same setting inside the project writes its traces there.
    (project / "pyproject.toml").write_text(PROFILING_PROJECT.format(folder="traces"))
    inside = subprocess.run([sys.executable, "train.py"], cwd=project, env=environment,
                            capture_output=True, text=True, timeout=300)
    assert inside.returncode == 0 and "writes outside" not in inside.stderr, inside.stderr
    assert _files_under(project / "traces"), inside.stderr

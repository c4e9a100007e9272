"""Where settings may come from (docs/configuration.md): a pyproject.toml found in the
current directory, which nobody named, may not import modules, write outside its folder
or enable an unsafe patch; a file the user named may do the first two; only the user's
environment or command line enables an unsafe patch."""

from __future__ import annotations

import json

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

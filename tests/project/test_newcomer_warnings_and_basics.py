"""Issue 15: warnings at the user's line and said once; the basics of a command-line tool;
the device pack's start-up line."""

from __future__ import annotations

import configparser
import sys

from conftest import REPOSITORY

LAZYPATCH = [sys.executable, "-m", "lazypatch"]


def _warnings(stderr: str):
    return [line for line in stderr.splitlines() if "Warning: " in line]


def test_a_configuration_warning_points_at_the_users_import_line_once(interpreter):
    interpreter.write({"program.py": "x = 1\nimport lazypatch.auto\n"})
    result = interpreter.run_command([sys.executable, "program.py"],
                                     env={"LAZYPATCH_STRICT": "maybe"})
    found = _warnings(result.stderr)
    assert len(found) == 1, result.stderr
    assert found[0].startswith(f"{interpreter.root / 'program.py'}:2: ConfigurationWarning: "
                               f"lazypatch: LAZYPATCH_STRICT='maybe'")


def test_a_failing_patch_is_attributed_to_the_line_importing_its_target(interpreter):
    interpreter.write({
        "victim.py": "VALUE = 1\n",
        "failing_patches.py": """
            import lazypatch
            @lazypatch.when_imported("victim", name="demo.fails")
            def fails(module, patch):
                raise RuntimeError("no")
        """,
        "program.py": "import lazypatch.auto\n\nimport victim\n",
    })
    result = interpreter.run_command([sys.executable, "program.py"],
                                     env={"LAZYPATCH_MODULES": "failing_patches"})
    found = _warnings(result.stderr)
    assert len(found) == 1 and "demo.fails" in found[0], result.stderr
    assert found[0].startswith(f"{interpreter.root / 'program.py'}:3: PatchFailedWarning")


def test_under_lazypatch_run_each_configuration_message_is_said_once_per_process_tree(interpreter):
    child = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'pass'], check=True)"
    result = interpreter.run_command(
        LAZYPATCH + ["run", "--", sys.executable, "-c", child],
        env={"LAZYPATCH_STRICT": "maybe", "LAZYPATCH_DISABLE": "nosuchpatch",
             "LAZYPATCH_DISABEL": "x"})
    found = _warnings(result.stderr)
    assert len([line for line in found if "LAZYPATCH_STRICT='maybe'" in line]) == 1, result.stderr
    assert len([line for line in found if "'nosuchpatch'" in line]) == 1, result.stderr
    assert len([line for line in found if "LAZYPATCH_DISABEL" in line]) == 1, result.stderr
    # nothing points into lazypatch's own files
    assert not [line for line in found if "sitecustomize.py" in line or "/lazypatch/" in line]


def test_device_pack_says_once_where_cuda_calls_go(interpreter):
    child = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'pass'], check=True)"
    command = ["--", sys.executable, "-c", child]
    told = interpreter.run_command(LAZYPATCH + ["run", "--enable", "device"] + command)
    lines = [line for line in told.stderr.splitlines() if "device pack enabled" in line]
    assert lines == ["lazypatch: device pack enabled: CUDA calls go to the CPU (torch_npu is "
                     "not installed); LAZYPATCH_DEVICE or `lazypatch run --device` chooses"]
    chosen = interpreter.run_command(LAZYPATCH + ["run", "--enable", "device", "--device",
                                                  "cpu"] + command)
    assert "CUDA calls go to 'cpu' (LAZYPATCH_DEVICE)" in chosen.stderr
    quiet = interpreter.run_command(LAZYPATCH + ["run", "--enable", "device", "--log",
                                                 "WARNING"] + command)
    assert "device pack enabled" not in quiet.stderr
    rank_1 = interpreter.run_command(LAZYPATCH + ["run", "--enable", "device"] + command,
                                     env={"RANK": "1"})
    assert "device pack enabled" not in rank_1.stderr
    off = interpreter.run_command(LAZYPATCH + ["run", "--"] + command[1:])
    assert "device pack enabled" not in off.stderr


def test_version_and_bare_command(interpreter):
    from lazypatch import __version__
    version = interpreter.run_command(LAZYPATCH + ["--version"])
    assert version.stdout.strip() == f"lazypatch {__version__}"
    bare = interpreter.run_command(LAZYPATCH)
    assert bare.returncode == 0 and bare.stdout.startswith("usage: lazypatch")
    assert "COMMAND" in bare.stdout and "doctor" in bare.stdout


def test_license_file_and_classifiers_match_the_metadata():
    text = (REPOSITORY / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in text
    setup = configparser.ConfigParser()
    setup.read(REPOSITORY / "setup.cfg")
    assert setup["metadata"]["license"] == "Apache-2.0"
    assert setup["options"]["python_requires"] == ">=3.11"
    classifiers = setup["metadata"]["classifiers"].split("\n")
    versions = [line.rsplit(" ", 1)[1] for line in classifiers
                if line.startswith("Programming Language :: Python :: 3.")]
    assert versions == ["3.11", "3.12", "3.13", "3.14"]
    assert any(line.startswith("Development Status :: ") for line in classifiers)
    # The oldest and the newest declared versions, and 3.13, are the ones CI runs
    # (3.12 is not obtainable on the CI machines: .ci/run says so).
    ci = (REPOSITORY / ".ci" / "run").read_text()
    assert 'engine_suite 3.13' in ci and 'engine_suite 3.14' in ci


# A plugin pack that cannot be imported, and a malformed entry point of another
# distribution: the parent says each once; its children, which activate too and meet
# the same problems, stay quiet about them.
BROKEN_PLUGINS = {
    "site/broken_pack-1.0.dist-info/METADATA":
        "Metadata-Version: 2.1\nName: broken-pack\nVersion: 1.0\n",
    "site/broken_pack-1.0.dist-info/entry_points.txt":
        "[lazypatch]\nplugin_target = broken_pack.fix:apply\n",
    "site/broken_pack/__init__.py": "",
    "site/broken_pack/fix.py": "import no_such_module_for_lazypatch_tests\n",
    "site/garbled-2.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: garbled\nVersion: 2.0\n",
    "site/garbled-2.0.dist-info/entry_points.txt": "[lazypatch]\nplugin_target = not valid!\n",
    "plugin_target.py": "VALUE = 1\n",
    "program.py": """
        import subprocess, sys
        import plugin_target
        subprocess.run([sys.executable, "-c", "import plugin_target"], check=True)
        subprocess.run([sys.executable, "-c", "import plugin_target"], check=True)
    """,
}


def test_each_warning_is_said_once_per_process_tree(interpreter):
    interpreter.write(BROKEN_PLUGINS)
    environment = {"LAZYPATCH_CACHE_DIR": str(interpreter.root / "cache"),
                   "PYTHONPATH": str(interpreter.root / "site"),
                   "LAZYPATCH_LOG": "loud"}
    result = interpreter.run_command(LAZYPATCH + ["run", "--", sys.executable, "program.py"],
                                     env=environment)
    found = _warnings(result.stderr)
    failed = [line for line in found if "broken_pack.plugin_target" in line]
    garbled = [line for line in found if "garbled" in line]
    bad_level = [line for line in found if "LAZYPATCH_LOG='loud'" in line]
    assert (len(failed), len(garbled), len(bad_level)) == (1, 1, 1), result.stderr
    assert "no_such_module_for_lazypatch_tests" in failed[0]
    # each process on its own (no parent said it) still warns
    alone = interpreter.run_command([sys.executable, "-c", "import lazypatch.auto, "
                                     "plugin_target"], env=environment)
    assert len([line for line in _warnings(alone.stderr)
                if "broken_pack.plugin_target" in line]) == 1, alone.stderr

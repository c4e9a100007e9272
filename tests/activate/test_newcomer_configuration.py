"""Issue 15: configuration does what the README says.

Pack settings are TOML keys too (checked once the packs have declared them),
``[tool.lazypatch]`` in ./pyproject.toml is read, `lazypatch run` catches a
bad --config file, makes paths absolute, gives every pack variable a flag
and lists it in --help, hides internal variables, and a misspelled name gets
"did you mean".
"""

from __future__ import annotations

import json
import os
import sys

LAZYPATCH = [sys.executable, "-m", "lazypatch"]

# A pack that declares its variable when it is imported: after the file was read.
LATE_PACK = {
    "late_pack.py": """
        import lazypatch
        lazypatch.declare_variable("LAZYPATCH_LATE_KNOB", "late pack: how far to turn the knob")
    """,
}

SHOW = """
    import json, lazypatch.auto, lazypatch
    print(json.dumps({name: lazypatch.setting(name) for name in
                      ("LAZYPATCH_LATE_KNOB", "LAZYPATCH_BRAKE_STEP", "LAZYPATCH_DEVICE")}))
"""


def test_pack_keys_in_the_config_file_reach_the_packs_and_typos_get_a_suggestion(interpreter):
    interpreter.write(dict(LATE_PACK, **{
        "settings.toml": "[lazypatch]\nmodules = ['late_pack']\nlate_knob = 11\n"
                         "brake_step = 5\ndevice = 'cpu'\nlate_knop = 3\n"}))
    result = interpreter.run(SHOW, env={"LAZYPATCH_CONFIG": "settings.toml"})
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "LAZYPATCH_LATE_KNOB": "11", "LAZYPATCH_BRAKE_STEP": "5", "LAZYPATCH_DEVICE": "cpu"}
    warnings = [line for line in result.stderr.splitlines() if "Warning" in line]
    assert len(warnings) == 1, result.stderr
    assert "unknown key 'late_knop' in settings.toml (did you mean 'late_knob'?)" in warnings[0]


def test_pyproject_table_is_read_and_the_environment_and_config_file_win(interpreter):
    interpreter.write(dict(LATE_PACK, **{
        "pyproject.toml": "[project]\nname = 'x'\n\n[tool.lazypatch]\nmodules = ['late_pack']\n"
                          "late_knob = 'from pyproject'\nbrake_step = 7\ndevice = 'cpu'\n",
        "settings.toml": "[lazypatch]\nbrake_step = 9\n"}))
    only_pyproject = interpreter.run_json(SHOW)
    assert only_pyproject == {"LAZYPATCH_LATE_KNOB": "from pyproject",
                              "LAZYPATCH_BRAKE_STEP": "7", "LAZYPATCH_DEVICE": "cpu"}
    layered = interpreter.run_json(SHOW, env={"LAZYPATCH_CONFIG": "settings.toml",
                                              "LAZYPATCH_DEVICE": "npu"})
    assert layered == {"LAZYPATCH_LATE_KNOB": "from pyproject", "LAZYPATCH_BRAKE_STEP": "9",
                       "LAZYPATCH_DEVICE": "npu"}


def test_a_pyproject_without_the_table_costs_no_toml_parser(interpreter):
    interpreter.write({"pyproject.toml": "[project]\nname = 'x'\n"})
    result = interpreter.run("""
        import sys, lazypatch.auto
        print("tomllib" in sys.modules)
    """)
    assert result.stdout.split()[-1] == "False"


def test_run_catches_a_bad_config_file_with_a_clear_message(interpreter):
    interpreter.write({"broken.toml": "this is = = not toml\n", "scalar.toml": "lazypatch = 3\n"})
    for name, message in (("missing.toml", "no such file"),
                          ("broken.toml", "not a valid TOML file"),
                          ("scalar.toml", "'lazypatch' must be a table")):
        result = interpreter.run_command(LAZYPATCH + ["run", "--config", name, "--",
                                                      sys.executable, "-c", "pass"], check=False)
        assert result.returncode == 2, result.stderr
        assert f"usage error: lazypatch run: --config {name}: {message}" in result.stderr


def test_run_makes_paths_absolute_and_gives_each_process_its_own_report(interpreter):
    interpreter.write({"settings.toml": "[lazypatch]\n", "sub/.keep": ""})
    code = ("import os, json; os.chdir('sub'); print(json.dumps({name: os.environ.get(name) "
            "for name in ('LAZYPATCH_CONFIG', 'LAZYPATCH_REPORT', 'LAZYPATCH_PROFILE')}))")
    result = interpreter.run_command(
        LAZYPATCH + ["run", "--config", "settings.toml", "--report", "out/report.json",
                     "--profile", "traces", "--", sys.executable, "-c", code])
    paths = json.loads(result.stdout.splitlines()[-1])
    root = os.path.realpath(interpreter.root)
    assert os.path.realpath(paths["LAZYPATCH_CONFIG"]) == os.path.join(root, "settings.toml")
    assert os.path.realpath(paths["LAZYPATCH_PROFILE"]) == os.path.join(root, "traces")
    assert paths["LAZYPATCH_REPORT"].endswith(os.path.join("out", "report-{pid}.json"))
    assert os.path.isabs(paths["LAZYPATCH_REPORT"])
    assert "note: lazypatch run: --report out/report.json names no process" in result.stderr
    reports = list((interpreter.root / "out").glob("report-*.json"))
    assert len(reports) == 1 and reports[0].stem.split("-")[1].isdigit()


def test_run_help_lists_pack_flags_and_hides_internal_variables(interpreter):
    helped = interpreter.run_command(LAZYPATCH + ["run", "--help"]).stdout
    assert "device pack" in helped and "training pack" in helped
    for flag, variable in (("--device", "LAZYPATCH_DEVICE"),
                           ("--brake-step", "LAZYPATCH_BRAKE_STEP"),
                           ("--profile-level", "LAZYPATCH_PROFILE_LEVEL")):
        assert flag in helped and variable in helped
    assert "[tool.lazypatch]" in helped
    everything = helped + interpreter.run_command(LAZYPATCH + ["--help"]).stdout
    for internal in ("LAZYPATCH_ACTIVATING", "LAZYPATCH_RUN_PYTHON", "LAZYPATCH_SAID"):
        assert internal not in everything

    code = "import os; print(os.environ.get('LAZYPATCH_BRAKE_STEP'))"
    flagged = interpreter.run_command(LAZYPATCH + ["run", "--brake-step", "3", "--",
                                                   sys.executable, "-c", code])
    assert flagged.stdout.split()[-1] == "3"


def test_internal_names_are_refused_in_files_without_being_advertised(interpreter):
    interpreter.write({"settings.toml": "[lazypatch]\nrun_python = 'x'\n"})
    result = interpreter.run("import lazypatch.auto", env={"LAZYPATCH_CONFIG": "settings.toml"})
    assert "unknown key 'run_python'" in result.stderr
    assert "activating" not in result.stderr.lower().replace("lazypatch activation", "")


def test_a_misspelled_selector_gets_a_suggestion_and_an_example_that_matches(interpreter):
    result = interpreter.run("""
        import lazypatch.auto, lazypatch
        from lazypatch.decide.selection import select
        print(len(select(["numpy_compat.*"])[0]))
    """, env={"LAZYPATCH_ENABLE": "numpy_compt"})
    message = next(line for line in result.stderr.splitlines() if "numpy_compt" in line)
    assert "(did you mean 'numpy_compat'" in message
    example = message.split("globs such as '")[1].split("'")[0]
    checked = interpreter.run(f"""
        import lazypatch.auto
        from lazypatch.decide.selection import select
        print(len(select([{example!r}])[0]))
    """)
    assert int(checked.stdout.split()[-1]) > 0


def test_a_deleted_working_directory_does_not_stop_activation(interpreter):
    gone = interpreter.root / "gone"
    gone.mkdir()
    result = interpreter.run(f"""
        import os
        os.chdir({str(gone)!r})
        os.rmdir({str(gone)!r})
        import lazypatch.auto, lazypatch
        print("active", lazypatch.activation_info()["active"])
    """)
    assert result.stdout.split()[-2:] == ["active", "True"]


def test_every_engine_setting_is_a_toml_key_too_with_paths_relative_to_their_file(interpreter):
    # cache_dir was read from the environment only; a relative path in a file means the
    # file's directory, wherever the program goes afterwards.
    interpreter.write({"project/pyproject.toml": "[tool.lazypatch]\ncache_dir = 'plugin-cache'\n"
                                                 "report = 'out/report-{pid}.json'\n",
                       "project/sub/.keep": ""})
    show = """
        import json, os
        os.chdir("project")           # its pyproject.toml is read at activation
        import lazypatch.auto, lazypatch
        os.chdir("sub")               # paths from the file still point into project/
        from lazypatch.activate.plugin_cache import cache_directory
        from lazypatch.state import STATE
        print(json.dumps([cache_directory(), STATE.configuration.report_path,
                          lazypatch.setting("LAZYPATCH_CACHE_DIR")]))
    """
    project = os.path.realpath(interpreter.root / "project")
    result = interpreter.run(show)
    cache, report, setting = json.loads(result.stdout.splitlines()[-1])
    assert os.path.realpath(cache) == os.path.join(project, "plugin-cache") == \
        os.path.realpath(setting)
    assert os.path.isdir(cache)   # activation wrote the plugin cache there
    assert os.path.realpath(report) == os.path.join(project, "out", "report-{pid}.json")
    assert "Warning" not in result.stderr, result.stderr
    # the environment wins, as given
    overridden = interpreter.run(show, env={"LAZYPATCH_CACHE_DIR": "/nonexistent/elsewhere"})
    assert json.loads(overridden.stdout.splitlines()[-1])[0] == "/nonexistent/elsewhere"


# A parent under -W error with a bad setting and a misspelled variable: each message
# is said once (on stderr, not as a crash), and the children it starts afterwards,
# which activate with the same settings, say nothing. The notices' fingerprints are
# the one record handed down; there is no second, configuration-only variable.
PARENT_OF_CHILDREN = """
    import json, os, subprocess, sys
    import lazypatch.auto
    child = [sys.executable, "-W", "error", "-c",
             "import os, lazypatch.auto; print(sorted(k for k in os.environ if k.startswith('LAZYPATCH')))"]
    outputs = [subprocess.run(child, capture_output=True, text=True, check=True) for _ in range(2)]
    print(json.dumps({"children_stderr": [output.stderr for output in outputs],
                      "children_see": [output.stdout.strip() for output in outputs],
                      "handed_down": sorted(k for k in os.environ if k.startswith("LAZYPATCH"))}))
"""


def test_configuration_messages_are_said_once_per_process_tree_through_the_notices(interpreter):
    result = interpreter.run(PARENT_OF_CHILDREN, python_args=("-W", "error"),
                             env={"LAZYPATCH_LOG": "loud", "LAZYPATCH_DISABEL": "x"})
    document = json.loads(result.stdout.splitlines()[-1])
    said = [line for line in result.stderr.splitlines() if "ConfigurationWarning" in line]
    assert len([line for line in said if "LAZYPATCH_LOG='loud'" in line]) == 1, result.stderr
    assert len([line for line in said if "LAZYPATCH_DISABEL" in line]) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert document["children_stderr"] == ["", ""]
    assert document["handed_down"] == ["LAZYPATCH_DISABEL", "LAZYPATCH_LOG", "LAZYPATCH_SAID"]
    assert document["children_see"] == [str(document["handed_down"])] * 2

"""The `lazypatch` command line: list, doctor, site, help and exit codes."""

from __future__ import annotations

import json
import sys

LAZYPATCH = [sys.executable, "-m", "lazypatch"]

PLUGIN_AND_MODULES = {
    "demo_target.py": "VALUE = 1\n",
    "demo_patches.py": """
        import lazypatch
        @lazypatch.when_imported("demo_target", name="demo.value", requires=["no-such-dist>=1"],
                                 tags=["demo"])
        def value(module, patch):
            patch.setattr(module, "VALUE", 2)
    """,
    "site/acme-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: acme\nVersion: 1.0\n",
    "site/acme-1.0.dist-info/entry_points.txt": "[lazypatch]\ndemo_target = acme_pack:fix\n",
}


def _env(interpreter, **extra):
    return dict({"LAZYPATCH_MODULES": "demo_patches",
                 "LAZYPATCH_CACHE_DIR": str(interpreter.root / "cache"),
                 "PYTHONPATH": str(interpreter.root / "site")}, **extra)


def test_list_shows_every_source_and_imports_no_target(interpreter):
    interpreter.write(PLUGIN_AND_MODULES)
    result = interpreter.run_json("""
        import io, json, sys, contextlib
        from lazypatch.cli.main import main, registered_patches
        with contextlib.redirect_stdout(io.StringIO()) as text:
            status = main(["list"])
        rows = registered_patches()
        targets = sorted({row["target"] for row in rows})
        print(json.dumps({"status": status, "text": text.getvalue(), "rows": rows,
                          "imported_targets": [t for t in targets if t in sys.modules],
                          "targets": targets}))
    """, env=_env(interpreter))
    assert result["status"] == 0
    assert result["imported_targets"] == []
    assert "demo_target" in result["targets"] and "numpy" in result["targets"]
    by_name = {row["name"]: row for row in result["rows"]}
    assert by_name["demo.value"]["source"] == "LAZYPATCH_MODULES"
    assert by_name["demo.value"]["requires"] == ["no-such-dist>=1"]
    assert by_name["acme.demo_target"]["source"] == "plugin acme (acme_pack:fix)"
    assert {row["source"] for row in result["rows"]} >= {"built-in"}
    header = result["text"].splitlines()[0].split()
    # issue 15: a description column (PHASE moved to --json only)
    assert header == ["NAME", "TARGET", "ENABLED", "SOURCE", "TAGS", "REQUIRES", "DESCRIPTION"]
    assert "none of their targets was imported" in result["text"]


def test_list_json_and_disabled_patches(interpreter):
    interpreter.write(PLUGIN_AND_MODULES)
    result = interpreter.run_command(LAZYPATCH + ["list", "--json"],
                                     env=_env(interpreter, LAZYPATCH_DISABLE="demo"))
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["demo.value"]["enabled"] is False and rows["demo.value"]["tags"] == ["demo"]


def test_doctor_reports_problems_with_fixes_and_measures_activation(interpreter):
    interpreter.write(PLUGIN_AND_MODULES)
    result = interpreter.run_command(
        LAZYPATCH + ["doctor", "--json", "--runs", "1", "--import", "demo_target"],
        env=_env(interpreter, LAZYPATCH_DISABLE="not-a-patch"), check=False)
    assert result.returncode == 1, result.stderr
    findings = json.loads(result.stdout)
    assert findings["finder_position"] == 0
    timing = findings["timing"]
    assert timing["runs"] == 1 and "cost_ms" in timing and timing["clock"] == "cpu"
    # A deterministic fact beside the timing: activation adds its own modules to a bare start.
    assert timing["modules_added"] > 0
    if not timing["stable"]:   # a busy machine: no verdict, said as a note, never a problem
        assert any("activation cost not judged" in note for note in findings["notes"])
    problems = "\n".join(findings["problems"])
    assert "'not-a-patch', which match no registered patch" in problems
    # the plugin's pack module does not exist: its patch failed when demo_target was imported
    assert "patch acme.demo_target failed" in problems and "LAZYPATCH_DISABLE=acme" in problems
    notes = "\n".join(findings["notes"])
    assert "patch demo.value will be skipped" in notes and "no-such-dist" in notes

    clean = interpreter.run_command(LAZYPATCH + ["doctor", "--runs", "0"])
    assert "no problems found" in clean.stdout and "finder position:   0" in clean.stdout


def test_help_and_usage_errors_exit_with_0_and_2(interpreter):
    assert interpreter.run_command(LAZYPATCH + ["--help"]).returncode == 0
    for subcommand in ("run", "list", "report", "site", "doctor"):
        helped = interpreter.run_command(LAZYPATCH + [subcommand, "--help"])
        assert "usage: lazypatch" in helped.stdout
    for arguments, message in ((["frobnicate"], "invalid choice: 'frobnicate'"),
                               (["site", "reinstall"], "invalid choice: 'reinstall'"),
                               (["site", "status", "--dir", "/no/such/dir"], "no such directory"),
                               (["report"], "FILE"),
                               (["doctor", "--runs", "-1"], "--runs must be 0 or more")):
        result = interpreter.run_command(LAZYPATCH + arguments, check=False)
        assert result.returncode == 2, (arguments, result.stderr)
        assert message in result.stderr


def test_site_commands_on_a_given_directory(interpreter):
    target = interpreter.root / "fake-site"
    target.mkdir()
    run = lambda *args: interpreter.run_command(LAZYPATCH + ["site", *args, "--dir", str(target)])  # noqa: E731
    assert ".pth file:   absent" in run("status").stdout
    run("install")
    assert sorted(path.name for path in target.iterdir()) == [
        "lazypatch-activate.pth", "lazypatch-activate.start"]
    pth_lines = (target / "lazypatch-activate.pth").read_text().splitlines()
    assert [line for line in pth_lines if not line.startswith("#")][0].startswith("import os, sys; exec(")
    start_file = (target / "lazypatch-activate.start").read_text()
    assert "lazypatch.activate.site_install:activate_from_start" in start_file
    assert ".pth file:   installed" in run("status").stdout
    run("uninstall")
    assert list(target.iterdir()) == []
    assert "nothing to remove" in run("uninstall").stdout


def test_options_before_the_command_get_the_corrected_command_line(interpreter):
    result = interpreter.run_command(
        LAZYPATCH + ["--enable", "device", "run", "--", "python", "train.py"], check=False)
    assert result.returncode == 2
    assert "options go after the command" in result.stderr
    assert "lazypatch run --enable device -- python train.py" in result.stderr
    assert "invalid choice" not in result.stderr


def test_list_by_a_status_of_a_run_points_at_the_report(interpreter):
    interpreter.write(PLUGIN_AND_MODULES)
    result = interpreter.run_command(LAZYPATCH + ["list", "--status", "applied", "--status",
                                                  "failed"], env=_env(interpreter))
    assert result.stdout.strip() == "no patch matches"
    assert "no patch is applied or failed here" in result.stderr
    assert "lazypatch report out/" in result.stderr


def test_run_options_after_the_command_and_a_bare_script_get_the_likely_fix(interpreter):
    interpreter.write({"train.py": "import sys; print(sys.argv[1:])\n"})
    result = interpreter.run_command(
        LAZYPATCH + ["run", "--", sys.executable, "train.py", "--enable", "device"])
    # the program still gets its arguments (they may be its own) ...
    assert result.stdout.strip() == "['--enable', 'device']"
    # ... and the likely mistake is named, with the command line that was probably meant
    assert ("--enable device comes after the command, so it goes to 'train.py', not to "
            "lazypatch") in result.stderr
    assert f"lazypatch run --enable device -- {sys.executable} train.py" in result.stderr
    bare = interpreter.run_command(LAZYPATCH + ["run", "train.py"], check=False)
    assert bare.returncode == 127
    assert "lazypatch run -- python train.py" in bare.stderr

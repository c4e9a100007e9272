"""Activation without code changes: ``lazypatch run`` (sitecustomize bootstrap)
and ``lazypatch site install`` (``.pth`` file), in real processes.

A small target package ``demo_target`` and a patch module ``demo_patches``
(given through ``--modules``) are written to the test's temp dir; each
scenario checks that the patch applied in the process it cares about.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import REPOSITORY, clean_environment

from lazypatch.activate.bootstrap import BOOTSTRAP_DIRECTORY

DEMO = {
    "demo_target/__init__.py": "VALUE = 'original'\n",
    "demo_patches.py": """
        import lazypatch

        @lazypatch.when_imported("demo_target", name="demo.value")
        def value(module, patch):
            patch.setattr(module, "VALUE", "patched")
    """,
}

# Prints what a process sees: which activation path ran, whether the demo
# patch applied, and what the user's own sitecustomize recorded.
PROBE = """
import json, os, sys
lazypatch_module = sys.modules.get("lazypatch")
import demo_target
print(json.dumps({"activated_by": lazypatch_module.activation_info()["activated_by"]
                  if lazypatch_module else "",
                  "value": demo_target.VALUE,
                  "user_sitecustomize": os.environ.get("USER_SITECUSTOMIZE_SAW", "did not run"),
                  "sys_path": sys.path}))
"""


def lazypatch_run(*options: str):
    return [sys.executable, "-m", "lazypatch", "run", *options, "--"]


def test_run_chains_user_sitecustomize_and_reaches_subprocess_and_spawn_workers(interpreter):
    interpreter.write(DEMO)
    interpreter.write({
        # The user's own sitecustomize, found further on the path.
        "usersite/sitecustomize.py": """
            import os, sys
            lazypatch_module = sys.modules.get("lazypatch")
            os.environ["USER_SITECUSTOMIZE_SAW"] = (
                "lazypatch active" if lazypatch_module and lazypatch_module.activation_info()["active"]
                else "lazypatch inactive")
        """,
        "probe.py": PROBE,
        "main.py": """
            import json, multiprocessing, subprocess, sys
            import demo_target

            def worker_value(_):
                import demo_target, lazypatch
                return [lazypatch.activation_info()["activated_by"], demo_target.VALUE]

            if __name__ == "__main__":
                child = subprocess.run([sys.executable, "probe.py"], capture_output=True,
                                       text=True, check=True)
                with multiprocessing.get_context("spawn").Pool(2) as pool:
                    workers = pool.map(worker_value, range(2))
                print(json.dumps({"main": demo_target.VALUE,
                                  "child": json.loads(child.stdout.splitlines()[-1]),
                                  "workers": workers}))
        """,
    })
    env = {"PYTHONPATH": str(interpreter.root / "usersite")}
    result = interpreter.run_command(
        lazypatch_run("--modules", "demo_patches") + [sys.executable, "main.py"], env=env)
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["main"] == "patched"
    child = seen["child"]
    assert child["activated_by"] == "lazypatch run" and child["value"] == "patched"
    # Both sitecustomize modules ran, lazypatch's first.
    assert child["user_sitecustomize"] == "lazypatch active"
    assert seen["workers"] == [["lazypatch run", "patched"]] * 2
    # The program sees the sys.path it would see without lazypatch run.
    assert BOOTSTRAP_DIRECTORY not in child["sys_path"] and "" not in child["sys_path"]
    plain = interpreter.run_command([sys.executable, "probe.py"], env=env)
    plain_seen = json.loads(plain.stdout.splitlines()[-1])
    assert plain_seen["sys_path"] == child["sys_path"]
    assert plain_seen["value"] == "original" and plain_seen["user_sitecustomize"] == "lazypatch inactive"


def test_run_stays_inert_under_another_interpreter_and_never_recurses(interpreter):
    interpreter.write(DEMO)
    interpreter.write({
        "probe.py": PROBE,
        # A patch module that starts a Python child *during activation*: the
        # child must not activate (it would start another child, and so on).
        "spawning_patches.py": """
            import os, subprocess, sys
            depth = int(os.environ.get("SPAWN_DEPTH", "0"))
            if depth < 3:
                out = subprocess.run([sys.executable, "-c",
                    "import sys; a = sys.modules.get('lazypatch');"
                    "print((a and a.activation_info()['activated_by']) or 'not activated')"],
                    env=dict(os.environ, SPAWN_DEPTH=str(depth + 1)),
                    capture_output=True, text=True).stdout.strip()
                os.environ["CHILD_DURING_ACTIVATION"] = out
        """,
        "main.py": """
            import json, os, subprocess, sys
            other = dict(os.environ, LAZYPATCH_RUN_PYTHON="/opt/other-python|cpython-39")
            foreign = subprocess.run([sys.executable, "probe.py"], env=other,
                                     capture_output=True, text=True, check=True)
            print(json.dumps({"during_activation": os.environ.get("CHILD_DURING_ACTIVATION"),
                              "foreign": json.loads(foreign.stdout.splitlines()[-1])}))
        """,
    })
    result = interpreter.run_command(
        lazypatch_run("--modules", "demo_patches,spawning_patches") + [sys.executable, "main.py"],
        timeout=60)
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["during_activation"] == "not activated"
    assert seen["foreign"]["activated_by"] == "" and seen["foreign"]["value"] == "original"


def test_run_reports_usage_errors_and_missing_commands(interpreter):
    no_command = interpreter.run_command(lazypatch_run(), check=False)
    assert no_command.returncode == 2 and "write it after --" in no_command.stderr
    missing = interpreter.run_command(lazypatch_run() + ["no-such-command-xyz"], check=False)
    assert missing.returncode == 127 and "command not found" in missing.stderr
    bad_level = interpreter.run_command(lazypatch_run("--log", "LOUD") + ["true"], check=False)
    assert bad_level.returncode == 2 and "invalid choice" in bad_level.stderr


# torchrun's agent picks the workers' master port by binding and releasing a free
# port; two launches at once (one per xdist worker) can race for it. The
# "torchrun" group runs on one worker (pytest -n 2 --dist loadgroup).
@pytest.mark.stack
@pytest.mark.xdist_group("torchrun")
def test_torchrun_two_cpu_ranks_apply_the_patch_and_write_one_report_each(interpreter):
    interpreter.write(DEMO)
    interpreter.write({"train.py": """
        import os
        import torch.distributed as dist
        import demo_target
        dist.init_process_group("gloo")
        assert demo_target.VALUE == "patched", demo_target.VALUE
        dist.barrier()
        dist.destroy_process_group()
    """})
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    reports = interpreter.root / "reports"
    interpreter.run_command(
        lazypatch_run("--modules", "demo_patches", "--report", str(reports / "rank-{rank}.json"))
        + [torchrun, "--standalone", "--nproc-per-node", "2", "train.py"],
        env={"OMP_NUM_THREADS": "1"}, timeout=150)
    by_rank = {}
    for path in sorted(reports.glob("rank-*.json")):
        document = json.loads(path.read_text())
        if document["rank_variable"]:   # torchrun's launcher writes one too, beside them
            by_rank[document["rank"]] = document
    assert sorted(by_rank) == [0, 1]
    for rank, document in by_rank.items():
        assert (reports / f"rank-{rank}.json").exists()
        statuses = {record["name"]: record["status"] for record in document["patches"]}
        assert statuses["demo.value"] == "applied"


def _make_venv(root: Path) -> Path:
    """A throwaway venv that sees this environment's packages through a .pth file,
    so lazypatch (editable) and wrapt import there without installing anything."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site_packages = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    # "00-" sorts before lazypatch-activate.pth, so lazypatch is importable when it runs.
    Path(site_packages, "00-parent-environment.pth").write_text(
        f"import site; site.addsitedir({ours!r})\n")
    return python


def test_site_install_activates_a_fresh_interpreter_and_uninstall_removes_it(interpreter):
    interpreter.write(DEMO)
    python = _make_venv(interpreter.root)
    ours = Path(sysconfig.get_paths()["purelib"], "lazypatch-activate.pth")
    existed_before = ours.exists()
    check = ("import sys; a = sys.modules.get('lazypatch');"
             "print(a.activation_info()['activated_by'] if a else 'not imported')")

    def activated_by(**env):
        return interpreter.run_command([str(python), "-c", check], env=env).stdout.strip()

    assert activated_by() == "not imported"
    installed = interpreter.run_command([str(python), "-m", "lazypatch", "site", "install"])
    assert "lazypatch-activate.pth" in installed.stdout
    assert activated_by() == "site .pth"
    assert activated_by(LAZYPATCH="0") == "not imported"
    status = interpreter.run_command([str(python), "-m", "lazypatch", "site", "status"])
    assert ".pth file:   installed" in status.stdout
    # The doctor reads the same files: nothing to say about them while they are current; a
    # .pth another version wrote is a problem with its fix, a missing .start a note.
    def doctor():
        result = interpreter.run_command([str(python), "-m", "lazypatch", "doctor", "--runs",
                                          "0", "--json"], check=False)
        findings = json.loads(result.stdout)
        return findings["site_files"], "\n".join(findings["problems"]), \
            "\n".join(findings["notes"])
    site, problems, notes = doctor()
    assert (site["pth"], site["start"]) == ("installed", "installed")
    assert "site activation file" not in problems and ".start file" not in notes
    pth = Path(site["paths"]["pth"])
    # The line 0.1.0 wrote: the module it imports has moved since, and its ImportError is
    # swallowed, so every start runs unpatched without a word.
    current = pth.read_text()
    old_line = current.replace("import lazypatch.activate.activation as",
                               "import lazypatch.activation as")
    old_line = old_line[:old_line.index("except ImportError")] + \
        "except ImportError:\\n pass\\n" + current[current.index("except Exception"):]
    assert old_line != current
    pth.write_text(old_line)
    assert activated_by() == ""   # lazypatch imported by the line, never activated
    Path(site["paths"]["start"]).unlink()
    site, problems, notes = doctor()
    assert (site["pth"], site["start"]) == ("outdated", "absent")
    assert f"the site activation file {pth} is not the one this lazypatch writes" in problems
    assert "`lazypatch site install` to rewrite it" in problems
    assert f"{pth} has no .start file beside it" in notes
    interpreter.run_command([str(python), "-m", "lazypatch", "site", "install"])
    pth.unlink()   # the .start alone: read from Python 3.15 on only
    site, problems, notes = doctor()
    assert (site["pth"], site["start"]) == ("absent", "installed")
    assert ("has no .pth file beside it" in problems) == (sys.version_info < (3, 15))
    interpreter.run_command([str(python), "-m", "lazypatch", "site", "install"])
    site, problems, notes = doctor()
    assert (site["pth"], site["start"]) == ("installed", "installed")
    assert "site activation file" not in problems and ".start file" not in notes
    # Patches declared by LAZYPATCH_MODULES apply without any code change.
    patched = interpreter.run_command(
        [str(python), "-c", "import demo_target; print(demo_target.VALUE)"],
        env={"LAZYPATCH_MODULES": "demo_patches"})
    assert patched.stdout.strip() == "patched"
    removed = interpreter.run_command([str(python), "-m", "lazypatch", "site", "uninstall"])
    assert "removed" in removed.stdout and ".start" in removed.stdout
    assert activated_by() == "not imported"
    assert ours.exists() == existed_before   # this test's own environment was not touched


@pytest.mark.stack
def test_pip_uninstall_takes_the_site_activation_files_with_the_package(tmp_path):
    """`lazypatch site install` names its files in lazypatch's RECORD, so that
    `pip uninstall lazypatch` removes them: no .pth line outlives the package."""
    # Without PYTHONPATH: pointed at a checkout, it would put that checkout's lazypatch
    # before the venv's installed one.
    environment = clean_environment()
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(wheels), str(REPOSITORY)],
                   check=True, capture_output=True, timeout=300, env=environment)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    (wheel,) = wheels.glob("lazypatch-*.whl")
    # --no-deps --no-index: nothing is downloaded; `site install` needs no wrapt.
    subprocess.run(pip + ["install", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, timeout=300, env=environment)
    site_packages = Path(subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    subprocess.run([python, "-m", "lazypatch", "site", "install"], check=True,
                   capture_output=True, timeout=120, env=environment)
    assert (site_packages / "lazypatch-activate.pth").exists()
    assert (site_packages / "lazypatch-activate.start").exists()
    subprocess.run(pip + ["uninstall", "--yes", "lazypatch"], check=True, capture_output=True,
                   timeout=300, env=environment)
    assert not (site_packages / "lazypatch-activate.pth").exists()
    assert not (site_packages / "lazypatch-activate.start").exists()
    assert not list(site_packages.glob("lazypatch*"))


def test_run_finds_the_users_patch_module_in_the_current_directory(tmp_path):
    """`lazypatch run --modules mypatches -- python train.py` with mypatches.py beside
    train.py: found there, as `python -m mypatches` would find it; a module found nowhere
    gets a message naming the directory searched and the fixes."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "mypatches.py").write_text(
        "import lazypatch\n"
        "@lazypatch.when_imported('statistics', name='mypatches.median')\n"
        "def median(statistics, patch):\n"
        "    patch.setattr(statistics, 'median', lambda data: 'patched')\n")
    (project / "train.py").write_text(
        "import sys\nfrom statistics import median\n"
        "print(median([]), repr(sys.path[0]), '' in sys.path)\n")
    environment = clean_environment({})
    environment.pop("PYTHONPATH", None)
    # The venv's own python first on PATH, as with an activated venv.
    environment["PATH"] = os.path.dirname(sys.executable) + os.pathsep + environment["PATH"]
    found = subprocess.run(lazypatch_run("--modules", "mypatches") + ["python", "train.py"],
                           cwd=project, env=environment, capture_output=True, text=True,
                           timeout=120)
    assert found.returncode == 0, found.stderr
    value, first_path_entry, empty_entry = found.stdout.split()
    assert value == "patched"
    # The program's sys.path is what it would be without lazypatch: its own directory first,
    # no current-directory entry left behind by the lookup.
    assert first_path_entry == repr(str(project)) and empty_entry == "False"
    missing = subprocess.run(lazypatch_run("--modules", "mypatchez") + ["python", "-c", "pass"],
                             cwd=project, env=environment, capture_output=True, text=True,
                             timeout=120)
    assert "No module named 'mypatchez' on sys.path or in the current directory" in missing.stderr
    assert str(project) in missing.stderr and "PYTHONPATH" in missing.stderr


def test_run_refuses_a_command_whose_python_is_another_interpreter(tmp_path):
    """`lazypatch run -- python script.py` where `python` on PATH is another interpreter
    (a venv not activated, conda, pyenv) would run the script unpatched: run says so and
    how to fix it, for `python` itself and for a script whose #! names that interpreter."""
    other = tmp_path / "other-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(other)], check=True,
                   timeout=120)
    (tmp_path / "tool").write_text(f"#!{other / 'bin' / 'python'}\nprint('ran')\n")
    (tmp_path / "tool").chmod(0o755)
    environment = clean_environment({})
    environment["PATH"] = str(other / "bin") + os.pathsep + environment["PATH"]
    for command in (["python", "-c", "print('ran')"], [str(tmp_path / "tool")]):
        result = subprocess.run(lazypatch_run() + command, cwd=tmp_path, env=environment,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and "ran" not in result.stdout, result
        assert "the program would run unpatched" in result.stderr
        assert f"lazypatch run -- {sys.executable}" in result.stderr
    # The same command with this interpreter runs, activated.
    same = subprocess.run(lazypatch_run() + [sys.executable, "-c",
                                             "import lazypatch; print(lazypatch.activation_info()"
                                             "['activated_by'])"],
                          cwd=tmp_path, env=environment, capture_output=True, text=True,
                          timeout=120)
    assert same.returncode == 0 and same.stdout.strip() == "lazypatch run", same.stderr


def test_run_refuses_python_options_that_would_keep_lazypatch_out(tmp_path):
    """`lazypatch run -- python -I prog.py` (also -E, -S, combined letters, or on a
    script's #! line) would run the program unpatched: run says so, names the option and
    the fixes, and runs nothing. `-s` alone still runs, activated."""
    (tmp_path / "prog.py").write_text("print('ran')\n")
    (tmp_path / "tool").write_text(f"#!{sys.executable} -I\nprint('ran')\n")
    (tmp_path / "tool").chmod(0o755)
    environment = clean_environment({})
    commands = {"-I": [sys.executable, "-I", "prog.py"],
                "-E": [sys.executable, "-X", "dev", "-E", "prog.py"],
                "-S": [sys.executable, "-uS", "prog.py"]}
    for option, command in commands.items():
        result = subprocess.run(lazypatch_run() + command, cwd=tmp_path, env=environment,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and "ran" not in result.stdout, (option, result)
        assert f"{option} " in result.stderr and "would run unpatched" in result.stderr, \
            (option, result.stderr)
        assert "import lazypatch.auto" in result.stderr, result.stderr
    script = subprocess.run(lazypatch_run() + [str(tmp_path / "tool")], cwd=tmp_path,
                            env=environment, capture_output=True, text=True, timeout=120)
    assert script.returncode == 2 and "-I runs isolated" in script.stderr, script
    plain = subprocess.run(lazypatch_run() + [sys.executable, "-s", "-c",
                                              "import lazypatch; print(lazypatch.activation_info()"
                                              "['activated_by'])"],
                           cwd=tmp_path, env=environment, capture_output=True, text=True,
                           timeout=120)
    assert plain.returncode == 0 and plain.stdout.strip() == "lazypatch run", plain


@pytest.mark.parametrize("installed", ["none", "another_layout"])
def test_the_pth_line_is_silent_only_where_lazypatch_is_not_installed(tmp_path, installed):
    """A `.pth` line left after `pip uninstall lazypatch` stays silent; one meeting a
    lazypatch whose modules moved (a file written by another version) says so, with
    the fix, instead of leaving activation off unsaid."""
    from lazypatch.activate.site_install import PTH_LINE
    if installed == "another_layout":
        (tmp_path / "lazypatch").mkdir()
        (tmp_path / "lazypatch" / "__init__.py").write_text("")
    # -I -S: neither this environment's lazypatch nor its site-packages
    result = subprocess.run([sys.executable, "-I", "-S", "-c",
                             f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n" + PTH_LINE],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    if installed == "none":
        assert result.stderr == ""
    else:
        assert "lazypatch: .pth activation failed" in result.stderr
        assert "lazypatch.activate" in result.stderr
        assert "run `lazypatch site install` again" in result.stderr

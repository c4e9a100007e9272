"""Reports across processes: JSON at exit with {rank}/{pid}, rank-aware logging,
and `lazypatch report` over several ranks' files."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import report_demo, write_demo_report

PACKAGES = report_demo("""
        @lazypatch.when_imported("demo_target", name="demo.rank_dependent")
        def rank_dependent(module, patch):
            if os.environ.get("RANK") == "1":
                raise RuntimeError("no device on this rank")
            patch.setattr(module, "OTHER", True)
""")


def _write_rank_report(interpreter, rank: str) -> None:
    write_demo_report(interpreter, interpreter.root / "out" / "r{rank}-{pid}.json",
                      env={"RANK": rank})


def test_report_written_at_exit_per_rank_and_rendered_with_differences(interpreter):
    interpreter.write(PACKAGES)
    _write_rank_report(interpreter, "0")
    _write_rank_report(interpreter, "1")
    files = sorted((interpreter.root / "out").glob("r*.json"))
    assert [path.name.split("-")[0] for path in files] == ["r0", "r1"]
    documents = [json.loads(path.read_text()) for path in files]
    assert [document["rank"] for document in documents] == [0, 1]
    assert all(path.name == f"r{d['rank']}-{d['pid']}.json" for path, d in zip(files, documents))
    statuses = {record["name"]: record["status"] for record in documents[1]["patches"]}
    assert statuses["demo.ok"] == "applied" and statuses["demo.rank_dependent"] == "failed"

    result = interpreter.run_command([sys.executable, "-m", "lazypatch", "report",
                                      *map(str, files)], check=False)
    assert result.returncode == 1          # a patch failed on rank 1
    lines = result.stdout.splitlines()
    assert lines[:2] == ["FAILED: 1 patch failed in 1 process of 2:",
                         "  demo.rank_dependent (demo_target) in rank 1: "
                         "RuntimeError: no device on this rank"]
    lines = lines[3:]
    assert lines[:3] == ["2 reports, 2 groups of identical processes:",
                         "  A: rank 0: identical", "  B: rank 1: identical"]
    header = next(line for line in lines if line.startswith("PATCH"))
    assert header.split() == ["PATCH", "TARGET", "A:", "RANK", "0", "B:", "RANK", "1"]
    # only the difference is a row; the patch that agrees is counted, not listed
    assert any(line.split() == ["demo.rank_dependent", "demo_target", "applied", "failed:",
                                "RuntimeError:", "no", "device", "on", "this", "rank"]
               for line in lines)
    assert not any(line.startswith("demo.ok") for line in lines)
    # (the built-in packs' patches agree too: counted in the same line)
    # demo.ok and the built-in packs' patches waiting for their targets: counted, not listed
    assert any(line.endswith(" patches with the same status in every process not shown "
                             "(`--all` shows them)") for line in lines), lines
    # the built-in packs' patches that wait for or lack their targets: one summary
    assert any(line.endswith(" not shown, the same in every process (`--all` shows them):")
               for line in lines), lines
    assert "1 patch differs between processes:" in result.stdout
    differing = result.stdout.split("between processes:")[1]
    assert "demo.rank_dependent" in differing and "demo.ok" not in differing
    assert "rank 1: failed (RuntimeError: no device on this rank" in differing
    everything = interpreter.run_command([sys.executable, "-m", "lazypatch", "report", "--all",
                                          *map(str, files)], check=False)
    assert any(line.split() == ["demo.ok", "demo_target", "applied", "applied"]
               for line in everything.stdout.splitlines())

    single = interpreter.run_command([sys.executable, "-m", "lazypatch", "report", str(files[0])])
    assert "rank 0" in single.stdout.splitlines()[0] and "STATUS" in single.stdout


def test_informational_logging_only_on_rank_0_unless_all_ranks(interpreter):
    code = "import lazypatch.auto"
    on_rank_0 = interpreter.run(code, env={"LAZYPATCH_LOG": "INFO", "RANK": "0"})
    on_rank_1 = interpreter.run(code, env={"LAZYPATCH_LOG": "INFO", "RANK": "1"})
    all_ranks = interpreter.run(code, env={"LAZYPATCH_LOG": "INFO", "RANK": "1",
                                           "LAZYPATCH_LOG_ALL_RANKS": "1"})
    assert "[lazypatch rank 0" in on_rank_0.stderr and "INFO active (by" in on_rank_0.stderr
    assert "INFO" not in on_rank_1.stderr
    assert "[lazypatch rank 1" in all_ranks.stderr and "INFO active (by" in all_ranks.stderr


def test_report_command_names_the_fix_for_a_bad_file(interpreter):
    interpreter.write({"not_a_report.json": "[1, 2]", "garbage.json": "{nope"})
    for name, message in (("missing.json", "no such report file; write one with LAZYPATCH_REPORT"),
                          ("garbage.json", "not a lazypatch JSON report"),
                          ("not_a_report.json", "not a lazypatch report")):
        result = interpreter.run_command([sys.executable, "-m", "lazypatch", "report", name],
                                         check=False)
        assert result.returncode == 2, result.stderr
        assert message in result.stderr


# --- reports users can act on: package versions, a summary by package, source diffs ---

ACTIONABLE = {
    "demo_target.py": """
        def compute(x):
            return x + 1
    """,
    "actionable_patches.py": """
        import lazypatch

        def is_str_without_isinstance(x):
            # a replacement whose source differs from the original
            return type(x) is str

        def compute_twice(x):
            return (x + 1) * 2

        @lazypatch.when_imported("mmengine.utils", name="demo.is_str")
        def is_str(module, patch):
            patch.setattr(module, "is_str", is_str_without_isinstance)

        @lazypatch.when_imported("mmcv.cnn", name="demo.mmcv_waits")
        def mmcv_waits(module, patch):
            patch.setattr(module, "ANYTHING", 1)

        @lazypatch.when_imported("demo_target", name="demo.wrapped")
        def wrapped(module, patch):
            patch.wrap(module, "compute", lambda wrapped, instance, args, kwargs: compute_twice(*args))
    """,
}

REPORT_AND_RENDER = """
    import json, sys, warnings
    warnings.simplefilter("ignore")
    import lazypatch.auto, lazypatch, mmengine.utils, demo_target
    assert "mmcv" not in sys.modules   # versions come from metadata, not from importing
    lazypatch.write_report(sys.argv[1])
    print(json.dumps({"records": lazypatch.report(), "table": lazypatch.render_report(),
                      "diff": lazypatch.render_report(diff=True),
                      "json": json.loads(lazypatch.render_report(format="json", diff=True))},
                     default=str))
"""


def _installed(distribution: str) -> str:
    from importlib import metadata
    return metadata.version(distribution)


@pytest.mark.stack
def test_every_record_names_its_package_version_and_the_table_groups_by_package(interpreter):
    interpreter.write(ACTIONABLE)
    result = interpreter.run_json(REPORT_AND_RENDER, env={"LAZYPATCH_MODULES": "actionable_patches",
                                                          "LAZYPATCH_PLUGINS": "0"},
                                  args=[str(interpreter.root / "report.json")])
    records = {record["name"]: record for record in result["records"]}
    assert (records["demo.is_str"]["package"], records["demo.is_str"]["version"]) == \
        ("mmengine", _installed("mmengine"))
    # imported as mmcv, installed as mmcv-lite: found through the top-level names
    assert (records["demo.mmcv_waits"]["package"], records["demo.mmcv_waits"]["version"]) == \
        ("mmcv-lite", _installed("mmcv-lite"))
    assert (records["demo.wrapped"]["package"], records["demo.wrapped"]["version"]) == \
        ("demo_target", None)
    lines = result["table"].splitlines()
    by_package = lines[lines.index("by package:") + 1:-1]
    # (the built-in packs' patches on the same packages are counted there too)
    mmengine = next(line for line in by_package
                    if line.startswith(f"  mmengine {_installed('mmengine')}: "))
    assert mmengine.split(": ")[1].startswith("1 applied"), by_package
    assert any(line.startswith(f"  mmcv-lite {_installed('mmcv-lite')}: ")
               and "pending" in line for line in by_package), by_package
    assert "  demo_target (no installed distribution): 1 applied" in by_package
    assert "diff of" not in result["table"]   # diffs only on demand


@pytest.mark.stack
def test_diff_shows_the_source_of_each_replaced_function_against_its_replacement(interpreter):
    interpreter.write(ACTIONABLE)
    report = interpreter.root / "report.json"
    result = interpreter.run_json(REPORT_AND_RENDER, env={"LAZYPATCH_MODULES": "actionable_patches",
                                                          "LAZYPATCH_PLUGINS": "0"},
                                  args=[str(report)])
    diff = result["diff"]
    assert diff.startswith(result["table"])
    section = diff.split("diff of demo.is_str: setattr mmengine.utils.is_str\n", 1)[1]
    section = section.split("\n\n", 1)[0]
    assert "--- is_str (original, " in section and "mmengine/utils/misc.py:" in section
    assert "+++ is_str_without_isinstance (replacement, " in section
    assert "-    return isinstance(x, str)" in section
    assert "+    # a replacement whose source differs from the original" in section
    assert "+    return type(x) is str" in section
    # patch.wrap: the wrapper function against the wrapped original
    wrapped = diff.split("diff of demo.wrapped: wrap demo_target.compute\n", 1)[1]
    assert "-def compute(x):" in wrapped and "lambda wrapped, instance, args, kwargs" in wrapped
    # JSON: the diff text travels with the change
    changes = next(record for record in result["json"]
                   if record["name"] == "demo.is_str")["changes"]
    assert "+    return type(x) is str" in changes[0]["diff"]

    # the same from the report file, and an honest answer once a source file is gone
    from_file = interpreter.run_command([sys.executable, "-m", "lazypatch", "report", "--diff",
                                         str(report)])
    assert "+    return type(x) is str" in from_file.stdout
    as_json = json.loads(interpreter.run_command(
        [sys.executable, "-m", "lazypatch", "report", "--diff", "--format", "json",
         str(report)]).stdout)
    assert "+    return type(x) is str" in as_json["diff"]
    (interpreter.root / "actionable_patches.py").rename(interpreter.root / "moved.py")
    gone = interpreter.run_command([sys.executable, "-m", "lazypatch", "report", "--diff",
                                    str(report)])
    assert "source not available here: " in gone.stdout
    assert "actionable_patches.py:4 cannot be read on this machine" in gone.stdout


@pytest.mark.parametrize("given, written", [
    ("out/r-{rank}.json", "out/r-{rank}.json"),
    ("out/r-{host}-{pid}.json", "out/r-{host}-{pid}.json"),
    ("out/r.json", "out/r-{pid}.json"),
    ("out/r-{host}.json", "out/r-{host}-{pid}.json"),
    ("out/r-{worker}.json", "out/r-{worker}-{pid}.json"),
    ("out/r-{node}-{local_rank}", "out/r-{node}-{local_rank}-{pid}"),
])
def test_a_report_path_that_names_no_process_gets_its_pid(given, written):
    from lazypatch.reports.reporting import one_file_per_process
    assert one_file_per_process(given) == written


def test_lazypatch_run_with_a_host_and_worker_path_writes_one_report_per_process(interpreter):
    # {host} and {worker} are the same for a program and the Python process it starts
    # (worker "main" outside Ray and Dask): without the pid, one would overwrite the other.
    interpreter.write({"program.py": "import subprocess, sys\n"
                                     "subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"})
    result = interpreter.run_command(
        [sys.executable, "-m", "lazypatch", "run", "--report",
         str(interpreter.root / "out" / "r-{host}-{worker}.json"), "--", sys.executable,
         "program.py"])
    assert "names no process" in result.stderr and "r-{host}-{worker}-{pid}.json" in result.stderr
    documents = [json.loads(path.read_text()) for path in (interpreter.root / "out").glob("*.json")]
    assert len({document["pid"] for document in documents}) == 2
    assert {document["worker"] for document in documents} == {"main"}


def test_the_report_command_prints_non_ascii_names_to_an_ascii_stdout(interpreter):
    """A report whose patch names and values are not ASCII, printed where stdout is
    ASCII (a C locale, PYTHONIOENCODING=ascii): escapes, never a UnicodeEncodeError."""
    interpreter.write({"accented_target.py": "VALUE = 'original'\n", "accented_patches.py": """
        import lazypatch

        @lazypatch.when_imported("accented_target", name="démo.überpatch")
        def patched(module, patch):
            patch.setattr(module, "VALUE", "补丁")
    """})
    report = interpreter.root / "report.json"
    interpreter.run("import lazypatch.auto, accented_target",
                    env={"LAZYPATCH_MODULES": "accented_patches", "LAZYPATCH_REPORT": str(report)})
    for arguments in ([], ["--all"], ["--diff"]):
        result = interpreter.run_command(
            [sys.executable, "-m", "lazypatch", "report", str(report), *arguments],
            env={"PYTHONIOENCODING": "ascii", "LC_ALL": "C"}, check=False)
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr and "UnicodeEncodeError" not in result.stderr
        assert "d\\xe9mo.\\xfcberpatch" in result.stdout, result.stdout


def test_a_report_of_many_patches_waiting_on_missing_modules_lists_the_installed_once(
        interpreter):
    """Each record of a patch waiting on a module nothing provides says so, with the
    nearest installed name; the installed modules are listed once per report, not once
    per record (3,000 such patches took minutes to report)."""
    result = interpreter.run_json("""
        import json, pkgutil
        import lazypatch
        listings = []
        original = pkgutil.iter_modules
        def counting(*arguments, **keywords):
            listings.append(1)
            return original(*arguments, **keywords)
        pkgutil.iter_modules = counting
        for index in range(600):
            lazypatch.register(lambda module: None, f"nowhere_{index % 50}_module",
                               name=f"waiting.{index}")
        lazypatch.register(lambda module: None, "jsonn", name="typo.json")
        records = {record["name"]: record for record in lazypatch.report()}
        first = len(listings)
        lazypatch.report()
        print(json.dumps({"listings": [first, len(listings) - first],
                          "waiting": records["waiting.599"]["notes"],
                          "typo": records["typo.json"]["notes"]}))
    """)
    assert result["listings"] == [1, 1], result
    assert result["waiting"] == ["no module named 'nowhere_49_module' can be imported here; "
                                 "the patch waits for nothing"], result
    assert result["typo"] == ["no module named 'jsonn' can be imported here "
                              "(did you mean 'json'?)"], result

"""Reports across processes: JSON at exit with {rank}/{pid}, rank-aware logging,
and `lazypatch report` over several ranks' files."""

from __future__ import annotations

import json
import sys

PACKAGES = {
    "demo_target.py": "VALUE = 1\n",
    "demo_patches.py": """
        import os, lazypatch

        @lazypatch.when_imported("demo_target", name="demo.ok")
        def ok(module, patch):
            patch.setattr(module, "VALUE", 2)

        @lazypatch.when_imported("demo_target", name="demo.rank_dependent")
        def rank_dependent(module, patch):
            if os.environ.get("RANK") == "1":
                raise RuntimeError("no device on this rank")
            patch.setattr(module, "OTHER", True)
    """,
}


def _write_rank_report(interpreter, rank: str) -> None:
    interpreter.run("import warnings; warnings.simplefilter('ignore'); "
                    "import lazypatch.auto, demo_target",
                    env={"RANK": rank, "LAZYPATCH_MODULES": "demo_patches",
                         "LAZYPATCH_REPORT": str(interpreter.root / "out" / "r{rank}-{pid}.json")})


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
                                      *map(str, files)])
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["PATCH", "TARGET", "RANK", "0", "RANK", "1"]
    assert any(line.split() == ["demo.ok", "demo_target", "applied", "applied"] for line in lines)
    assert "1 patch(es) differ between processes:" in result.stdout
    differing = result.stdout.split("differ between processes:")[1]
    assert "demo.rank_dependent" in differing and "demo.ok" not in differing
    assert "rank 1: failed (RuntimeError: no device on this rank" in differing

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

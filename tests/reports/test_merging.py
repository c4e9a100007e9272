"""`lazypatch report` over many processes: identical processes grouped, only differences shown.

One real process writes a report (the record format is the engine's own);
the test copies it into 1,024 rank files and changes what a real job would
see differ (a rank whose patch failed, a node with another package version,
a rank missing a patch), then runs the real command on them.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

from conftest import report_demo, write_demo_report

from lazypatch.reports.merging import compressed_ranges, group_label, merge

PACKAGES = report_demo("""
        @lazypatch.when_imported("demo_target", name="demo.device")
        def device(module, patch):
            patch.setattr(module, "DEVICE", "npu")

        @lazypatch.when_imported("demo_target", name="demo.extra")
        def extra(module, patch):
            patch.setattr(module, "EXTRA", True)
""")

RANKS = 1024
FAILING = [7] + list(range(500, 512))
MISSING_EXTRA = 1000


def _template(interpreter) -> dict:
    """A real report of one process that imported demo_target under lazypatch."""
    interpreter.write(PACKAGES)
    path = interpreter.root / "template.json"
    write_demo_report(interpreter, path)
    return json.loads(path.read_text())


def _job(template: dict, directory: Path) -> None:
    """1,024 rank reports: ranks 7 and 500-511 fail demo.device, rank 1000 lacks demo.extra."""
    directory.mkdir()
    for rank in range(RANKS):
        document = copy.deepcopy(template)
        document["rank"], document["pid"] = rank, 10_000 + rank
        document["rank_variable"] = "RANK"
        for record in document["patches"]:
            if record["name"] == "demo.device" and rank in FAILING:
                record.update(status="failed", reason=f"RuntimeError: no NPU on rank {rank}")
        if rank == MISSING_EXTRA:
            document["patches"] = [record for record in document["patches"]
                                   if record["name"] != "demo.extra"]
        (directory / f"report-{rank}.json").write_text(json.dumps(document))


def _report(interpreter, *arguments: str, check: bool = True):
    """`lazypatch report`; with ``check``, its exit status must be 1 exactly when a patch
    failed in some process (the job of ``_job`` has failures)."""
    result = interpreter.run_command([sys.executable, "-m", "lazypatch", "report", *arguments],
                                     check=False)
    if check:
        failed = '"failed"' in result.stdout or "FAILED:" in result.stdout
        assert result.returncode == (1 if failed else 0), result.stdout + result.stderr
    return result


def test_1024_identical_ranks_are_one_group_and_one_table(interpreter):
    template = _template(interpreter)
    directory = interpreter.root / "job"
    directory.mkdir()
    for rank in range(RANKS):
        (directory / f"report-{rank}.json").write_text(
            json.dumps(dict(template, rank=rank, rank_variable="RANK")))
    result = _report(interpreter, str(directory))
    lines = result.stdout.splitlines()
    assert lines[:2] == ["1024 reports, 1 group of identical processes:",
                         "  A: ranks 0-1023: identical"]
    header = next(line for line in lines if line.startswith("PATCH"))
    assert header.split() == ["PATCH", "TARGET", "A:", "RANKS", "0-1023"]
    statuses = {line.split()[0]: line.split()[2] for line in lines if line.startswith("demo.")}
    assert statuses == {"demo.ok": "applied", "demo.device": "applied", "demo.extra": "applied"}
    assert "every patch has the same status in every process" in lines
    assert "differ between" not in result.stdout


def test_differences_of_1024_ranks_are_grouped_and_only_they_are_listed(interpreter):
    _job(_template(interpreter), interpreter.root / "job")
    result = _report(interpreter, str(interpreter.root / "job" / "report-*.json"))
    lines = result.stdout.splitlines()
    # What went wrong opens the report: the failed patch, where, why.
    assert lines[0] == "FAILED: 1 patch failed in 13 processes of 1024:"
    assert lines[1].startswith("  demo.device (demo_target) in ranks 7, 500-511: "
                               "RuntimeError: no NPU on rank 7; ")
    lines = lines[lines.index(""):][1:]
    assert lines[:4] == ["1024 reports, 3 groups of identical processes:",
                         "  A: ranks 0-6, 8-499, 512-999, 1001-1023: identical",
                         "  B: ranks 7, 500-511: identical",
                         "  C: rank 1000: identical"]
    matrix = [line.split() for line in lines if line.startswith("demo.")]
    assert matrix == [["demo.device", "demo_target", "applied", "failed:", "RuntimeError:", "no",
                       "NPU", "on", "rank", "7", "applied"],
                      ["demo.extra", "demo_target", "applied", "applied", "absent"]]
    # demo.ok and the built-in packs' patches waiting for their targets: counted, not listed
    assert any(line.endswith(" patches with the same status in every process not shown "
                             "(`--all` shows them)") for line in lines), lines
    differing = result.stdout.split("2 patches differ between processes:")[1]
    assert "    ranks 7, 500-511: failed (RuntimeError: no NPU on rank 7; RuntimeError: no " \
           "NPU on rank 500; RuntimeError: no NPU on rank 501; ...)" in differing
    assert "    rank 1000: absent (not registered)" in differing

    every = _report(interpreter, "--all", str(interpreter.root / "job"))
    assert ["demo.ok", "demo_target", "applied", "applied", "applied"] in \
        [line.split() for line in every.stdout.splitlines()]


def test_json_names_groups_reports_and_the_patches_that_differ(interpreter):
    _job(_template(interpreter), interpreter.root / "job")
    result = _report(interpreter, "--format", "json", str(interpreter.root / "job"))
    merged = json.loads(result.stdout)
    assert merged["processes"] == RANKS
    assert [(group["name"], group["processes"]) for group in merged["groups"]] == \
        [("A", RANKS - len(FAILING) - 1), ("B", len(FAILING)), ("C", 1)]
    assert merged["groups"][2]["reports"] == [str(interpreter.root / "job" / "report-1000.json")]
    assert merged["differences"] == ["demo.device", "demo.extra"]
    device = next(patch for patch in merged["patches"] if patch["name"] == "demo.device")
    assert device["statuses"] == ["applied", "failed", "applied"]


def test_another_package_version_on_some_ranks_is_a_difference(interpreter):
    template = _template(interpreter)
    directory = interpreter.root / "job"
    directory.mkdir()
    for rank in range(4):
        document = copy.deepcopy(template)
        document["rank"], document["rank_variable"] = rank, "RANK"
        for record in document["patches"]:
            record["package"], record["version"] = "demo-target", "1.0" if rank < 2 else "1.1"
        (directory / f"r{rank}.json").write_text(json.dumps(document))
    lines = _report(interpreter, str(directory)).stdout.splitlines()
    assert lines[1:3] == ["  A: ranks 0-1: identical", "  B: ranks 2-3: identical"]
    assert ["demo.ok", "demo_target", "applied", "(1.0)", "applied", "(1.1)"] in \
        [line.split() for line in lines]


def test_patterns_and_directories_that_name_no_report_are_usage_errors(interpreter):
    (interpreter.root / "empty").mkdir()
    for argument, message in (("empty", "directory empty: no report file (*.json) found"),
                              ("out/*.json", "pattern out/*.json: no report file")):
        result = _report(interpreter, argument, check=False)
        assert result.returncode == 2, result.stderr
        assert message in result.stderr


def test_group_labels_name_ranks_in_ranges_and_processes_without_rank():
    assert compressed_ranges([5, 0, 1, 2, 9, 10, 3]) == "0-3, 5, 9-10"
    assert compressed_ranges([4]) == "4"
    assert group_label([{"rank": 0, "pid": 1}, {"rank": 0, "pid": 2}, {"rank": 1, "pid": 3}]) \
        == "ranks 0-1 (3 processes)"
    assert group_label([{"rank": None, "pid": 42}]) == "process pid 42 (no rank)"
    # A process that no launcher gave a rank reports rank 0, but it is not rank 0.
    assert group_label([{"rank": 0, "rank_variable": None, "pid": 7},
                        {"rank": 0, "rank_variable": "RANK", "pid": 8}]) \
        == "rank 0; process pid 7 (no rank)"
    assert group_label([{"pid": 1}, {"pid": 2}]) == "2 processes without a rank"


def test_merge_is_independent_of_file_order_and_leaves_the_documents_unchanged():
    def document(rank: int, status: str) -> dict:
        return {"rank": rank, "pid": rank, "path": f"r{rank}.json",
                "patches": [{"name": "p", "target": "t", "status": status}]}
    documents = [document(3, "failed"), document(0, "applied"), document(2, "failed"),
                 document(1, "applied")]
    before = copy.deepcopy(documents)
    merged = merge(documents)
    assert documents == before
    assert [group["label"] for group in merged["groups"]] == ["ranks 0-1", "ranks 2-3"]
    assert merge(list(reversed(documents)))["groups"][0]["label"] == "ranks 0-1"
    assert merged["patches"][0]["differs"] is True


def test_merge_reads_an_iterator_once_and_keeps_whole_only_each_groups_first_document():
    """Ten thousand reports must not all be held: merge takes them one at a time and keeps
    of every member but a group's first only what the view lists (rank, pid, path)."""
    consumed = []

    def documents():
        for rank in (5, 1, 4, 0, 3, 2):
            consumed.append(rank)
            status = "failed" if rank % 2 else "applied"
            yield {"rank": rank, "pid": 100 + rank, "path": f"r{rank}.json", "torch": "2.13",
                   "patches": [{"name": "p", "target": "t", "status": status,
                                "reason": f"reason {rank}" if rank % 2 else ""}]}

    merged = merge(documents())
    assert consumed == [5, 1, 4, 0, 3, 2]
    applied, failed = merged["groups"]
    assert applied["label"] == "ranks 0, 2, 4" and failed["label"] == "ranks 1, 3, 5"
    assert "patches" in applied["members"][0] and applied["members"][0]["rank"] == 0
    assert all(set(member) == {"rank", "pid", "path"} for member in applied["members"][1:])
    assert [member["rank"] for member in failed["members"]] == [1, 3, 5]
    # The failing group's reasons come from every member, in rank order.
    assert merged["patches"][0]["cells"][1]["reasons"] == ["reason 1", "reason 3", "reason 5"]


def test_report_of_the_path_given_to_run_reads_the_files_run_wrote(interpreter):
    # `lazypatch run --report r.json` writes r-<pid>.json (one per process) and says so;
    # `lazypatch report r.json` afterwards reads those instead of "no such report file".
    interpreter.write({"program.py": "print('ran')\n"})
    report = interpreter.root / "r.json"
    interpreter.run_command([sys.executable, "-m", "lazypatch", "run", "--report", str(report),
                             "--", sys.executable, "program.py"])
    assert not report.exists() and list(interpreter.root.glob("r-*.json"))
    result = interpreter.run_command([sys.executable, "-m", "lazypatch", "report", str(report)])
    assert result.stdout.splitlines()[0].startswith(str(interpreter.root / "r-"))

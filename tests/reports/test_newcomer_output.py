"""Issue 15: reports, `list` and `doctor` show first what concerns this host.

Failures, applied and reverted patches and skips with a reason come first;
patches that cannot apply here (off by default, or a required distribution
missing) are summarised in one line per pack, and `--all` / ``all=True``
shows them. Every row has a detail.
"""

from __future__ import annotations

import json
import sys

LAZYPATCH = [sys.executable, "-m", "lazypatch"]

# One pack of each kind: a working one (applied, failed, skipped with a reason,
# pending), one off by default, one for hardware this host does not have.
PACKS = {
    "host_target.py": "VALUE = 1\n",
    "host_patches.py": """
        import lazypatch

        @lazypatch.when_imported("host_target", name="mine.works")
        def works(module, patch):
            '''Double VALUE.'''
            patch.setattr(module, "VALUE", 2)

        @lazypatch.when_imported("host_target", name="mine.breaks")
        def breaks(module, patch):
            raise RuntimeError("broken on purpose")

        @lazypatch.when_imported("host_target", name="mine.not_needed")
        def not_needed(module, patch):
            patch.skip("nothing to fix here")

        @lazypatch.when_imported("host_never_imported", name="mine.waiting")
        def waiting(module, patch):
            pass

        for index in range(3):
            lazypatch.register(lambda module: None, "host_target", name=f"extra.off{index}",
                               tags=["extra"], enabled=False)
        for index in range(4):
            lazypatch.register(lambda module: None, "host_target", name=f"accel.kernel{index}",
                               requires=["no-such-accelerator-runtime"], tags=["accel"])
    """,
}

ENVIRONMENT = {"LAZYPATCH_MODULES": "host_patches", "LAZYPATCH_PLUGINS": "0"}

RENDER_BOTH = """
    import json, warnings
    warnings.simplefilter("ignore")
    import lazypatch.auto, lazypatch, host_target
    from lazypatch.reports.reporting import render
    records = [record for record in lazypatch.report()
               if record["name"].split(".")[0] in ("mine", "extra", "accel")]
    print(json.dumps({"short": render(records), "all": render(records, all=True)}))
"""


def _table_names(text):
    names = []
    for line in text.splitlines()[1:]:
        cells = line.split()
        if len(cells) > 1 and cells[0] in ("failed", "applied", "reverted", "skipped",
                                           "pending", "disabled"):
            names.append((cells[0], cells[1]))
    return names


def test_the_table_puts_failures_first_and_summarises_what_cannot_apply(interpreter):
    interpreter.write(PACKS)
    tables = interpreter.run_json(RENDER_BOTH, env=ENVIRONMENT)
    short = tables["short"]
    assert _table_names(short) == [("failed", "mine.breaks"), ("applied", "mine.works"),
                                   ("skipped", "mine.not_needed"), ("pending", "mine.waiting")]
    lines = short.splitlines()
    assert "7 not shown (`--all` or all=True shows them):" in lines
    assert ("  3 disabled by default (extra.*): enable with LAZYPATCH_ENABLE=extra or "
            "`lazypatch run --enable extra` (or one by name)") in lines
    assert ("  4 cannot apply on this host (accel.*): no-such-accelerator-runtime is not "
            "installed") in lines
    # the counts cover every patch, in the words and numbers of the lines above
    assert lines[-1] == ("1 failed, 1 applied, 1 skipped, 1 pending; not shown: 4 cannot "
                         "apply on this host, 3 disabled by default")
    # every row says something: the docstring of an applied patch, the wait of a pending one
    assert "Double VALUE." in short
    assert "host_never_imported not imported yet" in short
    everything = tables["all"]
    assert "not shown" not in everything
    shown = _table_names(everything)
    assert len(shown) == 11 and shown[0] == ("failed", "mine.breaks")
    assert ("skipped", "accel.kernel0") in shown and ("disabled", "extra.off2") in shown
    assert "requires no-such-accelerator-runtime: no-such-accelerator-runtime is not" \
        in everything


def test_report_command_all_and_many_processes_hide_the_same_noise(interpreter):
    interpreter.write(PACKS)
    for rank in ("0", "1"):
        interpreter.run("import warnings; warnings.simplefilter('ignore')\n"
                        "import lazypatch.auto, host_target\n",
                        env=dict(ENVIRONMENT, RANK=rank,
                                 LAZYPATCH_REPORT=str(interpreter.root / f"r{rank}.json")))
    single = interpreter.run_command(LAZYPATCH + ["report", "r0.json"], check=False).stdout
    assert "accel.kernel0" not in single and "4 cannot apply on this host (accel.*)" in single
    every = interpreter.run_command(LAZYPATCH + ["report", "--all", "r0.json"], check=False).stdout
    assert "accel.kernel0" in every and "not shown" not in every
    both = interpreter.run_command(LAZYPATCH + ["report", "r0.json", "r1.json"], check=False).stdout
    assert "accel.kernel0" not in both and "extra.off0" not in both
    assert "not shown, the same in every process (`--all` shows them):" in both
    assert any(line.split()[:2] == ["mine.breaks", "host_target"] for line in both.splitlines())
    both_all = interpreter.run_command(LAZYPATCH + ["report", "--all", "r0.json", "r1.json"],
                                       check=False)
    # mine.breaks failed: the command says so in its exit status, unless told not to.
    assert both_all.returncode == 1
    quiet = interpreter.run_command(LAZYPATCH + ["report", "--exit-zero", "r0.json", "r1.json"])
    assert quiet.returncode == 0
    assert "accel.kernel0" in both_all.stdout


def test_list_has_descriptions_filters_and_says_what_cannot_apply(interpreter):
    interpreter.write(PACKS)
    run = lambda *arguments: interpreter.run_command(  # noqa: E731
        LAZYPATCH + ["list", *arguments], env=ENVIRONMENT).stdout
    default = run()
    header = default.splitlines()[0].split()
    assert header[-1] == "DESCRIPTION"
    works = next(line for line in default.splitlines() if line.startswith("mine.works "))
    assert works.endswith("Double VALUE.")
    assert "accel.kernel0" not in default
    assert "4 cannot apply on this host (accel.*)" in default
    every = run("--all")
    kernel = next(line for line in every.splitlines() if line.startswith("accel.kernel0 "))
    assert kernel.split()[2] == "cannot"
    assert "ENABLED 'cannot': a required distribution is missing" in every

    rows = lambda *arguments: [row["name"] for row in json.loads(run(*arguments, "--json"))]  # noqa: E731
    assert rows("mine.*") == ["mine.works", "mine.breaks", "mine.not_needed", "mine.waiting"]
    assert rows("extra") == ["extra.off0", "extra.off1", "extra.off2"]
    assert rows("--tag", "accel") == [f"accel.kernel{index}" for index in range(4)]
    enabled = rows("--enabled")
    assert "mine.works" in enabled
    assert not [name for name in enabled if name.startswith(("extra.", "accel.", "device."))]
    by_name = {row["name"]: row for row in json.loads(run("--json"))}
    assert by_name["accel.kernel1"]["applicable"] is False
    assert by_name["accel.kernel1"]["unmet"] == [
        "requires no-such-accelerator-runtime: no-such-accelerator-runtime is not installed"]
    assert by_name["mine.works"]["applicable"] is True


def test_doctor_says_once_per_pack_what_cannot_apply(interpreter):
    interpreter.write(PACKS)
    result = interpreter.run_command(LAZYPATCH + ["doctor", "--json", "--runs", "0"],
                                     env=ENVIRONMENT, check=False)
    notes = json.loads(result.stdout)["notes"]
    accel = [note for note in notes if "accel" in note]
    assert accel == ["4 accel.* patches cannot apply on this host (they will be skipped): "
                     "requires no-such-accelerator-runtime: no-such-accelerator-runtime is "
                     "not installed"]
    # the built-in Ascend pack: one note however many of its patches need torch_npu
    ascend = [note for note in notes if "ascend" in note]
    assert len(ascend) <= 1


def test_every_kind_of_row_has_a_detail():
    from lazypatch.reports.reporting import cannot_apply_here, detail_of
    waiting = {"status": "pending", "target": "torch", "reason": "", "unmet_requirements": []}
    assert detail_of(waiting) == "torch not imported yet" and not cannot_apply_here(waiting)
    never = dict(waiting, unmet_requirements=["requires torch_npu: torch_npu is not installed"])
    assert detail_of(never) == "will be skipped: requires torch_npu: torch_npu is not installed"
    assert cannot_apply_here(never)
    quiet = {"status": "applied", "reason": "", "description": "Fix the thing."}
    assert detail_of(quiet) == "Fix the thing."
    chosen_off = {"status": "disabled", "reason": "disabled by configuration",
                  "unmet_requirements": []}
    assert not cannot_apply_here(chosen_off)   # the user's own choice stays in the table


def test_list_filters_by_status_and_summarises_what_is_off_by_default(interpreter):
    interpreter.write(PACKS)
    run = lambda *arguments: interpreter.run_command(  # noqa: E731
        LAZYPATCH + ["list", *arguments], env=ENVIRONMENT).stdout
    rows = lambda *arguments: [row["name"] for row in json.loads(run(*arguments, "--json"))]  # noqa: E731
    disabled = rows("--status", "disabled")
    assert [name for name in disabled if name.startswith("extra.")] == [
        "extra.off0", "extra.off1", "extra.off2"]
    assert "mine.works" not in disabled and "mine.works" in rows("--status", "pending")
    assert rows("mine.*", "--status", "applied") == []
    # the table: off-by-default patches are one summary line, as in the report...
    default = run()
    assert "extra.off0" not in default
    assert "3 disabled by default (extra.*): enable with LAZYPATCH_ENABLE=extra" in default
    # ...unless a filter asks for them, and what is enabled comes first
    picked = [line.split()[0] for line in run("--status", "disabled", "--status",
                                              "pending").splitlines()[1:]
              if line.startswith(("mine.", "extra."))]
    assert picked[:4] == ["mine.works", "mine.breaks", "mine.not_needed", "mine.waiting"]
    assert picked[4:] == ["extra.off0", "extra.off1", "extra.off2"]
    assert "--status" in interpreter.run_command(LAZYPATCH + ["list", "--help"]).stdout

"""A report shows what happened in this process: the user's own patches, pending ones
too (a misspelled target is one), and not the dozens of built-in patches waiting for
modules the program never imported, which one summary line counts."""

from __future__ import annotations


def test_built_in_patches_waiting_for_unimported_modules_are_one_line(interpreter):
    interpreter.write({"mine.py": """
import lazypatch

@lazypatch.when_imported("json", name="mine.applied")
def applied(json, patch):
    patch.setattr(json, "dumps", json.dumps)

@lazypatch.when_imported("nunpy", name="mine.typo")
def typo(module, patch):
    pass
"""})
    result = interpreter.run(
        "import lazypatch.auto, mine, json\n"
        "print(lazypatch.render_report())\n"
        "print('---')\n"
        "print(lazypatch.render_report(all=True))\n")
    short, everything = result.stdout.split("---\n")
    rows = [line.split()[:2] for line in short.splitlines()[1:] if line.split()[:1] in
            (["applied"], ["pending"], ["failed"], ["skipped"])]
    assert rows[:2] == [["applied", "mine.applied"], ["pending", "mine.typo"]], short
    assert not any(name.startswith("numpy_compat.") for _, name in rows), short
    assert any("of the built-in packs (" in line and "numpy_compat.*" in line and
               "wait for modules this process never imported: " in line
               for line in short.splitlines()), short
    # --all shows them as rows
    assert any(line.split()[:2] == ["pending", "numpy_compat.type_aliases"]
               for line in everything.splitlines()), everything


def test_the_first_import_of_wrapt_is_reported_once_and_charged_to_no_patch(interpreter):
    """patch.wrap imports wrapt the first time (0.1-2 s with asyncio): that is the
    process's one-time cost, not the time of the patch that happened to run first."""
    interpreter.write({"wrapping.py": """
import lazypatch

@lazypatch.when_imported("wrapped_target", name="wrapping.first")
def first(module, patch):
    # a method: wrapt's FunctionWrapper binds it (a module's function needs no wrapt)
    patch.wrap(module.Model, "f", lambda wrapped, instance, args, kwargs: wrapped(*args, **kwargs))
""", "wrapped_target.py": "class Model:\n    def f(self):\n        return 1\n"})
    result = interpreter.run_json(
        "import json as _json, sys, time\n"
        "assert 'wrapt' not in sys.modules\n"
        "import lazypatch.auto, wrapping\n"
        "started = time.perf_counter()\n"
        "import wrapped_target\n"
        "total = (time.perf_counter() - started) * 1000\n"
        "record = next(r for r in lazypatch.report() if r['name'] == 'wrapping.first')\n"
        "table = lazypatch.render_report()\n"
        "print(_json.dumps([record['status'], record['duration_ms'], total, table]))\n")
    status, own_ms, total_ms, table = result
    assert status == "applied"
    line = next(line for line in table.splitlines() if line.startswith("one-time imports"))
    wrapt_ms = float(line.split("wrapt ")[1].split(" ms")[0])
    # The wrapt import is the bulk of the import's time, and none of it is the patch's.
    assert own_ms + wrapt_ms <= total_ms + 1.0
    assert own_ms < wrapt_ms


def test_note_providers_returning_numbers_or_odd_values_never_break_the_report(interpreter):
    interpreter.write({"noted_target.py": "X = 1\n"})
    result = interpreter.run_json("""
import json, os
import lazypatch

class Unprintable:
    def __str__(self):
        raise RuntimeError("no")

@lazypatch.when_imported("noted_target", name="noted.counter")
def counter(module, patch):
    patch.setattr(module, "X", 2)
    patch.note_provider(lambda: 42)
    patch.note_provider(lambda: [3, "three"])
    patch.note_provider(lambda: Unprintable())

import noted_target
record = next(r for r in lazypatch.report() if r["name"] == "noted.counter")
path = lazypatch.write_report(os.path.join(os.getcwd(), "report.json"))
table = lazypatch.render_report()
print(json.dumps({"notes": record["notes"], "written": os.path.exists(path),
                  "in_table": "42" in table, "json": len(lazypatch.render_report(format="json"))}))
""")
    assert result["notes"][:3] == ["42", "3", "three"]
    assert "cannot be shown" in result["notes"][3]
    assert result["written"] and result["in_table"] and result["json"] > 0


def test_html_report_of_a_file_whose_name_is_not_utf8(interpreter, tmp_path):
    import os
    import subprocess
    import sys
    interpreter.write({"named_target.py": "X = 1\n"})
    reports = tmp_path / "reports"
    reports.mkdir()
    interpreter.run("import lazypatch.auto, named_target\n",
                    env={"LAZYPATCH_REPORT": str(tmp_path / "plain.json")})
    odd = os.path.join(os.fsencode(str(reports)), b"r\xff.json")
    os.rename(str(tmp_path / "plain.json"), odd)
    page = tmp_path / "page.html"
    result = subprocess.run([sys.executable, "-m", "lazypatch", "report", "--html", str(page),
                             str(reports)], capture_output=True, encoding="utf-8", errors="replace",
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "r\ufffd.json" in page.read_text(encoding="utf-8")


def test_report_writes_never_follow_planted_links_nor_replace_special_files(tmp_path):
    import os
    import stat

    import pytest

    from lazypatch.files import atomic_write
    target = tmp_path / "victim.txt"
    target.write_text("mine")
    report = tmp_path / "report.json"
    # Links planted at every name the old scheme would use (pid-based) change nothing.
    os.symlink(target, tmp_path / f".report.json.{os.getpid()}.tmp")
    atomic_write(str(report), "{}")
    assert report.read_text() == "{}" and target.read_text() == "mine"
    assert not stat.S_ISLNK(os.lstat(report).st_mode)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="a FIFO, not a regular file"):
        atomic_write(str(fifo), "{}")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    link = tmp_path / "link.json"
    os.symlink(target, link)
    with pytest.raises(OSError, match="a symbolic link"):
        atomic_write(str(link), "{}")
    assert target.read_text() == "mine"
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.endswith(".tmp")) == \
        [f".report.json.{os.getpid()}.tmp"]      # only the planted link: nothing left behind

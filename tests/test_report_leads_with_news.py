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
    assert any("of the built-in packs (numpy_compat.*, openmmlab.*) wait for modules this "
               "process never imported: " in line for line in short.splitlines()), short
    # --all shows them as rows
    assert any(line.split()[:2] == ["pending", "numpy_compat.type_aliases"]
               for line in everything.splitlines()), everything

"""The report says when a live patch is no longer in effect where it changed something.

An application is "applied" for as long as its changes are live; but code may assign
over a patched attribute afterwards, and a reload that lazypatch does not see (used as a
library, a finder placed in front of its own serves the reload) runs the body again over
every patched name. The record's ``overwritten`` names each such change and the table
says so, rather than showing "applied" for a patch that no longer acts. Fresh
interpreters, temporary modules.
"""

from __future__ import annotations

ASSIGNED = """
import json, lazypatch
import overwritten_target

@lazypatch.when_imported("overwritten_target", name="over.build")
def replace(module, patch):
    patch.setattr(module, "build", lambda: "patched")
    patch.setattr(module, "LEVEL", 2)

@lazypatch.when_imported("overwritten_target", name="over.layered")
def layered(module, patch):
    patch.setitem(module.TABLE, "key", "patched")

def record(name):
    return {row["name"]: row for row in lazypatch.report()}[name]

seen = {"fresh": record("over.build")["overwritten"]}
overwritten_target.build = lambda: "assigned"      # code that assigns over the patch
overwritten_target.TABLE["key"] = "assigned"
row = record("over.build")
seen.update(assigned=row["overwritten"], status=row["status"],
            item=record("over.layered")["overwritten"],
            table=lazypatch.render_report([row]))
lazypatch.unpatch_all()
seen.update(after_undo=record("over.build")["overwritten"],
            restored=overwritten_target.build(), table_restored=overwritten_target.TABLE["key"])
print(json.dumps(seen))
"""


def test_a_value_assigned_over_a_live_patch_is_named(interpreter):
    interpreter.write({"overwritten_target.py": """
        def build():
            return "original"

        LEVEL = 1
        TABLE = {"key": "original"}
    """})
    result = interpreter.run_json(ASSIGNED)
    assert result["fresh"] == []
    assert result["status"] == "applied"
    assert result["assigned"] == ["setattr overwritten_target.build"]
    (item,) = result["item"]   # (a dict is named by its address, as everywhere in reports)
    assert item.startswith("setitem <dict at 0x") and item.endswith(">['key']"), item
    assert "no longer in effect, another value assigned since (or a reload lazypatch did " \
           "not see): setattr overwritten_target.build" in result["table"], result["table"]
    # Undone as any other change: the original comes back over what was assigned.
    assert result["after_undo"] == [] and result["restored"] == "original"
    assert result["table_restored"] == "original"


# Used as a library, lazypatch notices a finder put in front of its own only at the next
# import that reaches it (docs/activation.md); a reload that finder serves in between
# runs the body without lazypatch, over the patched names.
UNSEEN_RELOAD = """
import importlib, importlib.abc, importlib.machinery, json, sys
import lazypatch

class Front(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "reloaded_target":
            return importlib.machinery.PathFinder.find_spec(fullname, path)
        return None

@lazypatch.when_imported("reloaded_target", name="reload.build")
def replace(module, patch):
    patch.setattr(module, "build", lambda: "patched")

import reloaded_target
during = reloaded_target.build()
sys.meta_path.insert(0, Front())
importlib.reload(reloaded_target)
row = {row["name"]: row for row in lazypatch.report()}["reload.build"]
print(json.dumps({"during": during, "after_reload": reloaded_target.build(),
                  "status": row["status"], "overwritten": row["overwritten"]}))
"""


def test_a_reload_lazypatch_did_not_see_is_named(interpreter):
    interpreter.write({"reloaded_target.py": "def build():\n    return 'original'\n"})
    result = interpreter.run_json(UNSEEN_RELOAD)
    assert result["during"] == "patched" and result["after_reload"] == "original"
    assert result["status"] == "applied"
    assert result["overwritten"] == ["setattr reloaded_target.build"]

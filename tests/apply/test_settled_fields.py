"""A watched import commits its application as a raw record (``patch.unsettled``) and
the patch's fields are settled when read: every reader sees the settled value, with
no call of its own to remember (the DrivingSDK patcher once read ``status`` stale)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from lazypatch import state
from lazypatch.apply.ledger import process_ledger

ROOT = Path(__file__).resolve().parents[2]

# Each public attribute of every RegisteredPatch, read in a fresh interpreter right after
# the watched import and before anything else read the patch, then again after the
# report: a field read stale the first time differs between the two.
READ_EVERY_ATTRIBUTE = """
import json, lazypatch
from lazypatch.state import STATE

@lazypatch.when_imported("target_pkg", name="test.no_op")
def no_op(module):
    "Changes nothing."

@lazypatch.when_imported("target_pkg", name="test.changes")
def changes(module, patch):
    "Changes a value and says so."
    patch.setattr(module, "VALUE", 2)
    patch.note("changed VALUE")

@lazypatch.when_imported("target_pkg", name="test.assigns")
def assigns(module):
    "Assigns plainly (an untracked change)."
    module.PLAIN = True

def public_attributes(patch):
    values = {}
    for name in dir(patch):
        if name.startswith("_"):
            continue
        value = getattr(patch, name)
        if callable(value) and not isinstance(value, (list, tuple, dict)):
            continue   # a method or the patch function: not state
        if name == "live":
            value = [context.module is target_pkg for context in value]
        elif name in ("duration_ms", "applied_order"):
            value = value > 0
        elif isinstance(value, frozenset):
            value = sorted(value)
        elif not isinstance(value, (str, int, float, bool, type(None))):
            value = repr(list(value)) if isinstance(value, (list, tuple)) else repr(value)
        values[name] = value
    return values

import target_pkg
names = ["test.no_op", "test.changes", "test.assigns"]
first = {name: public_attributes(STATE.catalog.by_name[name]) for name in names}
records = {record["name"]: record for record in lazypatch.report() if record["name"] in names}
second = {name: public_attributes(STATE.catalog.by_name[name]) for name in names}
print(json.dumps({"first": first, "second": second,
                  "records": {name: {key: records[name][key] for key in
                                     ("status", "applications", "history", "notes",
                                      "untracked_changes")} for name in names}}))
"""


def test_every_attribute_read_right_after_a_watched_import_is_already_settled(interpreter):
    interpreter.write({"target_pkg/__init__.py": "VALUE = 1\n"})
    result = interpreter.run_json(READ_EVERY_ATTRIBUTE)
    for name, first in result["first"].items():
        assert first == result["second"][name], name
        record = result["records"][name]
        assert first["status"] == record["status"] == "applied", name
        assert first["application_count"] == record["applications"] == 1, name
        assert first["history"] == repr(record["history"]) == repr(["applied"]), name
        assert first["notes"] == repr(record["notes"]), name
        assert first["untracked_changes"] == repr(record["untracked_changes"]), name
        assert first["live"] == [True], name
        assert first["duration_ms"] and first["applied_order"], name
        assert first["unsettled"] == "[]", name   # reading them folded the record in
    assert result["records"]["test.changes"]["notes"] == ["changed VALUE"]
    assert result["records"]["test.assigns"]["untracked_changes"] == ["PLAIN"]


def test_settle_writes_only_fields_that_settle_when_read():
    written = set(re.findall(r"self\._(\w+) = ", inspect.getsource(state.RegisteredPatch.settle)))
    assert written and written <= set(state.SETTLED_FIELDS)
    for field in state.SETTLED_FIELDS:
        assert isinstance(getattr(state.RegisteredPatch, field), property), field
        assert "_" + field in state.RegisteredPatch.__slots__, field


# The watched import's own checks read the raw ``_live`` beside ``unsettled`` (settling
# there would cost every import the lock); nothing else reads a settled field's slot.
RAW_READ = re.compile(r"\._(%s)\b" % "|".join(state.SETTLED_FIELDS))
ALLOWED_RAW_READ = "(patch._live or patch.unsettled) and patch.is_applied_to("


def test_nothing_outside_the_state_reads_a_settled_field_unsettled():
    offenders = []
    for folder in ("lazypatch", "registry", "examples", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            # state.py owns the slots; hidden folders (the benchmark's .spconv-venv) are not ours.
            if path == ROOT / "lazypatch" / "state.py" or any(
                    part.startswith(".") for part in path.relative_to(ROOT).parts):
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if RAW_READ.search(line) and ALLOWED_RAW_READ not in line:
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, ("read the property (it settles first), not the slot:\n"
                           + "\n".join(offenders))


def test_a_setter_settles_first_so_a_later_settle_cannot_overwrite_it():
    patch = state.RegisteredPatch("test.setter", "nowhere", lambda module: None, state.AFTER,
                                  0, (), frozenset(), True, False)

    process_ledger()   # (the contexts settle makes record into it)
    # An application's raw record, as application.apply leaves it (state.RECORD_*).
    patch.unsettled = [[None, 1.0, 2.0, [], None]]
    patch.status = state.REVERTED
    assert patch.unsettled == [] and patch.application_count == 1
    assert patch.status == state.REVERTED

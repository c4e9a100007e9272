"""What an application's record keeps of its module: an application that changed
nothing holds it only weakly (so a module dropped from ``sys.modules`` is freed, as
after a plain import), one with changes holds it for its undo; status, counts,
``is_applied_to``, undo and re-application stay exact either way."""

from __future__ import annotations

SCENARIO = """
import gc, json, sys, weakref, lazypatch
from lazypatch.state import STATE

@lazypatch.when_imported("quiet_target", name="test.no_op")
def no_op(module):
    "Changes nothing."

@lazypatch.when_imported("busy_target", name="test.changes")
def changes(module, patch):
    "Changes a value."
    patch.setattr(module, "VALUE", 2)

def facts(name, module):
    patch = STATE.catalog.by_name[name]
    record = [record for record in lazypatch.report() if record["name"] == name][0]
    return {"status": record["status"], "applications": record["applications"],
            "live": len(patch.live), "applied_to": patch.is_applied_to(module)}

__import__("quiet_target"), __import__("busy_target")   # no name bound here
result = {}
for target, name in (("quiet_target", "test.no_op"), ("busy_target", "test.changes")):
    first = sys.modules[target]
    result[name] = {"first": facts(name, first)}
    first_reference = weakref.ref(first)
    del sys.modules[target], first
    gc.collect()
    result[name]["first_freed"] = first_reference() is None
    second = __import__(target)
    result[name]["second"] = facts(name, second)
    result[name]["second_value"] = second.VALUE
    importlib = __import__("importlib")
    importlib.reload(second)
    result[name]["reloaded"] = facts(name, second)
    lazypatch.unpatch(name)
    result[name]["undone"] = facts(name, second)
    result[name]["undone_value"] = second.VALUE
    lazypatch.enable(name)
    result[name]["enabled_again"] = facts(name, second)
print(json.dumps(result))
"""


def test_a_record_holds_the_module_only_while_it_has_something_to_undo(interpreter):
    interpreter.write({"quiet_target.py": "VALUE = 1\n", "busy_target.py": "VALUE = 1\n"})
    result = interpreter.run_json(SCENARIO)
    applied_once = {"status": "applied", "applications": 1, "live": 1, "applied_to": True}
    applied_twice = {"status": "applied", "applications": 2, "live": 2, "applied_to": True}
    for name in ("test.no_op", "test.changes"):
        assert result[name]["first"] == applied_once, name
        assert result[name]["second"] == applied_twice, name
        # A reload takes back the application on that module object and re-applies it.
        assert result[name]["reloaded"] == {**applied_twice, "applications": 3}, name
        assert result[name]["undone"] == {"status": "reverted", "applications": 3, "live": 0,
                                          "applied_to": False}, name
        assert result[name]["undone_value"] == 1, name
        assert result[name]["enabled_again"] == {**applied_once, "applications": 4}, name
    # The no-op's record let the first module go; the change's keeps it for its undo.
    assert result["test.no_op"]["first_freed"] is True
    assert result["test.changes"]["first_freed"] is False
    assert result["test.no_op"]["second_value"] == 1
    assert result["test.changes"]["second_value"] == 2

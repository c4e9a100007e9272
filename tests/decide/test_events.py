"""Per-event actions: what applying, skipping and failing do, per patch, per pack, globally.

Every action (silent, log, warn, raise, exit) of every event (apply, skip,
failure) is exercised in a fresh interpreter on real modules written to
disk, from each source (the patch's ``events=``, a selector rule, the
global setting, ``LAZYPATCH_ON_*`` and TOML, strict mode), and bad values
are refused early.
"""

from __future__ import annotations

import pytest

MODULES = {f"target_{letter}.py": "VALUE = 'original'\n" for letter in "abcdefgh"}

# Captures warnings and 'lazypatch' log records, then prints one JSON line.
HARNESS = """
import json, logging, warnings, lazypatch
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append([record.levelname, record.getMessage()])
logging.getLogger("lazypatch").addHandler(Keep())
logging.getLogger("lazypatch").setLevel(logging.DEBUG)
logging.getLogger("lazypatch").propagate = False
caught = []
warnings.showwarning = lambda message, category, *rest: caught.append(
    [category.__name__, str(message)])
warnings.simplefilter("always")

def attempt(module):
    try:
        __import__(module)
        return "imported"
    except lazypatch.PatchError as error:
        return "PatchError: " + str(error)[:60]

def status(name):
    return [r.status for r in lazypatch.report() if r.name == name][0]

def fail(module, patch):
    patch.setattr(module, "VALUE", "half done")
    raise RuntimeError("boom")

def change(module, patch):
    patch.setattr(module, "VALUE", "patched")

def skip(module, patch):
    patch.skip("not on this machine")
"""


def test_each_action_of_each_event_set_per_patch(interpreter):
    interpreter.write(MODULES)
    result = interpreter.run_json(HARNESS + """
lazypatch.register(fail, "target_a", name="fail-raise", events={"failure": "raise"})
lazypatch.register(fail, "target_b", name="fail-silent", events={"failure": "silent"})
lazypatch.register(fail, "target_c", name="fail-log", events={"failure": "log"})
lazypatch.register(skip, "target_d", name="skip-warn", events={"skip": "warn"})
lazypatch.register(skip, "target_e", name="skip-raise", events={"skip": "raise"})
lazypatch.register(change, "target_f", name="apply-log", events={"apply": "log:warning"})
lazypatch.register(change, "target_g", name="apply-warn", events={"apply": "warn"})
lazypatch.register(change, "target_h", name="apply-raise", events={"APPLY": "Raise"})
outcome = {letter: attempt("target_" + letter) for letter in "abcdefgh"}
import sys
print(json.dumps({"outcome": outcome, "records": records, "caught": caught,
                  "statuses": {r.name: r.status for r in lazypatch.report()},
                  "h_in_modules": "target_h" in sys.modules,
                  "b_value": sys.modules["target_b"].VALUE}))
""")
    outcome = result["outcome"]
    assert outcome["a"].startswith("PatchError: lazypatch: patch 'fail-raise'")
    assert outcome["e"].startswith("PatchError: lazypatch: patch 'skip-raise'")
    assert outcome["h"].startswith("PatchError: lazypatch: patch 'apply-raise' applied")
    assert [outcome[letter] for letter in "bcdfg"] == ["imported"] * 5
    assert result["b_value"] == "original"                  # silent, and rolled back
    assert result["h_in_modules"] is False                  # the import failed
    assert result["statuses"]["apply-raise"] == "reverted"  # nothing of it stays
    levels = {message.split("'")[1]: level for level, message in result["records"]
              if message.startswith("lazypatch: patch")}
    assert levels == {"fail-log": "ERROR", "apply-log": "WARNING"}
    categories = {message.split("'")[1]: category for category, message in result["caught"]}
    assert categories == {"skip-warn": "PatchSkippedWarning", "apply-warn": "PatchAppliedWarning"}


def test_exit_stops_the_program_with_the_message_after_undoing(interpreter):
    interpreter.write(MODULES)
    result = interpreter.run(HARNESS + """
import atexit, sys
atexit.register(lambda: print("value at exit:", getattr(sys.modules.get("target_a"), "VALUE",
                                                         "not imported")))
lazypatch.register(fail, "target_a", name="fail-exit", events={"failure": "exit"})
import target_a
print("not reached")
""", check=False)
    assert result.returncode == 1
    assert "lazypatch: patch 'fail-exit' on 'target_a' failed" in result.stderr
    assert "The program exits" in result.stderr
    assert "not reached" not in result.stdout
    assert "value at exit: not imported" in result.stdout


def test_pack_rules_global_rules_and_their_order(interpreter):
    interpreter.write(MODULES)
    result = interpreter.run_json(HARNESS + """
lazypatch.register(fail, "target_a", name="optional.one", tags=["optional"])
lazypatch.register(fail, "target_b", name="optional.two", tags=["optional"],
                   events={"failure": "log"})
lazypatch.register(fail, "target_c", name="core.one")
lazypatch.register(skip, "target_d", name="core.skip")
lazypatch.set_event_action("failure", "raise")                      # global
lazypatch.set_event_action("failure", "silent", selector="tag:optional")  # a pack, by tag
lazypatch.set_event_action("skip", "log:info", selector="core")     # a pack, by prefix
actions = {name: lazypatch.event_actions(name)
           for name in ("optional.one", "optional.two", "core.one", "core.skip")}
outcome = {letter: attempt("target_" + letter)[:10] for letter in "abcd"}
lazypatch.clear_event_actions("tag:optional")
lazypatch.clear_event_actions()
after_clear = lazypatch.event_actions("optional.one")
print(json.dumps({"actions": actions, "outcome": outcome, "records": records,
                  "caught": caught, "after_clear": after_clear}))
""")
    actions = result["actions"]
    assert actions["optional.one"]["failure"] == "silent"   # pack rule beats the global one
    assert actions["optional.two"]["failure"] == "log"      # the patch's own beats the pack's
    assert actions["core.one"]["failure"] == "raise"        # global
    assert actions["core.skip"] == {"apply": "silent", "skip": "log:info", "failure": "raise"}
    assert result["outcome"] == {"a": "imported", "b": "imported", "c": "PatchError",
                                 "d": "imported"}
    logged = [message for _, message in result["records"] if message.startswith("lazypatch: ")]
    assert any("'optional.two'" in message for message in logged)
    assert any("'core.skip'" in message and "skipped" in message for message in logged)
    assert result["caught"] == []
    assert result["after_clear"] == {"apply": "silent", "skip": "silent", "failure": "warn"}


def test_configuration_sets_actions_from_the_environment_and_toml(interpreter):
    interpreter.write({**MODULES, "settings.toml": """
        [lazypatch]
        on_skip = "warn"
        on_apply = ["silent", "tag:loud=log"]
    """})
    result = interpreter.run_json(HARNESS + """
lazypatch.register(fail, "target_a", name="plain")
lazypatch.register(fail, "target_b", name="optional.x", tags=["optional"])
lazypatch.register(skip, "target_c", name="skipper")
lazypatch.register(change, "target_d", name="loud-one", tags=["loud"])
outcome = {letter: attempt("target_" + letter)[:10] for letter in "abcd"}
print(json.dumps({"outcome": outcome, "caught": caught, "records": records}))
""", env={"LAZYPATCH_ON_FAILURE": "raise, tag:optional=silent",
          "LAZYPATCH_CONFIG": "settings.toml"})
    assert result["outcome"] == {"a": "PatchError", "b": "imported", "c": "imported",
                                 "d": "imported"}
    assert [category for category, _ in result["caught"]] == ["PatchSkippedWarning"]
    assert any("'loud-one' applied" in message for _, message in result["records"])


def test_strict_mode_is_the_global_failure_action_raise_and_a_patch_may_override_it(interpreter):
    interpreter.write(MODULES)
    result = interpreter.run_json(HARNESS + """
lazypatch.register(fail, "target_a", name="strict-default")
lazypatch.register(fail, "target_b", name="tolerant", events={"failure": "warn"})
lazypatch.register(fail, "target_c", name="after-strict-off")
first = {letter: attempt("target_" + letter)[:10] for letter in "ab"}
lazypatch.set_strict(False)
third = attempt("target_c")[:10]
print(json.dumps({"first": first, "third": third,
                  "caught": [category for category, _ in caught]}))
""", env={"LAZYPATCH_STRICT": "1"})
    assert result["first"] == {"a": "PatchError", "b": "imported"}
    assert result["third"] == "imported"
    assert result["caught"] == ["PatchFailedWarning", "PatchFailedWarning"]


def test_bad_configured_actions_warn_naming_the_variable_and_are_ignored(interpreter):
    interpreter.write({**MODULES, "settings.toml": "[lazypatch]\non_apply = \"silent\"\n"})
    result = interpreter.run_json("""
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import lazypatch.auto
    import lazypatch
    lazypatch.register(lambda module: 1 / 0, "target_a", name="p")
    import target_a
print(json.dumps({"warnings": [[w.category.__name__, str(w.message)] for w in caught],
                  "actions": lazypatch.event_actions("p")}))
""", env={"LAZYPATCH_ON_FAILURE": "explode,tag:x=raise", "LAZYPATCH_ON_SKIP": "=warn",
          "LAZYPATCH_CONFIG": "settings.toml"})
    messages = [message for category, message in result["warnings"]
                if category == "ConfigurationWarning"]
    assert any("LAZYPATCH_ON_FAILURE" in message and "'explode' is not an action" in message
               for message in messages)
    assert any("LAZYPATCH_ON_SKIP" in message and "no selector" in message
               for message in messages)
    assert not any("unknown environment variable" in message or "unknown key" in message
                   for message in messages)         # declared: env names and TOML keys
    assert len(messages) == 2                     # said once, not again at activation
    assert result["actions"] == {"apply": "silent", "skip": "silent", "failure": "warn"}


@pytest.mark.parametrize("call, message", [
    (lambda lazypatch: lazypatch.set_event_action("failure", "explode"), "not an action"),
    (lambda lazypatch: lazypatch.set_event_action("crash", "raise"), "not an event"),
    (lambda lazypatch: lazypatch.set_event_action("skip", "log:loud"), "not an action"),
    (lambda lazypatch: lazypatch.set_event_action("skip", "warn", selector=""), "selector"),
    (lambda lazypatch: lazypatch.register(lambda m: None, "x", events={"failure": "boom"}),
     "not an action"),
    (lambda lazypatch: lazypatch.register(lambda m: None, "x", events={"oops": "warn"}),
     "not an event"),
    (lambda lazypatch: lazypatch.register(lambda m: None, "x", events="raise"), "mapping"),
    (lambda lazypatch: lazypatch.replace("x.y", "a:b", events={"skip": 3}), "not an action"),
])
def test_bad_actions_in_code_raise_at_once_and_register_nothing(forget_new_patches, call, message):
    import lazypatch
    with pytest.raises((TypeError, ValueError), match=message):
        call(lazypatch)
    assert lazypatch.report() == []


def test_the_rules_live_in_the_one_state_made_only_when_an_action_is_set(interpreter):
    result = interpreter.run_json("""
import json, sys
import lazypatch.auto
import lazypatch
from lazypatch.state import STATE
before = {"loaded": "lazypatch.decide.events" in sys.modules, "rules": STATE.events is None}
lazypatch.set_event_action("failure", "log", selector="tag:x")
lazypatch.set_event_action("skip", "warn")
rules = STATE.events
from lazypatch.decide import events
kept = {"same": events.RULES is rules, "global": dict(rules.global_actions),
        "selectors": rules.selectors["failure"], "active": rules.active}
lazypatch.reset()
after = {"same": STATE.events is rules, "global": dict(rules.global_actions),
         "selectors": rules.selectors["failure"], "active": rules.active}
print(json.dumps({"before": before, "kept": kept, "after": after}))
""")
    assert result["before"] == {"loaded": False, "rules": True}   # activation paid nothing
    assert result["kept"] == {"same": True, "global": {"skip": "warn"},
                              "selectors": [["tag:x", "log"]], "active": True}
    assert result["after"] == {"same": True, "global": {}, "selectors": [], "active": False}

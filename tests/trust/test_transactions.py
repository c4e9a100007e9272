"""Every application is a transaction, and undo reaches every application.

Fault injection: a patch makes its changes one step at a time through ``patch`` and raises
after step k, for every k, with an ordinary exception, KeyboardInterrupt, SystemExit, or an
exception whose ``__str__``/``__repr__`` raise; in both phases; with and without strict
mode. Whatever the import applied must be undone when the exception leaves the import,
and only the failing patch is undone when it is isolated. Each scenario runs in a fresh
interpreter on real modules written to disk.
"""

from __future__ import annotations

import pytest

OWNER = """
VALUE = "original value"
DOOMED = "doomed"
TABLE = {"key": "original item"}


def function():
    return "original function"
"""

TARGET = """
BODY_RAN = True
"""

# A patch that makes STEPS changes and raises after the k-th; an earlier patch of the
# same phase and import, and a bystander that runs after both.
INJECTION = """
import sys, warnings
import lazypatch, trust_owner
from trust_helpers import emit, live_changes, plain, record

KIND, RAISE_AFTER, PHASE, MODE = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]


class BrokenText(Exception):
    def __str__(self):
        raise RuntimeError("__str__ is broken")
    __repr__ = __str__


class BrokenTextInterrupt(KeyboardInterrupt):
    def __str__(self):
        raise RuntimeError("__str__ is broken")
    __repr__ = __str__


ERRORS = {"exception": lambda: RuntimeError("injected failure"),
          "keyboard_interrupt": KeyboardInterrupt,
          "system_exit": lambda: SystemExit(3),
          "broken_text": BrokenText,
          "broken_text_interrupt": BrokenTextInterrupt}
SEEN = []
STEPS = [
    lambda module, patch: patch.setattr(module, "TOUCHED", "patched"),
    lambda module, patch: patch.setattr(trust_owner, "VALUE", "patched value"),
    lambda module, patch: patch.delattr(trust_owner, "DOOMED"),
    lambda module, patch: patch.setitem(trust_owner.TABLE, "key", "patched item"),
    lambda module, patch: patch.wrap(trust_owner, "function", lambda w, i, a, k: "wrapped"),
    lambda module, patch: patch.setattr(trust_owner, "ADDED", "added"),
]
register = lazypatch.before_import if PHASE == "before" else lazypatch.when_imported


@register("trust_target", name="trust.earlier", priority=-10)
def earlier(module, patch):
    SEEN.append(module)
    patch.setattr(module, "EARLIER", "earlier")


@register("trust_target", name="trust.failing", priority=0)
def failing(module, patch):
    SEEN.append(module)
    for step in STEPS[:RAISE_AFTER]:
        step(module, patch)
    raise ERRORS[KIND]()


@lazypatch.when_imported("trust_target", name="trust.bystander", priority=10)
def bystander(module, patch):
    patch.setattr(module, "BYSTANDER", "bystander")


if MODE == "strict":
    lazypatch.set_strict()
owner_before = {key: id(value) for key, value in plain(trust_owner).items()}
keep_alive = dict(plain(trust_owner)), dict(trust_owner.TABLE)
raised, exit_code = None, None
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        import trust_target
    except BaseException as error:
        raised = type(error).__name__
        exit_code = getattr(error, "code", None)
owner_after = {key: id(value) for key, value in plain(trust_owner).items()}
module = SEEN[0] if SEEN else None
flags = {f"trust_owner.{name}": lazypatch.is_patched(trust_owner, name)
         for name in ("VALUE", "DOOMED", "function", "ADDED")}
if module is not None:
    flags.update({f"target.{name}": lazypatch.is_patched(module, name)
                  for name in ("TOUCHED", "EARLIER", "BYSTANDER")})
failing_record = record("trust.failing")
emit({
    "raised": raised, "exit_code": exit_code,
    "statuses": {name: record(name)["status"]
                 for name in ("trust.earlier", "trust.failing", "trust.bystander")},
    "owner_changed": sorted(key for key in set(owner_before) | set(owner_after)
                            if owner_before.get(key) != owner_after.get(key)),
    "table": dict(trust_owner.TABLE),
    "function": trust_owner.function(),
    "patched_flags": flags,
    "target_names": sorted(name for name in plain(module) if name != "BODY_RAN") if module else [],
    "target_in_sys_modules": "trust_target" in sys.modules,
    "live": [name for name, _ in live_changes()],
    "warnings": [warning.category.__name__ for warning in caught],
    "failing_text": str(failing_record["reason"]) + str(failing_record["error"]),
})
"""

ISOLATED = ["exception", "broken_text"]
PROPAGATED = {"keyboard_interrupt": "KeyboardInterrupt", "system_exit": "SystemExit",
              "broken_text_interrupt": "BrokenTextInterrupt"}
STEP_COUNT = 6


def run_injection(trust_interpreter, kind: str, raise_after: int, phase: str, mode: str) -> dict:
    trust_interpreter.write({"trust_owner.py": OWNER, "trust_target.py": TARGET})
    return trust_interpreter.run_json(INJECTION, args=[kind, str(raise_after), phase, mode])


def assert_owner_restored(result: dict) -> None:
    assert result["owner_changed"] == [], \
        f"trust_owner globals still changed after the failure: {result['owner_changed']}"
    assert result["table"] == {"key": "original item"}, "the setitem change was not undone"
    assert result["function"] == "original function", "the wrap change was not undone"
    still = [name for name, flag in result["patched_flags"].items()
             if flag and not name.endswith(("EARLIER", "BYSTANDER"))]
    assert still == [], f"is_patched() is still True for {still} after the failing patch"


@pytest.mark.parametrize("phase", ["after", "before"])
@pytest.mark.parametrize("raise_after", range(STEP_COUNT + 1))
@pytest.mark.parametrize("kind", ISOLATED)
def test_an_ordinary_exception_after_any_step_is_rolled_back_isolated_and_reported(
        trust_interpreter, kind, raise_after, phase):
    result = run_injection(trust_interpreter, kind, raise_after, phase, "lenient")
    assert result["raised"] is None, \
        f"an ordinary exception in a patch must not fail the import; it raised {result['raised']}"
    assert_owner_restored(result)
    assert "TOUCHED" not in result["target_names"], "the change to the target module was not undone"
    assert result["statuses"] == {"trust.earlier": "applied", "trust.failing": "failed",
                                  "trust.bystander": "applied"}, \
        "only the failing patch may be affected; the others still apply"
    assert "trust.failing" not in result["live"], "the report still shows a live change of the failed patch"
    assert "PatchFailedWarning" in result["warnings"], "no PatchFailedWarning for the failed patch"
    expected_name = "BrokenText" if kind == "broken_text" else "RuntimeError"
    assert expected_name in result["failing_text"], \
        f"the report does not name the exception type {expected_name}: {result['failing_text']!r}"


@pytest.mark.parametrize("phase", ["after", "before"])
@pytest.mark.parametrize("raise_after", range(STEP_COUNT + 1))
@pytest.mark.parametrize("kind", sorted(PROPAGATED))
def test_keyboard_interrupt_and_system_exit_after_any_step_undo_the_whole_import_and_propagate(
        trust_interpreter, kind, raise_after, phase):
    result = run_injection(trust_interpreter, kind, raise_after, phase, "lenient")
    assert result["raised"] == PROPAGATED[kind], \
        f"{PROPAGATED[kind]} raised in a patch must leave the import; got {result['raised']}"
    if kind == "system_exit":
        assert result["exit_code"] == 3, "SystemExit lost its code on the way out"
    assert_owner_restored(result)
    assert result["target_names"] == [], \
        f"changes to the target module survived the aborted import: {result['target_names']}"
    applied = [name for name, status in result["statuses"].items() if status == "applied"]
    assert applied == [], f"the import was aborted but the report says {applied} applied"
    assert result["live"] == [], f"the report still shows live changes of {result['live']}"
    flagged = [name for name, flag in result["patched_flags"].items() if flag]
    assert flagged == [], f"is_patched() is still True for {flagged}"
    assert not result["target_in_sys_modules"], \
        "an import that raised must leave no module in sys.modules (as a raising body would)"


@pytest.mark.parametrize("phase", ["after", "before"])
@pytest.mark.parametrize("raise_after", range(STEP_COUNT + 1))
@pytest.mark.parametrize("kind", ["exception", "broken_text", "keyboard_interrupt"])
def test_strict_failure_after_any_step_undoes_every_patch_of_that_import(trust_interpreter, kind,
                                                                         raise_after, phase):
    result = run_injection(trust_interpreter, kind, raise_after, phase, "strict")
    expected = "KeyboardInterrupt" if kind == "keyboard_interrupt" else "PatchError"
    assert result["raised"] == expected, f"strict mode: expected {expected} from the import, " \
                                         f"got {result['raised']}"
    assert_owner_restored(result)
    assert result["target_names"] == [], \
        f"patches of the failed strict import are still applied: {result['target_names']}"
    applied = [name for name, status in result["statuses"].items() if status == "applied"]
    assert applied == [], f"the strict import failed but the report says {applied} applied"
    assert result["live"] == [], f"the report still shows live changes of {result['live']}"
    flagged = [name for name, flag in result["patched_flags"].items() if flag]
    assert flagged == [], f"is_patched() is still True for {flagged}"


BODY_FAILS = """
import sys
import lazypatch, trust_owner
from trust_helpers import emit, live_changes, plain, record

SEEN = []


@lazypatch.before_import("trust_failing_body", name="trust.first")
def first(module, patch):
    SEEN.append(module)
    patch.setattr(trust_owner, "VALUE", "first")
    patch.setattr(module, "PRESENTED", "first")


@lazypatch.before_import("trust_failing_body", name="trust.second", priority=1)
def second(module, patch):
    patch.setitem(trust_owner.TABLE, "key", "second")
    patch.wrap(trust_owner, "function", lambda w, i, a, k: "wrapped")


raised = None
try:
    import trust_failing_body
except BaseException as error:
    raised = type(error).__name__
emit({"raised": raised, "value": trust_owner.VALUE, "table": trust_owner.TABLE,
      "function": trust_owner.function(),
      "presented": "PRESENTED" in vars(SEEN[0]),
      "flags": [lazypatch.is_patched(trust_owner, "VALUE"), lazypatch.is_patched(trust_owner, "function"),
                lazypatch.is_patched(SEEN[0], "PRESENTED")],
      "statuses": [record("trust.first")["status"], record("trust.second")["status"]],
      "live": [name for name, _ in live_changes()]})
"""


@pytest.mark.parametrize("error", ["ValueError('body failed')", "KeyboardInterrupt()", "SystemExit(2)"])
def test_an_exception_in_the_target_body_undoes_the_before_import_patches(trust_interpreter, error):
    trust_interpreter.write({"trust_owner.py": OWNER,
                             "trust_failing_body.py": f"STARTED = True\nraise {error}\n"})
    result = trust_interpreter.run_json(BODY_FAILS)
    assert result["raised"] == error.split("(")[0], "the body's exception must leave the import unchanged"
    assert result["value"] == "original value" and result["table"] == {"key": "original item"} \
        and result["function"] == "original function", "before_import changes survived the failed body"
    assert not result["presented"], "the before_import change to the failed module object survived"
    assert result["flags"] == [False, False, False], "is_patched() still True after the failed import"
    assert "applied" not in result["statuses"], f"report says applied: {result['statuses']}"
    assert result["live"] == [], f"the report still shows live changes of {result['live']}"


# --- undo reaches every application ---------------------------------------------

REIMPORT = """
import sys
import lazypatch
from trust_helpers import emit, live_changes, plain

CALLS = []


@lazypatch.when_imported("trust_reimported", name="trust.reimported")
def reimported(module, patch):
    CALLS.append(module)
    patch.setattr(module, "VALUE", "patched")
    patch.setattr(module, "ADDED", "added")


import trust_reimported
first = trust_reimported
del sys.modules["trust_reimported"]
import trust_reimported
second = trust_reimported
during = [first.VALUE, second.VALUE, first is second, len(CALLS)]
lazypatch.unpatch("trust.reimported")
emit({"during": during, "first": plain(first), "second": plain(second),
      "flags": [lazypatch.is_patched(first, "VALUE"), lazypatch.is_patched(second, "VALUE")],
      "live": [name for name, _ in live_changes()]})
"""


def test_unpatch_restores_every_module_object_the_patch_was_applied_to(trust_interpreter):
    trust_interpreter.write({"trust_reimported.py": "VALUE = 'original'\n"})
    result = trust_interpreter.run_json(REIMPORT)
    assert result["during"] == ["patched", "patched", False, 2]
    assert result["second"] == {"VALUE": "original"}, "the second module object was not restored"
    assert result["first"] == {"VALUE": "original"}, \
        "the first module object (imported before del sys.modules) was not restored by unpatch"
    assert result["flags"] == [False, False]
    assert result["live"] == []


DEFERRED_INTERRUPT = """
import sys
import lazypatch
from trust_helpers import emit, live_changes, status

try:
    import trust_self_registering
    raised = None
except BaseException as error:
    raised = type(error).__name__
module = sys.modules["trust_self_registering"]
emit({"raised": raised, "value": module.VALUE, "other": module.OTHER,
      "statuses": [status("trust.interrupting"), status("trust.setting")],
      "live": [name for name, _ in live_changes()]})
"""

SELF_REGISTERING = """
import lazypatch
VALUE = "original"
OTHER = "original"


def interrupting(module, patch):
    patch.setattr(module, "VALUE", "half")
    raise {error}


def setting(module, patch):
    patch.setattr(module, "OTHER", "patched")


# Registered while this body runs: both wait for its end, and run one after the other.
lazypatch.register(interrupting, __name__, name="trust.interrupting")
lazypatch.register(setting, __name__, name="trust.setting")
"""


@pytest.mark.parametrize("error", ["KeyboardInterrupt", "SystemExit"])
def test_an_interrupt_in_one_deferred_application_leaves_the_next_one_applied(trust_interpreter, error):
    """Patches registered while their target's body runs wait for its end and run in the
    thread that ends it; one raising an interrupt there is rolled back and propagates out
    of the import, and the patch deferred after it still applies."""
    trust_interpreter.write({"trust_self_registering.py": SELF_REGISTERING.format(error=error)})
    result = trust_interpreter.run_json(DEFERRED_INTERRUPT)
    assert result["raised"] == error
    assert result["value"] == "original", "the interrupted patch's change was not rolled back"
    assert result["other"] == "patched", "the patch deferred after the interrupted one never applied"
    assert result["statuses"][1] == "applied" and result["statuses"][0] != "applied"
    assert result["live"] == ["trust.setting"]


RELOAD = """
import builtins, importlib
import lazypatch
from trust_helpers import emit, live_changes, plain, record

CALLS = []


@lazypatch.when_imported("trust_reloaded", name="trust.reloaded")
def reloaded(module, patch):
    CALLS.append(module.VALUE)
    patch.setattr(module, "VALUE", ("patched", module.VALUE[1]))
    patch.setattr(module, "ADDED", "added")


import trust_reloaded
importlib.reload(trust_reloaded)
during = [trust_reloaded.VALUE, list(CALLS), record("trust.reloaded")["applications"]]
lazypatch.unpatch("trust.reloaded")
emit({"during": during, "after": plain(trust_reloaded),
      "flag": lazypatch.is_patched(trust_reloaded, "VALUE"), "live": [n for n, _ in live_changes()]})
"""

RELOADED_BODY = """
import builtins as _builtins
_builtins.trust_runs = getattr(_builtins, "trust_runs", 0) + 1
VALUE = ("original", _builtins.trust_runs)
del _builtins
"""


def test_reload_reapplies_once_and_unpatch_restores_the_reloaded_body_exactly(trust_interpreter):
    trust_interpreter.write({"trust_reloaded.py": RELOADED_BODY})
    result = trust_interpreter.run_json(RELOAD)
    assert result["during"] == [["patched", 2], [["original", 1], ["original", 2]], 2], \
        "reload must re-apply the patch exactly once, on the freshly executed body"
    assert result["after"] == {"VALUE": ["original", 2]}, \
        "undo after a reload must restore the reloaded body's values, nothing of the first run"
    assert result["flag"] is False and result["live"] == []


UNPATCH_ALL = """
import sys
import lazypatch, trust_owner
from trust_helpers import emit, live_changes, plain, record

FAILING = set(sys.argv[1].split(","))
POSITION = int(sys.argv[2])
NAMES = ["trust.oldest", "trust.middle", "trust.newest"]


def make(name, attribute):
    def patch_function(module, patch):
        changes = [lambda: patch.setattr(module, attribute, name),
                   lambda: patch.setattr(module, attribute + "_SECOND", name),
                   lambda: patch.setitem(module.TABLE, attribute, name)]
        for index, change in enumerate(changes):
            if name in FAILING and index == POSITION:
                patch.on_undo(lambda: (_ for _ in ()).throw(RuntimeError(f"undo hook of {name} broke")))
            change()
        if name in FAILING and POSITION == len(changes):
            patch.on_undo(lambda: (_ for _ in ()).throw(RuntimeError(f"undo hook of {name} broke")))
    return patch_function


for index, name in enumerate(NAMES):
    lazypatch.register(make(name, f"ATTRIBUTE_{index}"), "trust_owner", name=name)
before = plain(trust_owner)
error = None
try:
    lazypatch.unpatch_all()
except Exception as caught:
    error = caught
leftover = sorted(set(plain(trust_owner)) - {"VALUE", "DOOMED", "TABLE", "function"})
emit({"error_type": type(error).__name__ if error else None,
      "error_is_runtime_or_lazypatch": error is not None and (
          isinstance(error, RuntimeError) or type(error).__module__.startswith("lazypatch")),
      "error_text": str(error) if error else "",
      "leftover": leftover, "table": dict(trust_owner.TABLE),
      "flags": {name: lazypatch.is_patched(trust_owner, name) for name in before},
      "statuses": {name: record(name)["status"] for name in NAMES},
      "live": [name for name, _ in live_changes()]})
"""


@pytest.mark.parametrize("position", range(4))
@pytest.mark.parametrize("failing", ["trust.newest", "trust.middle", "trust.oldest",
                                     "trust.oldest,trust.newest"])
def test_unpatch_all_undoes_everything_it_can_and_raises_once_naming_each_failed_undo(
        trust_interpreter, failing, position):
    trust_interpreter.write({"trust_owner.py": OWNER})
    result = trust_interpreter.run_json(UNPATCH_ALL, args=[failing, str(position)])
    assert result["error_type"] is not None, "unpatch_all() hid a failed undo"
    assert result["error_is_runtime_or_lazypatch"], \
        f"unpatch_all() should raise RuntimeError or a lazypatch error, got {result['error_type']}"
    for name in failing.split(","):
        assert name in result["error_text"], f"the error does not name {name}: {result['error_text']!r}"
    assert result["leftover"] == [], f"unpatch_all() stopped early; still patched: {result['leftover']}"
    assert result["table"] == {"key": "original item"}, "setitem changes were left in place"
    assert [name for name, flag in result["flags"].items() if flag] == []
    assert result["live"] == [], f"the report still shows live changes of {result['live']}"
    assert "applied" not in result["statuses"].values(), f"statuses after unpatch_all: {result['statuses']}"


UNPATCH_ONE = """
import sys
import lazypatch, trust_owner
from trust_helpers import emit, live_changes, plain, record

POSITION = int(sys.argv[1])


@lazypatch.when_imported("trust_owner", name="trust.undo_breaks")
def undo_breaks(module, patch):
    steps = [lambda: patch.setattr(module, "VALUE", "patched"),
             lambda: patch.delattr(module, "DOOMED"),
             lambda: patch.setitem(module.TABLE, "key", "patched"),
             lambda: patch.setattr(module, "ADDED", "added")]
    for index, step in enumerate(steps + [None]):
        if index == POSITION:
            patch.on_undo(lambda: (_ for _ in ()).throw(RuntimeError("undo hook broke")))
        if step is not None:
            step()


error = ""
try:
    lazypatch.unpatch("trust.undo_breaks")
except Exception as caught:
    error = f"{type(caught).__name__}: {caught}"
item = record("trust.undo_breaks")
emit({"error": error, "state": {key: value for key, value in plain(trust_owner).items() if key != "function"},
      "status": item["status"], "text": " ".join([item["reason"], item["error"]] + item["history"]),
      "live": [name for name, _ in live_changes()]})
"""


@pytest.mark.parametrize("position", range(5))
def test_a_failing_undo_step_at_any_position_still_undoes_every_other_change(trust_interpreter, position):
    trust_interpreter.write({"trust_owner.py": OWNER})
    result = trust_interpreter.run_json(UNPATCH_ONE, args=[str(position)])
    assert result["state"] == {"VALUE": "original value", "DOOMED": "doomed",
                               "TABLE": {"key": "original item"}}, \
        "a failing undo step stopped the rest of the undo"
    assert "undo hook broke" in result["error"] + result["text"], \
        "the failed undo step is neither raised nor reported"
    assert result["status"] != "applied", "the report still says applied after unpatch()"
    assert result["live"] == [], f"the report still shows live changes of {result['live']}"

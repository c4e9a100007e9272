"""Threads: registration, import, unpatch and scopes in any interleaving lose nothing, leave
nothing live after it was undone, and never deadlock.

Every scenario runs in a fresh interpreter with real modules on disk. Interleavings that
matter are forced with events where they can be (a patch waiting inside its function while
another thread unpatches it); the rest are stressed with a tiny thread switch interval.
Every thread is joined with a timeout, and a thread still running is reported as a deadlock.
"""

from __future__ import annotations

import itertools

import pytest

STORM = """
import importlib, random, sys, threading
import lazypatch
from trust_helpers import emit, run_threads

sys.setswitchinterval(1e-6)
WHEN, ROUNDS, THREADS, PER_THREAD, TARGETS = sys.argv[1], 3, 8, 60, 4
lost, wrong, registered = [], [], 0


def make(index):
    def set_marker(module, patch):
        patch.setattr(module, f"p_{index}", index)
    return set_marker


for round_number in range(ROUNDS):
    targets = [f"trust_storm_{round_number}_{number}" for number in range(TARGETS)]
    if WHEN == "before":
        for target in targets:
            importlib.import_module(target)
    barrier = threading.Barrier(THREADS + (1 if WHEN == "during" else 0))
    names = []

    def register_many(thread_number):
        generator = random.Random(thread_number)
        barrier.wait()
        for local in range(PER_THREAD):
            index = thread_number * PER_THREAD + local
            name = f"trust.storm.{round_number}.{index}"
            lazypatch.register(make(index), targets[index % TARGETS], name=name,
                               priority=generator.randint(-3, 3))
            names.append((name, targets[index % TARGETS], index))

    def import_all():
        barrier.wait()
        for target in targets:
            importlib.import_module(target)

    workers = [lambda number=number: register_many(number) for number in range(THREADS)]
    if WHEN == "during":
        workers.append(import_all)
    errors = run_threads(workers)
    if WHEN == "after":
        for target in targets:
            importlib.import_module(target)
    registered += len(names)
    statuses = {item["name"]: item["status"] for item in lazypatch.report()}   # one report, not one per name
    for name, target, index in names:
        if statuses[name] != "applied":
            lost.append(f"{name}: {statuses[name]}")
        elif getattr(sys.modules[target], f"p_{index}", None) != index:
            wrong.append(name)
known = {item["name"] for item in lazypatch.report()}
emit({"errors": errors, "registered": registered, "in_report": len(known),
      "lost": lost[:20], "lost_count": len(lost), "wrong": wrong[:20]})
"""


@pytest.mark.parametrize("when", ["before", "during", "after"])
def test_registration_from_eight_threads_at_once_loses_no_patch(trust_interpreter, when):
    """Eight threads register 480 patches per round on four targets imported before,
    during or after the registrations; every one is applied, none twice, none lost."""
    trust_interpreter.write({f"trust_storm_{round_number}_{number}.py": "LOADED = True\n"
                             for round_number in range(3) for number in range(4)})
    result = trust_interpreter.run_json(STORM, args=[when])
    assert result["errors"] == [], f"registration raised in a thread: {result['errors'][:5]}"
    assert result["registered"] == 3 * 8 * 60
    assert result["in_report"] == result["registered"], \
        f"report() knows {result['in_report']} patches of {result['registered']} registered"
    assert result["lost_count"] == 0, \
        f"{result['lost_count']} patch(es) never applied although their target was imported: {result['lost']}"
    assert result["wrong"] == [], f"applied but their change is missing: {result['wrong']}"


UNPATCH_RACE = """
import importlib, random, sys, threading, time
import lazypatch
from trust_helpers import emit, live_changes, run_threads, status

sys.setswitchinterval(1e-6)
MODE, ROUNDS = sys.argv[1], int(sys.argv[2])
survivors, errors = [], []

for round_number in range(ROUNDS):
    target = f"trust_race_{round_number}"
    name = f"trust.race.{round_number}"
    inside, unpatch_called = threading.Event(), threading.Event()

    def patch_function(module, patch):
        patch.setattr(module, "VALUE", "patched")
        patch.setattr(module, "ADDED", "added")
        if MODE == "inside":
            inside.set()
            unpatch_called.wait(2)
            time.sleep(0.002)       # let unpatch() run while this patch is still applying

    lazypatch.register(patch_function, target, name=name)
    generator = random.Random(round_number)

    def importer():
        importlib.import_module(target)

    def unpatcher():
        if MODE == "inside":
            inside.wait(2)
        else:
            time.sleep(generator.random() * 0.002)
        unpatch_called.set()
        lazypatch.unpatch(name)

    errors += run_threads([importer, unpatcher])
    module = sys.modules[target]
    if module.VALUE != "original" or hasattr(module, "ADDED") or lazypatch.is_patched(module, "VALUE") \
            or status(name) == "applied":
        survivors.append(f"{name}: VALUE={module.VALUE!r} status={status(name)}")
emit({"errors": errors, "survivors": survivors, "live": [name for name, _ in live_changes()]})
"""


@pytest.mark.parametrize("mode, rounds", [("inside", 20), ("random", 300)])
def test_unpatch_racing_with_the_import_that_applies_the_patch_leaves_the_original(
        trust_interpreter, mode, rounds):
    """``inside``: unpatch() is called while the patch function is running; ``random``: at a
    random moment around the import. After both finished, nothing of the patch is live."""
    trust_interpreter.write({f"trust_race_{number}.py": "VALUE = 'original'\n" for number in range(rounds)})
    result = trust_interpreter.run_json(UNPATCH_RACE, args=[mode, str(rounds)])
    assert result["errors"] == [], f"a thread raised: {result['errors'][:5]}"
    assert result["survivors"] == [], \
        f"the patch is still live after unpatch() returned and the import finished: {result['survivors']}"
    assert result["live"] == [], f"the report still shows live changes of {result['live']}"


UNPATCH_DURING_BODY = """
import sys, threading
import lazypatch, trust_signals
from trust_helpers import emit, live_changes, run_threads, status


@lazypatch.when_imported("trust_slow_body", name="trust.slow")
def slow(module, patch):
    patch.setattr(module, "VALUE", "patched")


def importer():
    import trust_slow_body


def unpatcher():
    trust_signals.body_started.wait(5)
    lazypatch.unpatch("trust.slow")
    trust_signals.unpatched.set()


errors = run_threads([importer, unpatcher])
module = sys.modules["trust_slow_body"]
emit({"errors": errors, "value": module.VALUE, "status": status("trust.slow"),
      "live": [name for name, _ in live_changes()]})
"""

SIGNALS = """
import threading

body_started = threading.Event()
unpatched = threading.Event()
other_done = threading.Event()
seen = []
"""


def test_unpatch_while_the_target_body_runs_keeps_the_patch_from_applying(trust_interpreter):
    trust_interpreter.write({
        "trust_signals.py": SIGNALS,
        "trust_slow_body.py": "import trust_signals\nVALUE = 'original'\n"
                              "trust_signals.body_started.set()\ntrust_signals.unpatched.wait(5)\n",
    })
    result = trust_interpreter.run_json(UNPATCH_DURING_BODY)
    assert result["errors"] == []
    assert result["value"] == "original", "the patch applied after unpatch() had returned"
    assert result["status"] != "applied" and result["live"] == []


RELOAD_DURING_IMPORT = """
import importlib, sys, threading, time
import lazypatch, trust_signals
from trust_helpers import apply_now, emit, live_changes, run_threads, status

HOW = sys.argv[1]


def set_b(module, patch):
    patch.setattr(module, "b", "patched")


# Watched from the start (in "register", by another patch): a reload whose spec was found
# before the module was watched runs its body with the plain loader, and nothing of
# lazypatch runs with it.
lazypatch.register(set_b, "trust_mid_body", name="trust.mid" if HOW != "register" else "trust.other",
                   enabled=False)


def importer():
    import trust_mid_body


def reloader():
    trust_signals.body_started.wait(5)
    # importlib.reload gives the module a new __spec__ before it waits for the module's
    # lock, which the import above holds until its body has finished.
    importlib.reload(sys.modules["trust_mid_body"])


def registrar():
    trust_signals.body_started.wait(5)
    module, deadline = sys.modules["trust_mid_body"], time.monotonic() + 5
    while module.__spec__ is trust_signals.import_spec and time.monotonic() < deadline:
        time.sleep(0.001)
    apply_now(HOW, set_b, "trust_mid_body", "trust.mid")
    trust_signals.unpatched.set()     # the body may go on


errors = run_threads([importer, reloader, registrar])
module = sys.modules["trust_mid_body"]
during = {"a": module.a, "b": getattr(module, "b", None), "status": status("trust.mid"),
          "b before the body set it": trust_signals.seen}
lazypatch.unpatch_all()
emit({"errors": errors, "during": during, "after": {"a": module.a, "b": getattr(module, "b", None)},
      "live": [name for name, _ in live_changes()]})
"""


@pytest.mark.parametrize("how", ["register", "enable", "scope"])
def test_a_patch_applied_while_a_reload_waits_for_the_import_body_keeps_the_body_names(
        trust_interpreter, how):
    """A reload started while another thread's import runs the body replaces the module's
    ``__spec__`` (whose ``_initializing`` marked the body as running) before it waits for the
    import's lock. A patch registered, enabled or scoped in that window still waits for the
    body: applied to the half-built module, it would record ``b`` as absent, and its undo
    would delete the body's ``b``. The reload then takes the patch back before its body
    runs and applies it again after."""
    trust_interpreter.write({
        "trust_signals.py": SIGNALS,
        "trust_mid_body.py": "import trust_signals\na = 'original'\ntrust_signals.import_spec = __spec__\n"
                             "trust_signals.body_started.set()\n"
                             "trust_signals.unpatched.wait(5)\n"
                             "trust_signals.seen.append(globals().get('b'))\nb = 'original'\n",
    })
    result = trust_interpreter.run_json(RELOAD_DURING_IMPORT, args=[how])
    assert result["errors"] == []
    assert result["during"] == {"a": "original", "b": "patched", "status": "applied",
                                "b before the body set it": [None, "original"]}
    assert result["after"] == {"a": "original", "b": "original"}, "the undo took a name of the body"
    assert result["live"] == []


RELOAD_SIGNALS = """
import threading

applied = threading.Event()
body_set_x = threading.Event()
body_may_end = threading.Event()
reload_done = threading.Event()
mode = []
"""

# The reload's body waits, in "during the body", until the application has returned.
RELOADED_MODULE = """
import trust_reload_signals as signals
token = ['original']
x = token
if signals.mode == ['during the body'] and signals.applied.is_set():
    signals.body_set_x.set()
    signals.body_may_end.wait(5)
"""


# What both reload scenarios below report: the module while the patch is live, then after
# unpatch_all() (``token`` is the list the last execution of the body made).
AFTER_THE_RELOAD = """
during = {"x": trust_reloaded.x, "status": status("trust.late"),
          "flag": lazypatch.is_patched(trust_reloaded, "x")}
lazypatch.unpatch_all()
emit({"errors": errors, "during": during,
      "after": {"x": trust_reloaded.x, "the reload's own": trust_reloaded.x is trust_reloaded.token},
      "live": [name for name, _ in live_changes()]})
"""


def assert_applied_after_the_reload(trust_interpreter, scenario: str, args=()) -> None:
    """Run a reload scenario: the patch holds ``x`` while live, and its undo gives back the
    object the reload's body made."""
    trust_interpreter.write({
        "trust_reload_signals.py": RELOAD_SIGNALS,
        "trust_reloaded.py": RELOADED_MODULE,
    })
    result = trust_interpreter.run_json(scenario, args=list(args))
    assert result["errors"] == []
    assert result["during"] == {"x": "patched", "status": "applied", "flag": True}, \
        "the reload's body overwrote an application the report calls applied"
    assert result["after"] == {"x": ["original"], "the reload's own": True}
    assert result["live"] == []


LATE_APPLICATION_DURING_RELOAD = """
import importlib, sys
import lazypatch, trust_reload_signals as signals
from trust_helpers import apply_now, emit, live_changes, run_threads, status

HOW, WHEN = sys.argv[1], sys.argv[2]
signals.mode.append(WHEN)


def set_x(module, patch):
    patch.setattr(module, "x", "patched")
    signals.applied.set()     # the application is in flight: the reload starts
    (signals.reload_done if WHEN == "after the body" else signals.body_set_x).wait(5)


# Watched from the start (in "register", by another patch): a reload runs its body through
# lazypatch only if the module was watched when the reload found its spec.
lazypatch.register(set_x, "trust_reloaded", name="trust.late" if HOW != "register" else "trust.other",
                   enabled=False)
import trust_reloaded


def applier():
    apply_now(HOW, set_x, "trust_reloaded", "trust.late")
    signals.body_may_end.set()


def reloader():
    signals.applied.wait(5)
    importlib.reload(trust_reloaded)
    signals.reload_done.set()


errors = run_threads([applier, reloader])
""" + AFTER_THE_RELOAD

@pytest.mark.parametrize("when", ["after the body", "during the body"])
@pytest.mark.parametrize("how", ["register", "enable", "scope"])
def test_a_late_application_in_flight_when_a_reload_starts_is_applied_again_after_it(
        trust_interpreter, how, when):
    """A patch registered, enabled or scoped on an imported module is applied at once, in
    the calling thread. A reload of that module started while the patch function runs
    misses the application (not recorded yet) when it takes the module's patches back,
    and its body then sets ``x`` again: the application is taken back and made again once
    the body has run (the reload ended before the application did, or it was still
    running its body), so the report's "applied" is what the module holds. Its undo then
    restores the reload's ``x``, not the object the earlier body made."""
    assert_applied_after_the_reload(trust_interpreter, LATE_APPLICATION_DURING_RELOAD, [how, when])


REGISTRATION_BETWEEN_A_RELOADS_SEARCH_AND_BODY = """
import importlib, sys
import lazypatch, trust_reload_signals as signals
from trust_helpers import emit, live_changes, run_threads, status

import trust_reloaded   # imported while nothing watches it


def set_x(module, patch):
    patch.setattr(module, "x", "patched")


# lazypatch in use (not activated: its finder comes with a first registration), but
# nothing watches trust_reloaded yet.
lazypatch.register(set_x, "trust_never_imported", name="trust.other")


class Answering:
    \"\"\"A finder put ahead of lazypatch's, as pytest's assertion rewriter is: it answers
    with the path finder's spec.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name != "trust_reloaded":
            return None
        return importlib.machinery.PathFinder.find_spec(name, path)


if sys.argv[1] == "ahead":
    sys.meta_path.insert(0, Answering())
    import colorsys   # (not activated: a finder put ahead is guarded by the next import)


def pause_before_the_body(frame, event, argument):
    # The reload has found its spec; the import system's _exec is about to run the body.
    if event == "call" and frame.f_code.co_name == "_exec" and "_bootstrap" in frame.f_code.co_filename:
        signals.body_set_x.set()
        signals.applied.wait(5)
    return None


def reloader():
    sys.settrace(pause_before_the_body)
    try:
        importlib.reload(trust_reloaded)
    finally:
        sys.settrace(None)


def registrar():
    signals.body_set_x.wait(5)
    lazypatch.register(set_x, "trust_reloaded", name="trust.late")
    signals.applied.set()


errors = run_threads([reloader, registrar])
""" + AFTER_THE_RELOAD


@pytest.mark.parametrize("where", ["ours", "ahead"])
def test_a_patch_registered_between_a_reloads_search_and_its_body_lands_after_the_body(
        trust_interpreter, where):
    """``importlib.reload`` finds the module's spec, then runs its body. A patch registered
    in between, on a module nothing watched when the search ran, is applied at once, and
    the body would overwrite it with the plain loader while the report says applied: a
    reload always runs its body through lazypatch (whether our finder or a finder ahead of
    it found the spec), which takes the patch back before the body and makes it again
    after."""
    assert_applied_after_the_reload(
        trust_interpreter, REGISTRATION_BETWEEN_A_RELOADS_SEARCH_AND_BODY, [where])


SCOPES_IN_ORDER = """
import sys, threading
import lazypatch, trust_scoped
from trust_helpers import emit, live_changes, run_threads, status

VARIANT, ORDER = sys.argv[1], sys.argv[2].split(",")   # ORDER: e.g. A+,B+,A-,B-
NAMES = {"A": "trust.scope_a", "B": "trust.scope_a" if VARIANT == "same" else "trust.scope_b"}


def setter(value):
    def set_value(module, patch):
        patch.setattr(module, "VALUE", value)
    return set_value


lazypatch.register(setter("a"), "trust_scoped", name="trust.scope_a", enabled=False)
lazypatch.register(setter("b"), "trust_scoped", name="trust.scope_b", enabled=False)
condition = threading.Condition()
turn = [0]


def advance(to):
    with condition:
        if turn[0] < to:
            turn[0] = to
            condition.notify_all()


def actor(label):
    scope = lazypatch.patched(NAMES[label])
    for index, step in enumerate(ORDER):
        if step[0] != label:
            continue
        with condition:
            condition.wait_for(lambda: turn[0] >= index, timeout=20)
        # If this step blocks (the engine may serialize scopes), let the other thread go
        # on after a moment instead of calling it a deadlock.
        timer = threading.Timer(0.5, advance, args=(index + 1,))
        timer.start()
        if step[1] == "+":
            scope.__enter__()
        else:
            scope.__exit__(None, None, None)
        timer.cancel()
        advance(index + 1)


errors = run_threads([lambda: actor("A"), lambda: actor("B")], timeout=30)
emit({"errors": errors, "original": trust_scoped.VALUE is trust_scoped.ORIGINAL,
      "value": repr(trust_scoped.VALUE), "flag": lazypatch.is_patched(trust_scoped, "VALUE"),
      "statuses": [status("trust.scope_a"), status("trust.scope_b")],
      "live": [name for name, _ in live_changes()]})
"""

SCOPED_MODULE = "ORIGINAL = object()\nVALUE = ORIGINAL\n"


def interleavings() -> list:
    """Every order of A-enter, A-exit, B-enter, B-exit with each thread entering before exiting."""
    orders = []
    for order in itertools.permutations(["A+", "A-", "B+", "B-"]):
        if order.index("A+") < order.index("A-") and order.index("B+") < order.index("B-"):
            orders.append(",".join(order))
    return orders


@pytest.mark.parametrize("order", interleavings())
@pytest.mark.parametrize("variant", ["same", "different"])
def test_two_threads_with_overlapping_scopes_on_one_attribute_restore_the_original(
        trust_interpreter, variant, order):
    """``same``: both threads scope the same patch; ``different``: two patches that set the
    same attribute. Whatever the order of enters and exits, the original object is back."""
    trust_interpreter.write({"trust_scoped.py": SCOPED_MODULE})
    result = trust_interpreter.run_json(SCOPES_IN_ORDER, args=[variant, order])
    assert result["errors"] == [], f"a scope raised in a thread: {result['errors']}"
    assert result["original"], f"after both scopes ended VALUE is {result['value']}, not the original object"
    assert result["flag"] is False, "is_patched() still True after both scopes ended"
    assert "applied" not in result["statuses"], f"statuses after both scopes: {result['statuses']}"
    assert result["live"] == [], f"the report still shows live changes of {result['live']}"


SCOPES_STRESS = """
import random, sys
import lazypatch, trust_scoped
from trust_helpers import emit, live_changes, run_threads, status

sys.setswitchinterval(1e-6)
VARIANT = sys.argv[1]


def setter(value):
    def set_value(module, patch):
        patch.setattr(module, "VALUE", value)
    return set_value


for label in "abcd":
    lazypatch.register(setter(label), "trust_scoped", name=f"trust.scope_{label}", enabled=False)


def worker(seed):
    generator = random.Random(seed)
    for _ in range(300):
        label = "a" if VARIANT == "same" else "abcd"[seed]
        with lazypatch.patched(f"trust.scope_{label}"):
            if generator.random() < 0.3:
                lazypatch.report()


errors = run_threads([lambda seed=seed: worker(seed) for seed in range(4)], timeout=120)
emit({"errors": errors[:5], "original": trust_scoped.VALUE is trust_scoped.ORIGINAL,
      "value": repr(trust_scoped.VALUE), "flag": lazypatch.is_patched(trust_scoped, "VALUE"),
      "statuses": [status(f"trust.scope_{label}") for label in "abcd"],
      "live": [name for name, _ in live_changes()]})
"""


@pytest.mark.parametrize("variant", ["same", "different"])
def test_four_threads_looping_over_scopes_on_one_attribute_restore_the_original(trust_interpreter, variant):
    trust_interpreter.write({"trust_scoped.py": SCOPED_MODULE})
    result = trust_interpreter.run_json(SCOPES_STRESS, args=[variant], timeout=240)
    assert result["errors"] == [], f"a scope raised in a thread: {result['errors']}"
    assert result["original"], f"after every scope ended VALUE is {result['value']}, not the original object"
    assert result["flag"] is False, "is_patched() still True after every scope ended"
    assert "applied" not in result["statuses"], f"statuses after every scope: {result['statuses']}"
    assert result["live"] == [], f"the report still shows live changes of {result['live']}"


REENTRY = """
import lazypatch, trust_scoped
from trust_helpers import emit, status

lazypatch.register(lambda module, patch: patch.setattr(module, "VALUE", "patched"),
                   "trust_scoped", name="trust.scope", enabled=False)
scope = lazypatch.patched("trust.scope")
outcome, inner_error = "nested", None
with scope:
    in_outer = trust_scoped.VALUE
    try:
        with scope:
            in_inner = trust_scoped.VALUE
    except RuntimeError as error:
        outcome, inner_error, in_inner = "refused", str(error), None
    after_inner = trust_scoped.VALUE
    status_after_inner = status("trust.scope")
emit({"outcome": outcome, "inner_error": inner_error, "in_outer": in_outer, "in_inner": in_inner,
      "after_inner": after_inner, "status_after_inner": status_after_inner,
      "after_outer_is_original": trust_scoped.VALUE is trust_scoped.ORIGINAL,
      "flag": lazypatch.is_patched(trust_scoped, "VALUE")})
"""


def test_reentering_one_patched_object_nests_or_refuses_but_never_ends_the_outer_scope(trust_interpreter):
    trust_interpreter.write({"trust_scoped.py": SCOPED_MODULE})
    result = trust_interpreter.run_json(REENTRY)
    assert result["in_outer"] == "patched"
    if result["outcome"] == "nested":
        assert result["in_inner"] == "patched"
    assert result["after_inner"] == "patched", \
        f"leaving the inner use of the scope object ({result['outcome']}) ended the outer scope early"
    assert result["status_after_inner"] == "applied"
    assert result["after_outer_is_original"] and result["flag"] is False, \
        "the original is not back after the outer scope ended"


SCOPE_FAILS = """
import sys, warnings
import lazypatch, trust_scoped
from trust_helpers import emit, live_changes, status

KIND = sys.argv[1]


@lazypatch.when_imported("trust_scoped", name="trust.good", enabled=False, priority=0)
def good(module, patch):
    patch.setattr(module, "VALUE", "good")
    patch.setattr(module, "ADDED", "added")


@lazypatch.when_imported("trust_scoped", name="trust.bad", enabled=False, priority=1)
def bad(module, patch):
    patch.setattr(module, "OTHER", "bad")
    if KIND == "keyboard_interrupt":
        raise KeyboardInterrupt
    raise RuntimeError("bad patch")


if KIND == "strict":
    lazypatch.set_strict()
raised = None
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
        with lazypatch.patched("trust.good", "trust.bad"):
            raised = "entered"
    except BaseException as error:
        raised = type(error).__name__
names = sorted(name for name in vars(trust_scoped) if not name.startswith("__"))
emit({"raised": raised, "original": trust_scoped.VALUE is trust_scoped.ORIGINAL, "names": names,
      "flags": [lazypatch.is_patched(trust_scoped, name) for name in ("VALUE", "ADDED", "OTHER")],
      "statuses": [status("trust.good"), status("trust.bad")],
      "enabled": [item["enabled"] for item in lazypatch.report()],
      "live": [name for name, _ in live_changes()]})
"""


@pytest.mark.parametrize("kind, expected", [("strict", "PatchError"),
                                            ("keyboard_interrupt", "KeyboardInterrupt")])
def test_a_failure_while_entering_a_scope_leaves_none_of_the_scopes_changes(trust_interpreter, kind,
                                                                            expected):
    trust_interpreter.write({"trust_scoped.py": SCOPED_MODULE})
    result = trust_interpreter.run_json(SCOPE_FAILS, args=[kind])
    assert result["raised"] == expected, f"entering the scope should raise {expected}, got {result['raised']}"
    assert result["original"], "a patch applied by the failed scope entry is still applied"
    assert result["names"] == ["ORIGINAL", "VALUE"], \
        f"changes of the failed scope entry remain: {result['names']}"
    assert result["flags"] == [False, False, False]
    assert "applied" not in result["statuses"], f"statuses after the failed entry: {result['statuses']}"
    assert result["enabled"] == [False, False], "the failed scope left its patches enabled"
    assert result["live"] == []


SCOPE_EXIT_FAILS = """
import lazypatch, trust_scoped
from trust_helpers import emit, live_changes, status


@lazypatch.when_imported("trust_scoped", name="trust.undo_breaks", enabled=False)
def undo_breaks(module, patch):
    patch.setattr(module, "VALUE", "patched")
    patch.on_undo(lambda: (_ for _ in ()).throw(RuntimeError("undo hook broke")))
    patch.setattr(module, "ADDED", "added")


error = ""
try:
    with lazypatch.patched("trust.undo_breaks"):
        pass
except Exception as caught:
    error = f"{type(caught).__name__}: {caught}"
emit({"error": error, "original": trust_scoped.VALUE is trust_scoped.ORIGINAL,
      "added": hasattr(trust_scoped, "ADDED"), "status": status("trust.undo_breaks"),
      "live": [name for name, _ in live_changes()]})
"""


def test_a_failing_undo_while_leaving_a_scope_still_undoes_the_rest(trust_interpreter):
    trust_interpreter.write({"trust_scoped.py": SCOPED_MODULE})
    result = trust_interpreter.run_json(SCOPE_EXIT_FAILS)
    assert result["original"] and not result["added"], "leaving the scope left changes applied"
    assert result["status"] != "applied", "the report still says applied after the scope ended"
    assert result["live"] == []


NO_DEADLOCK = """
import importlib, sys, threading
import lazypatch, trust_signals
from trust_helpers import emit, run_threads, status

lazypatch.register(lambda module, patch: patch.setattr(module, "EARLY", True), "trust_waiting_body",
                   name="trust.waiting_before", phase="before")
lazypatch.register(lambda module, patch: patch.setattr(module, "LATE", True), "trust_waiting_body",
                   name="trust.waiting_after")
lazypatch.register(lambda module, patch: patch.setattr(module, "VALUE", "scoped"), "trust_scoped",
                   name="trust.other_scope", enabled=False)
import trust_scoped
done = []


def importer():
    import trust_waiting_body


def meanwhile():
    trust_signals.body_started.wait(10)
    lazypatch.register(lambda module: None, "trust_elsewhere", name="trust.registered_meanwhile")
    done.append("register")
    lazypatch.report()
    done.append("report")
    lazypatch.disable("trust.registered_meanwhile")
    lazypatch.enable("trust.registered_meanwhile")
    done.append("enable/disable")
    with lazypatch.patched("trust.other_scope"):
        pass
    done.append("scope")
    importlib.import_module("trust_elsewhere")
    done.append("import")
    lazypatch.unpatch("trust.registered_meanwhile")
    done.append("unpatch")
    trust_signals.other_done.set()


errors = run_threads([importer, meanwhile], timeout=60)
emit({"errors": errors, "done": done, "statuses": [status("trust.waiting_before"),
                                                   status("trust.waiting_after")]})
"""

WAITING_BODY = """
import trust_signals
trust_signals.body_started.set()
if not trust_signals.other_done.wait(20):
    raise AssertionError("deadlock: lazypatch calls from another thread blocked while this body ran")
"""


def test_no_lazypatch_call_blocks_while_a_watched_target_body_runs(trust_interpreter):
    trust_interpreter.write({"trust_signals.py": SIGNALS, "trust_waiting_body.py": WAITING_BODY,
                             "trust_scoped.py": SCOPED_MODULE, "trust_elsewhere.py": "X = 1\n"})
    result = trust_interpreter.run_json(NO_DEADLOCK, timeout=120)
    assert result["errors"] == [], f"a thread raised (a deadlock ends in the body's AssertionError): " \
                                   f"{result['errors']}"
    assert result["done"] == ["register", "report", "enable/disable", "scope", "import", "unpatch"]
    assert result["statuses"] == ["applied", "applied"]

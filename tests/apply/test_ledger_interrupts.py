"""A KeyboardInterrupt landing anywhere inside a patch that makes hundreds of changes
(a timer fires it at a different moment each round) never leaves a change behind:
whatever the moment, the module ends with every attribute as it was, and the patch is
not left "applied" with changes nobody can undo."""

from __future__ import annotations


def test_timer_driven_interrupts_inside_a_patch_leave_nothing_behind(interpreter):
    result = interpreter.run_json("""
import json, signal, sys, types
import lazypatch

ATTRIBUTES = 400

armed = []

def interrupt(signum, frame):
    if armed:              # only while the patch may be running
        armed.clear()
        raise KeyboardInterrupt

signal.signal(signal.SIGALRM, interrupt)
leftovers, interrupted, rounds = [], 0, 60
for round_number in range(rounds):
    name = f"interrupted_target_{round_number}"
    module = types.ModuleType(name)
    for index in range(ATTRIBUTES):
        setattr(module, f"a{index}", index)

    @lazypatch.when_imported(name, name=f"interrupts.{round_number}")
    def many_changes(target, patch):
        for index in range(ATTRIBUTES):
            patch.setattr(target, f"a{index}", -index)

    # A delay between 0 and about 2 ms: the interrupt lands in a different place each round.
    sys.modules[name] = module
    try:
        armed.append(True)
        signal.setitimer(signal.ITIMER_REAL, 0.00003 * (round_number + 1))
        lazypatch.notify_module_loaded(module)
        armed.clear()
    except KeyboardInterrupt:
        interrupted += 1
    armed.clear()
    signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        lazypatch.unpatch(f"interrupts.{round_number}")
    except KeyboardInterrupt:
        pass
    changed = [index for index in range(ATTRIBUTES) if getattr(module, f"a{index}") != index]
    if changed:
        leftovers.append([round_number, len(changed)])
print(json.dumps({"leftovers": leftovers, "interrupted": interrupted}))
""", timeout=300)
    assert result["interrupted"] > 0          # the interrupts did land inside patches
    assert result["leftovers"] == []


# The same guarantee, exhaustively: a tracer raises KeyboardInterrupt at the Nth line the
# engine executes (every N in turn, until a run finishes without it), while a patch makes
# a setattr, wraps a function and a method, a setitem, a delattr and creates a name; then
# while it is undone.
# Whatever line the interrupt lands on, one more unpatch leaves every slot exactly as it
# was (identity, absent names absent again) and nothing live in the ledger.
INJECTION = """
import json, os, sys, types
import lazypatch
from lazypatch.state import STATE

ENGINE = os.path.dirname(lazypatch.__file__)

def originals():
    module = types.ModuleType("injected_target")
    module.kept = object()
    module.deleted = object()
    def function(value):
        return value
    module.function = function
    module.table = {"key": object()}
    module.Holder = type("Holder", (), {"method": lambda self, value: value})
    return module

def snapshot(module):
    return {name: id(value) for name, value in vars(module).items()} | {
        "Holder.method": id(module.Holder.__dict__.get("method")),
        "table[key]": id(module.table["key"]), "table keys": sorted(module.table)}

def inject_at(line_number):
    seen = [0]
    def local(frame, event, argument):
        if event == "line":
            seen[0] += 1
            if seen[0] == line_number:
                raise KeyboardInterrupt(f"line {line_number}")
        return local
    def calls(frame, event, argument):
        return local if frame.f_code.co_filename.startswith(ENGINE) else None
    sys.settrace(calls)
    return seen

def patch_body(target, patch):
    patch.setattr(target, "kept", object())
    patch.wrap(target, "function", lambda wrapped, instance, args, kwargs: wrapped(*args) * 2)
    patch.setitem(target.table, "key", object())
    patch.wrap(target.Holder, "method", lambda wrapped, instance, args, kwargs: wrapped(*args))
    patch.delattr(target, "deleted")
    patch.setattr(target, "created", object(), new=True)

def one_round(line_number, during):
    module = originals()
    sys.modules["injected_target"] = module
    before = snapshot(module)
    lazypatch.when_imported("injected_target", name="injected")(patch_body)
    interrupted = False
    try:
        if during == "apply":
            seen = inject_at(line_number)
        lazypatch.notify_module_loaded(module)
        if during == "undo":
            seen = inject_at(line_number)
        lazypatch.unpatch("injected")
    except KeyboardInterrupt:
        interrupted = True
    finally:
        sys.settrace(None)
    lazypatch.unpatch("injected")          # the interrupted undo, or the interrupted apply
    after = snapshot(module)
    result = {"interrupted": interrupted, "restored": after == before,
              "live": STATE.ledger.live_count(), "lines": seen[0]}
    lazypatch.reset()
    del sys.modules["injected_target"]
    return result

report = {}
for during in ("apply", "undo"):
    failures, landed, line_number = [], 0, 1
    while True:
        result = one_round(line_number, during)
        if not result["interrupted"]:
            break
        landed += 1
        if not result["restored"] or result["live"]:
            failures.append([line_number, result])
        line_number += 1
    report[during] = {"landed": landed, "failures": failures[:5]}
print(json.dumps(report))
"""


# An interrupt injected at every line the engine runs, while a patch applies and while it
# is undone: wherever it lands, the next unpatch restores everything (the applications a
# detach took off the patch wait in patch.undoing until their undo claims them).
def test_an_interrupt_at_every_engine_line_of_a_patch_and_its_undo_leaves_nothing_behind(
        interpreter):
    result = interpreter.run_json(INJECTION, timeout=600)
    for during in ("apply", "undo"):
        assert result[during]["landed"] > 20, result    # the interrupts did land, line by line
        assert result[during]["failures"] == [], (during, result[during])

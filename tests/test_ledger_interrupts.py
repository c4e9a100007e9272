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

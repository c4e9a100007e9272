"""Property-based: random sequences of apply / undo / calls, checked against a simple
model of call counting after every step; and calls from several threads while patches
are applied and undone, every call counted exactly once per holder.

The examples run inside ONE fresh interpreter: this file is also the script
(``python test_call_tracking_properties.py MODE single|threads``).
``lazypatch.reset()`` separates the examples. Profiles (``LAZYPATCH_HYPOTHESIS_PROFILE``):
``ci`` (default) runs a fixed, derandomized number of examples; ``dev`` ten times more.

The model (what ``lazypatch/apply/calls.py`` promises):

* four patches: P0 puts function r0 in place of ``target.f``, P1 puts r1 there, P2 puts
  r0 there too, P3 puts r1 in place of ``target.g``; on one attribute the patch applied
  last wins, and undoing one splices it out (the one below shows through);
* a call of ``target.f`` or ``target.g`` calls the function in place; when that is r_k,
  every patch holding r_k in place now counts one call, whichever attribute it holds
  it on (the same function, so the same code and the same counting wrapper);
* a call of r_k by its own name counts one call for every patch holding r_k under
  ``sys.monitoring`` (it counts the code) and for none under ``wrappers``;
* undoing a patch stops its counting and keeps its count; applying it again goes on
  from there; after everything is undone, nothing is counted any more (no monitoring
  events left on any code, no counting wrapper in place).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

PROFILE_VARIABLE = "LAZYPATCH_HYPOTHESIS_PROFILE"
EXAMPLES = {("ci", "single"): 300, ("ci", "threads"): 40,
            ("dev", "single"): 3000, ("dev", "threads"): 400}
PATCHES = (("f", "r0"), ("f", "r1"), ("f", "r0"), ("g", "r1"))   # (attribute, function)
MONITORING = sys.version_info >= (3, 12)
COUNTING_MODES = ["auto", "wrappers"] if MONITORING else ["wrappers"]

FILES = {
    "cp_target.py": "def f():\n    return 'original f'\n\n\ndef g():\n    return 'original g'\n",
    "cp_shims.py": "def r0():\n    return 'r0'\n\n\ndef r1():\n    return 'r1'\n",
}


def patch_name(index: int) -> str:
    return f"calls_property.p{index}"


def register_all() -> None:
    import cp_shims

    import lazypatch
    for index, (attribute, function) in enumerate(PATCHES):
        replacement = getattr(cp_shims, function)

        def apply(module, patch, attribute=attribute, replacement=replacement):
            patch.setattr(module, attribute, replacement)
        lazypatch.register(apply, "cp_target", name=patch_name(index), enabled=False)


def counts() -> list:
    """Each patch's count of its function's calls (0 before it ever applied)."""
    from lazypatch.state import STATE
    result = []
    for index, (_, function) in enumerate(PATCHES):
        patch = STATE.catalog.find(patch_name(index))
        entries = [entry for label, entry in patch.call_counts.items()
                   if label.endswith("." + function)]
        result.append(entries[0].calls if entries else 0)
    return result


class Model:
    def __init__(self, monitoring: bool) -> None:
        self.monitoring = monitoring
        self.stacks = {"f": [], "g": []}     # live patches per attribute, oldest first
        self.calls = [0] * len(PATCHES)

    def live(self) -> list:
        return [index for stack in self.stacks.values() for index in stack]

    def in_place(self, attribute: str):
        stack = self.stacks[attribute]
        return PATCHES[stack[-1]][1] if stack else None

    def count(self, function: str) -> None:
        for index in self.live():
            if PATCHES[index][1] == function:
                self.calls[index] += 1

    def step(self, operation: tuple) -> None:
        kind, argument = operation
        if kind == "apply" and argument not in self.live():
            self.stacks[PATCHES[argument][0]].append(argument)
        elif kind == "undo" and argument in self.live():
            self.stacks[PATCHES[argument][0]].remove(argument)
        elif kind == "call":
            function = self.in_place(argument)
            if function is not None:
                self.count(function)
        elif kind == "direct" and self.monitoring:
            self.count(argument)


def perform(operation: tuple) -> None:
    import cp_shims
    import cp_target

    import lazypatch
    kind, argument = operation
    if kind == "apply":
        lazypatch.enable(patch_name(argument))       # applies at once: cp_target is imported
    elif kind == "undo":
        lazypatch.unpatch(patch_name(argument))
    elif kind == "call":
        getattr(cp_target, argument)()
    else:
        getattr(cp_shims, argument)()


def nothing_counted_any_more() -> None:
    """After everything is undone: no events on any code, no wrapper in place."""
    import cp_shims
    import cp_target

    from lazypatch.state import STATE
    tracker = STATE.calls
    assert tracker is None or not tracker.active, tracker.active
    if tracker is not None and tracker.tool is not None:
        for function in (cp_shims.r0, cp_shims.r1):
            assert sys.monitoring.get_local_events(tracker.tool, function.__code__) == 0
    assert cp_target.f() == "original f" and cp_target.g() == "original g"


def operations():
    from hypothesis import strategies as st
    return st.one_of(
        st.tuples(st.just("apply"), st.integers(0, len(PATCHES) - 1)),
        st.tuples(st.just("undo"), st.integers(0, len(PATCHES) - 1)),
        st.tuples(st.just("call"), st.sampled_from(["f", "g"])),
        st.tuples(st.just("direct"), st.sampled_from(["r0", "r1"])),
    )


def hypothesis_settings(variant: str):
    from hypothesis import HealthCheck, settings
    profile = os.environ.get(PROFILE_VARIABLE, "ci")
    return settings(max_examples=EXAMPLES[(profile, variant)], derandomize=profile == "ci",
                    deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


def fresh_example() -> None:
    import lazypatch
    lazypatch.reset()
    import cp_target  # noqa: F401  (imported once; patches apply to it when enabled)
    register_all()


def run_single(monitoring: bool) -> dict:
    from hypothesis import given
    from hypothesis import strategies as st
    totals = {"examples": 0, "steps": 0}

    @hypothesis_settings("single")
    @given(st.lists(operations(), min_size=1, max_size=30))
    def counts_follow_the_model(sequence):
        import lazypatch
        fresh_example()
        model = Model(monitoring)
        for operation in sequence:
            perform(operation)
            model.step(operation)
            assert counts() == model.calls, (sequence, operation, counts(), model.calls)
            totals["steps"] += 1
        lazypatch.unpatch_all()
        nothing_counted_any_more()
        assert counts() == model.calls, "undo keeps the counts"
        totals["examples"] += 1

    counts_follow_the_model()
    return totals


def run_threads(monitoring: bool) -> dict:
    """Four threads call target.f a fixed number of times while a fifth applies and
    undoes P0 (r0) again and again, P2 (r0 too) held throughout: P2 counts every call
    of r0 exactly; P0 counts at most that; nothing is counted after unpatch_all."""
    import threading

    from hypothesis import given
    from hypothesis import strategies as st
    totals = {"examples": 0, "steps": 0}

    @hypothesis_settings("threads")
    @given(st.integers(1, 40), st.integers(50, 400))
    def every_call_is_counted_once_per_holder(toggles, calls_per_thread):
        import cp_target

        import lazypatch
        fresh_example()
        lazypatch.enable(patch_name(2))
        start = threading.Barrier(5)

        def caller():
            start.wait()
            for _ in range(calls_per_thread):
                cp_target.f()

        def toggler():
            start.wait()
            for _ in range(toggles):
                lazypatch.enable(patch_name(0))
                lazypatch.unpatch(patch_name(0))

        threads = [threading.Thread(target=caller) for _ in range(4)]
        threads.append(threading.Thread(target=toggler))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        made = 4 * calls_per_thread
        held_throughout, toggled = counts()[2], counts()[0]
        assert held_throughout == made, (held_throughout, made)
        assert 0 <= toggled <= made, (toggled, made)
        lazypatch.unpatch_all()
        cp_target.f()
        assert counts()[2] == made
        nothing_counted_any_more()
        totals["examples"] += 1
        totals["steps"] += made

    sys.setswitchinterval(1e-5)
    every_call_is_counted_once_per_holder()
    return totals


def main(mode: str, variant: str) -> None:
    import warnings
    warnings.simplefilter("ignore")     # conflict warnings are expected here
    monitoring = mode == "auto"
    totals = run_single(monitoring) if variant == "single" else run_threads(monitoring)
    print(json.dumps({"mode": mode, "variant": variant,
                      "profile": os.environ.get(PROFILE_VARIABLE, "ci"), **totals}))


# --- the tests ------------------------------------------------------------------------

def run_property(interpreter, mode: str, variant: str) -> dict:
    interpreter.write(FILES)
    environment = {PROFILE_VARIABLE: os.environ.get(PROFILE_VARIABLE, "ci"),
                   "LAZYPATCH_TRACK_CALLS": mode}
    result = interpreter.run_command(
        [sys.executable, str(Path(__file__).resolve()), mode, variant],
        env=environment, timeout=600)
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", COUNTING_MODES)
def test_random_sequences_of_apply_undo_and_calls_count_as_the_model_says(interpreter, mode):
    totals = run_property(interpreter, mode, "single")
    if totals["profile"] == "ci":
        assert totals["examples"] >= EXAMPLES[("ci", "single")], totals
        assert totals["steps"] > 5 * totals["examples"], totals


@pytest.mark.parametrize("mode", COUNTING_MODES)
def test_calls_from_several_threads_while_patches_come_and_go_are_counted_once(interpreter,
                                                                               mode):
    totals = run_property(interpreter, mode, "threads")
    if totals["profile"] == "ci":
        assert totals["examples"] >= EXAMPLES[("ci", "threads")], totals


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

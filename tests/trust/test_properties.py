"""Property-based: random sequences of register / import / reload / ``del sys.modules`` /
unpatch / enable / disable / ``patched()`` scopes, checked against a simple model after
every step; and the same operations from several threads at once, undone exactly by
``unpatch_all()``.

The examples run inside ONE fresh interpreter: this file is also the script
(``python test_trust_properties.py single|threads``), run by the tests below on three tiny
modules written to disk. ``lazypatch.reset()`` separates the examples.

Profiles (``LAZYPATCH_HYPOTHESIS_PROFILE``): ``ci`` (default) runs a fixed, derandomized
number of examples, 1,050 over both properties; ``dev`` runs ten times more, randomized.

The model (what the engine promises, one rule per operation):

* every live application of a patch sets one attribute of one module object to the
  patch's sentinel; on each attribute the application made last wins, and undoing any
  application splices it out (the one below shows through, or the original);
* importing a module applies its enabled ``before`` patches, then runs the body, then its
  enabled ``after`` patches, each phase by (priority, registration order);
* registering (enabled) or enabling an ``after`` patch applies it at once to the module
  in ``sys.modules``; ``before`` patches wait for the next execution;
* ``importlib.reload`` takes back every application on that module object, then applies
  like an import on the same object;
* ``del sys.modules[m]`` changes nothing; the old object keeps its applications;
* ``unpatch`` undoes every application of the patch, on every module object, and
  disables it; ``disable`` only stops future applications; ``unpatch_all`` is ``unpatch``
  of all;
* ``patched(name)`` enables the patch while it holds it and restores its enabled flag on
  exit; a patch that is not applied it also applies on entry, and undoes all its
  applications on exit; a patch that was already applied keeps every application (a
  module object imported during the scope included).

Operations whose outcome the contract leaves open are skipped, never guessed: a scope on a
patch applied only to an old module object, unpatch/enable/disable of a patch inside an
open scope, reload of a module holding a disabled but still applied patch, and
unpatch_all while scopes are open.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

MODULE_COUNT = 3
AFTER_ATTRIBUTES = ("a", "b")
BEFORE_ATTRIBUTE = "early"
PROFILE_VARIABLE = "LAZYPATCH_HYPOTHESIS_PROFILE"
EXAMPLES = {("ci", "single"): 800, ("ci", "threads"): 250,
            ("dev", "single"): 8000, ("dev", "threads"): 2500}


def module_name(index: int) -> str:
    return f"trust_prop_{index}"


def module_source(index: int) -> str:
    """A module that records every object its body runs in (reloads and re-imports too)."""
    name = module_name(index)
    # .get, not [...]: another thread may delete the entry while this body runs (a
    # reload racing `del sys.modules[m]`), and a KeyError here would leave the body
    # half-executed, which is Python's behaviour, not lazypatch's.
    return (f"import sys as _sys\nimport trust_ledger as _ledger\n"
            f"_module = _sys.modules.get(__name__)\n"
            f"if _module is not None:\n    _ledger.OBJECTS.append(_module)\n"
            f"del _sys, _ledger, _module\n"
            f"a = {name + '.a'!r}\nb = {name + '.b'!r}\n")


def original_contents(index: int) -> dict:
    name = module_name(index)
    return {"a": f"{name}.a", "b": f"{name}.b"}


def scenario_files() -> dict:
    files = {f"{module_name(index)}.py": module_source(index) for index in range(MODULE_COUNT)}
    files["trust_ledger.py"] = "OBJECTS = []\n"
    return files


# --- the harness: runs in the fresh interpreter ---------------------------------------

def plain(module) -> dict:
    return {key: value for key, value in vars(module).items()
            if not (key.startswith("__") and key.endswith("__"))}


def known_objects() -> list:
    """Every module object a body ran in, once each, oldest first."""
    import trust_ledger
    seen, objects = set(), []
    for module in list(trust_ledger.OBJECTS):
        if id(module) not in seen:
            seen.add(id(module))
            objects.append(module)
    return objects


def module_index(module) -> int:
    return int(module.__name__.rsplit("_", 1)[1])


def clean_slate() -> None:
    """Forget every patch and every module object of the previous example."""
    import trust_ledger

    import lazypatch
    lazypatch.reset()
    for index in range(MODULE_COUNT):
        sys.modules.pop(module_name(index), None)
    trust_ledger.OBJECTS.clear()


def make_patch(attribute: str, sentinel: str):
    def set_sentinel(module, patch):
        patch.setattr(module, attribute, sentinel)
    return set_sentinel


class ModelPatch:
    __slots__ = ("name", "module", "phase", "attribute", "priority", "sequence", "enabled", "sentinel")

    def __init__(self, sequence: int, module: int, phase: str, attribute: str, priority: int,
                 enabled: bool) -> None:
        self.name = f"trust.prop.{sequence}"
        self.sequence, self.module, self.phase = sequence, module, phase
        self.attribute, self.priority, self.enabled = attribute, priority, enabled
        self.sentinel = f"sentinel-{sequence}"


class Model:
    """Which sentinel every attribute of every module object must hold."""

    def __init__(self) -> None:
        self.patches: list = []
        self.stacks: dict = {}          # (id(module object), attribute) -> [patch sequence], oldest first
        self.scopes: list = []          # [scope object, patch sequence, owned, enabled before]

    def apply(self, patch: ModelPatch, module) -> None:
        stack = self.stacks.setdefault((id(module), patch.attribute), [])
        if patch.sequence not in stack:
            stack.append(patch.sequence)

    def undo_everywhere(self, patch: ModelPatch) -> None:
        for stack in self.stacks.values():
            if patch.sequence in stack:
                stack.remove(patch.sequence)

    def live_on(self, patch: ModelPatch) -> set:
        return {key[0] for key, stack in self.stacks.items() if patch.sequence in stack}

    def in_scope(self, patch: ModelPatch) -> bool:
        return any(sequence == patch.sequence for _, sequence, _, _ in self.scopes)

    def execute(self, index: int, module) -> None:
        """An import or reload of module ``index`` into the object ``module``."""
        for key in [key for key in self.stacks if key[0] == id(module)]:
            del self.stacks[key]
        ordered = sorted((patch for patch in self.patches if patch.module == index and patch.enabled),
                         key=lambda patch: (patch.priority, patch.sequence))
        for phase in ("before", "after"):
            for patch in ordered:
                if patch.phase == phase:
                    self.apply(patch, module)

    def expected(self, module) -> dict:
        contents = original_contents(module_index(module))
        for attribute in AFTER_ATTRIBUTES + (BEFORE_ATTRIBUTE,):
            stack = self.stacks.get((id(module), attribute))
            if stack:
                contents[attribute] = self.patches[stack[-1]].sentinel
        return contents

    def patched(self, module, attribute: str) -> bool:
        return bool(self.stacks.get((id(module), attribute)))


def check(model: Model, trace: list) -> None:
    import lazypatch
    for position, module in enumerate(known_objects()):
        actual, expected = plain(module), model.expected(module)
        current = sys.modules.get(module.__name__) is module
        where = f"{module.__name__} object #{position} ({'current' if current else 'old'})"
        if actual != expected:
            raise AssertionError(f"after {trace[-1]}: {where} holds {actual}, the model says {expected}"
                                 f"\nsteps: {trace}")
        for attribute in AFTER_ATTRIBUTES + (BEFORE_ATTRIBUTE,):
            if lazypatch.is_patched(module, attribute) != model.patched(module, attribute):
                raise AssertionError(f"after {trace[-1]}: is_patched({where}, {attribute!r}) is "
                                     f"{lazypatch.is_patched(module, attribute)}, the model says "
                                     f"{model.patched(module, attribute)}\nsteps: {trace}")


def check_all_undone(trace: list) -> None:
    """After unpatch_all(): every module object as its body left it, nothing live."""
    import lazypatch
    for module in known_objects():
        original = original_contents(module_index(module))
        if plain(module) != original:
            raise AssertionError(f"after unpatch_all(): {module.__name__} holds {plain(module)}, "
                                 f"not its original {original}\nsteps: {trace}")
        flagged = [attribute for attribute in AFTER_ATTRIBUTES + (BEFORE_ATTRIBUTE,)
                   if lazypatch.is_patched(module, attribute)]
        if flagged:
            raise AssertionError(f"after unpatch_all(): is_patched() still True for {module.__name__} "
                                 f"{flagged}\nsteps: {trace}")
    live = [(item["name"], change) for item in lazypatch.report() for change in item["changes"]
            if change.get("live")]
    applied = [item["name"] for item in lazypatch.report() if item["status"] == "applied"]
    if live or applied:
        raise AssertionError(f"after unpatch_all(): the report shows live changes {live[:5]} / "
                             f"applied patches {applied[:5]}\nsteps: {trace}")


def run_step(model: Model, operation: tuple, trace: list) -> None:
    """Perform one operation on the engine and the model; skipped ones leave no trace."""
    import importlib

    import lazypatch
    kind = operation[0]
    if kind == "register":
        _, index, phase, attribute_number, priority, enabled = operation
        attribute = BEFORE_ATTRIBUTE if phase == "before" else AFTER_ATTRIBUTES[attribute_number]
        patch = ModelPatch(len(model.patches), index, phase, attribute, priority, enabled)
        trace.append(f"register {patch.name} on {module_name(index)} ({phase}, {attribute}, "
                     f"priority {priority}{'' if enabled else ', disabled'})")
        lazypatch.register(make_patch(attribute, patch.sentinel), module_name(index), phase=phase,
                           name=patch.name, priority=priority, enabled=enabled)
        model.patches.append(patch)
        current = sys.modules.get(module_name(index))
        if enabled and phase == "after" and current is not None:
            model.apply(patch, current)
    elif kind in ("import", "reload", "forget"):
        index = operation[1]
        name = module_name(index)
        current = sys.modules.get(name)
        if kind == "import":
            if current is not None:
                return
            trace.append(f"import {name}")
            before = len(known_objects())
            module = importlib.import_module(name)
            if len(known_objects()) != before + 1 or known_objects()[-1] is not module:
                raise AssertionError(f"import {name} did not execute a new module object\nsteps: {trace}")
            model.execute(index, module)
        elif kind == "reload":
            if current is None:
                return
            disabled_but_live = [patch for patch in model.patches
                                 if not patch.enabled and id(current) in model.live_on(patch)]
            if disabled_but_live:
                return
            trace.append(f"reload {name}")
            importlib.reload(current)
            model.execute(index, current)
        else:
            if current is None:
                return
            trace.append(f"del sys.modules[{name!r}]")
            del sys.modules[name]
    elif kind == "exit":
        if not model.scopes:
            return
        scope, sequence, owned, enabled_before = model.scopes.pop()
        patch = model.patches[sequence]
        trace.append(f"exit patched({patch.name})")
        scope.__exit__(None, None, None)
        if owned:
            model.undo_everywhere(patch)
        patch.enabled = enabled_before
    elif kind == "unpatch_all":
        if model.scopes:
            return
        trace.append("unpatch_all()")
        lazypatch.unpatch_all()
        for patch in model.patches:
            model.undo_everywhere(patch)
            patch.enabled = False
    else:
        if not model.patches:
            return
        patch = model.patches[operation[1] % len(model.patches)]
        if model.in_scope(patch):
            return
        current = sys.modules.get(module_name(patch.module))
        if kind == "unpatch":
            trace.append(f"unpatch({patch.name})")
            lazypatch.unpatch(patch.name)
            model.undo_everywhere(patch)
            patch.enabled = False
        elif kind == "enable":
            trace.append(f"enable({patch.name})")
            lazypatch.enable(patch.name)
            patch.enabled = True
            if patch.phase == "after" and current is not None:
                model.apply(patch, current)
        elif kind == "disable":
            trace.append(f"disable({patch.name})")
            lazypatch.disable(patch.name)
            patch.enabled = False
        elif kind == "enter":
            live = model.live_on(patch)
            applied_here = current is not None and id(current) in live
            if live and not applied_here:
                return      # applied only to an old module object: left open by the contract
            trace.append(f"enter patched({patch.name})")
            scope = lazypatch.patched(patch.name)
            scope.__enter__()
            model.scopes.append([scope, patch.sequence, not applied_here, patch.enabled])
            patch.enabled = True    # applied already or not, enabled while the scope holds it
            if not applied_here and patch.phase == "after" and current is not None:
                model.apply(patch, current)


def operations():
    from hypothesis import strategies as st
    module = st.integers(0, MODULE_COUNT - 1)
    patch = st.integers(0, 15)
    return st.one_of(
        st.tuples(st.just("register"), module, st.sampled_from(["after", "after", "before"]),
                  st.integers(0, len(AFTER_ATTRIBUTES) - 1), st.integers(-1, 1), st.booleans()),
        st.tuples(st.sampled_from(["import", "reload", "forget"]), module),
        st.tuples(st.sampled_from(["unpatch", "enable", "disable", "enter", "enter", "exit", "exit",
                                   "unpatch_all"]), patch),
    )


def hypothesis_settings(variant: str):
    from hypothesis import HealthCheck, settings
    profile = os.environ.get(PROFILE_VARIABLE, "ci")
    if profile not in ("ci", "dev"):
        raise SystemExit(f"{PROFILE_VARIABLE}={profile!r}: use 'ci' or 'dev'")
    return settings(max_examples=EXAMPLES[(profile, variant)], derandomize=profile == "ci",
                    deadline=None, database=None, print_blob=False,
                    suppress_health_check=list(HealthCheck))


def run_single() -> dict:
    from hypothesis import given
    from hypothesis import strategies as st
    counts = {"examples": 0, "steps": 0}

    @hypothesis_settings("single")
    @given(st.lists(operations(), min_size=10, max_size=40))
    def sequences_match_the_model(sequence):
        import lazypatch
        clean_slate()
        counts["examples"] += 1
        model, trace = Model(), []
        for operation in sequence:
            length = len(trace)
            run_step(model, operation, trace)
            if len(trace) > length:
                counts["steps"] += 1
                check(model, trace)
        while model.scopes:
            run_step(model, ("exit",), trace)
            check(model, trace)
        trace.append("unpatch_all()")
        lazypatch.unpatch_all()
        check_all_undone(trace)

    sequences_match_the_model()
    return counts


def run_threads() -> dict:
    import importlib
    import threading

    from hypothesis import given
    from hypothesis import strategies as st
    counts = {"examples": 0, "threads": 0}
    expected_errors = (KeyError, ImportError)   # a concurrent del sys.modules, as without lazypatch

    def worker(number: int, sequence: list, registered: list, failures: list) -> None:
        import lazypatch
        scopes = []
        try:
            for step, operation in enumerate(sequence):
                kind = operation[0]
                if kind == "register":
                    _, index, phase, attribute_number, priority, enabled = operation
                    attribute = BEFORE_ATTRIBUTE if phase == "before" else AFTER_ATTRIBUTES[attribute_number]
                    name = f"trust.thread.{number}.{step}"
                    lazypatch.register(make_patch(attribute, f"sentinel-{number}-{step}"), module_name(index),
                                       phase=phase, name=name, priority=priority, enabled=enabled)
                    registered.append(name)
                elif kind in ("import", "reload", "forget"):
                    name = module_name(operation[1])
                    try:
                        if kind == "import":
                            importlib.import_module(name)
                        elif kind == "reload":
                            current = sys.modules.get(name)
                            if current is not None:
                                importlib.reload(current)
                        else:
                            sys.modules.pop(name, None)
                    except expected_errors:
                        pass
                elif kind == "exit":
                    if scopes:
                        scopes.pop().__exit__(None, None, None)
                elif kind == "unpatch_all":
                    continue        # would end other threads' scopes under them: not a race to test
                elif registered:
                    name = registered[operation[1] % len(registered)]
                    if kind == "unpatch":
                        lazypatch.unpatch(name)
                    elif kind == "enable":
                        lazypatch.enable(name)
                    elif kind == "disable":
                        lazypatch.disable(name)
                    else:
                        scope = lazypatch.patched(name)
                        scope.__enter__()
                        scopes.append(scope)
            while scopes:
                scopes.pop().__exit__(None, None, None)
        except BaseException as error:
            failures.append(f"thread {number}: {type(error).__name__}: {error}")

    @hypothesis_settings("threads")
    @given(st.lists(st.lists(operations(), min_size=4, max_size=15), min_size=2, max_size=4))
    def concurrent_sequences_are_undone_exactly(sequences):
        import lazypatch
        clean_slate()
        counts["examples"] += 1
        counts["threads"] += len(sequences)
        registered, failures = [], []
        threads = [threading.Thread(target=worker, args=(number, sequence, registered, failures),
                                    daemon=True) for number, sequence in enumerate(sequences)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        if any(thread.is_alive() for thread in threads):
            print(json.dumps({"deadlock": sequences}), flush=True)
            os._exit(3)     # a stuck thread cannot be shrunk away: report it and stop at once
        trace = [f"thread {number}: {sequence}" for number, sequence in enumerate(sequences)]
        if failures:
            raise AssertionError(f"operations raised in threads: {failures}\nsequences: {trace}")
        lazypatch.unpatch_all()
        check_all_undone(trace)

    sys.setswitchinterval(1e-5)
    concurrent_sequences_are_undone_exactly()
    return counts


def main(variant: str) -> None:
    import warnings
    warnings.simplefilter("ignore")     # conflict and late-patch warnings are expected here
    counts = run_single() if variant == "single" else run_threads()
    print(json.dumps({"variant": variant, "profile": os.environ.get(PROFILE_VARIABLE, "ci"), **counts}))


# --- the tests ------------------------------------------------------------------------

def run_property(trust_interpreter, variant: str) -> dict:
    trust_interpreter.write(scenario_files())
    environment = {PROFILE_VARIABLE: os.environ.get(PROFILE_VARIABLE, "ci")}
    result = trust_interpreter.run_command([sys.executable, str(Path(__file__).resolve()), variant],
                                           env=environment, timeout=600)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_random_sequences_keep_every_module_dict_equal_to_the_model(trust_interpreter):
    counts = run_property(trust_interpreter, "single")
    if counts["profile"] == "ci":
        assert counts["examples"] >= EXAMPLES[("ci", "single")], counts
        assert counts["steps"] > 5 * counts["examples"], f"too few operations really ran: {counts}"


def test_random_sequences_from_several_threads_are_undone_exactly_by_unpatch_all(trust_interpreter):
    counts = run_property(trust_interpreter, "threads")
    if counts["profile"] == "ci":
        assert counts["examples"] >= EXAMPLES[("ci", "threads")], counts


if __name__ == "__main__":
    main(sys.argv[1])

"""However a program changes or rebuilds ``sys.meta_path`` once lazypatch is active, a
watched module is patched whichever finder serves it, and ``sys.meta_path`` holds what
a plain list would hold (``importer.MetaPath``).

Property-based: random sequences of list operations and assignments, each applied to
the real ``sys.meta_path`` and to a plain list (the model), checked after every step.
The examples run inside ONE fresh interpreter activated with ``import lazypatch.auto``:
this file is also the script (``python test_meta_path_properties.py``).
``lazypatch.reset()`` separates the examples. Profiles (``LAZYPATCH_HYPOTHESIS_PROFILE``):
``ci`` (default) runs a fixed, derandomized number of examples; ``dev`` ten times more.

The model:

* the finders are lazypatch's, the import system's three classes, two claiming finder
  instances, a claiming instance with ``__slots__`` and a claiming class (the claiming
  ones serve every name starting with ``mpw_`` from the disk and note that they did);
* an operation does to ``sys.meta_path`` what it does to a plain list, and then (by
  the time the next import runs): lazypatch's finder, if dropped, is put back first;
  if a finder that cannot be guarded (a class, the slotted instance) sits ahead of it,
  lazypatch's finder moves just ahead of the first such finder;
* a watched module imported after any step is served by the first finder of the list,
  lazypatch's left out, that can serve it, and its patch is applied.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

PROFILE_VARIABLE = "LAZYPATCH_HYPOTHESIS_PROFILE"
EXAMPLES = {"ci": 150, "dev": 1500}


def build_pool():
    """The finders the operations use, by label: (label -> finder, unguardable labels)."""
    import importlib.machinery
    served = []

    def claim(label, fullname, path):
        if not fullname.startswith("mpw_"):
            return None
        served.append(label)
        return importlib.machinery.PathFinder.find_spec(fullname, path)

    class Claiming:
        def __init__(self, label):
            self.label = label

        def find_spec(self, fullname, path=None, target=None):
            return claim(self.label, fullname, path)

    class SlottedClaiming:
        __slots__ = ()

        def find_spec(self, fullname, path=None, target=None):
            return claim("slotted", fullname, path)

    class ClaimingClass:
        @classmethod
        def find_spec(cls, fullname, path=None, target=None):
            return claim("class", fullname, path)

    import lazypatch.watch.importer
    pool = {"lazypatch": lazypatch.watch.importer.installed_finder(),
            "builtin": importlib.machinery.BuiltinImporter,
            "frozen": importlib.machinery.FrozenImporter,
            "path": importlib.machinery.PathFinder,
            "first": Claiming("first"), "second": Claiming("second"),
            "slotted": SlottedClaiming(), "class": ClaimingClass}
    serving = {"first", "second", "slotted", "class", "path"}
    unguardable = {"builtin", "frozen", "path", "slotted", "class"}
    return pool, served, serving, unguardable


def operations(labels):
    from hypothesis import strategies as st
    item = st.sampled_from(labels)
    items = st.lists(item, max_size=3)
    index = st.integers(-5, 8)
    return st.one_of(
        st.tuples(st.just("insert"), index, item),
        st.tuples(st.just("append"), item),
        st.tuples(st.just("extend"), items),
        st.tuples(st.just("iadd"), items),
        st.tuples(st.just("imul"), st.integers(1, 2)),
        st.tuples(st.just("setitem"), index, item),
        st.tuples(st.just("setslice"), index, index, items),
        st.tuples(st.just("delitem"), index),
        st.tuples(st.just("delslice"), index, index),
        st.tuples(st.just("remove"), item),
        st.tuples(st.just("pop"), index),
        st.tuples(st.just("clear")),
        st.tuples(st.just("sort"), st.booleans()),
        st.tuples(st.just("reverse")),
        st.tuples(st.just("assign_copy")),
        st.tuples(st.just("assign_front"), item),
        st.tuples(st.just("assign"), st.lists(item, max_size=6)),
    )


def perform(target, operation, pool, label_of):
    """Apply ``operation`` to the list ``target`` (sys.meta_path itself when it is)."""
    kind, *arguments = operation
    finders = [[pool[label] for label in argument] if isinstance(argument, list)
               else pool[argument] if isinstance(argument, str) else argument
               for argument in arguments]
    is_sys = target is sys.meta_path
    if kind == "insert":
        target.insert(*finders)
    elif kind == "append":
        target.append(*finders)
    elif kind == "extend":
        target.extend(*finders)
    elif kind == "iadd":
        if is_sys:
            sys.meta_path += finders[0]
        else:
            target += finders[0]
    elif kind == "imul":
        if is_sys:
            sys.meta_path *= finders[0]
        else:
            target *= finders[0]
    elif kind == "setitem":
        target[finders[0]] = finders[1]
    elif kind == "setslice":
        target[finders[0]:finders[1]] = finders[2]
    elif kind == "delitem":
        del target[finders[0]]
    elif kind == "delslice":
        del target[finders[0]:finders[1]]
    elif kind == "remove":
        target.remove(finders[0])
    elif kind == "pop":
        target.pop(finders[0])
    elif kind == "clear":
        target.clear()
    elif kind == "sort":
        target.sort(key=label_of, reverse=finders[0])
    elif kind == "reverse":
        target.reverse()
    else:                       # the assignments: a new list object
        if kind == "assign_copy":
            new = list(target)
        elif kind == "assign_front":
            new = [finders[0]] + list(target)
        else:
            new = list(finders[0])
        if is_sys:
            sys.meta_path = new
        else:
            target[:] = new


def keep_promises(model, finder, unguardable_finders):
    """The model's rule after an operation (see the module docstring)."""
    for position, foreign in enumerate(model):
        if foreign is finder:
            return
        if any(foreign is other for other in unguardable_finders):
            model.insert(position, finder)
            for index in range(position + 1, len(model)):
                if model[index] is finder:
                    del model[index]
                    return
            return
    model.insert(0, finder)


def run(directory: Path) -> dict:
    import importlib
    import warnings

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    import lazypatch
    warnings.simplefilter("ignore")
    pool, served, serving, unguardable = build_pool()
    labels = sorted(pool)
    label_of = {id(finder): label for label, finder in pool.items()}.__getitem__
    finder = pool["lazypatch"]
    unguardable_finders = [pool[label] for label in unguardable]
    original = list(sys.meta_path)
    # Each example starts from lazypatch's finder and the import system's own (another
    # finder of this interpreter, such as an editable install's, comes back at the end).
    start = [pool[label] for label in ("lazypatch", "builtin", "frozen", "path")]
    lazypatch.report()            # the report's modules, loaded while every finder is there
    totals = {"examples": 0, "steps": 0, "patched": 0, "not_found": 0}
    counter = iter(range(1 << 30))
    profile = os.environ.get(PROFILE_VARIABLE, "ci")

    @settings(max_examples=EXAMPLES[profile], derandomize=profile == "ci", deadline=None,
              database=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(operations(labels), min_size=1, max_size=12))
    def follows_the_model(sequence):
        lazypatch.reset()
        names = [f"mpw_{next(counter)}" for _ in range(len(sequence))]
        for name in names:
            (directory / f"{name}.py").write_text("VALUE = 'original'\n")

            def apply(module, patch):
                patch.setattr(module, "VALUE", "patched")
            lazypatch.when_imported(name, name=f"patch.{name}")(apply)
        importlib.invalidate_caches()
        sys.meta_path[:] = start
        model = list(sys.meta_path)
        totals["examples"] += 1
        try:
            for operation, name in zip(sequence, names):
                label_of_finders = lambda found: label_of(id(found))  # noqa: E731
                try:
                    perform(model, operation, pool, label_of_finders)
                except (IndexError, ValueError) as error:
                    expected_error = type(error)
                else:
                    expected_error = None
                    keep_promises(model, finder, unguardable_finders)
                try:
                    perform(sys.meta_path, operation, pool, label_of_finders)
                except (IndexError, ValueError) as error:
                    assert type(error) is expected_error, (operation, error)
                else:
                    assert expected_error is None, (operation, "no error")
                providers = [label_of(id(found)) for found in model
                             if found is not finder and label_of(id(found)) in serving]
                del served[:]
                try:
                    module = importlib.import_module(name)
                except ModuleNotFoundError:
                    assert not providers, (sequence, operation, providers)
                    totals["not_found"] += 1
                    record_status = None
                else:
                    assert providers, (sequence, operation)
                    expected = providers[0]
                    assert (served[0] if served else "path") == expected, (sequence, served)
                    assert module.VALUE == "patched", (sequence, operation)
                    record_status = "applied"
                    totals["patched"] += 1
                # By the time an import runs (MetaPath: as the change is made; a list
                # assigned in its place: as the import starts), the list is the model's.
                actual = list(sys.meta_path)
                assert [label_of(id(found)) for found in actual] == \
                    [label_of(id(found)) for found in model], (sequence, operation)
                assert all(a is b for a, b in zip(actual, model))
                statuses = {record["name"]: record["status"] for record in lazypatch.report()}
                if record_status is not None:
                    assert statuses[f"patch.{name}"] == record_status, statuses
                totals["steps"] += 1
        finally:
            sys.meta_path[:] = original

    follows_the_model()
    return totals


def test_random_changes_to_sys_meta_path_keep_every_watched_module_patched(interpreter):
    result = interpreter.run_command(
        [sys.executable, str(Path(__file__).resolve()), str(interpreter.root)],
        env={PROFILE_VARIABLE: os.environ.get(PROFILE_VARIABLE, "ci")}, timeout=600)
    totals = json.loads(result.stdout.strip().splitlines()[-1])
    if os.environ.get(PROFILE_VARIABLE, "ci") == "ci":
        assert totals["examples"] >= EXAMPLES["ci"], totals
    assert totals["patched"] > 3 * totals["examples"], totals
    assert totals["not_found"] > 0, totals


if __name__ == "__main__":
    import lazypatch.auto  # noqa: F401  (activation: sys.meta_path becomes a MetaPath)
    print(json.dumps(run(Path(sys.argv[1]))))

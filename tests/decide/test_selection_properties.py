"""Property-based: selection and undo found through the catalog's indexes choose exactly
what walking every patch would.

``select`` answers names, dotted families, tags, ``tag:x``, globs and ``*`` from the
catalog's indexes (built on first use, then kept up to date: half of each catalog is
registered after they exist, and removals follow), and ``derived_from`` (what
``unpatch`` takes back with a patch) from its own index, so that neither grows with
the number of registered patches. The
oracle is ``selection.matches``, the one-patch rule, applied to every patch, and the
naming rule of derived patches (``<name>.sub:<module>``, and aliases marked with the
name they were declared for). Random catalogs are registered, partly removed again,
and asked random selectors.

The examples run in ONE fresh interpreter: this file is also the script
(``python test_selection_properties.py``); ``lazypatch.reset()`` separates them.
Profiles (``LAZYPATCH_HYPOTHESIS_PROFILE``): ``ci`` (default) a fixed, derandomized
number of examples; ``dev`` ten times more, randomized.
"""

import json
import os
import sys
from pathlib import Path

PROFILE_VARIABLE = "LAZYPATCH_HYPOTHESIS_PROFILE"
EXAMPLES = 300

WORDS = ["a", "b", "ab", "openmmlab", "mmcv"]
TAGS = ["a", "ops", "explicit", "b.c", "tag:a"]


def run() -> dict:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    import lazypatch
    from lazypatch.decide.selection import matches, select
    from lazypatch.declare.paths import derived_from
    from lazypatch.state import STATE

    profile = os.environ.get(PROFILE_VARIABLE, "ci")
    if profile not in ("ci", "dev"):
        raise SystemExit(f"{PROFILE_VARIABLE}={profile!r}: use 'ci' or 'dev'")
    word = st.sampled_from(WORDS)
    dotted = st.lists(word, min_size=1, max_size=3).map(".".join)
    names = st.one_of(dotted, st.tuples(dotted, dotted).map(lambda pair: f"{pair[0]}.sub:{pair[1]}"))
    patch = st.tuples(names, st.lists(st.sampled_from(TAGS), max_size=3),
                      st.one_of(st.none(), dotted))          # (name, tags, alias of)
    selector = st.one_of(names, word, st.sampled_from(TAGS), st.sampled_from(TAGS).map("tag:{}".format),
                         st.sampled_from(["*", "a*", "*.b", "a.?", "[ab].*", "mm*.sub:*"]))
    counts = {"examples": 0, "selected": 0, "derived": 0}

    @settings(max_examples=EXAMPLES * (10 if profile == "dev" else 1), derandomize=profile == "ci",
              deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(patch, max_size=12), st.lists(st.integers(0, 11), max_size=4),
           st.lists(selector, min_size=1, max_size=6))
    def property_(declared, removals, selectors):
        lazypatch.reset()
        registered = {}
        for index, (name, tags, alias_of) in enumerate(declared):
            if index == len(declared) // 2:
                select(["*"])   # the indexes are built here: the rest is added to them
            if name in registered:
                continue

            def function(module):
                pass
            if alias_of is not None:
                function.lazypatch_alias_of = alias_of
            lazypatch.register(function, f"target_{index}", name=name, tags=tags)
            registered[name] = STATE.catalog.find(name)
        for position in removals:   # the catalog forgets some again (paths.py does so)
            if registered:
                name = sorted(registered)[position % len(registered)]
                with STATE.lock:
                    STATE.catalog.remove(registered.pop(name))
        everything = list(registered.values())
        for chosen in selectors:
            found, unmatched = select([chosen])
            expected = sorted((patch for patch in everything if matches(chosen, patch)),
                              key=lambda patch: patch.order)
            assert [patch.name for patch in found] == [patch.name for patch in expected], chosen
            assert unmatched == ([] if expected else [chosen])
            counts["selected"] += len(found)
        for name in registered:
            expected = {other.name for other in everything
                        if other.name.startswith(f"{name}.sub:")
                        or getattr(other.function, "lazypatch_alias_of", None) == name}
            derived = derived_from(name)
            assert sorted(derived) == sorted(expected), name
            counts["derived"] += len(derived)
        counts["examples"] += 1

    property_()
    lazypatch.reset()
    return counts


def test_indexed_selection_and_undo_choose_what_walking_every_patch_chooses(interpreter):
    result = interpreter.run_command(
        [sys.executable, str(Path(__file__).resolve())],
        env={PROFILE_VARIABLE: os.environ.get(PROFILE_VARIABLE, "ci")}, timeout=300)
    counts = json.loads(result.stdout.strip().splitlines()[-1])
    if os.environ.get(PROFILE_VARIABLE, "ci") == "ci":
        assert counts["examples"] >= EXAMPLES, counts
    # The examples really chose something (an always-empty selection would pass anyway).
    assert counts["selected"] > counts["examples"] and counts["derived"] > 0, counts


if __name__ == "__main__":
    print(json.dumps(run()))

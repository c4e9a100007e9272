"""The per-call cost of counting a replacement's calls (``lazypatch/apply/calls.py``).

One process per mode of ``LAZYPATCH_TRACK_CALLS``, each timing with ``timeit``
the replacement a patch put in place, interleaved with a function of the same body
(its own code object, so that no monitoring reaches it) called directly and with
wrapt's C ``FunctionWrapper`` around it (the cheapest wrapper a
Python patcher can put in place: the yardstick). The cost of a mode is its time
minus the direct call's. ``off`` is the floor (nothing counted); ``auto`` counts
through ``sys.monitoring`` on Python 3.12+ and is ``off`` before; ``wrappers``
counts through a Python wrapper on any version.
"""

from __future__ import annotations

import sys
from typing import Dict, List

from benchmarks import harness
from benchmarks.environment import Environment

GROUP = "5b. Call tracking cost"

SCRIPT = """
import json, sys, timeit
sys.path.insert(0, {modules!r})
import lazypatch
import wrapt


def replacement(x):
    return x


# The baseline: the same body in a code object of its own. Under sys.monitoring the
# events are set on replacement's code object, so calling replacement directly would
# pay the monitoring too and the difference would measure nothing.
def unmonitored(x):
    return x


def passthrough(wrapped, instance, args, kwargs):
    return wrapped(*args, **kwargs)


@lazypatch.when_imported("bm_wrap_target", name="bench.replace_hot")
def replace_hot(module, patch):
    patch.setattr(module, "hot", replacement)


import bm_wrap_target
callables = {{"direct": unmonitored, "wrapt": wrapt.FunctionWrapper(unmonitored, passthrough),
              "in_place": bm_wrap_target.hot}}
best = {{name: float("inf") for name in callables}}
for _ in range({rounds}):
    for name, function in callables.items():
        seconds = timeit.timeit("f(1)", globals={{"f": function}}, number={number})
        best[name] = min(best[name], seconds / {number})
(record,) = [record for record in lazypatch.report() if record.name == "bench.replace_hot"]
best["counted"] = record.calls
print(json.dumps(best))
"""

MODES = ("off", "auto", "wrappers")


def measure(environment: Environment, repetitions: int, number: int) -> List[Dict[str, object]]:
    """Rows: ns per call added by each mode, against wrapt's pass-through overhead."""
    script = environment.script("call_tracking.py", SCRIPT.format(
        modules=str(environment.modules), rounds=5, number=number))
    samples = {(mode, name): harness.Samples() for mode in MODES
               for name in ("direct", "wrapt", "in_place")}
    counted: Dict[str, object] = {}
    for _ in range(repetitions):
        for mode in MODES:   # interleaved: the machine's drift hits every mode alike
            env = dict(environment.env(), LAZYPATCH_TRACK_CALLS=mode)
            document = harness.last_json_line(harness.run_process(
                [str(environment.clean_python), str(script)], env=env).stdout)
            for name, value in document.items():  # type: ignore[union-attr]
                if name == "counted":
                    counted[mode] = value
                else:
                    samples[(mode, name)].values.append(value * 1e9)
    rows = []
    for mode in MODES:
        direct = samples[(mode, "direct")].median
        wrapt_overhead = samples[(mode, "wrapt")].median - direct
        overhead = samples[(mode, "in_place")].median - direct
        ratio = overhead / wrapt_overhead if wrapt_overhead > 0 else None
        how = {"off": "nothing counted (the floor)",
               "auto": "sys.monitoring PY_START" if sys.version_info >= (3, 12)
               else "before 3.12: nothing counted, as off",
               "wrappers": "a counting Python wrapper"}[mode]
        rows.append(harness.row(
            GROUP, f"LAZYPATCH_TRACK_CALLS={mode}: overhead per call vs wrapt's", overhead,
            "ns/call", baseline=wrapt_overhead, ratio=ratio, verdict=harness.INFO,
            spread="in place " + samples[(mode, "in_place")].spread(1, 1),
            note=f"{how}; direct call {direct:.1f} ns; the report counted "
                 f"{counted.get(mode)} calls",
            raw={name: samples[(mode, name)].as_dict() for name in ("direct", "wrapt",
                                                                    "in_place")}))
    return rows

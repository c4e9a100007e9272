"""Budget 5: the per-call cost of a function wrapped with ``patch.wrap``.

Three callables in one process, timed alternately with ``timeit``: the bare
function, the same function in wrapt's C ``FunctionWrapper`` with a
pass-through wrapper, and the function after a lazypatch patch replaced it
through ``patch.wrap`` with the same pass-through wrapper. The overhead is
each one's time minus the bare call's. Budget: lazypatch's overhead within
2x of wrapt's.
"""

from __future__ import annotations

from typing import Dict, List

from benchmarks import harness
from benchmarks.environment import Environment

GROUP = "5. Wrapper call cost"
BUDGET_RATIO = 2.0

SCRIPT = """
import json, sys, timeit
sys.path.insert(0, {modules!r})
import lazypatch
import wrapt


def passthrough(wrapped, instance, args, kwargs):
    return wrapped(*args, **kwargs)


@lazypatch.when_imported("bm_wrap_target", name="bench.wrap_hot")
def wrap_hot(module, patch):
    patch.wrap(module, "hot", passthrough)


import bm_wrap_target
bare = lazypatch.original(bm_wrap_target, "hot")
assert bm_wrap_target.hot is not bare, "patch.wrap did not replace the function"
callables = {{"bare": bare, "wrapt": wrapt.FunctionWrapper(bare, passthrough),
              "lazypatch": bm_wrap_target.hot}}
best = {{name: float("inf") for name in callables}}
for _ in range({rounds}):
    for name, function in callables.items():
        seconds = timeit.timeit("f(1)", globals={{"f": function}}, number={number})
        best[name] = min(best[name], seconds / {number})
print(json.dumps(best))
"""


def measure(environment: Environment, repetitions: int, number: int) -> List[Dict[str, object]]:
    """Rows: ns per call of each callable (best of rounds per process, median over processes)."""
    script = environment.script("wrap_call.py", SCRIPT.format(
        modules=str(environment.modules), rounds=5, number=number))
    samples = {name: harness.Samples() for name in ("bare", "wrapt", "lazypatch")}
    for _ in range(repetitions):
        document = harness.last_json_line(harness.run_process(
            [str(environment.clean_python), str(script)], env=environment.env()).stdout)
        for name, seconds in document.items():  # type: ignore[union-attr]
            samples[name].values.append(seconds * 1e9)
    bare, wrapt_ns, lazypatch_ns = (samples[name].median for name in ("bare", "wrapt",
                                                                        "lazypatch"))
    wrapt_overhead, lazypatch_overhead = wrapt_ns - bare, lazypatch_ns - bare
    ratio = lazypatch_overhead / wrapt_overhead if wrapt_overhead > 0 else None
    return [
        harness.row(GROUP, "bare function call", bare, "ns/call",
                    spread=samples["bare"].spread(1, 1), raw=samples["bare"].as_dict()),
        harness.row(GROUP, "`patch.wrap` overhead vs wrapt FunctionWrapper overhead",
                    lazypatch_overhead, "ns/call", baseline=wrapt_overhead, ratio=ratio,
                    difference=lazypatch_overhead - wrapt_overhead,
                    budget=f"ratio ≤ {BUDGET_RATIO:g}",
                    verdict=harness.verdict(ratio is not None and ratio <= BUDGET_RATIO),
                    spread="lazypatch " + samples["lazypatch"].spread(1, 1) + "; wrapt "
                           + samples["wrapt"].spread(1, 1),
                    note=f"pass-through wrapper; per call: bare {bare:.1f} ns, wrapt "
                         f"{wrapt_ns:.1f} ns, patch.wrap {lazypatch_ns:.1f} ns",
                    raw={name: sample.as_dict() for name, sample in samples.items()}),
    ]

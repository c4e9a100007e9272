"""Budget 5: the per-call cost of a function wrapped with ``patch.wrap``.

Three callables in one process, timed alternately with ``timeit``: the bare
function, the same function in wrapt's C ``FunctionWrapper`` with a
pass-through wrapper, and the function after a lazypatch patch replaced it
through ``patch.wrap`` with the same pass-through wrapper. The overhead is
each one's time minus the bare call's. Budget: lazypatch's overhead within
2x of wrapt's.

The same three for a method called as ``instance.hot(1)`` (binding included):
``patch.wrap`` on a class puts a subclass of wrapt's ``FunctionWrapper`` in
place (it copies and pickles by reference: ``lazypatch/apply/wrapping.py``), a
module's function gets a plain function calling the wrapper.
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


def method(self, value):
    return value


BareHot = type("BareHot", (), {{"hot": method}})
WraptHot = type("WraptHot", (), {{"hot": wrapt.FunctionWrapper(method, passthrough)}})
LazypatchHot = type("LazypatchHot", (), {{"hot": method}})


@lazypatch.when_imported("bm_wrap_target", name="bench.wrap_method")
def wrap_method(module, patch):
    patch.wrap(LazypatchHot, "hot", passthrough)


lazypatch.notify_module_loaded(bm_wrap_target)
assert LazypatchHot.__dict__["hot"] is not method, "the method was not wrapped"
calls = {{"bare": ("f(1)", bare), "wrapt": ("f(1)", wrapt.FunctionWrapper(bare, passthrough)),
          "lazypatch": ("f(1)", bm_wrap_target.hot),
          "bare_method": ("f.hot(1)", BareHot()), "wrapt_method": ("f.hot(1)", WraptHot()),
          "lazypatch_method": ("f.hot(1)", LazypatchHot())}}
best = {{name: float("inf") for name in calls}}
for _ in range({rounds}):
    for name, (statement, function) in calls.items():
        seconds = timeit.timeit(statement, globals={{"f": function}}, number={number})
        best[name] = min(best[name], seconds / {number})
print(json.dumps(best))
"""


def measure(environment: Environment, repetitions: int, number: int) -> List[Dict[str, object]]:
    """Rows: ns per call of each callable (best of rounds per process, median over processes)."""
    script = environment.script("wrap_call.py", SCRIPT.format(
        modules=str(environment.modules), rounds=5, number=number))
    names = [prefix + suffix for suffix in ("", "_method")
             for prefix in ("bare", "wrapt", "lazypatch")]
    samples = {name: harness.Samples() for name in names}
    for _ in range(repetitions):
        document = harness.last_json_line(harness.run_process(
            [str(environment.clean_python), str(script)], env=environment.env()).stdout)
        for name, seconds in document.items():  # type: ignore[union-attr]
            samples[name].values.append(seconds * 1e9)
    rows = []
    for suffix, what in (("", "function"), ("_method", "method")):
        rows.extend(_rows(samples, suffix, what))
    return rows


def _rows(samples: Dict[str, "harness.Samples"], suffix: str, what: str
          ) -> List[Dict[str, object]]:
    bare, wrapt_ns, lazypatch_ns = (samples[name + suffix].median
                                    for name in ("bare", "wrapt", "lazypatch"))
    wrapt_overhead, lazypatch_overhead = wrapt_ns - bare, lazypatch_ns - bare
    ratio = lazypatch_overhead / wrapt_overhead if wrapt_overhead > 0 else None
    return [
        harness.row(GROUP, f"bare {what} call", bare, "ns/call",
                    spread=samples["bare" + suffix].spread(1, 1),
                    raw=samples["bare" + suffix].as_dict()),
        harness.row(GROUP, f"`patch.wrap` overhead vs wrapt FunctionWrapper overhead ({what})",
                    lazypatch_overhead, "ns/call", baseline=wrapt_overhead, ratio=ratio,
                    difference=lazypatch_overhead - wrapt_overhead,
                    budget=f"ratio ≤ {BUDGET_RATIO:g}",
                    verdict=harness.verdict(ratio is not None and ratio <= BUDGET_RATIO),
                    spread="lazypatch " + samples["lazypatch" + suffix].spread(1, 1) + "; wrapt "
                           + samples["wrapt" + suffix].spread(1, 1),
                    note=f"pass-through wrapper; per call: bare {bare:.1f} ns, wrapt "
                         f"{wrapt_ns:.1f} ns, patch.wrap {lazypatch_ns:.1f} ns",
                    raw={name: samples[name + suffix].as_dict()
                         for name in ("bare", "wrapt", "lazypatch")}),
    ]

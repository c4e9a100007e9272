"""spconv 2.3.8's own tests (``test/test_conv.py`` of its repository) run on the CPU
against the ``spconv`` stand-in of the ``cuda_extensions`` pack.

The test file is spconv's, unchanged: it imports ``spconv.core.ConvAlgo``,
``spconv.constants`` and ``spconv.pytorch`` from the stand-in. Only what is
test-internal is shimmed: ``spconv.test_utils`` (the checkout's own file, loaded as
it is) gets a ``params_grid`` that runs on the CPU (spconv's tests list
``"cuda:0"``; each ``"cuda..."`` device becomes ``"cpu:0"``) and hands out one case
at a time, so that every case of spconv's parameter grids is run and counted on its
own (spconv's loops stop at the first failure).

Needs an extracted checkout: set LAZYPATCH_SPCONV_CHECKOUT to it (the ``v2.3.8`` tag
of spconv's repository). Without it these tests skip.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

SPCONV_CHECKOUT = os.environ.get("LAZYPATCH_SPCONV_CHECKOUT", "")

#: Runs spconv's test functions case by case; prints {test: [passed, run,
#: skipped by spconv's test itself, first failures]}.
HARNESS = '''
import importlib.util, json, sys, traceback
import lazypatch
import lazypatch.registry.cuda_extensions
lazypatch.enable("cuda_extensions")
import warnings
import torch
torch.set_num_threads(1)
# spconv's gather_nd/scatter_nd index with a list (deprecated by torch, still valid).
warnings.filterwarnings("ignore", message="Using a non-tuple sequence")
import spconv
checkout, every = sys.argv[1], int(sys.argv[2])

def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

test_utils = load("spconv.test_utils", f"{checkout}/spconv/test_utils.py")
spconv.test_utils = test_utils
every_case = test_utils.params_grid
selected = {"index": None, "count": 0}

def one_case_on_the_cpu(devices, *params):
    cpu = list(dict.fromkeys("cpu:0" if d.startswith("cuda") else d for d in devices))
    cases = every_case(cpu, *params)
    selected["count"] = len(cases)
    return [] if selected["index"] is None else [cases[selected["index"]]]

test_utils.params_grid = one_case_on_the_cpu
checked = {"count": 0}
compare = test_utils.TestCase.assertAllClose

def counted_compare(self, *args, **kwargs):
    checked["count"] += 1
    return compare(self, *args, **kwargs)

test_utils.TestCase.assertAllClose = counted_compare
tests = load("spconv_test_conv", f"{checkout}/test/test_conv.py")
report = {}
for name in ("test_spconv3d", "test_spdeconv3d", "test_spmaxpool3d",
             "test_spglobalmaxpool3d"):
    selected["index"] = None
    getattr(tests, name)()                     # counts the cases, runs none
    passed, run, unsupported, failures = 0, 0, 0, []
    for index in range(0, selected["count"], every):
        selected["index"] = index
        checked["count"] = 0
        try:
            getattr(tests, name)()
        except Exception as error:
            run += 1
            failures.append(f"case {index}: {type(error).__name__}: {str(error)[:300]}")
            continue
        if checked["count"] == 0:     # spconv's own test skips it ("don't support this")
            unsupported += 1
        else:
            run += 1
            passed += 1
    report[name] = [passed, run, unsupported, failures[:5]]
print(json.dumps(report))
'''


def run_spconv_tests(interpreter, every: int) -> dict:
    if not SPCONV_CHECKOUT:
        pytest.skip("set LAZYPATCH_SPCONV_CHECKOUT to an extracted checkout of spconv "
                    "v2.3.8 (git archive v2.3.8 of its repository) to run its own tests")
    checkout = Path(SPCONV_CHECKOUT).resolve()
    if not (checkout / "test" / "test_conv.py").is_file():
        pytest.skip(f"{checkout} has no test/test_conv.py: not a spconv checkout")
    return interpreter.run_json(HARNESS, args=[str(checkout), str(every)], timeout=3000)


def assert_all_passed(report: dict) -> None:
    failed = {name: failures for name, (passed, run, _, failures) in report.items()
              if passed != run or run == 0}
    assert not failed, json.dumps(failed, indent=1)


def test_a_sample_of_spconvs_own_cpu_cases_passes(interpreter):
    """Every 40th case of each grid (and at least the first): quick."""
    assert_all_passed(run_spconv_tests(interpreter, every=40))


@pytest.mark.slow
def test_every_spconv_own_cpu_case_passes(interpreter):
    assert_all_passed(run_spconv_tests(interpreter, every=1))

"""Budget 4 (comparison): lazy patching against an eager DrivingSDK-style patcher.

A script that imports only numpy, and one that imports only torch, run as
whole processes in the development venv (which has the whole stack), once
with ``import lazypatch.auto`` first and once under the eager baseline of
``benchmarks/baselines/eager_patcher.py``, which imports mmcv, torch, numpy,
mmdet and mmdet3d up front. There is no numeric budget; the verdict says
whether lazy start-up is the faster one.
"""

from __future__ import annotations

from typing import Dict, List

from benchmarks import harness
from benchmarks.environment import BENCHMARKS, Environment

GROUP = "4. Lazy vs eager"

LAZY = """
import lazypatch.auto
import {target}
import json, sys
print(json.dumps({{"modules": len(sys.modules)}}))
"""

EAGER = """
import sys
sys.path.insert(0, {baselines!r})
from eager_patcher import default_patcher_builder
with default_patcher_builder.build():
    import {target}
import json
print(json.dumps({{"modules": len(sys.modules)}}))
"""


def measure(environment: Environment, repetitions: int) -> List[Dict[str, object]]:
    """Rows: whole-process time of numpy-only and torch-only scripts, lazy vs eager."""
    python = str(environment.stack_python)
    env = environment.env()
    rows = []
    for target in ("numpy", "torch"):
        lazy = environment.script(f"lazy_{target}.py", LAZY.format(target=target))
        eager = environment.script(f"eager_{target}.py", EAGER.format(
            target=target, baselines=str(BENCHMARKS / "baselines")))
        samples = harness.interleave(
            {"lazy": harness.process_wall_time([python, str(lazy)], env),
             "eager": harness.process_wall_time([python, str(eager)], env)}, repetitions)
        modules = {name: harness.last_json_line(harness.run_process(
            [python, str(script)], env=env).stdout)["modules"]  # type: ignore[index]
            for name, script in (("lazy", lazy), ("eager", eager))}
        lazy_ms, eager_ms = samples["lazy"].median * 1e3, samples["eager"].median * 1e3
        rows.append(harness.row(
            GROUP, f"script importing only {target}: lazypatch.auto vs eager patcher", lazy_ms,
            "ms", baseline=eager_ms, ratio=lazy_ms / eager_ms, difference=lazy_ms - eager_ms,
            budget="faster than eager", verdict=harness.verdict(lazy_ms < eager_ms),
            spread=samples["lazy"].spread(1e3, 0) + "; eager " + samples["eager"].spread(1e3, 0),
            note=f"modules loaded: {modules['lazy']} lazy vs {modules['eager']} eager",
            raw={name: sample.as_dict() for name, sample in samples.items()}))
    return rows

"""rewrite_control_flow: a method's data-dependent `if`s become torch.cond when its
module is imported, the dump holds original / rewritten / diff, and undo restores the
very same function. Runs on a small real package written to disk, in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.stack

MODULE = '''
import torch


class Clamp(torch.nn.Module):
    def forward(self, x, limit=3.0):
        y = x * 2
        if x.dtype == torch.float32 and not torch.isfinite(y).all():
            bound = limit
            y = torch.clamp(y, -bound, bound)
        elif (y > 100).any() or not (y < -100).any():
            y = y - 1
        return y
'''

CODE = '''
import json, os, sys
import lazypatch.auto, lazypatch
import lazypatch.registry.export as export_pack
dump = sys.argv[1]
name = export_pack.rewrite_control_flow("clamping_pkg.layers:Clamp.forward", dump=dump)
imported_at_declaration = "clamping_pkg.layers" in sys.modules
import torch
from clamping_pkg.layers import Clamp
original = Clamp.__dict__["forward"]
x = torch.tensor([1.0, float("inf"), -2.0])
eager = [Clamp()(x).tolist(), Clamp()(torch.ones(2)).tolist(), Clamp()(torch.full((2,), 80.0)).tolist()]
try:
    torch.export.export(Clamp(), (torch.ones(3),), dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))
    fails_without = False
except Exception:
    fails_without = True
with lazypatch.patched(name):
    replaced = Clamp.__dict__["forward"] is not original
    program = torch.export.export(Clamp(), (torch.ones(3),),
                                  dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))
    same_eager = [Clamp()(x).tolist(), Clamp()(torch.ones(2)).tolist(),
                  Clamp()(torch.full((2,), 80.0)).tolist()]
exported = [program.module()(x).tolist(), program.module()(torch.ones(2)).tolist(),
            program.module()(torch.full((2,), 80.0)).tolist()]
record = [r for r in lazypatch.report() if r.name == name][0]
print("RESULT" + json.dumps(dict(
    name=name, imported_at_declaration=imported_at_declaration, replaced=replaced,
    restored=Clamp.__dict__["forward"] is original, eager=eager, same_eager=same_eager,
    exported=exported, fails_without=fails_without, dump=sorted(os.listdir(dump)),
    notes=list(record.notes))))
'''


def test_rewrite_control_flow_on_a_package_on_disk(tmp_path):
    package = tmp_path / "clamping_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "layers.py").write_text(textwrap.dedent(MODULE))
    dump = tmp_path / "dump"
    completed = subprocess.run([sys.executable, "-W", "ignore", "-c", CODE, str(dump)],
                               capture_output=True, text=True, timeout=300,
                               cwd=tmp_path, env={**__import__("os").environ,
                                                  "PYTHONPATH": str(tmp_path)})
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT")]
    assert lines, completed.stderr[-4000:]
    result = json.loads(lines[-1][len("RESULT"):])
    assert result["name"] == "export.control_flow.clamping_pkg.layers.Clamp.forward"
    assert not result["imported_at_declaration"]
    assert result["fails_without"]           # the `if` really is data-dependent
    assert result["replaced"] and result["restored"]
    assert result["same_eager"] == result["eager"]
    assert result["exported"] == result["eager"]
    stem = "clamping_pkg.layers.Clamp.forward"
    assert result["dump"] == [f"{stem}.diff", f"{stem}.original.py", f"{stem}.rewritten.py"]
    diff = (dump / f"{stem}.diff").read_text()
    assert "__lazypatch_if__" in diff and "-    if x.dtype" in diff
    assert any("written to" in note for note in result["notes"])


@pytest.mark.parametrize("target", ["no_colon.Class.method", "pkg.mod:Class.", "a:b:c", 3])
def test_bad_targets_fail_early(target):
    code = (f"import lazypatch.auto, lazypatch.registry.export as e\n"
            f"try:\n    e.rewrite_control_flow({target!r})\nexcept ValueError as error:\n"
            f"    print('RESULT', error)\n")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               timeout=120)
    assert "RESULT" in completed.stdout and "pkg.mod:Class.method" in completed.stdout, \
        completed.stdout + completed.stderr[-2000:]


BRANCHES = '''
import torch


def both(x):
    if x.sum() > 0:
        y = x * 2
    else:
        y = x - 1
    return y + 1


def chain(x):
    if x.sum() > 0:
        y = x * 2
        z = y + 1
    elif x.sum() > -10:
        y = x - 1
        z = y * 3
    else:
        y = -x
        z = y
    return y + z


def alias(x):
    if x.sum() > 0:
        y = x
    else:
        y = x * 3
    return y


def one_sided(x):
    if x.sum() > 0:
        w = x * 2
    else:
        v = x + 1
    return w
'''

BRANCHES_CODE = '''
import json, sys
import lazypatch
import torch
import lazypatch.registry.export as export_pack
names = {function: export_pack.rewrite_control_flow(f"branching:{function}")
         for function in ("both", "chain", "alias", "one_sided")}
import branching


class Calling(torch.nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, x):
        return self.function(x)


samples = [torch.tensor([1.0, 2.0]), torch.tensor([-3.0, 1.0, 0.5]), torch.tensor([-30.0, 1.0])]
result = {}
with lazypatch.patched(*names.values()):
    for function, name in names.items():
        if function == "one_sided":
            continue
        original = getattr(branching, function).__lazypatch_rewritten_from__
        program = torch.export.export(Calling(getattr(branching, function)), (samples[0],),
                                      dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))
        result[function] = all(torch.equal(program.module()(x), original(x)) for x in samples)
records = {record.name: record for record in lazypatch.report()}
result["one_sided"] = [records[names["one_sided"]].status, records[names["one_sided"]].reason]
print("RESULT" + json.dumps(result))
'''


def test_if_else_defining_names_in_both_branches_and_elif_chains(tmp_path):
    """The most common data-dependent forms (``if t: y = a`` / ``else: y = b``, ``elif``
    chains, a branch returning its input unchanged) export and match the original;
    a name one branch defines and the function reads after the ``if`` is reported."""
    (tmp_path / "branching.py").write_text(textwrap.dedent(BRANCHES))
    completed = subprocess.run([sys.executable, "-W", "ignore", "-c", BRANCHES_CODE],
                               capture_output=True, text=True, timeout=300, cwd=tmp_path,
                               env={**__import__("os").environ,
                                    "PYTHONPATH": os.pathsep.join(
                                        [str(tmp_path), os.environ.get("PYTHONPATH", "")])})
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT")]
    assert lines, completed.stderr[-4000:]
    result = json.loads(lines[-1][len("RESULT"):])
    assert result["both"] and result["chain"] and result["alias"], result
    status, reason = result["one_sided"]
    assert status == "skipped", result
    assert "w is first defined in one branch only and used outside the `if`" in reason

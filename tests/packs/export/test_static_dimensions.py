"""export.stop_if_static: a dimension declared dynamic that becomes static raises where
it happens, and the traceback shows the user's line. Off unless named exactly."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.stack

CODE = textwrap.dedent('''
    import json, traceback
    import lazypatch.auto, lazypatch
    import torch
    from torch.export import Dim

    class Reshaping(torch.nn.Module):
        def forward(self, x):
            y = x + 1
            return y.reshape(3, -1)   # USER LINE: makes dimension 0 the constant 3

    def attempt():
        try:
            torch.export.export(Reshaping(), (torch.ones(3, 4),),
                                dynamic_shapes=({0: Dim.DYNAMIC, 1: Dim.DYNAMIC},))
        except Exception as error:
            lines = "".join(traceback.format_exception(error))
            return dict(kind=type(error).__name__, message=str(error)[:400],
                        user_line="USER LINE" in lines)
        return dict(kind=None)

    without = attempt()
    with lazypatch.patched("export") as scope:
        with_pack = attempt()
        selected_by_pack = "export.stop_if_static" in scope.names
    with lazypatch.patched("export.stop_if_static"):
        named = attempt()
    print("RESULT" + json.dumps(dict(without=without, with_pack=with_pack, named=named,
                                     selected_by_pack=selected_by_pack)))
''')


def test_stop_if_static_raises_at_the_users_line(tmp_path):
    script = tmp_path / "user_model.py"   # a file: tracebacks show its lines
    script.write_text(CODE)
    completed = subprocess.run([sys.executable, "-W", "ignore", str(script)],
                               capture_output=True, text=True, timeout=300)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT")]
    assert lines, completed.stderr[-4000:]
    result = json.loads(lines[-1][len("RESULT"):])
    assert not result["selected_by_pack"]          # off unless named
    assert result["without"]["kind"] is not None   # torch also fails, at the end
    assert result["with_pack"]["kind"] == result["without"]["kind"]
    named = result["named"]
    assert named["kind"] == "DimensionBecameStatic", named
    assert named["user_line"], named
    assert "L['x'].size()[0]" in named["message"] and "constant 3" in named["message"], named

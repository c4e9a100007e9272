"""patch.wrap on a module's function where real training programs meet it: torch.compile
(backends eager and aot_eager, fullgraph too) runs the wrapper; copy, deepcopy and pickle
treat the wrapped function as the function it wraps (nn.TransformerEncoder deep-copies its
layer, EMA deep-copies the model, torch.save pickles it); torch.jit.script and trace still
compile code that calls it. Each in a fresh interpreter with the real torch."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.stack

WRAPPING = """
import copy, json, pickle
import lazypatch
import torch
import torch.nn.functional as F

calls = []

def doubled(wrapped, instance, args, kwargs):
    calls.append(1)
    return wrapped(*args, **kwargs) * 2

@lazypatch.when_imported("torch.nn.functional", name="demo.relu_twice")
def relu_twice(module, patch):
    patch.wrap(module, "relu", doubled)
"""


def test_torch_compile_runs_the_wrapper(interpreter):
    result = interpreter.run_json(WRAPPING + """
x = torch.tensor([-1.0, 2.0])
def model(t):
    return F.relu(t) + 1
out = {}
for backend in ("eager", "aot_eager"):
    compiled = torch.compile(model, backend=backend, fullgraph=(backend == "eager"))
    out[backend] = compiled(x).tolist()
out["plain"] = model(x).tolist()
print(json.dumps(out))
""", timeout=600)
    # relu(x) = [0, 2]; doubled: [0, 4]; + 1: [1, 5] -- the wrapper is not dropped
    assert result == {"eager": [1.0, 5.0], "aot_eager": [1.0, 5.0], "plain": [1.0, 5.0]}


def test_copy_deepcopy_pickle_and_models_holding_the_function(interpreter):
    result = interpreter.run_json(WRAPPING + """
import io
layer = torch.nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16,
                                         activation=F.relu, batch_first=True)
encoder = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
ema = copy.deepcopy(encoder)
buffer = io.BytesIO()
torch.save(encoder, buffer)
same = [copy.copy(F.relu) is F.relu, copy.deepcopy(F.relu) is F.relu,
        pickle.loads(pickle.dumps(F.relu)) is F.relu]
calls.clear()
encoder(torch.zeros(1, 3, 8))
print(json.dumps({"same": same, "layers": len(ema.layers), "saved": buffer.tell() > 0,
                  "wrapper_ran": len(calls) > 0, "wrapped": F.relu.__wrapped__.__name__}))
""", timeout=600)
    assert result == {"same": [True, True, True], "layers": 2, "saved": True,
                      "wrapper_ran": True, "wrapped": "relu"}


def test_torchscript_still_compiles_code_calling_the_wrapped_function(interpreter):
    result = interpreter.run_json(WRAPPING + """
def scripted(t: torch.Tensor) -> torch.Tensor:
    return F.relu(t)
compiled = torch.jit.script(scripted)
traced = torch.jit.trace(lambda t: F.relu(t), torch.tensor([-1.0, 2.0]))
lazypatch.unpatch("demo.relu_twice")
print(json.dumps({"script": compiled(torch.tensor([-1.0, 3.0])).tolist(),
                  "trace": traced(torch.tensor([-1.0, 3.0])).tolist(),
                  "restored": F.relu(torch.tensor([3.0])).tolist()}))
""", timeout=600)
    # scripted code runs no Python: the operator itself; the trace recorded the wrapper's ops
    assert result == {"script": [0.0, 3.0], "trace": [0.0, 6.0], "restored": [3.0]}

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


# A method, class method or static method keeps wrapt's FunctionWrapper (bound exactly as
# the original), taught to copy and pickle as a function or bound method does: by
# reference. A spawn DataLoader pickles its collate_fn (a dataset's bound method) for the
# worker, EMA deep-copies a model holding one.
DATASET = {"wrapped_dataset.py": """
import torch

class Squares(torch.utils.data.Dataset):
    def __init__(self, size):
        self.size = size
    def __len__(self):
        return self.size
    def __getitem__(self, index):
        return torch.tensor([float(index)])
    def collate(self, items):
        return torch.stack(items) ** 2
    @classmethod
    def build(cls, size):
        return cls(size)
    @staticmethod
    def scale(value):
        return value * 10
"""}


def test_wrapped_methods_copy_deepcopy_pickle_and_reach_a_spawn_dataloader(interpreter):
    result = interpreter.write(DATASET).run_json("""
import copy, json, pickle
import lazypatch
import torch

seen = []

def noting(wrapped, instance, args, kwargs):
    seen.append(type(instance).__name__ if instance is not None else None)
    return wrapped(*args, **kwargs)

@lazypatch.when_imported("wrapped_dataset", name="demo.dataset_calls")
def dataset_calls(module, patch):
    for name in ("collate", "build", "scale"):
        patch.wrap(module.Squares, name, noting)

if __name__ == "__main__":
    from wrapped_dataset import Squares
    data = Squares.build(4)
    data.tag = "original"
    out = {}
    for label, function in [("bound", data.collate), ("classmethod", Squares.build),
                            ("staticmethod", Squares.scale),
                            ("raw", Squares.__dict__["collate"])]:
        out[label] = [type(copy.copy(function)).__name__ != "",
                      callable(copy.deepcopy(function)),
                      callable(pickle.loads(pickle.dumps(function)))]
    twin = copy.deepcopy({"data": data, "collate": data.collate})
    out["deepcopy binds to the copy"] = twin["collate"].__self__ is twin["data"]
    out["raw by reference"] = pickle.loads(pickle.dumps(Squares.__dict__["collate"])) \\
        is Squares.__dict__["collate"]
    out["static"] = pickle.loads(pickle.dumps(Squares.scale))(2)
    seen.clear()
    loader = torch.utils.data.DataLoader(data, batch_size=2, collate_fn=data.collate,
                                         num_workers=1, multiprocessing_context="spawn")
    out["batches"] = [batch.flatten().tolist() for batch in loader]
    out["wrapper ran here"] = (data.collate([torch.tensor([3.0])]).item(), seen)
    print(json.dumps(out))
""", timeout=600)
    assert result == {
        "bound": [True, True, True], "classmethod": [True, True, True],
        "staticmethod": [True, True, True], "raw": [True, True, True],
        "deepcopy binds to the copy": True, "raw by reference": True, "static": 20,
        "batches": [[0.0, 1.0], [4.0, 9.0]], "wrapper ran here": [9.0, ["Squares"]]}


BLOCKS = {"wrapped_blocks.py": """
import torch

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)
        torch.nn.init.constant_(self.linear.weight, 0.5)
        torch.nn.init.constant_(self.linear.bias, 0.1)

    def forward(self, x):
        return self.helper(self.linear(x)) * 2

    def helper(self, x, shift: float = 0.0):
        return x + shift

    @classmethod
    def make(cls, x):
        return x * 4

    @staticmethod
    def scale(x, factor=3.0):
        return x * factor

def loss(prediction, target, weight=1.0, *, reduction="mean"):
    return ((prediction - target) ** 2).mean() * weight
"""}


def test_wrapped_methods_and_functions_compute_the_same_under_every_compile_backend(
        interpreter):
    """A module's function, a forward, a method, a class method and a static method
    wrapped with patch.wrap: torch.compile with backend eager and aot_eager gives what
    the program gives without compiling (the wrappers run), not the unwrapped result."""
    result = interpreter.write(BLOCKS).run_json("""
import json
import lazypatch
import torch

def plus_one(wrapped, instance, args, kwargs):
    return wrapped(*args, **kwargs) + 1

@lazypatch.when_imported("wrapped_blocks", name="demo.blocks")
def blocks(module, patch):
    for name in ("forward", "helper", "make", "scale"):
        patch.wrap(module.Block, name, plus_one)
    patch.wrap(module, "loss", plus_one)

import wrapped_blocks
from wrapped_blocks import Block
block = Block()

def program(x):
    y = block(x) + block.helper(x, 0.5) + Block.make(x) + block.scale(x)
    return wrapped_blocks.loss(y, x).reshape(1) + y.sum()

x = torch.ones(3)
out = {"eager": program(x).tolist()}
for backend in ("eager", "aot_eager"):
    torch._dynamo.reset()
    out[backend] = torch.compile(program, backend=backend)(x).tolist()
print(json.dumps(out))
""", timeout=600)
    assert result["eager"] == result["aot_eager"] == result["eager"], result
    unwrapped = interpreter.run_json("""
import json, torch, wrapped_blocks
block = wrapped_blocks.Block()
x = torch.ones(3)
y = block(x) + block.helper(x, 0.5) + wrapped_blocks.Block.make(x) + block.scale(x)
print(json.dumps((wrapped_blocks.loss(y, x).reshape(1) + y.sum()).tolist()))
""")
    assert result["eager"] != unwrapped, (result, unwrapped)


def test_a_wrapped_function_looks_like_its_original_to_inspect(interpreter):
    """signature and getfullargspec of what patch.wrap put in place (a module's function,
    a method, a class method, a static method) are the original's: mmcv 1.x's auto_fp16
    and force_fp32 map arguments by getfullargspec, so a decorator written that way
    casts the arguments it names."""
    result = interpreter.write(BLOCKS).run_json("""
import inspect, json
import torch
import wrapped_blocks
from wrapped_blocks import Block

def described(function):
    spec = inspect.getfullargspec(function)
    return [spec.args, spec.varargs, spec.varkw, list(spec.defaults or ()), spec.kwonlyargs,
            str(inspect.signature(function)), sorted(function.__annotations__)]

def originals():
    return {"loss": described(wrapped_blocks.loss), "helper": described(Block.helper),
            "bound": described(Block().helper), "make": described(Block.make),
            "scale": described(Block.scale)}

before = originals()

import lazypatch

seen = []

def passing(wrapped, instance, args, kwargs):
    seen.append([str(argument.dtype) for argument in args if hasattr(argument, "dtype")])
    return wrapped(*args, **kwargs)

lazypatch.register(lambda module, patch: [patch.wrap(module.Block, name, passing)
                                          for name in ("helper", "make", "scale")]
                   + [patch.wrap(module, "loss", passing)],
                   "wrapped_blocks", name="demo.inspect")
after = originals()

def cast_to_half(*names):          # how mmcv 1.x's auto_fp16(apply_to=...) finds arguments
    def decorate(function):
        parameters = inspect.getfullargspec(function).args
        def cast(*args, **kwargs):
            args = [a.half() if i < len(parameters) and parameters[i] in names else a
                    for i, a in enumerate(args)]
            return function(*args, **kwargs)
        return cast
    return decorate

casting = cast_to_half("target")(wrapped_blocks.loss)
casting(torch.ones(2), torch.zeros(2))
print(json.dumps({"before": before, "after": after, "cast": seen[-1]}))
""", timeout=600)
    assert result["after"] == result["before"], result
    assert result["before"]["loss"][0] == ["prediction", "target", "weight"], result
    assert result["cast"] == ["torch.float32", "torch.float16"], result

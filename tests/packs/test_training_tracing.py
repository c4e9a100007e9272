"""Tracing markers (training.tracing): module paths and operators in a torch.profiler trace."""

from __future__ import annotations

MODEL = """
import json
import lazypatch.auto
import lazypatch
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.encoder(x)).sum()

net = Net()
"""


def test_markers_carry_module_paths_operators_and_shapes(interpreter):
    result = interpreter.run_json(MODEL + """
import lazypatch.registry.training.tracing as tracing
formatted = []
original_format = tracing.format_operator
def counting(*args):
    formatted.append(1)
    return original_format(*args)
tracing.format_operator = counting

net(torch.randn(3, 4))                       # no profiler: nothing formatted
unprofiled = len(formatted)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
    net(torch.randn(3, 4))
profiler.export_chrome_trace("trace.json")
names = sorted({event["name"] for event in json.load(open("trace.json"))["traceEvents"]
                if "name" in event})
print(json.dumps({"unprofiled": unprofiled, "profiled": len(formatted), "names": names}))
""", env={"LAZYPATCH_ENABLE": "training.tracing"})
    assert result["unprofiled"] == 0
    assert result["profiled"] > 0
    names = result["names"]
    for expected in ("Net (Net)", "Net.encoder (Sequential)", "Net.encoder.0 (Linear)",
                     "Net.head (Linear)", "Net.encoder.0: linear([3, 4], [8, 4], [8])",
                     "Net.head: linear([3, 8], [2, 8], [2])", "Net: sum([3, 2])"):
        assert expected in names
    assert not [name for name in names if "_record_function" in name]


def test_tracing_is_opt_in_and_undone_exactly(interpreter):
    result = interpreter.run_json(MODEL + """
from torch.nn.modules import module as nn_module
from torch.overrides import _get_current_function_mode
before = [len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks),
          len(nn_module._global_forward_hooks_always_called), _get_current_function_mode() is None]
status_before = [r.status for r in lazypatch.report() if r.name == "training.tracing"][0]
lazypatch.enable("tracing")                  # by tag; torch is imported: applies at once
during = [len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks),
          type(_get_current_function_mode()).__name__]
lazypatch.unpatch("training.tracing")
after = [len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks),
         len(nn_module._global_forward_hooks_always_called), _get_current_function_mode() is None]
print(json.dumps([status_before, before, during, after, net(torch.ones(1, 4)).shape == ()]))
""")
    status_before, before, during, after, still_works = result
    assert status_before == "disabled"
    assert before == [0, 0, 0, True]
    assert during == [1, 1, "OperatorMarks"]
    assert after == before
    assert still_works is True

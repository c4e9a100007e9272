"""Tracing markers (training.tracing): module paths and operators in a torch.profiler trace."""

from __future__ import annotations

import sys

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
original_call = torch.nn.Module.__dict__["__call__"]
before = [len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks),
          len(nn_module._global_forward_hooks_always_called), _get_current_function_mode() is None,
          torch.nn.Module.__dict__["__call__"] is original_call]
status_before = [r.status for r in lazypatch.report() if r.name == "training.tracing"][0]
lazypatch.enable("tracing")                  # by tag; torch is imported: applies at once
def mode_name():
    mode = _get_current_function_mode()
    return type(mode).__name__ if mode is not None else None
during = [len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks),
          torch.nn.Module.__dict__["__call__"] is original_call, mode_name()]
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
    during.append(mode_name())               # the operator mode: only while recording
during.append(mode_name())
lazypatch.unpatch("training.tracing")
after = [len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks),
         len(nn_module._global_forward_hooks_always_called), _get_current_function_mode() is None,
         torch.nn.Module.__dict__["__call__"] is original_call]
print(json.dumps([status_before, before, during, after, net(torch.ones(1, 4)).shape == ()]))
""")
    status_before, before, during, after, still_works = result
    assert status_before == "disabled"
    assert before == [0, 0, 0, True, True]
    # nn.Module.__call__ wrapped (no global hook); the operator mode only while recording
    assert during == [0, 0, False, None, "OperatorMarks", None]
    assert after == before
    assert still_works is True


BACKWARD_RUN = MODEL + """
from torch.utils.checkpoint import checkpoint
from lazypatch.registry.training.module_table import module_table, module_times, profile_events

class Checkpointed(torch.nn.Module):
    def __init__(self, reentrant):
        super().__init__()
        self.reentrant = reentrant
        self.segment = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
        self.out = torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.out(checkpoint(self.segment, x, use_reentrant=self.reentrant)).sum()

unrecorded = net(torch.randn(3, 4))
unmarked = dict(unrecorded.grad_fn.metadata)
unrecorded.backward()
models = [net, Checkpointed(False), Checkpointed(True)]
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
    for model in models:
        model(torch.randn(3, 4)).backward()
profiler.export_chrome_trace("trace.json")
events = [event for event in json.load(open("trace.json"))["traceEvents"]
          if event.get("ph") == "X"]
ranges = [(event["name"], event["ts"], event["ts"] + event["dur"], event["tid"])
          for event in events if " (backward): " in event["name"]]
backward_mm = [event for event in events if event["name"] in ("aten::mm", "aten::tanh_backward")
               and event["ts"] > min(start for _, start, _, _ in ranges)]
enclosing = [sorted(name for name, start, end, tid in ranges
                    if tid == event["tid"] and start <= event["ts"] <= end)
             for event in backward_mm]
times = module_times(profile_events(profiler))
print(json.dumps({"unmarked": unmarked, "names": sorted({name for name, *_ in ranges}),
                  "enclosing": enclosing,
                  "times": {path: [t.calls, t.forward_us, t.backward_us]
                            for path, t in times.items()},
                  "table": module_table(profiler)}))
"""


def test_backward_operators_are_marked_with_the_module_that_made_them(interpreter):
    result = interpreter.run_json(BACKWARD_RUN, env={"LAZYPATCH_ENABLE": "training.tracing"})
    assert result["unmarked"] == {}                  # no profiler: nodes are left alone
    names = result["names"]
    for expected in ("Net (backward): SumBackward0", "Net.head (backward): AddmmBackward0",
                     "Net.encoder.1 (backward): ReluBackward0",
                     "Net.encoder.0 (backward): AddmmBackward0",
                     "Checkpointed.out (backward): AddmmBackward0",
                     "Checkpointed.segment.1 (backward): TanhBackward0",
                     "Checkpointed.segment.0 (backward): AddmmBackward0"):
        assert expected in names
    # every backward matrix product and tanh gradient ran inside its module's range
    assert result["enclosing"] and all(result["enclosing"])
    for enclosing in result["enclosing"]:
        assert all(name.split(" ")[0].split(".")[0] in ("Net", "Checkpointed")
                   for name in enclosing)
    times = result["times"]
    assert times["Net.head"][0] == 1 and times["Net.head"][1] > 0 and times["Net.head"][2] > 0
    # a module's backward includes its submodules'
    assert times["Net"][2] >= times["Net.encoder"][2] >= times["Net.encoder.0"][2] > 0
    assert times["Checkpointed.segment"][2] > 0
    table = result["table"].splitlines()
    assert table[0].split() == ["module", "type", "calls", "forward", "ms", "backward", "ms"]
    assert any(line.split()[:3] == ["Net", "Net", "1"] for line in table)
    assert any(line.split()[:2] == ["head", "Linear"] for line in table)


PROFILED_LOOP = """
import lazypatch.auto
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(8):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_profiled_run_at_level_1_prints_the_module_table(interpreter):
    interpreter.write({"loop.py": PROFILED_LOOP})
    result = interpreter.run_command(
        [sys.executable, "loop.py"],
        env={"LAZYPATCH_PROFILE": str(interpreter.root / "profile"),
             "LAZYPATCH_PROFILE_LEVEL": "1", "LAZYPATCH_PROFILE_SKIP": "2",
             "LAZYPATCH_ENABLE": "training.tracing"})
    assert "time per module" in result.stderr
    table = result.stderr[result.stderr.index("time per module"):].splitlines()[1:]
    rows = {line.split()[0]: line.split() for line in table if line.strip()}
    assert rows["Sequential"][1:3] == ["Sequential", "1"]     # one active step recorded
    assert float(rows["Sequential"][4]) > 0                   # backward time
    assert rows["2"][1] == "Linear"                           # Sequential.2, indented


def test_collectives_are_marked_with_group_and_sizes(interpreter):
    """A real gloo group on 127.0.0.1 (one rank, bounded by a timeout)."""
    result = interpreter.run_json(MODEL + """
import datetime
import socket
import torch.distributed as dist

with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=30))

class Synced(torch.nn.Module):
    def forward(self, x):
        dist.all_reduce(x)
        return x

unrecorded = Synced()(torch.ones(16))
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
    Synced()(torch.ones(16))
    dist.broadcast(torch.ones(2, 3, dtype=torch.float64), src=0)
profiler.export_chrome_trace("trace.json")
dist.destroy_process_group()
names = sorted({event["name"] for event in json.load(open("trace.json"))["traceEvents"]
                if "name" in event})
print(json.dumps([name for name in names if "group" in name]))
""", env={"LAZYPATCH_ENABLE": "training.tracing"})
    assert "Synced: all_reduce([16] float32 64 B; group 0 (gloo, rank 0 of 1))" in result
    assert "broadcast([2, 3] float64 48 B; group 0 (gloo, rank 0 of 1))" in result


def test_call_site_in_the_outermost_range_and_the_module_table(interpreter):
    result = interpreter.run_json(MODEL + """
import sys
from lazypatch.registry.training.module_table import module_table
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
    for _ in range(2):
        line = sys._getframe().f_lineno; net(torch.randn(3, 4)).backward()
names = sorted({event.key for event in profiler.key_averages()})
print(json.dumps([line, [name for name in names if " @ " in name], module_table(profiler)]))
""", env={"LAZYPATCH_ENABLE": "training.tracing", "LAZYPATCH_TRACE_CALL_SITES": "1"})
    line, with_site, table = result
    assert with_site == [f"Net (Net) @ _scenario.py:{line}"]   # the outermost range only
    rows = table.splitlines()
    assert rows[0].endswith("called from")
    net_row = next(row.split() for row in rows if row.startswith("Net "))
    assert net_row[:3] == ["Net", "Net", "2"] and net_row[-1] == f"_scenario.py:{line}"
    assert all("_scenario.py" not in row for row in rows if not row.startswith("Net "))


def test_operators_of_a_model_running_in_another_thread_are_marked(interpreter):
    """torch keeps the function-mode stack per thread: the tracker's forward hooks enter
    the operator mode there for each outermost module call and leave it after. The thread
    profiles itself (torch.profiler records only the threads where it was started)."""
    result = interpreter.run_json(MODEL + """
import threading
from torch.overrides import _get_current_function_mode

def modes():
    mode = _get_current_function_mode()
    return type(mode).__name__ if mode is not None else None

seen = {}

def work():
    seen["before"] = modes()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        net(torch.randn(3, 4))
        seen["after forward"] = modes()
        torch.randn(2, 2).mul(3)                     # outside every module: not marked
    seen["names"] = sorted({event.key for event in profiler.key_averages()})

lazypatch.enable("training.tracing")
worker = threading.Thread(target=work)
worker.start()
worker.join()
home = modes()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
    home_profiling = modes()
lazypatch.unpatch("training.tracing")
print(json.dumps([seen, home, home_profiling, modes()]))
""")
    seen, home, home_profiling, after_undo = result
    assert seen["before"] is None and seen["after forward"] is None
    names = seen["names"]
    for expected in ("Net (Net)", "Net.encoder.0: linear([3, 4], [8, 4], [8])",
                     "Net.head: linear([3, 8], [2, 8], [2])", "Net: sum([3, 2])"):
        assert expected in names
    assert not [name for name in names if name.startswith("mul(")]
    # on the applying thread the mode is entered while a profiler records there
    assert home is None and home_profiling == "OperatorMarks" and after_undo is None

"""The module tracker (training.tracker) against PyTorch's ModTracker, on real small models.

Both trackers run on the same step; a TorchDispatchMode samples ``parents``
and ``is_bw`` of each at every aten operator, forward and backward. Where
the two differ on purpose, the test says which operators and why.
"""

from __future__ import annotations

MODELS = '''
"""Small real models for comparing module trackers."""
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class BasicBlock(nn.Module):
    def __init__(self, channels_in, channels_out, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels_out)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(channels_out, channels_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels_out)
        self.downsample = None
        if stride != 1 or channels_in != channels_out:
            self.downsample = nn.Sequential(nn.Conv2d(channels_in, channels_out, 1, stride, bias=False),
                                            nn.BatchNorm2d(channels_out))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNetStyle(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.layer1 = nn.Sequential(BasicBlock(8, 8), BasicBlock(8, 8))
        self.layer2 = nn.Sequential(BasicBlock(8, 16, 2), BasicBlock(16, 16))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


class TransformerBlock(nn.Module):
    def __init__(self, width=32, heads=4):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        y = self.norm1(x)
        x = x + self.attention(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocabulary=50, width=32):
        super().__init__()
        self.embed = nn.Embedding(vocabulary, width)
        self.blocks = nn.Sequential(TransformerBlock(width), TransformerBlock(width))
        self.head = nn.Linear(width, vocabulary)

    def forward(self, tokens):
        return self.head(self.blocks(self.embed(tokens)))


class CheckpointedShared(nn.Module):
    """A shared block called twice, and a segment run under activation checkpointing."""

    def __init__(self, reentrant=False, width=16):
        super().__init__()
        self.reentrant = reentrant
        self.inp = nn.Linear(8, width)
        self.shared = nn.Sequential(nn.Linear(width, width), nn.Tanh())
        self.segment = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        x = self.shared(self.shared(self.inp(x)))
        x = checkpoint(self.segment, x, use_reentrant=self.reentrant)
        return self.out(x)


def batch(model):
    torch.manual_seed(0)
    if isinstance(model, ResNetStyle):
        return torch.randn(4, 3, 16, 16)
    if isinstance(model, TinyTransformer):
        return torch.randint(0, 50, (2, 6))
    return torch.randn(4, 8)
'''

SAMPLER = """
import json
import sys
import threading
import warnings

import torch
from torch.distributed._tools.mod_tracker import ModTracker
from torch.utils._python_dispatch import TorchDispatchMode

import lazypatch.registry.training
from lazypatch.registry.training import module_tracker
import models

ours = module_tracker()


class Sampler(TorchDispatchMode):
    \"\"\"Record both trackers' view at every aten operator.\"\"\"

    def __init__(self, anchor=None):
        super().__init__()
        self.anchor = anchor
        self.rows = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        row = [func.__name__, ours.is_bw, sorted(ours.parents)]
        if self.anchor is not None:
            row += [self.anchor.is_bw, sorted(self.anchor.parents)]
        self.rows.append(row)
        return func(*args, **(kwargs or {}))


def training_step(model, anchor=None, steps=2):
    \"\"\"Forward and backward (twice: the second accumulates gradients), sampled.\"\"\"
    sample = models.batch(model)
    model.zero_grad(set_to_none=True)
    with Sampler(anchor) as sampler:
        for _ in range(steps):
            model(sample).float().mean().backward()
    return sampler.rows
"""


def compare(interpreter, model_expression):
    interpreter.write({"models.py": MODELS})
    return interpreter.run_json(SAMPLER + f"""
model = {model_expression}
with ours, ModTracker() as anchor:
    rows = training_step(model, anchor)
print(json.dumps(rows))
""")


def differences(rows):
    return [row for row in rows if row[1] != row[3] or row[2] != row[4]]


def test_same_parents_as_modtracker_on_a_resnet_style_network(interpreter):
    rows = compare(interpreter, "models.ResNetStyle()")
    assert differences(rows) == []
    backward = [row for row in rows if row[1]]
    assert len(backward) > 20 and len(rows) - len(backward) > 20
    convolutions = [row[2] for row in backward if row[0] == "convolution_backward.default"]
    assert ["Global", "ResNetStyle", "ResNetStyle.layer2", "ResNetStyle.layer2.1",
            "ResNetStyle.layer2.1.conv2"] in convolutions
    # conv1 and the downsample read the same input: both stay until its gradient is complete
    assert any({"ResNetStyle.layer2.0.downsample.0", "ResNetStyle.layer2.0.conv1"} <= set(names)
               for names in convolutions)


def test_same_parents_as_modtracker_on_a_transformer_block(interpreter):
    rows = compare(interpreter, "models.TinyTransformer()")
    assert differences(rows) == []
    backward_names = {name for row in rows if row[1] for name in row[2]}
    assert {"TinyTransformer.blocks.1.attention", "TinyTransformer.blocks.0.mlp.1",
            "TinyTransformer.embed"} <= backward_names


def test_same_parents_with_a_reused_submodule_and_non_reentrant_checkpoint(interpreter):
    rows = compare(interpreter, "models.CheckpointedShared(reentrant=False)")
    assert differences(rows) == []
    # the checkpointed segment's forward runs again inside the backward
    recomputed = [row for row in rows if row[1] and row[0] == "addmm.default"
                  and "CheckpointedShared.segment.0" in row[2]]
    assert recomputed


def test_reentrant_checkpoint_inner_backward_names_the_segment_modtracker_does_not(interpreter):
    """ModTracker registers no backward markers while a backward runs (``is_bw``), so the
    re-entrant checkpoint's recomputed forward gets none and its inner backward is
    attributed to the enclosing model only. Ours registers them whenever gradients are
    enabled: the only differences are segment modules added to backward operators."""
    rows = compare(interpreter, "models.CheckpointedShared(reentrant=True)")
    found = differences(rows)
    assert found
    for _operator, our_bw, our_parents, anchor_bw, anchor_parents in found:
        assert our_bw and anchor_bw
        assert set(anchor_parents) < set(our_parents)
        assert all(extra.startswith("CheckpointedShared.segment")
                   for extra in set(our_parents) - set(anchor_parents))
    assert any("CheckpointedShared.segment.2" in row[2] and row[0] == "mm.default"
               for row in found)


def test_recursive_module_same_parents_and_no_modtracker_warning_here(interpreter):
    """A module calling itself: ModTracker warns that its tracking "may be messed up"
    (the name is already in its set); ours keeps one entry per call."""
    interpreter.write({"models.py": MODELS})
    result = interpreter.run_json(SAMPLER + """
class Recurrent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = torch.nn.Linear(4, 4)

    def forward(self, x, depth=3):
        x = torch.tanh(self.cell(x))
        return self(x, depth - 1) if depth else x

model = Recurrent()
ours_warnings = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with ours:
        model(torch.ones(2, 4)).sum().backward()
    ours_warnings = [str(w.message) for w in caught]
    with ours, ModTracker() as anchor:
        with Sampler(anchor) as sampler:
            model(torch.ones(2, 4)).sum().backward()
    anchor_warnings = [str(w.message) for w in caught][len(ours_warnings):]
print(json.dumps([sampler.rows, ours_warnings, anchor_warnings]))
""")
    rows, ours_warnings, anchor_warnings = result
    assert differences(rows) == []
    assert any(row[1] and "Recurrent.cell" in row[2] for row in rows)
    assert ours_warnings == []
    assert any("messed up" in message for message in anchor_warnings)


def test_threads_forward_elsewhere_and_concurrent_backwards(interpreter):
    """ModTracker's one set shows a module running in another thread; ours is per thread
    (forward) and per autograd graph task (backward), so two threads training two models
    at once each see exactly what they see alone."""
    interpreter.write({"models.py": MODELS})
    result = interpreter.run_json(SAMPLER + """
class Waiting(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 2)
        self.inside, self.release = threading.Event(), threading.Event()

    def forward(self, x):
        x = self.layer(x)
        self.inside.set()
        self.release.wait(30)
        return x

elsewhere, model = Waiting(), models.ResNetStyle()
with ours, ModTracker() as anchor:
    worker = threading.Thread(target=lambda: elsewhere(torch.ones(1, 2)))
    worker.start()
    elsewhere.inside.wait(30)
    while_elsewhere = training_step(model, anchor, steps=1)
    elsewhere.release.set()
    worker.join()

transformer = models.TinyTransformer()
with ours:
    alone = [training_step(model), training_step(transformer)]
    together = [None, None]
    barrier = threading.Barrier(2)

    def train(index, network):
        barrier.wait()
        together[index] = training_step(network)

    sys.setswitchinterval(1e-5)   # interleave the two threads finely
    threads = [threading.Thread(target=train, args=(0, model)),
               threading.Thread(target=train, args=(1, transformer))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    left_over = list(ours.active_tasks())
print(json.dumps([while_elsewhere, alone, together, left_over]))
""")
    while_elsewhere, alone, together, left_over = result
    assert all("Waiting" not in row[2] for row in while_elsewhere)
    assert all("Waiting" in row[4] for row in while_elsewhere)       # ModTracker's shared set
    assert [[row[0], row[1], row[2]] for row in while_elsewhere] == \
        [[row[0], row[3], [name for name in row[4] if name != "Waiting"]]
         for row in while_elsewhere]                                  # the only difference
    assert together == alone
    assert left_over == []


def test_no_grad_forward_leaves_nothing_behind(interpreter):
    """Under torch.no_grad no autograd node is made, so ours registers nothing; ModTracker
    queues a "backward over" marker per module call and runs them all at the next backward."""
    interpreter.write({"models.py": MODELS})
    result = interpreter.run_json(SAMPLER + """
model = models.ResNetStyle()
with ours, ModTracker() as anchor:
    with torch.no_grad(), Sampler(anchor) as sampler:
        for _ in range(3):
            model(models.batch(model))
    queued = len(anchor._post_bw_callbacks_to_enqueue)
    rows = training_step(model, anchor)
    left_over = list(ours.active_tasks())
print(json.dumps([sampler.rows, queued, rows, left_over]))
""")
    evaluation, queued, rows, left_over = result
    assert differences(evaluation) == [] and not any(row[1] for row in evaluation)
    assert any("ResNetStyle.layer1.0.conv1" in row[2] for row in evaluation)
    assert queued >= 3 * 20
    assert differences(rows) == []
    assert left_over == []


def test_module_created_after_tracking_started_gets_its_qualified_name(interpreter):
    """ModTracker names a model's subtree when the model first runs; a head attached
    later is "Linear" there. Ours finds it under the module whose forward called it."""
    interpreter.write({"models.py": MODELS})
    result = interpreter.run_json(SAMPLER + """
model = models.ResNetStyle()
with ours, ModTracker() as anchor:
    training_step(model, anchor, steps=1)
    model.fc = torch.nn.Linear(16, 3)
    rows = training_step(model, anchor, steps=1)
print(json.dumps([rows, ours.get_known_fqn(model.fc), anchor.get_known_fqn(model.fc)]))
""")
    rows, our_name, anchor_name = result
    assert [our_name, anchor_name] == ["ResNetStyle.fc", "Linear"]
    found = differences(rows)
    assert found
    for row in found:
        assert sorted(name.replace("ResNetStyle.fc", "Linear") for name in row[2]) == \
            sorted(name.replace("ResNetStyle.fc", "Linear") for name in row[4])


def test_user_hooks_fire_like_modtrackers(interpreter):
    interpreter.write({"models.py": MODELS})
    result = interpreter.run_json(SAMPLER + """
def recorder(tracker, events):
    def hook(kind):
        def record(module, *args):
            name = tracker.get_known_fqn(module)
            events.append([kind, name, name in tracker.parents])
        return record
    tracker.register_user_hooks(hook("pre_fw"), hook("post_fw"), hook("pre_bw"),
                                hook("post_bw"))

model = models.CheckpointedShared()
with ours, ModTracker() as anchor:
    ours_events, anchor_events = [], []
    recorder(ours, ours_events)
    recorder(anchor, anchor_events)
    training_step(model, anchor, steps=1)
    try:
        ours.register_user_hooks(pre_fw_hook=print)
        refused = False
    except AssertionError:
        refused = True
    ours.clear_user_hooks()
print(json.dumps([ours_events, anchor_events, refused]))
""")
    ours_events, anchor_events, refused = result
    assert ours_events == anchor_events
    kinds = {kind for kind, _, _ in ours_events}
    assert kinds == {"pre_fw", "post_fw", "pre_bw", "post_bw"}
    assert all(present for _, _, present in ours_events)
    assert ours_events.count(["pre_bw", "CheckpointedShared.shared", True]) == 2   # reused
    assert refused


def test_tracker_pack_is_opt_in_and_undone_exactly(interpreter):
    interpreter.write({"models.py": MODELS})
    result = interpreter.run_json("""
import json
import lazypatch.auto
import lazypatch
import torch
from torch.nn.modules import module as nn_module
from lazypatch.registry.training import module_tracker
import models

original_call = torch.nn.Module.__dict__["__call__"]

def hook_counts():
    # no global module hook (they would send every module call down _call_impl's slow
    # path): one wrapper of nn.Module.__call__, the original back after the undo
    return [len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks),
            torch.nn.Module.__dict__["__call__"] is original_call]

status = {r.name: r.status for r in lazypatch.report()}["training.tracker"]
before = hook_counts()
lazypatch.enable("tracker")
tracker = module_tracker()
seen = []
tracker.register_user_hooks(pre_fw_hook=lambda module, args: seen.append(sorted(tracker.parents)))
model = models.CheckpointedShared()
model(models.batch(model))
during = [hook_counts(), tracker.tracking]
lazypatch.unpatch("training.tracker")
print(json.dumps([status, before, during, hook_counts(), tracker.tracking, seen[:2]]))
""")
    status, before, during, after, tracking_after, seen = result
    assert status == "disabled"
    assert before == [0, 0, True]
    assert during == [[0, 0, False], True]
    assert after == before and tracking_after is False
    assert seen == [["CheckpointedShared", "Global"],
                    ["CheckpointedShared", "CheckpointedShared.inp", "Global"]]


BACKWARD_WANTED = """
import json
import lazypatch.auto
import lazypatch
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from lazypatch.registry.training import module_tracker
import models

tracker = module_tracker()


class Sampler(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.rows = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.rows.append([tracker.is_bw, sorted(tracker.parents)])
        return func(*args, **(kwargs or {}))


def names_seen(model):
    # the module names in ``parents`` at forward and at backward operators
    with Sampler() as sampler:
        model(models.batch(model)).float().mean().backward()
    return [sorted({name for is_bw, names in sampler.rows if is_bw == backward for name in names})
            for backward in (False, True)]


model = models.ResNetStyle()
lazypatch.enable("tracker")
"""


def test_pack_tracks_backward_only_when_asked(interpreter):
    """Applied alone, the pack tracks forward only (node hooks per module call were most
    of its idle cost); user backward hooks, a ``with`` block, or
    LAZYPATCH_TRACKER_BACKWARD=1 turn backward tracking on, and it goes off again."""
    interpreter.write({"models.py": MODELS})
    result = interpreter.run_json(BACKWARD_WANTED + """
forward_only = names_seen(model)
flags = [tracker.tracks_backward]
tracker.register_user_hooks(pre_bw_hook=lambda module, grads: None)
flags.append(tracker.tracks_backward)
with_hook = names_seen(model)
tracker.clear_user_hooks()
flags.append(tracker.tracks_backward)
after_clear = names_seen(model)
with tracker:
    flags.append(tracker.tracks_backward)
    in_block = names_seen(model)
flags.append(tracker.tracks_backward)
print(json.dumps([forward_only, with_hook, after_clear, in_block, flags]))
""")
    forward_only, with_hook, after_clear, in_block, flags = result
    assert flags == [False, True, False, True, False]
    assert "ResNetStyle.layer2.1.conv2" in forward_only[0]       # forward is tracked
    assert forward_only[1] == ["Global"] and after_clear[1] == ["Global"]
    for tracked in (with_hook, in_block):
        assert tracked[0] == forward_only[0]
        assert {"ResNetStyle.layer2.1.conv2", "ResNetStyle.stem.0"} <= set(tracked[1])
    by_setting = interpreter.run_json(BACKWARD_WANTED + """
print(json.dumps([tracker.tracks_backward, names_seen(model)]))
""", env={"LAZYPATCH_TRACKER_BACKWARD": "1"})
    assert by_setting[0] is True
    assert by_setting[1][1] == in_block[1]


def test_call_sites_are_found_once_per_line_at_the_outermost_call(interpreter):
    """LAZYPATCH_TRACE_CALL_SITES=1: the tracker knows which line called the model, from
    the outermost module call only (never per submodule or operator), formatted once per
    distinct line; a checkpointed segment recomputed during backward names the line
    that called ``backward()``."""
    interpreter.write({"models.py": MODELS})
    script = """
import json
import sys
import lazypatch.auto
import lazypatch
import torch
from lazypatch.registry.training import module_tracker
import models

lazypatch.enable("tracker")
tracker = module_tracker()
lookups, seen = [], []
find = tracker._caller
tracker._caller = lambda frame: lookups.append(1) or find(frame)
tracker.register_user_hooks(pre_fw_hook=lambda module, args: seen.append(
    [tracker.get_known_fqn(module), tracker.is_bw, tracker.call_site]))
model = models.CheckpointedShared()
x = models.batch(model)
for _ in range(3):
    first_line = sys._getframe().f_lineno; loss = model(x).sum()
second_line = sys._getframe().f_lineno; loss = model(x).sum()
backward_line = sys._getframe().f_lineno; loss.backward()
print(json.dumps([first_line, second_line, backward_line, len(lookups), len(tracker._sites),
                  seen, tracker.call_site]))
"""
    first, second, backward, lookups, distinct, seen, outside = interpreter.run_json(
        script, env={"LAZYPATCH_TRACE_CALL_SITES": "1"})
    forward = [row for row in seen if not row[1]]
    assert len(forward) == 4 * 13                    # 13 module calls per forward
    assert {row[2] for row in forward[:39]} == {f"_scenario.py:{first}"}
    assert {row[2] for row in forward[39:]} == {f"_scenario.py:{second}"}
    recomputed = [row for row in seen if row[1]]
    assert recomputed and recomputed[0][0] == "CheckpointedShared.segment"
    assert {row[2] for row in recomputed} == {f"_scenario.py:{backward}"}
    outermost_calls = 4 + 1                          # four forwards, one recomputation
    assert lookups == outermost_calls and distinct == 3
    assert outside == ""
    unset = interpreter.run_json(script)
    assert unset[3] == 0 and {row[2] for row in unset[5]} == {""}

"""Small CUDA-era programs, unmodified, run to completion on the CPU under the device pack.

Each script below is written the way such programs were written for a GPU
machine (no ``import lazypatch``): it runs once under
``lazypatch run --enable device -- python program.py`` and must print its result; it runs once without
the pack and must fail on this CPU-only machine, so each test can fail.
"""

from __future__ import annotations

import json
import sys

import pytest

THREADS = {"OMP_NUM_THREADS": "1"}
# What a user types: the program is not edited, lazypatch runs it.
UNDER_THE_PACK = [sys.executable, "-m", "lazypatch", "run", "--enable", "device", "--"]

# The apex / YOLOX data prefetcher: host-to-device copies on a side stream,
# wait_stream before use, record_stream so the caching allocator keeps the
# memory alive; pinned memory, non_blocking copies, normalisation on device.
PREFETCHER = '''
import json
import torch
from torch.utils.data import DataLoader, TensorDataset


class DataPrefetcher:
    def __init__(self, loader):
        self.loader = iter(loader)
        self.stream = torch.cuda.Stream()
        self.mean = torch.tensor([0.5, 0.5, 0.5]).cuda().view(1, 3, 1, 1)
        self.std = torch.tensor([0.25, 0.25, 0.25]).cuda().view(1, 3, 1, 1)
        self.preload()

    def preload(self):
        try:
            self.next_input, self.next_target = next(self.loader)
        except StopIteration:
            self.next_input = None
            self.next_target = None
            return
        with torch.cuda.stream(self.stream):
            self.next_input = self.next_input.cuda(non_blocking=True)
            self.next_target = self.next_target.cuda(non_blocking=True)
            self.next_input = self.next_input.float().sub_(self.mean).div_(self.std)

    def next(self):
        torch.cuda.current_stream().wait_stream(self.stream)
        input, target = self.next_input, self.next_target
        if input is not None:
            input.record_stream(torch.cuda.current_stream())
        if target is not None:
            target.record_stream(torch.cuda.current_stream())
        self.preload()
        return input, target


torch.manual_seed(0)
images = torch.rand(12, 3, 4, 4)
labels = torch.arange(12) % 3
loader = DataLoader(TensorDataset(images, labels), batch_size=4, pin_memory=True)
prefetcher = DataPrefetcher(loader)
total, batches = 0.0, 0
input, target = prefetcher.next()
while input is not None:
    assert isinstance(prefetcher.stream, torch.cuda.Stream)
    total += float(input.sum()) + float(target.sum())
    batches += 1
    input, target = prefetcher.next()
expected = float(((images - 0.5) / 0.25).sum()) + float(labels.sum())
print(json.dumps({"batches": batches, "close": abs(total - expected) < 1e-3}))
'''

# A COCO-style evaluator of the YOLOX era: legacy tensor types chosen by a flag,
# x.type(tensor_type), torch.cuda.FloatTensor buffers, half precision for speed.
EVALUATOR = '''
import json
import torch
import torch.nn as nn

torch.manual_seed(0)
tensor_type = torch.cuda.HalfTensor if True else torch.cuda.FloatTensor
model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten()).cuda()
model = model.half().eval()
images = torch.rand(6, 3, 8, 8)
scores = torch.cuda.FloatTensor(len(images)).zero_()
with torch.no_grad():
    for index in range(0, len(images), 2):
        batch = images[index:index + 2].type(tensor_type)
        output = model(batch)
        scores[index:index + 2] = output.type("torch.cuda.FloatTensor").max(dim=1).values
        assert isinstance(batch, torch.cuda.HalfTensor)
ids = torch.cuda.LongTensor([int(i) for i in scores.argsort(descending=True)])
print(json.dumps({"n": int(ids.numel()), "dtype": str(scores.dtype),
                  "finite": bool(torch.isfinite(scores).all())}))
'''

# Resume from a checkpoint saved on a GPU machine (storages tagged "cuda:0"):
# torch.load without map_location, as on the machine that wrote it, then the
# optimizer state onto the model's device, then a few more steps.
RESUME_WRITER = '''
import torch
import torch.nn as nn
torch.serialization.register_package(1, lambda obj: "cuda:0", lambda obj, loc: None)
torch.manual_seed(0)
model = nn.Linear(4, 1)
optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for _ in range(3):
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
torch.save({"epoch": 3, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "rng": torch.get_rng_state(), "x": x, "y": y}, "checkpoint_cuda.pth")
'''

RESUME = '''
import json
import torch
import torch.nn as nn

checkpoint = torch.load("checkpoint_cuda.pth")
model = nn.Linear(4, 1).cuda()
model.load_state_dict(checkpoint["model"])
optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
optimizer.load_state_dict(checkpoint["optimizer"])
for state in optimizer.state.values():
    for key, value in state.items():
        if torch.is_tensor(value) and key != "step":
            state[key] = value.cuda()
x, y = checkpoint["x"].cuda(non_blocking=True), checkpoint["y"].to("cuda:0")
losses = []
for epoch in range(checkpoint["epoch"], 6):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
print(json.dumps({"epochs": len(losses), "improves": losses[-1] < losses[0],
                  "device": str(next(model.parameters()).device)}))
'''

# TorchScript inference: a scripted model saved elsewhere, loaded with
# map_location="cuda", a scripted post-processing function calling factories.
TORCHSCRIPT_WRITER = '''
import torch
torch.manual_seed(0)
model = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Softmax(dim=1)))
model.save("classifier.pt")
'''

TORCHSCRIPT = '''
import json
import torch


@torch.jit.script
def postprocess(probabilities: torch.Tensor, threshold: float) -> torch.Tensor:
    keep = torch.zeros_like(probabilities, dtype=torch.bool)
    best = probabilities.argmax(dim=1)
    keep[torch.arange(probabilities.shape[0]), best] = True
    return keep & (probabilities > torch.full_like(probabilities, threshold))


model = torch.jit.load("classifier.pt", map_location="cuda")
model.eval()
inputs = torch.randn(5, 4).cuda()
with torch.no_grad():
    probabilities = model(inputs)
    torch.cuda.synchronize()
kept = postprocess(probabilities, 0.0)
print(json.dumps({"rows": int(kept.sum()), "sums": [round(float(s), 4)
                  for s in probabilities.sum(dim=1)]}))
'''

# Mixed precision in the torch.cuda.amp style of 2020-2023 scripts.
MIXED_PRECISION = '''
import json
import torch
import torch.nn as nn

torch.manual_seed(0)
torch.backends.cudnn.benchmark = True
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
scaler = torch.cuda.amp.GradScaler(init_scale=2.0 ** 8)
x = torch.randn(64, 8, device="cuda")
y = x.sum(dim=1, keepdim=True)
losses = []
for step in range(20):
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.amp.autocast(dtype=torch.bfloat16):
        loss = nn.functional.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    losses.append(loss.item())
print(json.dumps({"improves": losses[-1] < losses[0], "scale": scaler.get_scale(),
                  # the process's peak memory on the CPU: more than torch alone takes
                  "max_memory_over_100_mib": torch.cuda.max_memory_allocated() > 100 * 2**20}))
'''

# An mmengine training step: a BaseModel moved with .cuda(), its data
# preprocessor moving batches to the model's device, an OptimWrapper.
MMENGINE = '''
import json
import torch
import torch.nn as nn
from mmengine.model import BaseModel
from mmengine.optim import OptimWrapper


class Regressor(BaseModel):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 1)

    def forward(self, inputs, targets=None, mode="tensor"):
        predictions = self.linear(inputs)
        if mode == "loss":
            return {"loss": nn.functional.mse_loss(predictions, targets)}
        return predictions


torch.manual_seed(0)
model = Regressor().cuda()
optim_wrapper = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1))
inputs = torch.randn(16, 4)
data = {"inputs": inputs, "targets": inputs.sum(dim=1, keepdim=True)}
losses = [float(model.train_step(data, optim_wrapper)["loss"]) for _ in range(10)]
print(json.dumps({"improves": losses[-1] < losses[0],
                  "device": str(next(model.parameters()).device)}))
'''

PROGRAMS = {
    "prefetcher": (PREFETCHER, None, {"batches": 3, "close": True}),
    "evaluator": (EVALUATOR, None, {"n": 6, "dtype": "torch.float32", "finite": True}),
    "resume": (RESUME, RESUME_WRITER, {"epochs": 3, "improves": True, "device": "cpu"}),
    "torchscript": (TORCHSCRIPT, TORCHSCRIPT_WRITER,
                    {"rows": 5, "sums": [1.0, 1.0, 1.0, 1.0, 1.0]}),
    "mixed_precision": (MIXED_PRECISION, None,
                        {"improves": True, "scale": 256.0, "max_memory_over_100_mib": True}),
    "mmengine": (MMENGINE, None, {"improves": True, "device": "cpu"}),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_cuda_program_runs_under_the_pack_and_fails_without(interpreter, name):
    program, writer, expected = PROGRAMS[name]
    files = {"program.py": program}
    if writer is not None:
        files["writer.py"] = writer
    interpreter.write(files)
    if writer is not None:
        interpreter.run_command([sys.executable, "writer.py"], env=THREADS)
    under_pack = interpreter.run_command(UNDER_THE_PACK + [sys.executable, "program.py"],
                                         env=THREADS)
    assert json.loads(under_pack.stdout.strip().splitlines()[-1]) == expected
    without = interpreter.run_command([sys.executable, "program.py"],
                                      env=THREADS, check=False)
    assert without.returncode != 0, without.stdout
    assert "CUDA" in without.stderr or "cuda" in without.stderr, without.stderr[-2000:]

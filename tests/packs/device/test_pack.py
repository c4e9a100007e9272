"""The device pack's contract: off by default, exact undo, honest is_available,
configuration warnings, and the NPU branch against a fake torch_npu."""

from __future__ import annotations

import sys

ENABLED = {"LAZYPATCH_ENABLE": "device"}

# Every object whose attributes the pack may change, by a path from torch.
OWNERS = '''
import torch, torch.amp.autocast_mode, torch.amp.grad_scaler, torch.utils._device
import torch.distributed, torch.distributed.distributed_c10d, torch.nn.parallel
import torch.cuda.nvtx, torch.profiler, torch.serialization, torch.nn.modules.module
import torch.jit._builtins, torch.jit._serialization, torch.storage
OWNERS = {
    "torch": torch, "torch.Tensor": torch.Tensor, "torch.nn.Module": torch.nn.Module,
    "torch.cuda": torch.cuda, "torch.cuda.nvtx": torch.cuda.nvtx, "torch.amp": torch.amp,
    "autocast_mode": torch.amp.autocast_mode,
    "autocast": torch.amp.autocast_mode.autocast,
    "GradScaler": torch.amp.grad_scaler.GradScaler,
    "DeviceContext": torch.utils._device.DeviceContext,
    "torch.serialization": torch.serialization, "torch.profiler": torch.profiler,
    "torch.distributed": torch.distributed,
    "c10d": torch.distributed.distributed_c10d,
    "DDP": torch.nn.parallel.DistributedDataParallel,
    "DataParallel": torch.nn.parallel.DataParallel,
    "Stream": torch.cuda.Stream, "Event": torch.cuda.Event,
    "UntypedStorage": torch.UntypedStorage, "_StorageBase": torch.storage._StorageBase,
    "TypedStorage": torch.storage.TypedStorage, "torch.jit": torch.jit,
    "torch.jit._serialization": torch.jit._serialization,
}
'''


def test_unpatch_all_restores_every_torch_object(interpreter):
    """Enable the whole pack on an imported torch, then unpatch_all(): every
    attribute of every owner is the identical object again (none added or lost)."""
    result = interpreter.run_json("import lazypatch.auto\n" + OWNERS + '''
import json, warnings
import lazypatch
before = {name: dict(vars(owner)) for name, owner in OWNERS.items()}
table = torch.jit._builtins._get_builtin_table()
table_before = dict(table)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")          # late-application warnings: expected here
    lazypatch.enable("device")
changed = sorted(f"{name}.{key}" for name, owner in OWNERS.items()
                 for key, value in vars(owner).items() if before[name].get(key) is not value)
failed = [r["name"] for r in lazypatch.report() if r["status"] == "failed"]
redirected = str(torch.zeros(1, device="cuda").device)
table_grew = len(table) > len(table_before)
lazypatch.unpatch_all()
differences = []
for name, owner in OWNERS.items():
    now = dict(vars(owner))
    for key in set(now) | set(before[name]):
        if now.get(key, "<absent>") is not before[name].get(key, "<absent>"):
            differences.append(f"{name}.{key}")
print(json.dumps({"changed": changed, "failed": failed, "redirected": redirected,
                  "table_grew": table_grew, "table_restored": table == table_before,
                  "differences": sorted(differences), "zeros": torch.zeros.__class__.__name__}))
''', env={"LAZYPATCH_CUDA_AVAILABLE": "1"})
    assert result["failed"] == []
    assert result["redirected"] == "cpu"
    expected = {"torch.zeros", "torch.Generator", "torch.load", "torch.Tensor.to",
                "torch.Tensor.cuda", "torch.nn.Module.cuda", "torch.cuda.is_available",
                "torch.cuda.synchronize", "torch.cuda.nvtx.range_push", "autocast.__init__",
                "GradScaler.__init__", "DeviceContext.__init__", "torch.distributed.init_process_group",
                "torch.distributed.is_nccl_available", "DDP.__init__", "torch.profiler.profile",
                "Stream.__new__", "Event.record", "UntypedStorage.__new__", "_StorageBase.to",
                "torch.jit.load", "torch.Tensor.record_stream", "torch.Tensor.type",
                "torch.cuda.FloatTensor", "torch.cuda._exchange_device"}
    assert expected <= set(result["changed"]), expected - set(result["changed"])
    assert result["differences"] == []
    assert result["table_grew"] and result["table_restored"]   # TorchScript's builtin table
    assert result["zeros"] == "builtin_function_or_method"


def test_off_by_default_changes_nothing_and_imports_no_torch(interpreter):
    """Without LAZYPATCH_ENABLE=device, activation imports neither the pack nor torch, and
    torch is untouched, also once the pack is named (and disabled) later."""
    activate_first = ("import sys\nimport lazypatch.auto\n"
                      "TORCH_BEFORE = 'torch' in sys.modules\nimport torch,")
    result = interpreter.run_json(OWNERS.replace("import torch,", activate_first, 1) + '''
import json, lazypatch
pack_loaded_by_activation = "lazypatch.registry.device" in sys.modules
registered_by_activation = [r["name"] for r in lazypatch.report() if "device" in r["tags"]]
# An opt-in pack registers when named: then every patch is there, and disabled.
lazypatch.disable("device")
statuses = {r["name"]: r["status"] for r in lazypatch.report() if "device" in r["tags"]}
try:
    torch.zeros(1, device="cuda")
    error = ""
except Exception as exc:
    error = type(exc).__name__
print(json.dumps({"torch_before": TORCH_BEFORE, "statuses": statuses, "error": error,
                  "pack_loaded": pack_loaded_by_activation,
                  "registered_by_activation": registered_by_activation,
                  "wrapped": [n for n, o in OWNERS.items() for v in vars(o).values()
                              if type(v).__name__ == "FunctionWrapper"]}))
''')
    assert result["torch_before"] is False
    # Opt-in: activation neither imports the pack nor registers its patches.
    assert result["pack_loaded"] is False and result["registered_by_activation"] == []
    assert result["statuses"] and set(result["statuses"].values()) == {"disabled"}
    assert "device.factories" in result["statuses"]
    assert result["error"] in ("AssertionError", "RuntimeError")
    assert result["wrapped"] == []


def test_is_available_scoped_per_calling_module(interpreter):
    """LAZYPATCH_CUDA_AVAILABLE=1: the script sees True; torch's own modules and the
    modules in LAZYPATCH_CUDA_AVAILABLE_EXCLUDE see the honest False; nccl agrees."""
    interpreter.write({"kernels/__init__.py": "import torch\n"
                                              "def pick():\n"
                                              "    return torch.cuda.is_available()\n",
                       "kernelsextra.py": "import torch\n"
                                          "def pick():\n"
                                          "    return torch.cuda.is_available()\n"})
    result = interpreter.run_json('''
        import lazypatch.auto
        import json, torch, kernels, kernelsextra
        import torch.distributed as dist
        inside_torch = {}
        exec("import torch\\nanswer = torch.cuda.is_available()", {"__name__": "torch.fake"}, inside_torch)
        from lazypatch.registry.device import redirect_report
        print(json.dumps({"script": torch.cuda.is_available(), "kernels": kernels.pick(),
                          "prefix_only": kernelsextra.pick(), "torch": inside_torch["answer"],
                          "nccl": dist.is_nccl_available(),
                          "report": {r["api"]: r["calls"] for r in redirect_report()}}))
    ''', env={**ENABLED, "LAZYPATCH_CUDA_AVAILABLE": "1",
              "LAZYPATCH_CUDA_AVAILABLE_EXCLUDE": "kernels"})
    assert result["script"] is True and result["nccl"] is True
    assert result["kernels"] is False and result["torch"] is False
    assert result["prefix_only"] is True     # "kernelsextra" is not a submodule of "kernels"
    assert result["report"]["torch.cuda.is_available"] == 2


def test_is_cuda_claimed_for_target_tensors_with_is_available(interpreter):
    """LAZYPATCH_CUDA_AVAILABLE=1: a tensor moved with .cuda(), and what is computed
    from it, answers is_cuda True to the script, as on a GPU; torch's own modules and
    the excluded ones see the honest False. Without the setting Tensor.is_cuda is
    torch's own, and unpatch_all() restores it."""
    interpreter.write({"kernels/__init__.py": "def check(tensor):\n"
                                              "    return tensor.is_cuda\n"})
    script = '''
        import lazypatch.auto
        import json, torch, kernels, lazypatch
        moved = torch.ones(2, 3).cuda()
        weight = torch.nn.Linear(3, 4).cuda().weight
        computed = moved @ weight.t()
        inside_torch = {}
        exec("answer = tensor.is_cuda", {"__name__": "torch.fake", "tensor": moved}, inside_torch)
        from lazypatch.registry.device import redirect_report
        answers = {"moved": moved.is_cuda, "parameter": weight.is_cuda,
                   "computed": computed.is_cuda, "kernels": kernels.check(moved),
                   "torch": inside_torch["answer"], "device": str(computed.device),
                   "report": {r["api"]: r["calls"] for r in redirect_report()}}
        patched = "is_cuda" in vars(torch.Tensor)
        lazypatch.unpatch_all()
        answers.update(patched=patched, restored="is_cuda" not in vars(torch.Tensor),
                       after=moved.is_cuda)
        print(json.dumps(answers))
    '''
    claimed = interpreter.run_json(script, env={**ENABLED, "LAZYPATCH_CUDA_AVAILABLE": "1",
                                                "LAZYPATCH_CUDA_AVAILABLE_EXCLUDE": "kernels"})
    assert claimed["moved"] is claimed["parameter"] is claimed["computed"] is True
    assert claimed["device"] == "cpu"          # the answer changes, the tensor does not
    assert claimed["kernels"] is False and claimed["torch"] is False
    assert claimed["report"]["torch.Tensor.is_cuda"] == 3
    assert claimed["patched"] and claimed["restored"] and claimed["after"] is False
    honest = interpreter.run_json(script, env=ENABLED)
    assert honest["moved"] is honest["computed"] is honest["kernels"] is False
    assert honest["patched"] is False and "torch.Tensor.is_cuda" not in honest["report"]


def test_bad_settings_warn_and_fall_back(interpreter):
    """Unknown device type and unreadable flags warn (naming accepted values) and fall back."""
    result = interpreter.run_json('''
        import lazypatch.auto
        import json, warnings
        import torch
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            device = str(torch.ones(1).cuda().device)
            available = torch.cuda.is_available()
        print(json.dumps({"device": device, "available": available,
                          "warnings": [f"{w.category.__name__}: {w.message}" for w in caught]}))
    ''', env={**ENABLED, "LAZYPATCH_DEVICE": "gpu9", "LAZYPATCH_CUDA_AVAILABLE": "maybe",
              "LAZYPATCH_CUDA_AVAILABLE_EXCLUDE": "not a module"})
    assert result["device"] == "cpu" and result["available"] is False
    text = "\n".join(result["warnings"])
    assert "ConfigurationWarning: lazypatch device pack: LAZYPATCH_DEVICE='gpu9'" in text
    assert "npu, cpu" in text


FAKE_TORCH_NPU = {
    "torch_npu/__init__.py": '''
        """A FAKE torch_npu for tests: a CPU-backed torch.npu namespace that records calls."""
        import sys, types
        import torch
        import torch.distributed as dist

        CALLS = []
        npu = types.ModuleType("torch.npu")
        _current = [0]

        def _recorder(name, result=None):
            def function(*args, **kwargs):
                CALLS.append([name, [str(a) for a in args]])
                return result
            return function

        npu.is_available = lambda: True
        npu.device_count = lambda: 2
        npu.current_device = lambda: _current[0]
        npu.set_device = _recorder("set_device")
        npu.synchronize = _recorder("synchronize")
        npu.empty_cache = _recorder("empty_cache")
        npu.manual_seed_all = _recorder("manual_seed_all")
        npu.memory_allocated = _recorder("memory_allocated", 1234)
        npu.get_device_name = lambda device=None: "Fake Ascend 910"

        class _Config:
            """Like torch_npu's npuConfig: the value lives behind __setattr__/__getattr__."""
            def __setattr__(self, name, value):
                CALLS.append(["config", [name, str(value)]])
                _options[name] = value
            def __getattr__(self, name):
                try:
                    return _options[name]
                except KeyError:
                    raise AttributeError(name) from None
        _options = {"allow_internal_format": True}
        npu.config = _Config()
        torch.npu = npu
        sys.modules["torch.npu"] = npu
        torch.utils.rename_privateuse1_backend("npu")

        def _gloo(store, rank, size, timeout):
            return dist.ProcessGroupGloo(store, rank, size, timeout)
        dist.Backend.register_backend("hccl", _gloo, devices=["cpu"])
        from . import profiler
    ''',
    "torch_npu/profiler.py": '''
        import enum

        class ProfilerActivity(enum.Enum):
            CPU = "fake-cpu"
            NPU = "fake-npu"

        class profile:
            def __init__(self, activities=None, **kwargs):
                self.activities = activities
    ''',
}


def test_fake_npu_branch(interpreter):
    """With a FAKE torch_npu that sees 2 NPUs, the target is the NPU: CUDA devices map
    to npu devices index for index, torch.cuda calls reach torch.npu, nccl becomes
    hccl, internal formats are turned off (and restored by unpatch_all), profiler
    activities map to NPU ones."""
    interpreter.write(FAKE_TORCH_NPU)
    result = interpreter.run_json('''
        import lazypatch.auto
        import json
        import torch
        import torch.distributed as dist
        from lazypatch.registry.device import target_device
        from lazypatch.registry.device.target import translate
        target = target_device()
        import torch_npu
        torch.cuda.set_device("cuda:1")
        torch.cuda.set_device(0)
        torch.cuda.synchronize()
        torch.cuda.manual_seed_all(7)
        info = [torch.cuda.device_count(), torch.cuda.get_device_name(0),
                torch.cuda.memory_allocated(), torch.cuda.is_available()]
        try:
            torch.ones(1).cuda(1)
            cuda_error = ""
        except Exception as error:
            cuda_error = str(error)
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29571", rank=0, world_size=1)
        backend = dist.get_backend()
        dist.destroy_process_group()
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                  torch.profiler.ProfilerActivity.CUDA])
        internal_format = torch.npu.config.allow_internal_format
        import lazypatch
        lazypatch.unpatch_all()
        print(json.dumps({
            "target": target, "translated": [str(translate(v)) for v in
                ("cuda", "cuda:1", torch.device("cuda", 1), 1, "cpu", "cuda_ckpt.pt")],
            "calls": torch_npu.CALLS, "info": info, "cuda_error": cuda_error,
            "backend": backend, "profile": [type(prof).__module__, [a.name for a in prof.activities]],
            "internal_format": internal_format,
            "restored_format": torch.npu.config.allow_internal_format}))
    ''', env=ENABLED)
    assert result["target"]["device"] == "npu"
    assert result["translated"] == ["npu", "npu:1", "npu:1", "npu:1", "cpu", "cuda_ckpt.pt"]
    assert ["set_device", ["npu:1"]] in result["calls"]
    assert ["set_device", ["0"]] in result["calls"]
    assert ["synchronize", []] in result["calls"] and ["manual_seed_all", ["7"]] in result["calls"]
    assert result["info"] == [2, "Fake Ascend 910", 1234, False]
    assert "npu" in result["cuda_error"].lower() or "privateuse1" in result["cuda_error"].lower()
    assert result["backend"] == "hccl"
    assert result["profile"] == ["torch_npu.profiler", ["CPU", "NPU"]]
    assert result["internal_format"] is False and result["restored_format"] is True


def test_fake_npu_present_but_cpu_requested(interpreter):
    """LAZYPATCH_DEVICE=cpu wins over a (FAKE) NPU, and then internal formats are left
    alone; LAZYPATCH_ALLOW_INTERNAL_FORMAT is accepted."""
    interpreter.write(FAKE_TORCH_NPU)
    result = interpreter.run_json('''
        import lazypatch.auto
        import json, torch, torch_npu
        print(json.dumps({"device": str(torch.zeros(1, device="cuda:1").device),
                          "format": torch.npu.config.allow_internal_format,
                          "count": torch.cuda.device_count()}))
    ''', env={**ENABLED, "LAZYPATCH_DEVICE": "cpu", "LAZYPATCH_ALLOW_INTERNAL_FORMAT": "1"})
    assert result == {"device": "cpu", "format": True, "count": 1}


def test_the_report_says_what_ran_where_with_counts_and_first_call_sites(interpreter):
    result = interpreter.run_json("""
import lazypatch.auto, lazypatch, json, torch
from lazypatch.reports.reporting import render
x = torch.zeros(3, device="cuda")
for _ in range(2):
    y = x.to("cuda:0")
records = lazypatch.report()
usage = [row for record in records for row in record.get("usage", ())]
notes = [line for record in records if record["name"].startswith("device.")
         for line in record["notes"]]
print(json.dumps({"usage": usage, "notes": notes, "table": render(records)}))
""", env={"LAZYPATCH_ENABLE": "device"})
    rows = {row["what"]: row for row in result["usage"]}
    assert rows["torch.zeros"]["calls"] == 1 and rows["Tensor.to"]["calls"] == 2
    assert rows["torch.zeros"]["where"] == "cpu (asked for cuda)"
    assert rows["torch.zeros"]["first_call_site"].endswith("_scenario.py:4")
    assert rows["Tensor.to"]["first_call_site"].endswith("_scenario.py:6")
    assert all(row["patch"] == "device pack" for row in rows.values())
    # A section of its own, not the DETAIL cell of an unrelated row.
    assert not any("redirected" in line for line in result["notes"])
    table = result["table"].splitlines()
    section = table.index("what ran where:")
    assert table[section + 1].split() == ["WHAT", "RAN", "ON", "/", "AS", "CALLS", "FIRST",
                                          "CALL", "BY"]
    assert any(line.split()[:5] == ["Tensor.to", "cpu", "(asked", "for", "cuda)"]
               and "2" in line.split() and "_scenario.py:6" in line
               for line in table[section + 2:])


def test_mmengine_data_preprocessor_cuda_lands_on_the_target(interpreter):
    """mmengine's BaseDataPreprocessor.cuda() evaluates torch.device(<index>), which torch
    refuses without an accelerator; under the pack it records the CUDA device it means,
    so the preprocessor and a BaseModel moved with .cuda() cast their data to the CPU.
    Without the pack the same call fails as on any CPU machine; unpatch_all()
    gives the method back."""
    program = """
import lazypatch.auto, lazypatch, json, torch
from mmengine.model import BaseDataPreprocessor, BaseModel
def mmengines_own():
    return vars(BaseDataPreprocessor)["cuda"].__code__.co_filename.endswith("data_preprocessor.py")
result = {"own_before": mmengines_own()}
try:
    processor = BaseDataPreprocessor().cuda()
    result["device"] = str(processor.cast_data({"x": torch.ones(2)})["x"].device)
except (RuntimeError, AssertionError) as error:   # torch's "not compiled with CUDA"
    result["error"] = str(error)

class Model(BaseModel):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 2)

    def forward(self, inputs, data_samples=None, mode="tensor"):
        return self.layer(inputs)

if "device" in result:
    model = Model().cuda()
    data = model.data_preprocessor({"inputs": torch.ones(1, 2)})
    result["model"] = [str(model(data["inputs"]).device), str(data["inputs"].device)]
    lazypatch.unpatch_all()
    result["own_after_unpatch"] = mmengines_own()
print(json.dumps(result))
"""
    patched = interpreter.run_json(program, env={"LAZYPATCH_ENABLE": "device",
                                                 "LAZYPATCH_CUDA_AVAILABLE": "1"})
    assert patched == {"own_before": False, "device": "cpu", "model": ["cpu", "cpu"],
                       "own_after_unpatch": True}
    plain = interpreter.run_json(program)
    assert plain["own_before"] and "CUDA" in plain["error"]


def test_a_device_chosen_in_pyproject_is_announced_by_its_key_and_file(interpreter):
    interpreter.write({"pyproject.toml": '[tool.lazypatch]\nenable = ["device"]\ndevice = "cpu"\n'})
    result = interpreter.run("import lazypatch.auto, torch\n"
                             "print(torch.zeros(1, device='cuda').device)")
    assert result.stdout.strip() == "cpu"
    assert (f"CUDA calls go to 'cpu' (device in {interpreter.root / 'pyproject.toml'})"
            in result.stderr), result.stderr
    assert "LAZYPATCH_DEVICE)" not in result.stderr
    # The same under `lazypatch run`, whose child gets the file's settings from its parent.
    interpreter.write({"program.py": "import torch\nprint(torch.zeros(1, device='cuda').device)\n"})
    run = interpreter.run_command([sys.executable, "-m", "lazypatch", "run", "--",
                                   sys.executable, "program.py"])
    assert run.stdout.strip() == "cpu"
    assert (f"CUDA calls go to 'cpu' (device in {interpreter.root / 'pyproject.toml'})"
            in run.stderr), run.stderr

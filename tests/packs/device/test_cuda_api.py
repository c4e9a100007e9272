"""The CUDA API that broke real programs under the device pack, each checked on the
CPU under the pack (and, where it matters, shown failing without it)."""

from __future__ import annotations

ENABLED = {"LAZYPATCH_ENABLE": "device", "OMP_NUM_THREADS": "1"}


def test_torchscript_compiles_code_calling_redirected_factories(interpreter):
    """torch.jit.script of code calling torch.zeros_like / torch.tensor / torch.full
    compiles and runs; tracing too; torch.distributed.optim and mmengine.optim (which
    script such code at import) import; undo leaves TorchScript working."""
    result = interpreter.run_json('''
        import lazypatch.auto
        import json
        from typing import Optional
        import torch

        @torch.jit.script
        def shifted(x: torch.Tensor) -> torch.Tensor:
            return torch.zeros_like(x) + torch.tensor([1.0]) + torch.full([2], 2.0)

        @torch.jit.script
        def noise(x: torch.Tensor, generator: Optional[torch.Generator] = None) -> torch.Tensor:
            return x + torch.rand(x.shape, generator=generator) * 0

        traced = torch.jit.trace(lambda x: torch.ones_like(x) * x, torch.ones(2))
        import torch.distributed.optim
        import mmengine.optim
        values = [shifted(torch.ones(2)).tolist(), noise(torch.ones(2)).tolist(),
                  traced(torch.full((2,), 3.0)).tolist(),
                  str(torch.zeros(1, device="cuda").device)]
        import lazypatch
        lazypatch.unpatch_all()

        @torch.jit.script
        def after(x: torch.Tensor) -> torch.Tensor:
            return torch.zeros_like(x) + 1
        values.append(after(torch.ones(1)).tolist())
        print(json.dumps(values))
    ''', env=ENABLED)
    assert result == [[3.0, 3.0], [1.0, 1.0], [3.0, 3.0], "cpu", [1.0]]


def test_cuda_classes_stay_classes(interpreter):
    """torch.cuda.device, device_of, Stream, Event, ExternalStream, StreamContext and the
    legacy tensor types are classes under the pack: isinstance and subclassing work,
    the objects the pack hands out are instances of them."""
    result = interpreter.run_json('''
        import lazypatch.auto
        import json, inspect
        import torch

        names = ["device", "device_of", "Stream", "Event", "ExternalStream", "StreamContext",
                 "FloatTensor", "HalfTensor", "LongTensor"]
        classes = {name: inspect.isclass(getattr(torch.cuda, name)) for name in names}

        class TimingEvent(torch.cuda.Event):
            def elapsed(self, end):
                return self.elapsed_time(end)

        class PrefetchStream(torch.cuda.Stream):
            pass

        start, end = TimingEvent(enable_timing=True), TimingEvent(enable_timing=True)
        start.record()
        side = PrefetchStream()
        with torch.cuda.device(0), torch.cuda.stream(side):
            value = torch.ones(3, device="cuda").sum()
        end.record()
        end.synchronize()
        checks = {
            "device": isinstance(torch.cuda.device(0), torch.cuda.device),
            "device_of": isinstance(torch.cuda.device_of(value), torch.cuda.device),
            "stream": isinstance(torch.cuda.Stream(), torch.cuda.Stream),
            "current": isinstance(torch.cuda.current_stream(), torch.cuda.Stream),
            "subclass": isinstance(side, torch.cuda.Stream) and type(side) is PrefetchStream,
            "event": isinstance(start, torch.cuda.Event),
            "recorded": isinstance(side.record_event(), torch.cuda.Event),
            "elapsed": start.elapsed(end) >= 0,
            "same_stream": torch.cuda.current_stream() == torch.cuda.default_stream(),
            "legacy": isinstance(torch.ones(2), torch.cuda.FloatTensor)
                      and not isinstance(torch.ones(2), torch.cuda.LongTensor),
        }
        print(json.dumps({"classes": classes, "checks": checks, "value": value.item()}))
    ''', env=ENABLED)
    assert all(result["classes"].values()), result["classes"]
    assert all(result["checks"].values()), result["checks"]
    assert result["value"] == 3.0


def test_prefetcher_record_stream_and_streams(interpreter):
    """The apex/YOLOX prefetcher pattern: copies on a side stream, wait_stream,
    record_stream(current_stream()); and the same calls fail without the pack."""
    code = '''
        import json
        import torch
        stream = torch.cuda.Stream()
        batch = torch.arange(6.0).reshape(2, 3)
        with torch.cuda.stream(stream):
            moved = batch.cuda(non_blocking=True).float()
        torch.cuda.current_stream().wait_stream(stream)
        moved.record_stream(torch.cuda.current_stream())
        print(json.dumps({"sum": moved.sum().item(), "device": str(moved.device)}))
    '''
    result = interpreter.run_json("import lazypatch.auto\n" + code.strip().replace("\n        ", "\n"),
                                  env=ENABLED)
    assert result == {"sum": 15.0, "device": "cpu"}
    without = interpreter.run(code, check=False)
    assert without.returncode != 0


def test_fast_paths_answer_as_the_general_ones(interpreter):
    """The per-step shortcuts (torch.cuda.stream without torch's accelerator probe,
    one torch.cuda.Stream per native stream, inlined counters) give what the general
    paths give, and the report counts each redirected call."""
    result = interpreter.run_json("""
        import lazypatch.auto
        import json
        import torch
        from lazypatch.registry.device import redirect_report
        side = torch.cuda.Stream()
        context = torch.cuda.stream(side)
        general = torch.cuda.StreamContext(side)       # torch's own constructor
        same_context = {attribute: getattr(context, attribute) == getattr(general, attribute)
                        for attribute in ("stream", "idx", "src_prev_stream", "dst_prev_stream")}
        with context:
            inside = torch.cuda.current_stream()
        batch = torch.ones(2, 3)
        moved = [batch.cuda(), batch.cuda(non_blocking=True), batch.cuda(device="cuda:0"),
                 batch.cuda(0), batch.to("cuda", non_blocking=True), batch.to(device="cuda"),
                 batch.to(torch.float64), torch.zeros(2, device="cuda"),
                 torch.ones_like(batch, memory_format=torch.preserve_format)]
        counts = {row["api"]: row["calls"] for row in redirect_report()}
        print(json.dumps({
            "is_context": isinstance(context, torch.cuda.StreamContext),
            "same_context": same_context,
            "inside_is_default": inside == torch.cuda.default_stream(),
            "current_is_stable": torch.cuda.current_stream() is torch.cuda.current_stream(),
            "devices": [str(tensor.device) for tensor in moved],
            "float64": str(moved[6].dtype),
            "counts": counts}))
    """, env=ENABLED)
    assert result["is_context"] and all(result["same_context"].values()), result
    assert result["inside_is_default"] and result["current_is_stable"]
    assert result["devices"] == ["cpu"] * 9 and result["float64"] == "torch.float64"
    counts = result["counts"]
    assert counts["torch.cuda.stream"] == 1 and counts["Tensor.cuda"] == 4
    assert counts["Tensor.to"] == 2 and counts["torch.zeros"] == 1
    # Calls that redirected nothing are not counted, and APIs never called are absent.
    assert "torch.ones_like" not in counts and "torch.empty" not in counts
    assert all(calls > 0 for calls in counts.values())


def test_legacy_tensor_types(interpreter):
    """torch.cuda.FloatTensor(n) / LongTensor(data), x.type(torch.cuda.HalfTensor),
    x.type("torch.cuda.FloatTensor"), set_default_tensor_type("torch.cuda.FloatTensor");
    x.type() still answers honestly; the report counts them."""
    result = interpreter.run_json('''
        import lazypatch.auto
        import json, warnings
        import torch
        warnings.simplefilter("ignore")
        sized = torch.cuda.FloatTensor(2, 3).zero_()
        data = torch.cuda.LongTensor([4, 5])
        half = torch.arange(3).type(torch.cuda.HalfTensor)
        named = torch.arange(3).type("torch.cuda.FloatTensor")
        torch.set_default_tensor_type("torch.cuda.FloatTensor")
        default = torch.zeros(1)
        torch.set_default_tensor_type(torch.FloatTensor)
        from lazypatch.registry.device import redirect_report
        print(json.dumps({
            "sized": [list(sized.shape), str(sized.dtype), str(sized.device)],
            "data": [data.tolist(), str(data.dtype)],
            "half": [str(half.dtype), half.tolist()], "named": str(named.dtype),
            "honest": half.type(), "default": str(default.device),
            "apis": sorted(row["api"] for row in redirect_report())}))
    ''', env=ENABLED)
    assert result["sized"] == [[2, 3], "torch.float32", "cpu"]
    assert result["data"] == [[4, 5], "torch.int64"]
    assert result["half"] == ["torch.float16", [0.0, 1.0, 2.0]]
    assert result["named"] == "torch.float32"
    assert result["honest"] == "torch.HalfTensor" and result["default"] == "cpu"
    assert {"torch.cuda.FloatTensor", "torch.cuda.LongTensor", "Tensor.type",
            "torch.set_default_tensor_type"} <= set(result["apis"])


CUDA_TAGGED_CHECKPOINTS = '''
    import torch
    # Tag every storage as living on cuda:0, as on a GPU machine.
    torch.serialization.register_package(1, lambda obj: "cuda:0", lambda obj, loc: None)
    state = {"weight": torch.arange(4.0), "raw": torch.arange(2.0).untyped_storage(),
             "typed": torch.arange(3.0).storage()}
    torch.save(state, "zip.pt")
    # torch's legacy format cannot load untyped storages with weights_only=True.
    del state["raw"]
    torch.save(state, "legacy.pt", _use_new_zipfile_serialization=False)
'''


def test_storages_and_map_location(interpreter):
    """Checkpoints holding tensors, untyped and typed storages saved on CUDA load with
    map_location "cuda" (zip and legacy formats, weights_only both ways);
    UntypedStorage/TypedStorage/torch.cuda.FloatStorage with a CUDA device and
    storage.cuda() build CPU storages; without the pack the constructor fails."""
    import sys
    interpreter.write({"make_checkpoints.py": CUDA_TAGGED_CHECKPOINTS})
    interpreter.run_command([sys.executable, "make_checkpoints.py"])
    result = interpreter.run_json('''
        import lazypatch.auto
        import json, warnings
        import torch
        warnings.simplefilter("ignore")
        loaded = []
        for path in ("zip.pt", "legacy.pt"):
            for weights_only in (True, False):
                state = torch.load(path, map_location="cuda", weights_only=weights_only)
                raw = state.get("raw")
                loaded.append([str(state["weight"].device), state["weight"].tolist(),
                               raw.device.type if raw is not None else path,
                               state["typed"].device.type, state["typed"].tolist()])
        built = [torch.UntypedStorage(8, device="cuda").device.type,
                 torch.TypedStorage(3, dtype=torch.float, device="cuda:0").device.type,
                 torch.cuda.FloatStorage(3).device.type,
                 torch.ones(2).untyped_storage().cuda().device.type,
                 torch.ones(2).storage().cuda().device.type]
        print(json.dumps({"loaded": loaded, "built": built}))
    ''', env=ENABLED)
    weights, typed = [0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0]
    assert result["loaded"] == ([["cpu", weights, "cpu", "cpu", typed]] * 2
                                + [["cpu", weights, "legacy.pt", "cpu", typed]] * 2)
    assert result["built"] == ["cpu"] * 5
    without = interpreter.run('import torch\ntorch.UntypedStorage(8, device="cuda")\n',
                              check=False)
    assert "Storage device not recognized" in without.stderr or "CUDA" in without.stderr


def test_jit_load_with_cuda_map_location(interpreter):
    """torch.jit.load(path, map_location="cuda") and torch.device("cuda", 0) load a
    TorchScript module on the CPU; the report counts the redirect."""
    result = interpreter.run_json('''
        import lazypatch.auto
        import json
        import torch
        torch.manual_seed(0)
        module = torch.jit.script(torch.nn.Linear(3, 2))
        module.save("linear.pt")
        expected = module(torch.ones(1, 3)).tolist()
        first = torch.jit.load("linear.pt", map_location="cuda")
        second = torch.jit.load("linear.pt", map_location=torch.device("cuda", 0))
        from lazypatch.registry.device import redirect_report
        print(json.dumps({"same": [first(torch.ones(1, 3)).tolist() == expected,
                                   second(torch.ones(1, 3)).tolist() == expected],
                          "device": str(next(first.parameters()).device),
                          "calls": {r["api"]: r["calls"] for r in redirect_report()}}))
    ''', env=ENABLED)
    assert result["same"] == [True, True] and result["device"] == "cpu"
    assert result["calls"]["torch.jit.load"] == 2

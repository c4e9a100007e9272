"""openmmlab.mmengine_checkpoint_load: mmengine resumes under torch >= 2.6, still weights-only.

Real mmengine Runner checkpoints (CPU) load with the patch on; a checkpoint
naming anything else (a command in ``__reduce__``, a user class) fails with
torch's own message and runs nothing; the default-off
``openmmlab.mmengine_checkpoint_load_unsafe`` loads it when asked by name.
Every scenario runs in a fresh interpreter. The twin "fails without
lazypatch" is ``test_mmengine_resumes_its_checkpoints_under_torch_2_6_only_with_the_pack``
in test_pack.py.
"""

from __future__ import annotations

import json
import sys

import pytest

UNSAFE = "openmmlab.mmengine_checkpoint_load_unsafe"

# A Runner with what real OpenMMLab configs put in a checkpoint: dataset
# metainfo from a config with a nested mapping (ConfigDict, as mmdet3d's
# seg_label_mapping), validation metrics as NumPy scalars with save_best, LR
# and momentum schedulers (MultiStepLR keeps a Counter), EMAHook.
RICH_RUN = '''
import json, sys
import lazypatch.auto
import numpy as np
import torch
from mmengine.config import Config
from mmengine.dataset import BaseDataset
from mmengine.evaluator import BaseMetric
from mmengine.model import BaseModel
from mmengine.registry import METRICS
from mmengine.runner import Runner


class Tiny(BaseModel):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, inputs, labels=None, mode="tensor"):
        out = self.linear(inputs)
        if mode == "loss":
            return {"loss": ((out - labels) ** 2).mean()}
        if mode == "predict":
            return [dict(pred=o, gt=l) for o, l in zip(out, labels)]
        return out


class Data(BaseDataset):
    METAINFO = dict(classes=("car", "person"))

    def load_data_list(self):
        return [dict(index=index) for index in range(16)]

    def __getitem__(self, index):
        generator = torch.Generator().manual_seed(index)
        return dict(inputs=torch.randn(4, generator=generator),
                    labels=torch.randn(1, generator=generator))


@METRICS.register_module()
class SquaredError(BaseMetric):
    def process(self, data_batch, data_samples):
        self.results.extend(float(((s["pred"] - s["gt"]) ** 2).mean()) for s in data_samples)

    def compute_metrics(self, results):
        return dict(mse=np.float64(np.mean(results)), rmse=np.float32(np.sqrt(np.mean(results))))


def loader():
    config = Config(dict(metainfo=dict(classes=("car", "person"),
                                       seg_label_mapping={0: 1, 1: 0})))
    return dict(dataset=Data(metainfo=config.metainfo), batch_size=4, num_workers=0,
                sampler=dict(type="DefaultSampler", shuffle=False),
                collate_fn=dict(type="default_collate"))


def main(work_dir, epochs, resume):
    runner = Runner(
        model=Tiny(), work_dir=work_dir, log_level="WARNING", resume=resume,
        train_dataloader=loader(), val_dataloader=loader(), val_cfg=dict(),
        val_evaluator=dict(type="SquaredError"),
        train_cfg=dict(by_epoch=True, max_epochs=epochs, val_interval=1),
        optim_wrapper=dict(optimizer=dict(type="SGD", lr=0.01, momentum=0.9)),
        param_scheduler=[dict(type="LinearLR", start_factor=0.5, by_epoch=False, end=2),
                         dict(type="MultiStepLR", milestones=[1], by_epoch=True),
                         dict(type="CosineAnnealingMomentum", T_max=2, eta_min=0.8,
                              by_epoch=True)],
        custom_hooks=[dict(type="EMAHook")],
        default_hooks=dict(checkpoint=dict(type="CheckpointHook", interval=1, save_best="mse",
                                           rule="less")))
    runner.train()
    hub = runner.message_hub
    print(json.dumps({"iteration": runner.iter, "epoch": runner.epoch,
                      "loss_count": len(hub.get_scalar("train/loss").data[0]),
                      "best_score_type": type(hub.get_info("best_score")).__name__,
                      "loss_min": float(hub.get_scalar("train/loss").min())}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), resume=len(sys.argv) > 3)
'''

# Checkpoints shaped like mmengine's, with one value that runs code when
# unpickled fully: each writes <kind>.marker in the working directory.
PAYLOADS = '''
import builtins, os
import torch


class Exec:
    def __reduce__(self):
        return (builtins.exec, ("open('exec.marker', 'w').write('ran')",))


class System:
    def __reduce__(self):
        return (os.system, ("echo ran > system.marker",))


class UserClass:
    def __init__(self):
        self.state = "saved"      # a non-empty state, so unpickling calls __setstate__

    def __setstate__(self, state):
        open("user_class.marker", "w").write("ran")


KINDS = {"exec": Exec, "system": System, "user_class": UserClass}


def save(kind, path):
    torch.save({"meta": {"epoch": 1, "iter": 4}, "state_dict": {"w": torch.ones(2)},
                "message_hub": {"runtime_info": {"payload": KINDS[kind]()}}}, path)
'''

# For each checkpoint path: load through mmengine with lazypatch active, then
# with torch alone; print what happened (JSON) and which markers appeared.
LOAD_BOTH_WAYS = '''
import glob, json, pickle, sys
import lazypatch.auto, lazypatch
import torch
from mmengine.runner.checkpoint import _load_checkpoint


def attempt(load, path):
    try:
        load(path, map_location="cpu")
        return "loaded"
    except pickle.UnpicklingError as error:
        return [type(error).__module__, type(error).__name__, str(error)]


outcomes = {}
for path in sys.argv[1:]:
    outcome = outcomes[path] = {"mmengine": attempt(_load_checkpoint, path)}
    outcome["markers"] = sorted(glob.glob("*.marker"))
    outcome["torch"] = attempt(torch.load, path)   # torch's own weights-only load
statuses = {record.name: record.status for record in lazypatch.report()}
print(json.dumps({"outcomes": outcomes, "statuses": [
    statuses["openmmlab.mmengine_checkpoint_load"], statuses["%s"]]}))
''' % UNSAFE

KINDS = {"exec": "GLOBAL exec was not an allowed global",
         "system": "whose module posix is blocked",
         "user_class": "GLOBAL payloads.UserClass was not an allowed global"}


def _last_json(result):
    """The JSON document a script printed as its last stdout line."""
    return json.loads(result.stdout.splitlines()[-1])


def _save_payloads(interpreter, kinds):
    """Write one malicious checkpoint per kind; return their paths."""
    interpreter.write({"payloads.py": PAYLOADS})
    paths = [str(interpreter.root / f"{kind}.pth") for kind in kinds]
    interpreter.run("import payloads\n" + "".join(
        f"payloads.save({kind!r}, {path!r})\n" for kind, path in zip(kinds, paths)))
    return paths


def _load_both_ways(interpreter, paths, env=None):
    interpreter.write({"load_both_ways.py": LOAD_BOTH_WAYS})
    return _last_json(interpreter.run_command([sys.executable, "load_both_ways.py", *paths],
                                              env=env))


def _train(interpreter, work, epochs, *resume, env=None, check=True):
    return interpreter.run_command([sys.executable, "richrun.py", str(work), str(epochs), *resume],
                                   env=env, check=check)


# slow (about 20 s: a real Runner trains, saves and resumes): the --all tier (CI runs it);
# the scenarios below keep the allowed globals in the quick tier.
@pytest.mark.slow
def test_real_runner_checkpoint_lists_exactly_the_allowed_globals_and_resumes(interpreter):
    interpreter.write({"richrun.py": RICH_RUN})
    work = interpreter.root / "work"
    _train(interpreter, work, 1)
    found = interpreter.run_json(f"""
        import glob, json, torch
        names = set()
        for path in glob.glob({str(work)!r} + "/*.pth"):
            names.update(torch.serialization.get_unsafe_globals_in_checkpoint(path))
        print(json.dumps(sorted(names)))
    """)
    # What torch's default list lacks in mmengine 0.10.7 checkpoints; the pack
    # allows these during the load (getattr only for HistoryBuffer statistics).
    assert found == ["builtins.getattr", "mmengine.config.config.ConfigDict",
                     "mmengine.logging.history_buffer.HistoryBuffer",
                     "numpy._core.multiarray._reconstruct", "numpy._core.multiarray.scalar",
                     "numpy.dtype", "numpy.ndarray"]
    without = _train(interpreter, work, 2, "resume", env={"LAZYPATCH": "0"}, check=False)
    assert without.returncode != 0 and "Weights only load failed" in without.stderr
    result = _last_json(_train(interpreter, work, 2, "resume"))
    # Resumed at iteration 4 with the saved loss history (4 values), trained to 8.
    assert result["iteration"] == 8 and result["epoch"] == 2
    assert result["loss_count"] == 8 and result["best_score_type"] == "float64"


def test_checkpoint_naming_anything_else_runs_nothing_and_fails_with_torchs_message(interpreter):
    paths = _save_payloads(interpreter, list(KINDS))
    result = _load_both_ways(interpreter, paths)
    assert result["statuses"] == ["applied", "disabled"]
    for path, (kind, blocked) in zip(paths, KINDS.items()):
        outcome = result["outcomes"][path]
        assert outcome["markers"] == [], kind
        module, name, message = outcome["mmengine"]
        assert (module, name) == ("_pickle", "UnpicklingError"), kind
        assert message.startswith("Weights only load failed") and blocked in message, kind
        assert outcome["mmengine"] == outcome["torch"], kind   # torch's message, unchanged


def test_unsafe_patch_enabled_by_name_unpickles_fully(interpreter):
    paths = _save_payloads(interpreter, list(KINDS))
    result = _load_both_ways(interpreter, paths, env={"LAZYPATCH_ENABLE": UNSAFE})
    assert result["statuses"] == ["applied", "applied"]
    assert [result["outcomes"][path]["mmengine"] for path in paths] == ["loaded"] * 3
    assert result["outcomes"][paths[-1]]["markers"] == ["exec.marker", "system.marker",
                                                        "user_class.marker"]


def test_unsafe_patch_scoped_and_only_by_name_and_skips_without_the_loader(interpreter):
    _save_payloads(interpreter, ["exec"])
    result = interpreter.run_json(f"""
        import glob, json, os, pickle
        import lazypatch.auto, lazypatch
        from mmengine.runner.checkpoint import _load_checkpoint

        def load():
            try:
                _load_checkpoint("exec.pth", map_location="cpu")
                return "loaded"
            except pickle.UnpicklingError:
                return "refused"

        # Broad selections of mmengine or compatibility patches leave it off.
        with lazypatch.patched(tags=["mmengine", "compat"]) as scope:
            broad = [{UNSAFE!r} in scope.names, load()]
        with lazypatch.patched({UNSAFE!r}):
            inside = load()
        marker = glob.glob("*.marker")
        after = load()
        # Without the weights-only loader it has nothing to switch: skipped, with a reason.
        lazypatch.unpatch("openmmlab.mmengine_checkpoint_load")
        lazypatch.enable({UNSAFE!r})
        record = next(record for record in lazypatch.report() if record.name == {UNSAFE!r})
        print(json.dumps([broad, inside, marker, after, record.status, record.reason]))
    """)
    broad, inside, marker, after, status, reason = result
    assert broad == [False, "refused"]
    assert inside == "loaded" and marker == ["exec.marker"] and after == "refused"
    assert status == "skipped" and "openmmlab.mmengine_checkpoint_load's local loader" in reason


MESSAGE_HUB_CHECKPOINT = """
    import torch
    from mmengine.logging import MessageHub
    hub = MessageHub.get_instance("saved")
    for value in (3.0, 2.0, 1.0):
        hub.update_scalar("train/loss", value)
    hub.update_info("best_score", __import__("numpy").float64(0.5))
    torch.save({"meta": {"iter": 3}, "state_dict": {"w": torch.ones(2)},
                "message_hub": hub.state_dict()}, "hub.pth")
"""


def test_allow_list_is_registered_only_while_the_load_runs(interpreter):
    interpreter.run(MESSAGE_HUB_CHECKPOINT)
    result = interpreter.run_json("""
        import json
        import lazypatch.auto
        import numpy, torch
        from mmengine.runner.checkpoint import _load_checkpoint

        torch.serialization.add_safe_globals([numpy.ndarray])    # the user's own, before
        before = set(torch.serialization.get_safe_globals())
        seen = []

        def map_location(storage, location):   # called while torch unpickles the file
            seen.extend(repr(entry) for entry in torch.serialization.get_safe_globals())
            return storage

        loaded = _load_checkpoint("hub.pth", map_location=map_location)
        after = set(torch.serialization.get_safe_globals())
        buffer = loaded["message_hub"]["log_scalars"]["train/loss"]
        print(json.dumps([after == before, numpy.ndarray in after,
                          any("HistoryBuffer" in entry for entry in seen),
                          any("HistoryBuffer" in repr(entry) for entry in after),
                          float(buffer.min()), float(buffer.mean()),
                          type(loaded["message_hub"]["runtime_info"]["best_score"]).__name__]))
    """)
    assert result == [True, True, True, False, 1.0, 2.0, "float64"]


def test_explicit_weights_only_is_passed_to_torch_as_given(interpreter):
    _save_payloads(interpreter, ["exec"])
    interpreter.run(MESSAGE_HUB_CHECKPOINT)
    result = interpreter.run_json("""
        import glob, json, pickle
        import lazypatch.auto
        from mmengine.runner import checkpoint

        try:
            checkpoint.load_from_local("hub.pth", "cpu", weights_only=True)   # no allow-list
            strict = "loaded"
        except pickle.UnpicklingError as error:
            strict = str(error)
        checkpoint.load_from_local("exec.pth", "cpu", weights_only=False)     # asked for by name
        print(json.dumps([strict, glob.glob("*.marker")]))
    """)
    strict, marker = result
    assert strict.startswith("Weights only load failed") and "HistoryBuffer" in strict
    assert marker == ["exec.marker"]


def test_getattr_is_allowed_only_for_history_buffer_statistics(interpreter):
    result = interpreter.run_json("""
        import json, pickle
        import lazypatch.auto
        import torch
        from mmengine.logging.history_buffer import HistoryBuffer
        from mmengine.runner.checkpoint import _load_checkpoint

        class Reach:             # what a crafted file could ask of builtins.getattr
            def __init__(self, owner, name):
                self.owner, self.name = owner, name
            def __reduce__(self):
                return (getattr, (self.owner, self.name))

        outcomes = []
        for owner, name in ((HistoryBuffer, "mean"), (HistoryBuffer, "update"),
                            (HistoryBuffer, "__init__"), (getattr, "__self__")):
            torch.save({"meta": {}, "value": Reach(owner, name)}, "reach.pth")
            try:
                loaded = _load_checkpoint("reach.pth", map_location="cpu")
                outcomes.append(loaded["value"] is HistoryBuffer.mean)
            except pickle.UnpicklingError as error:
                outcomes.append(str(error).startswith("Weights only load failed")
                                and "is not allowed" in str(error))
        print(json.dumps(outcomes))
    """)
    assert result == [True, True, True, True]


def test_checkpoint_saved_with_numpy_1_names_loads(interpreter):
    # NumPy 1.x pickles name numpy.core.multiarray; the legacy (non-zip) format
    # is one pickle stream, so the GLOBAL lines can be rewritten as NumPy 1 wrote them.
    interpreter.run(MESSAGE_HUB_CHECKPOINT.replace('"hub.pth"', '"hub.pth", '
                                                   '_use_new_zipfile_serialization=False'))
    path = interpreter.root / "hub.pth"
    data = path.read_bytes()
    assert b"cnumpy._core.multiarray\n_reconstruct\n" in data
    assert b"cnumpy._core.multiarray\nscalar\n" in data
    path.write_bytes(data.replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n"))
    assert b"numpy._core" not in path.read_bytes()
    result = interpreter.run_json("""
        import json
        import lazypatch.auto
        from mmengine.runner.checkpoint import _load_checkpoint
        loaded = _load_checkpoint("hub.pth", map_location="cpu")
        hub = loaded["message_hub"]
        print(json.dumps([float(hub["log_scalars"]["train/loss"].mean()),
                          float(hub["runtime_info"]["best_score"])]))
    """)
    assert result == [2.0, 0.5]


def test_unpatch_restores_mmengine_loader_and_full_unpickling_flag_exactly(interpreter):
    result = interpreter.run_json(f"""
        import json, warnings
        import mmengine.runner.checkpoint as checkpoint
        original = checkpoint.load_from_local
        warnings.simplefilter("ignore")       # mmengine imported before lazypatch: late warning
        import lazypatch.auto, lazypatch
        from lazypatch.registry.openmmlab import checkpoint as pack_checkpoint
        schemes = checkpoint.CheckpointLoader._schemes
        lazypatch.enable({UNSAFE!r})
        patched = [checkpoint.load_from_local is original, schemes[""] is original,
                   pack_checkpoint.FULL_UNPICKLING]
        lazypatch.unpatch({UNSAFE!r})
        flag_after = pack_checkpoint.FULL_UNPICKLING
        lazypatch.unpatch("openmmlab.mmengine_checkpoint_load")
        print(json.dumps([patched, flag_after, checkpoint.load_from_local is original,
                          schemes[""] is original]))
    """)
    assert result == [[False, False, True], False, True, True]


def test_two_loads_at_once_keep_the_allow_list_until_both_finish(interpreter):
    # B starts while A is inside torch.load; A then finishes first. Unserialized,
    # A's exit would remove the entries B still needs for its HistoryBuffers.
    interpreter.run(MESSAGE_HUB_CHECKPOINT)
    result = interpreter.run_json("""
        import json, threading
        import lazypatch.auto
        from mmengine.runner.checkpoint import _load_checkpoint
        a_inside, b_inside, a_done = threading.Event(), threading.Event(), threading.Event()
        outcomes = {}

        def hook(mine, other, wait_seconds):
            def map_location(storage, location):
                mine.set()
                other.wait(wait_seconds)   # times out when the loads are serialized
                return storage
            return map_location

        def load(name, map_location, done=None):
            try:
                _load_checkpoint("hub.pth", map_location=map_location)
                outcomes[name] = "loaded"
            except Exception as error:
                outcomes[name] = f"{type(error).__name__}: {str(error)[:80]}"
            if done is not None:
                done.set()

        first = threading.Thread(target=load, args=("a", hook(a_inside, b_inside, 1), a_done))
        first.start()
        a_inside.wait()
        second = threading.Thread(target=load, args=("b", hook(b_inside, a_done, 30)))
        second.start()
        first.join(); second.join()
        print(json.dumps(outcomes, sort_keys=True))
    """)
    assert result == {"a": "loaded", "b": "loaded"}

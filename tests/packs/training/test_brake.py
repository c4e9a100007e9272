"""The brake: LAZYPATCH_BRAKE_STEP / brake_at stop real training loops cleanly.

Plain PyTorch loops (global optimizer step hooks) and real mmengine Runner
loops on the CPU, each in a fresh interpreter; resumed runs must stop at
their next step, not train on forever.
"""

from __future__ import annotations

import json
import sys

from packs.training.training_programs import MMENGINE_RUN, PLAIN_LOOP


def run_script(interpreter, name, args, env, **kwargs):
    return interpreter.run_command([sys.executable, name, *map(str, args)], env=env, **kwargs)


def test_plain_loop_stops_after_step_n_with_exit_code_0_and_writes_the_report(interpreter):
    interpreter.write({"loop.py": PLAIN_LOOP})
    report = interpreter.root / "report.json"
    result = run_script(interpreter, "loop.py", [50],
                        {"LAZYPATCH_BRAKE_STEP": "7", "LAZYPATCH_REPORT": str(report)})
    assert result.returncode == 0
    assert "completed step 6" in result.stdout
    assert "completed step 7" not in result.stdout      # stopped inside step 7's optimizer.step
    assert "LOOP FINISHED" not in result.stdout
    assert "stopped training after optimizer step 7" in result.stderr
    assert "LAZYPATCH_BRAKE_STEP=7" in result.stderr
    records = {record["name"]: record for record in json.loads(report.read_text())["patches"]}
    assert records["training.optimizer_steps"]["status"] == "applied"


def test_brake_is_off_by_default_and_imports_nothing(interpreter):
    interpreter.write({"loop.py": PLAIN_LOOP})
    result = run_script(interpreter, "loop.py", [3], {})
    assert "LOOP FINISHED" in result.stdout and "brake" not in result.stderr
    state = interpreter.run_json("""
        import json, sys
        import lazypatch.auto, lazypatch
        records = {r.name: r.status for r in lazypatch.report() if r.name.startswith("training.")}
        print(json.dumps([records, "torch" in sys.modules, "mmengine" in sys.modules]))
    """)
    assert state == [{"training.optimizer_steps": "disabled",
                      "training.mmengine_iterations": "disabled",
                      "training.tracing": "disabled",
                      "training.tracker": "disabled"}, False, False]


def test_resumed_plain_loop_past_the_brake_stops_at_its_next_step(interpreter):
    """Adam keeps its step count in its state: a run resumed at step 6 with the brake
    at 4 stops after its first step (7), instead of never matching ``== 4``."""
    interpreter.write({"loop.py": PLAIN_LOOP})
    checkpoint = interpreter.root / "optimizer.pt"
    first = run_script(interpreter, "loop.py", [6, "Adam", checkpoint], {})
    assert "LOOP FINISHED" in first.stdout
    resumed = run_script(interpreter, "loop.py", [20, "Adam", "", checkpoint],
                         {"LAZYPATCH_BRAKE_STEP": "4"})
    assert resumed.returncode == 0
    assert "completed step 1" not in resumed.stdout
    assert "stopped training after optimizer step 7" in resumed.stderr


def test_brake_at_api_and_bad_variable(interpreter):
    interpreter.write({"loop.py": PLAIN_LOOP})
    result = interpreter.run("""
        import warnings
        import lazypatch.auto
        import torch
        from lazypatch.registry.training import brake_at
        brake_at(2)                    # torch is already imported: applies at once
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(1, 10):
            model(torch.ones(1, 2)).sum().backward()
            optimizer.step()
            print("completed step", step, flush=True)
    """, env={"LAZYPATCH_BRAKE_STEP": "soon"})
    assert "LAZYPATCH_BRAKE_STEP='soon' is not a positive integer" in result.stderr
    assert "completed step 1" in result.stdout and "completed step 2" not in result.stdout
    assert "stopped training after optimizer step 2 (brake step 2, from brake_at(2))" \
        in result.stderr


def test_mmengine_epoch_loop_stops_after_iteration_n(interpreter):
    interpreter.write({"tinyrun.py": MMENGINE_RUN})
    result = run_script(interpreter, "tinyrun.py", [interpreter.root / "work", "epoch", 12],
                        {"LAZYPATCH_BRAKE_STEP": "5"})
    assert result.returncode == 0
    assert "TRAINING FINISHED" not in result.stdout
    assert "stopped training after EpochBasedTrainLoop iteration 5" in result.stderr
    # epoch 1 (iterations 1-4) finished and saved; epoch 2 was cut after its first iteration
    saved = sorted(path.name for path in (interpreter.root / "work").glob("epoch_*.pth"))
    assert saved == ["epoch_1.pth"]


def test_resumed_mmengine_iter_loop_past_the_brake_stops_at_its_next_iteration(interpreter):
    interpreter.write({"tinyrun.py": MMENGINE_RUN})
    work = interpreter.root / "work"
    first = run_script(interpreter, "tinyrun.py", [work, "iter", 6], {})
    assert "TRAINING FINISHED at iteration 6" in first.stdout
    # mmengine 0.10.7 resumes with a plain torch.load; under torch >= 2.6 the openmmlab
    # pack's openmmlab.mmengine_checkpoint_load allows its checkpoint types (weights-only).
    resumed = run_script(interpreter, "tinyrun.py", [work, "iter", 12, "resume"],
                         {"LAZYPATCH_BRAKE_STEP": "4"})
    assert resumed.returncode == 0
    assert "TRAINING FINISHED" not in resumed.stdout
    assert "stopped training after IterBasedTrainLoop iteration 7" in resumed.stderr

"""Step-driven profiling (LAZYPATCH_PROFILE*) on real loops: trace files exist and parse."""

from __future__ import annotations

import json
import sys

from packs.training.training_programs import MMENGINE_RUN, PLAIN_LOOP


def traces(directory):
    found = sorted(directory.glob("*.pt.trace.json"))
    return [json.loads(path.read_text()) for path in found]


def test_plain_loop_profile_then_brake(interpreter):
    interpreter.write({"loop.py": PLAIN_LOOP})
    profile = interpreter.root / "profile"
    result = interpreter.run_command(
        [sys.executable, "loop.py", "50"],
        env={"LAZYPATCH_PROFILE": str(profile), "LAZYPATCH_PROFILE_LEVEL": "1",
             "LAZYPATCH_PROFILE_SKIP": "2", "LAZYPATCH_BRAKE_STEP": "8"})
    assert result.returncode == 0
    documents = traces(profile)
    assert len(documents) == 1                       # one cycle: repeat defaults to 1
    names = {event.get("name") for event in documents[0]["traceEvents"]}
    assert "aten::addmm" in names                    # CPU activity at level 1
    assert any(name and name.startswith("ProfilerStep#") for name in names)
    shapes = [event for event in documents[0]["traceEvents"]
              if event.get("name") == "aten::addmm" and "Input Dims" in event.get("args", {})]
    assert shapes, "level 1 records shapes"
    # the summary table comes before the brake line: profile, then stop
    table_at = result.stderr.index("most expensive operators")
    assert "aten::" in result.stderr[table_at:]
    assert table_at < result.stderr.index("stopped training after optimizer step 8")


def test_profile_levels_and_default_schedule(interpreter):
    result = interpreter.run_json("""
        import json
        from lazypatch.registry.training.settings import ProfileSettings
        from lazypatch.registry.training.profiling import profiler_arguments
        rows = {}
        for level in (0, 1, 2):
            _, arguments, note = profiler_arguments(ProfileSettings("p", level))
            rows[level] = [[str(a) for a in arguments["activities"]], arguments["record_shapes"],
                           arguments["with_stack"], arguments["profile_memory"], note]
        default = ProfileSettings("p")
        rows["schedule"] = [default.skip_first, default.wait, default.warmup, default.active,
                            default.repeat, default.last_step]
        print(json.dumps(rows))
    """)
    assert result["0"][:4] == [["ProfilerActivity.CPU"], False, False, False]
    assert "no accelerator" in result["0"][4]
    assert result["1"][1:4] == [True, False, False]
    assert result["2"][1:4] == [True, True, True]
    assert result["schedule"] == [20, 1, 1, 1, 1, 23]


def test_mmengine_runner_profile_then_brake(interpreter):
    interpreter.write({"tinyrun.py": MMENGINE_RUN})
    profile = interpreter.root / "profile"
    result = interpreter.run_command(
        [sys.executable, "tinyrun.py", str(interpreter.root / "work"), "epoch", "40"],
        env={"LAZYPATCH_PROFILE": str(profile), "LAZYPATCH_PROFILE_SKIP": "1",
             "LAZYPATCH_PROFILE_ACTIVE": "2", "LAZYPATCH_BRAKE_STEP": "6"})
    assert result.returncode == 0
    assert "stopped training after EpochBasedTrainLoop iteration 6" in result.stderr
    documents = traces(profile)
    assert len(documents) == 1
    steps = {event["name"] for event in documents[0]["traceEvents"]
             if event.get("name", "").startswith("ProfilerStep#")}
    assert len(steps) == 2                           # active=2 iterations recorded
    names = {event.get("name") for event in documents[0]["traceEvents"]}
    assert any(name and name.startswith("Optimizer.step#SGD") for name in names)


def test_bad_profile_level_warns_and_falls_back(interpreter):
    result = interpreter.run_json("""
        import json, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import lazypatch.auto
        from lazypatch.registry.training.settings import STATE
        print(json.dumps([STATE.profile.level, [str(w.message) for w in caught]]))
    """, env={"LAZYPATCH_PROFILE": "somewhere", "LAZYPATCH_PROFILE_LEVEL": "9"})
    level, messages = result
    assert level == 0
    assert any("LAZYPATCH_PROFILE_LEVEL" in message for message in messages)

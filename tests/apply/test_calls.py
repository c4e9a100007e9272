"""Call tracking: whether each patch's replacements were called, how often, from where.

On Python 3.12+ the default counts through ``sys.monitoring`` events on exactly the
replacement's code (the object in place stays the user's own); ``wrappers`` counts
through a thin wrapper on any version; before 3.12 the default tracks nothing and
says how to. Every scenario runs in a fresh interpreter on real modules on disk.
"""

from __future__ import annotations

import sys

import pytest

MONITORING = sys.version_info >= (3, 12)
# The modes that count on this interpreter: the default only where sys.monitoring exists.
COUNTING_MODES = ["auto", "wrappers"] if MONITORING else ["wrappers"]

FILES = {
    "kernels.py": """
        def fused(x):
            return ("cuda", x)

        def unused(x):
            return ("cuda unused", x)

        class Layer:
            def forward(self, x):
                return ("cuda forward", x)

            @classmethod
            def build(cls):
                return "cuda build"

            @staticmethod
            def helper():
                return "cuda helper"

        class Block:
            def __init__(self):
                self.kind = "cuda"
    """,
    "reexport.py": "from kernels import fused as public_fused\n",
    "shims.py": """
        def fused(x):
            return ("npu", x)

        def unused(x):
            return ("npu unused", x)

        def forward(self, x):
            return ("npu forward", x)

        @classmethod
        def build(cls):
            return "npu build"

        @staticmethod
        def helper():
            return "npu helper"

        class Block:
            def __init__(self):
                self.kind = "npu"

        def logged(wrapped, instance, args, kwargs):
            return ("logged", wrapped(*args, **kwargs))
    """,
    "patches.py": """
        import lazypatch, shims

        @lazypatch.when_imported("kernels")
        def npu_kernels(module, patch):
            patch.setattr(module, "fused", shims.fused)
            patch.setattr(module.Layer, "forward", shims.forward)
            patch.setattr(module.Layer, "build", shims.build)
            patch.setattr(module.Layer, "helper", shims.helper)
            patch.setattr(module, "Block", shims.Block)

        @lazypatch.when_imported("kernels")
        def npu_unused(module, patch):
            patch.setattr(module, "unused", shims.unused)

        lazypatch.wrap("kernels.fused", shims.logged, name="log_fused")

        @lazypatch.when_imported("kernels")
        def constant(module, patch):
            patch.setattr(module, "VERSION", 2)
    """,
}

REPORT = """
import json, lazypatch
def calls():
    return {record.name: {key: record[key] for key in
                          ("calls", "first_call_site", "call_counts", "calls_not_tracked")}
            for record in lazypatch.report()}
"""


def env_for(mode):
    return {"LAZYPATCH_TRACK_CALLS": mode}


def line_of(script: str, marker: str) -> int:
    """The line number of ``marker`` in ``script``, as the scenario file will have it."""
    return next(number for number, line in enumerate(script.splitlines(), 1) if marker in line)


@pytest.mark.parametrize("mode", COUNTING_MODES)
def test_counts_and_first_call_site_of_every_kind_of_replacement(interpreter, mode):
    interpreter.write(FILES)
    script = REPORT + """
import patches, kernels
for _ in range(3):
    kernels.fused(1)                      # FUSED: through the wrap, then the replacement
layer = kernels.Layer()
layer.forward(1); kernels.Layer.build(); kernels.Layer.helper(); kernels.Layer.helper()  # HELPER
kernels.Block()
table = lazypatch.render_report()
print(json.dumps({"calls": calls(), "table": table}))
"""
    result = interpreter.run_json(script, env=env_for(mode))
    fused_line, helper_line = line_of(script, "# FUSED"), line_of(script, "# HELPER")
    calls = result["calls"]
    kernels = {entry["function"]: entry for entry in calls["patches.npu_kernels"]["call_counts"]}
    expected = {"shims.fused": 3, "shims.forward": 1, "shims.build": 1, "shims.helper": 2}
    if mode == "auto":      # a class in place is counted by its own __init__; a wrapper
        expected["shims.Block.__init__"] = 1   # cannot stand in for a class, so not there
    assert {name: entry["calls"] for name, entry in kernels.items()} == expected
    assert calls["patches.npu_kernels"]["calls"] == sum(expected.values())
    # The replacement is called by the user's wrapper (logged), which the user's line called.
    assert kernels["shims.fused"]["first_call_site"].endswith(".py:" + str(
        line_of(FILES["shims.py"], "return (\"logged\""))), kernels
    assert kernels["shims.helper"]["first_call_site"].endswith(f"_scenario.py:{helper_line}")
    assert calls["log_fused"]["calls"] == 3
    assert calls["log_fused"]["call_counts"][0]["function"] == "shims.logged"
    assert calls["log_fused"]["first_call_site"].endswith(f"_scenario.py:{fused_line}")
    assert calls["patches.npu_unused"]["calls"] == 0
    assert calls["patches.constant"]["calls"] is None       # nothing callable put in place
    table = result["table"]
    assert "never called" in [line for line in table.splitlines() if "npu_unused" in line][0]
    assert f"called {sum(expected.values())}x, first from" in table


@pytest.mark.skipif(not MONITORING, reason="sys.monitoring needs Python 3.12+")
def test_monitoring_keeps_the_users_object_in_place_and_stops_counting_on_undo(interpreter):
    interpreter.write(FILES)
    result = interpreter.run_json(REPORT + """
import sys, shims, patches
lazypatch.disable("log_fused")
import kernels
kernels.fused(1)
same = kernels.fused is shims.fused
tool = [t for t in (3, 4) if sys.monitoring.get_tool(t) == "lazypatch"]
events = sys.monitoring.get_local_events(tool[0], shims.fused.__code__)
lazypatch.unpatch_all()
shims.fused(1)                     # the user's own function, no longer in place: not counted
after = sys.monitoring.get_local_events(tool[0], shims.fused.__code__)
print(json.dumps({"same": same, "events": events, "after": after,
                  "restored": kernels.fused(1)[0], "calls": calls()}))
""")
    assert result["same"] is True
    assert result["events"] != 0 and result["after"] == 0
    assert result["restored"] == "cuda"
    kept = result["calls"]["patches.npu_kernels"]
    assert kept["calls"] == 1, "counts are kept in the record after undo"


def test_wrappers_mode_puts_a_transparent_wrapper_in_place_and_undo_removes_it(interpreter):
    interpreter.write(FILES)
    result = interpreter.run_json(REPORT + """
import inspect, shims, patches
lazypatch.disable("log_fused")
import kernels, reexport
wrapper = kernels.fused
facts = {"is_user_object": wrapper is shims.fused, "wrapped": wrapper.__wrapped__ is shims.fused,
         "name": wrapper.__name__, "qualname": wrapper.__qualname__,
         "signature": str(inspect.signature(wrapper)),
         "result": wrapper(1), "method": kernels.Layer().forward(2),
         "classmethod": kernels.Layer.build(), "staticmethod": kernels.Layer.helper()}
lazypatch.unpatch_all()
facts["restored"] = [kernels.fused(1), kernels.Layer().forward(2), kernels.Layer.build(),
                     kernels.Layer.helper(), kernels.Block().kind]
facts["wrapper_left"] = any(getattr(value, "__lazypatch_calls__", None) is not None
                            for value in vars(kernels).values())
print(json.dumps(facts))
""", env=env_for("wrappers"))
    assert result["is_user_object"] is False and result["wrapped"] is True
    assert (result["name"], result["qualname"], result["signature"]) == ("fused", "fused", "(x)")
    assert result["result"] == ["npu", 1] and result["method"] == ["npu forward", 2]
    assert result["classmethod"] == "npu build" and result["staticmethod"] == "npu helper"
    assert result["restored"] == [["cuda", 1], ["cuda forward", 2], "cuda build",
                                  "cuda helper", "cuda"]
    assert result["wrapper_left"] is False


@pytest.mark.skipif(MONITORING, reason="before 3.12 only: no sys.monitoring")
def test_before_312_the_default_says_calls_are_not_tracked_and_how_to_track_them(interpreter):
    interpreter.write(FILES)
    result = interpreter.run_json(REPORT + """
import shims, patches, kernels
kernels.fused(1)
print(json.dumps({"calls": calls(), "same": kernels.Layer.forward is shims.forward,
                  "table": lazypatch.render_report()}))
""")
    record = result["calls"]["patches.npu_kernels"]
    assert record["calls"] is None
    assert "LAZYPATCH_TRACK_CALLS=wrappers" in record["calls_not_tracked"]
    assert result["same"] is True               # nothing wrapped by default
    footer = [line for line in result["table"].splitlines() if "calls not counted" in line]
    assert len(footer) == 1, result["table"]


def test_off_tracks_nothing_and_takes_no_monitoring_tool(interpreter):
    interpreter.write(FILES)
    result = interpreter.run_json(REPORT + """
import sys, shims, patches, kernels
kernels.fused(1)
tools = [sys.monitoring.get_tool(t) for t in range(6)] if hasattr(sys, "monitoring") else []
print(json.dumps({"calls": calls(), "tools": tools,
                  "same": kernels.Layer.forward is shims.forward}))
""", env=env_for("off"))
    record = result["calls"]["patches.npu_kernels"]
    assert record["calls"] is None and "LAZYPATCH_TRACK_CALLS=off" in record["calls_not_tracked"]
    assert "lazypatch" not in result["tools"]
    assert result["same"] is True


def test_a_bad_value_warns_naming_the_choices_and_the_program_runs(interpreter):
    interpreter.write(FILES)
    result = interpreter.run("""
import warnings
warnings.simplefilter("error")           # a bad setting must still not stop the program
import patches, kernels
print(kernels.fused(1))
""", env=env_for("sometimes"), python_args=["-W", "error"])
    assert "npu" in result.stdout
    assert "LAZYPATCH_TRACK_CALLS='sometimes' is not one of auto, wrappers, off" in result.stderr


@pytest.mark.parametrize("mode", COUNTING_MODES)
def test_calls_from_many_threads_are_all_counted(interpreter, mode):
    interpreter.write(FILES)
    result = interpreter.run_json(REPORT + """
import threading, patches
lazypatch.disable("log_fused")
import kernels
def work():
    for _ in range(5000):
        kernels.fused(1)
threads = [threading.Thread(target=work) for _ in range(8)]
for thread in threads: thread.start()
for thread in threads: thread.join()
print(json.dumps(calls()))
""", env=env_for(mode))
    counts = {entry["function"]: entry["calls"]
              for entry in result["patches.npu_kernels"]["call_counts"]}
    assert counts["shims.fused"] == 40000


@pytest.mark.parametrize("mode", COUNTING_MODES)
def test_aliases_share_one_count_and_a_call_is_counted_once(interpreter, mode):
    interpreter.write(FILES)
    result = interpreter.run_json(REPORT + """
import reexport, kernels, sys
lazypatch.replace("kernels.fused", "shims:fused", aliases=["reexport.public_fused"],
                  name="fused_everywhere")
kernels.fused(1); reexport.public_fused(2)
same_object = kernels.fused is reexport.public_fused
print(json.dumps({"calls": calls(), "same": same_object}))
""", env=env_for(mode))
    assert result["same"] is True
    main = result["calls"]["fused_everywhere"]
    assert main["calls"] == 2
    aliases = [record for name, record in result["calls"].items() if ".alias:" in name]
    assert aliases and all(record["calls"] == 2 for record in aliases)


@pytest.mark.parametrize("mode", COUNTING_MODES)
def test_a_patch_applied_again_after_undo_goes_on_counting(interpreter, mode):
    interpreter.write(FILES)
    result = interpreter.run_json(REPORT + """
import patches, shims
lazypatch.disable("log_fused")
import kernels
kernels.fused(1)
lazypatch.unpatch("patches.npu_kernels")
shims.fused(1)                       # not in place now: not counted
assert kernels.fused(1)[0] == "cuda"
lazypatch.enable("patches.npu_kernels")   # applied again to the imported module
kernels.fused(1); kernels.fused(1)
print(json.dumps({"calls": calls(), "result": kernels.fused(1)[0]}))
""", env=env_for(mode))
    counts = {entry["function"]: entry["calls"]
              for entry in result["calls"]["patches.npu_kernels"]["call_counts"]}
    assert counts["shims.fused"] == 3 and result["result"] == "npu"


@pytest.mark.skipif(not MONITORING, reason="sys.monitoring needs Python 3.12+")
def test_functions_made_by_one_factory_share_their_code_and_say_so(interpreter):
    interpreter.write({"target.py": "def a():\n    return 'a'\ndef b():\n    return 'b'\n"})
    result = interpreter.run_json(REPORT + """
def make(label):
    def redirected():
        return label
    return redirected
@lazypatch.when_imported("target")
def redirect(module, patch):
    patch.setattr(module, "a", make("new a"))
    patch.setattr(module, "b", make("new b"))
import target
target.a(); target.a(); target.b()
print(json.dumps(calls()))
""")
    (entry,) = result["__main__.redirect"]["call_counts"]
    assert entry["calls"] == 3 and entry["shared_by"] == 2


@pytest.mark.skipif(not MONITORING, reason="sys.monitoring needs Python 3.12+")
def test_when_other_tools_hold_the_free_monitoring_ids_the_report_says_so(interpreter):
    interpreter.write(FILES)
    result = interpreter.run_json(REPORT + """
import sys
sys.monitoring.use_tool_id(3, "someone"); sys.monitoring.use_tool_id(4, "someone else")
import patches, kernels
kernels.fused(1)
print(json.dumps({"calls": calls(), "result": kernels.fused(1)}))
""")
    record = result["calls"]["patches.npu_kernels"]
    assert record["calls"] is None and "both taken" in record["calls_not_tracked"]
    assert result["result"][1][0] == "npu"


@pytest.mark.skipif(not MONITORING, reason="sys.monitoring needs Python 3.12+")
def test_reset_gives_the_monitoring_tool_back(interpreter):
    interpreter.write(FILES)
    result = interpreter.run_json(REPORT + """
import sys, patches, kernels
kernels.fused(1)
held = [sys.monitoring.get_tool(t) for t in (3, 4)]
lazypatch.reset()
print(json.dumps({"held": held, "after": [sys.monitoring.get_tool(t) for t in (3, 4)]}))
""")
    assert "lazypatch" in result["held"] and result["after"] == [None, None]


def test_an_interrupt_while_tracking_rolls_the_import_back(interpreter):
    interpreter.write(FILES)
    result = interpreter.run_json(REPORT + """
import lazypatch.apply.application as application, patches
def interrupted(patch, context):
    raise KeyboardInterrupt
application._track_calls = interrupted
try:
    import kernels
except KeyboardInterrupt:
    interrupted_import = True
import sys
print(json.dumps({"interrupted": interrupted_import, "in_modules": "kernels" in sys.modules,
                  "statuses": sorted({record.status for record in lazypatch.report()}),
                  "live": sum(len(record.changes) for record in lazypatch.report())}))
""", env=env_for("wrappers"))
    assert result["interrupted"] is True and result["in_modules"] is False
    assert result["live"] == 0


@pytest.mark.parametrize("mode", COUNTING_MODES)
def test_the_diff_shows_the_users_function_not_the_counting_machinery(interpreter, mode):
    interpreter.write(FILES)
    result = interpreter.run_json(REPORT + """
import patches
lazypatch.disable("log_fused")
import kernels
print(json.dumps(lazypatch.render_report(diff=True)))
""", env=env_for(mode))
    assert 'return ("npu", x)' in result and "calls.py" not in result


@pytest.mark.parametrize("mode", COUNTING_MODES)
def test_merged_reports_sum_the_calls_of_every_process(interpreter, mode):
    interpreter.write(FILES)
    script = """
import sys, lazypatch, patches, kernels
for _ in range(int(sys.argv[1])):
    kernels.fused(1)
lazypatch.write_report(sys.argv[2])
"""
    for rank, calls in (("0", 3), ("1", 0), ("2", 4)):
        interpreter.run(script, args=[str(calls), str(interpreter.root / "r-{rank}.json")],
                        env={**env_for(mode), "RANK": rank})
    result = interpreter.run_command([sys.executable, "-m", "lazypatch", "report",
                                      str(interpreter.root / "r-*.json")])
    text = result.stdout
    assert "3 reports, 1 group of identical processes" in text, text
    assert "  patches.npu_unused: never called, in 3 processes" in text, text
    assert "  log_fused: called 7x, first from _scenario.py:" in text, text
    merged = interpreter.run_command([sys.executable, "-m", "lazypatch", "report", "--format",
                                      "json", str(interpreter.root / "r-*.json")])
    import json
    patches = {patch["name"]: patch for patch in json.loads(merged.stdout)["patches"]}
    assert patches["log_fused"]["calls"]["calls"] == 7
    assert patches["log_fused"]["calls"]["processes_counted"] == 3
    assert patches["patches.constant"]["calls"] is None


@pytest.mark.parametrize("mode", COUNTING_MODES)
def test_a_records_first_call_site_is_the_earliest_of_its_functions_first_calls(interpreter,
                                                                                mode):
    interpreter.write(FILES)
    script = REPORT + """
import patches
lazypatch.disable("log_fused")
import kernels
kernels.Layer.helper()          # FIRST: helper was put in place after fused
kernels.fused(1)
print(json.dumps(calls()))
"""
    result = interpreter.run_json(script, env=env_for(mode))
    record = result["patches.npu_kernels"]
    assert record["first_call_site"].endswith(f"_scenario.py:{line_of(script, '# FIRST')}")

"""Budget 6: 10, 1,000 and 10,000 registered patches.

Registration of K patches on K distinct, never-imported modules, timed in
the process (median over processes); budget: linear, and under 30 ms for
10,000. Then the cost of unwatched imports with K patches registered, which
must not grow with K (the finder does one dict lookup): compared with K=10
as the baseline, by instruction count when callgrind is there. Last, ``unpatch``
and ``enable`` of one applied patch with 1,000, 10,000 and 100,000 registered
(named in families and tagged, as packs are): flat, since the catalog's indexes
answer selection and undo without walking every patch. And the memory an
application keeps, with 1,000 one-attribute patches on a module of 20,000 names,
against the size of that module's namespace: it follows what a patch changed.
And ``lazypatch.report()`` of 300 and 3,000 patches waiting on 50 modules that are not
installed (each record says so, with the nearest installed name): linear, since the
installed modules are listed once per report, not once per record.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from benchmarks import harness
from benchmarks.environment import Environment
from benchmarks.watch.measure_imports import loop_command, loop_instructions, per_import_us

GROUP = "6. Scale"
SIZES = (10, 1_000, 10_000)
REGISTRATION_BUDGET_MS = 30.0   # issue 35 (DESIGN.md's 50 ms, with room for the packs)
LINEAR_TOLERANCE = 1.5     # per-patch time at 10,000 at most 1.5x that at 1,000
FLAT_TOLERANCE = 1.05      # unwatched import at 10,000 patches within 5% of at 10
UNPATCH_SIZES = (1_000, 10_000, 100_000)
UNPATCH_TOLERANCE = 1.5    # unpatch + enable at 100,000 at most 1.5x that at 1,000
UNPATCH_CYCLES = 200

# The registrations alone, as import_loop.py times them (the names formatted in the loop),
# with the process's CPU time beside the wall clock: on a shared machine the wall clock
# says how busy it was, the CPU time and the instruction count what registration costs.
REGISTER_SCRIPT = """
import json, os, sys, time
import lazypatch
def no_op_patch(module):
    pass
count = int(sys.argv[1])
started, cpu = time.perf_counter(), time.process_time()
for index in range(count):
    lazypatch.register(no_op_patch, "bench_never_imported_%d" % index,
                       name="bench.extra_%d" % index)
print(json.dumps({"wall_s": time.perf_counter() - started,
                  "cpu_s": time.process_time() - cpu}))
sys.stdout.flush()
os._exit(0)   # as import_loop.py: the teardown of 10,000 patches is not registration
"""

MEMORY_NAMES = 20_000
MEMORY_PATCHES = 1_000
MEMORY_BUDGET = 0.05       # held per application at most 5% of one copy of the namespace

MEMORY_SCRIPT = """
import gc, json, sys, tracemalloc
sys.path.insert(0, sys.argv[1])
import lazypatch
for index in range(int(sys.argv[2])):
    def change(module, patch, index=index):
        patch.setattr(module, f"name_{index}", -index)
    lazypatch.register(change, "wide_module", name=f"memory.{index}")
gc.collect()
tracemalloc.start()
import wide_module
gc.collect()
held = tracemalloc.get_traced_memory()[0]
tracemalloc.stop()
print(json.dumps({"held": held, "namespace": sys.getsizeof(dict(vars(wide_module)))}))
"""

UNPATCH_SCRIPT = """
import json, sys, time
import lazypatch
size, cycles = int(sys.argv[1]), int(sys.argv[2])
for index in range(size):
    lazypatch.register(lambda module: None, f"scale_target_{index}",
                       name=f"family{index % 50}.group{index % 7}.patch{index}",
                       tags=(f"tag{index % 20}",))
import json as target      # an imported module: the patch applies at once
def change(module, patch):
    patch.setattr(module, "lazypatch_scale_marker", 1)
lazypatch.register(change, "json", name="scale.measured", tags=("tag1",))
started = time.perf_counter()
lazypatch.unpatch("scale.measured")     # the first selection builds the catalog's indexes
lazypatch.enable("scale.measured")
first = time.perf_counter() - started
started = time.perf_counter()
for _ in range(cycles):
    lazypatch.unpatch("scale.measured")
    lazypatch.enable("scale.measured")
print(json.dumps({"cycle_s": (time.perf_counter() - started) / cycles, "first_s": first}))
"""


WAITING_SIZES = (300, 3_000)
WAITING_MODULES = 50
WAITING_TOLERANCE = 1.5    # per record at 3,000 at most 1.5x that at 300 (linear)

WAITING_SCRIPT = """
import json, sys, time
import lazypatch
size, modules = int(sys.argv[1]), int(sys.argv[2])
for index in range(size):
    lazypatch.register(lambda module: None, f"scale_missing_{index % modules}_module",
                       name=f"waiting.patch{index}")
started = time.perf_counter()
records = lazypatch.report()
elapsed = time.perf_counter() - started
assert all(record["notes"] for record in records), "a record without its hint"
print(json.dumps({"report_s": elapsed}))
"""


def measure(environment: Environment, repetitions: int, count: int,
            instruction_count: Optional[int]) -> List[Dict[str, object]]:
    """Rows: registration time per size, linearity, and unwatched-import flatness."""
    env = environment.env()
    samples = {f"{size}/{kind}": harness.Samples() for size in SIZES
               for kind in ("register", "import")}
    for repetition in range(repetitions + 1):       # the first round is a warm-up
        order = SIZES if repetition % 2 else tuple(reversed(SIZES))
        for size in order:
            document = harness.last_json_line(harness.run_process(
                loop_command(environment, count, extra_patches=size), env=env).stdout)
            if repetition:
                samples[f"{size}/register"].values.append(document["register_s"])  # type: ignore[index]
                samples[f"{size}/import"].values.append(document["import_s"])  # type: ignore[index]
    rows = []
    register_ms = {size: samples[f"{size}/register"].median * 1e3 for size in SIZES}
    for size in SIZES:
        # The budget's verdict is the CPU time's (registration_cost_rows): on a shared
        # machine the wall clock says how busy it was.
        rows.append(harness.row(
            GROUP, f"register {size:,} patches", register_ms[size], "ms",
            budget=f"< {REGISTRATION_BUDGET_MS:g} ms" if size == 10_000 else "",
            spread=samples[f"{size}/register"].spread(1e3, 2),
            note=f"{register_ms[size] / size * 1e3:.2f} µs per patch"
                 + ("; verdict from the CPU time" if size == 10_000 else ""),
            raw=samples[f"{size}/register"].as_dict()))
    cost_rows, cpu_ms = registration_cost_rows(environment, repetitions,
                                               instruction_count is not None)
    rows += cost_rows
    # Linearity from the CPU time too: the wall clock of a loaded machine grows with
    # whatever else runs during the longer loop.
    per_patch_small, per_patch_large = cpu_ms[1_000] / 1_000, cpu_ms[10_000] / 10_000
    linear = per_patch_large / per_patch_small
    rows.append(harness.row(
        GROUP, "registration linearity: µs/patch at 10,000 vs at 1,000",
        per_patch_large * 1e3, "µs/patch", baseline=per_patch_small * 1e3, ratio=linear,
        budget=f"ratio ≤ {LINEAR_TOLERANCE:g} (linear)",
        verdict=harness.verdict(linear <= LINEAR_TOLERANCE),
        note=f"CPU time; wall clock: {register_ms[10_000] / 10:.2f} µs/patch at 10,000, "
             f"{register_ms[1_000]:.2f} at 1,000"))
    small_us = per_import_us(samples["10/import"], count)
    large_us = per_import_us(samples["10000/import"], count)
    counted = None
    if instruction_count:
        small = loop_instructions(environment, instruction_count, extra_patches=10) \
            / instruction_count
        large = loop_instructions(environment, instruction_count, extra_patches=10_000) \
            / instruction_count
        counted = large / small
        rows.append(harness.row(
            GROUP, "unwatched import with 10,000 patches vs with 10 (instructions)", large,
            "instr/import", baseline=small, ratio=counted, difference=large - small,
            budget=f"ratio ≤ {FLAT_TOLERANCE:g} (flat)",
            verdict=harness.verdict(counted <= FLAT_TOLERANCE)))
    rows.append(harness.row(
        GROUP, "unwatched import with 10,000 patches vs with 10 (wall)", large_us, "µs/import",
        baseline=small_us, ratio=large_us / small_us, difference=large_us - small_us,
        budget=f"ratio ≤ {FLAT_TOLERANCE:g} (flat)",
        verdict=harness.INFO if counted is not None
        else harness.verdict(large_us / small_us <= FLAT_TOLERANCE),
        spread=samples["10000/import"].spread(1e6 / count, 2) + "; with 10 "
               + samples["10/import"].spread(1e6 / count, 2),
        raw={"10": samples["10/import"].as_dict(), "10000": samples["10000/import"].as_dict()}))
    rows += unpatch_rows(environment, repetitions)
    rows.append(memory_row(environment))
    rows.append(waiting_report_row(environment, repetitions))
    return rows


def registration_cost_rows(environment: Environment, repetitions: int, count_instructions: bool
                           ) -> "Tuple[List[Dict[str, object]], Dict[int, float]]":
    """Instructions per ``register()`` (callgrind, 10,000 registrations against none), and
    the CPU time of 1,000 and 10,000 (medians over interleaved processes): the rows, the
    budget's verdict on 10,000, and the CPU milliseconds by size."""
    script = str(environment.script("register_scale.py", REGISTER_SCRIPT))
    python = str(environment.clean_python)
    sizes = (1_000, 10_000)
    rows = []
    per_registration = None
    if count_instructions:
        counted = harness.instructions([python, script, str(sizes[-1])], environment.env())
        empty = harness.instructions([python, script, "0"], environment.env())
        per_registration = (counted - empty) / sizes[-1]
        rows.append(harness.row(
            GROUP, f"register {sizes[-1]:,} patches (instructions per registration)",
            per_registration, "instr",
            note="callgrind, the process with 10,000 registrations minus the one with none "
                 "(the loop's own name formatting, about 5,300, included)"))
    cpu = {size: harness.Samples() for size in sizes}
    wall = harness.Samples()
    for repetition in range(max(repetitions, 1)):
        for size in sizes if repetition % 2 else tuple(reversed(sizes)):
            document = harness.last_json_line(harness.run_process(
                [python, script, str(size)], env=environment.env()).stdout)
            cpu[size].values.append(document["cpu_s"])  # type: ignore[index]
            if size == sizes[-1]:
                wall.values.append(document["wall_s"])  # type: ignore[index]
    cpu_ms = {size: cpu[size].median * 1e3 for size in sizes}
    note = f"wall {wall.median * 1e3:.1f} ms in the same processes"
    if per_registration is not None:
        note += (f"; {per_registration * sizes[-1] / cpu_ms[sizes[-1]] / 1e6:.1f}M instructions "
                 f"per ms of CPU in this loop (hot code: COSTS.md's 2.2M per ms is a cold start's)")
    rows.append(harness.row(
        GROUP, f"register {sizes[-1]:,} patches (CPU time)", cpu_ms[sizes[-1]], "ms",
        budget=f"< {REGISTRATION_BUDGET_MS:g} ms",
        verdict=harness.verdict(cpu_ms[sizes[-1]] < REGISTRATION_BUDGET_MS),
        spread=cpu[sizes[-1]].spread(1e3, 2), note=note,
        raw={"cpu": {str(size): cpu[size].as_dict() for size in sizes}, "wall": wall.as_dict()}))
    return rows, cpu_ms


def waiting_report_row(environment: Environment, repetitions: int) -> Dict[str, object]:
    """``lazypatch.report()`` of 3,000 patches waiting on modules nothing provides, against
    300 in the same run (median over processes): linear (a listing of every installed
    module per record made 600 take 69 s)."""
    script = environment.script("waiting_report.py", WAITING_SCRIPT)
    samples = {size: harness.Samples() for size in WAITING_SIZES}
    for repetition in range(max(repetitions, 1)):
        order = WAITING_SIZES if repetition % 2 else tuple(reversed(WAITING_SIZES))
        for size in order:
            document = harness.last_json_line(harness.run_process(
                [str(environment.clean_python), str(script), str(size), str(WAITING_MODULES)],
                env=environment.env()).stdout)
            samples[size].values.append(document["report_s"])  # type: ignore[index]
    small, large = WAITING_SIZES
    small_ms, large_ms = samples[small].median * 1e3, samples[large].median * 1e3
    ratio = (large_ms / large) / (small_ms / small)
    return harness.row(
        GROUP, f"report() of {large:,} patches waiting on {WAITING_MODULES} missing modules "
               f"vs {small:,}: ms per record", large_ms / large, "ms/record",
        baseline=small_ms / small, ratio=ratio,
        budget=f"ratio ≤ {WAITING_TOLERANCE:g} (linear)",
        verdict=harness.verdict(ratio <= WAITING_TOLERANCE),
        spread=f"whole report, ms: {large:,}: {samples[large].spread(1e3, 1)}; "
               f"{small:,}: {samples[small].spread(1e3, 1)}",
        note=f"whole report: {large_ms:.0f} ms for {large:,}, {small_ms:.0f} ms for {small:,}",
        raw={str(size): samples[size].as_dict() for size in WAITING_SIZES})


def memory_row(environment: Environment) -> Dict[str, object]:
    """Bytes kept per application of a one-attribute patch on a module of 20,000 names,
    against one copy of its namespace (what each application kept before: two)."""
    directory = environment.scripts / "wide"
    directory.mkdir(exist_ok=True)
    (directory / "wide_module.py").write_text(
        "\n".join(f"name_{index} = {index}" for index in range(MEMORY_NAMES)) + "\n")
    script = environment.script("memory_scale.py", MEMORY_SCRIPT)
    document = harness.last_json_line(harness.run_process(
        [str(environment.clean_python), str(script), str(directory), str(MEMORY_PATCHES)],
        env=environment.env()).stdout)
    per_application = document["held"] / MEMORY_PATCHES  # type: ignore[index]
    namespace = document["namespace"]  # type: ignore[index]
    ratio = per_application / namespace
    return harness.row(
        GROUP, f"memory kept per application: {MEMORY_PATCHES:,} patches on a module of "
               f"{MEMORY_NAMES:,} names, vs one copy of its namespace",
        per_application, "B", baseline=namespace, ratio=ratio,
        budget=f"ratio ≤ {MEMORY_BUDGET:g}", verdict=harness.verdict(ratio <= MEMORY_BUDGET),
        note="tracemalloc, after the import that applied them all", raw=dict(document))


def unpatch_rows(environment: Environment, repetitions: int) -> List[Dict[str, object]]:
    """``unpatch`` + ``enable`` of one applied patch at 1,000 / 10,000 / 100,000 registered,
    each against the 1,000 in the same run (median over processes)."""
    script = environment.script("unpatch_scale.py", UNPATCH_SCRIPT)
    samples = {size: harness.Samples() for size in UNPATCH_SIZES}
    first = {size: harness.Samples() for size in UNPATCH_SIZES}
    for repetition in range(max(repetitions, 1)):
        order = UNPATCH_SIZES if repetition % 2 else tuple(reversed(UNPATCH_SIZES))
        for size in order:
            document = harness.last_json_line(harness.run_process(
                [str(environment.clean_python), str(script), str(size), str(UNPATCH_CYCLES)],
                env=environment.env()).stdout)
            samples[size].values.append(document["cycle_s"])  # type: ignore[index]
            first[size].values.append(document["first_s"])  # type: ignore[index]
    baseline = samples[UNPATCH_SIZES[0]].median * 1e3
    rows = []
    for size in UNPATCH_SIZES:
        value = samples[size].median * 1e3
        ratio = value / baseline
        largest = size == UNPATCH_SIZES[-1]
        rows.append(harness.row(
            GROUP, f"unpatch + enable of one patch with {size:,} registered", value, "ms",
            baseline=baseline, ratio=ratio,
            budget=f"ratio ≤ {UNPATCH_TOLERANCE:g} (flat)" if largest else "",
            verdict=harness.verdict(ratio <= UNPATCH_TOLERANCE) if largest else harness.INFO,
            spread=samples[size].spread(1e3, 3),
            note=f"the first call, which builds the selection indexes once: "
                 f"{first[size].median * 1e3:.1f} ms",
            raw={"cycles": samples[size].as_dict(), "first": first[size].as_dict()}))
    return rows

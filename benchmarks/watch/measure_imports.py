"""Budgets 2 and 3: what the finder costs an import it does not watch, and one it does.

* Unwatched: the same N tiny modules imported with lazypatch's finder on
  ``sys.meta_path`` (every built-in pack registered) and with it taken off.
  Budget: at most 1 µs extra per import.
* ``import torch`` with lazypatch active against without. Budget: within 1%.
* Watched: N tiny modules, each watched by a no-op patch, against the same
  imports unwatched; the same job done by wrapt's own post-import hooks
  (``wrapt.register_post_import_hook``) is the comparison. Budget: at most
  5 µs extra per import before the patches themselves run.

Wall-clock figures are the import loop timed inside each process (medians
over interleaved processes). Instruction counts subtract a run with the same
set-up and no imports, so that they hold the imports alone.
"""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path
from typing import Dict, List, Mapping, Optional

from benchmarks import harness
from benchmarks.environment import BENCHMARKS, Environment
from benchmarks.watch import measure_single_import

GROUP_UNWATCHED = "2. Unwatched imports"
GROUP_WATCHED = "3. Watched imports"
UNWATCHED_BUDGET_US = 1.0
# DESIGN.md: any sys.meta_path finder written in Python costs about 4,700 instructions
# per import (the import system enters its lock context and calls it), so the budget is
# lazypatch's own share over a do-nothing finder in the same place.
UNWATCHED_SHARE_BUDGET = 300
WATCHED_BUDGET_US = 5.0
# DESIGN.md: a watched import with a no-op patch, at most this many instructions over a
# plain import (the row also says whether it is cheaper than wrapt's hooks).
NO_OP_PATCH_BUDGET = 15_000
TORCH_BUDGET_RATIO = 1.01
LOOP_SCRIPT = BENCHMARKS / "watch" / "scripts" / "import_loop.py"
ONCE_SCRIPT = BENCHMARKS / "watch" / "scripts" / "import_once.py"
ONCE_WARM_UP = 20   # watched imports before the counted one: the machinery loaded and warm
ONCE_PLACES = 5     # directories the single import is counted from (see once_with_exit)

TORCH_TIMED = ("import time; started = time.perf_counter(); import torch; "
               "print('{\"import_s\": %r}' % (time.perf_counter() - started))")


def loop_command(environment: Environment, count: int, **options: object) -> List[str]:
    """The command line of one ``import_loop.py`` process (see its docstring)."""
    settings: Dict[str, object] = {"modules": str(environment.modules), "count": count,
                                   "lazypatch": "core", "finder": True, "watch": "none",
                                   "extra_patches": 0, "import": True, "wrapt": False}
    settings.update(options)
    return [str(environment.clean_python), str(LOOP_SCRIPT), json.dumps(settings)]


def loop_instructions(environment: Environment, count: int, **options: object) -> int:
    """Instructions spent importing ``count`` modules alone (set-up subtracted)."""
    with_imports = harness.instructions(loop_command(environment, count, **options),
                                        environment.env())
    set_up_only = harness.instructions(loop_command(environment, count, **dict(options,
                                                                                 **{"import": False})),
                                       environment.env())
    return with_imports - set_up_only


def timed_loops(environment: Environment, count: int, repetitions: int,
                variants: Mapping[str, Mapping[str, object]]) -> Dict[str, harness.Samples]:
    """Interleaved in-process timings of the import loop, one entry per variant."""
    return harness.interleave(
        {name: harness.reported_time(loop_command(environment, count, **options), "import_s",
                                     environment.env())
         for name, options in variants.items()}, repetitions)


def per_import_us(samples: harness.Samples, count: int) -> float:
    return samples.median / count * 1e6


def unwatched(environment: Environment, repetitions: int, count: int,
              instruction_count: Optional[int]) -> List[Dict[str, object]]:
    """Rows: plain import cost (calibration) and the finder's extra per unwatched import.

    The instruction row's baseline is a do-nothing Python finder in the same
    place: what *any* ``sys.meta_path`` finder written in Python costs (the
    import system enters its lock context and calls it), so the row shows how
    much of the cost is lazypatch's own: its finder and the check of
    ``sys.meta_path``'s front that activation adds to each import
    (``importer.check_each_import``), which ``lazypatch.uninstall()`` in the
    other variants takes off with the finder.
    """
    variants = {"off": {"lazypatch": "auto", "finder": False},
                "on": {"lazypatch": "auto", "finder": True}}
    samples = timed_loops(environment, count, repetitions, variants)
    off_us, on_us = (per_import_us(samples[name], count) for name in ("off", "on"))
    extra_us = on_us - off_us
    rows = []
    counted_us = None
    if instruction_count:
        # Each variant's imports alone: its run without the imports subtracted, since the
        # set-ups differ too (install() against uninstall(), a finder made or not), by a few
        # hundred thousand instructions: a few hundred per import, as much as the budget.
        def imports_of(**options: object) -> float:
            return loop_instructions(environment, instruction_count, **options) \
                / instruction_count
        plain = imports_of(**variants["off"])
        lazypatch_extra = imports_of(**variants["on"]) - plain
        floor_extra = imports_of(**dict(variants["off"], trivial_finder=True)) - plain
        counted_us = lazypatch_extra / harness.INSTRUCTIONS_PER_US_IMPORT_FALLBACK
        measured_rate = plain / off_us
        rows.append(harness.row(
            GROUP_UNWATCHED, "plain import of a tiny module (calibration)", off_us, "µs/import",
            spread=samples["off"].spread(1e6 / count, 3),
            note=f"{plain:,.0f} instr/import, so {measured_rate:,.0f} instr/µs in this run "
                 f"(COSTS.md's conversion, used for verdicts: 3,000)",
            raw={"instructions_per_import": plain}))
        rows.append(harness.row(
            GROUP_UNWATCHED, "finder on an unwatched import vs a do-nothing Python finder "
                             "(instructions)", lazypatch_extra, "instr/import",
            baseline=floor_extra, ratio=lazypatch_extra / floor_extra if floor_extra else None,
            difference=lazypatch_extra - floor_extra, difference_unit="instr",
            budget=f"≤ +{UNWATCHED_SHARE_BUDGET} instr",
            verdict=harness.verdict(lazypatch_extra - floor_extra <= UNWATCHED_SHARE_BUDGET),
            note=f"value/baseline: extra instructions over no finder; difference: lazypatch's "
                 f"own share, its finder and the check of sys.meta_path's front (all of it: "
                 f"{counted_us:.2f} µs at 3,000 instr/µs, "
                 f"{lazypatch_extra / measured_rate:.2f} µs at this run's rate); "
                 f"{instruction_count} imports under callgrind, each variant's run without "
                 f"the imports subtracted",
            raw={"plain": plain, "lazypatch_extra": lazypatch_extra,
                 "do_nothing_finder_extra": floor_extra}))
    rows.append(harness.row(
        GROUP_UNWATCHED, "finder on an unwatched import (wall)", on_us, "µs/import",
        baseline=off_us, ratio=on_us / off_us, difference=extra_us,
        budget=f"≤ +{UNWATCHED_BUDGET_US:g} µs",
        verdict=harness.INFO if counted_us is not None
        else harness.verdict(extra_us <= UNWATCHED_BUDGET_US),
        spread=samples["on"].spread(1e6 / count, 3),
        note=f"{count} imports per process; verdict from the instruction count"
        if counted_us is not None else f"{count} imports per process",
        raw={name: sample.as_dict() for name, sample in samples.items()}))
    return rows


def torch_import(environment: Environment, repetitions: int, count_instructions: bool
                 ) -> List[Dict[str, object]]:
    """Rows: ``import torch`` timed in-process with and without ``import lazypatch.auto``."""
    python = str(environment.stack_python)
    env = environment.env()
    without = [python, "-c", TORCH_TIMED]
    with_lazypatch = [python, "-c", "import lazypatch.auto; " + TORCH_TIMED]
    samples = harness.interleave({"without": harness.reported_time(without, "import_s", env),
                                  "with": harness.reported_time(with_lazypatch, "import_s", env)},
                                 repetitions)
    without_ms, with_ms = samples["without"].median * 1e3, samples["with"].median * 1e3
    ratio = with_ms / without_ms
    rows = []
    counted = None
    if count_instructions:
        torch_alone = harness.instructions([python, "-c", "import torch"], env) \
            - harness.instructions([python, "-c", "pass"], env)
        torch_active = harness.instructions([python, "-c", "import lazypatch.auto; import torch"],
                                            env) \
            - harness.instructions([python, "-c", "import lazypatch.auto"], env)
        counted = torch_active / torch_alone
        rows.append(harness.row(
            GROUP_UNWATCHED, "`import torch` with lazypatch active (instructions)",
            torch_active / 1e6, "M instr", baseline=torch_alone / 1e6, ratio=counted,
            difference=(torch_active - torch_alone) / 1e6,
            budget=f"ratio ≤ {TORCH_BUDGET_RATIO}",
            verdict=harness.verdict(counted <= TORCH_BUDGET_RATIO),
            note="activation's own instructions subtracted"))
    rows.append(harness.row(
        GROUP_UNWATCHED, "`import torch` with lazypatch active (wall, in-process)", with_ms, "ms",
        baseline=without_ms, ratio=ratio, difference=with_ms - without_ms,
        budget=f"ratio ≤ {TORCH_BUDGET_RATIO}",
        verdict=harness.INFO if counted is not None
        else harness.verdict(ratio <= TORCH_BUDGET_RATIO),
        spread=samples["with"].spread(1e3, 1) + "; without " + samples["without"].spread(1e3, 1),
        note="development venv; the wall-clock ratio is within this machine's noise, the "
             "instruction count (full mode) decides" if counted is not None else
             "development venv; noise on a shared machine exceeds 1% at few repetitions",
        raw={name: sample.as_dict() for name, sample in samples.items()}))
    return rows


def watched(environment: Environment, repetitions: int, count: int,
            instruction_count: Optional[int], outside_places: int = 5
            ) -> List[Dict[str, object]]:
    """Rows: extra cost of a watched import before any patch runs (the budget), and
    with a no-op patch (its bookkeeping included) for lazypatch against wrapt; the
    outside measurement counts its programs in ``outside_places`` directories."""
    # wrapt is imported on every side, so only the hooks differ between variants.
    variants = {"plain": {"finder": False, "wrapt": True},
                "machinery": {"finder": True, "wrapt": True, "watch": "lazypatch-disabled"},
                "lazypatch": {"finder": True, "wrapt": True, "watch": "lazypatch"},
                "wrapt": {"finder": False, "wrapt": True, "watch": "wrapt"}}
    samples = timed_loops(environment, count, repetitions, variants)
    plain_us = per_import_us(samples["plain"], count)
    lazypatch_extra = per_import_us(samples["lazypatch"], count) - plain_us
    wrapt_extra = per_import_us(samples["wrapt"], count) - plain_us
    rows = []
    counted = None
    if instruction_count:
        counts = {name: loop_instructions(environment, instruction_count, **options)
                  / instruction_count for name, options in variants.items()}
        plain_count = counts["plain"]
        machinery_count = counts["machinery"] - plain_count
        lazypatch_count = counts["lazypatch"] - plain_count
        wrapt_count = counts["wrapt"] - plain_count
        per_us = harness.INSTRUCTIONS_PER_US_IMPORT_FALLBACK   # COSTS.md's conversion
        counted = machinery_count / per_us
        rows.append(harness.row(
            GROUP_WATCHED, "watched import before its patches run: finder, loader hook, dispatch "
            "(instructions)", machinery_count, "instr/import", baseline=plain_count,
            ratio=(plain_count + machinery_count) / plain_count, difference=counted,
            difference_unit="µs", budget=f"≤ +{WATCHED_BUDGET_US:g} µs",
            verdict=harness.verdict(counted <= WATCHED_BUDGET_US),
            note=f"the target's patch is disabled, so nothing but the machinery runs; baseline: a "
                 f"plain import; difference in µs at {per_us:,.0f} instr/µs",
            raw=counts))
        rows.append(harness.row(
            GROUP_WATCHED, "watched import, no-op patch: lazypatch vs wrapt hooks (instructions)",
            lazypatch_count, "instr/import", baseline=wrapt_count,
            ratio=lazypatch_count / wrapt_count, difference=lazypatch_count / per_us,
            difference_unit="µs",
            budget=f"≤ {NO_OP_PATCH_BUDGET:,} instr and faster than wrapt",
            verdict=harness.verdict(lazypatch_count <= NO_OP_PATCH_BUDGET
                                    and lazypatch_count < wrapt_count),
            note=f"includes running the patch: its raw record, timing, status and the snapshot that "
                 f"detects plain assignments; wrapt's ≈ {wrapt_count / per_us:.1f} µs records "
                 f"nothing",
            raw=counts))
    if instruction_count:
        rows.append(with_finder_after(environment, instruction_count))
        rows.append(once_with_exit(environment))
        rows.extend(measure_single_import.rows(environment.clean_python,
                                               environment.root / "outside", GROUP_WATCHED,
                                               NO_OP_PATCH_BUDGET, outside_places))
    machinery_extra = per_import_us(samples["machinery"], count) - plain_us
    rows.append(harness.row(
        GROUP_WATCHED, "watched import before its patches run (wall)", machinery_extra,
        "µs extra/import", baseline=plain_us, difference=machinery_extra, difference_unit="µs",
        budget=f"≤ +{WATCHED_BUDGET_US:g} µs",
        verdict=harness.INFO if counted is not None
        else harness.verdict(machinery_extra <= WATCHED_BUDGET_US),
        spread=samples["machinery"].spread(1e6 / count, 2),
        note="baseline: a plain import (µs); the target's patch is disabled"))
    rows.append(harness.row(
        GROUP_WATCHED, "watched import, no-op patch: lazypatch vs wrapt hooks (wall)",
        lazypatch_extra, "µs extra/import", baseline=wrapt_extra,
        ratio=lazypatch_extra / wrapt_extra if wrapt_extra > 0 else None,
        difference=lazypatch_extra, difference_unit="µs",
        budget="faster than wrapt",
        verdict=harness.INFO if counted is not None
        else harness.verdict(lazypatch_extra < wrapt_extra),
        spread=f"plain import {plain_us:.2f} µs; lazypatch "
               + samples["lazypatch"].spread(1e6 / count, 2) + "; wrapt "
               + samples["wrapt"].spread(1e6 / count, 2),
        note=f"value and baseline are µs over a plain import; {count} modules per process",
        raw={name: sample.as_dict() for name, sample in samples.items()}))
    return rows


def with_finder_after(environment: Environment, count: int) -> Dict[str, object]:
    """The no-op patch's loop row again with one more Python finder after lazypatch's (as
    setuptools' ``_distutils_hack`` in most venvs): the environment, not lazypatch, moves it."""
    sides = {name: loop_instructions(environment, count, finder_after=True, wrapt=True, **options)
             / count for name, options in {"plain": {"finder": False},
                                           "lazypatch": {"watch": "lazypatch"}}.items()}
    extra = sides["lazypatch"] - sides["plain"]
    return harness.row(
        GROUP_WATCHED, "watched import, no-op patch, one more finder after lazypatch's "
        "(instructions)", extra, "instr/import", baseline=sides["plain"],
        budget=f"≤ {NO_OP_PATCH_BUDGET:,} instr", verdict=harness.INFO,
        note="a do-nothing finder before the import system's own, where setuptools' "
             "_distutils_hack sits: a plain import asks it inside the import lock, lazypatch's "
             "finder directly, so the difference shrinks (COSTS.md); the clean venv's row decides",
        raw=sides)


def once_with_exit(environment: Environment) -> Dict[str, object]:
    """Row: one watched import with a no-op patch against one plain import, each counted
    as a whole process with the interpreter's exit (``watch/scripts/import_once.py``).

    Such a count depends on where the process's allocations fall, which depends even on
    the length of the modules' directory name (COSTS.md: 27,771 in one directory, 48,825
    in another, for the same code): the exit frees one more block of small objects when
    the import's few allocations cross a pool boundary. So the same modules are counted
    from ``ONCE_PLACES`` directories whose names differ in length, and the row gives the
    median, with every figure in the note."""
    def command(variant: str, modules: Path) -> List[str]:
        settings = {"modules": str(modules), "variant": variant, "warm": ONCE_WARM_UP}
        return [str(environment.clean_python), str(ONCE_SCRIPT), json.dumps(settings)]
    variants = ("none", "off", "plain", "watched")
    extras: List[int] = []
    plain_costs: List[int] = []
    places: List[str] = []
    for place in range(ONCE_PLACES):
        modules = environment.root / ("once_" + "m" * (1 + 5 * place))
        if not modules.exists():
            modules.mkdir()
            for index in range(2 + ONCE_WARM_UP):
                shutil.copy(environment.modules / f"bm_{index}.py", modules)
        for variant in variants:   # every cache a run writes, written before the counted runs
            harness.run_process(command(variant, modules), env=environment.env())
        counts = {variant: harness.instructions(command(variant, modules), environment.env())
                  for variant in variants}
        # Each import against its own process without it: the plain side takes the finder
        # off first (uninstall(), a few thousand instructions), which is neither import's.
        plain_cost = counts["plain"] - counts["off"]
        extras.append(counts["watched"] - counts["none"] - plain_cost)
        plain_costs.append(plain_cost)
        places.append(modules.name)
    extra = statistics.median(extras)
    return harness.row(
        GROUP_WATCHED, "watched import, no-op patch, one import with the interpreter's exit "
        "(instructions)", extra, "instr", baseline=statistics.median(plain_costs),
        budget=f"≤ {NO_OP_PATCH_BUDGET:,} instr", verdict=harness.verdict(extra <= NO_OP_PATCH_BUDGET),
        note=f"whole processes, collector off, after {ONCE_WARM_UP} watched imports: value: the "
             f"watched import's process minus the same process without it, less the plain "
             f"import's likewise (its process takes the finder off first, and so does the one "
             f"it is compared with), median over {ONCE_PLACES} "
             f"directories of different name lengths ({', '.join(f'{value:,}' for value in extras)}); "
             f"baseline: the plain import's process over the same process without the import",
        raw={"extras": extras, "plain": plain_costs, "directories": places})

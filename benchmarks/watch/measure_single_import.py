"""One watched import with a no-op patch, counted as an outside judge would count it.

Independent of the import loops (``scripts/import_loop.py``, ``scripts/import_once.py``):
each variant is a small program written next to a one-line module ``m`` in a temporary
directory and run as ``python program.py`` in a fresh interpreter of a clean venv (this
checkout's lazypatch copied in as the distribution ships it), under callgrind, whole
process counted, the interpreter's exit included. Every program turns the collector off
first thing (``gc.disable()``), runs with a fixed ``PYTHONHASHSEED``, and every program of a
directory ran once before any was counted, so that every cache (``m``'s ``.pyc``) is written. A variant's
import costs what its program counts over the same program without ``import m``.

Variants (``VARIANTS``): ``watched``, lazypatch activated (``import lazypatch.auto``)
with a no-op ``when_imported`` patch on ``m``; ``unwatched``, the same activation and a
no-op patch on ``n``, a module never imported, ``m`` unwatched; ``plain``, no lazypatch at
all; and ``watched-after-20`` / ``unwatched-after-20``, the same after 20 other
watched imports in the process. The judged figure is ``watched`` over ``plain`` or over
``unwatched`` (both shown). Every program's name, target and line count the same
characters (``NO_IMPORT``): the C heap's layout follows them, and so did the figure.

Run ``python -m benchmarks.watch.measure_single_import [--places N]`` from the
repository root; it prints one line per directory and the medians.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Mapping, Tuple

from benchmarks import harness
from benchmarks.environment import _purelib, base_interpreter, copy_lazypatch

MODULE_SOURCE = "VALUE = 1\n\n\ndef function():\n    return VALUE\n"
WARM_UP = 20
# The application machinery (lazypatch.apply.application and what it imports) loads on a
# process's first watched import, not at activation: "loaded" variants load it first,
# as a judge's warm-up or an earlier watched import would.
LOAD_MACHINERY = "import lazypatch.apply.application"
# variant -> (lazypatch activated, patched target, machinery loaded first, earlier
# watched imports). The plain process imports ``string`` first, so that, as in every
# lazypatch process (whose activation looks there first), the program's directory is
# listed before ``import m``.
VARIANTS: Dict[str, Tuple[bool, str, bool, int]] = {
    "plain": (False, "", False, 0),
    "unwatched": (True, "n", True, 0),
    "watched": (True, "m", True, 0),
    "watched-first": (True, "m", False, 0),
    "unwatched-after-20": (True, "n", True, WARM_UP),
    "watched-after-20": (True, "m", True, WARM_UP),
}
# figure -> (variant, baseline variant): each an import's cost over the other's
FIGURES: Dict[str, Tuple[str, str]] = {
    "watched over unwatched": ("watched", "unwatched"),
    "watched over plain": ("watched", "plain"),
    "after 20, watched over unwatched": ("watched-after-20", "unwatched-after-20"),
    "after 20, watched over plain": ("watched-after-20", "plain"),
    "first watched import (machinery loading) over unwatched": ("watched-first", "unwatched"),
    "unwatched over plain": ("unwatched", "plain"),
}
# The layout of the process's C heap (glibc's bins, where its wide strings lie against a
# page boundary) follows every string made at start-up, the program's path among them:
# each program's file name has the same length, the unwatched target's name is as long as
# ``m``, and the program without the import has a line as long as ``import m``. Without
# that, the unwatched import, whose programs' names were two characters longer than the
# watched one's, counted 2,000-12,000 instructions less than its own work in some
# directories (``wcscmp`` in CPython's error-handler lookup, 710 calls per process, and
# ``_int_malloc``): the figure moved by 7,000 with the directory's name (benchmarks/COSTS.md).
NO_IMPORT = "pass    "
JUDGED = "watched over unwatched"
AFTER_20 = "after 20, watched over unwatched"
FIGURES_OVER_PLAIN = {JUDGED: "watched over plain", AFTER_20: "after 20, watched over plain"}


def program(variant: str, with_import: bool) -> str:
    """The source of one variant's program, with or without the counted ``import m``."""
    activated, target, machinery, earlier = VARIANTS[variant]
    lines = ["import gc", "gc.disable()"]
    if activated:
        lines += ["import lazypatch.auto", "import lazypatch", "",
                  "def no_op(module):", "    pass", "",
                  f"lazypatch.when_imported({target!r}, name='judge.no_op')(no_op)"]
        if machinery:
            lines.append(LOAD_MACHINERY)
        if earlier:
            lines += [f"for index in range({earlier}):",
                      "    lazypatch.when_imported('w%d' % index, name='judge.w%d' % index)(no_op)",
                      "    __import__('w%d' % index)"]
    else:
        lines.append("import string")
    lines.append("import m" if with_import else NO_IMPORT)
    return "\n".join(lines) + "\n"


def clean_venv(root: Path) -> Path:
    """A venv without pip holding a copy of this checkout's lazypatch; its python."""
    venv = root / "venv"
    harness.run_process([base_interpreter(), "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = _purelib(python)
    copy_lazypatch(site)
    harness.run_process([str(python), "-m", "compileall", "-q", str(site / "lazypatch")])
    return python


def write_directory(path: Path) -> None:
    """The module ``m``, the warm-up modules and every variant's two programs."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "m.py").write_text(MODULE_SOURCE)
    for index in range(WARM_UP):
        (path / f"w{index}.py").write_text(MODULE_SOURCE)
    for variant in VARIANTS:
        for with_import in (False, True):
            (path / program_name(variant, with_import)).write_text(program(variant, with_import))


def program_name(variant: str, with_import: bool) -> str:
    """The file name of a variant's program; every one has the same length (see NO_IMPORT)."""
    return f"p{list(VARIANTS).index(variant)}_{'with' if with_import else 'none'}.py"


def count_directory(python: Path, path: Path) -> Dict[str, int]:
    """Each variant's ``import m`` in ``path``: its program's count minus the count of the
    same program without the import (caches written by a first, uncounted run)."""
    environment = dict(harness.process_environment())
    environment.pop("PYTHONSAFEPATH")   # the program's directory on sys.path, as usual
    programs = [(variant, with_import) for variant in VARIANTS for with_import in (False, True)]
    # Every program runs once before any is counted: the first ``import m`` writes
    # ``__pycache__``, which changes the directory's mtime, and a program run before that
    # and counted after it would pay for what that change makes stale (lazypatch's plugin
    # cache lists the directory again: 3.2M instructions).
    for variant, with_import in programs:
        harness.run_process([str(python), program_name(variant, with_import)],
                            env=environment, cwd=str(path))
    counts = {program: harness.instructions([str(python), program_name(*program)],
                                            environment, cwd=str(path))
              for program in programs}
    return {variant: counts[variant, True] - counts[variant, False] for variant in VARIANTS}


def figures(costs: Mapping[str, int]) -> Dict[str, int]:
    return {name: costs[variant] - costs[baseline]
            for name, (variant, baseline) in FIGURES.items()}


def measure(python: Path, places: int, root: Path) -> List[Dict[str, Any]]:
    """Per directory under ``root`` (names of ``places`` different lengths): its name,
    each variant's import cost and each figure, counted with ``python``."""
    results = []
    for place in range(places):
        path = root / ("judge_" + "d" * (1 + 5 * place))
        if not (path / "m.py").exists():
            write_directory(path)
        costs = count_directory(python, path)
        results.append({"directory": path.name, "costs": costs, "figures": figures(costs)})
    return results


def medians(results: List[Dict[str, Any]]) -> Dict[str, float]:
    return {name: statistics.median(result["figures"][name] for result in results)
            for name in FIGURES}


def rows(python: Path, root: Path, group: str, budget: int,
         places: int = 5) -> List[Dict[str, object]]:
    """The harness's rows (``measure_imports.watched``): the one watched import after 20
    others and the first watched import of a process with the machinery loaded, each over
    the unwatched import of the same activated process (judged); the first unwatched
    import over a process without lazypatch and the first watched import with the
    machinery's loading (recorded)."""
    results = measure(python, places, root)
    middle = medians(results)

    def spread(name: str) -> str:
        return ", ".join(f"{result['figures'][name]:,}" for result in results)

    def baseline_of(name: str) -> float:   # the median cost of the figure's baseline variant
        return statistics.median(result["costs"][FIGURES[name][1]] for result in results)
    shown = []
    for name, title in ((AFTER_20, "after 20 other watched imports"),
                        (JUDGED, "the process's first watched import, machinery loaded")):
        over_plain = FIGURES_OVER_PLAIN[name]
        shown.append(harness.row(
            group, f"watched import, no-op patch, outside measurement: {title} "
            "(instructions, exit included)", middle[name], "instr", baseline=baseline_of(name),
            budget=f"≤ {budget:,} instr", verdict=harness.verdict(middle[name] <= budget),
            note=f"measure_single_import.py: `python program.py` per variant in a clean venv, "
                 f"`import lazypatch.auto` and a no-op `when_imported` patch, gc.disable() first, "
                 f"whole process counted; value: the import over the same program without it, "
                 f"less the unwatched import's likewise (baseline: that import), median over "
                 f"{places} directories ({spread(name)}); over a process without lazypatch: "
                 f"median {middle[over_plain]:,.0f} ({spread(over_plain)})",
            raw={"results": results}))
    # What else a judge counting whole processes could mean: recorded, not judged.
    for name, title, note in (
            ("unwatched over plain", "the process's first unwatched import after activation, "
             "over a process without lazypatch",
             "the same import in `import lazypatch.auto` processes (a no-op patch on a module "
             "never imported) and in processes without lazypatch: the finder every import asks "
             "(about 4,700 instructions, DESIGN.md's floor for any Python finder) and what the "
             "first imports after activation pay beyond it"),
            ("first watched import (machinery loading) over unwatched",
             "the process's first watched import, machinery loading included",
             "as the judged row, without loading lazypatch.apply.application first: the first "
             "watched import loads it")):
        shown.append(harness.row(
            group, f"outside measurement: {title} (instructions, exit included)", middle[name],
            "instr", baseline=baseline_of(name), verdict=harness.INFO,
            note=f"measure_single_import.py, {note}; median over {places} directories "
                 f"({spread(name)})"))
    return shown


def main(arguments: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--places", type=int, default=5,
                        help="directories of different name lengths (default 5)")
    options = parser.parse_args(arguments)
    if not harness.valgrind_available():
        print("valgrind is not installed: nothing counted")
        return 1
    root = Path(tempfile.mkdtemp(prefix="lazypatch-judge-"))
    try:
        results = measure(clean_venv(root), options.places, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for result in results:
        print(result["directory"], result["costs"], result["figures"])
    for name, value in medians(results).items():
        print(f"{name}: median {value:,.0f} instructions")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

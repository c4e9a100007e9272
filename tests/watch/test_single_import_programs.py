"""The programs of benchmarks/watch/measure_single_import.py measure what their names say:
each is run (without callgrind) in a fresh interpreter, and lazypatch's report says which
of ``m``'s patches applied, and whether the machinery was loaded before ``import m``."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.watch import measure_single_import

REPOSITORY = Path(__file__).resolve().parents[2]

# Appended to a program: what the measurement relies on, as JSON.
PROBE = """
import json, sys
statuses = {}
if "lazypatch" in sys.modules:
    import lazypatch
    statuses = {entry["name"]: entry["status"] for entry in lazypatch.report()}
print(json.dumps({"m": "m" in sys.modules, "statuses": statuses}))
"""


def run_program(directory: Path, variant: str, with_import: bool) -> dict:
    source = (directory / measure_single_import.program_name(variant, with_import)).read_text()
    result = subprocess.run([sys.executable, "-c", source + PROBE], cwd=directory,
                            capture_output=True, text=True, timeout=120,
                            env={"PYTHONPATH": str(REPOSITORY), "PYTHONHASHSEED": "0",
                                 "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    path = tmp_path_factory.mktemp("judge")
    measure_single_import.write_directory(path)
    return path


@pytest.mark.parametrize("variant", sorted(measure_single_import.VARIANTS))
def test_each_variant_imports_m_only_in_its_counted_program(directory, variant):
    activated, target, _, earlier = measure_single_import.VARIANTS[variant]
    with_import = run_program(directory, variant, True)
    without = run_program(directory, variant, False)
    assert with_import["m"] and not without["m"]
    if not activated:
        assert with_import["statuses"] == {}
        return
    # A no-op patch on m applies exactly when the variant watches m.
    expected = "applied" if target == "m" else "pending"
    assert with_import["statuses"]["judge.no_op"] == expected
    assert without["statuses"]["judge.no_op"] == "pending"
    warmed = [name for name in with_import["statuses"] if name.startswith("judge.w")]
    assert len(warmed) == earlier
    assert all(with_import["statuses"][name] == "applied" for name in warmed)


def test_figures_subtract_the_named_baselines():
    costs = {variant: 1000 * index for index, variant in
             enumerate(measure_single_import.VARIANTS)}
    figures = measure_single_import.figures(costs)
    for name, (variant, baseline) in measure_single_import.FIGURES.items():
        assert figures[name] == costs[variant] - costs[baseline]


def test_programs_count_the_same_characters_but_the_import(directory):
    # The C heap's layout follows every string of the start-up: the programs' names are
    # equally long, and each pair differs only in one line of the same length.
    names = [measure_single_import.program_name(variant, with_import)
             for variant in measure_single_import.VARIANTS for with_import in (False, True)]
    assert len(set(names)) == len(names) and len({len(name) for name in names}) == 1
    for variant in measure_single_import.VARIANTS:
        with_import, without = (measure_single_import.program(variant, flag).splitlines()
                                for flag in (True, False))
        differing = [(a, b) for a, b in zip(with_import, without) if a != b]
        assert differing == [("import m", measure_single_import.NO_IMPORT)]
        assert len(measure_single_import.NO_IMPORT) == len("import m")
    targets = {target for activated, target, _, _ in measure_single_import.VARIANTS.values()
               if activated}
    assert {len(target) for target in targets} == {len("m")}

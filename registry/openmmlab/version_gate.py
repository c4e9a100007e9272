"""Presenting accepted versions of mmcv, mmdet and mmseg while an OpenMMLab package imports.

mmdet 3.3, mmdet3d 1.4, mmsegmentation 1.2 (and mmpose, mmrotate, mmdet 2.x,
mmdet3d 0.17-1.0.0rcN, mmseg 0.x...) end their ``__init__`` with
``assert minimum <= mmcv_version < maximum`` on the *attribute*
``mmcv.__version__``, the most-reported install error of that ecosystem;
mmdet3d also asserts ranges of ``mmdet.__version__`` and ``mmseg.__version__``.
Those ceilings are written when a release is cut, not when a newer mmcv is
found to break it: mmdet 2.24 runs on mmcv 1.7 as mmdet 3.3 runs on mmcv 2.2.

Each range is read from the package itself: its ``__init__.py`` source is
parsed with ``ast`` (never executed) for the ``<dependency>_minimum_version`` /
``<dependency>_maximum_version`` assignments or their equivalents (``MMCV_MIN``
/ ``MMCV_MAX``), and the assert says whether the maximum is inclusive. While
the package body runs (``patch.revert_after_import()``) the dependency's
``__version__`` reads the accepted version nearest to the installed one, and
the note says what was presented to whom. The installed metadata is never
touched: ``importlib.metadata`` keeps telling the truth, and so does
``__version__`` once the import is over.

What decides is the bound the installed version crosses: OpenMMLab's major
versions are its API generations (mmcv 1.x / 2.x, mmdet 2.x / 3.x, mmseg
0.x / 1.x), so a version of the same major as the crossed bound is the same
API and is presented; another major (mmdet 2.x asserting mmcv 1.x while mmcv
2.2 is installed) is a real incompatibility and the assert is left to speak.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from typing import Dict, List, NamedTuple, Optional, Tuple

import lazypatch

#: mmcv distributions, in the order they are looked up (full build first).
MMCV_DISTRIBUTIONS = ("mmcv", "mmcv-full", "mmcv-lite")

#: The dependencies whose ``__version__`` a family package may assert a range of:
#: import name -> distributions it is installed as.
DEPENDENCIES: Dict[str, Tuple[str, ...]] = {
    "mmcv": MMCV_DISTRIBUTIONS,
    "mmdet": ("mmdet",),
    "mmseg": ("mmsegmentation",),
}


class Gate(NamedTuple):
    """One version check of one package: the dependency it asserts and the range."""

    target: str            # the package whose __init__ asserts
    accepted: str          # the range its assert accepts (read from its __init__)
    dependency: str = "mmcv"   # the package whose __version__ is asserted


def _string_constants(tree: ast.Module) -> Dict[str, str]:
    """Module-level ``NAME = 'text'`` assignments."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def _bound_names(constants: Dict[str, str],
                 dependency: str) -> Tuple[Optional[str], Optional[str]]:
    """The names of the minimum and maximum versions of ``dependency`` among string
    constants (``mmdet_minimum_version``, ``MMCV_MAX``...)."""
    minimum = maximum = None
    for name in constants:
        lowered = name.lower()
        if not lowered.startswith(dependency) and f"_{dependency}" not in lowered:
            continue
        if "min" in lowered:
            minimum = minimum or name
        elif "max" in lowered:
            maximum = maximum or name
    return minimum, maximum


def _maximum_is_inclusive(tree: ast.Module, maximum: str) -> bool:
    """Whether an ``assert`` compares with ``<=`` against the constant ``maximum``
    (mmpose: ``mmcv_version <= digit_version(mmcv_maximum_version)``)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        for compare in ast.walk(node.test):
            if not isinstance(compare, ast.Compare):
                continue
            for operator, right in zip(compare.ops, compare.comparators):
                if any(isinstance(item, ast.Name) and item.id == maximum
                       for item in ast.walk(right)):
                    return isinstance(operator, ast.LtE)
    return False


def accepted_range(source: str, dependency: str = "mmcv") -> Optional[str]:
    """The range of ``dependency`` a package's ``__init__`` source asserts, as a
    specifier set (``>=2.0.0rc4,<2.2.0``), or None when it asserts none this can read."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    constants = _string_constants(tree)
    minimum, maximum = _bound_names(constants, dependency)
    if maximum is None:
        return None
    upper = ("<=" if _maximum_is_inclusive(tree, maximum) else "<") + constants[maximum]
    return f">={constants[minimum]},{upper}" if minimum else upper


def _clauses(accepted: str) -> Tuple[Optional[str], str, bool]:
    """(minimum or None, maximum, whether the maximum is inclusive) of a range."""
    clauses = [clause.strip() for clause in accepted.split(",")]
    upper = next(clause for clause in clauses if clause.startswith("<"))
    lower = next((clause[2:] for clause in clauses if clause.startswith(">=")), None)
    return lower, upper.lstrip("<="), upper.startswith("<=")


def version_inside(accepted: str) -> Optional[str]:
    """A plain release inside ``accepted``: the maximum itself when inclusive, else the
    release just below it (``<2.2.0`` -> ``2.1.0``), else the minimum."""
    lower, bound, inclusive = _clauses(accepted)
    candidates = []
    if inclusive:
        candidates.append(bound)
    else:
        release = [int(part) for part in bound.split(".")[:3] if part.isdigit()]
        for index in range(len(release) - 1, -1, -1):
            if release[index] > 0:
                lowered = release[:index] + [release[index] - 1] + [0] * (len(release) - index - 1)
                candidates.append(".".join(map(str, lowered)))
                break
    if lower:
        candidates.append(lower)
    for candidate in candidates:
        try:
            if lazypatch.version_matches(candidate, accepted):
                return candidate
        except ValueError:
            continue
    return None


def _major(version: str) -> str:
    return version.split(".", 1)[0]


def nearest_accepted(accepted: str, installed: str) -> Tuple[Optional[str], str]:
    """(the accepted version to present for ``installed``, "") or (None, why not).

    Below the range: its minimum; above it: :func:`version_inside`. Only when that
    version and the range's minimum are of the installed major (the same API generation)."""
    lower, _, _ = _clauses(accepted)
    below = lower is not None and not lazypatch.version_matches(installed, f">={lower}")
    presented = lower if below else version_inside(accepted)
    if presented is None:
        return None, f"no plain release inside {accepted} to present"
    # The generation a range is written for is its minimum's (mmdet3d 1.0.0rc4 writes
    # mmdet<=3.0.0 and means mmdet 2.x).
    written_for = {_major(presented)} | ({_major(lower)} if lower else set())
    if written_for != {_major(installed)}:
        return None, "another major version"
    return presented, ""


def gates_of(module) -> List[Gate]:
    """The version checks of a package whose body is about to run, read from its own
    ``__init__`` source, one per dependency it asserts a range of."""
    spec = getattr(module, "__spec__", None)
    origin = getattr(spec, "origin", None) or getattr(module, "__file__", None)
    if not origin or not origin.endswith(".py"):
        return []
    try:
        with open(origin, encoding="utf-8") as handle:
            source = handle.read()
    except (OSError, UnicodeDecodeError):
        return []
    gates = []
    for dependency in DEPENDENCIES:
        accepted = accepted_range(source, dependency)
        if accepted is not None and dependency != module.__name__:
            gates.append(Gate(module.__name__, accepted=accepted, dependency=dependency))
    return gates


def installed_distribution(dependency: str) -> Optional[Tuple[str, str]]:
    """``(distribution, version)`` of an installed dependency, read from metadata (no import)."""
    for distribution in DEPENDENCIES.get(dependency, (dependency,)):
        version = lazypatch.installed_version(distribution)
        if version is not None:
            return distribution, version
    return None


def installed_mmcv() -> Optional[Tuple[str, str]]:
    """``(distribution, version)`` of the installed mmcv, read from metadata (no import)."""
    return installed_distribution("mmcv")


def present_for_package(module, patch: lazypatch.PatchContext) -> None:
    """The gates of one family package: read its ranges, then present each accepted
    version it needs (or skip, saying why for each)."""
    gates = gates_of(module)
    if not gates:
        patch.skip(f"{module.__name__}'s __init__ asserts no mmcv/mmdet/mmseg range this "
                   f"gate can read")
    outcomes = [present_accepted_version(patch, gate) for gate in gates]
    presented = [text for done, text in outcomes if done]
    left = [text for done, text in outcomes if not done]
    if not presented:
        patch.skip("; ".join(left))
    patch.revert_after_import()
    for text in presented + left:
        patch.note(text)


def present_accepted_version(patch: lazypatch.PatchContext, gate: Gate) -> Tuple[bool, str]:
    """Make ``<gate.dependency>.__version__`` read an accepted version while
    ``gate.target`` imports, if the installed one is outside ``gate.accepted`` but of
    the same major as the bound it crosses; return (whether it did, what it presented
    to whom or why it did not)."""
    dependency, target = gate.dependency, gate.target
    found = installed_distribution(dependency)
    if found is None and dependency not in sys.modules and \
            importlib.util.find_spec(dependency) is None:
        return False, f"{dependency} is not installed; leaving {target}'s check to decide"
    if found is not None and lazypatch.version_matches(found[1], gate.accepted):
        return False, (f"{found[0]} {found[1]} is accepted by {target} "
                       f"({dependency}{gate.accepted}); nothing to present")
    # Importing the dependency here is not an eager import: the target's body
    # begins with `import mmcv` (mmdet3d's also imports mmdet and mmseg before
    # asserting), which is about to run anyway, and the attribute to set lives on
    # the module object. A dependency without metadata (a source checkout on the
    # path, as vendored mmdetection3d forks are) tells its version only there.
    try:
        module = importlib.import_module(dependency)
    except Exception as error:   # the target's own `import` will raise it again
        return False, (f"importing {dependency} failed ({type(error).__name__}: {error}); "
                       f"leaving {target}'s check to decide")
    current = str(getattr(module, "__version__", ""))
    distribution, installed = found or (f"{dependency} (no metadata)", current)
    if not installed:
        return False, (f"{dependency} has neither metadata nor __version__; leaving "
                       f"{target}'s check to decide")
    if lazypatch.version_matches(current, gate.accepted):
        # mmdet3d imports mmdet inside its own body, while mmdet3d's gate is
        # already presenting an accepted version: nothing more to do.
        return False, (f"{dependency}.__version__ already reads {current}, which {target} "
                       f"accepts ({dependency}{gate.accepted})")
    presented, why_not = nearest_accepted(gate.accepted, installed)
    if presented is None:
        return False, (f"{target} asserts {dependency}{gate.accepted}: {why_not} than the "
                       f"installed {distribution} {installed}; leaving {target}'s check "
                       f"to decide")
    patch.setattr(module, "__version__", presented)
    return True, (f"presented {dependency}.__version__ = {presented!r} to {target} "
                  f"(installed {distribution} {installed}; {target}'s __init__ asserts "
                  f"{dependency}{gate.accepted}); restored {current!r} after its import")

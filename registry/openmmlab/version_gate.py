"""Presenting an accepted ``mmcv.__version__`` while an OpenMMLab package imports.

mmdet 3.3, mmdet3d 1.4, mmsegmentation 1.2 (and mmpose, mmrotate, mmdet 2.x...)
end their ``__init__`` with ``assert mmcv_min <= mmcv_version < mmcv_max`` on
the *attribute* ``mmcv.__version__``, the most-reported install error of that
ecosystem. Their code runs on mmcv 2.2 (the ops they use did not change), so
the assert is the only obstacle. The accepted range is read from the package
itself: its ``__init__.py`` source is parsed with ``ast`` (never executed) for
the ``mmcv_minimum_version`` / ``mmcv_maximum_version`` assignments or their
equivalents (``MMCV_MIN`` / ``MMCV_MAX``), and the assert says whether the
maximum is inclusive. The gate sets the attribute to a version inside that
range for the duration of the package body (``patch.revert_after_import()``)
and notes what it presented to whom. The installed metadata is never touched:
``importlib.metadata`` keeps telling the truth, and so does
``mmcv.__version__`` once the import is over.

It acts only inside a window of mmcv versions this pack was tested with, and
only for a range of the same major version as the installed mmcv; outside,
an incompatibility may be real (mmdet 2.x needs mmcv 1.x) and the assert is
left to speak.
"""

from __future__ import annotations

import ast
from typing import Dict, NamedTuple, Optional, Tuple

import lazypatch

#: mmcv distributions, in the order they are looked up (full build first).
MMCV_DISTRIBUTIONS = ("mmcv", "mmcv-full", "mmcv-lite")

#: Installed mmcv versions the gate acts for (the ones this pack was tested with).
TESTED_WINDOW = ">=2.2.0,<2.3"

class Gate(NamedTuple):
    """The version check of one package and how the gate answers it."""

    target: str            # the package whose __init__ asserts
    accepted: str          # the range its assert accepts (read from its __init__)
    tested_window: str     # installed mmcv versions the gate acts for
    presented: str         # the version shown while the target's body runs


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


def _bound_names(constants: Dict[str, str]) -> Tuple[Optional[str], Optional[str]]:
    """The names of the minimum and maximum mmcv versions among string constants."""
    minimum = maximum = None
    for name in constants:
        lowered = name.lower()
        if "mmcv" not in lowered:
            continue
        if "min" in lowered:
            minimum = minimum or name
        elif "max" in lowered:
            maximum = maximum or name
    return minimum, maximum


def _maximum_is_inclusive(tree: ast.Module) -> bool:
    """Whether an ``assert`` on mmcv compares with ``<=`` against a name holding "max"
    (mmpose: ``mmcv_version <= digit_version(mmcv_maximum_version)``)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        for compare in ast.walk(node.test):
            if not isinstance(compare, ast.Compare):
                continue
            for operator, right in zip(compare.ops, compare.comparators):
                names = [item.id.lower() for item in ast.walk(right) if isinstance(item, ast.Name)]
                if any("mmcv" in name and "max" in name for name in names):
                    return isinstance(operator, ast.LtE)
    return False


def accepted_range(source: str) -> Optional[str]:
    """The mmcv range a package's ``__init__`` source asserts, as a specifier set
    (``>=2.0.0rc4,<2.2.0``), or None when it asserts none this can read."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    constants = _string_constants(tree)
    minimum, maximum = _bound_names(constants)
    if maximum is None:
        return None
    upper = ("<=" if _maximum_is_inclusive(tree) else "<") + constants[maximum]
    return f">={constants[minimum]},{upper}" if minimum else upper


def version_inside(accepted: str) -> Optional[str]:
    """A plain release inside ``accepted``: the maximum itself when inclusive, else the
    release just below it (``<2.2.0`` -> ``2.1.0``), else the minimum."""
    clauses = [clause.strip() for clause in accepted.split(",")]
    upper = next(clause for clause in clauses if clause.startswith("<"))
    bound = upper.lstrip("<=")
    if upper.startswith("<="):
        candidates = [bound]
    else:
        release = [int(part) for part in bound.split(".")[:3] if part.isdigit()]
        candidates = []
        for index in range(len(release) - 1, -1, -1):
            if release[index] > 0:
                lowered = release[:index] + [release[index] - 1] + [0] * (len(release) - index - 1)
                candidates.append(".".join(map(str, lowered)))
                break
    candidates += [clause[2:] for clause in clauses if clause.startswith(">=")]
    for candidate in candidates:
        try:
            if lazypatch.version_matches(candidate, accepted):
                return candidate
        except ValueError:
            continue
    return None


def gate_of(module) -> Optional[Gate]:
    """The gate of a package whose body is about to run, from its own ``__init__`` source."""
    spec = getattr(module, "__spec__", None)
    origin = getattr(spec, "origin", None) or getattr(module, "__file__", None)
    if not origin or not origin.endswith(".py"):
        return None
    try:
        with open(origin, encoding="utf-8") as handle:
            accepted = accepted_range(handle.read())
    except (OSError, UnicodeDecodeError):
        return None
    presented = version_inside(accepted) if accepted else None
    if accepted is None or presented is None:
        return None
    return Gate(module.__name__, accepted=accepted, tested_window=TESTED_WINDOW,
                presented=presented)


def present_for_package(module, patch: lazypatch.PatchContext) -> None:
    """The gate of one family package: read its range, then present (or skip, saying why)."""
    gate = gate_of(module)
    if gate is None:
        patch.skip(f"{module.__name__}'s __init__ asserts no mmcv range this gate can read")
    present_accepted_mmcv_version(patch, gate)


def installed_mmcv() -> Optional[Tuple[str, str]]:
    """``(distribution, version)`` of the installed mmcv, read from metadata (no import)."""
    for distribution in MMCV_DISTRIBUTIONS:
        version = lazypatch.installed_version(distribution)
        if version is not None:
            return distribution, version
    return None


def present_accepted_mmcv_version(patch: lazypatch.PatchContext, gate: Gate) -> None:
    """Make ``mmcv.__version__`` read ``gate.presented`` until ``gate.target`` finished
    importing, if the installed mmcv is outside ``gate.accepted`` and inside
    ``gate.tested_window``; otherwise skip, saying why."""
    found = installed_mmcv()
    if found is None:
        patch.skip(f"no mmcv distribution ({', '.join(MMCV_DISTRIBUTIONS)}) is installed")
    distribution, installed = found
    if lazypatch.version_matches(installed, gate.accepted):
        patch.skip(f"{distribution} {installed} is accepted by {gate.target} "
                   f"(mmcv{gate.accepted}); nothing to present")
    major = installed.split(".", 1)[0]
    if not lazypatch.version_matches(gate.presented, f"=={major}.*"):
        patch.skip(f"{gate.target} asserts mmcv{gate.accepted}, another major version than "
                   f"the installed {distribution} {installed}; leaving {gate.target}'s check "
                   f"to decide")
    if not lazypatch.version_matches(installed, gate.tested_window):
        patch.skip(f"{distribution} {installed} is outside {gate.target}'s range "
                   f"(mmcv{gate.accepted}) and outside the window this patch was tested "
                   f"with (mmcv{gate.tested_window}); leaving {gate.target}'s check to decide")
    # Importing mmcv here is not an eager import: the first statement of the
    # target's body is `import mmcv`, which is about to run anyway. We need
    # the module object to set the attribute that the target's assert reads.
    import mmcv
    current = mmcv.__version__
    if lazypatch.version_matches(current, gate.accepted):
        # mmdet3d imports mmdet inside its own body, while mmdet3d's gate is
        # already presenting an accepted version: nothing more to do.
        patch.skip(f"mmcv.__version__ already reads {current}, which {gate.target} accepts "
                   f"(mmcv{gate.accepted})")
    patch.setattr(mmcv, "__version__", gate.presented)
    patch.revert_after_import()
    patch.note(f"presented mmcv.__version__ = {gate.presented!r} to {gate.target} "
               f"(installed {distribution} {installed}; {gate.target}'s __init__ asserts "
               f"mmcv{gate.accepted}); restored {current!r} after its import")

"""Presenting an accepted ``mmcv.__version__`` while mmdet / mmdet3d import.

mmdet 3.3.0 and mmdet3d 1.4.0 end their ``__init__`` with
``assert mmcv_version < digit_version('2.2.0')`` on the *attribute*
``mmcv.__version__``. Their code runs on mmcv 2.2 (the ops they use did not
change), so the assert is the only obstacle. The gate sets the attribute to
an accepted version for the duration of the package body
(``patch.revert_after_import()``) and reports what it presented. The
installed metadata is never touched: ``importlib.metadata`` keeps telling the
truth, and so does ``mmcv.__version__`` once the import is over.

It acts only inside a window of mmcv versions this pack was tested with;
outside it, an incompatibility may be real and the assert is left to speak.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import lazypatch

#: mmcv distributions, in the order they are looked up (full build first).
MMCV_DISTRIBUTIONS = ("mmcv", "mmcv-full", "mmcv-lite")


class Gate(NamedTuple):
    """The version check of one package and how the gate answers it."""

    target: str            # the package whose __init__ asserts
    accepted: str          # the range its assert accepts (copied from its __init__)
    tested_window: str     # installed mmcv versions the gate acts for
    presented: str         # the version shown while the target's body runs


GATES = {
    "mmdet": Gate("mmdet", accepted=">=2.0.0rc4,<2.2.0", tested_window=">=2.2.0,<2.3",
                  presented="2.1.0"),
    "mmdet3d": Gate("mmdet3d", accepted=">=2.0.0rc4,<2.2.0", tested_window=">=2.2.0,<2.3",
                    presented="2.1.0"),
}


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
        patch.skip(f"mmcv.__version__ already reads {current}, which {gate.target} accepts")
    patch.setattr(mmcv, "__version__", gate.presented)
    patch.revert_after_import()
    patch.note(f"presented mmcv.__version__ = {gate.presented!r} to {gate.target} "
               f"(installed {distribution} {installed}; {gate.target} asserts "
               f"mmcv{gate.accepted}); restored {current!r} after its import")

"""Module names that a dependency of the 1.x stack moved, served at their new place.

numba 0.49 moved ``numba.errors`` to ``numba.core.errors`` and later dropped the old
name; mmdetection3d 0.17 (MapTR's and BEVDet's) still says ``from numba.errors import
NumbaPerformanceWarning``. The old name is provided as the very module at the new
place (the same objects, so ``except``/``warnings.filterwarnings`` on its classes keep
working), only when the installed package lacks it.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any, Dict, List

#: {old module name: the module that now holds its contents}, per top-level package.
MOVED_MODULES: Dict[str, Dict[str, str]] = {
    "numba": {"numba.errors": "numba.core.errors"},
}


def provide_moved_modules(package: Any, patch: Any) -> None:
    """Make each old name of ``package`` that no longer exists import its new module."""
    provided: List[str] = []
    for old_name, new_name in MOVED_MODULES.get(package.__name__, {}).items():
        if old_name in sys.modules or importlib.util.find_spec(old_name) is not None:
            continue    # the installed version still has it
        patch.provide_module(old_name, importlib.import_module(new_name))
        provided.append(f"{old_name} -> {new_name}")
    if provided:
        patch.note(f"moved modules served under their old names: {', '.join(provided)}")
    else:
        patch.skip(f"{package.__name__} still provides its old module names")

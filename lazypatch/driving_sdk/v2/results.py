"""DrivingSDK 2.0's per-patch results: ``PatchStatus`` and ``PatchResult``.

``AtomicPatch(...).apply()`` in DrivingSDK applies at once and answers with a
result. In lazypatch a patch applies when its module is imported; ``apply()``
declares it and answers with what is true at that moment: ``APPLIED`` (its
module was imported, so it applied at once), ``FAILED`` with the error, or
``SKIPPED`` with the reason, which for a module not imported yet says that the
patch is waiting for it (and it still applies when the module is imported).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Optional


class PatchStatus(Enum):
    """What happened to one patch: DrivingSDK's three outcomes."""

    APPLIED = "applied"
    SKIPPED = "skipped"
    FAILED = "failed"


@dataclass
class PatchResult:
    """The outcome of one patch's ``apply()``: status, patch name, target module, reason."""

    status: PatchStatus
    name: str
    module: str
    reason: Optional[str] = None


def _installed(module_name: str) -> bool:
    """Whether the top-level package of ``module_name`` is imported or can be (only its
    finder is asked: nothing is imported)."""
    import sys
    from importlib.util import find_spec
    top = module_name.partition(".")[0]
    if top in sys.modules:
        return True
    try:
        return find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def result_of(patch_name: str, name: str, module: str, what: str = "module") -> PatchResult:
    """The result of the lazypatch patch ``patch_name`` as it stands now; ``what`` names
    the kind of target in a "not found" reason (``module``, ``registry``)."""
    from ...state import STATE
    patch: Any = STATE.catalog.by_name.get(patch_name)
    if patch is None:
        return PatchResult(PatchStatus.SKIPPED, name, module, "not registered")
    status = patch.status
    if status == "applied":
        return PatchResult(PatchStatus.APPLIED, name, module)
    if status == "failed":
        return PatchResult(PatchStatus.FAILED, name, module, patch.reason or "failed")
    if status == "pending":
        if not _installed(patch.target):
            # DrivingSDK's words for a target that is not there; lazypatch still waits.
            return PatchResult(PatchStatus.SKIPPED, name, module,
                               f"{what} not found: {patch.target} is not installed "
                               f"(the patch applies if it is imported later)")
        return PatchResult(PatchStatus.SKIPPED, name, module,
                           f"{patch.target} not imported yet: applies when it is imported")
    return PatchResult(PatchStatus.SKIPPED, name, module, patch.reason or status)


__all__ = ["PatchStatus", "PatchResult", "result_of"]

"""``mx_driving.patcher.reporting``: PatchStatus and PatchResult (v2.results).

Names only (see ``__init__.py`` of this folder): loaded under any name, this file
gives the very objects of ``lazypatch.driving_sdk``.
"""

from lazypatch.driving_sdk.v2.results import PatchResult, PatchStatus

__all__ = ["PatchStatus", "PatchResult"]

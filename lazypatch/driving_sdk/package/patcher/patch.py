"""``mx_driving.patcher.patch``: the patch declarations (v2.patches).

Names only (see ``__init__.py`` of this folder): loaded under any name, this file
gives the very objects of ``lazypatch.driving_sdk``.
"""

from lazypatch.driving_sdk.v2.helpers import callable_name as _get_callable_name
from lazypatch.driving_sdk.v2.helpers import import_module_or_none as _import_module
from lazypatch.driving_sdk.v2.helpers import object_at as _get_by_path
from lazypatch.driving_sdk.v2.helpers import source_diff as _get_source_diff
from lazypatch.driving_sdk.v2.patches import (
    AtomicPatch,
    BasePatch,
    LegacyPatch,
    Patch,
    RegistryPatch,
    with_imports,
)
from lazypatch.driving_sdk.v2.results import PatchResult, PatchStatus
from lazypatch.driving_sdk.v2.versions import (
    check_version,
    get_version,
    is_mmcv_v1x,
    is_mmcv_v2x,
    mmcv_version,
)

__all__ = ["_get_callable_name", "_import_module", "_get_by_path", "_get_source_diff",
           "AtomicPatch", "BasePatch", "LegacyPatch", "Patch", "RegistryPatch", "with_imports",
           "PatchResult", "PatchStatus", "check_version", "get_version", "is_mmcv_v1x",
           "is_mmcv_v2x", "mmcv_version"]

"""``mx_driving.patcher.patch``: the patch declarations (driving_sdk2_patches).

Names only (see ``__init__.py`` of this folder): loaded under any name, this file
gives the very objects of ``lazypatch.compat``.
"""

from lazypatch.compat.driving_sdk2_helpers import callable_name as _get_callable_name
from lazypatch.compat.driving_sdk2_helpers import import_module_or_none as _import_module
from lazypatch.compat.driving_sdk2_helpers import object_at as _get_by_path
from lazypatch.compat.driving_sdk2_helpers import source_diff as _get_source_diff
from lazypatch.compat.driving_sdk2_patches import (
    AtomicPatch,
    BasePatch,
    LegacyPatch,
    Patch,
    RegistryPatch,
    with_imports,
)
from lazypatch.compat.driving_sdk2_results import PatchResult, PatchStatus
from lazypatch.compat.driving_sdk2_versions import (
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

"""``mx_driving.patcher.version``: version helpers (v2.versions).

Names only (see ``__init__.py`` of this folder): loaded under any name, this file
gives the very objects of ``lazypatch.driving_sdk``.
"""

from lazypatch.driving_sdk.v2.versions import (
    MMCVVersion,
    check_version,
    get_version,
    is_mmcv_v1x,
    is_mmcv_v2x,
    mmcv_version,
    version_requirement,
)

_MMCVVersion = MMCVVersion

__all__ = ["_MMCVVersion",
           "MMCVVersion", "check_version", "get_version", "is_mmcv_v1x", "is_mmcv_v2x",
           "mmcv_version", "version_requirement"]

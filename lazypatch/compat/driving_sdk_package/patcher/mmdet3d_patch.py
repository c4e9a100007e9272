"""``mx_driving.patcher.mmdet3d_patch``: built-in groups and 1.0 functions.

Names only (see ``__init__.py`` of this folder): loaded under any name, this file
gives the very objects of ``lazypatch.compat``.
"""

from lazypatch.compat.driving_sdk2_builtin_groups import (
    NuScenes,
    NuScenesDataset,
    NuScenesMetric,
)
from lazypatch.compat.driving_sdk2_builtin_patches import (
    nuscenes_dataset,
    nuscenes_metric,
)
from lazypatch.compat.driving_sdk2_helpers import nuscenes_kit_available as _nuscenes_deps_available

__all__ = ["_nuscenes_deps_available", "NuScenes", "NuScenesDataset", "NuScenesMetric",
           "nuscenes_dataset", "nuscenes_metric"]

"""``mx_driving.patcher.mmdet3d_patch``: built-in groups and 1.0 functions.

Names only (see ``__init__.py`` of this folder): loaded under any name, this file
gives the very objects of ``lazypatch.driving_sdk``.
"""

from lazypatch.driving_sdk.v2.builtin_groups import NuScenes, NuScenesDataset, NuScenesMetric
from lazypatch.driving_sdk.v2.builtin_patches import nuscenes_dataset, nuscenes_metric
from lazypatch.driving_sdk.v2.helpers import nuscenes_kit_available as _nuscenes_deps_available

__all__ = ["_nuscenes_deps_available", "NuScenes", "NuScenesDataset", "NuScenesMetric",
           "nuscenes_dataset", "nuscenes_metric"]

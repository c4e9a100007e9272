"""mmdet3d's nuScenes ``output_to_nusc_box`` with the boxes read once and the
rotations built in closed form.

Upstream, per box: ``bbox3d.tensor[i, 7:9]`` (a slice of the box tensor, and
two 0-d tensors that NumPy converts one by one; on an NPU a device slice and
a host copy per box) and ``pyquaternion.Quaternion(axis=..., radians=...)``
(normalising the axis, then sine and cosine). Here the velocity columns are
read once for all boxes, and the rotation about z by ``yaw`` is written out,
``(cos(yaw/2), 0, 0, sin(yaw/2))``, with the same ``math`` functions
pyquaternion uses, so the boxes are the same numbers. The camera case
multiplies by the fixed rotation about x by pi/2 in closed form too.
DrivingSDK's version of this patch uses mmdet3d 0.x's LiDAR yaw convention
(``-yaw - pi/2``, no width/length swap), which would turn every box of
mmdet3d 1.x; this one is pinned to mmdet3d 1.4.0's source by :mod:`.sources`
and skips when the installed source differs.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any, List, Optional, Tuple

import numpy as np

import lazypatch

from .sources import drift_reason

# pyquaternion's rotation about x by pi/2: cos and sin of pi/4, as it computes them.
_HALF_TURN_X = (math.cos(np.pi / 2 / 2.0), math.sin(np.pi / 2 / 2.0))


def _about_z(quaternion_class: Any, half_angle: float) -> Any:
    """Rotation about z (pyquaternion's axis-angle result, from its formula)."""
    return quaternion_class(math.cos(half_angle), 0.0, 0.0, math.sin(half_angle))


def _camera_rotation(quaternion_class: Any, half_angle: float) -> Any:
    """(rotation about x by pi/2) * (rotation about z by 2 * half_angle)."""
    cos_x, sin_x = _HALF_TURN_X
    cos_z, sin_z = math.cos(half_angle), math.sin(half_angle)
    return quaternion_class(cos_x * cos_z, sin_x * cos_z, -(sin_x * sin_z), cos_x * sin_z)


def output_to_nusc_box(detection: dict) -> Tuple[List[Any], Optional[np.ndarray]]:
    """mmdet3d 1.4.0's ``output_to_nusc_box``: the same boxes, built per box from
    arrays read once."""
    import pyquaternion
    from mmdet3d.structures import CameraInstance3DBoxes, LiDARInstance3DBoxes
    from nuscenes.utils.data_classes import Box as NuScenesBox
    bbox3d = detection["bboxes_3d"]
    scores = detection["scores_3d"].numpy()
    labels = detection["labels_3d"].numpy()
    attrs = detection["attr_labels"].numpy() if "attr_labels" in detection else None
    box_gravity_center = bbox3d.gravity_center.numpy()
    box_dims = bbox3d.dims.numpy()
    box_yaw = bbox3d.yaw.numpy()
    quaternion = pyquaternion.Quaternion
    box_list = []
    if isinstance(bbox3d, LiDARInstance3DBoxes):
        # our LiDAR coordinate system -> nuScenes box coordinate system
        nus_box_dims = box_dims[:, [1, 0, 2]]
        half_yaw = box_yaw / 2.0                      # pyquaternion halves the angle so
        velocities = bbox3d.tensor[:, 7:9].numpy()
        for i in range(len(bbox3d)):
            box_list.append(NuScenesBox(
                box_gravity_center[i], nus_box_dims[i], _about_z(quaternion, half_yaw[i]),
                label=labels[i], score=scores[i], velocity=(*velocities[i], 0.0)))
    elif isinstance(bbox3d, CameraInstance3DBoxes):
        # our Camera coordinate system -> nuScenes box coordinate system
        nus_box_dims = box_dims[:, [2, 0, 1]]
        half_yaw = -box_yaw / 2.0
        velocity_x = bbox3d.tensor[:, 7].numpy()
        velocity_z = bbox3d.tensor[:, 8].numpy()
        for i in range(len(bbox3d)):
            box_list.append(NuScenesBox(
                box_gravity_center[i], nus_box_dims[i], _camera_rotation(quaternion, half_yaw[i]),
                label=labels[i], score=scores[i],
                velocity=(velocity_x[i], 0.0, velocity_z[i])))
    else:
        raise NotImplementedError(f"Do not support convert {type(bbox3d)} bboxes "
                                  f"to standard NuScenesBoxes.")
    return box_list, attrs


def patch_output_to_nusc_box(nuscenes_metric: ModuleType,
                             patch: lazypatch.PatchContext) -> None:
    """Replace the module's ``output_to_nusc_box`` (NuScenesMetric calls it as a global)."""
    reason = drift_reason(nuscenes_metric, "output_to_nusc_box")
    if reason is not None:
        patch.skip(reason)
    patch.setattr(nuscenes_metric, "output_to_nusc_box", output_to_nusc_box, rebind=True)
    patch.note("output_to_nusc_box reads the boxes once and builds rotations in closed form "
               "(rewrite pinned to mmdet3d 1.4.0)")

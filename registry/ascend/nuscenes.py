"""mmdet3d's nuScenes ``output_to_nusc_box`` with the boxes read once and the
rotations built in closed form.

Upstream, per box: ``bbox3d.tensor[i, 7:9]`` (a slice of the box tensor, and
two 0-d tensors that NumPy converts one by one; on an NPU a device slice and
a host copy per box) and ``pyquaternion.Quaternion(axis=..., radians=...)``
(normalising the axis, then sine and cosine). The patch edits the *installed*
function's source (:mod:`.rewrite`): each per-box read of ``<boxes>.tensor[i, ...]``
inside a loop over ``i`` reads one array taken before the loop, and each
``Quaternion(axis=<x, y or z axis>, radians=angle)`` is built from its formula,
``(cos(angle/2), sin(angle/2) on that axis)``, with the same ``math`` functions
pyquaternion uses, so the boxes are the same numbers. Whatever the installed
release computes around those calls (its yaw convention, its width/length
order, its velocity columns) is kept, so it fits every mmdet3d whose function
has them; one with neither is left alone, saying so.
(DrivingSDK's version of this patch installs a fixed function with mmdet3d 0.x's
LiDAR yaw convention, ``-yaw - pi/2`` and no width/length swap, which turns every
box of mmdet3d 1.x.) ``output_to_nusc_box`` below is the fixed replacement
DrivingSDK's API exposes (``NuScenesMetric._replacement``), written for mmdet3d 1.x.
"""

from __future__ import annotations

import ast
import math
from types import ModuleType
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

import lazypatch

from ..shared.rewrite import HELPER_PREFIX, edited, helper_call, installed, is_name

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
    """mmdet3d 1.x's ``output_to_nusc_box``: the same boxes, built per box from
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


# --- the edit of the installed function ----------------------------------------------

AXIS_ANGLE = f"{HELPER_PREFIX}axis_angle"


def axis_angle(quaternion_class: Any, axis: int, radians: Any) -> Any:
    """``quaternion_class(axis=<unit vector on axis 0, 1 or 2>, radians=radians)`` from
    the formula, with the same arithmetic pyquaternion does."""
    half = (radians or 0.0) / 2.0    # pyquaternion reads a zero angle as 0.0 the same way
    vector = [0.0, 0.0, 0.0]
    vector[axis] = math.sin(half)
    return quaternion_class(math.cos(half), *vector)


def _unit_axis(node: ast.expr) -> Optional[int]:
    """0, 1 or 2 when ``node`` is a literal x, y or z unit vector (``[0, 0, 1]``)."""
    if not isinstance(node, (ast.List, ast.Tuple)) or len(node.elts) != 3:
        return None
    values = [element.value if isinstance(element, ast.Constant) else None
              for element in node.elts]
    if not all(isinstance(value, (int, float)) and not isinstance(value, bool)
               for value in values) or sorted(values) != [0, 0, 1]:   # type: ignore[type-var]
        return None
    return values.index(1)


class _ClosedFormRotations(ast.NodeTransformer):
    """``Quaternion(axis=<unit axis>, radians=angle)`` -> ``axis_angle(Quaternion, k, angle)``."""

    def __init__(self) -> None:
        self.changed = 0

    def visit_Call(self, node: ast.Call) -> Any:
        self.generic_visit(node)
        function = node.func
        named = (isinstance(function, ast.Attribute) and function.attr == "Quaternion") or \
            is_name(function, "Quaternion")
        keywords = {keyword.arg: keyword.value for keyword in node.keywords}
        if not named or node.args or set(keywords) != {"axis", "radians"}:
            return node
        axis = _unit_axis(keywords["axis"])
        if axis is None:
            return node
        self.changed += 1
        return helper_call(AXIS_ANGLE, function, ast.Constant(value=axis), keywords["radians"])


def _per_box_reads(loop: ast.For) -> Dict[str, List[ast.Subscript]]:
    """``<boxes>.tensor[i, ...]`` reads in ``loop`` (``i`` its own variable), by ``boxes``,
    for the boxes the loop does not rebind."""
    if not is_name(loop.target):
        return {}
    index = loop.target.id    # type: ignore[attr-defined]
    rebound = {node.id for statement in loop.body for node in ast.walk(statement)
               if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    reads: Dict[str, List[ast.Subscript]] = {}
    for statement in loop.body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
                    and isinstance(node.value, ast.Attribute) and node.value.attr == "tensor" \
                    and is_name(node.value.value) and node.value.value.id not in rebound \
                    and isinstance(node.slice, ast.Tuple) and node.slice.elts \
                    and is_name(node.slice.elts[0], index):
                reads.setdefault(node.value.value.id, []).append(node)
    return reads


def _read_once_before_loops(definition: ast.FunctionDef) -> int:
    """Each loop's ``boxes.tensor[i, ...]`` reads one array ``boxes.tensor.numpy()`` taken
    just before the loop; how many reads changed."""
    changed = 0
    for node in list(ast.walk(definition)):
        for field in ("body", "orelse"):
            statements = getattr(node, field, None)
            if not isinstance(statements, list):
                continue
            for position in range(len(statements) - 1, -1, -1):
                loop = statements[position]
                if not isinstance(loop, ast.For):
                    continue
                for boxes, reads in sorted(_per_box_reads(loop).items()):
                    rows = f"{HELPER_PREFIX}{boxes}_rows"
                    for read in reads:
                        read.value = ast.Name(id=rows, ctx=ast.Load())
                    changed += len(reads)
                    statements.insert(position, ast.Assign(
                        targets=[ast.Name(id=rows, ctx=ast.Store())],
                        value=ast.Call(func=ast.Attribute(
                            value=ast.Attribute(value=ast.Name(id=boxes, ctx=ast.Load()),
                                                attr="tensor", ctx=ast.Load()),
                            attr="numpy", ctx=ast.Load()), args=[], keywords=[])))
    return changed


def read_boxes_once(definition: ast.FunctionDef) -> str:
    """The edit: per-box tensor reads hoisted, axis-angle quaternions in closed form."""
    rotations = _ClosedFormRotations()
    rotations.visit(definition)
    if not (_read_once_before_loops(definition) + rotations.changed):
        return ("its source has neither Quaternion(axis=<x, y or z axis>, radians=...) nor "
                "per-box <boxes>.tensor[i, ...] reads in a loop over i: nothing to rewrite")
    return ""


def patch_output_to_nusc_box(nuscenes_metric: ModuleType,
                             patch: lazypatch.PatchContext) -> None:
    """Replace the module's ``output_to_nusc_box`` (NuScenesMetric calls it as a global) by
    its installed source with the boxes read once, or skip saying why not."""
    function, why_not = installed(nuscenes_metric, "output_to_nusc_box")
    rebuilt = None
    if function is not None:
        rebuilt, why_not = edited(function, read_boxes_once, {AXIS_ANGLE: axis_angle})
    if rebuilt is None:
        patch.skip(f"output_to_nusc_box left as it is: {why_not}")
    patch.setattr(nuscenes_metric, "output_to_nusc_box", rebuilt, rebind=True)
    patch.note(f"output_to_nusc_box of {nuscenes_metric.__name__}, recompiled from the "
               f"installed source with the boxes read once and rotations in closed form")

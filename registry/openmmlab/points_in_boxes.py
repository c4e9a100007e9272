"""mmcv's ``points_in_boxes_part`` / ``_all`` on CPU tensors.

Both functions start by forcing the current CUDA device to the tensors'
(``torch.cuda.current_device()`` / ``set_device``), which raises on a CPU
build of torch before any kernel runs, although mmcv has a CPU kernel for the
same question (``points_in_boxes_cpu``). mmdet3d calls them through its box
structures (``LiDARInstance3DBoxes.points_in_boxes_part``). For CPU tensors
the wrappers answer with ``points_in_boxes_cpu`` in each function's own
convention; tensors on any other device go to mmcv's function unchanged.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import lazypatch


def _points_and_boxes(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[Any, Any]:
    merged = dict(zip(("points", "boxes"), args))
    merged.update(kwargs)
    return merged["points"], merged["boxes"]


def serve_cpu_tensors(points_in_boxes: Any, patch: lazypatch.PatchContext) -> None:
    """Wrap ``points_in_boxes_all`` / ``_part`` so CPU tensors use the CPU kernel."""
    import torch
    cpu_kernel = points_in_boxes.points_in_boxes_cpu

    def all_boxes(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        points, boxes = _points_and_boxes(args, kwargs)
        if points.device.type != "cpu":
            return wrapped(*args, **kwargs)
        return cpu_kernel(points, boxes)          # (B, M, T) int32, 1 where inside

    def first_box(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        points, boxes = _points_and_boxes(args, kwargs)
        if points.device.type != "cpu":
            return wrapped(*args, **kwargs)
        inside = cpu_kernel(points, boxes).bool()  # (B, M, T)
        # The CUDA kernel stops at the first box containing the point; argmax
        # returns the first maximum, so it agrees; -1 where no box contains it.
        first = inside.int().argmax(dim=-1)
        return torch.where(inside.any(dim=-1), first, torch.full_like(first, -1)).int()

    patch.wrap(points_in_boxes, "points_in_boxes_all", all_boxes, rebind=True)
    patch.wrap(points_in_boxes, "points_in_boxes_part", first_box, rebind=True)

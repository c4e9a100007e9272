"""Time the ``deformable_aggregation`` stand-in of the ``cuda_extensions`` pack (Sparse4D's
``deformable_aggregation_ext``) against a plain PyTorch formulation of the same arithmetic.

Each row is one forward and backward on the same inputs. The reference is what one
writes without the kernel: for every camera and scale, ``grid_sample`` (bilinear, zero
padding, ``align_corners=False``: the kernel's pixel ``loc * size - 0.5``) of every
location, its weights zeroed where the location is outside the image (the kernel skips
those), summed over points, cameras and scales; autograd gives the backward.

Sizes follow Sparse4D v3's head (6 cameras, 4 scales of a 256 x 704 image, 256 channels
in 8 groups, 13 key points per anchor) with fewer anchors (100 quick, 300 full; Sparse4D
has 900) to fit a shared 2-core CPU.
Two layouts of the sampling locations:

* ``seen by 1-2 cameras``: as the projections of 3D key points into 6 surround
  cameras fall (each point inside one image, a quarter of them in a second);
* ``all inside``: every location inside every camera's image, the stand-in's worst case.

    .venv/bin/python benchmarks/packs/cuda_extensions/bench_deformable_aggregation.py [--quick] [--json]
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Dict, List, Tuple

# The repository (this file lies in benchmarks/packs/<pack>/).
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.insert(0, ROOT)
from benchmarks.packs.kernel_timing import Row, command_line, compared, rows_of_script  # noqa: E402

SCALES = ((64, 176), (32, 88), (16, 44), (8, 22))


def _kernels() -> Any:
    sys.path.insert(0, ROOT)
    try:
        return importlib.import_module("lazypatch.registry.shared.deformable_aggregation")
    except ImportError:
        return importlib.import_module("registry.shared.deformable_aggregation")


def grid_sample_formulation(feat: Any, spatial_shape: Any, scale_start_index: Any,
                            location: Any, weights: Any) -> Any:
    """The kernel's arithmetic with ``grid_sample``, one camera and scale at a time."""
    import torch.nn.functional as functional
    batch, _, channels = feat.shape
    cameras, scales = spatial_shape.shape[:2]
    anchors, groups = location.shape[1], weights.shape[-1]
    inside = ((location > 0) & (location < 1)).all(-1).to(feat.dtype)
    shapes, starts = spatial_shape.tolist(), scale_start_index.tolist()
    out = feat.new_zeros(batch, groups, channels // groups, anchors)
    for camera in range(cameras):
        grid = location[:, :, :, camera] * 2 - 1
        for scale in range(scales):
            (height, width), start = shapes[camera][scale], starts[camera][scale]
            # contiguous: grid_sample's CPU backward is ~1.5x faster on it
            value = feat[:, start:start + height * width].transpose(1, 2).reshape(
                batch, channels, height, width).contiguous()
            sampled = functional.grid_sample(value, grid, mode="bilinear",
                                             padding_mode="zeros", align_corners=False)
            weight = (weights[:, :, :, camera, scale] * inside[:, :, :, camera, None]
                      ).permute(0, 3, 1, 2)
            out = out + (sampled.view(batch, groups, channels // groups, anchors, -1)
                         * weight[:, :, None]).sum(-1)
    return out.permute(0, 3, 1, 2).reshape(batch, anchors, channels)


def inputs(anchors: int, points: int, cameras: int, channels: int, groups: int,
           all_inside: bool) -> Tuple[Any, ...]:
    import torch
    generator = torch.Generator().manual_seed(0)
    spatial_shape = torch.tensor([SCALES] * cameras, dtype=torch.int32)
    sizes = (spatial_shape[..., 0] * spatial_shape[..., 1]).reshape(-1)
    scale_start_index = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]]).view(
        cameras, len(SCALES)).int()
    feat = torch.randn(1, int(sizes.sum()), channels, generator=generator)
    location = torch.rand(1, anchors, points, cameras, 2, generator=generator) * 0.98 + 0.01
    if not all_inside:
        # Each point in one camera's image (a quarter also in the next), outside the rest.
        seen = torch.zeros(1, anchors, points, cameras, dtype=torch.bool)
        first = torch.randint(0, cameras, (1, anchors, points), generator=generator)
        seen.scatter_(3, first[..., None], True)
        second = torch.rand(1, anchors, points, generator=generator) < 0.25
        seen.scatter_(3, ((first + 1) % cameras)[..., None], second[..., None])
        location = torch.where(seen[..., None], location, location - 1.5)
    weights = torch.rand(1, anchors, points, cameras, len(SCALES), groups,
                         generator=generator).softmax(-2)
    return feat, spatial_shape, scale_start_index, location, weights


def rows_for(kernels: Any, anchors: int, all_inside: bool, repetitions: int) -> List[Row]:
    import torch
    problem = inputs(anchors, 13, 6, 256, 8, all_inside)
    feat, spatial_shape, scale_start_index, location, weights = problem
    grad = torch.randn(1, anchors, 256, generator=torch.Generator().manual_seed(1))

    def ours() -> None:
        kernels.deformable_aggregation_forward(*problem)
        grads = [torch.zeros_like(tensor) for tensor in (feat, location, weights)]
        kernels.deformable_aggregation_backward(*problem, grad, *grads)

    def plain() -> None:
        leaves = [tensor.detach().requires_grad_() for tensor in (feat, location, weights)]
        out = grid_sample_formulation(leaves[0], spatial_shape, scale_start_index, leaves[1],
                                      leaves[2])
        out.backward(grad)

    layout = "all inside" if all_inside else "seen by 1-2 cameras"
    size = f"{anchors} anchors x 13 pts, 6 cams x 4 scales, C=256/8 groups, {layout}"
    return [compared("deformable_aggregation fwd+bwd", size, ours, plain,
                     "grid_sample per camera and scale (autograd)", repetitions)]


def bench(quick: bool) -> List[Row]:
    kernels = _kernels()
    repetitions = 3 if quick else 7
    anchors = 100 if quick else 300
    return (rows_for(kernels, anchors, False, repetitions)
            + rows_for(kernels, anchors, True, repetitions))


def run(quick: bool) -> List[Dict[str, Any]]:
    """Rows for ``benchmarks/run.py``."""
    return rows_of_script(__file__, quick)


def main() -> None:
    command_line(bench, __doc__ or "")


if __name__ == "__main__":
    main()

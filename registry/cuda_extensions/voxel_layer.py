"""The ``voxel_layer`` extension that BEVFusion (and mmdet3d 0.x with its forks) build
themselves, on the OpenMMLab pack's pure-PyTorch voxelization kernels: the same
kernels as ``mmcv._ext``'s, called with the project's argument order (voxel size and
range as Python lists, as the C++ ``std::vector<float>`` takes them; the voxel count
returned rather than written into a tensor).
"""
from __future__ import annotations

from typing import Sequence

import torch

from ..shared.mmcv_ext.scatter_points import dynamic_point_to_voxel_backward, dynamic_point_to_voxel_forward
from ..shared.mmcv_ext.voxelize import dynamic_voxelize_forward, hard_voxelize_forward

__all__ = ["hard_voxelize", "dynamic_voxelize", "dynamic_point_to_voxel_forward",
           "dynamic_point_to_voxel_backward"]


def _float_vector(values: "Sequence[float] | torch.Tensor") -> torch.Tensor:
    # On the host, as the C++ binding converts to std::vector<float>.
    return torch.as_tensor(values, dtype=torch.float32, device="cpu").reshape(-1)


def hard_voxelize(points: torch.Tensor, voxels: torch.Tensor, coors: torch.Tensor,
                  num_points_per_voxel: torch.Tensor, voxel_size: Sequence[float],
                  coors_range: Sequence[float], max_points: int, max_voxels: int,
                  NDim: int = 3, deterministic: bool = True) -> int:
    """Fill the first M rows of ``voxels``, ``coors`` (z, y, x) and
    ``num_points_per_voxel``; return M."""
    voxel_num = torch.zeros((), dtype=torch.long)
    hard_voxelize_forward(points, _float_vector(voxel_size), _float_vector(coors_range),
                          voxels, coors, num_points_per_voxel, voxel_num, max_points,
                          max_voxels, NDim, deterministic)
    return int(voxel_num)


def dynamic_voxelize(points: torch.Tensor, coors: torch.Tensor,
                     voxel_size: Sequence[float], coors_range: Sequence[float],
                     NDim: int = 3) -> None:
    """Fill ``coors`` (N, NDim) with each point's voxel (z, y, x), -1 outside the range."""
    dynamic_voxelize_forward(points, _float_vector(voxel_size), _float_vector(coors_range),
                             coors, NDim)

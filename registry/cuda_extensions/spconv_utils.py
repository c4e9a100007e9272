"""spconv 2's ``spconv.pytorch.utils``: ``PointToVoxel``, the voxel generator of
OpenPCDet-style data pipelines and of models that voxelize inside ``forward``, and
``gather_features_by_pc_voxel_id``, on the OpenMMLab pack's hard-voxelization kernel
(:func:`lazypatch.registry.shared.mmcv_ext.voxelize.hard_voxel_assignment`, the same
assignment ``mmcv._ext.hard_voxelize_forward`` writes).

spconv 2's conventions, as its CPU generator gives them:

* a point's voxel is ``floor((p - range_min) / vsize)``; points outside the range are
  dropped; the grid is ``round((range_max - range_min) / vsize)`` voxels per axis;
* voxels are numbered in the order they first receive a point; at most
  ``max_num_voxels`` voxels (later ones are dropped) and the first
  ``max_num_points_per_voxel`` points of each, in input order;
* ``indices`` are in reversed axis order, (z, y, x), int32, so that with a batch column
  in front they index a ``SparseConvTensor`` of spatial shape ``grid_size[::-1]``;
* ``empty_mean=True`` fills a voxel's unused slots with the mean of its points;
* ``pc_voxel_id`` gives each point's voxel, -1 for a point that was not stored.

Each call returns new tensors (spconv returns views of buffers that the next call
overwrites; a caller that copies them sees no difference).
"""
from __future__ import annotations

from typing import List, Sequence, Tuple, Union

import torch

from ..shared.mmcv_ext.voxelize import hard_voxel_assignment

__all__ = ["PointToVoxel", "gather_features_by_pc_voxel_id"]


class PointToVoxel:
    """Voxelize a point cloud (N, >= num_point_features) as spconv 2's generator does."""

    def __init__(self, vsize_xyz: Sequence[float], coors_range_xyz: Sequence[float],
                 num_point_features: int, max_num_voxels: int,
                 max_num_points_per_voxel: int,
                 device: Union[str, torch.device] = "cpu") -> None:
        self.ndim = len(vsize_xyz)
        if len(coors_range_xyz) != 2 * self.ndim:
            raise ValueError(f"coors_range_xyz needs {2 * self.ndim} values (min then max "
                             f"per axis), got {list(coors_range_xyz)}")
        self.device = torch.device(device)
        self.num_point_features = int(num_point_features)
        self.max_num_voxels = int(max_num_voxels)
        self.max_num_points_per_voxel = int(max_num_points_per_voxel)
        self.vsize: List[float] = [float(v) for v in vsize_xyz]
        self.coors_range: List[float] = [float(v) for v in coors_range_xyz]
        # float32 as spconv computes it (and as the kernel rounds it)
        extent = ((torch.tensor(self.coors_range[self.ndim:], dtype=torch.float32)
                   - torch.tensor(self.coors_range[:self.ndim], dtype=torch.float32))
                  / torch.tensor(self.vsize, dtype=torch.float32))
        self.grid_size: List[int] = [int(v) for v in torch.round(extent).tolist()]
        #: strides of the linear voxel index over (x, y, z), as spconv reports them
        self.grid_stride: List[int] = [
            int(torch.tensor(self.grid_size[:axis], dtype=torch.long).prod())
            for axis in range(self.ndim)]

    def __call__(self, pc: torch.Tensor, clear_voxels: bool = True,
                 empty_mean: bool = False
                 ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(voxels (M, max points, features), indices (M, ndim) z-y-x int32,
        num_points_per_voxel (M,) int32)."""
        voxels, indices, num_points, _ = self.generate_voxel_with_id(pc, clear_voxels,
                                                                      empty_mean)
        return voxels, indices, num_points

    def generate_voxel_with_id(self, pc: torch.Tensor, clear_voxels: bool = True,
                               empty_mean: bool = False
                               ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                          torch.Tensor]:
        """As :meth:`__call__`, plus ``pc_voxel_id`` (N,): each point's voxel, -1 when
        it was not stored (outside the range, past the voxel or per-voxel limit).
        ``clear_voxels`` is accepted for spconv's signature: the voxels are always new,
        zero-padded tensors here."""
        if pc.dim() != 2 or pc.shape[1] < self.num_point_features:
            raise ValueError(f"PointToVoxel expects points (N, >= {self.num_point_features}),"
                             f" got {tuple(pc.shape)}")
        features = pc[:, :self.num_point_features]
        found = hard_voxel_assignment(
            features, torch.tensor(self.vsize), torch.tensor(self.coors_range),
            self.max_num_points_per_voxel, self.max_num_voxels, self.ndim)
        kept = found.counts.numel()
        voxels = features.new_zeros((kept, self.max_num_points_per_voxel,
                                     self.num_point_features))
        voxels[found.voxel_index, found.slot] = features[found.point_index]
        if empty_mean and kept:
            mean = voxels.sum(dim=1) / found.counts.clamp_min(1)[:, None].to(voxels.dtype)
            slots = torch.arange(self.max_num_points_per_voxel, device=pc.device)
            unused = slots[None, :] >= found.counts[:, None]
            voxels = torch.where(unused[..., None], mean[:, None, :], voxels)
        pc_voxel_id = torch.full((pc.shape[0],), -1, dtype=torch.long, device=pc.device)
        pc_voxel_id[found.point_index] = found.voxel_index
        return (voxels, found.voxel_coords.to(torch.int32), found.counts.to(torch.int32),
                pc_voxel_id)


def gather_features_by_pc_voxel_id(seg_res_features: torch.Tensor, pc_voxel_id: torch.Tensor,
                                   invalid_value: Union[int, float] = 0) -> torch.Tensor:
    """Each point's row of the per-voxel ``seg_res_features`` (M, C) through
    ``pc_voxel_id``; ``invalid_value`` for points without a voxel (-1)."""
    valid = pc_voxel_id >= 0
    result = seg_res_features.new_full((pc_voxel_id.shape[0], *seg_res_features.shape[1:]),
                                       invalid_value)
    result[valid] = seg_res_features[pc_voxel_id[valid].long()]
    return result

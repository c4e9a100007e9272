"""DSVT's ``ingroup_inds_cuda`` extension: ``forward(group_inds, out_inds)`` writes into
``out_inds`` each element's rank among the elements of its group. The CUDA kernel
counts with ``atomicAdd``, so its ranks within a group come in any order; here they
follow the index order, which is one of those results, the same on every run.
"""
from __future__ import annotations

import torch

from ..shared.mmcv_ext.ranks import rank_within_groups


def ingroup_inds_forward(group_inds: torch.Tensor, out_inds: torch.Tensor) -> None:
    """Write the rank of each element within its group into ``out_inds``."""
    out_inds.copy_(rank_within_groups(group_inds.reshape(-1)).view_as(out_inds))

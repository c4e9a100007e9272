"""spconv 2's average and global pools (``spconv.pytorch.pool``'s
``SparseAvgPool1d/2d/3d``, ``SparseGlobalMaxPool``, ``SparseGlobalAvgPool``).

* ``SparseAvgPoolNd`` averages the active inputs of each window: it divides by the
  number of sites present, not by the kernel volume (spconv: "avg pool that use
  real point count instead of kernel size"). Outputs start from 0 like the max
  pool's; spconv limits the kernel volume to 32 and refuses an ``indice_key``
  already in the tensor, and so does the stand-in. Its pairs, kept under
  ``indice_key``, can be run backwards by a ``SparseInverseConv``.
* ``SparseGlobalMaxPool`` / ``SparseGlobalAvgPool`` reduce every site of each batch
  element: a dense ``(batch_size, channels)`` tensor. spconv 2.3.8's global average
  keeps only the first channel's mean (``torch.mean(...)[0]``, a copy of the max's
  ``torch.max(...)[0]``); the stand-in returns every channel's mean, which is what
  the layer is documented to compute. A batch element without sites is an error, as
  in spconv (the maximum of nothing).
"""

from __future__ import annotations

import math
from typing import Any, List, Optional

import torch

from ..shared.mmcv_ext import sparse_conv as kernels
from .spconv import (
    ConvAlgo,
    IntOrSequence,
    SparseConvTensor,
    SparseModule,
    expand_nd,
    pooled,
)

#: spconv's limit on the kernel volume of an average pool.
MAX_AVERAGE_POOL_KERNEL_VOLUME = 32


def indice_avgpool(features: torch.Tensor, indice_pairs: torch.Tensor,
                   indice_pair_num: torch.Tensor, num_activate_out: int) -> torch.Tensor:
    """Mean of the paired inputs of each output site (differentiable)."""
    rows_in, rows_out = kernels.active_pairs(indice_pairs, indice_pair_num)
    total = features.new_zeros((int(num_activate_out), features.shape[1]))
    total = total.index_add(0, rows_out, features.index_select(0, rows_in))
    count = torch.bincount(rows_out, minlength=int(num_activate_out)).clamp_(min=1)
    return total / count.to(features.dtype)[:, None]


class SparseAvgPool(SparseModule):
    """spconv 2's sparse average pool (see the module docstring)."""

    def __init__(self, ndim: int, kernel_size: IntOrSequence = 3,
                 stride: Optional[IntOrSequence] = 1, padding: IntOrSequence = 0,
                 dilation: IntOrSequence = 1, indice_key: Optional[str] = None,
                 subm: bool = False, algo: Optional[ConvAlgo] = None,
                 record_voxel_count: bool = False, name: Optional[str] = None) -> None:
        super().__init__(name=name)
        self.ndim = ndim
        self.kernel_size = expand_nd(ndim, kernel_size)
        self.stride = list(self.kernel_size) if stride is None else expand_nd(ndim, stride)
        self.padding = expand_nd(ndim, padding)
        self.dilation = expand_nd(ndim, dilation)
        self.indice_key = indice_key
        self.subm = subm
        self.inverse = False
        self.record_voxel_count = record_voxel_count
        volume = math.prod(self.kernel_size)
        if volume > MAX_AVERAGE_POOL_KERNEL_VOLUME:
            raise ValueError(
                f"SparseAvgPool{ndim}d: kernel {self.kernel_size} has {volume} offsets; "
                f"spconv's average pool supports at most {MAX_AVERAGE_POOL_KERNEL_VOLUME}: "
                "use a smaller kernel")
        # spconv runs every average pool with the implicit-GEMM pairs, whatever is asked.
        self.algo = ConvAlgo.MaskImplicitGemm

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}"

    def forward(self, input: SparseConvTensor) -> SparseConvTensor:
        if not isinstance(input, SparseConvTensor):
            raise TypeError(f"SparseAvgPool{self.ndim}d takes a SparseConvTensor, "
                            f"not {type(input).__name__}")
        if self.indice_key is not None and self.indice_key in input.indice_dict:
            raise ValueError(f"your indice key {self.indice_key!r} already exists in "
                             "this sparse tensor (spconv): give the pool its own key")
        return pooled(self, input, indice_avgpool)


def _avg_pool_class(ndim: int) -> type:
    def __init__(self: Any, kernel_size: IntOrSequence, stride: Any = None,
                 padding: IntOrSequence = 0, dilation: IntOrSequence = 1,
                 indice_key: Optional[str] = None, algo: Optional[ConvAlgo] = None,
                 record_voxel_count: bool = False, name: Optional[str] = None) -> None:
        SparseAvgPool.__init__(self, ndim, kernel_size, stride, padding, dilation,
                               indice_key=indice_key, algo=algo,
                               record_voxel_count=record_voxel_count, name=name)

    return type(f"SparseAvgPool{ndim}d", (SparseAvgPool,),
                {"__init__": __init__, "__module__": __name__,
                 "__doc__": f"spconv's SparseAvgPool{ndim}d: the mean of the sites "
                            "present in each window."})


SparseAvgPool1d = _avg_pool_class(1)
SparseAvgPool2d = _avg_pool_class(2)
SparseAvgPool3d = _avg_pool_class(3)


class SparseGlobalMaxOrAvgPool(SparseModule):
    """Maximum or mean over all sites of each batch element: (batch_size, channels)."""

    def __init__(self, is_mean: bool, name: Optional[str] = None) -> None:
        super().__init__(name=name)
        self.is_mean = is_mean

    def forward(self, input: SparseConvTensor) -> torch.Tensor:
        if not isinstance(input, SparseConvTensor):
            raise TypeError(f"{type(self).__name__} takes a SparseConvTensor, "
                            f"not {type(input).__name__}")
        features = input.features
        batch = input.indices[:, 0].long().to(features.device)
        counts = torch.bincount(batch, minlength=input.batch_size)
        empty: List[int] = (counts[:input.batch_size] == 0).nonzero().flatten().tolist()
        if empty:
            raise ValueError(f"{type(self).__name__}: batch elements {empty} have no "
                             "sites, so there is nothing to pool (spconv fails too)")
        rows = batch[:, None].expand(-1, features.shape[1])
        empty_output = features.new_zeros((input.batch_size, features.shape[1]))
        if self.is_mean:
            total = empty_output.scatter_add(0, rows, features)
            return total / counts[:input.batch_size, None].to(features.dtype)
        return empty_output.scatter_reduce(0, rows, features, "amax", include_self=False)


class SparseGlobalAvgPool(SparseGlobalMaxOrAvgPool):
    """Mean of every channel over the sites of each batch element."""

    def __init__(self, name: Optional[str] = None) -> None:
        super().__init__(is_mean=True, name=name)


class SparseGlobalMaxPool(SparseGlobalMaxOrAvgPool):
    """Maximum of every channel over the sites of each batch element."""

    def __init__(self, name: Optional[str] = None) -> None:
        super().__init__(is_mean=False, name=name)


#: What ``spconv.pytorch.pool`` adds to the max pools.
POOLS = ("SparseAvgPool", "SparseAvgPool1d", "SparseAvgPool2d", "SparseAvgPool3d",
         "SparseGlobalMaxOrAvgPool", "SparseGlobalMaxPool", "SparseGlobalAvgPool")

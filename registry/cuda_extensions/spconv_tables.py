"""spconv 2's ``spconv.pytorch.tables`` and ``spconv.pytorch.identity``: modules
that branch and merge sparse tensors inside a ``SparseSequential``.

``ConcatTable`` runs each of its modules on the same input and returns the list of
results; ``AddTable`` sums and ``JoinTable`` concatenates (along channels) the
features of a list of tensors on the same sites, keeping the first one's indices
and indice pairs. As in spconv, they check the spatial shape, batch size, channel
count and site count of the tensors agree; unlike spconv (``assert``), the check
holds under ``python -O`` and names what differs.
"""

from __future__ import annotations

from typing import Any, List, Sequence

import torch
from torch import nn

from .spconv import SparseConvTensor, SparseModule


def _check_same_sites(module: str, tensors: Sequence[SparseConvTensor]) -> None:
    """spconv's checks that ``tensors`` can be merged site by site."""
    if len(tensors) == 0:
        raise ValueError(f"{module} needs a list of at least one SparseConvTensor")

    def shape_of(tensor: SparseConvTensor) -> List[Any]:
        return [list(tensor.spatial_shape), tensor.batch_size,
                tensor.features.shape[1], tensor.indices.shape[0]]

    expected = shape_of(tensors[0])
    for position, tensor in enumerate(tensors[1:], start=1):
        for what, value, wanted in zip(
                ("spatial shape", "batch size", "channel count", "site count"),
                shape_of(tensor), expected):
            if value != wanted:
                raise ValueError(
                    f"you can't use {module} on sparse tensors with different indices: "
                    f"tensor {position} has {what} {value}, tensor 0 {wanted}")


def _merged(tensors: Sequence[SparseConvTensor], features: torch.Tensor
            ) -> SparseConvTensor:
    """A tensor on the sites (and with the indice pairs) of the first one."""
    first = tensors[0]
    output = SparseConvTensor(features, first.indices, first.spatial_shape,
                              first.batch_size, first.grid, first.voxel_num,
                              first.indice_dict)
    output.benchmark_record = tensors[-1].benchmark_record
    return output


class JoinTable(SparseModule):
    """Concatenates the features of tensors on the same sites (channels last)."""

    def forward(self, input: List[SparseConvTensor]) -> SparseConvTensor:
        _check_same_sites("JoinTable", input)
        return _merged(input, torch.cat([tensor.features for tensor in input], 1))

    def input_spatial_size(self, out_size: Any) -> Any:
        return out_size


class AddTable(SparseModule):
    """Sums the features of tensors on the same sites."""

    def forward(self, input: List[SparseConvTensor]) -> SparseConvTensor:
        _check_same_sites("AddTable", input)
        return _merged(input, sum(tensor.features for tensor in input[1:])
                       + input[0].features)

    def input_spatial_size(self, out_size: Any) -> Any:
        return out_size


class ConcatTable(SparseModule):
    """Runs each of its modules on the input: the list of their outputs."""

    def forward(self, input: Any) -> List[Any]:
        return [module(input) for module in self._modules.values()]

    def add(self, module: nn.Module) -> "ConcatTable":
        self._modules[str(len(self._modules))] = module
        return self

    def input_spatial_size(self, out_size: Any) -> Any:
        return self._modules["0"].input_spatial_size(out_size)


class Identity(nn.Module):
    """Returns its input (a plain module, as in spconv: a SparseSequential hands it
    the features)."""

    def forward(self, input: Any) -> Any:
        return input

    def input_spatial_size(self, out_size: Any) -> Any:
        return out_size

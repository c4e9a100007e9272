"""spconv 2.x's PyTorch API (``spconv.pytorch``) on the pure-PyTorch sparse kernels
of :mod:`lazypatch.registry.shared.mmcv_ext.sparse_conv`.

What code written for spconv 2 relies on, with spconv 2's conventions:

* ``SparseConvTensor(features, indices, spatial_shape, batch_size)``: ``indices``
  (N, 1 + ndim) int32, batch first; ``features`` is read-only (a new tensor comes
  from ``replace_feature``); ``dense()``, ``from_dense``, ``shadow_copy``,
  ``find_indice_pair``, ``+`` of two tensors on the same sites;
* convolution weights in spconv 2's layout ``(out, *kernel, in)``; indice pairs are
  shared through ``indice_key``: a submanifold conv reuses the pairs of an earlier
  one with the same key, ``SparseInverseConv`` runs the pairs of the regular conv
  (or pool) with its key backwards, back to that layer's input sites;
* submanifold convolutions are centred (offset ``kernel // 2 * dilation``) and
  ignore stride and padding; ``SparseMaxPool`` starts from 0, like spconv's;
* ``algo``, ``fp32_accum``, ``name``, ``record_voxel_count``, ``benchmark``,
  ``enable_timer`` are accepted; there is one algorithm here (gather and GEMM per
  kernel offset, sums over pairs as bags of rows), so they change nothing.
  A fused activation (``act_type``) is refused, as spconv refuses it in training.

The indice pairs kept in ``indice_dict`` are this implementation's, not spconv's:
lists grouped by kernel offset, laid out once for the kernels (a ``PairPlan``, with
its sum bags); ``IndiceData.indice_pairs`` gives mmcv's (K, 2, N) int64 layout,
built when read. Every layer sharing an ``indice_key`` (an inverse conv included) and
every backward reuses the plan; nothing is recomputed.
"""

from __future__ import annotations

import enum
import math
import sys
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ..shared.mmcv_ext import sparse_conv as kernels

#: The spconv API this stand-in follows (mmdet3d checks ``__version__ >= '2.0.0'``).
__version__ = "2.3.8"
SPCONV_VERSION_NUMBERS = [int(part) for part in __version__.split(".")]

IntOrSequence = Union[int, Sequence[int]]


class ConvAlgo(enum.Enum):
    """spconv's algorithm choice; every value runs the same kernels here."""
    Native = 0
    MaskImplicitGemm = 1
    MaskSplitImplicitGemm = 2


def expand_nd(ndim: int, value: IntOrSequence) -> List[int]:
    """``value`` as a list of ``ndim`` ints (one int is repeated)."""
    values = [int(value)] * ndim if isinstance(value, int) else [int(v) for v in value]
    if len(values) != ndim:
        raise ValueError(f"expected {ndim} values, got {list(values)}")
    return values


def scatter_nd(indices: torch.Tensor, updates: torch.Tensor,
               shape: Sequence[int]) -> torch.Tensor:
    """A zero tensor of ``shape`` with ``updates`` written at ``indices`` (the
    leading dimensions); a repeated index keeps one of its updates."""
    result = updates.new_zeros(list(shape))
    return result.index_put(tuple(indices.long().t()), updates)


class IndiceData:
    """The indice pairs of one convolution or pool, kept under its ``indice_key``.

    A convolution keeps its pairs as :class:`PairLists` (``pair_lists``) and lays them
    out for the kernels once; ``indice_pairs`` (mmcv's (K, 2, N) layout) is then built
    only if something reads it.
    """

    def __init__(self, out_indices: torch.Tensor, indices: torch.Tensor,
                 indice_pairs: Optional[torch.Tensor], indice_pair_num: torch.Tensor,
                 spatial_shape: List[int], out_spatial_shape: List[int], is_subm: bool,
                 algo: ConvAlgo, ksize: List[int], stride: List[int],
                 dilation: List[int], padding: List[int],
                 voxel_num: Optional[Any] = None,
                 pair_lists: Optional[kernels.PairLists] = None) -> None:
        if indice_pairs is None and pair_lists is None:
            raise ValueError("IndiceData needs indice_pairs or pair_lists")
        self.out_indices = out_indices
        self.indices = indices
        self._indice_pairs = indice_pairs
        self._pair_lists = pair_lists
        self.indice_pair_num = indice_pair_num
        self.spatial_shape = spatial_shape
        self.out_spatial_shape = out_spatial_shape
        self.is_subm = is_subm
        self.algo = algo
        self.ksize = ksize
        self.stride = stride
        self.dilation = dilation
        self.padding = padding
        self.voxel_num = voxel_num
        self._plans_by_device: Dict[torch.device, kernels.PairPlan] = {}

    @property
    def indice_pairs(self) -> torch.Tensor:
        """(K, 2, N) int64 pairs in mmcv's layout (module docstring)."""
        if self._indice_pairs is None:
            assert self._pair_lists is not None
            self._indice_pairs = kernels.pairs_layout(
                self._pair_lists, self.indices.shape[0], torch.long)
        return self._indice_pairs

    def plan_on(self, device: torch.device) -> kernels.PairPlan:
        """The pairs laid out for the convolution kernels on ``device``, built once for
        every layer that shares them and for their backward."""
        plan = self._plans_by_device.get(device)
        if plan is None:
            rows = (self.indices.shape[0], self.out_indices.shape[0])
            if self._pair_lists is not None:
                lists = kernels.PairLists(*(part.to(device) for part in self._pair_lists))
                plan = kernels.plan_of_lists(lists, rows, self.is_subm)
            else:
                plan = kernels.pair_plan(self.indice_pairs.to(device),
                                         self.indice_pair_num, rows, self.is_subm)
            self._plans_by_device[device] = plan
        return plan


class SparseConvTensor:
    """Features at the active sites of a batch of sparse grids (spconv 2's class)."""

    def __init__(self, features: torch.Tensor, indices: torch.Tensor,
                 spatial_shape: Sequence[int], batch_size: int,
                 grid: Optional[torch.Tensor] = None,
                 voxel_num: Optional[torch.Tensor] = None,
                 indice_dict: Optional[Dict[Any, IndiceData]] = None,
                 benchmark: bool = False, permanent_thrust_allocator: bool = False,
                 enable_timer: bool = False, force_algo: Optional[ConvAlgo] = None
                 ) -> None:
        ndim = indices.shape[1] - 1
        if features.dim() != 2 or indices.dim() != 2:
            raise ValueError("SparseConvTensor: features must be (N, C) and indices "
                             f"(N, 1 + ndim), got {tuple(features.shape)} and "
                             f"{tuple(indices.shape)}")
        if len(spatial_shape) != ndim:
            raise ValueError(f"SparseConvTensor: spatial_shape {list(spatial_shape)} "
                             f"must have {ndim} entries for indices with {ndim + 1} "
                             "columns")
        if indices.dtype != torch.int32:
            raise TypeError("SparseConvTensor: indices must be int32, as spconv "
                            f"requires (got {indices.dtype})")
        self._features = features
        self.indices = indices
        self.spatial_shape = [int(v) for v in spatial_shape]
        self.batch_size = int(batch_size)
        self.indice_dict: Dict[Any, IndiceData] = {} if indice_dict is None \
            else indice_dict
        self.grid = torch.Tensor() if grid is None else grid
        self.voxel_num = voxel_num
        self.benchmark = benchmark
        self.benchmark_record: Dict[str, Any] = {}
        self.force_algo = force_algo
        self.int8_scale = None

    def __repr__(self) -> str:
        return f"SparseConvTensor[shape={tuple(self._features.shape)}]"

    @property
    def features(self) -> torch.Tensor:
        return self._features

    @features.setter
    def features(self, value: torch.Tensor) -> None:
        raise ValueError("you can't set feature directly, use "
                         "'x = x.replace_feature(your_new_feature)' to generate a new "
                         "SparseConvTensor instead (spconv 2)")

    @property
    def is_quantized(self) -> bool:
        return False

    @property
    def spatial_size(self) -> int:
        return math.prod(self.spatial_shape)

    def replace_feature(self, feature: torch.Tensor) -> "SparseConvTensor":
        """The same sites (and indice pairs) with other features."""
        tensor = self.shadow_copy()
        tensor._features = feature
        return tensor

    def shadow_copy(self) -> "SparseConvTensor":
        """A new tensor sharing every member (the indice dict too)."""
        tensor = SparseConvTensor(self._features, self.indices, self.spatial_shape,
                                  self.batch_size, self.grid, self.voxel_num,
                                  self.indice_dict, self.benchmark)
        tensor.benchmark_record = self.benchmark_record
        tensor.force_algo = self.force_algo
        return tensor

    def select_by_index(self, valid_indices: torch.Tensor) -> "SparseConvTensor":
        """The sites selected by ``valid_indices``, with an emptied indice dict."""
        tensor = self.shadow_copy()
        tensor.indices = self.indices[valid_indices]
        tensor._features = self._features[valid_indices]
        tensor.indice_dict = {}
        return tensor

    def minus(self) -> "SparseConvTensor":
        return self.replace_feature(-self._features)

    @classmethod
    def from_dense(cls, x: torch.Tensor) -> "SparseConvTensor":
        """The non-zero sites of a channels-last (N, *spatial, C) tensor."""
        sparse = x.to_sparse(x.dim() - 1)
        return cls(sparse.values(), sparse.indices().t().contiguous().int(),
                   list(sparse.shape[1:-1]), sparse.shape[0])

    def find_indice_pair(self, key: Any) -> Optional[IndiceData]:
        if key is None:
            return None
        return self.indice_dict.get(key)

    def dense(self, channels_first: bool = True) -> torch.Tensor:
        """The dense (N, C, *spatial) tensor, or (N, *spatial, C)."""
        channels = self._features.shape[1]
        indices = self.indices.to(self._features.device)
        if not channels_first:
            return scatter_nd(indices, self._features,
                              [self.batch_size, *self.spatial_shape, channels])
        # written channels-first at once: permuting a channels-last grid afterwards is a
        # strided copy of the whole grid, several times the cost of the writes
        result = self._features.new_zeros([self.batch_size, channels, *self.spatial_shape])
        result.movedim(1, -1).index_put_(tuple(indices.long().t()), self._features)
        return result

    @staticmethod
    def _features_of(other: Union["SparseConvTensor", torch.Tensor]) -> torch.Tensor:
        if not isinstance(other, (SparseConvTensor, torch.Tensor)):
            raise TypeError(f"can only add a SparseConvTensor or a tensor, not "
                            f"{type(other).__name__}")
        return other.features if isinstance(other, SparseConvTensor) else other

    def __add__(self, other: Union["SparseConvTensor", torch.Tensor]
                ) -> "SparseConvTensor":
        return self.replace_feature(self._features + self._features_of(other))

    __radd__ = __add__

    def __iadd__(self, other: Union["SparseConvTensor", torch.Tensor]
                 ) -> "SparseConvTensor":
        self._features = self._features + self._features_of(other)
        return self


# ----------------------------------------------------------------- autograd

class _IndiceConv(torch.autograd.Function):
    """Gather-GEMM-sum over a :class:`PairPlan`; weights as (K, in, out)."""

    @staticmethod
    def forward(ctx: Any, features: torch.Tensor, weights: torch.Tensor,
                plan: kernels.PairPlan, inverse: bool, keep: bool) -> torch.Tensor:
        """``keep``: a backward will follow (the caller knows: grad mode is off here)."""
        ctx.save_for_backward(features, weights)
        ctx.plan, ctx.inverse = plan, inverse
        # a training step gathers the same input rows again in its backward: keep them
        # when they are one chunk (memory bounded by pair_sums.CHUNK_PAIRS)
        output, ctx.gathered = kernels.convolve(plan, features, weights, inverse, keep)
        return output

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        features, weights = ctx.saved_tensors
        input_grad, weights_grad = kernels.convolve_backward(
            ctx.plan, features, weights, grad.contiguous(), ctx.inverse, ctx.gathered)
        ctx.gathered = None
        return input_grad, weights_grad, None, None, None


class _IndiceMaxPool(torch.autograd.Function):

    @staticmethod
    def forward(ctx: Any, features: torch.Tensor, pairs: torch.Tensor,
                pair_num: torch.Tensor, out_rows: int) -> torch.Tensor:
        output = kernels.indice_maxpool_forward(features, pairs, pair_num, out_rows)
        ctx.save_for_backward(features, output, pairs, pair_num)
        return output

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        features, output, pairs, pair_num = ctx.saved_tensors
        return (kernels.indice_maxpool_backward(features, output, grad.contiguous(),
                                                pairs, pair_num), None, None, None)


def _planned_conv(features: torch.Tensor, filters: torch.Tensor, plan: kernels.PairPlan,
                  inverse: bool, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """The convolution over ``plan`` with spconv 2's (out, *kernel, in) ``filters``."""
    weights = filters.movedim(0, -1).reshape(-1, filters.shape[-1], filters.shape[0])
    # under no_grad (inference) the forward's gathered rows are not kept for a backward
    keep = torch.is_grad_enabled() and (features.requires_grad or filters.requires_grad)
    output = _IndiceConv.apply(features, weights, plan, inverse, keep)
    return output if bias is None else output + bias


def _refuse_activation(act_type: Any) -> None:
    if act_type not in (None, 0) and getattr(act_type, "name", "None_") != "None_":
        raise NotImplementedError(
            "lazypatch's pure-PyTorch spconv does not fuse activations into the "
            "convolution (spconv is not installed; lazypatch pack 'cuda_extensions' "
            "provides a stand-in): apply the activation to the output features")


def _conv(inverse: bool, subm: bool):
    def convolve(features: torch.Tensor, filters: torch.Tensor,
                 indice_pairs: torch.Tensor, indice_pair_num: torch.Tensor,
                 num_activate_out: int, algo: Any = None, timer: Any = None,
                 bias: Optional[torch.Tensor] = None, act_alpha: float = 0.0,
                 act_beta: float = 0.0, act_type: Any = None) -> torch.Tensor:
        _refuse_activation(act_type)
        rows = (int(num_activate_out), features.shape[0]) if inverse else \
            (features.shape[0], int(num_activate_out))
        plan = kernels.pair_plan(indice_pairs.to(features.device), indice_pair_num, rows,
                                 subm)
        return _planned_conv(features, filters, plan, inverse, bias)
    return convolve


#: spconv.pytorch.functional: weights in spconv 2's (out, *kernel, in) layout.
indice_conv = _conv(inverse=False, subm=False)
indice_inverse_conv = _conv(inverse=True, subm=False)
indice_subm_conv = _conv(inverse=False, subm=True)
indice_conv.__name__, indice_inverse_conv.__name__, indice_subm_conv.__name__ = (
    "indice_conv", "indice_inverse_conv", "indice_subm_conv")


def indice_maxpool(features: torch.Tensor, indice_pairs: torch.Tensor,
                   indice_pair_num: torch.Tensor, num_activate_out: int) -> torch.Tensor:
    """Channel-wise maximum of 0 and the paired inputs of each output site."""
    return _IndiceMaxPool.apply(features, indice_pairs, indice_pair_num,
                                int(num_activate_out))


def sparse_add(*tensors: SparseConvTensor) -> SparseConvTensor:
    """The sum of sparse tensors on the union of their sites (same spatial shape)."""
    first = tensors[0]
    shape = torch.tensor(first.spatial_shape, dtype=torch.long,
                         device=first.indices.device)
    keys = torch.cat([kernels.linear_keys(t.indices[:, 0].long(), t.indices[:, 1:].long(),
                                          shape) for t in tensors])
    unique_keys, rows = torch.unique(keys, return_inverse=True)
    features = torch.cat([t.features for t in tensors])
    summed = features.new_zeros((len(unique_keys), features.shape[1]))
    summed = summed.index_add(0, rows, features)
    result = SparseConvTensor(summed, kernels.decode_keys(unique_keys, shape),
                              first.spatial_shape, first.batch_size)
    return result


# ----------------------------------------------------------------- modules

def get_conv_output_size(input_size: Sequence[int], kernel_size: Sequence[int],
                         stride: Sequence[int], padding: Sequence[int],
                         dilation: Sequence[int]) -> List[int]:
    return [(size + 2 * p - d * (k - 1) - 1) // s + 1 for size, k, s, p, d in
            zip(input_size, kernel_size, stride, padding, dilation)]


def get_deconv_output_size(input_size: Sequence[int], kernel_size: Sequence[int],
                           stride: Sequence[int], padding: Sequence[int],
                           dilation: Sequence[int], output_padding: Sequence[int]
                           ) -> List[int]:
    return [(size - 1) * s - 2 * p + k + op for size, k, s, p, op in
            zip(input_size, kernel_size, stride, padding, output_padding)]


class SparseModule(nn.Module):
    """Marks modules that take a SparseConvTensor inside a SparseSequential."""

    def __init__(self, name: Optional[str] = None) -> None:
        super().__init__()
        self.name = name
        self._sparse_unique_name = ""


class SparseBatchNorm(nn.BatchNorm1d):
    """BatchNorm1d over the features of a SparseConvTensor."""

    def forward(self, input: SparseConvTensor) -> SparseConvTensor:
        return input.replace_feature(super().forward(input.features))


class SparseReLU(nn.ReLU):
    """ReLU of the features of a SparseConvTensor."""

    def forward(self, input: SparseConvTensor) -> SparseConvTensor:
        return input.replace_feature(super().forward(input.features))


class SparseIdentity(nn.Identity):
    def forward(self, input: SparseConvTensor) -> SparseConvTensor:
        return input


def is_spconv_module(module: nn.Module) -> bool:
    return isinstance(module, (SparseModule, SparseBatchNorm, SparseReLU))


def is_sparse_conv(module: nn.Module) -> bool:
    return isinstance(module, SparseConvolution)


def assign_name_for_sparse_modules(module: nn.Module) -> None:
    for name, child in module.named_modules():
        if isinstance(child, SparseModule):
            child._sparse_unique_name = name


class SparseSequential(SparseModule):
    """nn.Sequential for sparse tensors: sparse modules get the SparseConvTensor,
    any other module its features (skipped when there are no sites)."""

    def __init__(self, *args: Any, **kwargs: nn.Module) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for index, module in enumerate(args):
                self.add_module(str(index), module)
        for key, module in kwargs.items():
            if key in self._modules:
                raise ValueError(f"name {key!r} exists")
            self.add_module(key, module)

    def __getitem__(self, index: int) -> nn.Module:
        modules = list(self._modules.values())
        if not -len(modules) <= index < len(modules):
            raise IndexError(f"index {index} is out of range")
        return modules[index]

    def __len__(self) -> int:
        return len(self._modules)

    def add(self, module: nn.Module, name: Optional[str] = None) -> None:
        if name is None:
            name = str(len(self._modules))
            if name in self._modules:
                raise KeyError("name exists")
        self.add_module(name, module)

    def forward(self, input: Any) -> Any:
        for module in self._modules.values():
            if is_spconv_module(module):
                input = module(input)
            elif isinstance(input, SparseConvTensor):
                if input.indices.shape[0] != 0:
                    input = input.replace_feature(module(input.features))
            else:
                input = module(input)
        return input


class ToDense(SparseModule):
    """SparseConvTensor -> dense (N, C, *spatial) tensor."""

    def forward(self, x: SparseConvTensor) -> torch.Tensor:
        return x.dense()


class RemoveGrid(SparseModule):
    def forward(self, x: SparseConvTensor) -> SparseConvTensor:
        x.grid = None
        return x


def _pair_lists(layer: Any, input: SparseConvTensor, out_spatial_shape: List[int]
                ) -> kernels.PairLists:
    """Pairs of a conv/pool layer on ``input`` (centred for submanifold)."""
    if layer.subm:
        stride = [1] * layer.ndim
        padding = [k // 2 * d for k, d in zip(layer.kernel_size, layer.dilation)]
    else:
        stride, padding = layer.stride, layer.padding
    return kernels.pair_lists(
        input.indices, input.batch_size, out_spatial_shape,
        layer.kernel_size, stride, padding, layer.dilation, layer.subm,
        getattr(layer, "transposed", False) and not layer.subm)


def _pairs_for(layer: Any, input: SparseConvTensor, out_spatial_shape: List[int]
               ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(output sites, (K, 2, N) int64 pairs, pair counts) of a layer on ``input``."""
    lists = _pair_lists(layer, input, out_spatial_shape)
    return (lists.out_indices, kernels.pairs_layout(lists, input.indices.shape[0],
                                                    torch.long),
            lists.counts.to(torch.int32))


def _check_reuse(layer: Any, input: SparseConvTensor, data: IndiceData) -> None:
    """spconv's checks before a layer runs the pairs of another one with its key."""
    what = "Inverse" if layer.inverse else "subm"
    if not layer.inverse and not data.is_subm:
        raise ValueError(f"indice key {layer.indice_key!r}: only submanifold pairs can "
                         "be reused by another layer (spconv)")
    if layer.inverse and data.is_subm:
        raise ValueError(f"indice key {layer.indice_key!r}: inverse conv can only be "
                         "used with standard conv and pool ops (spconv)")
    if layer.kernel_size != data.ksize:
        raise ValueError(f"{what} with same indice_key must have same kernel size, "
                         f"expect {data.ksize}, this layer {layer.kernel_size}")
    expected_shape = data.out_spatial_shape if layer.inverse else data.spatial_shape
    expected_rows = (data.out_indices if layer.inverse else data.indices).shape[0]
    if input.spatial_shape != expected_shape or input.indices.shape[0] != expected_rows:
        raise ValueError(f"{what} with same indice_key must have the same spatial "
                         f"structure: expect shape {expected_shape} with "
                         f"{expected_rows} sites, input {input.spatial_shape} with "
                         f"{input.indices.shape[0]}")


class SparseConvolution(SparseModule):
    """spconv 2's sparse convolution: regular, submanifold, transposed or inverse."""

    def __init__(self, ndim: int, in_channels: int, out_channels: int,
                 kernel_size: IntOrSequence = 3, stride: IntOrSequence = 1,
                 padding: IntOrSequence = 0, dilation: IntOrSequence = 1,
                 groups: int = 1, bias: bool = True, subm: bool = False,
                 output_padding: IntOrSequence = 0, transposed: bool = False,
                 inverse: bool = False, indice_key: Optional[str] = None,
                 algo: Optional[ConvAlgo] = None, fp32_accum: Optional[bool] = None,
                 record_voxel_count: bool = False, act_type: Any = None,
                 act_alpha: float = 0, act_beta: float = 0,
                 large_kernel_fast_algo: bool = False, name: Optional[str] = None,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__(name=name)
        if groups != 1:
            raise ValueError("spconv doesn't support groups")
        _refuse_activation(act_type)
        self.ndim = ndim
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = expand_nd(ndim, kernel_size)
        self.stride = expand_nd(ndim, stride)
        self.padding = expand_nd(ndim, padding)
        self.dilation = expand_nd(ndim, dilation)
        self.output_padding = expand_nd(ndim, output_padding)
        for s, d in zip(self.stride, self.dilation):
            if s != 1 and d != 1:
                raise ValueError("spconv: stride and dilation can't both exceed 1 "
                                 "on one axis")
        volume = math.prod(self.kernel_size)
        self.conv1x1 = volume == 1 and (subm or math.prod(self.stride) == 1)
        self.groups = groups
        self.subm = subm
        self.transposed = transposed
        self.inverse = inverse
        self.indice_key = indice_key
        self.algo = ConvAlgo.Native if algo is None else algo
        self.fp32_accum = fp32_accum
        self.record_voxel_count = record_voxel_count
        self.act_type, self.act_alpha, self.act_beta = act_type, act_alpha, act_beta
        factory = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.zeros(out_channels, *self.kernel_size,
                                               in_channels, **factory))
        if bias:
            self.bias = nn.Parameter(torch.zeros(out_channels, **factory))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def extra_repr(self) -> str:
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}"
                f", stride={self.stride}")
        if any(self.padding):
            text += f", padding={self.padding}"
        if any(d != 1 for d in self.dilation):
            text += f", dilation={self.dilation}"
        if self.bias is None:
            text += ", bias=False"
        return text

    def is_inverseable(self) -> bool:
        return self.indice_key is not None and not self.subm

    def reset_parameters(self) -> None:
        """Kaiming-uniform over the receptive field, as spconv (fan_in = in * kernel)."""
        fan_in = self.in_channels * math.prod(self.kernel_size)
        gain = nn.init.calculate_gain("leaky_relu", math.sqrt(5))
        bound = math.sqrt(3.0) * gain / math.sqrt(fan_in)
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
            if self.bias is not None:
                self.bias.uniform_(-1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in))

    def _out_spatial_shape(self, spatial_shape: List[int]) -> List[int]:
        if self.subm:
            return list(spatial_shape)
        if self.transposed:
            return get_deconv_output_size(spatial_shape, self.kernel_size, self.stride,
                                          self.padding, self.dilation,
                                          self.output_padding)
        return get_conv_output_size(spatial_shape, self.kernel_size, self.stride,
                                    self.padding, self.dilation)

    def forward(self, input: SparseConvTensor,
                add_input: Optional[SparseConvTensor] = None) -> SparseConvTensor:
        if input.features.shape[1] != self.in_channels:
            raise ValueError(f"channel size mismatch: {input.features.shape[1]} features "
                             f"into a conv with {self.in_channels} input channels")
        features = input.features.contiguous()
        out_spatial_shape = self._out_spatial_shape(input.spatial_shape)
        out_tensor = input.shadow_copy()
        if self.conv1x1:
            # spconv 2 (FILTER_HWIO off, its default) multiplies by its (out, 1.., in)
            # parameter *viewed* as (in, out), not transposed: the same state_dict must
            # give the same numbers, so a checkpoint trained with spconv loads here.
            output = features @ self.weight.reshape(self.in_channels, self.out_channels)
            if self.bias is not None:
                output = output + self.bias
            out_tensor = out_tensor.replace_feature(output)
            out_tensor.spatial_shape = out_spatial_shape
            return self._add(out_tensor, add_input)
        indice_dict = dict(input.indice_dict)
        data = self._indice_data(input, out_spatial_shape, indice_dict)
        out_ids, out_spatial_shape = (data.indices, data.spatial_shape) if self.inverse \
            else (data.out_indices, out_spatial_shape)
        output = _planned_conv(features, self.weight, data.plan_on(features.device),
                               self.inverse, self.bias)
        out_tensor = out_tensor.replace_feature(output)
        out_tensor.indices = out_ids
        out_tensor.indice_dict = indice_dict
        out_tensor.spatial_shape = list(out_spatial_shape)
        return self._add(out_tensor, add_input)

    def _indice_data(self, input: SparseConvTensor, out_spatial_shape: List[int],
                     indice_dict: Dict[Any, IndiceData]) -> IndiceData:
        """The pairs this layer runs: those under its key (checked as spconv checks
        them), or new ones, kept under its key in ``indice_dict``."""
        data = input.find_indice_pair(self.indice_key)
        if data is not None:
            _check_reuse(self, input, data)
            return data
        if self.inverse:
            raise ValueError(f"inverse conv: no indice pairs under key "
                             f"{self.indice_key!r}; give it the key of the conv or "
                             "pool whose sites it restores")
        if self.subm and any(size % 2 == 0 for size in self.kernel_size):
            # spconv's pair generation refuses it the same way, at the first forward:
            # a submanifold output site is its input site, so the kernel needs a centre.
            raise RuntimeError(
                f"subm only support odd ksize: {type(self).__name__} has kernel_size "
                f"{tuple(self.kernel_size)}; a submanifold convolution needs an odd size "
                f"on every axis (use 3, or a SparseConv for an even kernel)")
        lists = _pair_lists(self, input, out_spatial_shape)
        data = IndiceData(lists.out_indices, input.indices, None,
                          lists.counts.to(torch.int32), input.spatial_shape,
                          out_spatial_shape, self.subm, self.algo, self.kernel_size,
                          self.stride, self.dilation, self.padding, pair_lists=lists)
        if self.indice_key is not None:
            indice_dict[self.indice_key] = data
        return data

    @staticmethod
    def _add(out_tensor: SparseConvTensor, add_input: Optional[SparseConvTensor]
             ) -> SparseConvTensor:
        if add_input is None:
            return out_tensor
        return out_tensor.replace_feature(out_tensor.features + add_input.features)


class SparseMaxPool(SparseModule):
    """spconv 2's sparse max-pool (outputs start from 0); with an ``indice_key``
    its pairs can be run backwards by a SparseInverseConv."""

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
        self.algo = ConvAlgo.Native if algo is None else algo
        self.record_voxel_count = record_voxel_count

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}"

    def forward(self, input: SparseConvTensor) -> SparseConvTensor:
        return pooled(self, input, indice_maxpool)


def pooled(pool: Any, input: SparseConvTensor, reduce: Any) -> SparseConvTensor:
    """A sparse pool's output: the windows' pairs (kept under the pool's ``indice_key``
    for an inverse convolution), each output site's paired inputs combined by
    ``reduce(features, pairs, pair_num, outputs)`` (the max or the average pool's)."""
    out_spatial_shape = list(input.spatial_shape) if pool.subm else \
        get_conv_output_size(input.spatial_shape, pool.kernel_size, pool.stride,
                             pool.padding, pool.dilation)
    out_ids, pairs, pair_num = _pairs_for(pool, input, out_spatial_shape)
    output = reduce(input.features, pairs.to(input.features.device), pair_num,
                    out_ids.shape[0])
    out_tensor = input.shadow_copy().replace_feature(output)
    out_tensor.indice_dict = dict(input.indice_dict)
    if pool.indice_key is not None:
        out_tensor.indice_dict[pool.indice_key] = IndiceData(
            out_ids, input.indices, pairs, pair_num, input.spatial_shape,
            out_spatial_shape, pool.subm, pool.algo, pool.kernel_size, pool.stride,
            pool.dilation, pool.padding)
    out_tensor.indices = out_ids
    out_tensor.spatial_shape = out_spatial_shape
    return out_tensor


# ----------------------------------------------------------------- named layers

_CONV_KINDS = {
    "SparseConv": dict(),
    "SubMConv": dict(subm=True),
    "SparseConvTranspose": dict(transposed=True),
}


def _conv_class(kind: str, ndim: int) -> type:
    fixed = _CONV_KINDS[kind]

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, indice_key=None, algo=None,
                 fp32_accum=None, record_voxel_count=False, act_type=None, act_alpha=0,
                 act_beta=0, large_kernel_fast_algo=False, name=None, device=None,
                 dtype=None):
        SparseConvolution.__init__(
            self, ndim, in_channels, out_channels, kernel_size, stride, padding,
            dilation, groups, bias, indice_key=indice_key, algo=algo,
            fp32_accum=fp32_accum, record_voxel_count=record_voxel_count,
            act_type=act_type, act_alpha=act_alpha, act_beta=act_beta,
            large_kernel_fast_algo=large_kernel_fast_algo, name=name, device=device,
            dtype=dtype, **fixed)

    return type(f"{kind}{ndim}d", (SparseConvolution,),
                {"__init__": __init__, "__module__": __name__,
                 "__doc__": f"spconv's {kind}{ndim}d (see SparseConvolution)."})


def _inverse_class(ndim: int) -> type:
    def __init__(self, in_channels, out_channels, kernel_size, indice_key, bias=True,
                 algo=None, fp32_accum=None, large_kernel_fast_algo=False, name=None):
        SparseConvolution.__init__(
            self, ndim, in_channels, out_channels, kernel_size, bias=bias, inverse=True,
            indice_key=indice_key, algo=algo, fp32_accum=fp32_accum,
            large_kernel_fast_algo=large_kernel_fast_algo, name=name)

    return type(f"SparseInverseConv{ndim}d", (SparseConvolution,),
                {"__init__": __init__, "__module__": __name__,
                 "__doc__": f"spconv's SparseInverseConv{ndim}d: runs the pairs of the "
                            "conv or pool with the same indice_key backwards."})


def _pool_class(ndim: int) -> type:
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, indice_key=None,
                 algo=None, record_voxel_count=False, name=None):
        SparseMaxPool.__init__(self, ndim, kernel_size, stride, padding, dilation,
                               indice_key, False, algo, record_voxel_count, name)

    return type(f"SparseMaxPool{ndim}d", (SparseMaxPool,),
                {"__init__": __init__, "__module__": __name__,
                 "__doc__": f"spconv's SparseMaxPool{ndim}d (see SparseMaxPool)."})


_module = sys.modules[__name__]
for _ndim in (1, 2, 3, 4):
    for _kind in _CONV_KINDS:
        setattr(_module, f"{_kind}{_ndim}d", _conv_class(_kind, _ndim))
    setattr(_module, f"SparseInverseConv{_ndim}d", _inverse_class(_ndim))
    setattr(_module, f"SparseMaxPool{_ndim}d", _pool_class(_ndim))
del _module, _ndim, _kind

#: Names of each module of the stand-in (registry/cuda_extensions/__init__.py
#: declares them; a name that is a declared submodule is imported, not copied).
LAYERS = tuple(f"{kind}{ndim}d" for ndim in (1, 2, 3, 4)
               for kind in (*_CONV_KINDS, "SparseInverseConv", "SparseMaxPool"))

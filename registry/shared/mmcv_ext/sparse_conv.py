"""Sparse-convolution kernels of ``mmcv._ext`` (spconv 1.x as vendored by mmcv):
``get_indice_pairs_{2,3,4}d_forward`` / ``_{2,3}d_backward``,
``indice_conv_forward`` / ``_backward``, ``fused_indice_conv_forward`` and
``indice_maxpool_forward`` / ``_backward``.

Conventions, those of mmcv's CUDA kernels:

* ``indices`` is (N, 1 + ndim) int32: the batch index, then the site's
  coordinates in the axis order of ``spatial_shape``.
* ``indicePairs`` is (K, 2, N) int32 filled with -1, K the kernel volume with
  the kernel offset ``k`` counted row-major over the kernel axes;
  ``indicePairs[k, 0, :n_k]`` are input rows, ``indicePairs[k, 1, :n_k]`` the
  output rows they reach through offset ``k``, and ``indiceNum[k] = n_k``.
  Within one offset, pairs follow the input order.
* A pair (input i, output o, offset k) of a regular convolution means
  ``pos(i) = pos(o) * stride - padding + k * dilation`` (the cross-correlation
  of ``torch.nn.functional.conv3d``); of a transposed one,
  ``pos(o) = pos(i) * stride - padding + k * dilation`` (``conv_transpose3d``).
* A submanifold convolution keeps the input sites as outputs and, as mmcv
  does, uses stride 1 and padding ``kernel // 2`` whatever it was given.
* The output sites of a regular or transposed convolution are sorted by
  (batch, row-major position), which is the order mmcv's CUDA kernel gives.
* Max-pooling starts every output from 0, so an output whose inputs are all
  negative is 0, and its gradient goes to every input equal to the maximum:
  both as mmcv's kernel.

The pairs come from a lookup of linearised coordinates (one int64 key per
site), with no loop over points: the candidate output key of every (kernel
offset, input) is computed as one tensor, per axis and combined; a
direct-address table over the output grid (mmcv's ``gridOut``), or sorted keys
for grids above :data:`TABLE_SITES`, numbers the output sites of a regular or
transposed convolution and finds the neighbours of a submanifold one (on large
grids one binary search per kernel row, :mod:`.row_search`; a hash table,
:class:`KeyTable`, when the last axis is dilated). The convolution gathers and
multiplies offset by offset and sums into the outputs by bags of rows
(``embedding_bag``, :mod:`.pair_sums`).
"""
from __future__ import annotations

import math
from typing import List, NamedTuple, Optional, Sequence, Tuple

import torch

from .pair_sums import PairPlan, convolve, convolve_backward
from .row_search import row_neighbours

#: Largest grid (batch x output sites) looked up through a direct-address table
#: (int32, one entry per site: 64 MB at this size), as mmcv's CUDA kernel does with
#: its ``gridOut``; larger grids (SECOND's full 41x1600x1408 input) use sorted keys.
TABLE_SITES = 1 << 24

#: Up to this many (kernel offset x input site) candidates, every candidate's output
#: key is computed by broadcasting (int64: 64 MB here); above it, only the valid ones.
BROADCAST_KEYS = 1 << 23


def linear_keys(batch: torch.Tensor, coords: torch.Tensor,
                shape: torch.Tensor) -> torch.Tensor:
    """One int64 per site: row-major index of (batch, coords) in a grid of
    ``shape`` per batch entry."""
    key = batch.clone()
    for axis in range(coords.shape[1]):
        key = key * shape[axis] + coords[:, axis]
    return key


def decode_keys(keys: torch.Tensor, shape: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`linear_keys`: (M, 1 + ndim) int32 (batch, coords)."""
    columns = []
    rest = keys
    for axis in range(shape.numel() - 1, -1, -1):
        columns.append(rest % shape[axis])
        rest = torch.div(rest, shape[axis], rounding_mode="floor")
    columns.append(rest)
    return torch.stack(columns[::-1], dim=1).to(torch.int32)


def _axis_candidates(coord: torch.Tensor, size: int, stride: int, padding: int,
                     dilation: int, out_size: int, transpose: bool
                     ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Along one axis, for each kernel index (rows) and input site (columns): the
    output coordinate reached, and whether it lies on the output grid."""
    tap = torch.arange(size, device=coord.device)[:, None] * dilation
    if transpose:
        position = coord[None] * stride - padding + tap
        on_grid = torch.ones_like(position, dtype=torch.bool)
    else:
        numerator = coord[None] + padding - tap
        position = torch.div(numerator, stride, rounding_mode="floor")
        on_grid = position * stride == numerator
    return position, on_grid & (position >= 0) & (position < out_size)


def _candidates(batch: torch.Tensor, coords: torch.Tensor, kernel_size: Sequence[int],
                stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                out_shape: Sequence[int], transpose: bool
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every (kernel offset, input row) whose output site lies on the output grid, as
    (offset ids, input rows, output site keys), grouped by offset, input order within.

    A kernel offset is one index per axis, so validity is the AND of per-axis
    validities and the key a sum of per-axis terms: each axis is computed once for
    its few kernel indices, and only the valid combinations get a key.
    """
    count, ndim = coords.shape
    valid = torch.ones((1,) * ndim + (count,), dtype=torch.bool, device=coords.device)
    # int32 keys when the output grid fits: half the memory traffic, and a faster sort
    grid = math.prod(int(size) for size in out_shape) * (int(batch.max()) + 1 if count else 1)
    dtype = torch.int32 if grid < 1 << 31 else torch.long
    terms = []
    multiplier = 1
    for axis in range(ndim - 1, -1, -1):
        position, ok = _axis_candidates(
            coords[:, axis], int(kernel_size[axis]), int(stride[axis]),
            int(padding[axis]), int(dilation[axis]), int(out_shape[axis]), transpose)
        view = [1] * ndim + [count]
        view[axis] = int(kernel_size[axis])
        valid = valid & ok.view(view)
        terms.append((axis, (position * multiplier).to(dtype)))
        multiplier *= int(out_shape[axis])
    present = valid.reshape(-1, count)
    flat = present.view(-1).nonzero().squeeze(1)
    offset_id = _group_ids(_group_sizes(flat, present.shape[0], count), flat.numel())
    row = flat - offset_id * count
    if present.numel() <= BROADCAST_KEYS:
        # every candidate's key by broadcasting (no gather), then the valid ones
        key = (batch * multiplier).to(dtype).view([1] * ndim + [count])
        for axis, term in terms:
            view = [1] * ndim + [count]
            view[axis] = int(kernel_size[axis])
            key = key + term.view(view)
        return offset_id, row, key.view(-1).index_select(0, flat)
    key = batch[row] * multiplier
    rest = offset_id
    for axis, term in terms:           # last axis first: the fastest-varying index
        size = int(kernel_size[axis])
        key = key + term[rest % size, row]
        rest = torch.div(rest, size, rounding_mode="floor")
    return offset_id, row, key


class PairLists(NamedTuple):
    """The pairs of a sparse convolution as three lists, grouped by kernel offset
    (ascending), input order within an offset; ``counts[k]`` pairs of offset ``k``."""
    out_indices: torch.Tensor
    offset_id: torch.Tensor
    row: torch.Tensor
    out_row: torch.Tensor
    counts: torch.Tensor


def pair_lists(indices: torch.Tensor, batch_size: int, out_shape: Sequence[int],
               kernel_size: Sequence[int], stride: Sequence[int], padding: Sequence[int],
               dilation: Sequence[int], subm: bool, transpose: bool) -> PairLists:
    """The output sites and pairs of a sparse convolution (conventions in the module
    docstring). For ``subm`` the output sites are the input sites (``out_indices`` is
    ``indices`` itself, ``out_shape`` the input's) and a pair exists where the offset
    site is active; ``stride``/``padding`` are used as given (the mmcv entry points
    pass 1 and ``kernel // 2``). Duplicate input sites are not supported."""
    device = indices.device
    ndim = len(kernel_size)
    volume = math.prod(int(size) for size in kernel_size)
    if indices.shape[0] == 0:
        empty = indices if subm else torch.zeros(
            (0, ndim + 1), dtype=torch.int32, device=device)
        nothing = torch.zeros(0, dtype=torch.long, device=device)
        return PairLists(empty, nothing, nothing, nothing,
                         torch.zeros(volume, dtype=torch.long, device=device))
    if subm:
        offset_id, row, out_row = _submanifold_pairs(indices, batch_size, out_shape,
                                                     kernel_size, padding, dilation)
        out_indices = indices
    else:
        batch = indices[:, 0].long()
        coords = indices[:, 1:].long()
        offset_id, row, key = _candidates(batch, coords, kernel_size, stride, padding,
                                          dilation, out_shape, transpose)
        sites = int(batch_size) * math.prod(int(size) for size in out_shape)
        # A table costs its size, sorting costs the candidates: take the table when
        # it is not much larger than the candidates.
        direct = sites <= min(TABLE_SITES, max(1 << 20, 16 * key.numel()))
        unique_keys, out_row = _number_sites(key, sites, direct)
        out_grid = torch.tensor([int(v) for v in out_shape], dtype=torch.long,
                                device=device)
        out_indices = decode_keys(unique_keys, out_grid)
    return PairLists(out_indices, offset_id, row, out_row,
                     torch.bincount(offset_id, minlength=volume))


def pairs_layout(lists: PairLists, rows: int, dtype: torch.dtype = torch.int32
                 ) -> torch.Tensor:
    """mmcv's (K, 2, ``rows``) indice pairs, -1 where unused, from ``lists``."""
    volume = lists.counts.numel()
    device = lists.row.device
    pairs = torch.full((volume, 2, rows), -1, dtype=dtype, device=device)
    num = lists.counts
    first = torch.cumsum(num, 0) - num
    place = torch.arange(lists.offset_id.numel(), device=device) - \
        first.index_select(0, lists.offset_id)
    flat = pairs.view(-1)
    slot = lists.offset_id * (2 * rows) + place
    # index_copy_ / index_select, not tensor[index]: the CPU's advanced indexing is
    # several times slower on these sizes
    flat.index_copy_(0, slot, lists.row.to(dtype))
    flat.index_copy_(0, slot + rows, lists.out_row.to(dtype))
    return pairs


def build_indice_pairs(indices: torch.Tensor, batch_size: int,
                       out_shape: Sequence[int],
                       kernel_size: Sequence[int], stride: Sequence[int],
                       padding: Sequence[int], dilation: Sequence[int],
                       subm: bool, transpose: bool, pair_dtype: torch.dtype = torch.int32
                       ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(out_indices, indice_pairs, indice_num)`` of a sparse convolution in mmcv's
    layout (module docstring; arguments as :func:`pair_lists`)."""
    lists = pair_lists(indices, batch_size, out_shape, kernel_size, stride, padding,
                       dilation, subm, transpose)
    return (lists.out_indices, pairs_layout(lists, indices.shape[0], pair_dtype),
            lists.counts.to(torch.int32))


def _submanifold_pairs(indices: torch.Tensor, batch_size: int, shape: Sequence[int],
                       kernel_size: Sequence[int], padding: Sequence[int],
                       dilation: Sequence[int]
                       ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(offset ids, input rows, output rows) of a submanifold convolution, grouped by
    offset, input order within.

    The sites' keys are taken on the grid widened by the kernel's reach on each side,
    so that an offset is one constant added to a key: a neighbour off the grid lands
    in the margin, where no site is, and is not found, with no bounds test. When the
    kernel is centred (``2 * padding == (kernel - 1) * dilation``, spconv's and
    mmcv's odd kernels), offset ``K - 1 - k`` pairs the same sites as offset ``k``
    the other way round, and the centre pairs every site with itself: only the
    first half of the offsets is looked up.
    """
    count = indices.shape[0]
    ndim = len(kernel_size)
    low = [max(0, (int(k) - 1) * int(d) - int(p))
           for k, p, d in zip(kernel_size, padding, dilation)]
    widened = [int(size) + lo + int(p) for size, lo, p in zip(shape, low, padding)]
    keys = indices[:, 0].long()
    for axis in range(ndim):
        keys = keys * widened[axis] + (indices[:, axis + 1].long() + low[axis])
    # output = input + padding - tap * dilation on each axis (stride 1)
    shifts = [0]
    for axis in range(ndim):
        shifts = [shift * widened[axis] + int(padding[axis]) - tap * int(dilation[axis])
                  for shift in shifts for tap in range(int(kernel_size[axis]))]
    centred = all(2 * int(p) == (int(k) - 1) * int(d)
                  for k, p, d in zip(kernel_size, padding, dilation))
    looked_up = len(shifts) // 2 if centred else len(shifts)
    found = _neighbours(keys, shifts[:looked_up], int(batch_size) * math.prod(widened),
                        int(kernel_size[-1]), int(dilation[-1]))
    offset_id, row, out_row = _found_pairs(found, count, 0)
    if not centred:
        return offset_id, row, out_row
    return _with_mirrored_pairs(offset_id, row, out_row, looked_up, count)


def _with_mirrored_pairs(offset_id: torch.Tensor, row: torch.Tensor, out_row: torch.Tensor,
                         looked_up: int, count: int
                         ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The pairs of a centred kernel's first ``looked_up`` offsets, then its centre (every
    one of ``count`` sites with itself), then the other offsets: offset ``K - 1 - k``
    pairs the sites of offset ``k`` the other way round."""
    # offset k pairs (input row, output o); offset K-1-k pairs (o, row), laid out by
    # its input rows to keep the input order within an offset
    mirror_key = (looked_up - 1 - offset_id) * count + out_row
    if looked_up * count < 1 << 31:
        # int32 keys sort in about half the time of int64 ones (distinct keys: the
        # order is the same)
        mirror_key = mirror_key.to(torch.int32)
    place, order = torch.sort(mirror_key)
    # the mirrored offsets come in reverse order, each with as many pairs
    sizes = torch.bincount(offset_id, minlength=looked_up).flip(0)
    mirror_offset = _group_ids(sizes, place.numel())
    mirror_row = place - mirror_offset * count
    mirror_out = row.index_select(0, order)
    mirror_offset += looked_up + 1
    rows = torch.arange(count, device=row.device)
    return (torch.cat([offset_id, torch.full_like(rows, looked_up), mirror_offset]),
            torch.cat([row, rows, mirror_row]), torch.cat([out_row, rows, mirror_out]))


def _neighbours(keys: torch.Tensor, shifts: List[int], sites: int, width: int,
                dilation: int) -> torch.Tensor:
    """(len(shifts) * N,) int64: the row of the site with key ``keys[i] + shifts[k]`` at
    ``k * N + i``, -1 where there is none; ``shifts`` come in kernel rows of ``width``
    taps along the last axis, ``dilation`` apart, highest first."""
    queries = len(shifts) * keys.numel()
    if sites <= min(TABLE_SITES, max(1 << 20, 16 * queries)):
        return _lookup(keys, _queries(keys, shifts), sites, True)
    if dilation == 1:
        if sites < 1 << 31:
            keys = keys.int()       # half the memory traffic of the search and its taps
        rows, rest = divmod(len(shifts), width)
        # a centred kernel's half ends with its centre row's positive taps, which
        # follow each site's own key
        if shifts[rows * width:] == list(range(rest, 0, -1)):
            return row_neighbours(keys, shifts[:rows * width:width], width,
                                  rest).reshape(-1)
        return row_neighbours(keys, shifts[::width], width)[:len(shifts)].reshape(-1)
    return _lookup(keys, _queries(keys, shifts), sites, False)


def _queries(keys: torch.Tensor, shifts: List[int]) -> torch.Tensor:
    """Every key plus every shift, shift-major."""
    offsets = torch.tensor(shifts, dtype=torch.long, device=keys.device)
    return (keys[None, :] + offsets[:, None]).reshape(-1)


def _found_pairs(found: torch.Tensor, count: int, first_offset: int
                 ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(offset ids, input rows, output rows) of the entries >= 0 of ``found``, the
    output row of each (offset, input row) laid out offset by offset."""
    present = (found >= 0).view(-1, count)
    flat = present.view(-1).nonzero().squeeze(1)
    offset_id = _group_ids(_group_sizes(flat, present.shape[0], count), flat.numel())
    return (offset_id + first_offset, flat - offset_id * count,
            found.index_select(0, flat).long())


def _group_sizes(flat: torch.Tensor, groups: int, width: int) -> torch.Tensor:
    """How many of the increasing positions ``flat`` fall in each of ``groups``
    consecutive groups of ``width``: the row sums of the mask ``flat`` came from."""
    # one search per group in the positions, not a pass over the whole mask (a row sum
    # of a bool mask converts all of it to int64 first: about 10x the time here)
    ends = torch.searchsorted(flat, torch.arange(1, groups + 1, device=flat.device) * width)
    return torch.diff(ends, prepend=ends.new_zeros(1))


def _group_ids(sizes: torch.Tensor, total: int) -> torch.Tensor:
    """``i`` repeated ``sizes[i]`` times, ``total`` entries in all: the group of each
    entry of consecutive groups (an integer division by the group width costs several
    times more on the CPU)."""
    groups = torch.arange(sizes.numel(), device=sizes.device)
    return torch.repeat_interleave(groups, sizes, output_size=total)


def _lookup(table_keys: torch.Tensor, keys: torch.Tensor, sites: int,
            direct: bool) -> torch.Tensor:
    """Row of each of ``keys`` among ``table_keys`` (distinct, in [0, sites)), -1 when
    absent: a direct-address table over the grid, or a hash table of the keys."""
    if direct:
        table = torch.full((sites,), -1, dtype=torch.int32, device=keys.device)
        table.index_copy_(0, table_keys, torch.arange(table_keys.numel(), dtype=torch.int32,
                                                      device=keys.device))
        return table.index_select(0, keys).long()
    return KeyTable(table_keys).rows_of(keys)


class KeyTable:
    """An open-addressing hash table (linear probing) of distinct non-negative int64
    keys to their rows, built and probed with whole-tensor operations.

    Why: a direct-address table over SECOND's full grid (2 x 41 x 1600 x 1408 sites)
    takes gigabytes, and sorted keys + binary search cost a cache miss per step; this
    table has four slots per key (a few MB for a lidar sweep), so most probes end at
    the first slot. A slot holds key and row in one int64 (the key shifted above the
    row's bits), so a probe is one gather. Each round of insertion or lookup handles
    every key still unplaced or unresolved at once.
    """

    EMPTY = -1

    def __init__(self, keys: torch.Tensor) -> None:
        device = keys.device
        count = keys.numel()
        self.bits = max(10, (4 * max(1, count) - 1).bit_length())
        self.mask = (1 << self.bits) - 1
        self.row_bits = max(1, (count - 1).bit_length())
        self.row_mask = (1 << self.row_bits) - 1
        if count and int(keys.max()) >= 1 << (63 - self.row_bits):
            raise ValueError(f"KeyTable: keys up to {int(keys.max())} and {count} rows do "
                             "not fit one int64 per slot; use fewer sites per call")
        self.slots = torch.full((self.mask + 1,), self.EMPTY, dtype=torch.long,
                                device=device)
        entries = (keys << self.row_bits) | torch.arange(count, device=device)
        pending = torch.arange(count, device=device)
        home = self._home(keys)
        probe = 0
        while pending.numel():
            slot = (home.index_select(0, pending) + probe) & self.mask
            free = (self.slots.index_select(0, slot) == self.EMPTY).nonzero().squeeze(1)
            claimed = slot.index_select(0, free)
            claimant_entries = entries.index_select(0, pending.index_select(0, free))
            # several keys may claim one free slot: one write wins, the others probe on
            self.slots.index_copy_(0, claimed, claimant_entries)
            won = self.slots.index_select(0, claimed) == claimant_entries
            placed = torch.zeros(pending.numel(), dtype=torch.bool, device=device)
            placed.index_fill_(0, free.index_select(0, won.nonzero().squeeze(1)), True)
            pending = pending.index_select(0, (~placed).nonzero().squeeze(1))
            probe += 1

    def _home(self, keys: torch.Tensor) -> torch.Tensor:
        """Each key's first slot: its low bits times an odd constant, modulo the table
        size (a bijection of the low bits that sends neighbouring keys far apart; no
        int64 overflow since both factors are below 2^32)."""
        return ((keys & self.mask) * 0x9E3779B1) & self.mask

    def rows_of(self, keys: torch.Tensor) -> torch.Tensor:
        """The row of each key, -1 for a key not in the table."""
        slot = self._home(keys)
        entries = self.slots.index_select(0, slot)
        hit = (entries >> self.row_bits) == keys
        # a miss goes on probing while it meets other keys, and ends at an empty slot
        pending = ((entries != self.EMPTY) & ~hit).nonzero().squeeze(1)
        result = (entries & self.row_mask).masked_fill_(~hit, -1)
        probe = 1
        while pending.numel():
            slot_pending = (slot.index_select(0, pending) + probe) & self.mask
            entries = self.slots.index_select(0, slot_pending)
            hit = (entries >> self.row_bits) == keys.index_select(0, pending)
            found = hit.nonzero().squeeze(1)
            result.index_copy_(0, pending.index_select(0, found),
                               entries.index_select(0, found) & self.row_mask)
            pending = pending.index_select(0, ((entries != self.EMPTY) & ~hit)
                                           .nonzero().squeeze(1))
            probe += 1
        return result


def _number_sites(keys: torch.Tensor, sites: int, direct: bool
                  ) -> Tuple[torch.Tensor, torch.Tensor]:
    """The distinct ``keys`` in increasing order, and each key's rank among them."""
    if not direct:
        return torch.unique(keys, sorted=True, return_inverse=True)
    present = torch.zeros(sites, dtype=torch.bool, device=keys.device)
    present.index_fill_(0, keys.long(), True)      # (index_fill_ takes int64 only)
    rank = torch.cumsum(present, 0, dtype=torch.int32) - 1
    return present.nonzero().squeeze(1), rank.index_select(0, keys).long()


def _subm_geometry(kernel_size: Sequence[int]) -> Tuple[List[int], List[int]]:
    """mmcv's submanifold stride and padding: 1 and ``kernel // 2`` per axis."""
    return [1] * len(kernel_size), [int(size) // 2 for size in kernel_size]


def _indice_pairs(ndim: int, indices: torch.Tensor, batchSize: int,
                  outSpatialShape: Sequence[int], spatialShape: Sequence[int],
                  kernelSize: Sequence[int], stride: Sequence[int],
                  padding: Sequence[int], dilation: Sequence[int],
                  _subM: int, _transpose: int) -> List[torch.Tensor]:
    if indices.shape[1] != ndim + 1 or len(kernelSize) != ndim:
        raise ValueError(f"get_indice_pairs_{ndim}d: indices must be (N, {ndim + 1}) "
                         f"and the kernel {ndim}-D, got {tuple(indices.shape)} and "
                         f"{list(kernelSize)}")
    subm = bool(_subM)
    if subm:
        stride, padding = _subm_geometry(kernelSize)
        outSpatialShape = spatialShape
    out_indices, pairs, num = build_indice_pairs(
        indices, int(batchSize), outSpatialShape, kernelSize, stride, padding,
        dilation, subm, bool(_transpose) and not subm)
    return [out_indices, pairs, num]


def _forward_entry(ndim: int):
    def get_indice_pairs_forward(indices, batchSize, outSpatialShape, spatialShape,
                                 kernelSize, stride, padding, dilation, outPadding,
                                 _subM, _transpose):
        return _indice_pairs(ndim, indices, batchSize, outSpatialShape, spatialShape,
                             kernelSize, stride, padding, dilation, _subM, _transpose)
    name = f"get_indice_pairs_{ndim}d_forward"
    get_indice_pairs_forward.__name__ = get_indice_pairs_forward.__qualname__ = name
    get_indice_pairs_forward.__doc__ = (
        f"Ext ``{name}``: ``[out_indices, indice_pairs, indice_num]`` of a {ndim}-D "
        "sparse convolution (``outPadding`` only enters through ``outSpatialShape``, "
        "as in mmcv).")
    return get_indice_pairs_forward


def _backward_entry(ndim: int):
    forward = _forward_entry(ndim)

    def get_indice_pairs_backward(indices, gridOut, *arguments):
        return forward(indices, *arguments)
    name = f"get_indice_pairs_{ndim}d_backward"
    get_indice_pairs_backward.__name__ = get_indice_pairs_backward.__qualname__ = name
    get_indice_pairs_backward.__doc__ = (
        f"Ext ``{name}``: ``get_indice_pairs_{ndim}d_forward`` with a caller-owned "
        "scratch grid ``gridOut`` second (mmcv leaves it all -1; unused here, the "
        "result is the same).")
    return get_indice_pairs_backward


get_indice_pairs_2d_forward = _forward_entry(2)
get_indice_pairs_3d_forward = _forward_entry(3)
get_indice_pairs_4d_forward = _forward_entry(4)
get_indice_pairs_2d_backward = _backward_entry(2)
get_indice_pairs_3d_backward = _backward_entry(3)


def _identity_offset(pairs: torch.Tensor, counts: List[int], rows: int
                     ) -> Optional[int]:
    """The offset whose pairs map every input row to itself (the centre of a
    submanifold kernel), or None: it is a plain matrix product, no gather."""
    if not counts or rows == 0:
        return None
    best = max(range(len(counts)), key=counts.__getitem__)
    if counts[best] != rows or not torch.equal(pairs[best, 0, :rows],
                                               pairs[best, 1, :rows]):
        return None
    return best


def pair_plan(indicePairs: torch.Tensor, indiceNum: torch.Tensor, rows: Tuple[int, int],
              subm: bool) -> PairPlan:
    """mmcv's (K, 2, N) pairs laid out for the kernels of :mod:`.pair_sums`; ``rows`` is
    (input sites, output sites). A submanifold's centre offset becomes a plain product."""
    counts = [int(n) for n in indiceNum.tolist()]
    identity = None
    if subm and rows[0] == rows[1]:
        identity = _identity_offset(indicePairs, counts, rows[0])
    pieces = [indicePairs[k, :, :count] for k, count in enumerate(counts)
              if count and k != identity]
    flat = torch.cat(pieces, 1).long() if pieces else \
        torch.zeros((2, 0), dtype=torch.long, device=indicePairs.device)
    if identity is not None:
        counts[identity] = 0
    # an identity at the centre of an odd kernel: the kernel is centred, its pairs mirrored
    return PairPlan(flat, counts, rows, identity,
                    mirrored=identity is not None and identity == len(counts) // 2
                    and len(counts) % 2 == 1)


def plan_of_lists(lists: PairLists, rows: Tuple[int, int], subm: bool) -> PairPlan:
    """:func:`pair_lists`' pairs laid out for the kernels of :mod:`.pair_sums`."""
    counts = [int(n) for n in lists.counts.tolist()]
    flat = torch.stack([lists.row, lists.out_row])
    identity = None
    centre = len(counts) // 2
    # a centred submanifold kernel's middle offset pairs every site with itself
    if subm and rows[0] == rows[1] and counts[centre] == rows[0]:
        start = sum(counts[:centre])
        stop = start + rows[0]
        if torch.equal(lists.row[start:stop], lists.out_row[start:stop]):
            identity = centre
            flat = torch.cat([flat[:, :start], flat[:, stop:]], 1)
            counts[centre] = 0
    # an identity at the centre of an odd kernel: the kernel is centred, its pairs mirrored
    return PairPlan(flat, counts, rows, identity,
                    mirrored=identity is not None and len(counts) % 2 == 1)


def _kernel_weights(filters: torch.Tensor, channels_in: int) -> torch.Tensor:
    """mmcv's (*kernel, C_in, C_out) filters as (K, C_in, C_out)."""
    return filters.reshape(-1, channels_in, filters.shape[-1])


def indice_conv_forward(features: torch.Tensor, filters: torch.Tensor,
                        indicePairs: torch.Tensor, indiceNum: torch.Tensor,
                        numActOut: int, _inverse: int, _subM: int) -> torch.Tensor:
    """Ext ``indice_conv_forward``: (numActOut, C_out) sum over pairs of
    ``features[in] @ filters[k]``; ``filters`` is (*kernel, C_in, C_out).
    ``_inverse`` reads the pairs the other way round (output rows gather)."""
    rows = (int(numActOut), features.shape[0]) if _inverse else \
        (features.shape[0], int(numActOut))
    plan = pair_plan(indicePairs.to(features.device), indiceNum, rows, bool(_subM))
    return convolve(plan, features, _kernel_weights(filters, features.shape[1]),
                    bool(_inverse))[0]


def fused_indice_conv_forward(features: torch.Tensor, filters: torch.Tensor,
                              bias: torch.Tensor, indicePairs: torch.Tensor,
                              indiceNum: torch.Tensor, numActOut: int,
                              _inverse: int, _subM: int) -> torch.Tensor:
    """Ext ``fused_indice_conv_forward``: :func:`indice_conv_forward` plus
    ``bias`` (the convolution of a conv + batch-norm pair folded together)."""
    output = indice_conv_forward(features, filters, indicePairs, indiceNum,
                                 numActOut, _inverse, _subM)
    return output + bias


def indice_conv_backward(features: torch.Tensor, filters: torch.Tensor,
                         outGrad: torch.Tensor, indicePairs: torch.Tensor,
                         indiceNum: torch.Tensor, _inverse: int, _subM: int
                         ) -> List[torch.Tensor]:
    """Ext ``indice_conv_backward``: ``[input_grad, filters_grad]`` of
    :func:`indice_conv_forward` for the output gradient ``outGrad``."""
    rows = (outGrad.shape[0], features.shape[0]) if _inverse else \
        (features.shape[0], outGrad.shape[0])
    plan = pair_plan(indicePairs.to(features.device), indiceNum, rows, bool(_subM))
    input_grad, weights_grad = convolve_backward(
        plan, features, _kernel_weights(filters, features.shape[1]), outGrad,
        bool(_inverse))
    return [input_grad, weights_grad.reshape(filters.shape)]


def active_pairs(indicePairs: torch.Tensor, indiceNum: torch.Tensor
                 ) -> Tuple[torch.Tensor, torch.Tensor]:
    """All (input rows, output rows) of the pairs, every offset together."""
    width = indicePairs.shape[2]
    used = torch.arange(width, device=indicePairs.device)[None, :] < \
        indiceNum.to(indicePairs.device).long()[:, None]
    return indicePairs[:, 0][used].long(), indicePairs[:, 1][used].long()


def indice_maxpool_forward(features: torch.Tensor, indicePairs: torch.Tensor,
                           indiceNum: torch.Tensor, numAct: int) -> torch.Tensor:
    """Ext ``indice_maxpool_forward``: per output row, the channel-wise maximum
    of 0 and the features of the input rows paired with it."""
    rows_in, rows_out = active_pairs(indicePairs, indiceNum)
    output = features.new_zeros((int(numAct), features.shape[1]))
    output.scatter_reduce_(0, rows_out[:, None].expand(-1, features.shape[1]),
                           features.index_select(0, rows_in), "amax",
                           include_self=True)
    return output


def indice_maxpool_backward(features: torch.Tensor, outFeatures: torch.Tensor,
                            outGrad: torch.Tensor, indicePairs: torch.Tensor,
                            indiceNum: torch.Tensor) -> torch.Tensor:
    """Ext ``indice_maxpool_backward``: each output's gradient goes to every
    paired input whose feature equals the output (per channel)."""
    rows_in, rows_out = active_pairs(indicePairs, indiceNum)
    is_max = features.index_select(0, rows_in) == outFeatures.index_select(0, rows_out)
    input_grad = torch.zeros_like(features)
    input_grad.index_add_(0, rows_in, outGrad.index_select(0, rows_out) * is_max)
    return input_grad

"""The sums over indice pairs of a sparse convolution as bags of rows.

A sparse convolution is, per kernel offset ``k``, ``out[o] += in[i] @ W[k]`` for each
of its pairs ``(i, o)``. Gathering the inputs and multiplying them offset by offset is
plain indexing and GEMM; the sum into the outputs is where the CPU loses time: a
scatter-add (``index_add_``) writes rows in pair order, offset by offset, so every
output row is read and written once per offset that reaches it. Here the pairs of
several offsets are summed into the outputs at once, each output row written once from
its pairs in offset order: the pairs sorted by output row, cut into one bag per row,
summed by ``embedding_bag`` (the order and bounds built once per set of pairs and kept
with them). The same bags of the input side sum the input gradient of the backward.

Why ``embedding_bag``: on the CPU its kernel (a JIT-compiled gather-and-sum) sums
122k rows of 32 float32 channels into 67k rows in about 1 ms where a sparse CSR product
takes 6 ms and ``index_add_`` as long; with one row per bag it is also a faster gather
than ``index_select`` (1 ms against 2 ms for the same rows), so every gather of rows goes
through it too (:func:`gather_rows`).

:class:`PairPlan` holds the pairs flattened and, above :data:`CHUNK_PAIRS` pairs, cut
into chunks of about that many, each the pairs of a block of consecutive output rows
grouped by offset, so that a gathered chunk stays a few tens of MB whatever the layer
(memory stays that of a per-offset loop) and each output row is written once.

On more than one torch thread a forward with nothing kept for a backward gathers and
multiplies a chunk's offsets in a few padded groups instead (:mod:`.offset_batches`:
fewer, longer parallel regions); :func:`batches_pay` chooses.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch

from .offset_batches import OffsetBatches

#: Pairs gathered and multiplied per chunk (at least one whole offset): 2^17 rows of 64
#: float32 channels are 32 MB.
CHUNK_PAIRS = 1 << 17


class PairPlan:
    """The pairs of one convolution laid out for :func:`convolve` and
    :func:`convolve_backward`: built once, shared by every layer that runs the same
    pairs and by their backward."""

    def __init__(self, flat: torch.Tensor, counts: List[int], rows: Tuple[int, int],
                 identity: Optional[int], mirrored: bool = False) -> None:
        """``flat`` (2, P) int64 (input rows, output rows) of the pairs grouped by offset,
        ``counts[k]`` of them of offset ``k``, ``rows`` the (input, output) site counts;
        ``identity`` an offset, not in ``flat``, that pairs each row with itself (run as
        a plain product), or None; ``mirrored``: offset ``K - 1 - k`` has the pairs of
        offset ``k`` reversed (a centred submanifold kernel's)."""
        self.rows = rows
        self.identity = identity
        self.device = flat.device
        # the output rows each chunk sums into: [starts[c], starts[c + 1])
        self.output_starts = [0, rows[1]]
        blocks = [counts]
        if sum(counts) > CHUNK_PAIRS:
            flat, blocks, self.output_starts = _output_blocks(flat, counts, rows[1])
        self.flat = flat
        self.chunks: List[List[Tuple[int, int, int]]] = []   # (offset, start, stop)
        start = 0
        for block in blocks:
            self.chunks.append([])
            for offset, count in enumerate(block):
                if count:
                    self.chunks[-1].append((offset, start, start + count))
                    start += count
        if not self.chunks[-1]:
            self.chunks.pop()                   # no pairs at all
        self.largest = max((chunk[-1][2] - chunk[0][1] for chunk in self.chunks), default=0)
        self.mirrored = mirrored
        self._bags: Dict[Tuple[int, int], Tuple[torch.Tensor, torch.Tensor]] = {}
        self._singles = torch.zeros(0, dtype=torch.long, device=self.device)
        self._single_bounds: Dict[int, torch.Tensor] = {}
        self._pieces: Dict[Tuple[int, int], Tuple[torch.Tensor, ...]] = {}
        self._batches: Dict[int, OffsetBatches] = {}
        self._padded: Dict[Tuple[str, int, int], Tuple[torch.Tensor, ...]] = {}

    def first_row(self, side: int, chunk: int) -> int:
        """The first ``side`` row :meth:`sum_bags` of ``chunk`` sums into."""
        return self.output_starts[chunk] if side == 1 else 0

    def sum_bags(self, side: int, chunk: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """(pairs of ``chunk`` ordered by their ``side`` row (0 input, 1 output), bag
        bounds): row ``first_row + r`` sums the pairs ``order[bounds[r]:bounds[r + 1]]``,
        in offset order; on the output side, the chunk's rows only."""
        key = (side, chunk)
        bags = self._bags.get(key)
        if bags is None:
            first, last = self.chunks[chunk][0][1], self.chunks[chunk][-1][2]
            first_row = self.first_row(side, chunk)
            targets = self.flat[side, first:last] - first_row
            rows = self.output_starts[chunk + 1] - first_row if side == 1 else self.rows[0]
            bounds = torch.zeros(rows + 1, dtype=torch.long, device=self.device)
            torch.cumsum(torch.bincount(targets, minlength=rows), 0, out=bounds[1:])
            # stable: the pairs of one row keep their offset order (a fixed summation
            # order); int32 keys sort in half the time of int64 ones
            order = torch.argsort(targets.to(torch.int32), stable=True)
            bags = self._bags[key] = (order, bounds)
        return bags

    def singles(self, count: int) -> torch.Tensor:
        """Bag bounds 0, 1, ..., ``count``: one row per bag (a gather)."""
        # kept per count: the loops over offsets ask for the same few counts in every
        # layer that shares the plan, and a slice is a dispatched op
        bounds = self._single_bounds.get(count)
        if bounds is None:
            if self._singles.numel() <= count:
                self._singles = torch.arange(max(count, self.largest) + 1,
                                             device=self.device)
            bounds = self._single_bounds[count] = self._singles[:count + 1]
        return bounds

    def rows_of(self, side: int, chunk: int) -> torch.Tensor:
        """The ``side`` rows of the pairs of ``chunk``."""
        return self.flat[side, self.chunks[chunk][0][1]:self.chunks[chunk][-1][2]]

    def sizes(self, chunk: int) -> List[int]:
        """The pair count of each offset of ``chunk``, in order."""
        return [stop - start for _, start, stop in self.chunks[chunk]]

    def pieces(self, side: int, chunk: int) -> Tuple[torch.Tensor, ...]:
        """:meth:`rows_of` cut by offset, kept: the loops over offsets index nothing
        (a few microseconds per tensor slice, times offsets, chunks and layers)."""
        key = (side, chunk)
        pieces = self._pieces.get(key)
        if pieces is None:
            pieces = self._pieces[key] = self.rows_of(side, chunk).split(self.sizes(chunk))
        return pieces

    def batches(self, chunk: int) -> OffsetBatches:
        """The pairs of ``chunk`` laid out for batched products, kept."""
        batches = self._batches.get(chunk)
        if batches is None:
            batches = self._batches[chunk] = OffsetBatches(
                [offset for offset, _, _ in self.chunks[chunk]], self.sizes(chunk),
                self.device)
        return batches

    def padded_rows(self, side: int, chunk: int) -> torch.Tensor:
        """:meth:`rows_of` in the padded layout of :meth:`batches` (0 on padding), kept."""
        key = ("rows", side, chunk)
        if key not in self._padded:
            self._padded[key] = (self.batches(chunk).padded(self.rows_of(side, chunk)),)
        return self._padded[key][0]

    def padded_bags(self, side: int, chunk: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """:meth:`sum_bags` with the pairs' rows in the padded layout of :meth:`batches`."""
        key = ("bags", side, chunk)
        if key not in self._padded:
            order, bounds = self.sum_bags(side, chunk)
            self._padded[key] = (self.batches(chunk).position.index_select(0, order), bounds)
        order, bounds = self._padded[key]
        return order, bounds


def convolve(plan: PairPlan, features: torch.Tensor, weights: torch.Tensor,
             inverse: bool, keep_gathered: bool = False,
             scratch: Optional[torch.Tensor] = None
             ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(destination rows, C_out) sum over pairs of ``features[source] @ weights[k]``;
    ``weights`` is (K, C_in, C_out); ``inverse`` runs the pairs from output to input.
    Second: with ``keep_gathered``, the gathered input rows when the plan is one chunk
    (at most :data:`CHUNK_PAIRS` rows), for :func:`convolve_backward`; else None.
    ``scratch``: a contiguous tensor that is not needed any more, written over instead
    of allocating a buffer of products when it is large enough."""
    source, target = (1, 0) if inverse else (0, 1)
    output = features @ weights[plan.identity] if plan.identity is not None else None
    features = _detached(features)
    fresh = output is None
    if keep_gathered and len(plan.chunks) == 1:
        return _kept_convolve(plan, features, weights, source, output)
    # on one thread, offset by offset: the gathered rows are still in cache when the
    # product reads them; on more, a few batched products per chunk (offset_batches: why)
    batched = batches_pay()
    buffer = None if batched else _scratch(scratch, features, plan.largest, weights.shape[2])
    for index in range(len(plan.chunks)):
        if batched:
            products = _batched_products(plan, features, weights, source, index, scratch)
            bags: Optional[Tuple[torch.Tensor, torch.Tensor]] = \
                plan.padded_bags(target, index)
        else:
            products, bags = _offset_products(plan, features, weights, source, index,
                                              buffer), None
        output = _add_sums(output, plan, target, index, products, fresh, bags)
    if output is None:
        output = features.new_zeros((plan.rows[target], weights.shape[2]))
    return output, None


def batches_pay() -> bool:
    """Whether :func:`convolve` gathers and multiplies a chunk's offsets in padded
    groups (:mod:`.offset_batches`) rather than offset by offset: on more than one torch
    thread (on one, the loop is as fast or faster)."""
    return torch.get_num_threads() > 1


def _scratch(scratch: Optional[torch.Tensor], like: torch.Tensor, rows: int,
             columns: int) -> torch.Tensor:
    """A (rows, columns) buffer: the start of ``scratch`` when it is large enough, else
    a new one."""
    size = rows * columns
    buffer = scratch.view(-1)[:size] if scratch is not None and scratch.numel() >= size \
        else like.new_empty(size)
    return buffer.view(rows, columns)


def _offset_products(plan: PairPlan, features: torch.Tensor, weights: torch.Tensor,
                     source: int, chunk: int, buffer: torch.Tensor) -> torch.Tensor:
    """The product of every pair of ``chunk`` (chunk order, in ``buffer``), gathered and
    multiplied offset by offset."""
    sizes = plan.sizes(chunk)
    products = buffer[:sum(sizes)]
    matrices = weights.unbind(0)
    for (offset, _, _), piece, out in zip(plan.chunks[chunk], plan.pieces(source, chunk),
                                          products.split(sizes)):
        torch.mm(gather_rows(plan, features, piece), matrices[offset], out=out)
    return products


def _kept_convolve(plan: PairPlan, features: torch.Tensor, weights: torch.Tensor,
                   source: int, output: Optional[torch.Tensor]
                   ) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`convolve` of a one-chunk plan, with the gathered rows (chunk order) kept."""
    sizes = plan.sizes(0)
    gathered = gather_rows(plan, features, plan.rows_of(source, 0))
    products = features.new_empty((plan.largest, weights.shape[2]))
    matrices = weights.unbind(0)
    for (offset, _, _), rows_in, out in zip(plan.chunks[0], gathered.split(sizes),
                                            products.split(sizes)):
        torch.mm(rows_in, matrices[offset], out=out)
    return _add_sums(output, plan, 1 - source, 0, products, output is None), gathered


def _batched_products(plan: PairPlan, features: torch.Tensor, weights: torch.Tensor,
                      source: int, chunk: int, scratch: Optional[torch.Tensor]
                      ) -> torch.Tensor:
    """The product of every pair of ``chunk``, in the padded layout of
    :meth:`PairPlan.batches` (written into ``scratch`` when it is large enough)."""
    batches = plan.batches(chunk)
    rows = plan.padded_rows(source, chunk)
    products = _scratch(scratch, features, batches.rows, weights.shape[2])
    batches.multiply(lambda first, stop: gather_rows(plan, features, rows[first:stop]),
                     weights, products)
    return products


def _output_blocks(flat: torch.Tensor, counts: List[int], rows: int
                   ) -> Tuple[torch.Tensor, List[List[int]], List[int]]:
    """``flat`` regrouped by blocks of consecutive output rows with about
    :data:`CHUNK_PAIRS` pairs each (a row's pairs in one block), by offset within a
    block, input order within an offset; the pair count per (block, offset); and the
    first output row of each block, then ``rows``.

    Why: summed chunk by chunk, every chunk of whole offsets reaches most output rows,
    so each would add a full-size sum into the output; a chunk of output rows writes
    its rows once, and its gathered rows are neighbours of each other.
    """
    volume = len(counts)
    offset_id = torch.repeat_interleave(torch.arange(volume, device=flat.device),
                                        torch.tensor(counts, device=flat.device),
                                        output_size=flat.shape[1])
    per_row = torch.bincount(flat[1], minlength=rows)
    block_of_row = (torch.cumsum(per_row, 0) - per_row).div_(CHUNK_PAIRS,
                                                             rounding_mode="floor")
    _, block_of_row = torch.unique_consecutive(block_of_row, return_inverse=True)
    key = block_of_row.index_select(0, flat[1]) * volume + offset_id
    order = torch.argsort(key, stable=True)
    blocks = int(block_of_row[-1]) + 1
    per_block = torch.bincount(key, minlength=blocks * volume).view(blocks, volume)
    starts = torch.searchsorted(block_of_row, torch.arange(blocks, device=flat.device))
    # a block whose rows have no pairs (the last rows) joins the block before it
    kept = [block for block, total in enumerate(per_block.sum(1).tolist()) if total]
    first_rows = [0] + [int(starts[block]) for block in kept[1:]] + [rows]
    return flat.index_select(1, order), per_block[kept].tolist(), first_rows


def gather_rows(plan: PairPlan, table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``table[rows]`` (module docstring: why a bag of one row each)."""
    # torch.embedding_bag: the same kernel as torch.nn.functional's, without its checks
    return torch.embedding_bag(_detached(table), rows, plan.singles(rows.numel()), False,
                               0, False, None, True)[0]


def _detached(table: torch.Tensor) -> torch.Tensor:
    """``table`` without its autograd history, if it has any."""
    # for a table that requires grad, embedding_bag takes its slower variant that also
    # records what its own backward needs (not needed: ours is explicit); detached once
    # per convolution, not per gather
    return table.detach() if table.requires_grad else table


def _add_sums(total: Optional[torch.Tensor], plan: PairPlan, side: int, chunk: int,
              products: torch.Tensor, fresh: bool,
              bags: Optional[Tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
    """``total`` plus the products of ``chunk``'s pairs summed into their ``side`` rows,
    in place; the sums alone when ``total`` is None (no zero-filled tensor to read and
    write). ``fresh``: ``total`` started as None, the chunks' output rows are written,
    not added to (they do not overlap). ``bags``: :meth:`PairPlan.sum_bags` (the
    default) or :meth:`PairPlan.padded_bags` for products in the padded layout."""
    order, bounds = bags if bags is not None else plan.sum_bags(side, chunk)
    sums = torch.embedding_bag(products, order, bounds, False, 0, False, None, True)[0]
    if total is None and sums.shape[0] == plan.rows[side]:
        return sums
    if total is None:
        total = sums.new_empty((plan.rows[side], sums.shape[1]))
    rows = total.narrow(0, plan.first_row(side, chunk), sums.shape[0])
    if fresh and side == 1:
        rows.copy_(sums)
    else:
        rows.add_(sums)
    return total


def convolve_backward(plan: PairPlan, features: torch.Tensor, weights: torch.Tensor,
                      grad: torch.Tensor, inverse: bool,
                      gathered: Optional[torch.Tensor] = None
                      ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(input gradient, weight gradient (K, C_in, C_out)) of :func:`convolve` for the
    output gradient ``grad``; ``gathered``: the rows :func:`convolve` kept, if any (used
    up: overwritten)."""
    source, target = (1, 0) if inverse else (0, 1)
    weights_grad = torch.zeros_like(weights)
    input_grad = None
    if plan.identity is not None:
        torch.mm(features.t(), grad, out=weights_grad[plan.identity])
        if not plan.mirrored:
            input_grad = grad @ weights[plan.identity].t()
    # offset by offset, the gathered rows are multiplied while still in cache; the kept
    # rows of an offset are read once, by its weight gradient: its input gradient's
    # products overwrite them (no second buffer of every pair to allocate)
    products = None if plan.mirrored else gathered if gathered is not None else \
        features.new_empty((plan.largest, weights.shape[1]))
    features, grad = _detached(features), _detached(grad)
    fresh = input_grad is None
    transposed, grads = weights.transpose(1, 2).unbind(0), weights_grad.unbind(0)
    for index, chunk in enumerate(plan.chunks):
        sizes = plan.sizes(index)
        count = sum(sizes)
        sources = gathered.split(sizes) if gathered is not None else \
            plan.pieces(source, index)
        outs = products[:count].split(sizes) if products is not None else sources
        for (offset, _, _), targets, piece, out in zip(chunk, plan.pieces(target, index),
                                                       sources, outs):
            grad_in = gather_rows(plan, grad, targets)
            rows_in = piece if gathered is not None else gather_rows(plan, features, piece)
            # an offset's pairs may span several chunks: accumulated
            grads[offset].addmm_(rows_in.t(), grad_in)
            if products is not None:
                torch.mm(grad_in, transposed[offset], out=out)
        if products is not None:
            input_grad = _add_sums(input_grad, plan, source, index, products[:count],
                                   fresh)
    if plan.mirrored:
        # offset K-1-k pairs the sites of offset k the other way round: the input
        # gradient runs the same pairs forward with the mirrored offsets' weights
        # transposed, and sums into the side whose bags the forward built
        # (into the kept rows' buffer: C_in wide too, read for the last time above)
        input_grad = convolve(plan, grad, weights.transpose(1, 2).flip(0), inverse,
                              scratch=gathered)[0]
    elif input_grad is None:
        input_grad = torch.zeros_like(features)
    return input_grad, weights_grad

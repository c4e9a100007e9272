"""The sums over indice pairs of a sparse convolution as sparse-matrix products.

A sparse convolution is, per kernel offset ``k``, ``out[o] += in[i] @ W[k]`` for each
of its pairs ``(i, o)``. Gathering the inputs and multiplying them offset by offset is
plain indexing and GEMM; the sum into the outputs is where the CPU loses time: a
scatter-add (``index_add_``) writes rows in pair order, offset by offset, so every
output row is read and written once per offset that reaches it. Here the pairs of
several offsets are summed into the outputs at once by one product with a 0/1 matrix in
CSR form (one row per output site, one column per pair, built once per set of pairs
and kept with them): each output row is written once, from its pairs in offset order.
The same matrix of the input side sums the input gradient of the backward.

:class:`PairPlan` holds the pairs flattened and cut into chunks of at most
:data:`CHUNK_PAIRS` pairs (whole offsets), so that a gathered chunk stays a few tens of
MB whatever the layer: memory stays that of a per-offset loop.
"""
from __future__ import annotations

import warnings
from typing import Dict, List, Optional, Tuple

import torch

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
        self.flat = flat
        self.counts = counts
        self.rows = rows
        self.identity = identity
        self.device = flat.device
        self.chunks: List[List[Tuple[int, int, int]]] = []   # (offset, start, stop)
        start, chunk_start = 0, 0
        for offset, count in enumerate(counts):
            if count == 0:
                continue
            if self.chunks and start + count - chunk_start <= CHUNK_PAIRS:
                self.chunks[-1].append((offset, start, start + count))
            else:
                self.chunks.append([(offset, start, start + count)])
                chunk_start = start
            start += count
        self.largest = max((chunk[-1][2] - chunk[0][1] for chunk in self.chunks), default=0)
        self.widest = max(counts, default=0)
        self.mirrored = mirrored
        self._matrices: Dict[Tuple[int, int, torch.dtype], torch.Tensor] = {}

    def sum_matrix(self, side: int, chunk: int, dtype: torch.dtype) -> torch.Tensor:
        """(rows of ``side`` x pairs of ``chunk``) 0/1 CSR matrix: row r sums the pairs
        of the chunk whose ``side`` row (0 input, 1 output) is r, in offset order."""
        key = (side, chunk, dtype)
        matrix = self._matrices.get(key)
        if matrix is None:
            first, last = self.chunks[chunk][0][1], self.chunks[chunk][-1][2]
            targets = self.flat[side, first:last]
            rows = self.rows[side]
            crow = torch.zeros(rows + 1, dtype=torch.int32, device=self.device)
            torch.cumsum(torch.bincount(targets, minlength=rows), 0, out=crow[1:])
            # stable: the pairs of one row keep their offset order (a fixed summation
            # order); int32 keys sort in half the time of int64 ones
            columns = torch.argsort(targets.to(torch.int32), stable=True).to(torch.int32)
            with warnings.catch_warnings():
                # torch calls its sparse CSR support beta; the product used here is stable
                warnings.simplefilter("ignore", UserWarning)
                matrix = torch.sparse_csr_tensor(
                    crow, columns, torch.ones(last - first, dtype=dtype, device=self.device),
                    (rows, last - first), check_invariants=False)
            self._matrices[key] = matrix
        return matrix

    def rows_of(self, side: int, chunk: int) -> torch.Tensor:
        """The ``side`` rows of the pairs of ``chunk``."""
        return self.flat[side, self.chunks[chunk][0][1]:self.chunks[chunk][-1][2]]


def convolve(plan: PairPlan, features: torch.Tensor, weights: torch.Tensor,
             inverse: bool, keep_gathered: bool = False
             ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(destination rows, C_out) sum over pairs of ``features[source] @ weights[k]``;
    ``weights`` is (K, C_in, C_out); ``inverse`` runs the pairs from output to input.
    Second: with ``keep_gathered``, the gathered input rows when the plan is one chunk
    (at most :data:`CHUNK_PAIRS` rows), for :func:`convolve_backward`; else None."""
    source, target = (1, 0) if inverse else (0, 1)
    output = features @ weights[plan.identity] if plan.identity is not None else None
    keep = keep_gathered and len(plan.chunks) == 1
    # kept: one buffer for every pair; else one offset's rows, reused offset after offset
    gathered = features.new_empty((plan.largest if keep else plan.widest,
                                   weights.shape[1]))
    products = features.new_empty((plan.largest, weights.shape[2]))
    for index, chunk in enumerate(plan.chunks):
        first = chunk[0][1]
        rows = plan.rows_of(source, index)
        if keep:
            torch.index_select(features, 0, rows, out=gathered[:rows.numel()])
        for offset, start, stop in chunk:
            part = slice(start - first, stop - first)
            rows_in = gathered[part] if keep else gathered[:stop - start]
            if not keep:
                # gathered offset by offset, the rows are still in cache when the
                # product reads them
                torch.index_select(features, 0, rows[part], out=rows_in)
            torch.mm(rows_in, weights[offset], out=products[part])
        output = _add_sums(output, plan, target, index, products[:rows.numel()])
    if output is None:
        output = features.new_zeros((plan.rows[target], weights.shape[2]))
    return output, gathered if keep else None


#: dtypes whose sums over pairs go through torch's sparse CSR product (its CPU kernel
#: has no half-precision version).
CSR_DTYPES = (torch.float32, torch.float64)


def _add_sums(total: Optional[torch.Tensor], plan: PairPlan, side: int, chunk: int,
              products: torch.Tensor) -> torch.Tensor:
    """``total`` plus the products of ``chunk``'s pairs summed into their ``side`` rows,
    in place; the sums alone when ``total`` is None (no zero-filled tensor to read and
    write)."""
    if products.dtype in CSR_DTYPES:
        matrix = plan.sum_matrix(side, chunk, products.dtype)
        return matrix @ products if total is None else total.addmm_(matrix, products)
    if total is None:
        total = products.new_zeros((plan.rows[side], products.shape[1]))
    return total.index_add_(0, plan.rows_of(side, chunk), products)


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
    # offset by offset, the gathered rows are multiplied while still in cache
    features_rows = features.new_empty((plan.widest if gathered is None else 0,
                                        weights.shape[1]))
    grad_rows = grad.new_empty((plan.widest, weights.shape[2]))
    # the kept rows of an offset are read once, by its weight gradient: its input
    # gradient's products overwrite them (no second buffer of every pair to allocate)
    products = None if plan.mirrored else gathered if gathered is not None else \
        features.new_empty((plan.largest, weights.shape[1]))
    for index, chunk in enumerate(plan.chunks):
        first = chunk[0][1]
        sources, targets = plan.rows_of(source, index), plan.rows_of(target, index)
        for offset, start, stop in chunk:
            part = slice(start - first, stop - first)
            grad_in = grad_rows[:stop - start]
            torch.index_select(grad, 0, targets[part], out=grad_in)
            rows_in = features_rows[:stop - start] if gathered is None else gathered[part]
            if gathered is None:
                torch.index_select(features, 0, sources[part], out=rows_in)
            torch.mm(rows_in.t(), grad_in, out=weights_grad[offset])
            if products is not None:
                torch.mm(grad_in, weights[offset].t(), out=products[part])
        if products is not None:
            input_grad = _add_sums(input_grad, plan, source, index,
                                   products[:sources.numel()])
    if plan.mirrored:
        # offset K-1-k pairs the sites of offset k the other way round: the input
        # gradient runs the same pairs forward with the mirrored offsets' weights
        # transposed, and sums into the side whose matrix the forward built
        input_grad = convolve(plan, grad, weights.transpose(1, 2).flip(0), inverse)[0]
    elif input_grad is None:
        input_grad = torch.zeros_like(features)
    return input_grad, weights_grad

"""The products of a sparse convolution's kernel offsets as a few batched matrix products.

Per kernel offset ``k`` a convolution gathers the rows its pairs read and multiplies
them by ``W[k]``: one gather and one product per offset, 27 of each for a 3x3x3 kernel.
On two torch threads each is an OpenMP parallel region (MKL opens two per product at
these sizes) of a few tens of microseconds, too short to gain from the second thread:
SECOND's inverse convolution (122k pairs, 32 -> 16 channels) opened 84 regions per
forward and took as long on two threads as on one.

Here the offsets of one chunk are grouped by pair count (each at least ``1 - PADDING``
of its group's largest), each offset's rows padded to its group's largest count, so
that a group is one gather and one ``torch.bmm`` of (offsets, rows, C_in) by (offsets,
C_in, C_out). A padding row gathers row 0 and its product is never summed. A group holds
at most :data:`GROUP_ROWS` rows (unless one offset has more), so that its gathered rows
are still in the core's cache when its product reads them: one gather of a whole chunk
(122k rows) made the products read them from memory, 5.2 against 4.0 ms per forward on
one thread. The inverse convolution's forward on two threads: 28 regions instead of 84,
and its gathers, products and sum take 2.5 instead of 3.3 ms (wall, op-level profile).
On one thread the offset-by-offset loop is as fast or faster (``pair_sums.batches_pay``
chooses).
"""
from __future__ import annotations

from typing import Callable, List, Sequence, Tuple

import torch

#: At most this fraction of a group's rows are padding (its offsets' pair counts are
#: at least ``1 - PADDING`` of the largest).
PADDING = 1 / 8

#: A group holds at most this many rows (unless one offset has more): its gathered rows
#: stay in the core's cache until its product reads them.
GROUP_ROWS = 1 << 14


class OffsetBatches:
    """One chunk's pairs laid out for :meth:`multiply`: each group of offsets padded to
    its largest pair count, the groups one after the other."""

    def __init__(self, offsets: Sequence[int], sizes: Sequence[int],
                 device: torch.device) -> None:
        """``offsets[i]`` has ``sizes[i]`` pairs, the pairs of the chunk grouped by
        offset in this order."""
        #: (first padded row, offsets in the group, rows per offset) of each group
        self.groups: List[Tuple[int, int, int]] = []
        order: List[int] = []
        padded_start = [0] * len(sizes)
        total = 0
        for members in _groups(sizes):
            rows = sizes[members[0]]
            self.groups.append((total, len(members), rows))
            for slot, member in enumerate(members):
                padded_start[member] = total + slot * rows
            order += members
            total += len(members) * rows
        self.rows = total
        #: each pair's row in the padded layout, the pairs in chunk order
        self.position = torch.cat([
            torch.arange(start, start + size, device=device)
            for start, size in zip(padded_start, sizes)]) if sizes else \
            torch.zeros(0, dtype=torch.long, device=device)
        #: the offsets in padded order (the weights of :meth:`multiply`)
        self.weight_order = torch.tensor([offsets[member] for member in order],
                                         dtype=torch.long, device=device)
        self._group_sizes = [count for _, count, _ in self.groups]

    def padded(self, rows: torch.Tensor) -> torch.Tensor:
        """``rows`` (one per pair, chunk order) in the padded layout, 0 on padding."""
        padded = rows.new_zeros(self.rows)
        return padded.index_copy_(0, self.position, rows)

    def multiply(self, gather: Callable[[int, int], torch.Tensor], weights: torch.Tensor,
                 products: torch.Tensor) -> None:
        """Write the product of each padded row by its offset's matrix into ``products``
        (rows, C_out), contiguous: per group one call of ``gather(first, stop)``, the
        (stop - first, C_in) rows of padded rows ``first:stop``, and one batched product.
        ``weights`` is (K, C_in, C_out)."""
        matrices = weights.index_select(0, self.weight_order).split(self._group_sizes)
        for (first, count, rows), matrix in zip(self.groups, matrices):
            span = count * rows
            torch.bmm(gather(first, first + span).view(count, rows, -1), matrix,
                      out=products.narrow(0, first, span).view(count, rows, -1))


def _groups(sizes: Sequence[int]) -> List[List[int]]:
    """Indices of ``sizes`` in groups, largest sizes first, each member at least
    ``1 - PADDING`` of its group's first (largest)."""
    ranked = sorted(range(len(sizes)), key=lambda index: -sizes[index])
    groups: List[List[int]] = []
    for index in ranked:
        if groups and sizes[index] >= (1 - PADDING) * sizes[groups[-1][0]] and \
                (len(groups[-1]) + 1) * sizes[groups[-1][0]] <= GROUP_ROWS:
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups

"""Per-thread scratch tensors of the point kernels' smallest searches.

At PointNet++'s smallest layers (64 points, 16 centres) a nearest-neighbour search is
about a dozen torch calls on a few thousand elements, and a call that allocates its
result costs about 0.3 us more than one that writes into a tensor it is given (the
allocation, the Python object, their release): 23.5 -> 20.5 us measured for the whole
search. The intermediates of one size are therefore kept, one set per thread (two
threads never share one), a few sizes per thread.
"""
from __future__ import annotations

import threading
from typing import Dict, Tuple

import torch

#: Sizes whose scratch a thread keeps (the oldest dropped first): a model has a few
#: small layers, and the tensors of one are tens of kilobytes.
KEPT_SIZES = 8

_THREAD = threading.local()


class SmallSearchScratch:
    """The intermediates of one (Q, N, k) search of one (1, N, 3) CPU cloud: the
    (1, Q, N, 3) differences, the (1, Q, N) float32 distances, their float64 widening
    (``keys`` is its int64 view), the topk's (1, Q, k) values and columns, and the
    (N,) column indices. Used under the kernels' inference-mode guard, never returned."""

    __slots__ = ("differences", "distances", "widened", "keys", "top", "columns")

    def __init__(self, count: int, n: int, k: int) -> None:
        self.differences = torch.empty(1, count, n, 3)
        self.distances = torch.empty(1, count, n)
        self.widened = torch.empty(1, count, n, dtype=torch.float64)
        self.keys = self.widened.view(torch.int64)
        self.top = (torch.empty(1, count, k, dtype=torch.int64),
                    torch.empty(1, count, k, dtype=torch.int64))
        self.columns = torch.arange(n)


def small_search_scratch(count: int, n: int, k: int) -> SmallSearchScratch:
    """This thread's scratch for a search of ``count`` queries among ``n`` points, k
    nearest (made on first use)."""
    try:
        kept: Dict[Tuple[int, int, int], SmallSearchScratch] = _THREAD.small_searches
    except AttributeError:
        kept = _THREAD.small_searches = {}
    key = (count, n, k)
    scratch = kept.get(key)
    if scratch is None:
        if len(kept) >= KEPT_SIZES:
            del kept[next(iter(kept))]
        scratch = kept[key] = SmallSearchScratch(count, n, k)
    return scratch

"""Per-thread scratch tensors of the point kernels' small nearest-neighbour searches.

At PointNet++'s small layers (64 points, 16 centres; 256 points, 64 centres) a search
is about a dozen torch calls on a few thousand elements, and a call that allocates its
result costs more than one that writes into a tensor it is given (the allocation, the
Python object, their release): 23.5 -> 20.5 us measured for the smallest search, and
knn at 256 points, 64 centres 0.91x -> 0.79x cdist + topk. The intermediates of one
size are therefore kept, one set per thread (two threads never share one), a few
sizes per thread, for searches of at most SCRATCH_ELEMENTS (query, point) pairs.
"""
from __future__ import annotations

import threading
from typing import Dict, Tuple

import torch

from .neighbour_search import ONE_CALL_ELEMENTS, squares_shape

#: Sizes whose scratch a thread keeps (the oldest dropped first): a model has a few
#: small layers.
KEPT_SIZES = 8

#: Largest search (queries x points) given a scratch: the largest whose distances take
#: one call (its squared differences then have one shape); 400 KB of tensors at most,
#: so a thread keeps at most about 3 MB.
SCRATCH_ELEMENTS = ONE_CALL_ELEMENTS

_THREAD = threading.local()


class SearchScratch:
    """The intermediates of one (Q, N, k) search of one (1, N, 3) CPU cloud: the squared
    differences in the layout :func:`exact_squared_distances` writes them for the size,
    the (1, Q, N) float32 distances, their float64 widening (the keys' storage), the
    topk's (1, Q, k) values and columns, and the (N,) column indices. Used under the
    kernels' inference-mode guard, never returned."""

    __slots__ = ("squares", "distances", "widened", "top", "columns")

    def __init__(self, count: int, n: int, k: int) -> None:
        self.squares = torch.empty(squares_shape(count, n))
        self.distances = torch.empty(1, count, n)
        self.widened = torch.empty(1, count, n, dtype=torch.float64)
        self.top = (torch.empty(1, count, k, dtype=torch.int64),
                    torch.empty(1, count, k, dtype=torch.int64))
        self.columns = torch.arange(n)


def search_scratch(count: int, n: int, k: int) -> SearchScratch:
    """This thread's scratch for a search of ``count`` queries among ``n`` points, k
    nearest (made on first use)."""
    try:
        kept: Dict[Tuple[int, int, int], SearchScratch] = _THREAD.searches
    except AttributeError:
        kept = _THREAD.searches = {}
    key = (count, n, k)
    scratch = kept.get(key)
    if scratch is None:
        if len(kept) >= KEPT_SIZES:
            del kept[next(iter(kept))]
        scratch = kept[key] = SearchScratch(count, n, k)
    return scratch

"""The names ``spconv.pytorch`` and ``spconv.pytorch.pool`` export, gathered from the
stand-in's modules (convolutions and max pools in ``spconv``, average and global
pools in ``spconv_pools``, tables in ``spconv_tables``), as spconv's own
``spconv/pytorch/__init__.py`` gathers them."""

from __future__ import annotations

from .spconv import *  # noqa: F401,F403 (re-exported: the pack fills spconv.pytorch from here)
from .spconv import ConvAlgo as ConvAlgo
from .spconv import assign_name_for_sparse_modules as assign_name_for_sparse_modules
from .spconv_pools import SparseAvgPool as SparseAvgPool
from .spconv_pools import SparseAvgPool1d as SparseAvgPool1d
from .spconv_pools import SparseAvgPool2d as SparseAvgPool2d
from .spconv_pools import SparseAvgPool3d as SparseAvgPool3d
from .spconv_pools import SparseGlobalAvgPool as SparseGlobalAvgPool
from .spconv_pools import SparseGlobalMaxOrAvgPool as SparseGlobalMaxOrAvgPool
from .spconv_pools import SparseGlobalMaxPool as SparseGlobalMaxPool
from .spconv_tables import AddTable as AddTable
from .spconv_tables import ConcatTable as ConcatTable
from .spconv_tables import Identity as Identity
from .spconv_tables import JoinTable as JoinTable

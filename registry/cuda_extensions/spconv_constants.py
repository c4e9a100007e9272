"""spconv 2's ``spconv.constants`` as the stand-in sees them: the constants code
written for spconv (its own tests among it) reads to pick a weight layout.

The stand-in has one layout, spconv 2's default: weights are ``(out, *kernel, in)``
("KRSC") for every algorithm, never ``(*kernel, in, out)`` ("HWIO"). spconv's
environment switches (``SPCONV_SAVED_WEIGHT_LAYOUT`` ...) select CUDA code paths or
other layouts that the stand-in does not have, so they are constants here.
"""

from __future__ import annotations

PACKAGE_NAME = "spconv"

#: Kernel dimension count for code that does not care (spconv's value).
NDIM_DONT_CARE = 3
#: False: weights are never laid out (*kernel, in, out).
FILTER_HWIO = False
#: True: every algorithm keeps its weights (out, *kernel, in).
ALL_WEIGHT_IS_KRSC = True
#: "" means the layout the weights have, KRSC (spconv's default).
SAVED_WEIGHT_LAYOUT = ""
#: No TF32 on the CPU; no JIT-compiled kernels; no fx tracing mode.
SPCONV_ALLOW_TF32 = False
DISABLE_JIT = False
SPCONV_FX_TRACE_MODE = False

#: What ``spconv.constants`` provides (registry/cuda_extensions/__init__.py declares it).
CONSTANTS = ("PACKAGE_NAME", "NDIM_DONT_CARE", "FILTER_HWIO",
             "ALL_WEIGHT_IS_KRSC", "SAVED_WEIGHT_LAYOUT", "SPCONV_ALLOW_TF32",
             "DISABLE_JIT", "SPCONV_FX_TRACE_MODE")

"""Build-information functions of ``mmcv._ext``.

``mmcv.utils.collect_env`` (used by training scripts to log the environment)
calls these; they report truthfully that no compiled ops are present.
"""
from __future__ import annotations

_NO_COMPILED_OPS = "n/a (lazypatch pure-PyTorch ops, no compiled extension)"


def get_compiler_version() -> str:
    """Return a description in place of the C++ compiler version."""
    return _NO_COMPILED_OPS


def get_compiling_cuda_version() -> str:
    """Return a description in place of the CUDA toolkit version."""
    return _NO_COMPILED_OPS

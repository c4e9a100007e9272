"""Providing ``mmcv._ext`` when mmcv was installed without its compiled ops.

Every ``mmcv/ops/*.py`` asks ``mmcv._ext`` for its kernels at import time, so
with mmcv-lite ``import mmcv.ops`` fails with ``No module named 'mmcv._ext'``.
The pure-PyTorch stand-in built by :func:`.ext.build_ext_module` answers every
name mmcv asks for. A compiled ``_ext`` always wins: the stand-in is only
provided when none can be found.
"""

from __future__ import annotations

import sys
from importlib.machinery import ModuleSpec, PathFinder

import lazypatch

PROVIDED_ORIGIN = "lazypatch.registry.openmmlab.ext (pure PyTorch)"

def compiled_ext_origin() -> "str | None":
    """Where mmcv's compiled ``_ext`` is, or None; looks at files, imports nothing.

    ``PathFinder.find_spec`` with mmcv's ``__path__`` only lists mmcv's
    directory, unlike ``importlib.util.find_spec("mmcv._ext")``, which would
    import ``mmcv._ext`` 's parent chain and consult every meta-path finder.
    """
    mmcv = sys.modules["mmcv"]   # the parent of mmcv.ops is imported before it
    spec = PathFinder.find_spec("mmcv._ext", list(getattr(mmcv, "__path__", [])))
    if spec is None:
        return None
    return spec.origin or "mmcv._ext"


def provide_pure_pytorch_ext(patch: lazypatch.PatchContext) -> None:
    """Put the pure-PyTorch ``mmcv._ext`` in place unless a real one exists."""
    origin = compiled_ext_origin()
    if origin is not None:
        patch.skip(f"mmcv has a compiled mmcv._ext ({origin}); nothing to provide")
    existing = sys.modules.get("mmcv._ext")
    if existing is not None:
        patch.skip(f"mmcv._ext is already provided ({existing!r}); leaving it")
    from .ext import build_ext_module, implemented_names
    module = build_ext_module("mmcv._ext")
    if getattr(module, "__spec__", None) is None:
        # mmengine's mmcv_full_available() runs pkgutil.find_loader("mmcv._ext"),
        # which raises ValueError for a module in sys.modules without a spec. A
        # spec without a loader answers "no compiled mmcv" there, which is true.
        module.__spec__ = ModuleSpec("mmcv._ext", None, origin=PROVIDED_ORIGIN)
    patch.provide_module("mmcv._ext", module)
    patch.note(f"provided a pure-PyTorch mmcv._ext ({len(implemented_names())} kernels, "
               f"e.g. ms_deform_attn, nms, roi_align, deform_conv, hard_voxelize; the "
               f"others raise NotImplementedError naming the op)")

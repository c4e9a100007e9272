"""Providing ``mmcv._ext`` when mmcv was installed without its compiled ops.

Every ``mmcv/ops/*.py`` asks ``mmcv._ext`` for its kernels at import time, so
with mmcv-lite ``import mmcv.ops`` fails with ``No module named 'mmcv._ext'``.
The pure-PyTorch stand-in built by :func:`..shared.mmcv_ext.build_ext_module` answers every
name mmcv asks for. A compiled ``_ext`` always wins: the stand-in is only
provided when none can be found.

Two patches provide it, because ``mmcv._ext`` is not only imported by
``mmcv.ops``: code such as mmdetection3d's CenterFormer project and
BEVFormer-style projects call ``mmcv.utils.ext_loader.load_ext('_ext', [...])``
(or ``import mmcv._ext``) before ``mmcv.ops`` is imported.

* :data:`EARLY_PATCH` (after ``import mmcv``) provides it for those paths;
* ``openmmlab.mmcv_ext`` (before ``mmcv.ops``) checks again for a compiled
  ``_ext`` (one may have become findable since) and then takes the early
  module over, so that undoing ``openmmlab.mmcv_ext`` removes ``mmcv._ext``
  whichever path provided it first.
"""

from __future__ import annotations

import sys
from importlib.machinery import ModuleSpec, PathFinder

import lazypatch

PROVIDED_ORIGIN = "lazypatch.registry.shared.mmcv_ext (pure PyTorch)"

#: The patch that provides ``mmcv._ext`` as soon as ``mmcv`` is imported.
EARLY_PATCH = "openmmlab.mmcv_ext.before_mmcv_ops"

#: Marks a module provided by :data:`EARLY_PATCH` (the value is the patch name).
PROVIDED_BY = "__lazypatch_provided_by__"

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


def _pure_pytorch_ext():
    """A fresh pure-PyTorch ``mmcv._ext`` with a spec."""
    from ..shared.mmcv_ext import build_ext_module
    module = build_ext_module("mmcv._ext")
    if getattr(module, "__spec__", None) is None:
        # mmengine's mmcv_full_available() runs pkgutil.find_loader("mmcv._ext"),
        # which raises ValueError for a module in sys.modules without a spec. A
        # spec without a loader answers "no compiled mmcv" there, which is true.
        module.__spec__ = ModuleSpec("mmcv._ext", None, origin=PROVIDED_ORIGIN)
    return module


def _provided_note() -> str:
    from ..shared.mmcv_ext import implemented_names
    return (f"provided a pure-PyTorch mmcv._ext ({len(implemented_names())} kernels, "
            f"e.g. ms_deform_attn, nms, roi_align, deform_conv, hard_voxelize; the "
            f"others raise NotImplementedError naming the op)")


def provide_ext_before_mmcv_ops(patch: lazypatch.PatchContext) -> None:
    """Right after ``import mmcv``: provide the pure-PyTorch ``mmcv._ext`` unless a
    real one exists, for ``load_ext('_ext', ...)`` and ``import mmcv._ext``."""
    origin = compiled_ext_origin()
    if origin is not None:
        patch.skip(f"mmcv has a compiled mmcv._ext ({origin}); nothing to provide")
    existing = sys.modules.get("mmcv._ext")
    if existing is not None:
        patch.skip(f"mmcv._ext is already provided ({existing!r}); leaving it")
    module = _pure_pytorch_ext()
    setattr(module, PROVIDED_BY, EARLY_PATCH)
    patch.provide_module("mmcv._ext", module)
    patch.note(_provided_note() + " for load_ext('_ext', ...) and import mmcv._ext "
               "before mmcv.ops; openmmlab.mmcv_ext takes it over when mmcv.ops imports")


def provide_pure_pytorch_ext(patch: lazypatch.PatchContext) -> None:
    """Put the pure-PyTorch ``mmcv._ext`` in place unless a real one exists."""
    existing = sys.modules.get("mmcv._ext")
    early = existing is not None and getattr(existing, PROVIDED_BY, None) == EARLY_PATCH
    origin = compiled_ext_origin()
    if origin is not None:
        if early:
            # A compiled _ext became findable after import mmcv: it wins.
            lazypatch.unpatch(EARLY_PATCH)
        patch.skip(f"mmcv has a compiled mmcv._ext ({origin}); nothing to provide")
    if existing is not None and not early:
        patch.skip(f"mmcv._ext is already provided ({existing!r}); leaving it")
    if early:
        # Taken over (same module object, so code holding it keeps working):
        # undoing this patch must remove mmcv._ext, as it did before the early path.
        lazypatch.unpatch(EARLY_PATCH)
        module = existing
        delattr(module, PROVIDED_BY)
    else:
        module = _pure_pytorch_ext()
    patch.provide_module("mmcv._ext", module)
    patch.note(_provided_note())

"""Fixtures shared by the pack tests."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(scope="module")
def ops():
    """``mmcv.ops`` imported against the pure-PyTorch ``mmcv._ext``, as lazypatch
    provides it; what the import added is removed afterwards, and mmengine's layer
    registry is left as it was found.

    mmengine refuses to register a layer twice: the layers of an ``mmcv.ops`` that
    another test module imported and removed again are set aside first, so that
    this module's import can register its own.
    """
    import mmcv
    from mmengine.registry import MODELS
    try:
        from lazypatch.registry.openmmlab.ext import build_ext_module
    except ImportError:
        from registry.openmmlab.ext import build_ext_module
    before = set(sys.modules)
    saved_ext = sys.modules.get("mmcv._ext")
    had_ops_attribute = "ops" in vars(mmcv)
    registered = dict(MODELS._module_dict)
    if "mmcv.ops" not in sys.modules:
        for name, cls in registered.items():
            if getattr(cls, "__module__", "").startswith("mmcv.ops"):
                del MODELS._module_dict[name]
    sys.modules["mmcv._ext"] = build_ext_module()
    try:
        import mmcv.ops
        import mmcv.ops.multi_scale_deform_attn  # noqa: F401
        yield mmcv.ops
    finally:
        for name in set(sys.modules) - before:
            if name.startswith("mmcv.ops") or name == "mmcv._ext":
                del sys.modules[name]
        if saved_ext is not None:
            sys.modules["mmcv._ext"] = saved_ext
        else:
            sys.modules.pop("mmcv._ext", None)
        if not had_ops_attribute:
            vars(mmcv).pop("ops", None)
        MODELS._module_dict.clear()
        MODELS._module_dict.update(registered)

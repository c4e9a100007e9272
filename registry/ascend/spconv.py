"""mmcv's sparse convolution family from mx_driving.

mx_driving ships NPU versions of spconv's classes (``SubMConv3d``,
``SparseConv3d``, ``SparseInverseConv3d``, ``SparseConvTensor``,
``SparseModule``, ``SparseSequential``, ...). They only work together: mmcv's
``SparseSequential`` treats anything that is not *its* ``SparseModule`` as a
dense layer, so the whole family is swapped at once, for every name the
installed mx_driving provides.

The patch runs when ``mmcv.ops`` has finished importing, so every mmcv class
was built from mmcv's own bases (undo is exact), and then replaces:

* the class in its defining module (``mmcv.ops.sparse_conv`` ...), with
  ``rebind`` so that ``mmcv.ops.SubMConv3d`` and any ``from mmcv.ops import
  SubMConv3d`` copy follow;
* every registry entry that pointed to a replaced class (``MODELS`` in
  mmcv 2.x, ``CONV_LAYERS`` in 1.x: the registries the defining module uses),
  so ``MODELS.build(dict(type="SubMConv3d", ...))`` builds mx_driving's.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType
from typing import Any, Dict, List

import lazypatch

#: mmcv.ops submodule -> the class names it defines that mx_driving may replace.
SPARSE_FAMILY: Dict[str, tuple] = {
    "sparse_conv": ("SparseConvolution", "SparseConv2d", "SparseConv3d", "SparseConv4d",
                    "SparseConvTranspose2d", "SparseConvTranspose3d", "SparseInverseConv2d",
                    "SparseInverseConv3d", "SubMConv2d", "SubMConv3d", "SubMConv4d"),
    "sparse_modules": ("SparseModule", "SparseSequential"),
    "sparse_structure": ("SparseConvTensor",),
}


def mx_driving_sources() -> List[ModuleType]:
    """Where mx_driving keeps its sparse classes: ``mx_driving.spconv`` (DrivingSDK
    2.x), then the package itself (older releases export them at top level)."""
    sources = []
    if importlib.util.find_spec("mx_driving.spconv") is not None:
        sources.append(importlib.import_module("mx_driving.spconv"))
    sources.append(importlib.import_module("mx_driving"))
    return sources


def _replacement(sources: List[ModuleType], name: str) -> Any:
    for source in sources:
        found = getattr(source, name, None)
        if isinstance(found, type):
            return found
    return None


def _registries(module: ModuleType) -> List[Any]:
    """Registries the module registers its classes in (its globals with a ``module_dict``)."""
    found = []
    for value in list(vars(module).values()):
        table = getattr(value, "module_dict", None) if not isinstance(value, ModuleType) else None
        if isinstance(table, dict) and all(found_value is not value for found_value in found):
            found.append(value)
    return found


def patch_sparse_conv(mmcv_ops: ModuleType, patch: lazypatch.PatchContext) -> None:
    """Swap the sparse family in ``mmcv.ops`` for mx_driving's; skip if it has none."""
    sources = mx_driving_sources()
    replaced: Dict[type, type] = {}
    for submodule, names in SPARSE_FAMILY.items():
        module = sys.modules.get(f"{mmcv_ops.__name__}.{submodule}")
        if module is None:
            continue
        for name in names:
            original = module.__dict__.get(name)
            replacement = _replacement(sources, name)
            if isinstance(original, type) and replacement is not None and replacement is not original:
                patch.setattr(module, name, replacement, rebind=True)
                replaced[original] = replacement
    conv_names = [cls.__name__ for cls in replaced if cls.__name__ not in ("SparseModule",
                                                                           "SparseSequential",
                                                                           "SparseConvTensor")]
    if not conv_names:
        patch.skip(f"mx_driving ({', '.join(source.__name__ for source in sources)}) provides "
                   f"none of mmcv's sparse convolution classes")
    conv_module = sys.modules[f"{mmcv_ops.__name__}.sparse_conv"]
    entries = []
    for registry in _registries(conv_module):
        table = registry.module_dict
        for key, value in list(table.items()):
            if isinstance(value, type) and value in replaced:
                patch.setitem(table, key, replaced[value])
                entries.append(f"{getattr(registry, 'name', '?')}[{key!r}]")
    patch.note(f"from mx_driving: {', '.join(sorted(cls.__name__ for cls in replaced))}; "
               f"registry entries: {', '.join(entries) or 'none'}")

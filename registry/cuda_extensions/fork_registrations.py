"""The registry clashes of mmdetection3d 0.17 and its forks with newer mmcv 1.x and mmdet 2.x.

mmdetection3d 0.17 (and BEVDet's and MapTR's copies) carries its own sparse convolution
in ``mmdet3d/ops/spconv/conv.py``, which registers ``SparseConv2d``, ``SubMConv3d``, ...
into mmcv's ``CONV_LAYERS``. It was written for an mmcv-full whose ``mmcv.ops`` had no
sparse convolution; mmcv 1.x since 1.5 has one and registers the same names when
``mmcv.ops`` is imported (which ``mmdet3d/ops/__init__`` does first), so the fork's
import stops at ``KeyError: 'SparseConv2d is already registered in conv layer'``. With
lazypatch, mmcv's ops import on the pure-PyTorch ``mmcv._ext`` and the fork's
``sparse_conv_ext`` has a stand-in, so the clash is met on any machine.

The patch ``cuda_extensions.mmdet3d.ops.spconv.conv.registrations`` runs just before the
fork's module body: it reads which classes the module registers (its source, with
:mod:`ast`) and removes the entries of the same names that *another* module registered
(mmcv's), recorded and reported, so that the fork registers its own classes as it did on
its mmcv, and ``build_conv_layer(dict(type="SubMConv3d"))`` builds the class the fork's
code pairs with its own ``SparseConvTensor``. ``unpatch`` puts mmcv's entries back.

BEVDet's fork meets the same with its ``mmdet3d/models/backbones/swin.py``: written for
mmdet 2.14, it registers ``SwinTransformer`` into mmdet's ``BACKBONES``, which mmdet 2.16
and later fill with their own; the fork's configs name the fork's class.
"""
from __future__ import annotations

import lazypatch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List

PACK = "cuda_extensions"
TAG = "project_extensions"

#: Modules of mmdetection3d 0.x (and its forks) that register classes under names a later
#: release of their dependencies registers too: the sparse-convolution layers (mmcv 1.5+),
#: BEVDet's Swin Transformer backbone (mmdet 2.16+ has its own ``SwinTransformer``).
FORK_MODULES = ("mmdet3d.ops.spconv.conv", "mmdet3d.models.backbones.swin")


def registered_classes(source: str) -> "Dict[str, List[str]]":
    """Registry name -> the classes a module's source registers into it with a
    ``@<REGISTRY>.register_module()`` decorator (no ``name=``, no ``force=True``)."""
    import ast
    found: "Dict[str, List[str]]" = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for decorator in node.decorator_list:
            if not (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
                    and decorator.func.attr == "register_module"
                    and isinstance(decorator.func.value, ast.Name)):
                continue
            keywords = {keyword.arg: keyword.value for keyword in decorator.keywords}
            forced = keywords.get("force")
            if "name" in keywords or decorator.args or (
                    isinstance(forced, ast.Constant) and forced.value is True):
                continue
            found.setdefault(decorator.func.value.id, []).append(node.name)
    return found


def imported_from(source: str, name: str, package: str = "") -> "str | None":
    """The module a ``from <module> import <name>`` of ``source`` takes ``name`` from;
    a relative import (``from ..builder import BACKBONES``) is resolved against
    ``package``, the importing module's package (None without one)."""
    import ast
    from importlib.util import resolve_name
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom) or not (node.module or node.level):
            continue
        for alias in node.names:
            if (alias.asname or alias.name) != name:
                continue
            if not node.level:
                return node.module
            if not package:
                return None
            try:
                return resolve_name("." * node.level + (node.module or ""), package)
            except ImportError:   # beyond the top-level package
                return None
    return None


def _give_over(module: "Any", patch: "Any") -> None:
    from importlib import import_module
    origin = getattr(getattr(module, "__spec__", None), "origin", None)
    try:
        with open(origin or "", encoding="utf-8") as handle:
            source = handle.read()
    except OSError:
        patch.skip(f"the source of {module.__name__} cannot be read: nothing to compare")
    given_over = []
    for registry_name, classes in registered_classes(source).items():
        home = imported_from(source, registry_name, getattr(module, "__package__", None) or "")
        if home is None:
            continue
        registry = getattr(import_module(home), registry_name, None)
        entries = getattr(registry, "_module_dict", None)
        if not isinstance(entries, dict):
            continue
        for class_name in classes:
            existing = entries.get(class_name)
            owner = getattr(existing, "__module__", module.__name__)
            if existing is not None and owner != module.__name__:
                patch.delitem(entries, class_name)
                given_over.append(f"{registry_name}[{class_name!r}] (from {owner})")
    if not given_over:
        patch.skip(f"{module.__name__} registers no name another module registered first")
    patch.note(f"{module.__name__} registers its own classes under names another module "
               f"registered first; those entries are set aside so it can: "
               f"{', '.join(given_over)}")


def declare_fork_registrations() -> None:
    """Declare the patch for each of :data:`FORK_MODULES`, off until the pack is enabled."""
    for module_name in FORK_MODULES:
        lazypatch.before_import(module_name, name=f"{PACK}.{module_name}.registrations",
                                tags=(PACK, TAG), enabled=False)(_give_over)

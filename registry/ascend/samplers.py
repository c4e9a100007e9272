"""mmdet's ``PseudoSampler.sample`` without ``Tensor.unique``.

Upstream takes ``torch.nonzero(mask).squeeze(-1).unique()``; ``nonzero`` already
returns each index once, in increasing order, so ``unique`` (a sort, which
Ascend runs on the host with a device synchronisation) returns its input
unchanged.

Rather than installing a copy of one release's method (which fits that release
only), the patch reads the *installed* method's source, removes exactly that
``.unique()`` call wherever it follows ``nonzero(...).squeeze(-1)``, and compiles
the result in the method's own module. So it fits every mmdet whose source has
that idiom: mmdet 2.x (``mmdet.core.bbox.samplers``), 3.x
(``mmdet.models.task_modules.samplers``), and releases not written yet; where the
idiom is not there (a release that dropped ``unique``, or a method someone
replaced), there is nothing to remove and the patch is skipped, saying so.
"""

from __future__ import annotations

import ast
from types import FunctionType, ModuleType
from typing import Any, Optional

import lazypatch

from ..shared.rewrite import edited


class _DropUniqueAfterNonzero(ast.NodeTransformer):
    """``X.squeeze(-1).unique()`` with X a ``nonzero(...)`` call becomes ``X.squeeze(-1)``."""

    def __init__(self) -> None:
        self.removed = 0

    def visit_Call(self, node: ast.Call) -> Any:
        self.generic_visit(node)
        function = node.func
        if isinstance(function, ast.Attribute) and function.attr == "unique" \
                and not node.args and not node.keywords and _is_squeezed_nonzero(function.value):
            self.removed += 1
            return function.value
        return node


def _is_squeezed_nonzero(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "squeeze"):
        return False
    inner = node.func.value
    return isinstance(inner, ast.Call) and (
        (isinstance(inner.func, ast.Attribute) and inner.func.attr == "nonzero")
        or (isinstance(inner.func, ast.Name) and inner.func.id == "nonzero"))


def _drop_unique(definition: ast.FunctionDef) -> str:
    transformer = _DropUniqueAfterNonzero()
    transformer.visit(definition)
    if not transformer.removed:
        return ("its source has no .unique() after nonzero(...).squeeze(-1): nothing to "
                "remove (another release, or already changed)")
    return ""


def without_unique(function: Any) -> "tuple[Optional[FunctionType], str]":
    """(``function`` recompiled without ``.unique()`` after ``nonzero(...).squeeze(-1)``,
    "") or (None, why not)."""
    return edited(function, _drop_unique)


def patch_pseudo_sampler(pseudo_sampler: ModuleType, patch: lazypatch.PatchContext) -> None:
    """Replace ``PseudoSampler.sample`` by itself without ``unique``, or skip saying why."""
    owner = pseudo_sampler.PseudoSampler
    rebuilt, why_not = without_unique(owner.__dict__.get("sample", owner.sample))
    if rebuilt is None:
        patch.skip(f"PseudoSampler.sample left as it is: {why_not}")
    patch.setattr(owner, "sample", rebuilt)
    patch.note(f"PseudoSampler.sample of {pseudo_sampler.__name__}, recompiled from the "
               f"installed source without Tensor.unique after nonzero")

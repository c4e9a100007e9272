"""mmdet's sigmoid focal loss: the CPU branch computes what the CUDA branch computes.

mmdet's ``FocalLoss.forward`` (2.x and 3.x) takes mmcv's ``sigmoid_focal_loss``
kernel only ``if torch.cuda.is_available() and pred.is_cuda``; elsewhere it builds
one-hot targets with ``F.one_hot(target, num_classes=num_classes + 1)`` and cuts
the last column. mmcv's kernel treats any label outside ``[0, C)`` as "no
positive class" (it compares each class index with the label), and detectors
rely on it: DETR-style heads and Sparse4D give -1 to ignored and denoising
queries. ``F.one_hot`` refuses those ("Class values must be non-negative"), so
the same model trains on a GPU and stops on the CPU.

The installed ``forward`` is edited in its own source (:mod:`..shared.rewrite`):
in the ``else`` branch of the ``if`` that tests ``is_cuda``, the labels given to
``one_hot(labels, num_classes=N + 1)`` first go through
:func:`labels_outside_as_background`, which maps every label outside ``[0, N)``
to ``N``, the column that is then cut off: the rows mmcv's kernel treats as
background become all-zero targets, the others are unchanged. A ``forward``
without that branch is left alone, and the patch says so.
"""

from __future__ import annotations

import ast
import copy
from typing import List

import lazypatch

from ..shared.rewrite import HELPER_PREFIX, edited, helper_call, installed

HELPER = f"{HELPER_PREFIX}labels_outside_as_background"


def labels_outside_as_background(labels, num_classes):
    """``labels`` with every value outside ``[0, num_classes)`` replaced by
    ``num_classes`` (mmcv's sigmoid_focal_loss kernel: such a label has no positive class)."""
    outside = (labels < 0) | (labels >= num_classes)
    return labels.masked_fill(outside, num_classes)


def _tests_is_cuda(node: ast.If) -> bool:
    return any(isinstance(item, ast.Attribute) and item.attr == "is_cuda"
               for item in ast.walk(node.test))


def _one_hot_with_background(call: ast.AST) -> "ast.expr | None":
    """``N`` when ``call`` is ``<...>.one_hot(labels, num_classes=N + 1)`` (keyword or
    second argument), else None."""
    if not (isinstance(call, ast.Call) and call.args and
            isinstance(call.func, (ast.Attribute, ast.Name)) and
            getattr(call.func, "attr", getattr(call.func, "id", None)) == "one_hot"):
        return None
    width = next((keyword.value for keyword in call.keywords if keyword.arg == "num_classes"),
                 call.args[1] if len(call.args) > 1 else None)
    if (isinstance(width, ast.BinOp) and isinstance(width.op, ast.Add)
            and isinstance(width.right, ast.Constant) and width.right.value == 1):
        return width.left
    return None


def edit_cpu_branch(definition: ast.FunctionDef) -> str:
    """Route the labels of the CPU branch's ``one_hot`` through the helper; "" when
    done, else what the source lacks."""
    edited_calls: List[ast.Call] = []
    for branch in ast.walk(definition):
        if not (isinstance(branch, ast.If) and _tests_is_cuda(branch)):
            continue
        for statement in branch.orelse:
            for call in ast.walk(statement):
                classes = _one_hot_with_background(call)
                if classes is not None:
                    assert isinstance(call, ast.Call)
                    call.args[0] = helper_call(HELPER, call.args[0], copy.deepcopy(classes))
                    edited_calls.append(call)
    if not edited_calls:
        return ("it has no `one_hot(labels, num_classes=N + 1)` in the else branch of an "
                "`if ... is_cuda` (the CPU branch this patch aligns with mmcv's kernel)")
    return ""


def align_cpu_branch(focal_loss_module, patch: lazypatch.PatchContext) -> None:
    """Edit ``FocalLoss.forward`` of the imported mmdet focal-loss module (see above)."""
    owner = getattr(focal_loss_module, "FocalLoss", None)
    if owner is None:
        patch.skip(f"{focal_loss_module.__name__} defines no FocalLoss")
    function, why_not = installed(owner, "forward")
    if function is None:
        patch.skip(why_not)
    rebuilt, why_not = edited(function, edit_cpu_branch,
                              {HELPER: labels_outside_as_background})
    if rebuilt is None:
        patch.skip(f"{focal_loss_module.__name__}.FocalLoss.forward left alone: {why_not}")
    patch.setattr(owner, "forward", rebuilt)
    patch.note("FocalLoss.forward: on the CPU branch, labels outside [0, num_classes) "
               "(-1 for ignored/denoising queries) count as background, as mmcv's "
               "sigmoid_focal_loss kernel counts them on CUDA")

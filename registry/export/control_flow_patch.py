"""Applying one ``rewrite_control_flow`` declaration to its imported module."""

from __future__ import annotations

from typing import Any, List, Optional


def rewrite_in_module(module: Any, parts: List[str], target: str, dump: Optional[str],
                      patch: Any) -> None:
    """Replace ``module.<parts>`` with its rewritten copy through ``patch`` (exact undo)."""
    owner: Any = module
    for part in parts[:-1]:
        owner = getattr(owner, part, None)
        if owner is None:
            patch.skip(f"{target}: {module.__name__} has no {part!r} (this version of "
                       f"{module.__name__.split('.')[0]} does not define it)")
    attribute = parts[-1]
    namespace = owner.__dict__ if isinstance(owner, type) else vars(owner)
    if attribute not in namespace:
        where = parts[-2] if len(parts) > 1 else module.__name__
        patch.skip(f"{target}: {attribute!r} is not defined on {where} itself")
    current = namespace[attribute]
    function = getattr(current, "__func__", current)
    wrapped = getattr(function, "__wrapped__", None)
    cells = []
    if wrapped is not None:
        # A decorator's wrapper (transformers' GradientCheckpointingLayer wraps every
        # forward) calls the original through a closure cell: the rewritten copy goes
        # into that cell and the wrapper, with whatever it adds, stays in place.
        cells = [cell for cell in (function.__closure__ or ()) if _holds(cell, wrapped)]
        if not cells:
            patch.skip(f"{target} is wrapped by {getattr(function, '__module__', '?')} in a way "
                       f"this patch cannot see into (no closure cell holds the original)")
        function = wrapped
    if not hasattr(function, "__code__"):
        patch.skip(f"{target} is not a Python function ({type(function).__name__})")
    from .control_flow import rewrite_function, write_dump
    try:
        rewritten, original_source, rewritten_source, left_alone = rewrite_function(function)
    except (ValueError, OSError, SyntaxError) as error:
        patch.skip(f"{target}: {error}")
    if cells:
        for cell in cells:
            patch.setattr(cell, "cell_contents", rewritten)
    else:
        if current is not function:   # keep a staticmethod/classmethod wrapper's kind
            rewritten = type(current)(rewritten)
        patch.setattr(owner, attribute, rewritten)
    for item in left_alone:
        patch.note(f"left unrewritten: {item}")
    if dump is not None:
        paths = write_dump(dump, target, original_source, rewritten_source, left_alone)
        patch.note(f"rewritten source and diff written to {', '.join(paths)}")


def _holds(cell: Any, value: Any) -> bool:
    try:
        return cell.cell_contents is value
    except ValueError:   # an empty cell
        return False

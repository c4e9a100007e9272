"""BASELINE, not part of lazypatch: PyProf-style tracing markers, for comparison only.

Reproduces what NVIDIA PyProf's ``add_wrapper`` did (seed 000): replace a
function with a wrapper that, on *every* call, walks the Python stack
(``traceback.extract_stack``), formats a trace marker, a module marker and
an argument marker (shapes), and pushes them as NVTX ranges around the call.
``benchmarks/packs/training/bench_tracing.py`` measures lazypatch's ``training.tracing``
pack against it.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable, List, Tuple

import nvtx


def _trace_marker(stack: List[Any]) -> str:
    frames = [f"{frame.filename}:{frame.lineno}" for frame in stack[:-1]]
    return "\n".join(frames)


def _argument_marker(owner: Any, name: str, args: Tuple[Any, ...], kwargs: Any) -> str:
    shown = []
    for value in list(args) + list(kwargs.values()):
        shape = getattr(value, "shape", None)
        shown.append(str(list(shape)) if shape is not None else type(value).__name__)
    return f"{getattr(owner, '__name__', type(owner).__name__)}.{name}({', '.join(shown)})"


def add_wrapper(owner: Any, name: str) -> Callable[[], None]:
    """Wrap ``owner.name`` the PyProf way; return a function undoing it."""
    function = getattr(owner, name)
    has_repr = hasattr(owner, "extra_repr")

    def wrapper_func(*args: Any, **kwargs: Any) -> Any:
        stack = traceback.extract_stack()
        nvtx.push_range(_trace_marker(stack))
        if has_repr:
            nvtx.push_range(f"module {owner!r}.{name}")
        nvtx.push_range(_argument_marker(owner, name, args, kwargs))
        try:
            return function(*args, **kwargs)
        finally:
            nvtx.pop_range()
            if has_repr:
                nvtx.pop_range()
            nvtx.pop_range()

    setattr(owner, name, wrapper_func)

    def undo() -> None:
        setattr(owner, name, function)
    return undo

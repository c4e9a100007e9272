"""NumPy 1.x's utility functions that NumPy 2.0 expired, rebuilt on its public API.

``np.deprecate``, ``np.safe_eval``, ``np.geterrobj``, ``np.recfromcsv`` follow
NumPy 1.26 (``numpy/lib/utils.py``, ``numpy/lib/npyio.py``,
``numpy/core/_ufunc_config.py``). ``np.set_string_function`` cannot be: NumPy
2 no longer lets Python code replace ndarray's repr, so only resetting to the
default (``f=None``) works and anything else raises, naming the replacement.
"""

from __future__ import annotations

import ast
import functools
import textwrap
import warnings
from typing import Any, Callable, List, Optional

import numpy

# NumPy 1.x's error-mode codes and bit positions in geterrobj()[1]
# (numpy/core/include/numpy/ufuncobject.h: UFUNC_ERR_* and UFUNC_SHIFT_*).
ERROR_MODES = {"ignore": 0, "warn": 1, "raise": 2, "call": 3, "print": 4, "log": 5}
ERROR_SHIFTS = {"divide": 0, "over": 3, "under": 6, "invalid": 9}


def safe_eval(source: Any) -> Any:
    """``np.safe_eval``: a Python *literal* (numbers, strings, tuples, lists, dicts,
    sets, booleans, None), exactly ``ast.literal_eval`` -- which NumPy 1.x's was.

    Names, calls, attribute access and operators other than the literal-building
    ones raise ValueError (SyntaxError for what does not parse); nothing runs.
    """
    return ast.literal_eval(source)


def geterrobj() -> List[Any]:
    """``np.geterrobj``: ``[buffer size, error mask, error callback]`` as NumPy 1.x
    packed them, read from ``np.getbufsize()``, ``np.geterr()`` and ``np.geterrcall()``."""
    modes = numpy.geterr()
    mask = 0
    for category, shift in ERROR_SHIFTS.items():
        mask |= ERROR_MODES[modes[category]] << shift
    return [numpy.getbufsize(), mask, numpy.geterrcall()]


def set_string_function(f: Optional[Callable[[Any], str]], repr: bool = True) -> None:
    """``np.set_string_function``: only ``f=None`` (back to NumPy's default) can work.

    NumPy 2 calls its own ``arrayprint`` functions for ndarray's repr and str
    (looked up once, from C), with no hook to install another: raise, naming
    the ways that remain.
    """
    if f is None:
        return None      # NumPy's default printing is the only one NumPy 2 has
    which = "repr" if repr else "str"
    raise NotImplementedError(
        f"np.set_string_function(f) cannot be restored on NumPy {numpy.__version__}: "
        f"NumPy 2 removed the hook that replaced ndarray's {which}. Use "
        "np.set_printoptions(formatter={...}) (or np.printoptions(...) as a context "
        "manager) to change how elements print, or call your function explicitly "
        "instead of relying on repr()/str().")


def recfromcsv(fname: Any, **kwargs: Any) -> Any:
    """``np.recfromcsv``: ``np.genfromtxt`` with comma delimiter, a header row of
    lower-cased names and inferred dtypes, viewed as a record array (masked
    records when ``usemask=True``)."""
    kwargs.setdefault("case_sensitive", "lower")
    kwargs.setdefault("names", True)
    kwargs.setdefault("delimiter", ",")
    kwargs.setdefault("dtype", None)
    output = numpy.genfromtxt(fname, **kwargs)
    if kwargs.get("usemask", False):
        from numpy.ma.mrecords import MaskedRecords
        return output.view(MaskedRecords)
    return output.view(numpy.recarray)


def _indent_of(lines: List[str]) -> int:
    """The whitespace every non-blank line of ``lines`` starts with (0 if none)."""
    indents = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    return min(indents) if indents else 0


def _deprecated_doc(doc: Optional[str], notice: str) -> str:
    """``doc`` with ``notice`` first, indented like the docstring's body so that
    ``inspect.cleandoc`` still dedents it (as NumPy 1.x's ``_Deprecate`` did)."""
    if doc is None:
        return notice
    lines = doc.expandtabs().split("\n")
    indent = _indent_of(lines[1:])
    if lines[0].lstrip():
        doc = " " * indent + doc
    else:
        # Drop the leading blank lines, as cleandoc would.
        skip = len(lines[0]) + 1
        for line in lines[1:]:
            if len(line) > indent:
                break
            skip += len(line) + 1
        doc = doc[skip:]
    return "\n\n".join([textwrap.indent(notice, " " * indent), doc])


def _deprecator(old_name: Optional[str] = None, new_name: Optional[str] = None,
                message: Optional[str] = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The decorator ``np.deprecate(old_name=..., new_name=..., message=...)`` returned."""
    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        name = old_name if old_name is not None else function.__name__
        if new_name is None:
            notice = f"`{name}` is deprecated!"
        else:
            notice = f"`{name}` is deprecated, use `{new_name}` instead!"
        if message is not None:
            notice += "\n" + message

        @functools.wraps(function)
        def deprecated(*args: Any, **kwargs: Any) -> Any:
            warnings.warn(notice, DeprecationWarning, stacklevel=2)
            return function(*args, **kwargs)
        deprecated.__name__ = name
        deprecated.__doc__ = _deprecated_doc(function.__doc__, notice)
        return deprecated
    return decorate


def deprecate(*args: Any, **kwargs: Any) -> Any:
    """``np.deprecate``: ``deprecate(f, old_name, new_name, message)`` returns ``f``
    warning DeprecationWarning on each call (renamed, docstring prefixed);
    ``deprecate(old_name=..., ...)`` without ``f`` returns that decorator.

    Modern spelling: ``warnings.warn(..., DeprecationWarning)`` in the function,
    or the ``warnings.deprecated`` decorator (Python 3.13).
    """
    if args:
        return _deprecator(*args[1:], **kwargs)(args[0])
    return _deprecator(**kwargs)


"""The names NumPy 1.20-2.x removed, with their documented replacements.

Each table maps a removed name to ``(make, modern)``: ``make(numpy)`` returns
the object the old name stood for, ``modern`` is the spelling to use instead
(quoted in the DeprecationWarning). Sources: the NumPy 1.20 deprecation of
builtin-type aliases (removed in 1.24), the NumPy 1.25 deprecations, and the
NumPy 2.0 expired-attributes list (``numpy/_expired_attrs_2_0.py``).

Builtin aliases return the *builtin* (``np.float is float`` was true in every
NumPy that had it), so restored code behaves exactly as it did. Helpers that
NumPy 2.0 expired without a same-named replacement (``np.sctypes``,
``np.find_common_type``, ``np.deprecate``...) are rebuilt in
:mod:`.numerictypes` and :mod:`.utilities` following NumPy 1.26.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import sys
from typing import Any, Callable, Dict, Tuple

import numpy

from . import numerictypes, utilities

Maker = Callable[[Any], Any]
AliasTable = Dict[str, Tuple[Maker, str]]


def _attribute(name: str) -> Maker:
    """A maker returning ``numpy.<name>`` (AttributeError if this NumPy lacks it)."""
    return lambda numpy_module: getattr(numpy_module, name)


def _value(value: Any) -> Maker:
    return lambda numpy_module: value


class OnFirstUse:
    """A restored value read from a NumPy submodule when the alias is first used.

    Importing ``numpy.rec`` while the patch applies would bind ``rec`` on numpy
    (the import system sets a submodule on its parent), a change the patch did
    not make and could not undo; the hook resolves this on first access instead.
    """

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def resolve(self) -> Any:
        return getattr(importlib.import_module(self.module), self.name)


def _submodule_attribute(submodule: str, name: str) -> Maker:
    """A maker for ``numpy.<submodule>.<name>``, resolved on first use (NumPy 2 loads
    ``numpy.rec`` and others lazily); AttributeError now if this NumPy has no such
    submodule, so the alias is not restored."""
    def make(numpy_module: Any) -> Any:
        module = f"{numpy_module.__name__}.{submodule}"
        if module not in sys.modules and importlib.util.find_spec(module) is None:
            raise AttributeError(f"{module} does not exist in this NumPy")
        return OnFirstUse(module, name)
    return make


# --- types --------------------------------------------------------------------
# Removed in 1.24 (deprecated in 1.20): aliases of Python builtins.
TYPE_ALIASES: AliasTable = {
    name: (_value(getattr(builtins, builtin)), spelling)
    for name, builtin, spelling in (
        ("bool", "bool", "bool (or np.bool_)"),
        ("int", "int", "int (or np.int_)"),
        ("float", "float", "float (or np.float64)"),
        ("complex", "complex", "complex (or np.complex128)"),
        ("object", "object", "object (or np.object_)"),
        ("str", "str", "str (or np.str_)"),
        ("long", "int", "int (or np.int64)"),
        ("unicode", "str", "str (or np.str_)"),
    )
}
# Removed in 2.0 (some deprecated in 1.24/1.25): NumPy scalar type aliases.
TYPE_ALIASES.update({
    name: (_attribute(modern), f"np.{modern}")
    for name, modern in (
        ("float_", "float64"),
        ("complex_", "complex128"),
        ("cfloat", "complex128"),
        ("singlecomplex", "complex64"),
        ("longfloat", "longdouble"),
        ("longcomplex", "clongdouble"),
        ("clongfloat", "clongdouble"),
        ("string_", "bytes_"),
        ("unicode_", "str_"),
        ("bool8", "bool_"),
        ("int0", "intp"),
        ("uint0", "uintp"),
        ("object0", "object_"),
        ("str0", "str_"),
        ("bytes0", "bytes_"),
        ("void0", "void"),
        ("typeDict", "sctypeDict"),
    )
})
# Removed in 2.0: the lists of concrete scalar types per kind, as NumPy 1.26 built them.
TYPE_ALIASES["sctypes"] = (
    _value(numerictypes.SCTYPES),
    "the dtypes themselves, listed explicitly (e.g. [np.int8, np.int16, np.int32, np.int64])")

# --- constants ----------------------------------------------------------------
# Removed in 2.0.
CONSTANT_ALIASES: AliasTable = {
    "NaN": (_value(float("nan")), "np.nan"),
    "NAN": (_value(float("nan")), "np.nan"),
    "Inf": (_value(float("inf")), "np.inf"),
    "Infinity": (_value(float("inf")), "np.inf"),
    "infty": (_value(float("inf")), "np.inf"),
    "PINF": (_value(float("inf")), "np.inf"),
    "NINF": (_value(float("-inf")), "-np.inf"),
    "PZERO": (_value(0.0), "0.0"),
    "NZERO": (_value(-0.0), "-0.0"),
}


# --- functions ----------------------------------------------------------------
# Where the old function is not a plain rename, a small function reproduces
# its documented behaviour in terms of the modern one.

def in1d(ar1: Any, ar2: Any, assume_unique: bool = False, invert: bool = False,
         **kwargs: Any) -> Any:
    """``np.in1d``: like ``np.isin`` on the flattened first argument (a 1-D result)."""
    return numpy.isin(numpy.ravel(ar1), ar2, assume_unique=assume_unique, invert=invert,
                      **kwargs)


def msort(a: Any) -> Any:
    """``np.msort(a)`` is ``np.sort(a, axis=0)``."""
    return numpy.sort(a, axis=0)


def asfarray(a: Any, dtype: Any = numpy.float64) -> Any:
    """``np.asfarray``: an array of an inexact dtype (float64 unless ``dtype`` is one)."""
    if not numpy.issubdtype(dtype, numpy.inexact):
        dtype = numpy.float64
    return numpy.asarray(a, dtype=dtype)


def alen(a: Any) -> int:
    """``np.alen(a)``: the length of the first dimension (1 for a scalar)."""
    try:
        return len(a)
    except TypeError:
        return len(numpy.atleast_1d(a))


def asscalar(a: Any) -> Any:
    """``np.asscalar(a)`` is ``a.item()``."""
    return a.item()


def compare_chararrays(a1: Any, a2: Any, cmp: str, rstrip: bool) -> Any:
    """``np.compare_chararrays``: ``np.char.compare_chararrays`` (same arguments)."""
    # Resolved per call, not when numpy is imported: importing numpy.char costs
    # 15-30 ms (numpy.strings), which every program importing numpy would pay.
    return importlib.import_module(f"{numpy.__name__}.char").compare_chararrays(
        a1, a2, cmp, rstrip)


FUNCTION_ALIASES: AliasTable = {
    "in1d": (_value(in1d), "np.isin"),
    "trapz": (_attribute("trapezoid"), "np.trapezoid"),
    "product": (_attribute("prod"), "np.prod"),
    "cumproduct": (_attribute("cumprod"), "np.cumprod"),
    "sometrue": (_attribute("any"), "np.any"),
    "alltrue": (_attribute("all"), "np.all"),
    "row_stack": (_attribute("vstack"), "np.vstack"),
    "round_": (_attribute("round"), "np.round"),
    "msort": (_value(msort), "np.sort(a, axis=0)"),
    "asfarray": (_value(asfarray), "np.asarray(a, dtype=np.float64)"),
    "mat": (_attribute("asmatrix"), "np.asmatrix"),
    "alen": (_value(alen), "len(a)"),
    "asscalar": (_value(asscalar), "a.item()"),
    "issubclass_": (_value(builtins.issubclass), "issubclass"),
    # Expired in 2.0 (most deprecated in 1.25).
    "find_common_type": (_value(numerictypes.find_common_type),
                         "np.result_type (pass 0, 0.0 or 0j for scalar kinds) or np.promote_types"),
    "cast": (lambda numpy_module: numerictypes.build_cast(), "np.asarray(a, dtype=dtype)"),
    "maximum_sctype": (_value(numerictypes.maximum_sctype),
                       "the largest dtype of the kind, named explicitly (e.g. np.float64, "
                       "np.longdouble)"),
    "obj2sctype": (_value(numerictypes.obj2sctype), "np.dtype(obj).type"),
    "issctype": (_value(numerictypes.issctype), "issubclass(rep, np.generic)"),
    "byte_bounds": (_submodule_attribute("lib.array_utils", "byte_bounds"),
                    "np.lib.array_utils.byte_bounds"),
    "set_string_function": (_value(utilities.set_string_function),
                            "np.set_printoptions(formatter=...)"),
    "compare_chararrays": (_value(compare_chararrays), "np.char.compare_chararrays"),
    "format_parser": (_submodule_attribute("rec", "format_parser"), "np.rec.format_parser"),
    "recfromcsv": (_value(utilities.recfromcsv),
                   "np.genfromtxt(fname, delimiter=',', names=True, case_sensitive='lower', "
                   "dtype=None).view(np.recarray)"),
    "safe_eval": (_value(utilities.safe_eval), "ast.literal_eval"),
    "deprecate": (_value(utilities.deprecate),
                  "warnings.warn(message, DeprecationWarning) in the function "
                  "(or the warnings.deprecated decorator)"),
    "geterrobj": (_value(utilities.geterrobj),
                  "np.geterr(), np.getbufsize() and np.geterrcall() (or np.errstate)"),
}

"""NumPy 1.x's scalar-type helpers, rebuilt on NumPy 2's public API.

``np.sctypes``, ``np.cast``, ``np.find_common_type``, ``np.maximum_sctype``,
``np.obj2sctype`` and ``np.issctype`` expired in NumPy 2.0. Each function here
follows NumPy 1.26's ``numpy/core/numerictypes.py`` step by step (same
coercion ladder, same fallbacks, same ``None``/default results for input it
could not interpret), so legacy code gets the answers it got before.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy

# NumPy 1.26's ``_kind_list``: the order of kinds find_common_type compares.
KIND_ORDER = ("b", "u", "i", "f", "c", "S", "U", "V", "O", "M", "m")
# NumPy 1.26's ``__test_types``: '?' + typecodes['AllInteger'] without 'pP'
# + typecodes['AllFloat'] + 'O' -- the ladder find_common_type climbs. Spelled
# out because NumPy 2 changed typecodes['AllInteger'] (it added 'nN').
COERCION_LADDER = "?bBhHiIlLqQefdgFDGO"
# NumPy 1.26's ``_kind_to_stem`` restricted to the kinds np.sctypes has lists for.
SCTYPES_KIND = {"i": "int", "u": "uint", "f": "float", "c": "complex"}


def _scalar_type(name: str) -> Optional[type]:
    """``numpy.<name>`` when this NumPy defines it (never through its ``__getattr__``)."""
    return numpy.__dict__.get(name)


def build_sctypes() -> Dict[str, List[type]]:
    """``np.sctypes``: the concrete scalar types of each kind, smallest first.

    Built as NumPy 1.26 built it: every ``intN``/``uintN`` for N in 8..512,
    ``floatN``/``complex2N`` for the byte sizes 2..64 the platform has (so
    float128 on x86-64 Linux), the pointer-sized integer inserted by size if
    it was not already there, and the builtin bool/object/bytes/str with
    ``np.void`` as "others".
    """
    sctypes: Dict[str, List[type]] = {"int": [], "uint": [], "float": [], "complex": [],
                                       "others": [bool, object, bytes, str, numpy.void]}

    def add(stem: str, bits: int) -> None:
        scalar = _scalar_type(f"{stem}{bits}")
        if scalar is not None:
            sctypes[stem].append(scalar)

    for size in (1, 2, 4, 8, 16, 32, 64):
        add("int", 8 * size)
        add("uint", 8 * size)
    for size in (2, 4, 8, 10, 12, 16, 32, 64):
        add("float", 8 * size)
        add("complex", 16 * size)
    pointer_sized = numpy.dtype("p").type
    if pointer_sized not in sctypes["int"]:
        integers = sctypes["int"]
        index = 0
        while index < len(integers) and pointer_sized(0).itemsize >= integers[index](0).itemsize:
            index += 1
        integers.insert(index, pointer_sized)
        sctypes["uint"].insert(index, numpy.dtype("P").type)
    return sctypes


def obj2sctype(rep: Any, default: Any = None) -> Any:
    """``np.obj2sctype``: the scalar type ``rep`` stands for, else ``default``.

    Modern spelling: ``np.dtype(rep).type`` (which raises instead of
    returning ``default``).
    """
    # NumPy scalar classes answer for themselves, so abstract ones (np.floating)
    # are not turned into a concrete type by np.dtype.
    if isinstance(rep, type) and issubclass(rep, numpy.generic):
        return rep
    if isinstance(rep, numpy.ndarray):
        return rep.dtype.type
    try:
        return numpy.dtype(rep).type
    except Exception:
        return default


def issctype(rep: Any) -> bool:
    """``np.issctype``: whether ``rep`` (a type or dtype) is a scalar type other than object."""
    if not isinstance(rep, (type, numpy.dtype)):
        return False
    try:
        scalar = obj2sctype(rep)
        return bool(scalar) and scalar is not numpy.object_
    except Exception:
        return False


def maximum_sctype(t: Any) -> Any:
    """``np.maximum_sctype``: the most precise scalar type of ``t``'s kind (``t`` itself
    when its kind has no size ladder, ``t`` unchanged when it is not a type at all)."""
    scalar = obj2sctype(t)
    if scalar is None:
        return t
    stem = SCTYPES_KIND.get(numpy.dtype(scalar).kind)
    if stem is None:
        return scalar
    return SCTYPES[stem][-1]


def _safe_target(dtypes: Sequence[numpy.dtype], start: int = 0) -> Optional[numpy.dtype]:
    """The first dtype on the ladder from ``start`` that every one of ``dtypes`` casts to
    safely (NumPy 1.26's ``_can_coerce_all``); None when there is none."""
    if not dtypes:
        return None
    if len(dtypes) == 1:
        return dtypes[0]
    for code in COERCION_LADDER[start:]:
        candidate = numpy.dtype(code)
        # dtype >= other: "other can be cast to dtype safely".
        if all(candidate >= each for each in dtypes):
            return candidate
    return None


def _common_with_scalar(scalar: numpy.dtype, array: numpy.dtype) -> Optional[numpy.dtype]:
    """NumPy 1.26's ``_find_common_coerce``: climb the ladder from the scalar's rung."""
    if scalar > array:
        return scalar
    try:
        rung = COERCION_LADDER.index(scalar.char)
    except ValueError:
        return None
    return _safe_target([scalar, array], start=rung)


def find_common_type(array_types: Sequence[Any], scalar_types: Sequence[Any]) -> Any:
    """``np.find_common_type``: the largest of ``array_types``, unless the largest
    of ``scalar_types`` is of a higher kind; None when a kind is not understood.

    Modern spelling: ``np.result_type`` (pass the Python values ``0``, ``0.0``
    or ``0j`` for scalar kinds) or ``np.promote_types``.
    """
    arrays = [numpy.dtype(each) for each in array_types]
    scalars = [numpy.dtype(each) for each in scalar_types]
    largest_array = _safe_target(arrays)
    largest_scalar = _safe_target(scalars)
    if largest_array is None:
        return largest_scalar
    if largest_scalar is None:
        return largest_array
    try:
        array_kind = KIND_ORDER.index(largest_array.kind)
        scalar_kind = KIND_ORDER.index(largest_scalar.kind)
    except ValueError:
        return None
    if scalar_kind > array_kind:
        return _common_with_scalar(largest_scalar, largest_array)
    return largest_array


class CastTable(dict):
    """``np.cast``: ``np.cast[t](x)`` converts ``x`` to an array of scalar type ``t``.

    Keys are the concrete scalar types; like NumPy 1.x's ``_typedict``, a
    lookup first turns any dtype specifier (``'f4'``, ``float``,
    ``np.dtype('i2')``) into its scalar type, and a specifier that names no
    type raises KeyError. Modern spelling: ``np.asarray(x, dtype=t)``.
    """

    def __getitem__(self, key: Any) -> Callable[[Any], numpy.ndarray]:
        return dict.__getitem__(self, obj2sctype(key))


def _converter(scalar: type) -> Callable[[Any], numpy.ndarray]:
    # NumPy 1.x: array(x, copy=False).astype(k). NumPy 2 reads copy=False as
    # "never copy" (an error when conversion needs one), so asarray keeps the
    # old meaning; astype returns a new array, as it did.
    def convert(value: Any) -> numpy.ndarray:
        return numpy.asarray(value).astype(scalar)
    convert.__name__ = convert.__qualname__ = f"cast_to_{scalar.__name__}"
    return convert


def build_cast() -> CastTable:
    """``np.cast`` with one converter per concrete scalar type of this NumPy."""
    table = CastTable()
    for scalar in set(numpy.sctypeDict.values()):
        table[scalar] = _converter(scalar)
    return table


SCTYPES = build_sctypes()

"""The check of ``sys.meta_path``'s front written into the import system's own ``_find_spec``.

``importer.check_each_import`` must see, at the start of every import that looks for a
module, whether a new list was assigned to ``sys.meta_path`` (a finder put in front of
ours there would serve the next watched import unpatched). A Python function wrapping
``_frozen_importlib._find_spec`` does that at the price of one more frame per import,
about 415 instructions. Here the check goes into ``_find_spec``'s own code instead: its
first lines are

    meta_path = sys.meta_path
    if meta_path is None:
        raise ImportError("sys.meta_path is None, Python is likely shutting down")

and the new code object has, in their place,

    meta_path = sys.meta_path
    if meta_path is not _lazypatch_front_guarded:
        _lazypatch_check_front()   # raises that ImportError for None, else checks the front

so an import whose ``sys.meta_path`` is still the guarded list runs three bytecodes more
(a global read, ``is not``, a jump), no frame.

Both versions of those lines are compiled here, by the running interpreter, as the
templates below: the original's template must equal ``_find_spec``'s first bytes exactly
(the same opcodes, caches, constants, names and locals), else the code is left alone and
``importer`` falls back to the wrapper. The rest of ``_find_spec`` is copied unchanged;
its jumps are relative, so only the exception table (absolute offsets) and the location
table (the inserted units) need shifting. The two names live in ``_frozen_importlib``'s
namespace because that is where the code's globals are; ``restore`` removes them.
"""

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, List, Optional, Tuple

GUARDED_NAME = "_lazypatch_front_guarded"
CHECK_NAME = "_lazypatch_check_front"
_END_NAME = "_lazypatch_region_end"
# The import system's message for a meta_path of None (the original's template asserts it).
SHUT_DOWN_MESSAGE = "sys.meta_path is None, Python is likely shutting down"


def _original_template(name, path, target=None):
    """Find a module's spec."""
    meta_path = sys.meta_path
    if meta_path is None:
        raise ImportError("sys.meta_path is None, Python is likely shutting down")
    # Marks the region's end; the None keeps the constants numbered as in _find_spec,
    # whose later code uses None.
    return _lazypatch_region_end(None)  # noqa: F821


def _checked_template(name, path, target=None):
    """Find a module's spec."""
    meta_path = sys.meta_path
    if meta_path is not _lazypatch_front_guarded:  # noqa: F821
        _lazypatch_check_front()  # noqa: F821
    return _lazypatch_region_end(None)  # noqa: F821


def checked_code(original: "Any") -> "Optional[Any]":
    """``original`` (``_find_spec``'s code) with the front check in place of its None
    check, or None when its first lines are not the ones expected (another Python)."""
    template = _original_template.__code__
    checked = _checked_template.__code__
    global_opcode = template.co_code[2]   # the LOAD_GLOBAL of ``sys`` after RESUME
    end = _region_end(template, global_opcode)
    new_end = _region_end(checked, global_opcode)
    code = original.co_code
    if (end is None or new_end is None or new_end < end or code[:end] != template.co_code[:end]
            or original.co_varnames[:4] != template.co_varnames
            or original.co_names[:2] != template.co_names[:2]
            or SHUT_DOWN_MESSAGE not in original.co_consts
            or len(original.co_names) > 125):   # a name index needing EXTENDED_ARG
        return None
    names = original.co_names + (GUARDED_NAME, CHECK_NAME)
    region = _renamed_globals(checked.co_code[:new_end], checked.co_names, names, global_opcode)
    shift = (new_end - end) // 2   # in code units
    exceptions = _shifted_exception_table(original.co_exceptiontable, end // 2, shift)
    locations = _locations_with_gap(original.co_linetable, end // 2, shift)
    if region is None or exceptions is None or locations is None:
        return None
    return original.replace(co_code=region + code[end:], co_names=names,
                            co_exceptiontable=exceptions, co_linetable=locations,
                            co_stacksize=max(original.co_stacksize, checked.co_stacksize))


def _region_end(code: "Any", global_opcode: int) -> "Optional[int]":
    """Byte offset of the template's ``LOAD_GLOBAL _lazypatch_region_end``."""
    index = code.co_names.index(_END_NAME)
    raw = code.co_code
    for offset in range(0, len(raw), 2):   # opcodes sit at even offsets, caches are 0
        if raw[offset] == global_opcode and raw[offset + 1] >> 1 == index:
            return offset
    return None


def _renamed_globals(region: bytes, old_names: "Tuple[str, ...]", names: "Tuple[str, ...]",
                     global_opcode: int) -> "Optional[bytes]":
    """``region`` with each LOAD_GLOBAL's name index moved from ``old_names`` to ``names``."""
    renamed = bytearray(region)
    for offset in range(0, len(renamed), 2):
        if renamed[offset] == global_opcode:
            argument = renamed[offset + 1]
            name = old_names[argument >> 1]
            if name not in names:
                return None
            renamed[offset + 1] = names.index(name) << 1 | (argument & 1)
    return bytes(renamed)


def _read_varint(table: bytes, position: int) -> "Tuple[int, int]":
    """The exception table's 6-bit big-endian varint at ``position``, and the next position."""
    byte = table[position]
    value = byte & 63
    while byte & 64:
        position += 1
        byte = table[position]
        value = value << 6 | byte & 63
    return value, position + 1


def _write_varint(value: int, starts_entry: bool) -> bytes:
    chunks = [value & 63]
    value >>= 6
    while value:
        chunks.append(value & 63)
        value >>= 6
    chunks.reverse()
    encoded = bytearray(chunk | 64 for chunk in chunks[:-1])
    encoded.append(chunks[-1])
    if starts_entry:
        encoded[0] |= 128
    return bytes(encoded)


def _shifted_exception_table(table: bytes, end: int, shift: int) -> "Optional[bytes]":
    """Every handler range and target at or after unit ``end`` moved by ``shift`` units;
    None if a handler covers the replaced region."""
    shifted = bytearray()
    position = 0
    while position < len(table):
        fields: "List[int]" = []
        for _ in range(4):   # start, size, target, depth and lasti
            value, position = _read_varint(table, position)
            fields.append(value)
        start, size, target, depth = fields
        if start < end or target < end:
            return None
        shifted += _write_varint(start + shift, True)
        shifted += _write_varint(size, False) + _write_varint(target + shift, False)
        shifted += _write_varint(depth, False)
    return bytes(shifted)


def _locations_with_gap(table: bytes, end: int, shift: int) -> "Optional[bytes]":
    """The location table with ``shift`` units inserted at unit ``end``, on the line of
    the unit before them; None if no entry starts there. Each entry starts with a byte
    over 127 whose low three bits are its length in units less one (every other byte of
    an entry is under 128)."""
    units = 0
    for position, byte in enumerate(table):
        if byte < 128:
            continue
        if units == end:
            gap = bytearray()
            while shift:
                length = min(shift, 8)
                gap += bytes((128 | 13 << 3 | length - 1, 0))   # "no column", line + 0
                shift -= length
            return table[:position] + bytes(gap) + table[position:]
        units += (byte & 7) + 1
    return None


def install(bootstrap: "Any", check: "Callable[[], None]", guarded: "Any") -> bool:
    """Give ``bootstrap._find_spec`` the checked code (``check`` called whenever
    ``sys.meta_path`` is not ``guarded``); whether it has it now."""
    function = getattr(bootstrap, "_find_spec", None)
    namespace = getattr(bootstrap, "__dict__", None)
    if function is None or namespace is None:
        return False
    code = getattr(function, "__code__", None)
    if code is None:
        return False
    namespace[GUARDED_NAME] = guarded
    namespace[CHECK_NAME] = check
    if CHECK_NAME in code.co_names:   # installed already: the new names sufficed
        return True
    new_code = checked_code(code)
    if new_code is None:
        del namespace[GUARDED_NAME], namespace[CHECK_NAME]
        return False
    _originals[:] = [(function, code)]
    function.__code__ = new_code
    return True


_originals: "List[Tuple[Any, Any]]" = []   # (the function, its own code) while installed


def restore(bootstrap: "Any") -> None:
    """``_find_spec`` with its own code again and the two names gone (undoes ``install``)."""
    for function, code in _originals:
        function.__code__ = code
    del _originals[:]
    namespace = getattr(bootstrap, "__dict__", {})
    namespace.pop(GUARDED_NAME, None)
    namespace.pop(CHECK_NAME, None)

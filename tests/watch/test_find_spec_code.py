"""The check of ``sys.meta_path``'s front written into the import system's ``_find_spec``
(lazypatch/watch/importer.py, ``checked_code``): the code it makes, and what an activated process does
with it."""

import _frozen_importlib  # type: ignore[import-not-found]
import sys

import pytest

from lazypatch.watch import importer as find_spec_code

ORIGINAL = _frozen_importlib._find_spec.__code__


GUARDED, CHECK = [], find_spec_code._check_front   # (any list and function will do)


def _region_ends() -> "tuple":
    """Where the original lines end in ``_find_spec`` and the checked ones in its new code
    (the checked template's first unit, COPY_FREE_VARS, is not copied)."""
    ends = []
    for code, skipped in ((find_spec_code._original_template.__code__, 0),
                          (find_spec_code._checked_template(), 2)):
        ends.append(find_spec_code._instruction(
            code.co_code, code.co_code[2 + skipped],
            code.co_names.index("_lazypatch_region_end") << 1 | 1) - skipped)
    return tuple(ends)


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's import system")
def test_the_checked_code_is_the_original_but_for_its_first_lines():
    checked = find_spec_code.checked_code(ORIGINAL, GUARDED, CHECK)
    assert checked is not None, "the shape of _find_spec changed: the wrapper is used"
    end, new_end = _region_ends()
    assert checked.co_code[new_end:] == ORIGINAL.co_code[end:]
    # The guarded list and the check are constants; one name more, the check's __call__.
    assert checked.co_names == ORIGINAL.co_names + ("__call__",)
    assert checked.co_consts[:-2] == ORIGINAL.co_consts
    assert checked.co_consts[-2] is GUARDED and checked.co_consts[-1] is CHECK
    assert (checked.co_varnames, checked.co_filename, checked.co_argcount, checked.co_freevars) \
        == (ORIGINAL.co_varnames, ORIGINAL.co_filename, ORIGINAL.co_argcount, ())
    # Every line of the original keeps its number for the code it still has.
    lines = [line for _, _, line in ORIGINAL.co_lines() if line is not None]
    assert [line for _, _, line in checked.co_lines() if line is not None][-20:] == lines[-20:]


def test_the_exception_table_is_unchanged_when_nothing_is_inserted():
    end, _ = _region_ends()
    assert find_spec_code._shifted_exception_table(ORIGINAL.co_exceptiontable, end // 2, 0) \
        == ORIGINAL.co_exceptiontable


def test_every_handler_of_the_checked_code_covers_the_same_instructions():
    checked = find_spec_code.checked_code(ORIGINAL, GUARDED, CHECK)
    assert checked is not None
    end, new_end = _region_ends()
    shift = new_end - end
    dis = pytest.importorskip("dis")
    original_handlers = [(entry.start, entry.end, entry.target, entry.depth, entry.lasti)
                         for entry in dis._parse_exception_table(ORIGINAL)]
    checked_handlers = [(entry.start - shift, entry.end - shift, entry.target - shift,
                         entry.depth, entry.lasti)
                        for entry in dis._parse_exception_table(checked)]
    assert checked_handlers == original_handlers and original_handlers


def test_code_of_another_shape_is_left_alone():
    def find_spec(name, path, target=None):
        return None
    assert find_spec_code.checked_code(find_spec.__code__, GUARDED, CHECK) is None
    assert find_spec_code.checked_code(_frozen_importlib._find_and_load.__code__, GUARDED,
                                       CHECK) is None


ACTIVATED_PROGRAM = """
import _frozen_importlib, importlib.machinery, json, sys, threading
original_function = _frozen_importlib._find_spec
original_code = original_function.__code__
import _frozen_importlib_external, builtins
# The namespaces whose keys the import system's specialized global and attribute reads
# check: a key added to any of them makes those reads miss for the next ~50 imports.
namespaces = (_frozen_importlib, _frozen_importlib_external, sys, builtins)
def keys():
    return [set(vars(namespace)) for namespace in namespaces]
keys_before = keys()
import lazypatch.auto, lazypatch
from lazypatch.watch import importer

@lazypatch.when_imported("claimed_target", name="claimed.value")
def value(module, patch):
    patch.setattr(module, "VALUE", "patched")

class Claiming:
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "claimed_target":
            return importlib.machinery.PathFinder.find_spec(fullname, path)
        return None

class Raising:
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "raising_target":
            raise ValueError("raised by a finder")
        return None

result = {"same_function": _frozen_importlib._find_spec is original_function,
          "rewritten": importer._check_front in _frozen_importlib._find_spec.__code__.co_consts,
          "hashable": hash(_frozen_importlib._find_spec.__code__) is not None,
          "namespace_kept": keys() == keys_before}
sys.meta_path = list(sys.meta_path)      # a new list: no MetaPath any more
sys.meta_path.insert(0, Claiming())
sys.meta_path.insert(0, Raising())
import claimed_target
result["value"] = claimed_target.VALUE
try:
    import raising_target
except ValueError as error:
    result["raised"] = str(error)
# The finder raised inside the import lock: its handler must have released it.
thread = threading.Thread(target=__import__, args=("plain_target",))
thread.start()
thread.join(10)
result["thread_imported"] = "plain_target" in sys.modules
saved, sys.meta_path = sys.meta_path, None
try:
    import never_found
except ImportError as error:
    result["none_message"] = str(error)
sys.meta_path = saved
lazypatch.uninstall()
result["restored"] = _frozen_importlib._find_spec.__code__ is original_code
result["namespace_kept_after"] = keys() == keys_before
print(json.dumps(result))
"""


def test_an_activated_process_checks_the_front_in_the_import_systems_own_code(interpreter):
    interpreter.write({"claimed_target.py": "VALUE = 'original'\n",
                       "raising_target.py": "", "plain_target.py": ""})
    result = interpreter.run_json(ACTIVATED_PROGRAM)
    # No name is added to the import system's namespace, before or after: that would make
    # every global read its functions had specialized miss (importer.checked_code).
    assert result == {"same_function": True, "rewritten": True, "hashable": True,
                      "namespace_kept": True, "value": "patched",
                      "raised": "raised by a finder", "thread_imported": True,
                      "none_message": find_spec_code.SHUT_DOWN_MESSAGE,
                      "restored": True, "namespace_kept_after": True}, result


# --- the exception table's shift, against the plain per-entry loop ----------------------
# ``_shifted_exception_table`` shifts every entry at once with integer operations (a loop
# per entry cost activation about 70,000 instructions); the model below is that loop, one
# varint at a time, as the format is written down in CPython's InternalDocs.

def _model_shift(table: bytes, end: int, shift: int) -> "bytes | None":
    """Every start and target moved by ``shift`` units, each still of two 6-bit chunks;
    None for a start or target of another length, a size of more than two chunks (the
    target is looked for one or two bytes after it), a value before ``end``, or any
    entry with ``end`` past 63 (the integer version's documented refusals)."""
    if end >= 64 and table:
        return None
    shifted = bytearray(table)
    position = 0
    while position < len(table):
        for field in range(4):   # start, size, target, depth and lasti
            first = position
            while table[position] & 64:
                position += 1
            position += 1
            if field == 1 and position - first > 2:
                return None
            if field in (0, 2):
                if position - first != 2:
                    return None
                value = (table[first] & 63) << 6 | table[first + 1] & 63
                moved = value + shift
                if value < end or moved > 4095:
                    return None
                shifted[first] = table[first] & 192 | moved >> 6
                shifted[first + 1] = moved & 63
    return bytes(shifted)


def _varint(value: int, starts_entry: bool) -> bytes:
    chunks = [value & 63]
    while value >> 6:
        value >>= 6
        chunks.append(value & 63)
    encoded = bytearray(chunk | 64 for chunk in reversed(chunks[1:])) + bytes((chunks[0],))
    if starts_entry:
        encoded[0] |= 128
    return bytes(encoded)


def _tables_of(code, found):
    if code.co_exceptiontable:
        found.add(code.co_exceptiontable)
    for constant in code.co_consts:
        if hasattr(constant, "co_exceptiontable"):
            _tables_of(constant, found)
    return found


def test_the_exception_tables_of_the_import_system_shift_as_the_plain_loop_shifts_them():
    import importlib._bootstrap_external as external
    import threading
    tables = set()
    for module in (_frozen_importlib, external, threading):
        for value in vars(module).values():
            for candidate in (value, *vars(value).values()) if isinstance(value, type) else (value,):
                code = getattr(candidate, "__code__", None)
                if code is not None:
                    _tables_of(code, tables)
    assert len(tables) > 20
    for table in tables:
        for end in (0, 29, 63, 64):
            for shift in range(1, 9):
                assert find_spec_code._shifted_exception_table(table, end, shift) == \
                    _model_shift(table, end, shift), (table, end, shift)


def test_any_exception_table_shifts_as_the_plain_loop_shifts_it():
    from hypothesis import given, settings
    from hypothesis import strategies as st
    entries = st.lists(st.tuples(*[st.integers(0, 5000)] * 4), max_size=12)

    @settings(max_examples=400, derandomize=True, deadline=None)
    @given(entries, st.integers(0, 80), st.integers(1, 8))
    def shifts_as_the_model(fields, end, shift):
        table = b"".join(_varint(start, True) + _varint(size, False) + _varint(target, False)
                         + _varint(depth, False) for start, size, target, depth in fields)
        assert find_spec_code._shifted_exception_table(table, end, shift) == \
            _model_shift(table, end, shift)
    shifts_as_the_model()


def test_installing_again_keeps_the_written_in_code(interpreter):
    # lazypatch.install() after activation asks for the check again, for the same list: a
    # new code object would run its next imports unspecialized.
    result = interpreter.run_json(
        "import _frozen_importlib, json, sys\n"
        "import lazypatch.auto, lazypatch\n"
        "code = _frozen_importlib._find_spec.__code__\n"
        "lazypatch.install()\n"
        "kept = _frozen_importlib._find_spec.__code__ is code\n"
        "sys.meta_path = list(sys.meta_path)\n"
        "lazypatch.install()   # a new list: MetaPath again, and the check for it\n"
        "rewritten = _frozen_importlib._find_spec.__code__\n"
        "print(json.dumps({'kept': kept, 'guards_the_new_list': rewritten is not code\n"
        "                  and rewritten.co_consts[-2] is sys.meta_path}))\n")
    assert result == {"kept": True, "guards_the_new_list": True}, result

"""The numpy_compat pack: removed NumPy names restored lazily, one warning each, exact undo.

Scenarios run in fresh interpreters with the real NumPy (2.x here); the
pure alias functions are also checked in-process against NumPy's own
modern functions.
"""

from __future__ import annotations

import ast
import itertools
import warnings

import numpy
import pytest
from lazypatch.registry.numpy_compat import aliases, numerictypes, utilities


def test_restored_names_resolve_to_their_replacements_and_warn_once_each(interpreter):
    result = interpreter.run_json("""
        import lazypatch.auto
        import json, warnings
        import numpy as np

        def access(expression):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                value = eval(expression)
            return value, [str(w.message) for w in caught if w.category is DeprecationWarning]

        checks = {}
        for expression, expected in [("np.float", float), ("np.int", int), ("np.object", object),
                                     ("np.str", str), ("np.complex", complex), ("np.unicode", str),
                                     ("np.float_", np.float64), ("np.complex_", np.complex128),
                                     ("np.string_", np.bytes_), ("np.unicode_", np.str_),
                                     ("np.bool8", np.bool_), ("np.product", np.prod),
                                     ("np.trapz", np.trapezoid), ("np.cumproduct", np.cumprod),
                                     ("np.sometrue", np.any), ("np.alltrue", np.all)]:
            first, first_warnings = access(expression)
            second, second_warnings = access(expression)
            checks[expression] = [first is expected, second is expected,
                                  first_warnings, second_warnings]
        nan, _ = access("np.NaN")
        ninf, _ = access("np.NINF")
        from numpy import float as imported_float     # `from numpy import x` goes through __getattr__
        print(json.dumps({"checks": checks, "nan_is_nan": nan != nan, "ninf": ninf,
                          "from_import": imported_float is float}))
    """)
    for expression, (first_ok, second_ok, first_warnings, second_warnings) in result["checks"].items():
        assert first_ok and second_ok, expression
        assert len(first_warnings) == 1, (expression, first_warnings)
        assert second_warnings == [], (expression, second_warnings)
    assert "Use float (or np.float64) instead" in result["checks"]["np.float"][2][0]
    assert "Use np.trapezoid instead" in result["checks"]["np.trapz"][2][0]
    assert result["nan_is_nan"] and result["ninf"] == float("-inf") and result["from_import"]


def test_names_numpy_defines_are_untouched(interpreter):
    result = interpreter.run_json("""
        import json, warnings
        import numpy as np
        before = {"bool": np.bool, "long": np.long, "row_stack": np.row_stack,
                  "getattr": np.__dict__["__getattr__"]}
        import lazypatch.auto, lazypatch
        messages = {}
        for name in ("lookfor", "no_such_name"):
            try:
                getattr(np, name)
            except AttributeError as error:
                messages[name] = str(error)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            same = {"bool": np.bool is before["bool"], "long": np.long is before["long"],
                    "row_stack": np.row_stack is before["row_stack"]}
        restored = [note for record in lazypatch.report() for note in record.notes
                    if record.name == "numpy_compat.type_aliases"]
        print(json.dumps({"same": same, "messages": messages, "linalg": np.linalg.__name__,
                          "hook_replaced": np.__dict__["__getattr__"] is not before["getattr"],
                          "lazypatch_warnings": [str(w.message) for w in caught
                                                 if "lazypatch" in str(w.message)],
                          "restored": restored}))
    """)
    assert all(result["same"].values()), result["same"]
    assert result["lazypatch_warnings"] == []
    # NumPy's own __getattr__ still answers what the table does not hold.
    assert "Search NumPy's documentation directly" in result["messages"]["lookfor"]
    assert "no attribute 'no_such_name'" in result["messages"]["no_such_name"]
    assert result["linalg"] == "numpy.linalg" and result["hook_replaced"]
    restored_names = set(result["restored"][0].removeprefix("restored ").split(", "))
    assert "np.float" in restored_names
    assert not restored_names & {"np.bool", "np.long"}


def test_each_concern_can_be_disabled_and_everything_undone_exactly(interpreter):
    code = """
        import lazypatch.auto, lazypatch, json
        import numpy as np
        original_getattr = lazypatch.original(np, "__getattr__")

        def available(name):
            try:
                getattr(np, name)
                return True
            except AttributeError:
                return False

        status = {record.name: record.status for record in lazypatch.report()
                  if record.name.startswith("numpy_compat.")}
        names = ("float", "in1d", "NaN")
        active = {name: available(name) for name in names}
        lazypatch.unpatch_all()
        after_undo = {name: available(name) for name in names}
        print(json.dumps({"status": status, "active": active, "after_undo": after_undo,
                          "getattr_restored": np.__dict__["__getattr__"] is original_getattr}))
    """
    only_functions_off = interpreter.run_json(
        code, env={"LAZYPATCH_DISABLE": "numpy_compat.function_aliases"})
    assert only_functions_off["active"] == {"float": True, "in1d": False, "NaN": True}
    assert only_functions_off["status"]["numpy_compat.function_aliases"] == "disabled"
    assert only_functions_off["after_undo"] == {"float": False, "in1d": False, "NaN": False}
    assert only_functions_off["getattr_restored"]

    hook_off = interpreter.run_json(code, env={"LAZYPATCH_DISABLE": "numpy_compat.attribute_hook"})
    assert hook_off["active"] == {"float": False, "in1d": False, "NaN": False}
    assert hook_off["status"]["numpy_compat.type_aliases"] == "skipped"


def test_legacy_names_fail_without_lazypatch(interpreter):
    result = interpreter.run("import numpy as np\nnp.float", check=False)
    assert result.returncode != 0
    assert "AttributeError" in result.stderr and "np.float" in result.stderr


def test_alias_functions_behave_as_the_removed_numpy_functions():
    grid = numpy.array([[1, 5], [3, 7]])
    in1d = aliases.in1d
    assert in1d(grid, [3, 5]).tolist() == [False, True, True, False]   # flattened, 1-D
    assert in1d(grid, [3, 5], invert=True).tolist() == [True, False, False, True]
    assert aliases.msort(numpy.array([[3, 1], [1, 2]])).tolist() == [[1, 1], [3, 2]]
    assert aliases.asfarray([1, 2]).dtype == numpy.float64
    assert aliases.asfarray([1, 2], dtype=numpy.float32).dtype == numpy.float32
    assert aliases.asfarray([1, 2], dtype=numpy.int32).dtype == numpy.float64
    assert aliases.alen([[1, 2], [3, 4], [5, 6]]) == 3 and aliases.alen(7) == 1
    assert aliases.asscalar(numpy.array([4.5])) == 4.5
    # every replacement named in the tables exists in this NumPy
    for table in (aliases.TYPE_ALIASES, aliases.FUNCTION_ALIASES, aliases.CONSTANT_ALIASES):
        for name, (make, modern) in table.items():
            assert make(numpy) is not None, name
            assert modern, name


EXPIRED_HELPERS = {
    # name -> a fragment of the modern spelling the one-time warning must name
    "sctypes": "np.int8, np.int16", "find_common_type": "np.result_type",
    "cast": "np.asarray(a, dtype=dtype)", "maximum_sctype": "np.longdouble",
    "obj2sctype": "np.dtype(obj).type", "issctype": "issubclass(rep, np.generic)",
    "byte_bounds": "np.lib.array_utils.byte_bounds",
    "set_string_function": "np.set_printoptions", "compare_chararrays": "np.char.compare_chararrays",
    "format_parser": "np.rec.format_parser", "recfromcsv": "np.genfromtxt",
    "safe_eval": "ast.literal_eval", "deprecate": "DeprecationWarning",
    "geterrobj": "np.geterr()",
}


def test_expired_helpers_are_restored_and_agree_with_their_modern_spelling(interpreter, tmp_path):
    (tmp_path / "table.csv").write_text("Name,Age\nann,31\nbob,27\n")
    result = interpreter.run_json("""
        import lazypatch.auto
        import ast, json, sys, warnings
        import numpy as np
        lazy_char_untouched = "numpy.char" not in sys.modules

        warned = {}
        def access(name):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                value = getattr(np, name)
            warned.setdefault(name, []).extend(
                str(w.message) for w in caught if w.category is DeprecationWarning)
            return value

        names = %r
        for name in names:
            access(name)
        for name in names:            # the second access is silent
            access(name)

        checks = {}
        sctypes = np.sctypes
        checks["sctypes"] = (sctypes["int"] == [np.int8, np.int16, np.int32, np.int64]
                             and sctypes["uint"] == [np.uint8, np.uint16, np.uint32, np.uint64]
                             and sctypes["float"][:3] == [np.float16, np.float32, np.float64]
                             and sctypes["float"][-1] is np.longdouble
                             and sctypes["complex"][-1] is np.clongdouble
                             and sctypes["others"] == [bool, object, bytes, str, np.void])
        checks["find_common_type"] = [
            np.find_common_type([np.int64, np.float32], []) == np.result_type(np.int64, np.float32),
            np.find_common_type([np.float32], [np.int64, np.float64])
            == np.result_type(np.float32, 0, 0.0),
            # NumPy 1.26's documented answer; result_type(np.float32, 0j) says complex64
            # under NEP 50 (one of the "rare exceptions" of the 1.25 notes).
            np.find_common_type([np.float32], [complex]) == np.dtype("complex128"),
            np.find_common_type(["f4", "f4", "i4"], ["c8"]) == np.dtype("complex128"),
            np.find_common_type([], []) is None]
        converted = np.cast["f4"]([1, 2.5])
        modern = np.asarray([1, 2.5], dtype="f4")
        checks["cast"] = [converted.dtype == modern.dtype, converted.tolist() == modern.tolist(),
                          np.cast[int]([3]).dtype == np.dtype(int)]
        checks["maximum_sctype"] = [np.maximum_sctype(np.uint8) is np.uint64,
                                    np.maximum_sctype("f4") is np.longdouble,
                                    np.maximum_sctype(str) is np.str_]
        checks["obj2sctype"] = [np.obj2sctype(x) is np.dtype(x).type
                                for x in (np.int32, "f8", float, np.dtype("U3"))]
        checks["issctype"] = [np.issctype(x) == (isinstance(x, type) and issubclass(x, np.generic))
                              for x in (np.int32, list, np.float64, np.str_, 1.1)]
        # Where NumPy 1.26 and the modern spelling differ, the restored name is 1.26's:
        # Python types that name a dtype count, object does not.
        checks["issctype"] += [np.issctype(str), not np.issctype(np.object_)]
        grid = np.eye(3)[::2]
        checks["byte_bounds"] = [np.byte_bounds is np.lib.array_utils.byte_bounds,
                                 np.byte_bounds(grid) == np.lib.array_utils.byte_bounds(grid)]
        left, right = np.array(["a ", "b", "c"]), np.array(["a", "x", "c"])
        checks["compare_chararrays"] = (
            np.compare_chararrays(left, right, "==", True).tolist()
            == np.char.compare_chararrays(left, right, "==", True).tolist())
        checks["format_parser"] = (np.format_parser is np.rec.format_parser
                                   and np.format_parser(["f8", "i4"], ["a", "b"], None).dtype
                                   == np.rec.format_parser(["f8", "i4"], ["a", "b"], None).dtype)
        old = np.recfromcsv("table.csv", encoding="utf-8")
        new = np.genfromtxt("table.csv", delimiter=",", names=True, case_sensitive="lower",
                            dtype=None, encoding="utf-8").view(np.recarray)
        checks["recfromcsv"] = [type(old) is np.recarray, old.dtype == new.dtype,
                                old.tolist() == new.tolist(), old.age.tolist() == [31, 27]]
        source = "{'foo': ('bar', 10.0), 'n': [1, -2j, None, True]}"
        checks["safe_eval"] = np.safe_eval(source) == ast.literal_eval(source)
        refused = {}
        for code in ("open('pwned.txt', 'w')", "__import__('os').getcwd()", "import os",
                     "(lambda: 1)()", "np.zeros(3)"):
            try:
                np.safe_eval(code)
                refused[code] = "evaluated"
            except (ValueError, SyntaxError) as error:
                refused[code] = type(error).__name__

        def add_one(x):
            return x + 1
        old_add = np.deprecate(add_one, "old_add", "add_one")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = old_add(1)
        checks["deprecate"] = [value == 2, old_add.__name__ == "old_add",
                               [str(w.message) for w in caught]
                               == ["`old_add` is deprecated, use `add_one` instead!"],
                               [w.category for w in caught] == [DeprecationWarning]]
        with np.errstate(divide="raise", over="ignore", under="warn", invalid="print"):
            inside = np.geterrobj()
            expected_mask = (2 << 0) | (0 << 3) | (1 << 6) | (4 << 9)
            checks["geterrobj"] = inside == [np.getbufsize(), expected_mask, np.geterrcall()]
        try:
            np.set_string_function(lambda array: "custom")
            custom = "accepted"
        except NotImplementedError as error:
            custom = str(error)
        checks["set_string_function"] = [np.set_string_function(None) is None,
                                         repr(np.arange(2)) == "array([0, 1])"]
        import os
        print(json.dumps({"warned": warned, "checks": checks, "refused": refused,
                          "pwned": os.path.exists("pwned.txt"), "custom": custom,
                          "lazy_char_untouched": lazy_char_untouched}))
    """ % (list(EXPIRED_HELPERS),))
    for name, fragment in EXPIRED_HELPERS.items():
        assert len(result["warned"][name]) == 1, (name, result["warned"][name])
        assert fragment in result["warned"][name][0], (name, result["warned"][name][0])
    for name, check in result["checks"].items():
        assert check is True or (isinstance(check, list) and all(check)), (name, check)
    assert set(result["checks"]) | {"set_string_function"} >= set(EXPIRED_HELPERS)
    assert set(result["refused"].values()) <= {"ValueError", "SyntaxError"}, result["refused"]
    assert result["refused"]["import os"] == "SyntaxError"
    assert not result["pwned"]
    assert "np.set_printoptions(formatter=" in result["custom"]
    assert result["lazy_char_untouched"]


def test_expired_helpers_fail_without_lazypatch(interpreter):
    result = interpreter.run_json("""
        import json
        import numpy as np
        missing = []
        for name in %r:
            try:
                getattr(np, name)
            except AttributeError:
                missing.append(name)
        print(json.dumps(missing))
    """ % (list(EXPIRED_HELPERS),))
    assert result == list(EXPIRED_HELPERS)


LADDER_CODES = "?bBhHiIlLqQefdgFDG"


@pytest.mark.parametrize("first,second", list(itertools.combinations_with_replacement(
    LADDER_CODES, 2)))
def test_find_common_type_of_arrays_matches_result_type(first, second):
    # NumPy 1.25's deprecation note: result_type gives the same answer "in almost
    # all cases"; for array dtypes alone, on every pair of numeric dtypes, it does.
    assert numerictypes.find_common_type([first, second], []) == \
        numpy.result_type(numpy.dtype(first), numpy.dtype(second))


def test_find_common_type_follows_numpy_1_26_for_scalars_and_bad_input():
    find = numerictypes.find_common_type
    # NumPy 1.26's documented examples.
    assert find([], [numpy.int64, numpy.float32, complex]) == numpy.dtype("complex128")
    assert find([numpy.int64, numpy.float32], []) == numpy.dtype("float64")
    assert find([numpy.float32], [numpy.int64, numpy.float64]) == numpy.dtype("float32")
    assert find([numpy.float32], [complex]) == numpy.dtype("complex128")
    assert find(["f4", "f4", "i4"], ["c8"]) == numpy.dtype("complex128")
    # A kind outside NumPy 1.26's ladder of kinds: None, as it returned.
    assert find([numpy.int8], ["M8[s]"]) is None
    assert find([], []) is None
    with pytest.raises(TypeError):
        find(["not a dtype"], [])


def test_scalar_type_helpers_match_numpy_1_26_and_the_modern_spelling():
    for spec in (numpy.int32, numpy.float64, float, int, complex, "f4", "i2", "U5", "S3",
                 numpy.dtype("M8[s]")):
        assert numerictypes.obj2sctype(spec) is numpy.dtype(spec).type, spec
    assert numerictypes.obj2sctype(numpy.floating) is numpy.floating   # abstract stays
    assert numerictypes.obj2sctype(numpy.array([1j])) is numpy.complex128
    assert numerictypes.obj2sctype(dict) is numpy.object_
    assert numerictypes.obj2sctype("not a type") is None
    assert numerictypes.obj2sctype(1, default=list) is list
    assert numerictypes.issctype(numpy.int32) and numerictypes.issctype(numpy.dtype("str"))
    assert not numerictypes.issctype(list) and not numerictypes.issctype(object)
    assert not numerictypes.issctype(1.1) and not numerictypes.issctype("f8")
    assert numerictypes.maximum_sctype(int) is numpy.int64
    assert numerictypes.maximum_sctype(numpy.uint8) is numpy.uint64
    assert numerictypes.maximum_sctype(complex) is numpy.clongdouble
    assert numerictypes.maximum_sctype(str) is numpy.str_
    assert numerictypes.maximum_sctype(bool) is numpy.bool_
    assert numerictypes.maximum_sctype("no such dtype") == "no such dtype"
    cast = numerictypes.build_cast()
    assert cast[numpy.int16]([1.7, -2.2]).tolist() == \
        numpy.asarray([1.7, -2.2]).astype(numpy.int16).tolist()
    assert cast["c8"](2).dtype == numpy.complex64
    with pytest.raises(KeyError):
        cast["no such dtype"]


def test_safe_eval_is_literal_eval_and_runs_nothing(tmp_path):
    for source in ("1", "[1, 2, 3]", "{'foo': ('bar', 10.0)}", "-1.5e3", "{1, 2}", "b'x'"):
        assert utilities.safe_eval(source) == ast.literal_eval(source)
    marker = tmp_path / "ran"
    for source in (f"open({str(marker)!r}, 'w')", "__import__('os')", "().__class__",
                   "[x for x in (1,)]", "1 if True else 2", "a"):
        with pytest.raises(ValueError):
            utilities.safe_eval(source)
    with pytest.raises(SyntaxError):
        utilities.safe_eval("import os")
    assert not marker.exists()


def test_deprecate_and_geterrobj_behave_as_numpy_1_26():
    def legacy(x):
        """Return x.

        More text.
        """
        return x

    decorated = utilities.deprecate(message="Gone soon.")(legacy)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert decorated(5) == 5
    assert [str(w.message) for w in caught] == ["`legacy` is deprecated!\nGone soon."]
    assert decorated.__doc__.lstrip().startswith("`legacy` is deprecated!\n")
    assert "Return x." in decorated.__doc__ and decorated.__wrapped__ is legacy
    renamed = utilities.deprecate(legacy, "older")
    assert renamed.__name__ == "older"
    with numpy.errstate(all="ignore"):
        buffer_size, mask, callback = utilities.geterrobj()
    assert (buffer_size, mask, callback) == (numpy.getbufsize(), 0, numpy.geterrcall())
    with numpy.errstate(all="raise"):
        assert utilities.geterrobj()[1] == 2 | 2 << 3 | 2 << 6 | 2 << 9
    with pytest.raises(NotImplementedError, match="set_printoptions"):
        utilities.set_string_function(repr, repr=False)

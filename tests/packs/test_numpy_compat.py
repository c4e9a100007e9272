"""The numpy_compat pack: removed NumPy names restored lazily, one warning each, exact undo.

Scenarios run in fresh interpreters with the real NumPy (2.x here); the
pure alias functions are also checked in-process against NumPy's own
modern functions.
"""

from __future__ import annotations

import numpy
from lazypatch.registry.numpy_compat import aliases


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
        for name in ("cast", "no_such_name"):
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
    assert "np.asarray(arr, dtype=dtype)" in result["messages"]["cast"]
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

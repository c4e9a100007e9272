"""Rebinding and reference reports reach only real copies of the replaced object.

Identity proves a copy only for objects that are not shared by value: small ints, None,
booleans, interned strings and the empty tuple are the same object in every module that
mentions them. ``rebind=True`` on such a value must leave every other module alone (and say
so in the report); functions, classes and modules copied with ``from x import y`` are
rebound and restored on undo. Every loaded module's globals are compared by identity
before and after, in a fresh interpreter.
"""

from __future__ import annotations

import pytest

SHARED = """
import os, sys, warnings
import lazypatch
from trust_helpers import changed_globals, emit, globals_by_identity, record

WHEN, REPLACEMENT = sys.argv[1], 7
import trust_shared_lib    # noqa: the target is imported first when WHEN == "late"
EXCLUDED = ("__main__", "trust_shared_lib")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    if WHEN == "on-import":
        del sys.modules["trust_shared_lib"]
    before, keep_before = globals_by_identity(EXCLUDED)

    @lazypatch.when_imported("trust_shared_lib", name="trust.shared")
    def shared(module, patch):
        patch.setattr(module, "LIMIT", REPLACEMENT, rebind=True)

    import trust_shared_lib
    during, keep_during = globals_by_identity(EXCLUDED)
    x_ok_during = os.X_OK
    item = record("trust.shared")
    lazypatch.unpatch("trust.shared")
    after, keep_after = globals_by_identity(EXCLUDED)
late_texts = [str(warning.message) for warning in caught if warning.category is lazypatch.LatePatchWarning]


def others(names):
    # lazypatch's own modules are left out: its counters change by design.
    return [name for name in names if not name.startswith("lazypatch.")][:30]


emit({"changed_during": others(changed_globals(before, during)),
      "changed_after": others(changed_globals(before, after)),
      "x_ok_during": x_ok_during,
      "late_references": item["late_references"], "late_warnings": late_texts,
      "report_text": " ".join(list(item["notes"]) + [item["reason"]]).lower(),
      "restored": repr(trust_shared_lib.LIMIT)})
"""

SHARED_VALUES = ["1", "0", "None", "True", "False", "''", "()", "'ab'", "'X_OK'"]


@pytest.mark.parametrize("when", ["late", "on-import"])
@pytest.mark.parametrize("value", SHARED_VALUES)
def test_rebinding_a_value_shared_by_every_module_changes_no_other_module(trust_interpreter, value, when):
    trust_interpreter.write({"trust_shared_lib.py": f"LIMIT = {value}\n"})
    result = trust_interpreter.run_json(SHARED, args=[when])
    assert result["x_ok_during"] == 1, f"os.X_OK read {result['x_ok_during']} while the patch was live"
    assert result["changed_during"] == [], \
        f"rebind=True on LIMIT = {value} rewrote unrelated module globals: {result['changed_during']}"
    assert result["changed_after"] == [], f"globals differ after undo: {result['changed_after']}"
    assert result["restored"] == repr(eval(value)), "LIMIT was not restored by unpatch()"
    innocent = [text for text in result["late_warnings"] if "os." in text or "posix" in text]
    assert innocent == [], f"LatePatchWarning names modules that merely share the value: {innocent}"
    assert not any(name.startswith(("os.", "posix.", "stat.")) for name in result["late_references"]), \
        f"the report names innocent holders: {result['late_references']}"
    text = result["report_text"]
    assert ("rebind" in text or "rebound" in text) and ("shared" in text or "identity" in text), \
        f"the report does not say LIMIT was not rebound and why (shared value, identity): {text!r}"


COPIES = """
import os, sys, types
import lazypatch
from trust_helpers import emit, plain, record

import trust_copied_lib, trust_copy_user
originals = dict(plain(trust_copy_user))


def new_helper():
    return "patched"


class NewThing:
    pass


replacement_module = types.ModuleType("replacement")


@lazypatch.when_imported("trust_copied_lib", name="trust.copies")
def copies(module, patch):
    patch.setattr(module, "helper", new_helper, rebind=True)
    patch.setattr(module, "Thing", NewThing, rebind=True)
    patch.setattr(module, "sub_module", replacement_module, rebind=True)
    patch.setattr(module, "LIMIT", 7, rebind=True)


import trust_copy_later     # imported while the patch is live: copies the replacements
during = {"helper": trust_copy_user.helper is new_helper, "Thing": trust_copy_user.Thing is NewThing,
          "sub_module": trust_copy_user.sub_module is replacement_module,
          "later_helper": trust_copy_later.helper is new_helper, "LIMIT": trust_copy_user.LIMIT,
          "X_OK": os.X_OK}
item = record("trust.copies")
lazypatch.unpatch("trust.copies")
after = {name: plain(trust_copy_user)[name] is value for name, value in originals.items()}
emit({"during": during, "after": after, "later_restored": trust_copy_later.helper is originals["helper"],
      "report_text": " ".join(list(item["notes"]) + [item["reason"]]).lower()})
"""


def test_functions_classes_and_modules_copied_with_from_import_are_rebound_and_restored(trust_interpreter):
    trust_interpreter.write({
        "trust_copied_sub.py": "X = 1\n",
        "trust_copied_lib.py": "import trust_copied_sub as sub_module\nLIMIT = 1\n\n"
                               "def helper():\n    return 'original'\n\nclass Thing:\n    pass\n",
        "trust_copy_user.py": "from trust_copied_lib import helper, Thing, sub_module, LIMIT\n",
        "trust_copy_later.py": "from trust_copied_lib import helper\n",
    })
    result = trust_interpreter.run_json(COPIES)
    assert result["during"] == {"helper": True, "Thing": True, "sub_module": True, "later_helper": True,
                                "LIMIT": 1, "X_OK": 1}, \
        "functions, classes and modules are rebound; the shared int LIMIT is not (in any module)"
    assert all(result["after"].values()), \
        f"not restored by undo: {[name for name, same in result['after'].items() if not same]}"
    assert result["later_restored"], "a copy made while the patch was live was not restored"
    text = result["report_text"]
    assert "limit" in text and ("rebind" in text or "rebound" in text), \
        f"the report does not say that LIMIT was not rebound: {text!r}"


LATE_WARNING = """
import warnings
import lazypatch
from trust_helpers import emit, record

import trust_copied_lib, trust_copy_user
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")

    @lazypatch.when_imported("trust_copied_lib", name="trust.late")
    def late(module, patch):
        patch.setattr(module, "helper", lambda: "patched")
        patch.setattr(module, "LIMIT", 7)
emit({"late_references": record("trust.late")["late_references"],
      "warnings": [str(warning.message) for warning in caught
                   if warning.category is lazypatch.LatePatchWarning]})
"""


def test_a_late_patch_warning_names_the_real_copies_and_no_module_that_merely_shares_a_value(
        trust_interpreter):
    trust_interpreter.write({
        "trust_copied_sub.py": "X = 1\n",
        "trust_copied_lib.py": "import trust_copied_sub as sub_module\nLIMIT = 1\n\n"
                               "def helper():\n    return 'original'\n",
        "trust_copy_user.py": "from trust_copied_lib import helper, LIMIT\n",
    })
    result = trust_interpreter.run_json(LATE_WARNING)
    assert "trust_copy_user.helper" in result["late_references"], "the real copy of helper is not named"
    innocent = [name for name in result["late_references"] if not name.startswith("trust_copy_user.")]
    assert innocent == [], f"modules that merely share the value 1 are named as holders: {innocent}"
    assert len(result["warnings"]) == 1 and "os." not in result["warnings"][0], result["warnings"]

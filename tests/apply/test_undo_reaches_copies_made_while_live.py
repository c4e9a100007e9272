"""An undo gives the original back to modules imported while the patch was live.

``from mmcv.runner import build_optimizer`` in a module imported after a patch replaced
``mmcv.runner.build_optimizer`` copies the replacement (DrivingSDK's PanoOcc test.py:
``mmdet3d.apis.train`` is imported after its patcher landed). Without the patch that
module would hold the original, so the undo is exact only when it does again. Modules
imported before the change keep what they hold: the patch gave them nothing (the module
defining the replacement keeps it). Fresh interpreters, temporary packages.
"""

from __future__ import annotations

FILES = {
    "undo_lib.py": """
        def build():
            return "original"

        def helper(x):
            return x
    """,
    "undo_replacements.py": """
        def build():
            return "patched"
    """,
    "undo_early.py": "from undo_lib import build, helper\n",
    "undo_late.py": "from undo_lib import build, helper\nfrom undo_lib import build as alias\n",
}

SCENARIO = """
import json, sys
import lazypatch
import undo_replacements
import undo_lib
import undo_early

@lazypatch.when_imported("undo_lib", name="undo.replace")
def replace(module, patch):
    patch.setattr(module, "build", undo_replacements.build)
    patch.wrap(module, "helper", lambda wrapped, instance, args, kwargs: wrapped(*args) + 1)

import undo_late   # imported while the patch is live: copies the replacement and the wrapper
during = {"late": undo_late.build(), "alias": undo_late.alias(), "helper": undo_late.helper(1),
          "early": undo_early.build(), "early_helper": undo_early.helper(1)}
lazypatch.unpatch("undo.replace")
lib = sys.modules["undo_lib"]
print(json.dumps({"during": during,
                  "after": {"late": undo_late.build is lib.build,
                            "alias": undo_late.alias is lib.build,
                            "helper": undo_late.helper is lib.helper,
                            "lib": lib.build(),
                            "early": undo_early.build is lib.build,
                            "replacement_kept": undo_replacements.build() == "patched"}}))
"""


def test_undo_gives_modules_imported_while_live_the_original_back(interpreter):
    interpreter.write(FILES)
    result = interpreter.run_json(SCENARIO)
    # the patch was applied at once (undo_lib imported before it was declared): the
    # late module copied the replacement, the early one kept its original
    assert result["during"] == {"late": "patched", "alias": "patched", "helper": 2,
                                "early": "original", "early_helper": 1}
    assert result["after"] == {"late": True, "alias": True, "helper": True, "lib": "original",
                               "early": True, "replacement_kept": True}


def test_a_module_imported_before_the_change_keeps_the_replacement_it_defined(interpreter):
    interpreter.write(FILES)
    result = interpreter.run_json("""
import json
import lazypatch
import undo_replacements

@lazypatch.when_imported("undo_lib", name="undo.replace")
def replace(module, patch):
    patch.setattr(module, "build", undo_replacements.build)

import undo_lib
lazypatch.unpatch("undo.replace")
print(json.dumps({"kept": undo_replacements.build() == "patched",
                  "lib": undo_lib.build()}))
""")
    assert result == {"kept": True, "lib": "original"}


# The patch applies as undo_lib is imported, so undo_lib itself is the newest module then
# (lazypatch's own modules load with the first patched import: undo_first's, here): the
# mark of the change's place in sys.modules. A test harness that purges undo_lib (and
# may import it again) takes the mark away; undo then cannot tell which modules came after
# the change, and says which still hold the replacement instead of staying silent.
MARK_GONE = """
import json, sys, warnings
import lazypatch
import undo_replacements

@lazypatch.when_imported("undo_first", name="undo.first")
def first_patch(module, patch):
    patch.setattr(module, "VALUE", 2)

@lazypatch.when_imported("undo_lib", name="undo.replace")
def replace(module, patch):
    patch.setattr(module, "build", undo_replacements.build)

import undo_first
import undo_lib
first = undo_lib
import undo_late   # copies the replacement while it is live
del sys.modules["undo_lib"]
if sys.argv[1] == "again":
    import undo_lib   # a new module object under the mark's name: patched again
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    lazypatch.unpatch("undo.replace")
record = {row["name"]: row for row in lazypatch.report()}["undo.replace"]
again = sys.modules.get("undo_lib")
print(json.dumps({
    "warnings": [f"{item.category.__name__}: {item.message}" for item in caught],
    "late_references": record["late_references"],
    "first_restored": first.build() == "original",
    "again_restored": again is None or again.build() == "original",
    "late_still_patched": undo_late.build() == "patched",
    "replacement_kept": undo_replacements.build() == "patched"}))
"""


def test_undo_says_which_copies_it_cannot_place_once_the_mark_left_sys_modules(interpreter):
    interpreter.write(dict(FILES, **{"undo_first.py": "VALUE = 1\n"}))
    for how in ("purged", "again"):
        result = interpreter.run_json(MARK_GONE, args=[how])
        assert result["first_restored"] and result["again_restored"], how
        assert result["replacement_kept"] and result["late_still_patched"], how
        # Named, not rebound: imported before the change, a module may have held it already.
        assert result["late_references"] == ["undo_late.build", "undo_late.alias"], how
        (warning,) = [text for text in result["warnings"] if "is undone" in text]
        assert warning.startswith("LatePatchWarning: lazypatch: patch 'undo.replace' is "
                                  "undone, but which modules copied undo_lib.build"), how
        assert "'undo_lib', the newest module then, has left sys.modules or was imported " \
               "again" in warning and "undo_late.build, undo_late.alias" in warning, how
        assert "rebind=True" in warning and "undo_replacements" not in warning, how


# What the report's ``late_references`` names is the state now, not a history: a late
# application names the globals left holding an original, and once the patch is undone
# those hold the right object again; an undo that cannot place copies names the ones of
# that undo, not those of an earlier cycle that were imported again since.
CYCLES = """
import importlib, json, sys, warnings
import lazypatch
import undo_replacements
import undo_lib, undo_early   # imported before the patch: undo_early holds the original
warnings.simplefilter("ignore")

@lazypatch.when_imported("undo_lib", name="undo.replace")
def replace(module, patch):
    patch.setattr(module, "build", undo_replacements.build)

def late_references():
    return {row["name"]: row for row in lazypatch.report()}["undo.replace"]["late_references"]

seen = {"late_application": late_references()}
lazypatch.unpatch("undo.replace")
seen["after_its_undo"] = late_references()

# Two cycles whose undo loses its mark (undo_lib purged after a copy was made), each
# applied as undo_lib is imported again (no late application names anything between).
for cycle, copier in enumerate(("undo_late", "undo_late_again")):
    sys.modules.pop("undo_lib", None)
    lazypatch.enable("undo.replace")
    import undo_lib                   # a new module object: patched as it is imported
    importlib.import_module(copier)   # copies the replacement while it is live
    del sys.modules["undo_lib"]
    lazypatch.unpatch("undo.replace")
    seen[f"cycle_{cycle}"] = late_references()
    importlib.reload(sys.modules[copier])   # imports undo_lib again: the original
print(json.dumps(seen))
"""


def test_late_references_name_what_is_stale_now_not_after_each_earlier_cycle(interpreter):
    interpreter.write(dict(FILES, **{"undo_late_again.py": "from undo_lib import build\n"}))
    result = interpreter.run_json(CYCLES)
    assert result["late_application"] == ["undo_early.build"]
    # Undone, the original undo_early holds is right again: nothing is stale.
    assert result["after_its_undo"] == []
    assert result["cycle_0"] == ["undo_late.build", "undo_late.alias"]
    # undo_late was imported again after the first cycle: only this cycle's copy is named.
    assert result["cycle_1"] == ["undo_late_again.build"]

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

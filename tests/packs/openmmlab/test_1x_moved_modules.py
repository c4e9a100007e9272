"""Module names a dependency of the 1.x stack moved (``openmmlab.moved_modules.<package>``):
mmdetection3d 0.17 (MapTR's and BEVDet's) says ``from numba.errors import
NumbaPerformanceWarning``; numba 0.49 moved that module to ``numba.core.errors`` and
later dropped the old name. Each runs in a fresh interpreter; the real numba where it is
installed (the mmdet3d stacks have it), a package written by the test otherwise.
"""
from __future__ import annotations

import importlib.util

import pytest

needs_numba = pytest.mark.skipif(importlib.util.find_spec("numba") is None,
                                 reason="needs numba (pip install numba)")

RUN_NUMBA = '''
import json, sys
import lazypatch.auto
import lazypatch
from numba.errors import NumbaPerformanceWarning
import numba, numba.core.errors
record = [r for r in lazypatch.report() if r.name == "openmmlab.moved_modules.numba"][0]
summary = {"same": NumbaPerformanceWarning is numba.core.errors.NumbaPerformanceWarning,
           "attribute": numba.errors is numba.core.errors,
           "status": record.status, "notes": record.notes}
lazypatch.unpatch_all()
try:
    import numba.errors
    again = "imported"
except ModuleNotFoundError as error:
    again = str(error)
summary["after_undo"] = ["numba.errors" in sys.modules, again]
print(json.dumps(summary))
'''


@needs_numba
def test_numba_errors_is_served_as_numba_core_errors_and_undone(interpreter):
    result = interpreter.run_json(RUN_NUMBA)
    assert result["same"] and result["attribute"]
    assert result["status"] == "applied"
    assert result["notes"] == ["moved modules served under their old names: "
                               "numba.errors -> numba.core.errors"]
    assert result["after_undo"] == [False, "No module named 'numba.errors'"]


@needs_numba
def test_without_the_patch_the_old_name_fails_as_without_lazypatch(interpreter):
    result = interpreter.run("import lazypatch.auto\nfrom numba.errors import NumbaPerformanceWarning\n",
                             env={"LAZYPATCH_DISABLE": "openmmlab.moved_modules"}, check=False)
    assert result.returncode != 0 and "No module named 'numba.errors'" in result.stderr


#: A package that moved ``movedpkg.errors`` to ``movedpkg.core.errors``; with
#: ``movedpkg/errors.py`` too, a version that still has the old name.
MOVED_PACKAGE = {
    "movedpkg/__init__.py": "from .core import errors as _errors\n",
    "movedpkg/core/__init__.py": "",
    "movedpkg/core/errors.py": "class Warned(Warning):\n    pass\n",
}

RUN_MOVED = '''
import json
import lazypatch.auto
import lazypatch
try:
    from lazypatch.registry.openmmlab import moved_modules
except ImportError:
    from registry.openmmlab import moved_modules
moved_modules.MOVED_MODULES["movedpkg"] = {"movedpkg.errors": "movedpkg.core.errors"}
lazypatch.when_imported("movedpkg", name="test.moved")(moved_modules.provide_moved_modules)
import movedpkg.errors, movedpkg.core.errors
record = [r for r in lazypatch.report() if r.name == "test.moved"][0]
print(json.dumps({"served": movedpkg.errors is movedpkg.core.errors,
                  "status": record.status, "notes": record.notes}))
'''


def test_the_old_name_is_provided_only_where_the_package_lacks_it(interpreter):
    interpreter.write(MOVED_PACKAGE)
    moved = interpreter.run_json(RUN_MOVED)
    assert moved["served"] and moved["status"] == "applied", moved
    interpreter.write({"movedpkg/errors.py": "OWN = True\n"})
    kept = interpreter.run_json(RUN_MOVED)
    assert not kept["served"] and kept["status"] == "skipped", kept
    assert kept["notes"] == [] or "still provides" in " ".join(kept["notes"]), kept

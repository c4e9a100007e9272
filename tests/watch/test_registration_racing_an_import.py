"""A patch registered while another thread imports its target unwatched.

That thread passed lazypatch's finder before the patch existed, so its import runs the
plain loader; registration finds no module in ``sys.modules`` yet and waits for the
import system's lock of the name instead (``unfinished.defer_until_import_released``).
The release of that lock applies the patch, and so does the lock's death when the
release was looked up on the lock's class before registration changed it: then the
release never reaches lazypatch. Fresh interpreters; the importing thread does what the
import system does, step by step, so that each order is reached every time.
"""

from __future__ import annotations

RACE = """
import importlib._bootstrap as bootstrap, importlib.machinery, importlib.util
import json, sys, threading
import lazypatch

looked_up, registered = threading.Event(), threading.Event()

def import_unwatched(name, release_looked_up_early):
    # As _find_and_load does: the name's lock first, then the finders (lazypatch's says
    # "not watched": nothing is registered yet), then the body, then the release.
    module_lock = bootstrap._get_module_lock(name)
    module_lock.acquire()
    release = type(module_lock).release if release_looked_up_early else None
    spec = importlib.machinery.PathFinder.find_spec(name)
    looked_up.set()
    registered.wait()
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if release is not None:
        release(module_lock)      # the original class's release: never lazypatch's
    else:
        module_lock.release()     # looked up now: the class lazypatch gave the lock
    del module_lock               # the import lets go of it: the lock dies here

name, early = sys.argv[1], sys.argv[2] == "early"
importing = threading.Thread(target=import_unwatched, args=(name, early))
importing.start()
looked_up.wait()

@lazypatch.when_imported(name, name="race.patch")
def fix(module, patch):
    patch.setattr(module, "VALUE", "patched")

before = {row["name"]: row for row in lazypatch.report()}["race.patch"]["status"]
registered.set()
importing.join()
row = {row["name"]: row for row in lazypatch.report()}["race.patch"]
print(json.dumps({"before": before, "status": row["status"],
                  "applications": row["applications"],
                  "value": sys.modules[name].VALUE}))
"""


def test_a_patch_registered_during_an_unwatched_import_applies_when_it_ends(interpreter):
    interpreter.write({"racing_early.py": "VALUE = 'original'\n",
                       "racing_late.py": "VALUE = 'original'\n"})
    for name, when in (("racing_late", "late"), ("racing_early", "early")):
        result = interpreter.run_json(RACE, args=[name, when])
        # Waiting: the module is not in sys.modules when the patch is registered.
        assert result["before"] == "pending", when
        # Applied once the import let go of the name: by the release lazypatch gave the
        # lock, or by the lock's death when the release was the class's own.
        assert result == {"before": "pending", "status": "applied", "applications": 1,
                          "value": "patched"}, when

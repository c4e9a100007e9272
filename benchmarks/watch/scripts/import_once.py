"""Benchmark process: one import counted whole, the interpreter's exit included.

Run with one JSON argument::

    {"modules": dir, "variant": "plain" | "watched" | "none" | "off", "warm": K}

Every variant registers the same no-op patches (one on ``bm_0``, one on each
of K warm-up modules) with lazypatch's finder installed, and imports the K
warm-up modules first (watched, so that the application machinery is loaded
and its code warmed), then turns the collector off. Then ``plain`` takes the
finder off and imports ``bm_1``, ``watched`` imports ``bm_0`` (its no-op patch
runs), ``none`` imports nothing, ``off`` takes the finder off and imports nothing;
the process exits normally. Callgrind counts the whole process: ``watched`` minus
``none`` is one watched import and what the interpreter's exit does with what it
left behind, ``plain`` minus ``off`` one plain import likewise (taking the finder
off is not part of either), the way an outside measurement sees it (the loop in
``import_loop.py`` sees the imports alone).
"""

import gc
import sys


def no_op_patch(module):
    """A patch that does nothing: what remains is the machinery."""


def main(options):
    sys.path.insert(0, options["modules"])
    import lazypatch
    warm = ["bm_%d" % index for index in range(2, 2 + options["warm"])]
    for name in warm + ["bm_0"]:
        lazypatch.register(no_op_patch, name, name="bench." + name)
    lazypatch.install()
    for name in warm:
        __import__(name)
    variant = options["variant"]
    if variant in ("plain", "off"):
        lazypatch.uninstall()
    gc.disable()
    if variant == "watched":
        __import__("bm_0")
    elif variant == "plain":
        __import__("bm_1")


if __name__ == "__main__":
    import json
    main(json.loads(sys.argv[1]))

"""Benchmark process: set up import hooks, then import N generated tiny modules.

Run by the benchmarks in the clean venv with one JSON argument::

    {"modules": dir, "count": N, "lazypatch": "none" | "auto" | "core",
     "finder": true, "watch": "none" | "lazypatch" | "lazypatch-disabled" | "wrapt",
     "extra_patches": K, "import": true, "wrapt": false,
     "trivial_finder": false, "finder_after": false}

and prints ``{"register_s": ..., "import_s": ...}`` as its last line: the
seconds spent registering the K extra patches, and importing the N modules
(both timed inside the process, so that start-up noise stays out).
``"finder_after": true`` puts a do-nothing finder after lazypatch's, before the
import system's own, where setuptools' ``_distutils_hack`` sits in most venvs.
Setting ``"import": false`` runs the same set-up without the imports, which
callgrind runs subtract to count the imports' instructions alone.
"""

import gc
import os
import sys
from importlib.machinery import BuiltinImporter
from time import perf_counter


def no_op_patch(module):
    """A patch (and a wrapt hook) that does nothing: what remains is the machinery."""


class DoNothingFinder:
    """The cheapest possible Python finder: the floor any meta_path finder pays."""

    def find_spec(self, fullname, path=None, target=None):
        return None


def main(options):
    sys.path.insert(0, options["modules"])
    names = ["bm_%d" % index for index in range(options["count"])]
    lazypatch = None
    if options["lazypatch"] == "auto":
        import lazypatch
        import lazypatch.auto  # noqa: F401  every built-in pack, as users activate it
    elif options["lazypatch"] == "core":
        import lazypatch
    if options.get("wrapt"):
        import wrapt  # noqa: F401  imported on both sides of a wrapt comparison
    if options["watch"] in ("lazypatch", "lazypatch-disabled"):
        # "lazypatch-disabled": the target is watched but its patch is off, so the
        # import pays for the finder, the loader proxy and the dispatch only,
        # everything that happens before a patch itself runs.
        for name in names:
            lazypatch.register(no_op_patch, name, name="bench." + name,
                               enabled=options["watch"] == "lazypatch")
    elif options["watch"] == "wrapt":
        import wrapt
        for name in names:
            wrapt.register_post_import_hook(no_op_patch, name)
    register_s = 0.0
    extra = options.get("extra_patches", 0)
    if extra:
        started = perf_counter()
        for index in range(extra):
            lazypatch.register(no_op_patch, "bench_never_imported_%d" % index,
                               name="bench.extra_%d" % index)
        register_s = perf_counter() - started
    if lazypatch is not None:
        if options["finder"]:
            lazypatch.install()
        else:
            lazypatch.uninstall()
        # The application machinery (and the ledger) load once, on the first watched
        # import, not at activation; that one-time load is set-up, not a per-import cost.
        import lazypatch.apply.application  # noqa: F401
    if options.get("finder_after"):
        # A plain import asks each finder inside the import lock; lazypatch's finder asks
        # those after it directly: each one there widens the plain side more (COSTS.md).
        sys.meta_path.insert(sys.meta_path.index(BuiltinImporter), DoNothingFinder())
    if options.get("trivial_finder"):
        sys.meta_path.insert(0, DoNothingFinder())
    # The collector would run at points that depend on how many objects each
    # side allocated, adding bumps of ~100k instructions that are not the
    # imports' cost; with it off, instruction counts grow exactly linearly.
    gc.disable()
    import_s = 0.0
    if options["import"]:
        started = perf_counter()
        for name in names:
            __import__(name)
        import_s = perf_counter() - started
    print('{"register_s": %r, "import_s": %r}' % (register_s, import_s))
    # Skip interpreter teardown (clearing N modules) for the same reason.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    import json
    main(json.loads(sys.argv[1]))

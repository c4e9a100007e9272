"""lazypatch's start-up hook for ``lazypatch run`` (imported by ``site``).

``lazypatch run`` puts this file's directory first on ``PYTHONPATH``, so
Python imports it as ``sitecustomize`` in the command and in every Python
child that inherits the environment. It:

1. takes its own directory off ``sys.path`` again, so the program sees the
   path it would have seen without lazypatch (and no empty entry or current
   directory is ever added);
2. activates lazypatch with the same routine as ``import lazypatch.auto``,
   unless this interpreter is not the one ``lazypatch run`` was started with
   (``LAZYPATCH_RUN_PYTHON`` records its ``sys.prefix`` and implementation):
   a child running another Python or another environment is left alone;
3. chains to the user's own ``sitecustomize`` further on ``sys.path``, so that
   both run, lazypatch first.

Nothing here may raise into ``site``: a failure of lazypatch becomes one line
on stderr and the program runs unpatched. The syntax stays plain (no
f-strings) because another interpreter may parse this file too.
"""


def _lazypatch_identity():
    import sys
    return "%s|%s" % (sys.prefix, sys.implementation.cache_tag)


def _lazypatch_activate(this_module):
    import os
    import sys
    expected = os.environ.get("LAZYPATCH_RUN_PYTHON")
    if expected and expected != _lazypatch_identity():
        return   # another interpreter or environment: not ours to patch
    try:
        from lazypatch.activate.activation import activate
    except ImportError:
        return   # lazypatch is not installed for this interpreter
    try:
        activate("lazypatch run")
    except Exception as error:   # activation warns rather than raising; be safe anyway
        sys.stderr.write("lazypatch: activation failed, running unpatched: %s: %s\n"
                         % (type(error).__name__, error))


def _lazypatch_chain(this_module, here):
    """Import the user's own sitecustomize, searching sys.path without our directory."""
    import sys
    del sys.modules["sitecustomize"]
    try:
        import sitecustomize  # noqa: F401  (the user's, now that ours is off the path)
    except ImportError as error:
        if getattr(error, "name", None) != "sitecustomize":
            raise   # the user's sitecustomize exists and failed: let site report it
        # No user sitecustomize: the import system expects this module back.
        sys.modules["sitecustomize"] = this_module
    # On success the import system returns the user's module for `import
    # sitecustomize`, exactly as without lazypatch.


def _lazypatch_bootstrap():
    import os
    import sys
    this_module = sys.modules[__name__]
    here = os.path.dirname(os.path.abspath(__file__))

    def ours(entry):
        try:
            return bool(entry) and os.path.abspath(entry) == here
        except (TypeError, ValueError):
            return False
    sys.path[:] = [entry for entry in sys.path if not ours(entry)]
    importer_cache = getattr(sys, "path_importer_cache", {})
    importer_cache.pop(here, None)
    try:
        _lazypatch_activate(this_module)
    finally:
        _lazypatch_chain(this_module, here)


if __name__ == "sitecustomize":
    _lazypatch_bootstrap()

"""Programs that ``runpy`` runs (``python -m pkg.mod``, ``runpy.run_module``), with patches.

runpy asks the spec's loader for ``get_code`` and executes the code itself in
``__main__``'s namespace: ``exec_module`` never runs, so the loader proxy's
usual way in is never taken. ``LoaderProxy.get_code`` (``loaders.py``) answers
runpy, and only runpy, with a small code object that runs the real code through
``run_body`` with the module's patches. Imported only when a watched module is
run that way: it is not on the activation path (benchmarks/COSTS.md).
"""

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Optional


class ProgramCodeGetter:
    """``proxy.get_code``: the real code for everybody but ``runpy``, which gets code
    that runs the patches around the real code (``program_code``)."""

    __slots__ = ("proxy", "get_code")

    def __init__(self, proxy: "Any", get_code: "Callable[[str], Any]") -> None:
        self.proxy = proxy
        self.get_code = get_code

    def __call__(self, fullname: str) -> "Any":
        code = self.get_code(fullname)
        # runpy (python -m, run_module) executes what it gets in a namespace of its
        # own, bypassing exec_module. Other callers (coverage, pkgutil, debuggers)
        # want the module's real code object: only runpy's own call is answered
        # with the patching one.
        if code is None or sys._getframe(1).f_globals.get("__name__") != "runpy":
            return code
        return program_code(code, fullname, self.proxy._lazypatch_loader,
                            self.proxy._lazypatch_run_body)


# key -> (real code, module name, real loader, run_body) of programs runpy is about to run.
_PROGRAMS: "Dict[int, tuple]" = {}
_program_keys = iter(range(1, 1 << 62))


def program_code(code: "Any", fullname: str, loader: "Any",
                 run_body: "Callable[..., None]") -> "Any":
    """A code object that, executed by runpy in the program's namespace, runs the
    module's patches around ``code`` (``run_program``)."""
    key = next(_program_keys)
    _PROGRAMS[key] = (code, fullname, loader, run_body)
    # A file name of its own: under the program's, a traceback would quote the
    # program's first line for this frame.
    return compile(f"__import__('lazypatch.watch.programs', fromlist=('run_program',))"
                   f".run_program(globals(), {key})", f"<lazypatch: {fullname} with its patches>",
                   "exec")


class ProgramRunner:
    """Stands in for the loader in ``run_body``: executes the program's code in its namespace."""

    __slots__ = ("code", "namespace", "exit")

    def __init__(self, code: "Any", namespace: "Dict[str, Any]") -> None:
        self.code = code
        self.namespace = namespace
        self.exit: Optional[SystemExit] = None

    def exec_module(self, module: "Any") -> None:
        try:
            exec(self.code, self.namespace)
        except SystemExit as exit:
            # A program ending with sys.exit() ran to its end: held back until its
            # patches are done, so that run_body does not roll them back as it
            # would for a failed import (an at-exit report would say "reverted").
            self.exit = exit


def _is_proxy_of(candidate: "Any", loader: "Any") -> bool:
    return getattr(candidate, "_lazypatch_loader", None) is loader


def run_program(namespace: "Dict[str, Any]", key: int) -> None:
    """Run a program's real code in ``namespace`` with the patches of its module name.

    Patches need a module object: runpy's namespace is ``__main__``'s (``python -m``)
    or a temporary module's (``run_module(alter_sys=True)``); a bare dictionary
    (``run_module`` without ``alter_sys``) has none and runs unpatched.
    """
    entry = _PROGRAMS.pop(key, None)
    if entry is None:
        raise RuntimeError("lazypatch: this code object of a program run by runpy was "
                           "already executed once; ask the loader for get_code() again")
    code, fullname, loader, run_body = entry
    # runpy set __loader__ and __spec__.loader to our proxy: the program sees its real
    # loader. (The proxy is recognised by the loader it wraps, not by its class: this
    # module is imported by importer.py's proxy and does not import it back.)
    if _is_proxy_of(namespace.get("__loader__"), loader):
        namespace["__loader__"] = loader
    spec = namespace.get("__spec__")
    if spec is not None and _is_proxy_of(spec.loader, loader):
        spec.loader = loader
    module = sys.modules.get(namespace.get("__name__", ""))
    if module is None or getattr(module, "__dict__", None) is not namespace:
        exec(code, namespace)
        return
    runner = ProgramRunner(code, namespace)
    run_body(runner, module, fullname)
    if runner.exit is not None:
        raise runner.exit

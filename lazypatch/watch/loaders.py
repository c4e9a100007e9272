"""The loader proxy of a watched import whose loader is not one of the path finder's own
file loaders, and the body run with a legacy loader.

Apart from ``importer.py`` because activation never needs it: a watched module found by
the path finder (a source, bytecode or extension file) gets no proxy (``importer``'s
``OWN_LOADER_TYPES``), and loading these with the finder cost every interpreter start
about 160,000 instructions (benchmarks/COSTS.md). The first import that needs a proxy
loads this module (a namespace package, a zip, a frozen or built-in module, a loader of
another finder), also while a program's ``sys.meta_path`` leaves the path finder out
(``importer.LazyPatchFinder.find_spec``). Nothing here imports ``importer.py``, which
imports this module.
"""

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Callable


class LoaderProxy:
    """Wraps a module's real loader; runs patches around ``exec_module``.

    Its ``exec_module`` is the body runner (``application.run_body``) bound to the real
    loader: the import system's call reaches the patches in one Python frame (a method
    of the proxy forwarding to the runner cost every watched import a frame and three
    reads through this class's ``__getattr__``: benchmarks/COSTS.md). The runner puts
    the real loader back on the spec and the module (``importer.put_real_loader_back``).
    Made by ``wrap_spec_loader``, field by field (no Python ``__init__`` to call).

    Every attribute it does not define is forwarded to the real loader
    (``get_code`` for ``runpy``, ``get_resource_reader``, ``is_package``...),
    as wrapt's proxy does. (Elsewhere its type is ``importer.loader_proxy_type()``:
    before this module is loaded, no proxy exists.)
    """

    __slots__ = ("_lazypatch_loader", "_lazypatch_run_body", "create_module", "exec_module")
    _lazypatch_loader: "Any"
    _lazypatch_run_body: "Callable[..., None]"
    create_module: "Callable[[Any], Any]"
    exec_module: "Callable[[Any], None]"

    def __getattr__(self, name: str) -> "Any":
        if name.startswith("_lazypatch_"):   # a half-built proxy (copy, pickle): no recursion
            raise AttributeError(name)
        attribute = getattr(self._lazypatch_loader, name)
        if name == "get_code":
            # Looked up here, not defined on the class, so that a loader without
            # get_code still has none through the proxy. Only runpy needs it
            # (programs.py), so that module is not on the activation path.
            from .programs import ProgramCodeGetter
            return ProgramCodeGetter(self, attribute)
        return attribute

    def __repr__(self) -> str:
        return f"<lazypatch LoaderProxy for {self._lazypatch_loader!r}>"


def _default_module(spec: "Any") -> None:
    """``create_module`` of a proxy whose loader has none: the import system's default."""
    return None


# importlib's own create_module of file loaders (``_LoaderBasics``), which only says "the
# default module" (None); None where the import system is of another shape.
_IMPORTLIB_CREATE = getattr(getattr(sys.modules.get("_frozen_importlib_external"),
                                    "_LoaderBasics", None), "create_module", None)
# The same answer from a C function: the import system calls ``create_module(spec)`` once
# per import, and a Python method costs it a frame (benchmarks/COSTS.md). An unused zip's
# __setstate__ only sets that zip's strict flag from the spec's truth (a ModuleSpec is
# true): it returns None for any spec and keeps no reference to it, at the cost of a
# deque's append, which did the same but loaded the built-in _collections.
_NO_MODULE = zip().__setstate__  # type: ignore[attr-defined]  # (C, not in typeshed)
_new_proxy = object.__new__
# A bound method of a function (types.MethodType, without importing types), as
# importer.py's ``_bound``.
_bound: "Any" = type(_default_module.__get__(0))


def execute_with_loader(module: "Any", loader: "Any") -> None:
    """Run a module's body with its real loader, including legacy load_module loaders."""
    if hasattr(loader, "exec_module"):
        loader.exec_module(module)
    else:
        # Legacy PEP 302 loader (removed in 3.15): it creates and installs its own
        # module object; whatever it leaves in sys.modules is what the importer gets.
        loader.load_module(module.__name__)


def wrap_spec_loader(spec: "Any", run_body: "Callable[[Any, Any], None]") -> "Any":
    """Give ``spec`` a LoaderProxy (idempotent); return the spec."""
    loader = spec.loader
    if isinstance(loader, LoaderProxy):
        return spec
    if loader is None:
        if spec.submodule_search_locations is None:
            return spec  # nothing will execute; nothing to hook
        # A namespace package: no loader and no body. The import system would
        # attach a NamespaceLoader itself (_bootstrap._init_module_attrs); we
        # build the same one so that there is an exec_module to hook.
        from importlib.machinery import NamespaceLoader
        loader = NamespaceLoader.__new__(NamespaceLoader)
        loader._path = spec.submodule_search_locations  # type: ignore[attr-defined]
    proxy = _new_proxy(LoaderProxy)
    proxy._lazypatch_loader = loader
    proxy._lazypatch_run_body = run_body
    proxy.exec_module = _bound(run_body, loader)
    # The real loader's own create_module, called by the import system directly (a method
    # of ours forwarding to it cost every proxied import a Python call), or, where that is
    # importlib's default, a C function giving the same None; attributes read directly
    # (a call of getattr costs more than the read).
    try:
        create = loader.create_module
    except AttributeError:
        create = None
    if create is None:
        proxy.create_module = _default_module
    else:
        try:   # (_IMPORTLIB_CREATE is None: no method's __func__ is)
            default = create.__func__ is _IMPORTLIB_CREATE
        except AttributeError:   # not a method of the loader's class
            default = False
        proxy.create_module = _NO_MODULE if default else create
    spec.loader = proxy
    return spec

"""The import hook: one finder on ``sys.meta_path`` (its loader proxy: ``loaders.py``)."""

# (Told here in comments, not in the module's docstring: a docstring is loaded with the
# module at activation, about 3 instructions a byte: benchmarks/COSTS.md.)
#
# How an import reaches a patch:
#
# 1. ``LazyPatchFinder.find_spec`` is asked about every module not yet in
#    ``sys.modules``. For names no patch watches it returns None after one dict
#    lookup, so unwatched imports cost about one Python call.
# 2. For a watched name it asks the finders *after* itself for the real spec
#    (walking ``sys.meta_path`` itself). A file loader the path finder made for
#    that spec alone gets the body runner as its ``exec_module``, an attribute of
#    the instance (``OWN_LOADER_TYPES``); any other loader is swapped for a
#    ``LoaderProxy`` on ``spec.loader``.
# 3. The import system calls that ``exec_module`` (``application.run_body``),
#    which takes the attribute off (or puts the real loader back), runs the
#    ``before_import`` patches, the real loader's ``exec_module`` (the module
#    body), and then the ``when_imported`` patches on what ``sys.modules``
#    holds at that moment, which is what the importer will hand out.
#
# Why not ``importlib.util.find_spec`` in step 2, as wrapt does: for a
# submodule it imports the parent package, taking the parent's module lock.
# If the parent's ``__init__`` started a thread that imports a watched
# submodule and waits for it, that thread blocks on the lock the waiting
# thread holds (wrapt stalls there; ddtrace hit it with snowflake-connector
# and switched to walking ``sys.meta_path``, DataDog/dd-trace-py#17742). The
# ``path`` argument the import system passes us already is the parent's
# ``__path__``, so no parent import is needed.
#
# Two more ways in, both off the path of ordinary imports:
#
# * Import boundaries (``boundaries.py``): a watched name whose patches include
#   a boundary declaration gets a spec made by that declaration, either before
#   the other finders are asked (a replaced module: its real body must never
#   run) or only when none of them finds the name (a stand-in for a module that
#   is not installed). The module then goes through ``run_body`` like any other.
# * Programs run by ``runpy`` (``python -m pkg.mod``, ``runpy.run_module``):
#   runpy asks the spec's loader for ``get_code`` and executes the code itself
#   in ``__main__``'s namespace; ``exec_module`` never runs. ``LoaderProxy``
#   answers runpy's ``get_code`` with a small code object that runs the real
#   code through ``run_body`` (``programs.py``).

import sys
from _thread import get_ident

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple


# The file loaders of the path finder (``FileFinder``), which makes a new one for each spec
# it returns (``loader_class(fullname, path)``): such an instance is used by that one
# import only. So for a watched import, ``run_body`` becomes its ``exec_module`` (bound to
# ``SPEC_LOADER``: one method object for every import) by an
# attribute of the instance over its class's method (``watched_spec_finder``), cheaper
# than a ``LoaderProxy``: no object to build, no attribute read through a proxy, and the
# module's ``__loader__`` and ``__spec__.loader`` are the real loader all along.
# ``run_body`` takes it off first thing (``take_shadow_off``), so that the body runs with
# the loader's own method. One attribute only: a second one turns the instance's values
# into a dict of their own (CPython 3.11 keeps room for one more name), which costs more
# than the proxy saves (benchmarks/COSTS.md).
_EXTERNAL = sys.modules.get("_frozen_importlib_external")
# The import system's path finder, which finds lazypatch's own modules (LazyPatchFinder's
# class method stands in for it while a program's sys.meta_path leaves it out).
_PATH_FINDER = getattr(_EXTERNAL, "PathFinder", None)
_OWN_PREFIX = "lazypatch."
OWN_LOADER_TYPES: "tuple" = tuple(
    getattr(_EXTERNAL, name) for name in ("SourceFileLoader", "SourcelessFileLoader",
                                          "ExtensionFileLoader") if hasattr(_EXTERNAL, name))


class _SpecLoader:
    """The type of ``SPEC_LOADER``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<the loader of the module's own spec>"


# The ``loader`` a file loader's shadow ``exec_module`` passes to ``run_body``: "the loader
# the module's spec names", which is that loader. One bound method serves every import
# (``LazyPatchFinder._run_own_body``): binding ``run_body`` to each loader made a method
# object per watched import, about 1,000 instructions with its deallocation.
SPEC_LOADER: "Any" = _SpecLoader()

# A bound method of a function: ``exec_module(module)`` calls ``run_body(loader, module)``
# (types.MethodType, without importing types).
_bound: "Any" = type(_SpecLoader.__repr__.__get__(SPEC_LOADER))
# The module of LoaderProxy (``wrap_spec_loader``, ``execute_with_loader``): loaded by the
# first watched import whose loader is not one of OWN_LOADER_TYPES, not at activation.
_LOADERS = __name__.rpartition(".")[0] + ".loaders"


def loader_proxy_type() -> "Any":
    """``loaders.LoaderProxy``, or None before that module is loaded: the first proxy made
    loads it, so no proxy exists before. (Read with getattr: another thread may be running
    that module's body right now.)"""
    return getattr(sys.modules.get(_LOADERS), "LoaderProxy", None)


def put_real_loader_back(loader: "Any", module: "Any") -> "Optional[str]":
    """Before a watched body runs: the real ``loader`` in place of its proxy on the
    module's spec and ``__loader__`` (pkgutil, importlib.resources and pickle-style tools
    look at them, and a reload must find the real loader again: it re-runs find_spec and
    gets a new proxy). Returns the imported name when the module is an alias, one that
    exists under another name (the loader's create_module handed it out: six.moves.cPickle
    is pickle): the imported name's patches run on it and its body does not run again;
    None otherwise. (``application.run_body`` does the same, written out.)"""
    spec: "Any" = getattr(module, "__spec__", None)
    proxy: "Any" = getattr(spec, "loader", None)
    if proxy is loader:   # a loader of its own import (OWN_LOADER_TYPES)
        take_shadow_off(loader)
        return spec.name if module.__name__ != spec.name else None
    if proxy.__class__ is not loader_proxy_type() or proxy._lazypatch_loader is not loader:
        return None
    spec.loader = loader
    try:
        if module.__loader__ is proxy:
            module.__loader__ = loader
    except AttributeError:
        pass
    return spec.name if module.__name__ != spec.name else None


def take_shadow_off(loader: "Any") -> None:
    """The loader's own ``exec_module`` again (``OWN_LOADER_TYPES``); nothing for a loader
    without the shadow."""
    if type(loader) in OWN_LOADER_TYPES:
        try:
            del loader.exec_module
        except AttributeError:   # not shadowed
            pass


class LazyPatchFinder:
    """The single lazypatch finder; place it first on ``sys.meta_path``."""

    def __init__(self, watched: "Dict[str, Any]", run_body: "Callable[[Any, Any], None]") -> None:
        # ``watched`` is the catalog's by-target dict itself, shared, so that a
        # registration is visible to the next import without telling the finder.
        self._watched = watched
        self._run_body = run_body
        self._run_own_body = _bound(run_body, SPEC_LOADER)
        # Names with a replacement declared (boundaries.replace_module): their spec
        # comes from the declaration before any other finder is asked.
        self.replaced_names: Dict[str, bool] = {}
        # The spec of a watched name: a closure over this finder (watched_spec_finder).
        self._find_watched = watched_spec_finder(self)
        # The import system looks up ``finder.find_spec`` for every import and calls
        # it: a function in the instance's __dict__ is found without building a bound
        # method, and it reads the watched names from its closure instead of an
        # attribute of self. That is the whole cost of an unwatched import
        # (benchmarks/COSTS.md: at most 300 instructions over a do-nothing finder).
        self.find_spec = _unwatched_fast_path(self, watched)  # type: ignore[method-assign]

    def __repr__(self) -> str:
        return f"<LazyPatchFinder watching {len(self._watched)} module(s)>"

    def __reduce__(self) -> "Any":
        # By reference, as a class on sys.meta_path pickles: unpickled (or copied), it is
        # the finder of the process that reads it (``pickle.dumps(sys.meta_path)``).
        return installed_finder, ()

    def find_spec(self, fullname: str, path: "Optional[Sequence[str]]" = None,
                  target: "Any" = None) -> "Any":
        """The spec of a watched name or a reload, or of lazypatch's own modules."""
        # Instances answer through the same-named function ``__init__`` gives them, and
        # through this method only while the import system's path finder is off an
        # activated process's ``sys.meta_path`` (``_keep_promises``): it finds lazypatch's
        # own modules as that finder does.
        if path is not None and _PATH_FINDER is not None and fullname.startswith(_OWN_PREFIX):
            # A program assigned a list of its own finders: the engine's modules that load
            # when first needed (the machinery at the first watched import, undo, the
            # report...) would fail to import, and the user's import with them.
            spec = _PATH_FINDER.find_spec(fullname, path)
            if spec is not None:
                return spec
        if fullname not in self._watched and target is None:
            return None
        return self._find_watched(fullname, path, target)

    def declare_replacement(self, fullname: str) -> None:
        """From now on, ask the boundaries declared on ``fullname`` first."""
        self.replaced_names[fullname] = True

    def set_run_body(self, run_body: "Callable[[Any, Any], None]") -> None:
        """What loader proxies and shadows made from now on call around a module body."""
        self._run_body = run_body
        self._run_own_body = _bound(run_body, SPEC_LOADER)

    def forget_replacements(self) -> None:
        """No replacement declared any more (``lazypatch.reset()``)."""
        self.replaced_names.clear()

    def _boundary_spec(self, fullname: str, takes_over: bool) -> "Any":
        """The spec of the first enabled boundary declared on ``fullname`` of that kind."""
        for patch in self._watched.get(fullname, ()):
            boundary = boundary_of(patch.function)
            if boundary is not None and patch.enabled and boundary.takes_over is takes_over:
                from .loaders import wrap_spec_loader
                return wrap_spec_loader(boundary.spec(fullname), self._run_body)
        return None


# name -> weak reference to the import system's lock of a module being imported, whose
# ``owner`` is the importing thread (importlib._bootstrap._get_module_lock).
module_locks: "Dict[str, Any]" = getattr(sys.modules.get("_frozen_importlib"),
                                         "_module_locks", {})


def watched_spec_finder(finder: "LazyPatchFinder") -> "Callable[[str, Any, Any], Any]":
    """``finder``'s answer for a watched name: the spec the finders after it find, its
    loader wrapped in a ``LoaderProxy``. A closure: what it reads on every watched import
    is in its cells, not in attributes of the finder (benchmarks/COSTS.md). (Not the
    finder's ``find_spec`` itself: that saves a watched import a frame, about 540
    instructions, but its bigger frame costs every unwatched import about 130.)"""
    replaced = finder.replaced_names
    # name -> the thread searching for it. Another finder may call importlib.util.find_spec
    # from inside its own find_spec (wrapt's does); that walks sys.meta_path again and
    # comes back here for the same name in the same thread: answer None to that inner
    # call. (Another thread's search for the same name, by importlib.util.find_spec, takes
    # the entry over; its end leaves the name unguarded, and a nested search then goes one
    # level deeper before it finds its own entry.)
    searching: "Dict[str, int]" = {}

    def find_watched(fullname: str, path: "Any", target: "Any") -> "Any":
        spec: "Any"
        if replaced and fullname in replaced:
            # A declared replacement (boundaries.replace_module): its real body must never
            # run, so its declaration answers before any other finder is asked.
            spec = finder._boundary_spec(fullname, takes_over=True)
            if spec is not None:
                return spec
        thread = get_ident()
        searcher = searching.setdefault(fullname, thread)
        if searcher is not thread:   # (get_ident's int is new at every call)
            if searcher == thread:
                return None
            searching[fullname] = thread
        try:
            spec = None
            # A copy (a plain-list slice even of a MetaPath, which tuple() would walk item
            # by item): a finder may insert another while we iterate. Ours is usually
            # first, and then left out by the slice itself.
            meta_path = sys.meta_path
            if meta_path and meta_path[0] is finder:
                finders = meta_path[1:]
            else:
                finders = [other for other in meta_path if other is not finder]
            for other in finders:
                try:
                    spec = other.find_spec(fullname, path, target)
                except AttributeError:
                    if hasattr(other, "find_spec"):
                        raise   # raised inside that finder: its error, not a missing method
                    continue    # a legacy find_module-only finder: left to the import system
                if spec is not None:
                    break
        finally:
            searching.pop(fullname, None)
        if spec is None:
            # Not installed: a declared stand-in may provide it (boundaries.stand_in).
            return finder._boundary_spec(fullname, takes_over=False)
        loader = spec.loader
        if type(loader) in OWN_LOADER_TYPES and loader.name == spec.name:
            # A file loader the path finder made for this spec alone: its exec_module
            # shadowed on the instance, no proxy (OWN_LOADER_TYPES says why). Once
            # runpy is loaded (torch loads it), only for the import system's own import of
            # the name in this thread, which holds the name's module lock while it asks
            # the finders: runpy (python -m) asks for a spec without it, and then reads
            # get_code, which only a proxy answers with the patches.
            if "runpy" not in sys.modules:
                loader.exec_module = finder._run_own_body
                return spec
            try:
                importing = module_locks[fullname]().owner == thread
            except Exception:   # no lock (or an import system of another shape)
                importing = False
            if importing:
                loader.exec_module = finder._run_own_body
                return spec
        # Any other loader gets a LoaderProxy (watch/loaders.py: loaded by the first import
        # that needs one, not at activation; found while a program's sys.meta_path leaves
        # the path finder out as well: LazyPatchFinder.find_spec).
        from .loaders import wrap_spec_loader
        return wrap_spec_loader(spec, finder._run_body)
    return find_watched


def _unwatched_fast_path(finder: "LazyPatchFinder", watched: "Dict[str, Any]"
                         ) -> "Callable[..., Any]":
    """``finder.find_spec`` as a plain function: one dict lookup for an unwatched name;
    a watched name goes to ``finder._find_watched``, and so does a reload (the only
    search with a ``target``, the module to execute again): its body then runs through
    ``run_body``, which marks it, so that a patch registered while the reload runs is
    taken back before its body and made again after it (application.apply_to_imported)."""
    find_watched = finder._find_watched
    meta_path = sys.meta_path
    if isinstance(meta_path, MetaPath):
        # A finder put in front of ours later (pytest's assertion rewriter, typeguard's or
        # beartype's import hook) is guarded as it is put there: nothing to check here.

        def find_spec(fullname: str, path: "Optional[Sequence[str]]" = None,
                      target: "Any" = None) -> "Any":
            if fullname not in watched and target is None:
                return None
            return find_watched(fullname, path, target)
        return find_spec

    def checking_find_spec(fullname: str, path: "Optional[Sequence[str]]" = None,
                           target: "Any" = None) -> "Any":
        if sys.meta_path[0] is not finder:
            # Not activated (lazypatch used as a library), so sys.meta_path is the plain
            # list: a finder that moved in front is noticed at the next import that
            # reaches us. It keeps its place; its answers for watched names get our
            # loader (guard_foreign_finders). Read from sys each time: a program may
            # have assigned a new list that holds our finder behind another.
            guard_foreign_finders(finder)
        if fullname not in watched and target is None:
            return None
        return find_watched(fullname, path, target)
    return checking_find_spec


def guard_foreign_finders(finder: "LazyPatchFinder") -> None:
    """Make the finder instances ahead of ours hand watched modules to our loader: their
    ``find_spec`` (an attribute of that instance only) asks them as before, and a spec
    they return for a watched name gets a ``LoaderProxy``. Classes (the import system's
    own finders) and finders already guarded are left alone."""
    meta_path = sys.meta_path
    for foreign in meta_path:
        if foreign is finder:
            return
        _guard(foreign, finder)


def _guard(foreign: "Any", finder: "LazyPatchFinder") -> bool:
    """Guard one finder ahead of ours; whether it is guarded now. A class (the import
    system's own finders: guarding one would change it for every program), a finder
    without ``find_spec`` or one that refuses a new attribute cannot be."""
    if isinstance(foreign, type):
        return False
    try:
        current = getattr(foreign, "__dict__", {}).get("find_spec")
        if isinstance(current, GuardedFindSpec) and current.finder is finder:
            return True
        original = getattr(foreign, "find_spec", None)
        if original is None:
            return False
        if isinstance(current, GuardedFindSpec):   # guarded for an earlier finder
            original = current.original
        foreign.find_spec = GuardedFindSpec(original, finder)
    except Exception:   # __slots__, a read-only object, a raising __getattr__: leave it
        return False
    return True


class GuardedFindSpec:
    """A foreign finder's ``find_spec`` once guarded: its own answer, with a
    ``LoaderProxy`` for a watched name or a reload (a search with a ``target``: its body
    runs through ``run_body``, as our own finder makes it). Pickled (with the finder
    holding it), it is the original ``find_spec``: the unpickled finder is unguarded until
    put ahead again."""

    __slots__ = ("original", "finder")

    def __init__(self, original: "Callable[..., Any]", finder: "LazyPatchFinder") -> None:
        self.original = original
        self.finder = finder

    def __call__(self, fullname: str, path: "Any" = None, target: "Any" = None) -> "Any":
        finder = self.finder
        watched = finder._watched
        if fullname in watched and fullname in finder.replaced_names:
            # A declared replacement is answered before any finder (its real body must
            # never run), also when a finder sits ahead of ours.
            spec = finder._boundary_spec(fullname, takes_over=True)
            if spec is not None:
                return spec
        spec = self.original(fullname, path, target)
        if spec is not None and (fullname in watched or target is not None) \
                and spec.loader is not None:
            from .loaders import wrap_spec_loader
            return wrap_spec_loader(spec, finder._run_body)
        return spec

    def __reduce__(self) -> "Any":
        return _unguarded, (self.original,)


def _unguarded(original: "Callable[..., Any]") -> "Callable[..., Any]":
    return original


def _keeping_promises(name: str) -> "Callable[..., Any]":
    """``MetaPath``'s ``name``: the list's own method, then ``_keep_promises``."""
    method = getattr(list, name)

    def changed(self: "List[Any]", *arguments: "Any", **keywords: "Any") -> "Any":
        result = method(self, *arguments, **keywords)
        _keep_promises(self)
        return result
    changed.__name__ = changed.__qualname__ = name
    changed.__doc__ = method.__doc__
    return changed


# The list's methods that change it: MetaPath's own run _keep_promises after each.
_CHANGING_METHODS = ("insert", "append", "extend", "__iadd__", "__imul__", "__setitem__",
                     "__delitem__", "remove", "pop", "clear", "sort", "reverse")


class MetaPath(list):
    """``sys.meta_path`` once lazypatch is activated: to the import system a list like
    any other (it iterates it with C list iteration, so imports cost the same) that
    keeps lazypatch's promises however the program changes it.
    """

    # After every change (``insert``, ``append``, ``extend``, ``+=``, ``*=``, item and
    # slice assignment, ``del``, ``remove``, ``pop``, ``clear``, ``sort``, ``reverse``)
    # every finder ahead of lazypatch's is guarded at once (``guard_foreign_finders``):
    # a watched module it claims in the very next import still gets its patches, and the
    # foreign finder keeps its place. A finder that cannot be guarded (a class moved
    # ahead by ``sort`` or ``reverse``) gets lazypatch's finder put just ahead of it;
    # lazypatch's finder asks the others in their order, so every import finds what it
    # found before. A change that drops lazypatch's finder puts it back first:
    # ``lazypatch.uninstall()`` is the way to take it off. A new list assigned to
    # ``sys.meta_path`` gets the same at the start of the next import
    # (``check_each_import``). Pickled and copied, it is a plain list.

    __slots__ = ()
    # Hashed by identity, unlike a list: it is a constant of the import system's
    # ``_find_spec`` code once the check is written in (``checked_code``), and a code
    # object's hash hashes its constants.
    __hash__ = object.__hash__  # type: ignore[assignment]

    def __reduce_ex__(self, protocol: "Any") -> "Any":
        return list, (list(self),)

    # Put in the class body's namespace, not set on the class afterwards: each type
    # attribute write costs activation a cache invalidation (about 9,000 instructions
    # for the twelve).
    for _name in _CHANGING_METHODS:
        locals()[_name] = _keeping_promises(_name)
    del _name


_installed: "List[LazyPatchFinder]" = []   # the finder install_finder put on sys.meta_path


def _keep_promises(meta_path: "List[Any]") -> None:
    """After a change to ``sys.meta_path``: lazypatch's finder is on it, and every finder
    ahead of it is guarded (or, where none can be, lazypatch's finder goes ahead)."""
    if not _installed or meta_path is not sys.meta_path or not isinstance(meta_path, list):
        return
    finder = _installed[0]
    # The import system's path finder off the list: lazypatch's own modules are found by
    # the finder's class method meanwhile (LazyPatchFinder.find_spec); back on it, the
    # usual function again (compared by identity: a finder's __eq__ is not called).
    has_path_finder = _PATH_FINDER is None or id(_PATH_FINDER) in map(id, meta_path)
    if has_path_finder is ("find_spec" not in finder.__dict__):
        if has_path_finder:
            finder.find_spec = _unwatched_fast_path(finder, finder._watched)  # type: ignore[method-assign]
        else:   # (pop: two threads may both see the change and switch at once)
            finder.__dict__.pop("find_spec", None)
    for position, foreign in enumerate(meta_path):
        if foreign is finder:
            return
        if not _guard(foreign, finder):
            list.insert(meta_path, position, finder)
            _remove_after(meta_path, finder, position)
            return
    list.insert(meta_path, 0, finder)   # dropped: back first (lazypatch.uninstall() takes it off)


def _remove_after(meta_path: "List[Any]", finder: "Any", position: int) -> None:
    """Remove the first occurrence of ``finder`` after ``position`` (by identity)."""
    for index in range(position + 1, len(meta_path)):
        if meta_path[index] is finder:
            list.__delitem__(meta_path, index)
            return


def guard_the_front(finder: "Optional[LazyPatchFinder]", write_check_in: bool = True) -> None:
    """At activation, before the program runs: ``sys.meta_path`` becomes a ``MetaPath``
    holding the same finders, and each import checks, as it starts, the list the program
    may have put in its place (``check_each_import``, ``write_check_in`` passed on);
    ``finder`` (if made already) reads it from now on. Only activation does this (the
    user asked lazypatch to take part in every import); a library use of lazypatch
    leaves the list object the program has."""
    if type(sys.meta_path) is list:
        sys.meta_path = MetaPath(sys.meta_path)
        if finder is not None:
            finder.find_spec = _unwatched_fast_path(finder, finder._watched)  # type: ignore[method-assign]
    meta_path = sys.meta_path
    check_each_import(meta_path if isinstance(meta_path, MetaPath) else None, write_check_in)


def check_each_import(guarded: "Any", write_check_in: bool = True) -> None:
    """Make every import that looks for a module check ``sys.meta_path`` first
    (``_keep_promises``), unless it is ``guarded``, the ``MetaPath`` that checks each
    change itself: the check written into the import system's ``_find_spec``
    (``checked_code``), or, for another shape of it or without ``write_check_in``, a
    wrapper of it. ``uninstall_finder`` takes either off again."""
    # A program may assign a new list to sys.meta_path (sys.meta_path =
    # list(sys.meta_path)) and then put a finder in front of ours: MetaPath is gone, and
    # that finder would serve the very next watched import unpatched. The import system
    # asks the finders in _frozen_importlib._find_spec, which its own Python code
    # (_find_and_load_unlocked, importlib.util.find_spec) calls at each import that looks
    # for a module. Written into its code, the check costs three bytecodes while
    # sys.meta_path is ``guarded``, no frame; the wrapper costs a frame, about 415
    # instructions per import (benchmarks/COSTS.md: wrapping _find_and_load cost about
    # 1,700, making sys a module subclass that intercepts the assignment 6,200).
    # Activation passes write_check_in=False until its own imports are done: a new code
    # object runs its first calls unspecialised, which its dozen imports would pay.
    bootstrap = sys.modules.get("_frozen_importlib")
    current = getattr(bootstrap, "_find_spec", None)
    original = getattr(current, "__lazypatch_original__", current)
    # The import system's own code, also where the check is written in already (a second
    # call writes it again, for the list it is given now).
    written_in = _originals[0][1] if _originals and _originals[0][0] is original else None
    code = written_in or getattr(original, "__code__", None)
    if code is None or code.co_argcount != 3:
        return   # an import system of another shape: MetaPath alone
    if written_in is not None and original.__code__.co_consts[-2] is guarded:  # type: ignore[union-attr]
        bootstrap._find_spec = original  # type: ignore[union-attr]
        return   # written in already, for this list (a new code would run unspecialized)
    if write_check_in or written_in is not None:
        checked = checked_code(code, guarded, _check_front)
        if checked is not None:
            _originals[:] = [(original, code)]
            original.__code__ = checked  # type: ignore[union-attr]
            bootstrap._find_spec = original  # type: ignore[union-attr]  # (our wrapper off)
            return
    if current is not original and getattr(current, "__lazypatch_guarded__", None) is guarded:
        return   # done already, for this list
    checking = _checking_find_spec(original, guarded)  # type: ignore[arg-type]
    if write_check_in:
        # importlib's own file name, so that the import system trims it from tracebacks
        # as it trims its own frames (activation's wrapper lasts only its own imports).
        checking.__code__ = checking.__code__.replace(co_filename=code.co_filename)
    checking.__lazypatch_original__ = original  # type: ignore[attr-defined]
    checking.__lazypatch_guarded__ = guarded  # type: ignore[attr-defined]
    bootstrap._find_spec = checking  # type: ignore[union-attr]


def _check_front() -> None:
    """``_find_spec``'s error for a None ``sys.meta_path``, else the check of its front."""
    # (What the checked code calls when sys.meta_path is not the guarded list.)
    meta_path = sys.meta_path
    if meta_path is None:
        raise ImportError(SHUT_DOWN_MESSAGE)
    if _installed:   # (at once when lazypatch's finder is first and the path finder there)
        _keep_promises(meta_path)


def _checking_find_spec(find_spec: "Callable[..., Any]", guarded: "Any"
                        ) -> "Callable[..., Any]":
    check_front = _check_front   # the written-in check's own (one front check, two ways in)

    def _find_spec(name: str, path: "Any", target: "Any" = None) -> "Any":
        if sys.meta_path is not guarded:
            check_front()
        return find_spec(name, path, target)
    return _find_spec


def installed_finder() -> "LazyPatchFinder":
    """The finder on this process's ``sys.meta_path`` (what a pickled one becomes when
    unpickled), or one that watches nothing."""
    if _installed:
        return _installed[0]
    return LazyPatchFinder({}, _no_body)


def _no_body(loader: "Any", module: "Any", target: "Optional[str]" = None) -> None:
    from .loaders import execute_with_loader
    put_real_loader_back(loader, module)
    execute_with_loader(module, loader)


def install_finder(finder: "LazyPatchFinder") -> None:
    """Put ``finder`` first on ``sys.meta_path``, moving it there if it is elsewhere."""
    _installed[:] = [finder]
    meta_path = sys.meta_path
    if meta_path and meta_path[0] is finder:
        return
    # The list's own methods: MetaPath's would put the finder back as it is removed.
    while finder in meta_path:
        list.remove(meta_path, finder)
    list.insert(meta_path, 0, finder)


def uninstall_finder(finder: "LazyPatchFinder") -> None:
    """Take ``finder`` off ``sys.meta_path``; imports after this are not patched."""
    if _installed and _installed[0] is finder:
        del _installed[:]
        stop_checking_imports()   # nothing left to keep first: imports cost what they did
    while finder in sys.meta_path:
        sys.meta_path.remove(finder)


def stop_checking_imports() -> None:
    """Give the import system back its own ``_find_spec`` (undoes ``check_each_import``)."""
    bootstrap = sys.modules.get("_frozen_importlib")
    for function, code in _originals:   # (check_each_import's)
        function.__code__ = code
    del _originals[:]
    original = getattr(getattr(bootstrap, "_find_spec", None), "__lazypatch_original__", None)
    if original is not None:
        bootstrap._find_spec = original  # type: ignore[union-attr]


# --- the check of the front written into the import system's own _find_spec ------------
# ``check_each_import`` must see, at the start of every import that looks for a module,
# whether a new list was assigned to ``sys.meta_path``. A Python function wrapping
# ``_frozen_importlib._find_spec`` does that at the price of one more frame per import,
# about 415 instructions. Here the check goes into ``_find_spec``'s own code instead: its
# first lines are
#
#     meta_path = sys.meta_path
#     if meta_path is None:
#         raise ImportError("sys.meta_path is None, Python is likely shutting down")
#
# and the new code object has, in their place,
#
#     meta_path = sys.meta_path
#     if meta_path is not <the guarded list>:
#         <_check_front>.__call__()   # raises that ImportError for None, else checks the front
#
# so an import whose ``sys.meta_path`` is still the guarded list runs three bytecodes more
# (a constant, ``is not``, a jump), no frame.
#
# Both objects are constants of the new code, not globals: a name added to
# ``_frozen_importlib``'s namespace changes its keys, and every global read the import
# system's functions had specialized then misses, 53 times each before it specializes
# again: the ~50 imports after activation each cost about 13,000 instructions more
# (benchmarks/COSTS.md, the twelfth pass). A code object's hash hashes its constants
# (caches keyed by code objects: torch._dynamo's), so ``MetaPath`` hashes by identity.
#
# Both versions of those lines are compiled here, by the running interpreter, as the
# templates below: the original's template must equal ``_find_spec``'s first bytes exactly
# (the same opcodes, caches, constants, names and locals), else the code is left alone and
# ``check_each_import`` falls back to the wrapper. The checked template reads the two
# objects as free variables (LOAD_DEREF, one code unit without caches in every version),
# which become constants (LOAD_CONST, the same size); its check is called through
# ``__call__``, whose method load keeps the checked lines longer than the original ones
# (7 code units on 3.11-3.14), as the tables' shifting below needs. The rest of
# ``_find_spec`` is copied unchanged; its jumps are relative, so only the exception
# table (absolute offsets) and the location table (the inserted units) need shifting.
# (Here, not in a module of its own: a module more costs activation about 310,000
# instructions, benchmarks/COSTS.md.)

_GUARDED_NAME = "_lazypatch_front_guarded"
_CHECK_NAME = "_lazypatch_check_front"
_END_NAME = "_lazypatch_region_end"
# The import system's message for a meta_path of None (the original's template has it).
SHUT_DOWN_MESSAGE = "sys.meta_path is None, Python is likely shutting down"


def _original_template(name, path, target=None):
    """Find a module's spec."""
    meta_path = sys.meta_path
    if meta_path is None:
        raise ImportError("sys.meta_path is None, Python is likely shutting down")
    # Marks the region's end; the None keeps the constants numbered as in _find_spec,
    # whose later code uses None.
    return _lazypatch_region_end(None)  # noqa: F821


def _checked_template() -> "Any":
    # The checked lines' template, as the code of a closure: its two objects are free
    # variables (checked_code makes them constants).
    _lazypatch_front_guarded = _lazypatch_check_front = None

    def checked(name, path, target=None):
        meta_path = sys.meta_path
        if meta_path is not _lazypatch_front_guarded:
            _lazypatch_check_front.__call__()
        return _lazypatch_region_end(None)  # noqa: F821
    return checked.__code__


# How ``checked_code`` reads the checked template. The same bytes mean the same names,
# constants and locals at the same indices, so the checked lines read them by those
# indices too; its first unit, COPY_FREE_VARS, is left out (``_find_spec`` has no cells).
# The opcodes are the running interpreter's: the checked lines equal the original ones up
# to the guarded list's load, a LOAD_DEREF (the first differing byte, the highest set bit
# of the two read as integers and XORed), and the original template's region end loads
# None right after its LOAD_GLOBAL's caches (zero bytes): a LOAD_CONST. The check's
# ``__call__`` is loaded right after the check (LOAD_METHOD; LOAD_ATTR with the method bit
# from 3.12) by the template's index of the name, which becomes ``_find_spec``'s last.
# C operations, not Python loops: this runs once, at activation, unspecialized.


def checked_code(original: "Any", guarded: "Any", check: "Callable[[], None]"
                 ) -> "Optional[Any]":
    """``_find_spec``'s code with the front check written in (``sys.meta_path`` compared
    with ``guarded``, ``check`` called where it is another), or None (another shape)."""
    template, checked = _original_template.__code__, _checked_template()
    expected, replacement, code = template.co_code, checked.co_code, original.co_code
    global_opcode = expected[2]   # the LOAD_GLOBAL of ``sys`` after RESUME
    # Where each template's region ends: its LOAD_GLOBAL (NULL + _lazypatch_region_end).
    end = _instruction(expected, global_opcode, template.co_names.index(_END_NAME) << 1 | 1)
    new_end = _instruction(replacement, global_opcode, checked.co_names.index(_END_NAME) << 1 | 1)
    constants, names = original.co_consts, original.co_names + ("__call__",)
    if (end <= 0 or new_end < end + 2 or code[:end] != expected[:end] or len(names) > 127
            or replacement[2:4] != expected[:2] or len(constants) > 254):   # (EXTENDED_ARG)
        return None
    region = bytearray(replacement[2:new_end])
    difference = int.from_bytes(region[:end], "big") ^ int.from_bytes(expected[:end], "big")
    guard = end - 1 - (difference.bit_length() - 1) // 8
    tail = expected[end + 2:]
    load_const, load_deref = expected[end + 2 + len(tail) - len(tail.lstrip(b"\0"))], region[guard]
    first_free, offset = len(checked.co_varnames) + len(checked.co_cellvars), 0
    for index, name in ((len(constants), _GUARDED_NAME), (len(constants) + 1, _CHECK_NAME)):
        offset = _instruction(region, load_deref, first_free + checked.co_freevars.index(name))
        if offset < guard or guard % 2:
            return None
        region[offset:offset + 2] = bytes((load_const, index))
    call_index, call = checked.co_names.index("__call__"), len(names) - 1
    if region[offset + 3] not in (call_index, call_index << 1 | 1):
        return None
    region[offset + 3] = call if region[offset + 3] == call_index else call << 1 | 1
    shift = (len(region) - end) // 2   # in code units
    exceptions = _shifted_exception_table(original.co_exceptiontable, end // 2, shift)
    if exceptions is None or not 0 < shift <= 8:
        return None
    # The location table gets an entry of ``shift`` units in front, on the first line
    # ("no column", line + 0): every later unit keeps its line, and the region's units
    # are labelled a few units off, harmlessly (no loop over the table at activation).
    locations = bytes((128 | 13 << 3 | shift - 1, 0)) + original.co_linetable
    return original.replace(co_code=bytes(region) + code[end:], co_names=names,
                            co_consts=constants + (guarded, check),
                            co_exceptiontable=exceptions, co_linetable=locations,
                            co_stacksize=max(original.co_stacksize, checked.co_stacksize))


def _instruction(raw: "Any", opcode: int, argument: int) -> int:
    """Byte offset of the first instruction ``opcode argument`` in ``raw``, or -1."""
    # (An even offset is an instruction, an odd one an operand; a cache unit is 0 0.)
    pair = bytes((opcode, argument))
    offset = raw.find(pair)
    while offset > 0 and offset % 2:
        offset = raw.find(pair, offset + 1)
    return offset


# Translation tables over a byte's value: 1 where it starts an entry of the exception
# table (bit 128), where its chunk says "more" (bit 64), where its 6-bit chunk is 0.
_ENTRY_STARTS = b"\x00" * 128 + b"\x01" * 128
_HAS_MORE = (b"\x00" * 64 + b"\x01" * 64) * 2
_ZERO_CHUNK = (b"\x01" + b"\x00" * 63) * 4


def _shifted_exception_table(table: bytes, end: int, shift: int) -> "Optional[bytes]":
    """Every start and target moved by ``shift`` units, or None (``end`` past 63, where
    one could be before it)."""
    # None too for a start or target not of two 6-bit chunks (the table keeps its length)
    # and for a size of more than two (the target is looked for one or two bytes after it).
    # An entry: start, size, target, depth and lasti, each big-endian 6-bit chunks with 64
    # meaning "more"; 128 marks an entry's first byte. This runs once, at activation,
    # unspecialised: a Python loop over the entries cost about 100,000 instructions, so
    # the whole table is one big-endian integer and each step a C operation on all of
    # its entries at once (a byte is 8 bits: ``>> 8`` names the next byte).
    starts = int.from_bytes(table.translate(_ENTRY_STARTS), "big")
    more = int.from_bytes(table.translate(_HAS_MORE), "big")
    two_byte_sizes = starts & more << 16
    lows = starts >> 8 | two_byte_sizes >> 40 | (starts ^ two_byte_sizes) >> 32
    highs = lows << 8   # each start's and target's chunks: 64 + high chunk, low chunk
    zero_chunks = int.from_bytes(table.translate(_ZERO_CHUNK), "big")
    # (A high chunk is never 0, so every value is 64 or more: none before ``end``.)
    if (end >= 64 and starts) or more & highs != highs or more & lows or zero_chunks & highs:
        return None
    size = len(table)
    moved = int.from_bytes(table, "big") + lows * shift
    # A low chunk past 63 now has bit 64: 192 more carries it into its high chunk.
    carries = int.from_bytes(moved.to_bytes(size, "big").translate(_HAS_MORE), "big") & lows
    moved += carries * 192
    if moved >> 8 * size:
        return None
    shifted = moved.to_bytes(size, "big")
    more = int.from_bytes(shifted.translate(_HAS_MORE), "big")
    if more & highs != highs or more & lows:   # a value moved past 4095
        return None
    return shifted


_originals: "List[Tuple[Any, Any]]" = []   # (the function, its own code) while installed


# --- stand-ins declared without loading boundaries.py ---------------------------------
# ``lazypatch.stand_in`` declares a stand-in for a top-level module not imported yet as
# a plain function carrying ``lazypatch_deferred`` (see ``_deferred_stand_in`` in
# lazypatch/__init__.py): the boundary is made on first need, which is when the finder
# asks for it here.

# The tag every import boundary carries (boundaries.py imports it from here).
BOUNDARY_TAG = "import-boundary"


def boundary_of(function: "Any") -> "Optional[Any]":
    """The boundary a patch function declares (made now if it was deferred), or None."""
    boundary = getattr(function, "lazypatch_boundary", None)
    if boundary is None:   # a deferred stand-in: its boundary is made now
        deferred = getattr(function, "lazypatch_deferred", None)
        if deferred is not None:
            deferred()
            boundary = getattr(function, "lazypatch_boundary", None)
    return boundary

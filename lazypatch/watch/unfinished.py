"""Patches registered while their target module is not finished yet: still executing,
being imported by another thread, or an unloaded ``importlib.util.LazyLoader`` module.

Apart from ``importer.py`` because only a registration that meets such a module runs
this: the finder, on every activation's path, does not carry it (benchmarks/COSTS.md).
"""

import sys
from _thread import get_ident
from _weakref import ref as weak_reference

from ..slots import is_unloaded_lazy_module
from .loaders import wrap_spec_loader

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Callable, Iterable, List, Optional


def call_each(callbacks: "Iterable[Callable[[], None]]") -> None:
    """Call every callback, even when one raises; then raise the first exception met.

    Deferred applications run in whichever thread ends the body or releases the lock:
    a patch raising there (KeyboardInterrupt, or any error in strict mode) must not
    leave the patches deferred after it unapplied for good.
    """
    failure: "Optional[BaseException]" = None
    for callback in callbacks:
        try:
            callback()
        except BaseException as error:   # noqa: B036 (raised once all have run)
            if failure is None:
                failure = error
    if failure is not None:
        raise failure


def defer_until_executed(module: "Any", callback: "Callable[[], None]", lock: "Any") -> bool:
    """Call ``callback`` once ``module``'s body has finished executing.

    Used when a patch is registered while its target is still executing (a
    plugin registering a patch from inside the target's own import, or another
    thread). The import system marks the end of execution by setting
    ``spec._initializing = False`` in a ``finally`` (``_bootstrap._load_unlocked``);
    we give that one spec object a subclass whose ``_initializing`` setter
    runs the callbacks, then restore the original class. Zero cost for every
    other import, and no profiling or tracing hook.

    ``lock`` (the engine's one lock) makes installing, joining and firing one
    atomic step each, so registrations from many threads never lose a callback.
    Returns False if the module is not in the middle of executing.
    """
    spec = object.__getattribute__(module, "__dict__").get("__spec__")
    with lock:
        if spec is None or not spec.__dict__.get("_initializing", False):
            return False
        pending = spec.__dict__.get("_lazypatch_when_executed")
        if pending is not None:
            pending.append(callback)
            return True
        original_class = type(spec)
        callbacks = [callback]

        class _SpecAwaitingExecution(original_class):  # type: ignore[misc, valid-type]
            @property
            def _initializing(self) -> bool:
                return self.__dict__.get("_initializing", False)

            @_initializing.setter
            def _initializing(self, value: bool) -> None:
                self.__dict__["_initializing"] = value
                if value:
                    return
                with lock:
                    self.__class__ = original_class
                    self.__dict__.pop("_lazypatch_when_executed", None)
                    ready = list(callbacks)
                call_each(ready)   # outside the lock: they apply patches

        spec.__dict__["_lazypatch_when_executed"] = callbacks
        spec.__class__ = _SpecAwaitingExecution
        # The importing thread may have finished between our check and the class
        # swap, writing the plain attribute: then nobody will call the setter.
        if not spec.__dict__.get("_initializing", False):
            spec.__class__ = original_class
            spec.__dict__.pop("_lazypatch_when_executed", None)
            return False
        return True


def defer_until_import_released(name: str, callback: "Callable[[], None]", lock: "Any",
                                held_by_another_thread: bool = False) -> bool:
    """If an import of ``name`` holds its module lock right now (only another thread's, with
    ``held_by_another_thread``), call ``callback`` once that lock is released; return
    whether it will.

    The gap this closes: a thread imports ``name`` and our finder answers "not
    watched"; another thread then registers a patch on ``name`` before the module
    object reaches ``sys.modules``. Registration sees no module, and the import
    runs with the plain loader: without this, the patch would stay pending
    although its target is imported. The import system holds a per-name
    ``_ModuleLock`` from before the finders run until the module is complete;
    as with the spec in ``defer_until_executed``, we give that one lock object a
    subclass whose ``release`` runs the callbacks once the lock is free, and the lock's
    death runs any still waiting (a release looked up before the swap).
    The same lock is the one sign left of another thread's import still running the
    body of a module already in ``sys.modules`` after ``importlib.reload`` gave it a new
    ``__spec__`` (reload does so before it waits for that lock).
    Any other Python whose import locks look different simply gets False.
    """
    bootstrap = sys.modules.get("importlib._bootstrap")
    locks = getattr(bootstrap, "_module_locks", None)
    if not isinstance(locks, dict) or name not in locks:
        return False   # the common case: nobody is importing it
    with lock:
        reference = locks.get(name)
        module_lock: "Any" = reference() if reference is not None else None
        owner = getattr(module_lock, "owner", None)
        if owner is None or not hasattr(module_lock, "__dict__") \
                or (held_by_another_thread and owner == get_ident()):
            return False
        pending = module_lock.__dict__.get("_lazypatch_when_released")
        if pending is not None:
            pending.append(callback)
            return True
        return _call_after_release(module_lock, callback, lock)


def _call_after_release(module_lock: "Any", callback: "Callable[[], None]", lock: "Any") -> bool:
    """Give ``module_lock`` (held by an import, ``lock`` held by the caller) a class whose
    ``release`` calls ``callback`` once the lock is free, and a weak reference that calls
    it when the lock dies if no release did; False if it was released meanwhile."""
    original_class = type(module_lock)
    callbacks = [callback]

    def take_all() -> "List[Callable[[], None]]":   # (the caller holds the lock)
        ready = list(callbacks)
        del callbacks[:]   # each runs once: by the release or by the lock's death
        return ready

    class _LockAwaitingRelease(original_class):  # type: ignore[misc, valid-type]
        def release(self) -> None:
            original_class.release(self)
            with lock:
                if self.owner is not None or type(self) is original_class:
                    return   # still held (re-entered), or already handled
                self.__class__ = original_class
                self.__dict__.pop("_lazypatch_when_released", None)
                ready = take_all()
            call_each(ready)   # outside the lock: they apply patches

    def on_death(reference: "Any") -> None:
        with lock:
            ready = take_all()
        call_each(ready)

    module_lock.__dict__["_lazypatch_when_released"] = callbacks
    module_lock.__class__ = _LockAwaitingRelease
    if module_lock.owner is None:   # released between our check and the swap
        module_lock.__class__ = original_class
        module_lock.__dict__.pop("_lazypatch_when_released", None)
        return False
    # The importing thread may have looked up ``release`` on the original class just
    # before the swap: that release never calls ours, and no check here can tell it
    # is under way. The lock dies as that import lets go of it (the import system
    # keeps only a weak reference, ``_module_locks``), in the releasing thread, out
    # of every lock: what is still waiting runs then. The reference lives in the
    # lock's own __dict__, which outlives the clearing of its weak references.
    try:
        module_lock.__dict__["_lazypatch_on_death"] = weak_reference(module_lock, on_death)
    except TypeError:   # an import system whose locks take no weak reference
        pass
    return True


def watch_lazy_module(module: "Any", run_body: "Callable[[Any, Any], None]") -> bool:
    """If ``module`` is an unloaded ``importlib.util.LazyLoader`` module, hook its
    eventual load without triggering it; return whether it was one."""
    if not is_unloaded_lazy_module(module):
        return False
    # _LazyModule.__getattribute__ loads the module on any attribute access,
    # so read its namespace through object.__getattribute__.
    spec = object.__getattribute__(module, "__dict__").get("__spec__")
    if spec is not None and spec.loader is not None:
        wrap_spec_loader(spec, run_body)
    return True

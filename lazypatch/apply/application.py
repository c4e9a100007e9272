"""Applying patches to modules, each application a transaction (undo: ``undo.py``).

This is the one place that calls patch functions. The importer calls
``run_body`` around a watched module's execution; registration and
``enable()`` call ``apply_to_imported`` for targets that are already there.

Every application is all-or-nothing:

* A patch that raises an ``Exception`` is rolled back and reported
  ``failed``; the import goes on (strict mode: the import fails with
  ``PatchError``, and every patch this import applied is undone too).
* ``KeyboardInterrupt``, ``SystemExit`` or any other ``BaseException`` raised
  in a patch, in the target's body or while its patches run rolls back what
  this import applied, then propagates exactly as it would without
  lazypatch.
* A patch that was unpatched or disabled by another thread while its
  function ran finds its application stale when its claim ends, and takes it
  back: no patch is live after its ``unpatch()`` took effect.

Threads: a module body runs once under the import system's per-module
lock, so the patches of one import never race each other. A patch is
*claimed* under ``STATE.lock`` before it runs, so no two threads run it at
once; the function itself runs without the lock (see ``state`` for why).
"""

# (No ``from __future__ import annotations``: that statement imports the ``__future__``
# module at run time, 0.55M instructions of a process's first watched import; the
# annotations here are strings or names imported at run time.)
import sys
from _thread import get_ident
from _weakref import ref as _weak_reference
from time import perf_counter

from ..errors import LatePatchWarning, PatchConflictWarning, SkipPatch
from ..slots import ATTRIBUTE, describe_exception
from ..state import (
    AFTER,
    BEFORE,
    DISABLED,
    FAILED,
    PENDING,
    RECORD_CONTEXT,
    RECORD_ENDED,
    RECORD_MODULE,
    RECORD_STARTED,
    RECORD_UNTRACKED,
    REVERTED,
    SKIPPED,
    STATE,
    context_of_record,
)
from ..watch.importer import OWN_LOADER_TYPES as _OWN_LOADER_TYPES
from ..watch.importer import SPEC_LOADER as _SPEC_LOADER
from ..watch.importer import loader_proxy_type as _loader_proxy_type
from .ledger import PatchContext, process_ledger

# Loaded where first needed, not with this module: a process's first watched import
# loads this module, and a no-op application needs none of them (benchmarks/COSTS.md,
# the eighth pass): events.py with selection.py, requirements.py and versions.py (3.9M
# instructions; the rules are ``STATE.events``, None until events.py is loaded), undo.py
# (a reload, a rollback), calls.py with itertools (an application that changed
# something) and unfinished.py (a late application).

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

    from ..state import RegisteredPatch
    from .ledger import Change

# Read on every watched import: bound once here (the state never rebinds them).
_by_target = STATE.catalog.by_target
_claims = STATE.claims
_executing = STATE.executing
_bodies_started = STATE.bodies_started
_ledger = process_ledger()
_lock = STATE.lock
_one_time_ms = STATE.one_time_import_ms_by_thread
_ModuleType = type(sys)
_new_context = object.__new__
_NOTHING_UNTRACKED: "List[str]" = []


def run_body(loader: "Any", module: "Any", target: "Optional[str]" = None,
             # Never passed: the globals a watched import reads, bound as defaults (apply's
             # say why).
             _SPEC_LOADER: "Any" = _SPEC_LOADER, _type_of: "Any" = type,
             _OWN_LOADER_TYPES: "Any" = _OWN_LOADER_TYPES,
             _patches_of: "Callable[..., Any]" = _by_target.get,
             BEFORE: str = BEFORE, AFTER: str = AFTER, _sys: "Any" = sys) -> None:
    """Execute ``module`` with ``loader``, running its patches before and after.

    The ``exec_module`` of a watched import's loader: an attribute of a file loader made
    for that import alone, bound to ``importer.SPEC_LOADER`` (the loader is the one the
    module's spec names) and taken off first (``importer.OWN_LOADER_TYPES``), or a
    ``LoaderProxy``'s, bound to the real loader, which then goes back in place of the
    proxy (``importer.put_real_loader_back``, written out).
    ``target`` names the patches to run when it is not the module's own name: a
    program run by ``python -m pkg.mod`` is module ``__main__`` running the code
    of ``pkg.mod`` (see ``programs.run_program``); an alias (``six.moves.cPickle``)
    is a module imported under a second name (put_real_loader_back says which).

    Another thread's late application must wait for the end of the body
    (``apply_to_imported``): applied to a half-executed module it would record names
    the body has not set yet as absent, and its undo would delete them. An import marks
    the body itself (its spec is ``_initializing``: ``unfinished.defer_until_executed``
    waits for that). Any other execution (a reload, a program run by runpy,
    ``loader.exec_module`` called by hand) is marked here: ``STATE.executing`` holds the
    module object's marker, ``[this thread, callbacks waiting...]``. No lock: the marker
    and its list are handed over with single dict and list operations, which are atomic.
    Runs on every watched import, so the loops are written out here (benchmarks/COSTS.md).
    """
    try:   # (read directly: the import system set both)
        spec = module.__spec__
        proxy = spec.loader
    except AttributeError:   # no spec (None: a program run as a script)
        spec = proxy = None
    if loader is _SPEC_LOADER:
        # An import's own file loader, run_body its exec_module by an attribute of the
        # instance (importer.OWN_LOADER_TYPES, SPEC_LOADER): the spec's loader; the shadow
        # off first, so that the body runs with the loader's own method
        # (importer.take_shadow_off, written out).
        loader = proxy
        if _type_of(loader) not in _OWN_LOADER_TYPES:
            raise ImportError(f"lazypatch: a file loader's exec_module was called for "
                              f"module {module.__name__!r}, whose spec names another loader "
                              f"({loader!r}); call exec_module of the loader its spec names",
                              name=module.__name__)
        try:
            del loader.exec_module
        except AttributeError:   # not shadowed any more (called again by hand)
            pass
    if proxy is loader:   # (an own loader, or any loader its spec names, given directly)
        # The module's name read once (a read of a module's attribute does not specialize):
        # where it is the spec's, the patches of the target, if given, else of that name.
        name = spec.name
        if module.__name__ != name:   # an alias: the imported name's patches
            target = name
        elif target is not None:
            name = target
    elif proxy.__class__ is _loader_proxy_type() and proxy._lazypatch_loader is loader:
        spec.loader = loader
        try:
            if module.__loader__ is proxy:
                module.__loader__ = loader
        except AttributeError:
            pass
        if module.__name__ != spec.name:   # an alias: the imported name's patches
            target = spec.name
        name = module.__name__ if target is None else target
    else:
        name = module.__name__ if target is None else target
    try:
        marked = spec._initializing is True   # (a spec being imported)
    except AttributeError:   # no spec, or one no import is running (_initializing unset)
        marked = False
    waiting: "Optional[List[Any]]" = None
    if not marked:
        key = id(module)   # (not the module: a module class may define __eq__ or no __hash__)
        outer = _executing.get(key)
        started = _bodies_started.get(key, 0) + 1
        waiting = [get_ident()]
        _executing[key] = waiting
        # Counted after the marker is in place: apply_to_imported reads the two in the
        # other order, so a late application that misses the marker sees the count move.
        _bodies_started[key] = started
    # The try starts right after those stores: no Python code and no check for a pending
    # signal runs between them (a forward jump checks none), so an interrupt cannot
    # strand the marker.
    try:
        received = module
        before_applied = False
        try:
            for patch in _patches_of(name, ()):
                if (patch._live or patch.unsettled) and patch.is_applied_to(module):
                    _revert_for_reload(patch, module)
                if patch.phase is BEFORE and patch.enabled:
                    apply(patch, module)
                    before_applied = True
            try:
                execute = loader.exec_module
            except AttributeError:   # a legacy loader (load_module only)
                from ..watch.loaders import execute_with_loader
                execute_with_loader(module, loader)
            else:   # (loaders.execute_with_loader, written out: every import)
                execute(module)
            if before_applied:
                _end_scoped_before_patches(name, module)
            # What sys.modules holds now is what the importer hands out: a module that
            # replaced itself (sys.modules[__name__] = ...) is patched as its replacement.
            # Re-read the catalog: the body may have registered patches on itself. A
            # program (target given) is patched in its own namespace.
            if target is None:
                received = _sys.modules.get(name, module)
            for patch in _patches_of(name, ()):
                if patch.phase is AFTER and patch.enabled:   # (no call for a disabled one)
                    apply(patch, received)
        except BaseException:
            # The import fails (a strict failure, an error in the body, an interrupt):
            # nothing it applied may stay behind on a module nobody will receive.
            _roll_back_import(name, module, received)
            raise
    finally:
        if waiting is not None:
            if outer is None:
                _executing.pop(key, None)
            else:
                _executing[key] = outer   # a body that re-executes itself, nested
            if len(waiting) > 1:
                _run_waiting(waiting)


def _revert_for_reload(patch: "RegisteredPatch", module: "Any") -> None:
    """A reload re-executes the same module object: first take back what ``patch`` did
    to it (each patch before its own re-application; the ledger makes the end state
    independent of that order), so undo never restores objects of the old body."""
    from .undo import revert
    revert(patch, PENDING, "target re-executed (reload); re-applied after it", module)


def _run_waiting(waiting: "List[Any]") -> None:
    """Run the callbacks that waited for the end of a module body, outside any lock (they
    apply patches). Each runs once: here, or in apply_to_imported when it finds the
    marker gone and takes its callback back before this loop reaches it. One that raises
    stops none of the others (``unfinished.call_each``)."""
    from ..watch.unfinished import call_each

    def taken_one_by_one() -> "Iterator[Callable[[], None]]":
        while len(waiting) > 1:
            yield waiting.pop(1)
    call_each(taken_one_by_one())


def _end_scoped_before_patches(target: str, module: "Any") -> None:
    """Undo the applications of ``before_import`` patches that asked for it
    (``patch.revert_after_import()``) now that the body of ``module`` ran."""
    from .undo import revert_context
    for patch in _by_target.get(target, ()):
        if patch.phase == BEFORE:
            for context in list(patch.live):
                if context.module is module and context.revert_after_import_requested:
                    revert_context(patch, context, REVERTED,
                                   f"scoped to the execution of {target!r}; undone when it "
                                   f"finished")


def _roll_back_import(target: str, module: "Any", received: "Any") -> None:
    """The import of ``target`` failed: undo every application of its patches on the
    module objects it made (``received``: what sys.modules held after the body), newest
    patch first; every one is attempted before an interrupt propagates."""
    from .undo import revert
    reason = f"the import of {target!r} failed"
    interrupt: "Optional[BaseException]" = None
    for patch in reversed(_by_target.get(target, ())):
        for applied_to in (module, received) if received is not module else (module,):
            try:
                if (patch._live or patch.unsettled) and patch.is_applied_to(applied_to):
                    revert(patch, REVERTED, reason, applied_to)
            except BaseException as error:  # finish rolling back before anything propagates
                if interrupt is None and not isinstance(error, Exception):
                    interrupt = error
    if interrupt is not None:
        raise interrupt


def run_patches(target: str, module: "Any", phase: str) -> None:
    """Apply every enabled patch of ``phase`` on ``target``, by priority."""
    for patch in _by_target.get(target, ()):
        if patch.phase == phase:
            apply(patch, module)


def apply(patch: "RegisteredPatch", module: "Any", late: bool = False,
          # Never passed: the globals a no-op application reads, bound as defaults. A
          # process's first watched import runs this function unspecialized, where a
          # global read costs about 150 instructions and a local one a few
          # (benchmarks/COSTS.md, the eleventh pass).
          _claim: "Callable[[Any, Any], Any]" = _claims.setdefault,
          _claims: "Dict[Any, Any]" = _claims, _clock: "Callable[[], float]" = perf_counter,
          _one_time_ms: "Dict[int, float]" = _one_time_ms,
          _weak_reference: "Any" = _weak_reference, _type_of: "Any" = type,
          _ModuleType: "Any" = _ModuleType, _NOTHING_UNTRACKED: "Any" = _NOTHING_UNTRACKED,
          _state: "Any" = STATE,
          _copy_namespace: "Callable[[Dict[str, Any]], Dict[str, Any]]" = dict.copy) -> None:
    """Apply one patch to one module object, at most once, as a transaction.

    Never raises for an ordinary failure unless strict mode is on; a
    ``BaseException`` from the patch propagates after its rollback.
    """
    if not patch.enabled:
        return      # the common case of default-off packs: nothing to claim
    # Claim it: dict.setdefault is one atomic operation, so exactly one caller, in any
    # thread, gets its own token back; a claimed patch is being applied right now,
    # perhaps by this very thread: never twice at once. The token is the application's
    # raw record (state.RECORD_*), a list: [module, started, ended, untracked changes,
    # context]. A patch that takes only the module gets no context here (its function can
    # record nothing through one): RegisteredPatch.settle makes it when the patch is read.
    if patch.takes_context:
        # PatchContext.__init__'s fields and empty values, field by field: a class with a
        # Python __init__ costs a watched import 650 instructions more.
        context = _new_context(PatchContext)
        context.name = patch.name
        context._module = module   # (the slot: PatchContext.module is a property)
        empty: "Any" = ()
        context.changes = context.conflicts = context.notes = context.note_providers = \
            context.call_codes = context.not_undoable = empty
        context.revert_after_import_requested = False
        context._ledger = _ledger
    else:
        context = None
    record = [module, 0.0, 0.0, _NOTHING_UNTRACKED, context]
    if _claim(patch, record) is not record:
        return
    try:
        # The raw slot (no settling on the import path): is_applied_to reads both.
        if (patch._live or patch.unsettled) and patch.is_applied_to(module):
            return
        # Written out, not in helpers: on every watched import a Python call costs about
        # as much as the bookkeeping it would separate (benchmarks/COSTS.md).
        generation = patch.generation
        if patch.requires and _unmet_requirement_skips(patch, module):
            return
        # A shallow copy (in C) both detects plain assignments afterwards and keeps
        # the old values alive, so their id()s cannot be reused while we compare.
        plain_module = _type_of(module) is _ModuleType
        if plain_module:
            namespace: "Any" = module.__dict__
            before: "Any" = _copy_namespace(namespace)   # (dict.copy: no method lookup)
        else:
            namespace = _own_namespace(module)
            before = namespace.copy() if _type_of(namespace) is dict else None
        # The one-time import tally is empty until a patch first imports wrapt.
        charged = _one_time_ms.get(get_ident(), 0.0) if _one_time_ms else 0.0
        started = _clock()
        try:
            function = patch.function   # (a slot read: a method lookup would not specialize)
            if context is None:
                function(module)
            else:
                function(module, context)
        except SkipPatch as skip:
            _skipped(patch, context_of_record(patch.name, record), skip, (started, charged))
            return
        except Exception as error:
            _fail(patch, context_of_record(patch.name, record), error, (started, charged))
            return
        except BaseException as error:   # KeyboardInterrupt, SystemExit, GeneratorExit...
            _interrupted(patch, context_of_record(patch.name, record), error, (started, charged))
            raise
        try:
            ended = _clock()
            if _one_time_ms:   # a first import of a heavy dependency is not this patch's time
                started += (_one_time_ms.get(get_ident(), 0.0) - charged) / 1000.0
            # Nothing recorded and the namespace equal to its copy (compared in C): no
            # plain assignment, the usual case; untracked_changes() finds any other.
            try:
                unchanged = (context is None or not context.changes and
                             not context.not_undoable) and before == namespace
            except Exception:   # a changed value whose __eq__ raises: compare by identity
                unchanged = False
            if not unchanged:
                record[RECORD_UNTRACKED] = untracked_changes(before, namespace, module, context)
            elif plain_module:
                # Nothing to undo: the record need not keep the module alive, and
                # a module it holds outlives sys.modules at the interpreter's exit,
                # to be cleared and traversed on its own (PatchContext.module).
                record[0] = _weak_reference(module)   # RECORD_MODULE
            before = None   # the copy goes now: memory follows what changed, not module size
            # The commit, without the lock: the record is written into the patch's
            # fields when first read (RegisteredPatch.settle). ``unsettled`` is only
            # appended to, here, by the thread holding the claim. (The record's indices
            # are written as numbers here, state.RECORD_*: each global read costs the first
            # watched import of a process about 150 instructions, unspecialized.)
            record[1] = started   # RECORD_STARTED
            record[2] = ended     # RECORD_ENDED
            unsettled = patch.unsettled
            if unsettled:
                unsettled.append(record)
            else:
                # The shared empty tuple (a first application), or a list settle emptied:
                # replaced whole, which is safe once empty (settle deletes from the list
                # it read only the records it read there) and cheaper to test than the
                # type (a global and an attribute read, unspecialized on a first import).
                patch.unsettled = [record]
        except BaseException:
            # An interrupt (KeyboardInterrupt from a signal handler) before the commit
            # ended: nothing holds the context's changes, so nothing would undo them.
            _roll_back_in_flight(patch, record, quietly=True)
            raise
        if late or context is not None and context.changes \
                or _state.events is not None and _state.events.active:
            if patch.generation == generation and patch.enabled:   # (stale: taken back below)
                _after_commit(patch, context_of_record(patch.name, record), late)
    finally:
        del _claims[patch]
    # Reached by a committed application only. Unpatched or disabled by another thread
    # since the function started: while the claim was held an undo passed this record
    # over as in flight (RegisteredPatch.settle), and after it a reader may have settled
    # it; _take_back_passed_over tells the two apart under the lock and takes it back
    # either way, so no patch stays live after unpatch() returned
    # (tests/trust/test_threads.py). One check, after the claim, not one inside it too:
    # each read of the patch's fields costs the first watched import of a process
    # about 150 instructions, unspecialized (benchmarks/COSTS.md).
    if patch.generation != generation or not patch.enabled:
        _take_back_passed_over(patch, record)


def untracked_changes(before: "Optional[Dict[str, Any]]", namespace: "Any", module: "Any",
                      context: "Optional[PatchContext]") -> "List[str]":
    """What an application changed that undo cannot reverse: names of ``module`` assigned
    plainly (``before``: the copy of ``namespace`` taken before the patch function ran,
    None where the namespace could not be copied), and what the patch declared
    (``patch.untracked``)."""
    if context is None:   # a patch that takes only the module: it declared nothing
        return _NOTHING_UNTRACKED if before is None else \
            untracked_names(before, namespace, module, ())
    untracked = _NOTHING_UNTRACKED if before is None else \
        untracked_names(before, namespace, module, context.changes)
    if context.not_undoable:
        untracked = untracked + context.not_undoable
    return untracked


def _load_call_tracking(value: "Any") -> "Any":
    """``PatchContext.value_hook`` until calls.py is loaded: the first value a patch puts
    in place loads it (its import sets the ledger's two hooks, as it did when this module
    imported it) and goes through the hook it chose."""
    from . import calls  # noqa: F401  (its import sets PatchContext.value_hook, release_calls)
    hook = PatchContext.value_hook
    return value if hook is None else hook(value)


if PatchContext.value_hook is None:   # calls.py not loaded yet
    PatchContext.value_hook = _load_call_tracking


def _track_calls(patch: "RegisteredPatch", context: PatchContext) -> None:
    """``calls.track``, loaded by the first application that changed something (then it
    is this module's ``_track_calls``)."""
    global _track_calls
    from .calls import track
    _track_calls = track
    track(patch, context)


def _after_commit(patch: "RegisteredPatch", context: PatchContext, late: bool) -> None:
    """What follows an application that changed something, or that is announced: call
    counting, conflicts, the debug log, the late warning, the apply event."""
    if context.changes:
        _track_calls(patch, context)
        for change, others in context.conflicts:
            _record_conflict(change, others)
    _debug("patch %s applied to %s (%d change(s), %.3f ms)", patch.name, patch.target,
           len(context.changes), (context.ended - context.started) * 1000.0)
    if late:
        _warn_late(patch, context)
    if STATE.events is not None and STATE.events.active:
        _applied_event(patch, context)


def _own_namespace(module: "Any") -> "Any":
    """The namespace of a module object of a subclass, read without its attribute hooks:
    a LazyLoader module loads itself on any attribute read."""
    try:
        return object.__getattribute__(module, "__dict__")
    except (AttributeError, TypeError):
        return None


def _unmet_requirement_skips(patch: "RegisteredPatch", module: "Any") -> bool:
    """Whether a requirement of ``patch`` is unmet; then it is reported ``skipped``."""
    from ..decide import events as _events
    from ..decide.selection import unmet_requirement
    reason = unmet_requirement(patch, module)
    if reason is None:
        return False
    with STATE.lock:
        patch.status, patch.reason = SKIPPED, reason
        patch.remember(f"skipped: {reason}")
    _debug("patch %s skipped: %s", patch.name, reason)
    _events.on_skipped(patch, reason)
    return True


def _roll_back_in_flight(patch: "RegisteredPatch", record: "List[Any]",
                         quietly: bool = False, claimed: bool = True) -> bool:
    """Take back an application whose patch was undone or disabled while its function ran
    (or that was interrupted before its commit ended, perhaps before its record was
    appended): its record goes, its changes are undone. While its thread holds the claim
    no reader settles the record; after the claim (``claimed`` False) one may have, and a
    record no longer unsettled is left alone. Whether it was taken back."""
    with STATE.lock:
        unsettled = patch.unsettled
        for position in range(len(unsettled) - 1, -1, -1):
            if unsettled[position] is record:
                del unsettled[position]
                break
        else:
            if not claimed:
                return False
        if not quietly:
            patch.remember("an application in flight was rolled back: the patch was "
                           "unpatched or disabled meanwhile")
    context = record[RECORD_CONTEXT]
    if context is not None:   # (a patch that takes only the module changed nothing undoable)
        _undo_quietly(context)
    return True


def _take_back_passed_over(patch: "RegisteredPatch", record: "List[Any]") -> None:
    """``patch`` was undone or disabled after its application's last check, and the claim
    has ended since. Still unsettled: an undo passed the record over as in flight, so it
    is rolled back here. Settled into ``live`` by a reader since: taken back from there.
    Neither: the undo found it after the claim ended and took it itself."""
    if _roll_back_in_flight(patch, record, claimed=False):
        return
    context = record[RECORD_CONTEXT]
    if context is not None:   # (revert_context does nothing for one no longer live)
        from .undo import revert_context
        revert_context(patch, context, REVERTED,
                       "an application in flight was rolled back: the patch was "
                       "unpatched or disabled meanwhile")


def _applied_event(patch: "RegisteredPatch", context: PatchContext) -> None:
    """The apply event (events.py); ``raise``/``exit`` undo this application first."""
    from ..decide import events as _events
    from .undo import revert_context
    action = _events.on_applied(patch, len(context.changes))
    if action is not None:
        message = _events.applied_message(patch, len(context.changes))
        revert_context(patch, context, REVERTED, f"undone: its apply action is {action!r}")
        _events.act(patch, _events.APPLY, action, message)


# apply writes a record's first three fields by number (see there)
assert (RECORD_MODULE, RECORD_STARTED, RECORD_ENDED) == (0, 1, 2)


def untracked_names(before: "Dict[str, Any]", namespace: "Dict[str, Any]", module: "Any",
                    changes: "Sequence[Any]") -> "List[str]":
    """Names of ``module`` that a patch function changed by plain assignment (not through
    ``patch``): ``before`` is a copy of ``namespace`` taken before it ran, still alive, so
    no id() compared here can have been reused. Only the names are kept, never the copies:
    2,000 patches on a module of 3,000 names held 420 MB when the copies waited for the
    report (each application: two copies of the namespace)."""
    tracked = {change.key for change in changes if change.owner is module}
    # The usual case first, in C: with the tracked names put to their values now, the
    # copy equals the namespace (identical values compare equal without __eq__).
    for key in tracked:
        if key in namespace:
            before[key] = namespace[key]
        else:
            before.pop(key, None)
    try:
        if before == namespace:
            return _NOTHING_UNTRACKED
    except Exception:   # a changed value whose __eq__ raises (an array): compare by identity
        pass
    # (name, id) pairs compared as sets: C speed even for torch's ~1,500 globals. Of a
    # copy: building the sets can run a finalizer, which can switch threads, and another
    # thread's patch may be adding names to this very namespace.
    after = namespace.copy()
    difference = set(zip(before, map(id, before.values()))) ^ \
        set(zip(after, map(id, after.values())))
    # A name another patch recorded while this one ran (a stand-in's submodule imported
    # here binds itself on its parent through its own patch) is undoable, by that patch.
    ledger = process_ledger()
    return sorted(name for name in {name for name, _ in difference} - tracked
                  if not (name in after and ledger.holds(ATTRIBUTE, module, name, after[name])))


def _skipped(patch: "RegisteredPatch", context: PatchContext, skip: SkipPatch,
             started: "Tuple[float, float]") -> None:
    """The patch raised SkipPatch: its changes rolled back, the patch ``skipped``."""
    _undo_quietly(context)
    with STATE.lock:
        patch.duration_ms = _elapsed_ms(started)
        patch.notes = list(context.notes)
        patch.status, patch.reason = SKIPPED, skip.reason
        patch.remember(f"skipped: {skip.reason}")
    if not getattr(skip, "lazypatch_waiting", False):
        from ..decide import events as _events
        _events.on_skipped(patch, skip.reason)


def _interrupted(patch: "RegisteredPatch", context: PatchContext, error: BaseException,
                 started: "Tuple[float, float]") -> None:
    """A KeyboardInterrupt, SystemExit... in the patch: its changes rolled back, the patch
    ``failed``; the caller re-raises."""
    _undo_quietly(context)
    with STATE.lock:
        patch.duration_ms = _elapsed_ms(started)
        patch.status = FAILED
        patch.reason = (f"interrupted by {type(error).__name__}; its "
                        f"{len(context.changes)} change(s) were rolled back")
        patch.remember(f"failed: {patch.reason}")


def _undo_quietly(context: PatchContext) -> "Optional[str]":
    """Roll back a context; return why it was incomplete, or None. Interrupts propagate
    only after every change was attempted (``PatchContext.undo``)."""
    try:
        context.undo()
    except Exception as error:
        return describe_exception(error)
    return None


def _clock_start() -> "Tuple[float, float]":
    """When a patch starts: the time, and how much one-time dependency importing this
    thread has been charged so far (EngineState.import_once)."""
    return perf_counter(), STATE.one_time_import_ms_by_thread.get(get_ident(), 0.0)


def _elapsed_ms(started: "Tuple[float, float]") -> float:
    """The patch's own time since ``started``: a first ``import wrapt`` inside it is a
    one-time cost reported on its own line, not this patch's."""
    clock, charged = started
    imported = STATE.one_time_import_ms_by_thread.get(get_ident(), 0.0) - charged
    return (perf_counter() - clock) * 1000.0 - imported


def _fail(patch: "RegisteredPatch", context: PatchContext, error: Exception,
          started: "Tuple[float, float]") -> None:
    """The patch raised: its changes rolled back, the patch ``failed``, and the failure's
    event acted on."""
    incomplete = _undo_quietly(context)
    rollback_note = f"; rollback incomplete: {incomplete}" if incomplete else ""
    try:
        import traceback
        trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    except Exception:   # a traceback that cannot be formatted must not fail the import
        trace = describe_exception(error)
    with STATE.lock:
        patch.duration_ms = _elapsed_ms(started)
        patch.notes = list(context.notes)
        patch.status = FAILED
        patch.reason = describe_exception(error) + rollback_note
        patch.error = trace
        patch.remember(f"failed: {patch.reason}")
    from ..decide import events as _events
    action = _events.action_for(patch, _events.FAILURE)
    message = (f"lazypatch: patch {patch.name!r} on {patch.target!r} failed and was rolled "
               f"back ({len(context.changes)} change(s) undone): {patch.reason}. "
               f"{_events.consequence(action)}; disable it with LAZYPATCH_DISABLE={patch.name}")
    _events.act(patch, _events.FAILURE, action, message, error)


def _record_conflict(change: "Change", others: "List[Change]") -> None:
    losers = sorted({other.patch_name for other in others})
    text = (f"{change.describe()[len(change.action) + 1:]} is changed by "
            f"{', '.join(repr(name) for name in losers + [change.patch_name])}; "
            f"{change.patch_name!r} wins (applied last)")
    with STATE.lock:
        for name in losers + [change.patch_name]:
            patch = STATE.catalog.by_name.get(name)
            if patch is not None and text not in patch.conflicts:
                patch.conflicts = [*patch.conflicts, text]
    from ..notices import notify  # only on this path: see benchmarks/COSTS.md
    notify(f"lazypatch: conflict: {text}", PatchConflictWarning, stacklevel=4)


def _warn_late(patch: "RegisteredPatch", context: PatchContext) -> None:
    from .references import describe_references
    replaced = [original for _, original in context.replaced_objects()]
    if not replaced:
        return
    rebound = tuple(change.owner for change in context.changes if change.action == "rebind")
    holders = describe_references(replaced, exclude=(context.module,) + rebound)
    patch.late_references = holders
    if holders:
        from ..notices import notify  # only on this path: see benchmarks/COSTS.md
        activation = STATE.activation
        if not activation.activated_by or patch.target in activation.imported_before:
            why = "which was imported before lazypatch was active"
            fix = ("Activate lazypatch earlier (first line: import lazypatch.auto, or "
                   "`lazypatch run`)")
        else:   # active all along: the patch was enabled (a scope, enable()) after the import
            why = "after it was imported (the patch was enabled only then)"
            fix = (f"Enable it before {patch.target} is imported "
                   f"(LAZYPATCH_ENABLE={patch.name})")
        notify(
            f"lazypatch: patch {patch.name!r} was applied to {patch.target!r}, {why}; these "
            f"module globals still hold the original objects: {', '.join(holders)}. {fix}, "
            f"or use patch.setattr(..., rebind=True).", LatePatchWarning, stacklevel=5)


# --- switching patches on and off ------------------------------------------

def _select_or_raise(selectors: "Tuple[str, ...]", caller: str) -> "List[RegisteredPatch]":
    from ..decide.selection import select
    chosen, unmatched = select(selectors)
    if unmatched:
        from ..decide.unmatched_selectors import unmatched_message
        raise KeyError(unmatched_message(unmatched, caller))
    return chosen


def enable(selectors: "Tuple[str, ...]") -> "List[str]":
    """Enable the chosen patches and apply those whose target is imported; their names."""
    from ..decide.selection import set_enabled
    chosen = _select_or_raise(selectors, "enable()")
    with STATE.lock:
        for patch in chosen:
            set_enabled(patch, True, "")
    for patch in chosen:
        apply_to_imported(patch)
    return [patch.name for patch in chosen]


def disable(selectors: "Tuple[str, ...]") -> "List[str]":
    """Keep the chosen patches from applying from now on; their names."""
    from ..decide.selection import set_enabled
    chosen = _select_or_raise(selectors, "disable()")
    with STATE.lock:
        for patch in chosen:
            set_enabled(patch, False, "disabled by disable()")
    return [patch.name for patch in chosen]


# --- registration-time application ---------------------------------------

def apply_to_imported(patch: "RegisteredPatch", late: bool = True) -> None:
    """Apply ``patch`` now if its target is already imported, as the import would have.

    Where a body of the target is running, the application waits for its end and is not
    ``late`` then: it lands as the import's own would have.
    """
    if not patch.enabled:
        return
    from ..watch.unfinished import defer_until_import_released, watch_lazy_module
    module = sys.modules.get(patch.target)
    if module is None:
        # Another thread may be importing it, past our finder but before the module
        # exists; then apply when that import lets go of the name.
        if defer_until_import_released(patch.target, lambda: apply_to_imported(patch),
                                       STATE.lock):
            return
        module = sys.modules.get(patch.target)   # that import may just have finished
        if module is None:
            return
    if watch_lazy_module(module, run_body):
        return  # applied by the proxy when the lazy module really loads
    bodies_started = _bodies_started.get(id(module))   # (before the marker: see run_body)
    if _waits_for_the_body(patch, module):
        return
    if patch.phase == BEFORE:
        with STATE.lock:
            if patch.status == PENDING:
                patch.reason = (f"{patch.target!r} was already imported; runs before its body "
                                f"executes next (reload)")
        return
    apply(patch, module, late=late)
    if _bodies_started.get(id(module)) != bodies_started:
        # A body of the module started (a reload) while the patch was being applied: its
        # take-back of the module's patches missed this application, not recorded yet, and
        # the body may have overwritten what it set. Applied again once that body has run.
        again = lambda: _apply_again_after_the_body(patch, module)  # noqa: E731
        if not _after_another_threads_body(module, again):
            again()


def _apply_again_after_the_body(patch: "RegisteredPatch", module: "Any") -> None:
    """Take back ``patch``'s application to ``module``, made while a body of the module
    ran, and decide again. What the body set stays: undo keeps a value the body put in
    place of the patch's (``Ledger.keep_rebound``); the rest goes back as usual.

    Taken back twice (the reload saw the application after all) is harmless: the second
    take-back finds nothing, or the reload's re-application, which is made again here."""
    if patch.is_applied_to(module):
        from .undo import revert
        for context in patch.live:
            if context.module is module:
                for change in context.live_changes():
                    _ledger.keep_rebound(change)
        revert(patch, PENDING, "a body of its target started (a reload) while it was being "
                               "applied; applied again after that body", module)
    apply_to_imported(patch, late=False)


def _after_another_threads_body(module: "Any", callback: "Callable[[], None]") -> bool:
    """Have ``callback`` run when the body of ``module`` that another thread runs through
    ``run_body`` (a reload) ends; False, keeping nothing, if no such body is running."""
    running = _executing.get(id(module))
    if running is None or running[0] == get_ident():
        return False
    running.append(callback)
    if _executing.get(id(module)) is running:
        return True
    # The body ended meanwhile: take the callback back, unless run_body already ran it.
    try:
        running.remove(callback)
    except ValueError:
        return True
    return False


def _waits_for_the_body(patch: "RegisteredPatch", module: "Any") -> bool:
    """If a body of ``module`` is running (another thread's import or reload, or this
    thread's own import), decide again once it has ended; return whether it will."""
    from ..watch.unfinished import defer_until_executed, defer_until_import_released
    after_the_body = lambda: apply_to_imported(patch, late=False)  # noqa: E731
    if _after_another_threads_body(module, after_the_body):
        return True   # another thread's reload is running the body
    if defer_until_executed(module, after_the_body, STATE.lock):
        return True   # still executing: never patch a half-built module
    # Another thread's import may still run the body of a module whose spec no longer says
    # so: importlib.reload gives the module a new __spec__ before it waits for the lock
    # that import holds. The lock is the sign that is left; once it is released, decide
    # again (the reload may be running the body by then).
    return defer_until_import_released(patch.target, after_the_body, STATE.lock,
                                       held_by_another_thread=True)


def _debug(message: str, *arguments: "Any") -> None:
    """Log at DEBUG on the ``lazypatch`` logger if logging is loaded; never imports it."""
    logging_module = sys.modules.get("logging")
    if logging_module is not None:
        logger = logging_module.getLogger("lazypatch")
        if logger.isEnabledFor(logging_module.DEBUG):
            logger.debug(message, *arguments)


# A finder made before this module loaded calls run_body through registration's
# ``_run_body_first_time``, which imports this module and hands it over at the first
# watched import; loaded by anything else first, this module hands itself over now, so
# that the first watched import pays no import statement, bound method or extra frame.
if STATE.finder is not None and STATE.finder._run_body is not run_body:
    STATE.finder.set_run_body(run_body)


__all__ = ["run_body", "run_patches", "apply", "enable", "disable", "apply_to_imported",
           "DISABLED"]

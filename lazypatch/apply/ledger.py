"""The ledger: every change a patch makes, recorded so that it can be undone exactly.

Undo must be as exact as pytest's ``monkeypatch``: originals are read raw
from the owner's own ``__dict__`` (see ``slots``), and restoring "absent"
deletes again. Several patches may change the same slot; each slot keeps a
stack of live changes, and undoing a change in the middle splices it out
(the change above it inherits its "before" value) instead of writing over a
later patch's value. So patches can be undone in any order and the end
state is the same as undoing them in reverse.

Threads: reading a slot, writing it and pushing the change happen under the
engine's one lock (``state.EngineState.lock``), so two patches changing one
attribute from two threads always leave a stack that undo can unwind to the
original. The lock is held only around those few operations on the user's
objects, never while a patch function or a module body runs.
"""

# (No ``from __future__ import annotations``: it imports the ``__future__`` module at run
# time, and this module loads with a process's first watched import: application.py.)
import sys
from _weakref import ref as _WEAK_REFERENCE  # (the C module: weakref.py is not loaded)

from ..slots import ATTRIBUTE, ITEM, MISSING, describe, own_dict, read_slot, write_slot
from ..state import STATE

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

CALLBACK = "callback"   # an undo action the patch supplied (patch.on_undo)


class Change:
    """One recorded mutation of one slot."""

    __slots__ = ("action", "kind", "owner", "key", "before", "after", "patch_name", "live",
                 "rebinding", "earlier_holders", "last_module_before")

    def __init__(self, action: str, kind: str, owner: "Any", key: "Any", before: "Any",
                 after: "Any", patch_name: str) -> None:
        self.action = action          # setattr, delattr, wrap, rebind, setitem, delitem, provide_module
        self.kind = kind              # ATTRIBUTE, ITEM or CALLBACK
        self.owner = owner            # strong reference while live: keeps id(owner) stable
        self.key = key
        self.before = before
        self.after = after
        self.patch_name = patch_name
        self.live = True
        self.rebinding = False        # made with rebind=True: undo also reaches later copies
        # (id(module), name) that held ``after`` before this change (its home
        # module, say): undo must leave those alone.
        self.earlier_holders: frozenset = frozenset()
        # The newest entry of ``sys.modules`` when a module's attribute was replaced, as
        # (name, reference to the module, whether the reference is weak): modules entered
        # after it were imported while the change was live, and their ``from owner import
        # key`` copied the replacement (see ``_imported_while_live``). The module, not only
        # its name: a name purged and imported again is another place in the order.
        self.last_module_before: "Optional[Tuple[str, Any, bool]]" = None

    @property
    def slot(self) -> "Tuple[str, int, Any]":
        return (self.kind, id(self.owner), self.key)

    def describe(self) -> str:
        if self.kind == CALLBACK:
            return f"on_undo {getattr(self.owner, '__qualname__', self.owner)!r}"
        where = describe(self.owner)
        if self.kind == ITEM:
            return f"{self.action} {where}[{self.key!r}]"
        return f"{self.action} {where}.{self.key}"

    def as_dict(self) -> "Dict[str, Any]":
        return {"action": self.action, "target": describe(self.owner) if self.kind != CALLBACK
                else "on_undo", "key": str(self.key), "live": self.live,
                "replaced": self.before is not MISSING}


class Ledger:
    """Live changes per slot, oldest first, shared by all patches of the process."""

    def __init__(self, lock: "Any") -> None:
        self.lock = lock
        self._stacks: "Dict[Tuple[str, int, Any], List[Change]]" = {}

    def change(self, action: str, kind: str, owner: "Any", key: "Any", value: "Any",
               patch_name: str, record_into: "Optional[List[Change]]" = None
               ) -> "Tuple[Change, List[Change]]":
        """Record a change, then write ``value`` into its slot; return the change and
        the live changes of *other* patches on that slot (a conflict when not empty).

        Recorded first, written second: an asynchronous exception (KeyboardInterrupt
        from a signal handler, SystemExit) can land between any two bytecodes, and a
        write that happened unrecorded could never be undone. ``record_into`` (the
        patch's list of changes) is filled in the same step. If the write fails, the
        record is taken back, unless the slot holds the new value after all (the
        interrupt landed after the write itself): then the record stays, and undo
        puts the old value back. Undoing a recorded change whose write never happened
        writes back the value the slot still has, which is harmless."""
        with self.lock:
            before = read_slot(kind, owner, key)
            change = Change(action, kind, owner, key, before, value, patch_name)
            stack = self._stacks.setdefault(change.slot, [])
            others = [earlier for earlier in stack if earlier.patch_name != patch_name]
            stack.append(change)
            if record_into is not None:
                record_into.append(change)
            try:
                write_slot(kind, owner, key, value)
            except BaseException:
                if read_slot(kind, owner, key) is not value or value is before:
                    self._forget(change, record_into)
                raise
            return change, others

    def _forget(self, change: "Change", record_into: "Optional[List[Change]]") -> None:
        """Take back the record of a change whose write did not happen."""
        stack = self._stacks.get(change.slot, [])
        for records in (stack, record_into or []):
            for position in range(len(records) - 1, -1, -1):
                if records[position] is change:     # identity: records compare by value
                    del records[position]
        if not stack:
            self._stacks.pop(change.slot, None)
        change.live = False

    def undo(self, change: "Change") -> bool:
        """Undo one change exactly, splicing it out if later changes sit on top.

        Returns whether the slot was written (False when a later change keeps it).
        """
        with self.lock:
            if not change.live:
                return False
            stack = self._stacks.get(change.slot, [])
            position = next((index for index, item in enumerate(stack) if item is change), None)
            if position is not None and position + 1 < len(stack):
                above = stack[position + 1]
                above.before = change.before
                if above.action == "wrap" and change.before is not MISSING:
                    # The wrap above wraps what this change put in place: it must
                    # now call what this change replaced.
                    from .wrapping import retarget
                    retarget(above.after, change.after, change.before)
                written = False
            else:
                # Marked undone only once the write succeeded: a failed write
                # leaves the change live, so a later undo can try again.
                write_slot(change.kind, change.owner, change.key, change.before)
                written = True
            if position is not None:
                del stack[position]
                if not stack:
                    del self._stacks[change.slot]
            change.live = False
            return written

    def keep_rebound(self, change: "Change") -> None:
        """Make undoing ``change`` keep what its slot holds now if that is no longer the
        change's value (a module body rebound the name since): it becomes the value to
        restore. Only for the newest change of its slot: one below another answers to it."""
        with self.lock:
            stack = self._stacks.get(change.slot)
            if change.live and stack and stack[-1] is change:
                current = read_slot(change.kind, change.owner, change.key)
                if current is not change.after:
                    change.before = current

    def overwritten(self, change: "Change") -> bool:
        """Whether ``change`` is live, the newest of its slot, and the slot holds something
        else than what it put there: code assigned it since, or a reload lazypatch did not
        see ran the body again. Read from the owner's own namespace (or the mapping), so
        that no descriptor or ``__getattr__`` runs; anything else counts as in effect."""
        if change.kind not in (ATTRIBUTE, ITEM):
            return False
        with self.lock:
            stack = self._stacks.get(change.slot)
            if not change.live or not stack or stack[-1] is not change:
                return False   # undone, or another patch's change sits on top of it
            try:
                if change.kind == ATTRIBUTE and own_dict(change.owner) is None:
                    return False
                return read_slot(change.kind, change.owner, change.key) is not change.after
            except Exception:   # a mapping whose lookup raises: nothing to say
                return False

    def first_original(self, kind: str, owner: "Any", key: "Any") -> "Any":
        """The value the slot held before any live patch touched it."""
        with self.lock:
            stack = self._stacks.get((kind, id(owner), key))
            if stack:
                return stack[0].before
        return read_slot(kind, owner, key)

    def is_patched(self, kind: str, owner: "Any", key: "Any") -> bool:
        return bool(self._stacks.get((kind, id(owner), key)))

    def holds(self, kind: str, owner: "Any", key: "Any", value: "Any") -> bool:
        """Whether the newest live change of that slot is what put ``value`` there."""
        stack = self._stacks.get((kind, id(owner), key))
        return stack is not None and bool(stack) and stack[-1].after is value

    def live_count(self) -> int:
        """How many changes are live in the whole process (0 after a full undo)."""
        with self.lock:
            return sum(len(stack) for stack in self._stacks.values())

    def clear(self) -> None:
        with self.lock:
            self._stacks.clear()


class PatchContext:
    """What a patch function receives as ``patch``: records and undoes its changes.

    Every method makes the change at once and records how to reverse it.
    ``undo()`` reverses all of them, newest first.
    """

    __slots__ = ("name", "_module", "changes", "conflicts", "revert_after_import_requested",
                 "notes", "note_providers", "call_codes", "not_undoable", "_ledger",
                 "started", "ended", "untracked_changes", "__weakref__")
    # Set by application.apply's commit, where the context becomes the application's raw
    # record (see __init__); unset before.
    started: float
    ended: float
    untracked_changes: "List[str]"

    # The process's ledger (``state.STATE.ledger``), set by ``process_ledger`` when
    # it creates it, so that a context made by hand (in a test) records where every
    # patch records; the engine passes it explicitly.
    default_ledger: "Optional[Ledger]" = None
    # How the ledger imports a heavy dependency (wrapt): set by ``process_ledger`` to
    # ``EngineState.import_once``, which keeps a first import's cost out of the
    # patch's time; a plain import for a context made by hand.
    import_dependency: "Callable[[str], Any]" = staticmethod(
        lambda name: __import__(name, fromlist=["_"]))
    # Call tracking's two hooks (set by ``calls``, which the ledger must not import):
    # every value a patch puts in place by setattr/wrap passes through value_hook
    # (a counting wrapper in its wrappers mode), and undo hands a context that
    # counted calls to release_calls.
    value_hook: "Optional[Callable[[Any], Any]]" = None
    release_calls: "Optional[Callable[[PatchContext], None]]" = None

    def __init__(self, name: str, module: "Any", ledger: "Optional[Ledger]" = None) -> None:
        # (application.apply builds the engine's contexts field by field, without this
        # call: a field added here is added there too.)
        self.name = name
        self._module = module
        # Every sequence below is the shared empty tuple until its first entry (a list
        # from then on, made by ``_growing``): most applications record no change and no
        # note, and a watched import pays for every allocation (benchmarks/COSTS.md).
        self.changes: "List[Change]" = ()  # type: ignore[assignment]
        # (change, other patches' live changes on the same slot); reported by the
        # application only if this patch succeeds, since a failure rolls back.
        self.conflicts: "Sequence[Tuple[Change, List[Change]]]" = ()
        self.revert_after_import_requested = False
        self.notes: "List[str]" = ()  # type: ignore[assignment]
        self.note_providers: "List[Callable[[], Any]]" = ()  # type: ignore[assignment]
        # code objects counted for this context (calls.py)
        self.call_codes: "List[Any]" = ()  # type: ignore[assignment]
        # changes made that undo cannot reverse
        self.not_undoable: "List[str]" = ()  # type: ignore[assignment]
        if ledger is None:   # a context made by hand (a test); the engine passes its ledger
            ledger = PatchContext.default_ledger
            if ledger is None:
                raise RuntimeError("PatchContext needs a ledger; import lazypatch first")
        self._ledger: Ledger = ledger
        # ``started``, ``ended`` and ``untracked_changes`` stay unset until application.apply's
        # commit, where the context becomes the application's raw record (read by
        # RegisteredPatch.settle): perf_counter() when the patch function started (less
        # any one-time dependency import) and ended, and the names it changed by plain
        # assignment or declared not undoable.

    def __repr__(self) -> str:
        return f"<PatchContext {self.name!r}: {len(self.changes)} change(s)>"

    @property
    def module(self) -> "Any":
        """The module object this application is on; None once it was freed.

        An application that changed nothing keeps the module only by a weak reference
        (application.apply, after its commit): its record is kept for the report and for
        identity checks (``is_applied_to``), and holding the module alive would make the
        interpreter's exit clear and traverse it separately (benchmarks/COSTS.md). A
        freed module is no longer any module object, so such a check is still exact."""
        module = self._module
        return module() if module.__class__ is _WEAK_REFERENCE else module

    @module.setter
    def module(self, module: "Any") -> None:
        self._module = module

    def growing_list(self, field: str) -> "List[Any]":
        """The list in ``field``, made in place of the shared empty tuple on first need."""
        values = getattr(self, field)
        if values.__class__ is tuple:
            values = list(values)
            setattr(self, field, values)
        return values

    # -- recording ----------------------------------------------------------

    def _apply(self, action: str, kind: str, owner: "Any", key: "Any", value: "Any") -> Change:
        change, others = self._ledger.change(action, kind, owner, key, value, self.name,
                                             record_into=self.growing_list("changes"))
        if action in ("setattr", "wrap") and isinstance(owner, _MODULE_TYPE) and sys.modules:
            # O(1): sys.modules keeps insertion order, so this marks "imported from here on".
            # Another thread's import may add a module between making the iterator and
            # reading it ("dictionary changed size during iteration": a patch failed in
            # tests/trust/test_threads.py's eight-thread storm on 3.14): read it again.
            while True:
                try:
                    newest = next(reversed(sys.modules))
                    entry = sys.modules[newest]
                    break
                except (RuntimeError, KeyError):   # (KeyError: removed in between)
                    continue
            try:   # weakly: the mark must not keep a module that leaves sys.modules alive
                change.last_module_before = (newest, _WEAK_REFERENCE(entry), True)
            except TypeError:   # None (a blocked import) or an object without weak references
                change.last_module_before = (newest, entry, False)
        if others:
            self.conflicts = [*self.conflicts, (change, others)]
        return change

    def setattr(self, owner: "Any", name: str, value: "Any", rebind: bool = False,
                new: bool = False) -> None:
        """Set ``owner.name = value``; with ``rebind``, also replace the old object
        wherever other imported modules hold it as a global (``from x import y``).

        A name the object does not have is created, as ``setattr`` does; when an
        existing name is close to it (``nrom`` for ``norm``), a ``NewAttributeWarning``
        names it and the patch's notes say so, unless ``new=True`` says the name is
        meant to be new (a compatibility alias, say)."""
        if not isinstance(name, str):
            raise TypeError(f"attribute name must be a string, got {name!r}")
        # Filling a stand-in module (one lazypatch provides) creates names by design.
        namespace = own_dict(owner)
        stand_in = isinstance(namespace, dict) and "__lazypatch_stand_in__" in namespace
        creates = not new and not stand_in and read_slot(ATTRIBUTE, owner, name) is MISSING \
            and not hasattr(owner, name)
        hook = PatchContext.value_hook
        if hook is not None:
            value = hook(value)
        change = self._apply("setattr", ATTRIBUTE, owner, name, value)
        if creates:
            self._warn_if_typo(owner, name)
        if rebind and change.before is not MISSING:
            self._rebind(change, exclude=(owner,))

    def _warn_if_typo(self, owner: "Any", name: str) -> None:
        try:
            names = [existing for existing in dir(owner)
                     if existing != name and not existing.startswith("__")]
        except Exception:
            return
        from difflib import get_close_matches  # only when a name was created
        close = get_close_matches(name, names, n=1, cutoff=0.75)
        if not close:
            return
        message = (f"patch {self.name!r} created {describe(owner)}.{name}, which did not exist; "
                   f"did you mean {close[0]!r}? (patch.setattr(..., new=True) says the name is "
                   f"meant to be new)")
        self.growing_list("notes").append(message)
        from ..errors import NewAttributeWarning
        from ..notices import notify
        notify(f"lazypatch: {message}", NewAttributeWarning)

    def delattr(self, owner: "Any", name: str) -> None:
        """Delete ``owner.name``; it must be the owner's own attribute."""
        namespace = own_dict(owner)
        if namespace is not None and name not in namespace:
            inherited = hasattr(owner, name)
            raise AttributeError(
                f"cannot delete {describe(owner)}.{name}: "
                + ("it is inherited, not defined on this object; patch the class that "
                   "defines it" if inherited else "no such attribute"))
        self._apply("delattr", ATTRIBUTE, owner, name, MISSING)

    def setitem(self, mapping: "Any", key: "Any", value: "Any") -> None:
        """Set ``mapping[key] = value``."""
        self._apply("setitem", ITEM, mapping, key, value)

    def delitem(self, mapping: "Any", key: "Any") -> None:
        """Delete ``mapping[key]``; it must exist."""
        if key not in mapping:
            raise KeyError(f"cannot delete {key!r}: not in {describe(mapping)}")
        self._apply("delitem", ITEM, mapping, key, MISSING)

    def wrap(self, owner: "Any", name: str, wrapper: "Callable[..., Any]",
             rebind: bool = False) -> "Any":
        """Replace ``owner.name`` with something calling ``wrapper(wrapped, instance, args,
        kwargs)``; return it. A module's function gets a plain function (compilers,
        copies and pickle treat it as a function: wrapping.py); a class attribute gets a
        ``wrapt.FunctionWrapper`` around the raw descriptor (classmethod, staticmethod or
        function), so that wrapt binds it exactly as the original would be; copy, deepcopy
        and pickle treat it as a function or bound method (by reference).
        ``rebind`` is as for ``setattr``: module globals holding the original
        (``from x import f``) get the wrapper too.
        """
        if not callable(wrapper):
            raise TypeError(f"wrapper for {describe(owner)}.{name} must be callable "
                            f"as wrapper(wrapped, instance, args, kwargs)")
        original = read_slot(ATTRIBUTE, owner, name)
        if original is MISSING and isinstance(owner, type):
            # Inherited: wrap the base class's raw descriptor, store on this class.
            for base in owner.__mro__[1:]:
                original = base.__dict__.get(name, MISSING)
                if original is not MISSING:
                    break
        if original is MISSING:
            raise AttributeError(f"cannot wrap {describe(owner)}.{name}: no such attribute")
        if isinstance(original, property):
            raise TypeError(f"cannot wrap property {describe(owner)}.{name}; "
                            f"set a new property with patch.setattr instead")
        hook = PatchContext.value_hook
        calling = wrapper if hook is None else hook(wrapper)
        from .wrapping import takes_a_plain_function, torchscript_table, wrapper_function
        if takes_a_plain_function(owner, original):
            # A module's function: a real function in place (wrapping.py says why).
            wrapped: "Any" = wrapper_function(original, calling)
            table = torchscript_table()
            if table is not None and id(original) in table:
                self.setitem(table, id(wrapped), table[id(original)])
        else:
            # wrapt's cost (benchmarks/COSTS.md) is paid here once and reported on its own
            from .wrapping import method_wrapper
            wrapped = method_wrapper(PatchContext.import_dependency("wrapt"), owner, name,
                                     original, calling)
        change = self._apply("wrap", ATTRIBUTE, owner, name, wrapped)
        if rebind and change.before is not MISSING:
            self._rebind(change, exclude=(owner,))
        return wrapped

    def provide_module(self, name: str, module: "Any") -> None:
        """Make ``import name`` return ``module`` (an entry in ``sys.modules``, and the
        attribute on its parent package when that is imported)."""
        self._apply("provide_module", ITEM, sys.modules, name, module)
        parent_name, _, child = name.rpartition(".")
        parent = sys.modules.get(parent_name) if parent_name else None
        if parent is not None:
            self._apply("provide_module", ATTRIBUTE, parent, child, module)

    def rebind(self, old: "Any", new: "Any", exclude: "Tuple[Any, ...]" = ()) -> "List[str]":
        """Replace module globals that are ``old`` (by identity) with ``new``.

        Returns "module.name" for every rebound reference; each is recorded
        and restored by undo. A value whose identity proves nothing (an int,
        a string, None...) is never rebound; the report says so.
        """
        from .references import find_module_references, identity_proves_copy
        reason = identity_proves_copy(old)
        if reason is not None:
            self.growing_list("notes").append(
                f"rebind: left module globals equal to {old!r} alone: it is {reason}")
            return []
        rebound = []
        for module, global_name in find_module_references(old, exclude=exclude):
            self._apply("rebind", ATTRIBUTE, module, global_name, new)
            rebound.append(f"{module.__name__}.{global_name}")
        return rebound

    def _rebind(self, change: Change, exclude: "Tuple[Any, ...]") -> None:
        """Rebind copies of ``change.before`` and remember who already held
        ``change.after``, in one walk over the loaded modules."""
        from .references import find_holders, identity_proves_copy
        reason = identity_proves_copy(change.before)
        if reason is not None:
            self.growing_list("notes").append(f"rebind: {change.describe()[len(change.action) + 1:]} was not "
                              f"rebound elsewhere: its old value {change.before!r} is {reason}")
            return
        change.rebinding = True
        holders = find_holders([change.before, change.after], exclude=exclude)
        change.earlier_holders = frozenset((id(module), name)
                                           for module, name in holders[id(change.after)])
        for module, global_name in holders[id(change.before)]:
            self._apply("rebind", ATTRIBUTE, module, global_name, change.after)

    def revert_after_import(self) -> None:
        """For ``before_import`` patches: undo these changes as soon as the target's
        body has finished executing (used to present something only during the import)."""
        self.revert_after_import_requested = True

    def skip(self, reason: str) -> None:
        """Stop here and report the patch as ``skipped`` with ``reason``, for
        conditions only the patch can check; changes made so far are rolled back."""
        from ..errors import SkipPatch
        raise SkipPatch(reason)

    def untracked(self, description: str) -> None:
        """Say that a change was made that undo cannot reverse (an object without a
        table to restore): the report lists it as ``not undoable``."""
        self.growing_list("not_undoable").append(str(description))

    def note(self, text: str) -> None:
        """Add a line to the patch's report (``notes``) saying what it did; notes
        outlive undo, since they describe what happened."""
        self.growing_list("notes").append(str(text))

    def note_provider(self, provider: "Callable[[], Any]") -> None:
        """Call ``provider()`` each time the report is built and add what it returns
        (a string, a list of them, or any value such as a counter, shown with ``str``)
        to the notes: for figures that change after the patch applied."""
        if not callable(provider):
            raise TypeError(f"note_provider needs a callable, got {provider!r}")
        self.growing_list("note_providers").append(provider)

    def on_undo(self, callback: "Callable[[], Any]") -> None:
        """Run ``callback()`` when this patch is undone, in reverse order with its
        other changes: for state only the patch knows how to restore (a hook
        handle to remove, an attribute behind ``__setattr__``)."""
        if not callable(callback):
            raise TypeError(f"on_undo needs a callable, got {callback!r}")
        self.growing_list("changes").append(Change("on_undo", CALLBACK, callback, id(callback), MISSING,
                                   MISSING, self.name))

    # -- undo ---------------------------------------------------------------

    def undo(self) -> None:
        """Reverse every live change, newest first. Imports nothing.

        Every change is attempted even if some fail. Failures of ordinary
        exceptions are raised together at the end as one ``UndoError``; a
        ``KeyboardInterrupt`` or ``SystemExit`` met on the way is re-raised
        once everything else was undone, so an interrupt never leaves half a
        patch behind.
        """
        failures: "List[str]" = []
        interrupt: "Optional[BaseException]" = None
        for change in reversed(self.changes):
            try:
                self._undo_one(change)
            except Exception as error:
                failures.append(f"{change.describe()}: {type(error).__name__}: {error}")
            except BaseException as error:  # KeyboardInterrupt, SystemExit: finish first
                if interrupt is None:
                    interrupt = error
        if self.call_codes and PatchContext.release_calls is not None \
                and not self.live_changes():   # an incomplete undo keeps counting
            PatchContext.release_calls(self)
        if interrupt is not None:
            raise interrupt
        if failures:
            from ..errors import UndoError
            raise UndoError(f"undo of patch {self.name!r} could not restore: "
                            + "; ".join(failures), failures=[f"{self.name}: {item}"
                                                             for item in failures])

    def _undo_one(self, change: Change) -> None:
        if change.kind == CALLBACK:
            if change.live:
                change.live = False
                change.owner()
            return
        written = self._ledger.undo(change)
        if written and not change.rebinding and change.last_module_before is not None:
            _imported_while_live(change)
        if written and change.rebinding:
            # Modules imported while the patch was live copied the replacement
            # (`from x import y`); give them the original back too.
            from .references import find_module_references
            for module, global_name in find_module_references(change.after,
                                                              exclude=(change.owner,)):
                if (id(module), global_name) not in change.earlier_holders:
                    setattr(module, global_name, change.before)

    def live_changes(self) -> "List[Change]":
        return [change for change in self.changes if change.live]

    def overwritten_changes(self) -> "List[str]":
        """The live changes whose slot holds another value now (``Ledger.overwritten``)."""
        return [change.describe() for change in self.changes
                if self._ledger.overwritten(change)]

    def replaced_objects(self) -> "List[Tuple[Change, Any]]":
        """(change, original object) for each live change that replaced an object. A
        change that wrote the very object already there replaced nothing (the export pack
        registers a class under a key that already maps to it): no stale reference."""
        return [(change, change.before) for change in self.changes
                if change.live and change.before is not MISSING
                and change.action in ("setattr", "wrap", "delattr", "setitem")
                and change.after is not change.before]


_MODULE_TYPE = type(sys)


def _imported_while_live(change: Change) -> None:
    """Give the original back to the globals of modules imported while ``change`` was
    live that copied its replacement (``from mmcv.runner import build_optimizer`` in
    ``mmdet3d.apis.train``, imported after a patch replaced it): without the patch they
    would hold the original, so the undo is exact only when they do again. Modules
    imported before the change are left alone (what they hold, the patch never gave)."""
    from .references import find_module_references
    if change.before is MISSING:
        return
    try:
        # Only the modules imported since: usually none, so an undo stays cheap.
        copies = find_module_references(change.after, exclude=(change.owner,),
                                        after=change.last_module_before)
    except ValueError:   # that module left sys.modules since: which came later is unknown
        _say_copies_kept(change)
        return
    for module, global_name in copies:
        setattr(module, global_name, change.before)


def _say_copies_kept(change: Change) -> None:
    """Which modules were imported while ``change`` was live is unknown (the module that
    marked its place in ``sys.modules`` left it, or was imported again): name the module
    globals still holding the replacement, in a warning and the patch's
    ``late_references``, rather than rebind modules that may have held it before."""
    from .references import describe_references
    owner = change.owner
    name = getattr(owner, "__name__", None)
    # Not the holders the patch itself explains: the module it changed, that module
    # imported again (the patch applied there too, its own change), the replacement's home.
    try:
        home = sys.modules.get(getattr(change.after, "__module__", None) or "")
    except Exception:   # a proxy whose attribute lookup raises: no home to leave out
        home = None
    holders = describe_references([change.after],
                                  exclude=(owner, sys.modules.get(name or ""), home))
    if not holders:
        return
    with STATE.lock:
        registered = STATE.catalog.by_name.get(change.patch_name)
        if registered is not None:   # (one entry per holder, over all of its changes)
            registered.late_references = [*registered.late_references, *(
                holder for holder in holders if holder not in registered.late_references)]
    from ..errors import LatePatchWarning
    from ..notices import notify  # only on this path: see benchmarks/COSTS.md
    marker = change.last_module_before[0] if change.last_module_before else "?"
    notify(f"lazypatch: patch {change.patch_name!r} is undone, but which modules copied "
           f"{describe(owner)}.{change.key} while it was replaced is unknown: {marker!r}, the "
           f"newest module then, has left sys.modules or was imported again since. These "
           f"module globals still hold the replacement: {', '.join(holders)}. Import them "
           f"again (importlib.reload) to get the original, or make the change with "
           f"patch.setattr(..., rebind=True), whose undo reaches every copy.",
           LatePatchWarning, stacklevel=2)


def process_ledger() -> Ledger:
    """The process's ledger of live changes (kept in ``STATE.ledger``): made on first
    call, which is the first application, not activation (benchmarks/COSTS.md)."""
    ledger = STATE.ledger
    if ledger is None:
        with STATE.lock:
            if STATE.ledger is None:
                STATE.ledger = Ledger(STATE.lock)
                PatchContext.default_ledger = STATE.ledger
                PatchContext.import_dependency = STATE.import_once
            ledger = STATE.ledger
    return ledger


# For state.context_of_record, which makes a context for an application's raw record
# when a patch is first read and must not import this module (it imports state).
STATE.context_type = PatchContext

"""The one home of lazypatch's process state, behind one lock.

Everything the engine knows about this process lives in ``STATE``, one
``EngineState``: the registered patches and their index by target, the
selection rules and strict mode, the ledger of live changes, the finder,
class-patch declarations, plugin entries, the event-action rules, the
configuration and how the process was activated. Other modules hold
functions, constants and memo caches of pure computations (parsed
requirement strings, directory listings keyed by mtime) that cannot change
what a patch does.

The lock
--------
``STATE.lock`` is one re-entrant lock. There is no second engine lock, so
there is no lock order to get wrong. The rules:

* Hold it only for short bookkeeping: indexing a registration, settling a
  patch's applications into its fields (``RegisteredPatch.settle``; a watched
  import commits without the lock), undoing, one ledger write (read the slot,
  write it, push the change).
* Never hold it while user code runs: not a patch function, not an
  ``on_undo`` callback, not a module body. Those can import modules, and an
  import waits for the per-module import lock that another thread may hold
  while it waits for ours: holding a global lock across an import is how
  import deadlocks start. (Ledger writes call ``setattr`` on user objects
  under the lock; a ``__setattr__`` that imports would be the exception,
  and none of the patched libraries has one.)
* The finder reads ``patches_by_target`` without the lock (it runs on every
  import); writers replace a target's list with a new, complete list, so a
  reader sees the old list or the new one, never half of an update.

``reset()`` puts the state back to what a fresh ``import lazypatch`` has:
the one supported way for tests to start clean.
"""

import os
import sys
from _thread import RLock, get_ident
from _weakref import ref as _WEAK_REFERENCE  # (the C module: weakref.py is not loaded)
from time import perf_counter

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Callable, Dict, List, Optional, Tuple

    # state.py is the bottom floor: it names no type of a higher layer, not even for
    # the type checker (that would draw a circle in the import graph). The modules that
    # own these types say what the fields hold.
    Requirement = Any   # decide.requirements.Requirement
    PatchContext = Any  # apply.ledger.PatchContext

PENDING = "pending"
APPLIED = "applied"
SKIPPED = "skipped"
FAILED = "failed"
DISABLED = "disabled"
REVERTED = "reverted"
STATUSES = (PENDING, APPLIED, SKIPPED, FAILED, DISABLED, REVERTED)

BEFORE = "before"   # runs on the new module object before its body executes
AFTER = "after"     # runs right after the body executed

HISTORY_LENGTH = 20   # the last events of a patch kept for its report: a scope in a loop must not grow it


# The empty values every new RegisteredPatch shares (immutable: see its __init__).
_NONE: "Any" = ()

# The raw record of an application (application.apply): a list, [module, started,
# ended, untracked changes, context], indexed by these names. A patch that takes only
# the module has no context there: its function can record no change, note or call,
# so one would hold only empty values, and building it cost a watched import about
# 1,500 instructions (benchmarks/COSTS.md); ``context_of_record`` makes it when the patch
# is first read. The module is held weakly once the application changed nothing
# (``PatchContext.module``).
RECORD_MODULE, RECORD_STARTED, RECORD_ENDED, RECORD_UNTRACKED, RECORD_CONTEXT = range(5)


def context_of_record(name: str, record: "List[Any]") -> "Any":
    """The ``PatchContext`` of an application's raw record (made now if it has none),
    holding what the record holds: the module, its start and end, its untracked changes."""
    context = record[RECORD_CONTEXT]
    if context is None:
        # apply.ledger's PatchContext, put in STATE by that module when it loads (the
        # application that made the record loaded it): this module imports nothing of
        # apply/, which imports it (tests/project/test_architecture.py: no import cycles).
        context_type = STATE.context_type
        context = record[RECORD_CONTEXT] = context_type(name, None, context_type.default_ledger)
    context._module = record[RECORD_MODULE]   # (the slot: a weak reference stays one)
    context.started = record[RECORD_STARTED]
    context.ended = record[RECORD_ENDED]
    context.untracked_changes = record[RECORD_UNTRACKED]
    return context
# The history of a patch applied once and nothing else: one shared tuple, no list.
_ONLY_APPLIED: "Any" = (APPLIED,)
_NO_CALLS: "Any" = type(type.__dict__)({})   # an empty read-only mapping (mappingproxy)


if TYPE_CHECKING:
    from typing import Generic, TypeVar

    Value = TypeVar("Value")

    class SettledField(Generic[Value]):
        """How the type checker sees a field made by ``settled_field`` (a property)."""

        def __get__(self, patch: "Any", owner: "Any" = None) -> Value: ...
        def __set__(self, patch: "Any", value: Value) -> None: ...


# The fields of a RegisteredPatch that an unsettled application changes (settle writes
# them). Each is a property over the slot of the same name with a leading underscore,
# settling before every read and write. Only state.py and the watched import's own
# checks (application.py, reading ``_live`` beside ``unsettled``) touch the slots:
# tests/apply/test_settled_fields.py enforces it.
SETTLED_FIELDS = ("status", "reason", "error", "live", "duration_ms", "application_count",
                  "untracked_changes", "history", "applied_order", "notes", "note_providers")


def settled_field(slot: str) -> property:
    """A property reading and writing the slot named ``slot`` of a RegisteredPatch, its
    unsettled applications folded in first."""
    # Made in the class body, by name: set on the class afterwards, each property cost
    # activation a type attribute write and a cache invalidation (about 0.1M
    # instructions for the eleven: benchmarks/COSTS.md).

    def read(patch: "RegisteredPatch") -> "Any":
        if patch.unsettled:
            patch.settle()
        return getattr(patch, slot)

    def write(patch: "RegisteredPatch", value: "Any") -> None:
        # Settled first: an application that finished before this write must not
        # overwrite it when it is folded in later.
        if patch.unsettled:
            patch.settle()
        setattr(patch, slot, value)

    return property(read, write, doc=f"``{slot}``, settled first")


class RegisteredPatch:
    """One registered patch and everything known about it.

    Owned by ``STATE``; users see it through ``report()`` as a plain record.
    Fields change only under ``STATE.lock`` once the patch is registered.
    """

    __slots__ = (
        "name", "target", "function", "phase", "priority", "sequence",
        "requires", "tags", "enabled_by_default", "enabled",
        "conflicts", "late_references", "takes_context",
        "generation", "undoing", "scope_holds", "scope_saved", "call_counts", "unsettled",
        # The fields an unsettled application changes (SETTLED_FIELDS), each read and
        # written through a property of the same name without the underscore, which
        # settles first: a reader cannot see them stale by forgetting to call settle().
        "_status", "_reason", "_error", "_live", "_duration_ms", "_application_count",
        "_untracked_changes", "_history", "_applied_order", "_notes", "_note_providers",
    )

    def __init__(self, name: str, target: str, function: "Callable[..., Any]",
                 phase: str, priority: int, requires: "Tuple[Requirement, ...]",
                 tags: "frozenset", enabled: bool, takes_context: bool) -> None:
        # Positional parameters: matching nine keywords cost more than the rest of the
        # constructor (10,000 registrations: benchmarks/declare/measure_scale.py).
        self.name = name
        self.target = target
        self.function = function
        self.phase = phase
        self.priority = priority
        self.sequence = 0                 # set when indexed
        self.requires = requires
        self.tags = tags
        self.enabled_by_default = enabled
        self.enabled = enabled
        self._status = PENDING if enabled else DISABLED
        self._reason = "" if enabled else "disabled by default; enable it by name or tag"
        self._error = ""
        # The sequences below start as the shared empty tuple and become lists (the
        # mapping a dict) when first written: most patches never apply, and allocating
        # seven lists and a dict per patch made 10,000 registrations cost twice the
        # budget. Writers replace the tuple (see ``remember`` and application.apply);
        # a write that forgot to would fail loudly, never share the empty value.
        # One context per module object this patch is applied to now: a module
        # re-imported after `del sys.modules[...]` is a second object, and undo
        # must reach both.
        self._live: "List[PatchContext]" = _NONE
        # Applications taken off ``live`` to be undone and not yet claimed by the undo
        # (undo.detach / undo_contexts): an interrupt landing in between leaves
        # them here, and the next detach of this patch hands them out again.
        self.undoing: "List[PatchContext]" = _NONE
        self._duration_ms = 0.0
        self._application_count = 0
        self.conflicts: "List[str]" = _NONE
        self.late_references: "List[str]" = _NONE
        self._untracked_changes: "List[str]" = _NONE
        self.takes_context = takes_context
        self._history: "List[str]" = _NONE
        self._applied_order = 0
        self._notes: "List[str]" = _NONE
        self._note_providers: "List[Callable[[], Any]]" = _NONE
        self.generation = 0        # bumped by undo/disable: an application in flight is stale
        self.scope_holds = 0       # patched() scopes holding it applied
        self.scope_saved: "Optional[Tuple[bool, bool]]" = None   # (enabled, applied) before them
        # "module.qualname" of each function it put in place -> calls.CallCount; kept
        # after undo, so the report still says whether it was called while applied.
        self.call_counts: "Dict[str, Any]" = _NO_CALLS
        self.unsettled: "List[PatchContext]" = _NONE   # applied, not yet folded in (settle)

    @property
    def description(self) -> str:
        """The first line of the patch function's docstring (read when reported)."""
        doc = getattr(self.function, "__doc__", None)
        return doc.strip().split("\n", 1)[0] if isinstance(doc, str) else ""

    @property
    def order(self) -> "Tuple[int, int]":
        return (self.priority, self.sequence)

    def is_applied_to(self, module: "Any") -> bool:
        for context in self._live:   # raw, with the unsettled below: no settling needed
            if context.module is module:
                return True
        for record in self.unsettled:   # applied, not folded into ``live`` yet (settle)
            held = record[RECORD_MODULE]
            if held.__class__ is _WEAK_REFERENCE:
                held = held()
            if held is module:
                return True
        return False

    def remember(self, event: str) -> None:
        """Add an event to the bounded history shown in the report."""
        history = self.history   # settled: the applications before this event come first
        if history.__class__ is tuple:   # empty, or the shared ("applied",)
            self._history = history = list(history)
        history.append(event)
        if len(history) > HISTORY_LENGTH:
            del history[0]

    def replace_live(self, contexts: "List[PatchContext]") -> None:
        """Make ``contexts``, computed from one read of ``live``, the live applications;
        the caller holds the lock.

        Written to the raw slot, not settled first as a write of ``live`` is: an
        application whose claim ended since that read would be folded in by the write's
        settle and dropped with the old list, live in the ledger but on no patch, never to
        be undone (a reload racing a late application: tests/trust/test_properties.py).
        It stays unsettled instead, for the next reader or its own thread's take-back."""
        self._live = contexts

    def settle(self) -> "RegisteredPatch":
        """This patch, with the applications that finished since it was last read folded
        into the fields a report reads (SETTLED_FIELDS). Their properties call it on every
        read and write, so no reader calls it itself.

        A watched import does not take the lock to write those fields: ``application.
        apply`` leaves each application's context in ``unsettled`` as its raw record
        (with when its function started and ended and its untracked changes) and the
        first reader writes them, in order, under the lock (benchmarks/COSTS.md). An application still
        in flight (its patch claimed by that very context) is left for its own thread,
        which rolls it back if the patch was undone or disabled meanwhile."""
        if self.unsettled:
            with STATE.lock:
                records = self.unsettled
                settled = 0
                try:
                    for context in records:
                        if STATE.claims.get(self) is context:
                            break   # in flight: application.apply decides what it becomes
                        context = context_of_record(self.name, context)
                        # Every new value first; then the stores, with no call and no loop
                        # between them, where no signal handler can run: an interrupt
                        # leaves this record either written whole or still unsettled.
                        history = self._history
                        if not history:
                            history = _ONLY_APPLIED   # shared (remember() copies it)
                        else:
                            history = [*history, APPLIED][-HISTORY_LENGTH:]
                        untracked = context.untracked_changes
                        if not (untracked or self._untracked_changes):
                            untracked = self._untracked_changes
                        notes = context.notes if context.notes or self._notes else self._notes
                        providers = context.note_providers \
                            if context.note_providers or self._note_providers \
                            else self._note_providers
                        live = [*self._live, context]
                        duration_ms = (context.ended - context.started) * 1000.0
                        count = self._application_count + 1
                        self._duration_ms = duration_ms
                        self._status = APPLIED
                        self._reason = self._error = ""
                        self._notes = notes
                        self._note_providers = providers
                        self._live = live
                        self._application_count = count
                        self._applied_order = context.ended   # perf_counter: every thread's
                        self._untracked_changes = untracked
                        self._history = history
                        settled += 1
                finally:
                    # In place, never replaced: an application may append to this list now.
                    del records[:settled]
        return self

    def __repr__(self) -> str:
        return f"<RegisteredPatch {self.name!r} on {self.target!r}: {self.status}>"

    if TYPE_CHECKING:   # what the properties (settled_field) read and write
        status = SettledField[str]()
        reason = SettledField[str]()
        error = SettledField[str]()
        live = SettledField["List[PatchContext]"]()
        duration_ms = SettledField[float]()
        application_count = SettledField[int]()
        untracked_changes = SettledField["List[str]"]()
        history = SettledField["List[str]"]()
        applied_order = SettledField[float]()
        notes = SettledField["List[str]"]()
        note_providers = SettledField["List[Callable[[], Any]]"]()
    else:
        status = settled_field("_status")
        reason = settled_field("_reason")
        error = settled_field("_error")
        live = settled_field("_live")
        duration_ms = settled_field("_duration_ms")
        application_count = settled_field("_application_count")
        untracked_changes = settled_field("_untracked_changes")
        history = settled_field("_history")
        applied_order = settled_field("_applied_order")
        notes = settled_field("_notes")
        note_providers = settled_field("_note_providers")




class Catalog:
    """Every registered patch, indexed by name and by target module.

    The finder asks on every import in the process "is anything watching
    this name?": a single dict membership test on ``by_target``. Selection by
    name, glob or tag is the only walk over every patch, and it runs at
    configuration time.
    """

    def __init__(self) -> None:
        self.by_name: "Dict[str, RegisteredPatch]" = {}
        # target module name -> patches on it, sorted by (priority, sequence).
        # The finder holds a reference to this very dict: never rebind it.
        self.by_target: "Dict[str, List[RegisteredPatch]]" = {}
        self.sequence = 0
        # Indexes that answer selection (``enable("openmmlab")``, ``tag:x``) and undo
        # (the patches declared on a patch's behalf) without walking every patch:
        # with 10,000 registered, that walk made each unpatch()/enable() cost tens of
        # milliseconds (benchmarks/declare/measure_scale.py). Each maps a key to {name: patch}.
        self.by_tag: "Dict[str, Dict[str, RegisteredPatch]]" = {}
        # "a" and "a.b" -> the patches named "a.b.c": the dotted families a selector names.
        self.by_family: "Dict[str, Dict[str, RegisteredPatch]]" = {}
        # patch name -> its aliases and the stand-ins made for submodules of it.
        self.derived: "Dict[str, Dict[str, RegisteredPatch]]" = {}
        # Built on first use (activation registers dozens of patches and selects none:
        # kept up to date from then on, at about 20,000 instructions a patch).
        self.indexed = False

    def add(self, patch: "RegisteredPatch") -> None:
        """Index ``patch`` (the caller holds the lock and checked the name is free)."""
        self.sequence += 1
        patch.sequence = self.sequence
        self.by_name[patch.name] = patch
        if self.indexed:
            self._index(patch)
        patches = self.by_target.get(patch.target)
        if patches is None:
            self.by_target[patch.target] = [patch]
            return
        # A new complete list, assigned at once: the finder may be reading this
        # dict from another thread without the lock. Walk back from the end: a
        # new patch usually sorts last. (No bisect import: this runs at activation.)
        updated = list(patches)
        position = len(updated)
        order = patch.order
        while position and updated[position - 1].order > order:
            position -= 1
        updated.insert(position, patch)
        self.by_target[patch.target] = updated

    def with_indexes(self) -> "Catalog":
        """This catalog, its indexes built if they were not (the caller holds the lock)."""
        if not self.indexed:
            for patch in self.by_name.values():
                self._index(patch)
            self.indexed = True
        return self

    def _index(self, patch: "RegisteredPatch") -> None:
        for index, key in self._index_keys(patch):
            entries = index.get(key)
            if entries is None:
                index[key] = {patch.name: patch}
            else:
                entries[patch.name] = patch

    def _index_keys(self, patch: "RegisteredPatch"
                    ) -> "List[Tuple[Dict[str, Dict[str, RegisteredPatch]], str]]":
        """(index, key) of every entry ``patch`` has in the indexes above."""
        name = patch.name
        keys = [(self.by_tag, tag) for tag in patch.tags]
        position = name.find(".")
        while position > 0:        # every p with name.startswith(p + "."): its families
            keys.append((self.by_family, name[:position]))
            position = name.find(".", position + 1)
        # paths.declare_path marks an alias patch with the name it is declared for;
        # boundaries.py names a submodule's stand-in "<stand-in name>.sub:<module>" and a
        # missing parent's "<stand-in name>.parent:<parent>": undone with that stand-in.
        alias_of = getattr(patch.function, "lazypatch_alias_of", None)
        if isinstance(alias_of, str):
            keys.append((self.derived, alias_of))
        for marker in (".sub:", ".parent:"):
            position = name.find(marker)
            while position > 0:
                keys.append((self.derived, name[:position]))
                position = name.find(marker, position + 1)
        return keys

    def find(self, name: str) -> "RegisteredPatch":
        """The patch called ``name``; KeyError naming some registered ones otherwise."""
        if not isinstance(name, str):
            raise TypeError(f"a patch name must be a string, got {name!r}")
        patch = self.by_name.get(name)
        if patch is None:
            known = ", ".join(sorted(self.by_name)[:10]) or "none registered"
            raise KeyError(f"no patch named {name!r}; registered patches include: {known} "
                           f"(see lazypatch.report() or `lazypatch list`)")
        return patch

    def remove(self, patch: "RegisteredPatch") -> None:
        """Forget a patch (it must already be undone)."""
        self.by_name.pop(patch.name, None)
        for index, key in self._index_keys(patch) if self.indexed else ():
            entries = index.get(key)
            if entries is not None and entries.get(patch.name) is patch:
                del entries[patch.name]
                if not entries:
                    del index[key]
        remaining = [other for other in self.by_target.get(patch.target, ()) if other is not patch]
        if remaining:
            self.by_target[patch.target] = remaining
        else:
            self.by_target.pop(patch.target, None)

    def patches(self) -> "List[RegisteredPatch]":
        """Every patch in registration order."""
        return sorted(self.by_name.values(), key=lambda patch: patch.sequence)

    def clear(self) -> None:
        self.by_name.clear()
        self.by_target.clear()   # cleared in place: the finder holds this dict
        self.by_tag.clear()
        self.by_family.clear()
        self.derived.clear()
        self.indexed = False


class Activation:
    """How this process was activated (``lazypatch.activation_info()`` shows it)."""

    def __init__(self) -> None:
        self.activated_by = ""        # "import lazypatch.auto", "lazypatch run", "site .pth"...
        self.milliseconds = 0.0
        # Watched targets already in sys.modules when activation finished: their
        # patches applied late, and earlier `from x import y` copies may be stale.
        self.imported_before: "List[str]" = []
        # patch name -> where activation registered it from ("built-in", "plugin",
        # "LAZYPATCH_MODULES"); `lazypatch list` shows it.
        self.sources: "Dict[str, str]" = {}


class EngineState:
    """All of lazypatch's process state. There is one: ``STATE``."""

    def __init__(self) -> None:
        self.lock = RLock()
        self.catalog = Catalog()
        # The apply.ledger.Ledger of live changes: made and put here by its own module
        # (ledger.process_ledger) on the first application, not at activation.
        self.ledger: "Any" = None
        self.context_type: "Any" = None          # apply.ledger.PatchContext, set as it loads
        self.finder: "Any" = None                 # the LazyPatchFinder, made on first need
        self.enable_rules: "List[str]" = []       # selectors from configuration, applied to
        self.disable_rules: "List[str]" = []      # patches registered later too
        # Opt-in packs (every patch off by default): pack name -> the module whose
        # import registers them, imported only once a selector names the pack
        # (selection.load_opt_in_packs), so activation does not pay for them.
        self.opt_in_packs: "Dict[str, str]" = {}
        self.strict = False
        # The configuration.Configuration in force (typed loosely: configuration
        # imports this module, and the arrow must point one way only).
        self.configuration: "Any" = None
        self.declared_variables: "Dict[str, str]" = {}   # pack variables (declare_variable)
        self.activation = Activation()
        self.class_declarations: "List[Any]" = []    # classes.ClassPatch, in declaration order
        self.plugin_entries: "Dict[str, Any]" = {}   # patch name -> plugins.PluginEntry
        # Heavy dependencies imported while a patch ran (dependencies.import_once): module
        # -> milliseconds, reported once; and each thread's running total, which
        # application subtracts from the time of the patch that was running.
        self.one_time_imports: "Dict[str, float]" = {}
        self.one_time_import_ms_by_thread: "Dict[int, float]" = {}
        # patch -> the raw record (RECORD_*) of the one call applying it right now (see
        # application.apply)
        self.claims: "Dict[RegisteredPatch, Any]" = {}
        # id(module) -> [thread running its body through run_body, callbacks waiting for
        # the end of it...], for a body no import marks (a reload marks no spec as
        # initializing; application.run_body)
        self.executing: "Dict[int, List[Any]]" = {}
        # id(module) -> how many such bodies run_body has started, each counted after its
        # marker is in ``executing``: a late application compares the count before and
        # after it ran (application.apply_to_imported). Never cleared: one int per module
        # object ever reloaded; an object that later gets the same id only moves it on.
        self.bodies_started: "Dict[int, int]" = {}
        # calls.CallTracker: how calls of replacements are counted, and the live
        # counters; made when a patch first changes something (calls.tracker).
        self.calls: "Any" = None
        # Where each event's action comes from (a decide.events.EventRules): made when
        # events.py is first imported, i.e. when an action is first set, so activation
        # does not pay for it.
        self.events: "Any" = None

    def import_once(self, name: str) -> "Any":
        """``import name``; the first time, its cost is recorded instead of charged to a patch.

        ``import wrapt`` costs about 0.13 s here, more on newer Pythons (it imports
        asyncio and importlib.metadata): far more than any patch. The engine imports it
        the first time a patch wraps something, which would charge that one-time cost
        to whichever patch came first (its MS column saying 270 ms for half a
        millisecond of work). The cost goes to ``one_time_imports`` (reported once, on
        its own line) and to the importing thread's tally, which ``application``
        subtracts from the time of the patch that was running.
        """
        module = sys.modules.get(name)
        if module is not None:
            return module
        started = perf_counter()
        __import__(name)
        milliseconds = (perf_counter() - started) * 1000.0
        with self.lock:
            self.one_time_imports[name] = self.one_time_imports.get(name, 0.0) + milliseconds
            thread = get_ident()
            self.one_time_import_ms_by_thread[thread] = \
                self.one_time_import_ms_by_thread.get(thread, 0.0) + milliseconds
        return sys.modules[name]

    def forget_everything(self) -> None:
        """Drop registrations, rules, declarations and the ledger (the caller undid them)."""
        with self.lock:
            self.catalog.clear()
            if self.ledger is not None:
                self.ledger.clear()
            self.enable_rules = []
            self.disable_rules = []
            self.strict = False
            self.class_declarations = []
            self.plugin_entries = {}
            self.opt_in_packs = {}
            if self.calls is not None:
                self.calls.stop()
                self.calls = None
            if self.events is not None:
                self.events.forget()   # in place: application.py holds it
            if self.finder is not None:
                self.finder.forget_replacements()


STATE = EngineState()


def _hold_for_fork() -> None:
    STATE.lock.acquire()


def _release_after_fork() -> None:
    STATE.lock.release()


# os.fork() copies the lock as it is: if another thread held it at that moment, the
# child (where that thread does not exist) waits for it forever at its first watched
# import. As CPython's logging module does for its own lock, the forking thread takes
# the lock before the fork (waiting out any bookkeeping in progress, which is short)
# and releases it after, in the parent and in the child, where that thread lives on.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_hold_for_fork, after_in_parent=_release_after_fork,
                        after_in_child=_release_after_fork)

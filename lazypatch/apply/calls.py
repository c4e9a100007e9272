"""Call tracking: whether the code a patch put in place is called, how often, and from where.

"applied" says the new code is in place, not that the program ever reached it. A
replacement that is never called is a patch the program may not need, or one that
patched a name the program does not use (a copy taken earlier, another overload). So
the Python functions a patch puts in place are counted: a replaced function or
method, the wrapper given to ``patch.wrap``, the own ``__init__`` of a replaced class.
The first call's site outside lazypatch is kept, so the report says where to look.

How, by setting (``LAZYPATCH_TRACK_CALLS``, TOML key ``track_calls``):

* ``auto`` (default): on Python 3.12+, ``sys.monitoring`` PY_START events on exactly
  those code objects. No other code pays anything, and the object in place stays the
  user's own (``mod.f is my_f`` holds; rebinding by identity, ``inspect`` and
  ``torch.jit`` see the real function). Before 3.12 there are no per-code events
  (``sys.setprofile`` would tax every call in the process), so nothing is tracked and
  the report says how to track anyway.
* ``wrappers``: any version. Each function is put in place inside a thin counting
  wrapper (``functools.wraps``-style: its ``__wrapped__`` is the user's function). One
  more Python frame per call, and ``mod.f is my_f`` no longer holds.
* ``off``: nothing is tracked.

What a count means: the calls made while that patch held the function in place (two
patches holding the same function each count the call; a patch undone and applied
again goes on from where it was). Under ``sys.monitoring`` that is every call of the
function's code, under whatever name; under ``wrappers``, the calls through the wrapper.

Counters are ``itertools.count`` objects: ``next()`` is one C call, atomic under the
GIL (concurrent calls never lose a count), and its result is the one check per call
(0 only for the first call, which alone looks at the stack).

PY_START events carry the code object, not the function: functions made by one
factory (closures) share their code and are counted together; the record says so.
"""

from __future__ import annotations

import os
import sys
from itertools import count

from ..state import STATE
from .ledger import PatchContext

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Dict, List, Optional, Tuple

    from ..state import RegisteredPatch

# Python 3.12+ (typed loosely: the type checker runs against the oldest supported Python).
_monitoring: "Any" = getattr(sys, "monitoring", None)

VARIABLE = "LAZYPATCH_TRACK_CALLS"
MODES = ("auto", "wrappers", "off")
MONITORING = "sys.monitoring"
WRAPPERS = "wrappers"
OFF = "off"
TOOL_NAME = "lazypatch"
# sys.monitoring reserves 0 (debugger), 1 (coverage), 2 (profiler) and 5 (optimizer);
# 3 and 4 are free for other tools. Taking one of those leaves the named ones to the
# tools they were reserved for.
FREE_TOOL_IDS = (3, 4)
# lazypatch/ (this file is in lazypatch/apply/): every engine frame is skipped.
_ENGINE_DIRECTORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_WRAPT_DIRECTORY = os.sep + "wrapt" + os.sep


class CallCount:
    """One patch's count of the calls of one function it put in place, and the first
    call's site. Counts only while the patch holds the function in place."""

    __slots__ = ("counter", "first_call_site", "first_call_order", "function", "functions",
                 "holders")

    def __init__(self, function: str) -> None:
        self.counter = count()
        self.first_call_site = ""
        self.first_call_order = 0         # when the first call came, among all counters
        self.function = function          # "module.qualname" of the counted function
        self.functions = 1                # distinct function objects sharing its code
        self.holders = 0                  # live applications of the patch holding it

    @property
    def calls(self) -> int:
        # count's repr is "count(N)" with N the next value, i.e. the calls so far.
        # (Reading it through pickling support is deprecated since 3.12.)
        return int(repr(self.counter)[6:-1])

    def as_dict(self) -> "Dict[str, Any]":
        described: "Dict[str, Any]" = {"function": self.function, "calls": self.calls,
                                       "first_call_site": self.first_call_site}
        if self.functions > 1:
            described["shared_by"] = self.functions
        return described


def _count_call(entries: "Tuple[CallCount, ...]", depth: int) -> None:
    """One call for every patch holding the function in place now (usually one)."""
    for entry in entries:
        if not next(entry.counter):
            entry.first_call_site = call_site(depth + 1)
            entry.first_call_order = next(_first_calls)


# Numbers the first calls of all counters, so that a patch's record can name the
# earliest of its functions' first calls (taken only on a first call: not per call).
_first_calls = count(1)


def call_site(depth: int) -> str:
    """"file:line" of the innermost frame, ``depth`` frames out, not in lazypatch."""
    frame: "Any" = sys._getframe(depth + 1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_ENGINE_DIRECTORY) and _WRAPT_DIRECTORY not in filename:
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


class CallTracker:
    """How calls are counted in this process, and the counters live now (by code object)."""

    def __init__(self) -> None:
        self.mode = OFF
        self.reason = ""                   # why calls are not tracked, for the report
        self.tool: "Optional[int]" = None  # the sys.monitoring tool id taken
        # What is counted now: the key (a code object under sys.monitoring, the user's
        # function under wrappers) -> the counters of the patches holding it in place.
        # A tuple, replaced whole under the lock: the per-call path reads it unlocked.
        self.active: "Dict[Any, Tuple[CallCount, ...]]" = {}
        self.function_ids: "Dict[Any, set]" = {}   # code object -> id()s of its functions
        # id(function) -> (function, its counting wrapper), wrappers mode: a function put
        # in place again (re-applied, or by a second patch) gets the same wrapper, so
        # identity holds across applications. Holding the function keeps its id unique.
        self.wrappers: "Dict[int, Tuple[Any, Any]]" = {}

    def choose(self) -> None:
        """Read the setting and take a monitoring tool id if it asks for one."""
        from ..activate.configuration import alert, setting
        wanted = setting(VARIABLE, "auto").strip().lower() or "auto"
        if wanted not in MODES:
            alert(f"lazypatch: {VARIABLE}={wanted!r} is not one of {', '.join(MODES)}; "
                  f"using auto")
            wanted = "auto"
        if wanted == OFF:
            self.mode, self.reason = OFF, f"calls not counted ({VARIABLE}=off)"
        elif wanted == WRAPPERS:
            self.mode = WRAPPERS
        elif _monitoring is None:
            self.mode = OFF
            self.reason = (f"calls not counted on Python "
                           f"{sys.version_info[0]}.{sys.version_info[1]} (sys.monitoring needs "
                           f"3.12+; {VARIABLE}=wrappers counts them)")
        else:
            self.tool = _take_tool_id()
            if self.tool is None:
                self.mode = OFF
                self.reason = ("calls not counted: sys.monitoring tool ids 3 and 4 are "
                               f"both taken by other tools; {VARIABLE}=wrappers counts them")
            else:
                self.mode = MONITORING
                _monitoring.register_callback(self.tool, _monitoring.events.PY_START,
                                                 _started_callback(self.active))

    def stop(self) -> None:
        """Drop every counter and give the monitoring tool id back (``lazypatch.reset``)."""
        tool, self.tool = self.tool, None
        if tool is not None:
            for code in self.active:
                _monitoring.set_local_events(tool, code, 0)
            _monitoring.register_callback(tool, _monitoring.events.PY_START, None)
            _monitoring.free_tool_id(tool)
        self.active.clear()
        self.function_ids.clear()
        self.wrappers.clear()
        PatchContext.value_hook = _first_value   # the next process-state starts afresh


def _started_callback(active: "Dict[Any, Tuple[CallCount, ...]]") -> "Any":
    """The PY_START callback: runs on every call of a counted function, so it is a
    closure over what it needs (no attribute lookups): one lookup, then one ``next``
    and one check per patch holding the function."""
    find = active.get

    def started(code: "Any", offset: int) -> "Any":
        entries = find(code)
        if entries:   # None: released while this call was starting
            # (Never DISABLE: that would switch this code's events off for good, until a
            # process-wide restart_events() that would disturb other tools, and a patch
            # applied again must count again. release() turned them off already.)
            for entry in entries:
                if not next(entry.counter):
                    entry.first_call_site = call_site(2)   # 0: here, 1: the counted code
                    entry.first_call_order = next(_first_calls)
        return None

    return started


def tracker() -> CallTracker:
    """The process's call tracker (``STATE.calls``), set up on first need."""
    current = STATE.calls
    if current is None:
        with STATE.lock:
            current = STATE.calls
            if current is None:
                current = CallTracker()
                current.choose()
                STATE.calls = current
    return current


def _take_tool_id() -> "Optional[int]":
    for tool in FREE_TOOL_IDS:
        if _monitoring.get_tool(tool) is None:
            try:
                _monitoring.use_tool_id(tool, TOOL_NAME)
            except ValueError:   # taken by another thread in between
                continue
            return tool
    return None


def in_place(value: "Any") -> "Any":
    """The user's code that runs when ``value`` is called: ``patch.wrap``'s wrapper for
    the wrapt proxy it made (a proxy forwards attribute reads to what it wraps, so it
    is recognised by type), the own ``__init__`` of a class, else ``value``."""
    if isinstance(value, type):
        return value.__dict__.get("__init__")
    wrapper = getattr(value, "__lazypatch_wrapper__", None)   # wrapping.wrapper_function's
    if wrapper is not None and type(value).__name__ == "function":
        return wrapper
    wrapt = sys.modules.get("wrapt")   # loaded already if a wrapt proxy exists
    if wrapt is not None and isinstance(value, wrapt.FunctionWrapper):
        return value._self_wrapper
    return value


def counted_code(value: "Any") -> "Any":
    """(code object, function) of the Python function ``value`` puts in place, or None:
    a function, a method or class/static method, ``patch.wrap``'s wrapper, the own
    ``__init__`` of a class."""
    value = in_place(value)
    function = getattr(value, "__func__", value)   # bound, class and static methods
    code = getattr(function, "__code__", None)
    if code is None or type(code).__name__ != "code":
        return None
    return code, function


def _label(function: "Any") -> str:
    return f"{getattr(function, '__module__', '?')}." \
           f"{getattr(function, '__qualname__', getattr(function, '__name__', '?'))}"


def _counted_key(calls: CallTracker, value: "Any") -> "Any":
    """(key, function) under which calls of ``value`` are counted now, or None."""
    function = in_place(value)
    function = getattr(function, "__func__", function)
    if calls.mode == WRAPPERS:
        if getattr(function, "__lazypatch_calls__", None) is None:
            return None                 # not a counting wrapper: a class, a builtin...
        return function.__wrapped__, function.__wrapped__
    return counted_code(value)


def track(patch: "RegisteredPatch", context: PatchContext) -> None:
    """Count calls of what ``context`` put in place, for ``patch``'s record, from now
    until ``release(context)``. Called once an application committed. Under the lock:
    bookkeeping and C calls only."""
    calls = tracker()
    if calls.mode == OFF:
        return
    with STATE.lock:
        for change in context.changes:
            if not change.live or change.action == "rebind":
                continue   # a rebound copy is the same object as its main change's
            found = _counted_key(calls, change.after)
            if found is None:
                continue
            key, function = found
            label = _label(function)
            entry = patch.call_counts.get(label)
            if entry is None:
                if patch.call_counts.__class__ is not dict:   # the shared empty one (state.py)
                    patch.call_counts = {}
                entry = patch.call_counts[label] = CallCount(label)
            if calls.mode == MONITORING:
                identities = calls.function_ids.setdefault(key, set())
                identities.add(id(function))
                entry.functions = max(entry.functions, len(identities))
            holding = calls.active.get(key, ())
            if entry not in holding:
                if not holding and calls.mode == MONITORING:
                    _monitoring.set_local_events(calls.tool, key, _monitoring.events.PY_START)
                calls.active[key] = holding + (entry,)
            entry.holders += 1
            context.growing_list("call_codes").append((key, entry))


def release(context: PatchContext) -> None:
    """Stop counting what ``context`` put in place (its changes were undone)."""
    calls = STATE.calls
    held, context.call_codes = context.call_codes, ()  # type: ignore[assignment]
    if calls is None or not held:
        return
    with STATE.lock:
        for key, entry in held:
            entry.holders -= 1
            if entry.holders > 0:
                continue            # the patch still holds it on another module object
            holding = tuple(item for item in calls.active.get(key, ()) if item is not entry)
            if holding:
                calls.active[key] = holding
                continue
            calls.active.pop(key, None)
            calls.function_ids.pop(key, None)
            if calls.tool is not None:
                _monitoring.set_local_events(calls.tool, key, 0)


def counting_wrapper(value: "Any") -> "Any":
    """``value`` inside a counting wrapper (wrappers mode); other values unchanged."""
    if getattr(value, "__lazypatch_calls__", None) is not None:
        return value                     # an alias of a path already counted
    if isinstance(value, (classmethod, staticmethod)):
        inner = counting_wrapper(value.__func__)
        return value if inner is value.__func__ else type(value)(inner)
    found = counted_code(value)
    if found is None or isinstance(value, type) or found[1] is not value:
        return value                     # classes, wrappers, builtins: left as they are
    made = tracker().wrappers
    with STATE.lock:   # one wrapper per function, whichever thread puts it in place first
        known = made.get(id(value))
        if known is None:
            known = made[id(value)] = (value, _counting(value))
    return known[1]


def _counting(value: "Any") -> "Any":
    find = tracker().active.get

    def counted(*args: "Any", **kwargs: "Any") -> "Any":
        entries = find(value)
        if entries:                     # None: no patch holds it in place (a stale copy)
            _count_call(entries, 1)
        return value(*args, **kwargs)

    from .wrapping import take_identity
    take_identity(counted, value)
    counted.__lazypatch_calls__ = True           # type: ignore[attr-defined]
    return counted


def calls_of(patch: "RegisteredPatch") -> "Dict[str, Any]":
    """The call fields of ``patch``'s record: ``calls`` (None when not tracked),
    ``first_call_site``, and one entry per counted function in ``call_counts``."""
    current = STATE.calls
    entries: "List[CallCount]" = list(patch.call_counts.values())
    if not entries:
        reason = "" if current is None or current.mode != OFF else current.reason
        return {"calls": None, "first_call_site": "", "call_counts": [],
                "calls_not_tracked": reason}
    described = [entry.as_dict() for entry in entries]
    total = sum(item["calls"] for item in described)
    called = [entry for entry in entries if entry.first_call_order]
    first = min(called, key=lambda entry: entry.first_call_order).first_call_site \
        if called else ""
    return {"calls": total, "first_call_site": first, "call_counts": described,
            "calls_not_tracked": ""}



def _first_value(value: "Any") -> "Any":
    """The ledger's hook before the first change of the process: choose how calls are
    tracked now (the setting is read once, when a patch first changes something, not
    at activation), then hand the value to the chosen hook."""
    calls = tracker()
    hook = counting_wrapper if calls.mode == WRAPPERS else None
    PatchContext.value_hook = hook
    return value if hook is None else hook(value)


# The ledger knows nothing of call tracking (that would be an import circle): these
# two hooks are its only contact. value_hook sees each value before it is put in
# place; release_calls runs when a context that counted something is undone.
PatchContext.value_hook = _first_value
PatchContext.release_calls = release

"""Tracing markers: ranges around torch operators and module forwards (PyProf's successor).

PyProf wrapped every public torch function and walked the Python stack on
every call to name it. Here:

* module attribution is the module tracker's (``tracker.py``): module paths
  ("Net.encoder.0") from global forward hooks, per thread; no stack walk.
  With LAZYPATCH_TRACE_CALL_SITES=1 the outermost module's range also
  names the line that called the model: "Net (Net) @ train.py:42".
* backward: every autograd node an operator makes while a profiler records
  gets a pre-hook and a hook opening and closing a range
  "Net.encoder.0 (backward): AddmmBackward0", so the trace shows backward
  time per module (``module_table.py`` sums it). The module is stamped on
  the node when the forward operator runs, so the tracker's own backward
  tracking (node hooks per module call) is not needed and stays off.
* collectives (``torch.distributed``) get a range with the module path,
  process group and tensor sizes (``collectives.py``).
* operators are intercepted by a ``TorchFunctionMode`` (so aliased imports,
  ``torch.nn.functional`` and Tensor methods are all seen, nothing is
  rebound). Torch keeps the mode stack per thread: the mode is entered on
  the thread that applied the pack for good, and on any other thread
  (a DataLoader or serving thread running a model) for the duration of
  each outermost module call, from the tracker's forward hooks, so those
  operators are marked too without leaving a mode on a thread we do not
  own. Operators such a thread runs outside every module are not marked
  (they have no module to name). Note that ``torch.profiler`` records only
  the threads where it was started (its state is thread-local); the other
  threads' marks reach NVTX (nsys) or a profiler started on that thread.
* nothing is formatted unless a profiler is recording
  (``torch._C._autograd._profiler_enabled()``, one C call), or
  LAZYPATCH_TRACE_ALWAYS=1. Ranges are NVTX when the ``nvtx`` package and
  CUDA are usable, ``torch.profiler.record_function`` otherwise.

Every hook and the mode go through the patch ledger, so ``unpatch`` removes
them exactly.
"""

from __future__ import annotations

from threading import get_ident

from .settings import trace_always

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Set, Tuple

# Tensor property reads (x.shape, x.grad) also reach the mode as __get__/__set__,
# and opening a module range calls record_function's own ops: none of them is
# an operator of the model, so they pass straight through.
_ACCESSORS = frozenset({"__get__", "__set__", "__delete__"})


def passes_through(name: str) -> bool:
    """Whether a call named ``name`` is plumbing rather than a model operator."""
    return name in _ACCESSORS or name.startswith("_record_function")


def describe_argument(value: "Any", tensor_type: type) -> str:
    """A short text for one argument: a tensor's shape, a scalar, or its type name."""
    if isinstance(value, tensor_type):
        return str(list(value.shape))
    if isinstance(value, (bool, int, float)) or value is None:
        return repr(value)
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], tensor_type):
        return "[" + ", ".join(str(list(item.shape)) for item in value
                               if isinstance(item, tensor_type)) + "]"
    return type(value).__name__


def format_operator(path: str, function: "Any", args: "Tuple[Any, ...]",
                    kwargs: "Dict[str, Any]", tensor_type: type) -> str:
    """The range label of one operator call: "Net.encoder.0: linear([8, 4], [2, 4], [2])"."""
    name = getattr(function, "__name__", None) or str(function)
    shown = [describe_argument(value, tensor_type) for value in args]
    shown += [f"{key}={describe_argument(value, tensor_type)}" for key, value in kwargs.items()]
    label = f"{name}({', '.join(shown)})"
    return f"{path}: {label}" if path else label


class Ranges:
    """Push/pop of named ranges: NVTX when usable, else torch's record_function."""

    def __init__(self, torch: "Any") -> None:
        self.kind = "record_function"
        self._nvtx: "Any" = None
        try:
            if torch.cuda.is_available():
                import nvtx
                self._nvtx, self.kind = nvtx, "nvtx"
        except ImportError:
            pass
        self._record_function = torch.autograd.profiler.record_function

    def open(self, label: str) -> "Any":
        if self._nvtx is not None:
            self._nvtx.push_range(label)
            return None
        scope = self._record_function(label)
        scope.__enter__()
        return scope

    def close(self, scope: "Any") -> None:
        if self._nvtx is not None:
            self._nvtx.pop_range()
        elif scope is not None:
            scope.__exit__(None, None, None)


def forward_label(call: "Any", module: "Any") -> str:
    """A module forward's range label: "Net.encoder (Sequential)", and for an
    outermost call with a recorded call site "Net (Net) @ train.py:42"."""
    label = f"{call.name} ({type(module).__name__})"
    return f"{label} @ {call.call_site}" if call.call_site else label


class ModuleRanges:
    """A tracker observer: a range around each module forward while a profiler records."""

    def __init__(self, recording: "Callable[[], bool]", ranges: Ranges) -> None:
        self._recording = recording
        self._ranges = ranges
        self._open: "Dict[Any, Any]" = {}   # module call -> its range (calls are per thread)

    def entered(self, call: "Any", module: "Any", args: "Any") -> None:
        if self._recording():
            self._open[call] = self._ranges.open(forward_label(call, module))

    def left(self, call: "Any", module: "Any", output: "Any") -> None:
        if call in self._open:
            self._ranges.close(self._open.pop(call))


# autograd node metadata: the module that made it (a metadata key, not a module name)
BACKWARD_MODULE = "lazypatch_module"


class BackwardRange:
    """Node pre-hook and hook: a range around one autograd node's backward.

    It holds the label only (never the node), so the node's hooks make no
    reference cycle through C++ that the garbage collector could not see.
    """

    __slots__ = ("label", "ranges", "scope")

    def __init__(self, label: str, ranges: Ranges) -> None:
        self.label = label
        self.ranges = ranges
        self.scope: "Any" = None

    def opened(self, grad_outputs: "Any") -> None:
        self.scope = self.ranges.open(self.label)

    def closed(self, grad_inputs: "Any", grad_outputs: "Any") -> None:
        self.ranges.close(self.scope)
        self.scope = None


def backward_label(path: str, node_name: str) -> str:
    """The range label of a backward node: "Net.head (backward): AddmmBackward0"."""
    return f"{path or 'Global'} (backward): {node_name}"


def mark_backward(result: "Any", first_sequence: int, path: str, ranges: Ranges,
                  tensor_type: type) -> None:
    """Give every autograd node this operator made a backward range naming ``path``.

    The nodes made by the call are those reached from its outputs whose
    sequence number is at least the thread's counter before the call (a
    composite operator makes several); AccumulateGrad nodes (numbered last)
    go to the first operator that used the parameter.
    """
    from .tracker import tensors_of
    pending = [tensor.grad_fn for tensor in tensors_of(result, tensor_type)
               if tensor.grad_fn is not None]
    while pending:
        node = pending.pop()
        metadata = node.metadata
        if node._sequence_nr() < first_sequence or BACKWARD_MODULE in metadata:
            continue
        metadata[BACKWARD_MODULE] = path
        marker = BackwardRange(backward_label(path, node.name()), ranges)
        node.register_prehook(marker.opened)
        node.register_hook(marker.closed)
        pending.extend(following for following, _ in node.next_functions if following is not None)


class ModeSlot:
    """A one-entry mapping whose item is an entered ``TorchFunctionMode``.

    Setting the item enters the mode and deleting it exits the mode, so the
    patch ledger's ``setitem`` and its undo push and pop the mode exactly.
    """

    def __init__(self) -> None:
        self._modes: "Dict[str, Any]" = {}

    def __getitem__(self, key: str) -> "Any":
        return self._modes[key]

    def __contains__(self, key: object) -> bool:
        return key in self._modes

    def __setitem__(self, key: str, mode: "Any") -> None:
        if key in self._modes:
            del self[key]
        mode.__enter__()
        self._modes[key] = mode

    def __delitem__(self, key: str) -> None:
        mode = self._modes.pop(key)
        from torch.overrides import _get_current_function_mode
        if _get_current_function_mode() is not mode:
            raise RuntimeError("the tracing mode is not the innermost torch function mode "
                               "(another mode was entered after it and is still active); "
                               "exit that mode first")
        mode.__exit__(None, None, None)


class ThreadModes:
    """A tracker observer entering the operator mode on threads other than the
    applying one, for the duration of each outermost module call there."""

    def __init__(self, mode: "Any", home_thread: int) -> None:
        self._mode = mode
        self._home_thread = home_thread
        self._entered: "Set[Any]" = set()   # outermost calls whose thread entered the mode

    def entered(self, call: "Any", module: "Any", args: "Any") -> None:
        if call.depth == 0 and get_ident() != self._home_thread:
            self._mode.__enter__()
            self._entered.add(call)

    def left(self, call: "Any", module: "Any", output: "Any") -> None:
        if call in self._entered:
            self._entered.discard(call)
            from torch.overrides import _get_current_function_mode
            if _get_current_function_mode() is self._mode:   # the forward left no mode of its own
                self._mode.__exit__(None, None, None)


MODES = ModeSlot()
TRACERS: "List[Any]" = []   # what is installed, for tests and diagnostics


def make_mode(torch: "Any", tracker: "Any", ranges: Ranges,
              recording: "Callable[[], bool]") -> "Any":
    """The TorchFunctionMode that marks operator calls while a profiler records, and
    the autograd nodes they make, so that their backward is marked too."""
    tensor_type = torch.Tensor
    sequence_number = torch._C._autograd._get_sequence_nr
    grad_enabled = torch.is_grad_enabled
    module_globals = globals()   # format_operator looked up per call: tests can count it

    class OperatorMarks(torch.overrides.TorchFunctionMode):
        # Cleared when the patch is undone: a thread that was inside a module call
        # then keeps the mode until that call ends, and it must mark nothing.
        active = True

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if kwargs is None:
                kwargs = {}
            if not (self.active and recording()) or passes_through(getattr(func, "__name__", "")):
                return func(*args, **kwargs)
            path = tracker.current
            label = module_globals["format_operator"](path, func, args, kwargs, tensor_type)
            first_sequence = sequence_number()
            scope = ranges.open(label)
            try:
                result = func(*args, **kwargs)
            finally:
                ranges.close(scope)
            if grad_enabled():
                mark_backward(result, first_sequence, path, ranges, tensor_type)
            return result

    return OperatorMarks()


def install(torch: "Any", patch: "Any") -> None:
    """The ``training.tracing`` patch: the module tracker, its range observer and the
    operator mode, each undone by the patch ledger."""
    from . import tracker as tracker_module
    profiler_enabled = torch._C._autograd._profiler_enabled
    recording = (lambda: True) if trace_always() else profiler_enabled
    ranges = Ranges(torch)
    tracker = tracker_module.install(torch, patch)
    observer = ModuleRanges(recording, ranges)
    tracker.observers.append(observer)
    patch.on_undo(lambda: tracker.observers.remove(observer))
    mode = make_mode(torch, tracker, ranges, recording)
    patch.setitem(MODES, "operators", mode)
    patch.on_undo(lambda: setattr(mode, "active", False))
    threads = ThreadModes(mode, get_ident())
    tracker.observers.append(threads)
    patch.on_undo(lambda: tracker.observers.remove(threads))
    from .collectives import install as mark_collectives
    mark_collectives(torch, tracker, ranges, recording, patch)
    TRACERS[:] = [tracker]

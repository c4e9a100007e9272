"""Tracing markers: ranges around torch operators and module forwards (PyProf's successor).

PyProf wrapped every public torch function and walked the Python stack on
every call to name it. Here:

* module attribution is ModTracker's: global module forward pre/post hooks
  keep a stack of module paths ("Net.encoder.0"), named from the parent's
  ``_modules`` the first time a module runs; no stack walk.
* operators are intercepted by a ``TorchFunctionMode`` (so aliased imports,
  ``torch.nn.functional`` and Tensor methods are all seen, nothing is
  rebound), entered on the thread that applied the pack (the main thread).
* nothing is formatted unless a profiler is recording
  (``torch._C._autograd._profiler_enabled()``, one C call), or
  LAZYPATCH_TRACE_ALWAYS=1. Ranges are NVTX when the ``nvtx`` package and
  CUDA are usable, ``torch.profiler.record_function`` otherwise.

Every hook and the mode go through the patch ledger, so ``unpatch`` removes
them exactly.
"""

from __future__ import annotations

import threading
import weakref

from .settings import trace_always

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Tuple

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


class ModulePaths:
    """ModTracker-style module attribution through global forward hooks."""

    def __init__(self, recording: "Callable[[], bool]", ranges: Ranges) -> None:
        self.names: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
        self._local = threading.local()
        self._recording = recording
        self._ranges = ranges

    def stack(self) -> "List[Tuple[str, bool, Any]]":
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def current(self) -> str:
        stack = getattr(self._local, "stack", None)
        return stack[-1][0] if stack else ""

    def name_of(self, module: "Any") -> str:
        """The module's path; a module seen first names its whole subtree, as
        ``named_modules`` does (so ``Net.encoder.0``), once."""
        path = self.names.get(module)
        if path is None:
            root = type(module).__name__
            for sub_path, submodule in module.named_modules(prefix=root):
                if submodule not in self.names:
                    self.names[submodule] = sub_path
            path = self.names[module]
        return path

    def entered(self, module: "Any", inputs: "Any") -> None:
        path = self.name_of(module)
        opened, scope = False, None
        if self._recording():
            scope, opened = self._ranges.open(f"{path} ({type(module).__name__})"), True
        self.stack().append((path, opened, scope))

    def left(self, module: "Any", inputs: "Any", output: "Any") -> None:
        stack = self.stack()
        if stack:
            _, opened, scope = stack.pop()
            if opened:
                self._ranges.close(scope)


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


MODES = ModeSlot()
TRACERS: "List[Any]" = []   # what is installed, for tests and diagnostics


def make_mode(torch: "Any", paths: ModulePaths, ranges: Ranges,
              recording: "Callable[[], bool]") -> "Any":
    """The TorchFunctionMode that marks operator calls while a profiler records."""
    tensor_type = torch.Tensor
    module_globals = globals()   # format_operator looked up per call: tests can count it

    class OperatorMarks(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if kwargs is None:
                kwargs = {}
            if not recording() or passes_through(getattr(func, "__name__", "")):
                return func(*args, **kwargs)
            label = module_globals["format_operator"](paths.current(), func, args, kwargs,
                                                      tensor_type)
            scope = ranges.open(label)
            try:
                return func(*args, **kwargs)
            finally:
                ranges.close(scope)

    return OperatorMarks()


def install(torch: "Any", patch: "Any") -> None:
    """The ``training.tracing`` patch: module hooks and the operator mode, in the ledger."""
    from torch.nn.modules import module as nn_module

    from .steps import record_hook
    profiler_enabled = torch._C._autograd._profiler_enabled
    recording = (lambda: True) if trace_always() else profiler_enabled
    ranges = Ranges(torch)
    paths = ModulePaths(recording, ranges)
    pre = nn_module.register_module_forward_pre_hook(paths.entered)
    record_hook(pre, paths.entered, patch)
    post = nn_module.register_module_forward_hook(paths.left, always_call=True)
    record_hook(post, paths.left, patch)
    for extra in getattr(post, "extra_dict_ref", ()) or ():
        extra_dict = extra()
        if extra_dict is not None and post.id in extra_dict:
            patch.setitem(extra_dict, post.id, extra_dict.pop(post.id))
    patch.setitem(MODES, "operators", make_mode(torch, paths, ranges, recording))
    TRACERS[:] = [paths]

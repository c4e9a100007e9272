"""The module tracker: which modules run now, forward and backward (ModTracker's successor).

PyTorch's ``torch.distributed._tools.mod_tracker.ModTracker`` keeps one
process-wide set of module names. That set is shared by every thread, its
backward markers are lists kept across steps (they grow under
``torch.no_grad``), and it registers no backward markers while a backward
runs, so a re-entrant checkpoint's inner backward is attributed to the
enclosing modules only. Here:

* forward: a per-thread stack of module calls, so a module running in
  another thread (a DataLoader worker thread, a second model) never appears
  in this thread's ``parents``. The calls are seen by one wrapper around
  ``nn.Module.__call__``, not by torch's global module hooks: any global hook
  sends every module call of the process through ``_call_impl``'s slow path
  (about 17,000 instructions a call, measured with no-op hooks: 1.10x a tiny
  MLP's training step before the tracker does anything), where the wrapper
  costs a name lookup and a push and pop;
* backward, when something asks for it (``with module_tracker():``, user
  ``pre_bw``/``post_bw`` hooks, ``acquire(backward=True)``, or
  LAZYPATCH_TRACKER_BACKWARD=1 for the pack): each module call registers a
  pre-hook on the autograd nodes that produced its outputs ("its backward
  starts") and on the nodes that produced its inputs ("its backward is
  over"), ModTracker's timing, but one C call per node instead of tensor
  hooks; the state is kept per autograd graph task
  (``torch._C._current_graph_task_id()``), which is what the engine's worker
  threads share, and dropped by an engine callback when the task ends.
  Without it only forward is tracked (``is_bw`` still answers): those node
  hooks, and the Python calls they make during backward, are most of the
  idle tracker's cost (``benchmarks/packs/training/bench_tracker.py``: 1.09x an untracked
  training step with them, 1.02x without);
* backward hooks are registered whenever gradients are enabled, also during
  a backward (a re-entrant checkpoint recomputes its forward there, and its
  inner backward is a nested graph task that sees the enclosing task's
  modules too);
* names are fully qualified (``Net.encoder.0``): a module first seen as a
  root names its whole subtree once; a module created after that is found
  under the module whose forward called it;
* call sites (``acquire(call_sites=True)`` or LAZYPATCH_TRACE_CALL_SITES=1):
  the outermost module call of a thread records the first frame outside
  torch that called it ("train.py:42"), formatted once per distinct code
  object and line; nothing walks the stack per operator or per submodule.

``parents``, ``is_bw``, ``get_known_fqn``, ``register_user_hooks`` and
``clear_user_hooks`` mean what they mean on ModTracker.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

GLOBAL = "Global"   # ModTracker's name for "outside every module"


class ModuleCall:
    """One execution of one module's forward: what the idle tracker keeps per call.

    The attributes below the slots are class-level defaults: an untracked call
    (forward only, no call sites) sets its three slots and nothing else, which
    keeps the per-call work of the idle tracker small. ``TrackedCall`` adds what
    backward tracking and call sites need.
    """

    __slots__ = ("name", "module", "depth")

    call_site = ""        # outermost calls, when recorded: "train.py:42"
    backward = False      # its node hooks are registered

    def __init__(self, name: str, module: "Any", depth: int) -> None:
        self.name = name
        self.module = module                 # while its forward runs (None after, if tracked)
        self.depth = depth                   # calls enclosing it on its thread (0: outermost)


class TrackedCall(ModuleCall):
    """A module call whose backward is tracked (per graph task) or whose call site is kept."""

    __slots__ = ("module_ref", "tracker", "call_site", "backward", "input_nodes", "outer_task")

    def __init__(self, name: str, module: "Any", depth: int, tracker: "ModuleTracker") -> None:
        self.name = name
        self.module = module
        self.depth = depth
        self.module_ref: "Any" = None        # from its forward's end, if its backward is tracked:
        #                                      ModTracker's choice, the module may die first
        self.tracker = tracker
        self.call_site = ""
        self.backward = False
        self.input_nodes = 0                 # distinct autograd nodes of the inputs
        self.outer_task = -1                 # graph task running when the call ran (-1: none)

    def output_gradient_ready(self, grad_outputs: "Any") -> None:
        """Node pre-hook on an output's producer: this call's backward starts."""
        self.tracker._backward_started(self, grad_outputs)

    def input_gradient_ready(self, grad_outputs: "Any") -> None:
        """Node pre-hook on an input's producer: this call's backward has reached it."""
        self.tracker._input_reached(self, grad_outputs)


class BackwardTask:
    """What one autograd graph task has entered: active calls in entry order."""

    __slots__ = ("active", "started", "reached", "outer")

    def __init__(self, outer: "Optional[BackwardTask]") -> None:
        self.active: "Dict[TrackedCall, None]" = {}
        self.started: "Set[TrackedCall]" = set()
        self.reached: "Dict[TrackedCall, int]" = {}
        self.outer = outer


def tensors_of(value: "Any", tensor_type: type) -> "List[Any]":
    """The tensors in a forward's inputs or output; plain cases without pytree."""
    if isinstance(value, tensor_type):
        return [value]
    if isinstance(value, (tuple, list)):
        if all(isinstance(item, tensor_type) for item in value):
            return list(value)
    elif value is None:
        return []
    from torch.utils._pytree import tree_flatten
    return [item for item in tree_flatten(value)[0] if isinstance(item, tensor_type)]


def producer_nodes(tensors: "List[Any]") -> "List[Any]":
    """The distinct autograd nodes that produced these tensors (leaves have none)."""
    nodes: "List[Any]" = []
    for tensor in tensors:
        node = tensor.grad_fn
        if node is not None and all(node is not seen for seen in nodes):
            nodes.append(node)
    return nodes


class ModuleTracker:
    """Modules executing now (``parents``), backward flag and user hooks; see the module doc."""

    def __init__(self, torch: "Any") -> None:
        self._tensor = torch.Tensor
        self._grad_enabled = torch.is_grad_enabled
        self._graph_task = torch._C._current_graph_task_id
        self._engine = torch.autograd.Variable._execution_engine
        # id(module) -> (weak reference to it, qualified name): read on every module call,
        # so a plain dict (a WeakKeyDictionary's get is a Python call making a reference)
        self._known: "Dict[int, Tuple[Any, str]]" = {}
        self._local = threading.local()
        self._tasks: "Dict[int, BackwardTask]" = {}
        self._handles: "List[Any]" = []
        self._users = 0
        self._backward_users = 0
        self._call_site_users = 0
        self._backward = False     # node hooks wanted (see _update_wants); read per call
        self._call_sites = False   # outermost calls record their call site
        self._plain = True         # nothing but the stack to keep: the hooks' short path
        self._sites: "Dict[Tuple[Any, int], str]" = {}   # (code, line) -> "file.py:line"
        self._torch_directory = os.path.dirname(torch.__file__) + os.sep
        self._lock = threading.Lock()
        self.observers: "List[Any]" = []   # internal listeners (add_observer)
        self._pre_fw: "Optional[Callable[..., Any]]" = None
        self._post_fw: "Optional[Callable[..., Any]]" = None
        self._pre_bw: "Optional[Callable[..., Any]]" = None
        self._post_bw: "Optional[Callable[..., Any]]" = None

    # -- public, ModTracker's names ------------------------------------------

    @property
    def parents(self) -> "Set[str]":
        """Qualified names of the modules executing now on this thread, with "Global"."""
        names = {GLOBAL}
        names.update(call.name for call in self.stack())
        task = self._tasks.get(self._graph_task())
        while task is not None:
            names.update(call.name for call in task.active)
            task = task.outer
        return names

    @property
    def is_bw(self) -> bool:
        """Whether this thread is running an autograd backward now."""
        return self._graph_task() != -1

    def get_known_fqn(self, module: "Any") -> "Optional[str]":
        """The module's qualified name if it has run while tracking, else None."""
        entry = self._known.get(id(module))
        return entry[1] if entry is not None and entry[0]() is module else None

    def register_user_hooks(self, pre_fw_hook: "Optional[Callable[..., Any]]" = None,
                            post_fw_hook: "Optional[Callable[..., Any]]" = None,
                            pre_bw_hook: "Optional[Callable[..., Any]]" = None,
                            post_bw_hook: "Optional[Callable[..., Any]]" = None) -> None:
        """Call ``pre_fw(module, args)``, ``post_fw(module, args, output)``,
        ``pre_bw(module, grad_outputs)`` and ``post_bw(module, grad_inputs)``
        around each module call; the module's name is in ``parents`` meanwhile.
        One hook of each kind at a time (``clear_user_hooks`` first), as on ModTracker."""
        for label, new, old in (("pre_fw_hook", pre_fw_hook, self._pre_fw),
                                ("post_fw_hook", post_fw_hook, self._post_fw),
                                ("pre_bw_hook", pre_bw_hook, self._pre_bw),
                                ("post_bw_hook", post_bw_hook, self._post_bw)):
            if new is not None and old is not None:
                raise AssertionError(f"only one {label} can be registered at a time; "
                                     f"call clear_user_hooks() first")
        self._pre_fw = pre_fw_hook or self._pre_fw
        self._post_fw = post_fw_hook or self._post_fw
        self._pre_bw = pre_bw_hook or self._pre_bw
        self._post_bw = post_bw_hook or self._post_bw
        self._update_wants()

    def clear_user_hooks(self) -> None:
        """Forget the hooks given to ``register_user_hooks``."""
        self._pre_fw = self._post_fw = self._pre_bw = self._post_bw = None
        self._update_wants()

    # -- more than ModTracker ------------------------------------------------

    def stack(self) -> "List[ModuleCall]":
        """This thread's forward calls, outermost first."""
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    @property
    def current(self) -> str:
        """The innermost module running now: forward on this thread, else the
        last module whose backward started in this graph task; "" outside both."""
        stack = getattr(self._local, "stack", None)
        if stack:
            return stack[-1].name
        task = self._tasks.get(self._graph_task())
        while task is not None:
            if task.active:
                return next(reversed(task.active)).name
            task = task.outer
        return ""

    @property
    def call_site(self) -> str:
        """Where this thread's outermost module call came from ("train.py:42"); "" when
        no module runs here or call sites are not recorded."""
        stack = getattr(self._local, "stack", None)
        return stack[0].call_site if stack else ""

    @property
    def tracking(self) -> bool:
        """Whether the module calls are watched (``nn.Module.__call__`` wrapped)."""
        return bool(self._handles)

    @property
    def tracks_backward(self) -> bool:
        """Whether module calls register the node hooks that track their backward."""
        return self._backward

    # -- installing ------------------------------------------------------------

    def acquire(self, *, backward: bool = False, call_sites: bool = False) -> None:
        """Install the global module hooks for one more user (a patch, a ``with`` block);
        ``backward`` also tracks backward, ``call_sites`` records call sites, while it lasts.
        Each ``acquire`` is matched by one ``release`` with the same arguments."""
        with self._lock:
            self._users += 1
            self._backward_users += bool(backward)
            self._call_site_users += bool(call_sites)
            self._update_wants()
            if self._users == 1:
                from torch import nn
                self._handles = [CallWrapper(self, nn.Module)]

    def release(self, *, backward: bool = False, call_sites: bool = False) -> None:
        """One user less; the last one removes the hooks exactly."""
        with self._lock:
            if self._users == 0:
                return
            self._users -= 1
            self._backward_users -= bool(backward and self._backward_users)
            self._call_site_users -= bool(call_sites and self._call_site_users)
            self._update_wants()
            if self._users == 0:
                for wrapper in self._handles:
                    wrapper.remove()
                self._handles = []
                # Calls still running lose their post-hook: forget every thread's
                # stack, or they would stay in ``parents`` when tracking resumes.
                self._local = threading.local()

    def add_observer(self, observer: "Any") -> None:
        """Call ``observer.entered(call, module, args)`` and ``observer.left(call, module,
        output)`` around each module call (internal listeners: the tracing pack)."""
        self.observers.append(observer)
        self._update_wants()

    def remove_observer(self, observer: "Any") -> None:
        """Stop calling an observer given to ``add_observer``."""
        self.observers.remove(observer)
        self._update_wants()

    def _update_wants(self) -> None:
        """Fold what the users, hooks and observers ask for into the flags the hooks read."""
        self._backward = bool(self._backward_users or self._pre_bw is not None
                              or self._post_bw is not None)
        self._call_sites = bool(self._call_site_users)
        self._plain = not (self._backward or self._call_sites or self.observers
                           or self._pre_fw is not None or self._post_fw is not None)

    def __enter__(self) -> "ModuleTracker":
        """A block tracks like ModTracker: forward and backward."""
        self.acquire(backward=True)
        return self

    def __exit__(self, *exc_info: "Any") -> None:
        self.release(backward=True)

    # -- naming ----------------------------------------------------------------

    def name_of(self, module: "Any") -> str:
        """The module's qualified name, found once (see the module doc)."""
        name = self.get_known_fqn(module)
        if name is None:
            name = self._name_new(module)
        return name

    def _remember(self, module: "Any", name: str) -> None:
        """Record a module's name under its id, with a reference that forgets it when the
        module dies (so a new object at the same address is not taken for it)."""
        key = id(module)
        entry = self._known.get(key)
        if entry is not None and entry[0]() is module:
            self._known[key] = (entry[0], name)
            return
        known = self._known

        def forget(reference: "Any") -> None:
            if known.get(key, (None, ""))[0] is reference:
                del known[key]
        self._known[key] = (weakref.ref(module, forget), name)

    def _name_new(self, module: "Any") -> str:
        for call in reversed(self.stack()):
            for relative, submodule in call.module.named_modules():
                if submodule is module:
                    return self._name_subtree(module, f"{call.name}.{relative}", False)
        # A root: it names its subtree, as ModTracker does (a wrapper seen later renames).
        return self._name_subtree(module, type(module).__name__, True)

    def _name_subtree(self, module: "Any", name: str, overwrite: bool) -> str:
        for relative, submodule in module.named_modules():
            if overwrite or self.get_known_fqn(submodule) is None:
                self._remember(submodule, f"{name}.{relative}" if relative else name)
        self._remember(module, name)
        return name

    # -- forward hooks ---------------------------------------------------------

    # Both run for every module call of the process. With nothing but the stack to
    # keep (``_plain``: no backward tracking, call sites, observers or user forward
    # hooks) a call costs a name lookup and one three-slot ModuleCall pushed and
    # popped; everything else is in the ``_tracked`` methods.

    def _forward_started(self, module: "Any", args: "Any") -> None:
        entry = self._known.get(id(module))
        if entry is not None and entry[0]() is module:
            name = entry[1]
        else:
            name = self._name_new(module)
        try:
            stack = self._local.stack
        except AttributeError:
            stack = self._local.stack = []
        if self._plain:
            stack.append(ModuleCall(name, module, len(stack)))
        else:
            self._forward_started_tracked(module, args, name, stack)

    def _forward_started_tracked(self, module: "Any", args: "Any", name: str,
                                 stack: "List[ModuleCall]") -> None:
        backward = self._backward and self._grad_enabled()
        site = not stack and self._call_sites
        call: "ModuleCall"
        if backward or site:
            tracked = call = TrackedCall(name, module, len(stack), self)
            if site:
                tracked.call_site = self._caller(sys._getframe(2))
        else:
            call = ModuleCall(name, module, len(stack))
        stack.append(call)
        for observer in self.observers:
            observer.entered(call, module, args)
        if self._pre_fw is not None:
            self._pre_fw(module, args)
        if backward:
            tracked.backward = True
            tracked.outer_task = self._graph_task()
            nodes = producer_nodes([tensor for tensor in tensors_of(args, self._tensor)
                                    if tensor.requires_grad])
            tracked.input_nodes = len(nodes)
            for node in nodes:
                node.register_prehook(tracked.input_gradient_ready)

    def _forward_finished(self, module: "Any", args: "Any", output: "Any") -> None:
        try:
            stack = self._local.stack
        except AttributeError:
            return   # the tracker started inside this forward
        if not stack:
            return
        call = stack[-1]
        if call.module is not module:
            return   # unbalanced: the tracker started inside this module's forward
        if self._plain and not call.backward:
            stack.pop()
        else:
            self._forward_finished_tracked(call, module, args, output, stack)

    def _forward_finished_tracked(self, call: "ModuleCall", module: "Any", args: "Any",
                                  output: "Any", stack: "List[ModuleCall]") -> None:
        if self._post_fw is not None:
            self._post_fw(module, args, output)
        for observer in self.observers:
            observer.left(call, module, output)
        stack.pop()
        # Decided at the call's start: a call that started before backward tracking
        # was asked for registers no output hooks without their input hooks.
        if isinstance(call, TrackedCall) and call.backward:
            # The autograd graph keeps the call alive through its node hooks: from
            # here on it names the module by a weak reference only.
            call.module, call.module_ref = None, weakref.ref(module)
            if self._grad_enabled():
                for node in producer_nodes([tensor for tensor in tensors_of(output, self._tensor)
                                            if tensor.requires_grad]):
                    node.register_prehook(call.output_gradient_ready)

    # -- call sites ------------------------------------------------------------

    def _caller(self, frame: "Optional[FrameType]") -> str:
        """"file.py:42" of the first frame outside torch above ``frame`` (the hook's
        caller), formatted once per (code object, line)."""
        torch_directory = self._torch_directory
        while frame is not None and (frame.f_code.co_filename.startswith(torch_directory)
                                     or frame.f_globals.get("__name__") == __name__):
            frame = frame.f_back
        if frame is None:
            return ""
        key = (frame.f_code, frame.f_lineno)
        site = self._sites.get(key)
        if site is None:
            site = self._sites[key] = f"{os.path.basename(key[0].co_filename)}:{key[1]}"
        return site

    # -- backward hooks --------------------------------------------------------

    def _task(self) -> "BackwardTask":
        """This graph task's state, made at its first hook with an end-of-task callback."""
        task_id = self._graph_task()
        task = self._tasks.get(task_id)
        if task is None:
            task = self._tasks[task_id] = BackwardTask(None)
            self._engine.queue_callback(lambda: self._task_finished(task_id))
        return task

    def _backward_started(self, call: TrackedCall, grad_outputs: "Any") -> None:
        task = self._task()
        if call in task.started:
            return   # another output of the same call: "any" fires once
        task.started.add(call)
        if task.outer is None and call.outer_task != -1:
            # Registered while an enclosing backward ran (a re-entrant checkpoint's
            # recomputation): this nested task sees that task's modules too.
            task.outer = self._tasks.get(call.outer_task)
        task.active[call] = None
        if self._pre_bw is not None:
            self._pre_bw(call.module_ref(), grad_outputs)

    def _input_reached(self, call: TrackedCall, grad_outputs: "Any") -> None:
        task = self._tasks.get(self._graph_task())
        if task is None or call not in task.active:
            return   # its backward never started here (a recomputation's own call)
        remaining = task.reached.get(call, call.input_nodes) - 1
        if remaining > 0:
            task.reached[call] = remaining
            return
        task.reached.pop(call, None)
        self._backward_finished(task, call, grad_outputs)

    def _backward_finished(self, task: BackwardTask, call: TrackedCall, grads: "Any") -> None:
        if self._post_bw is not None:
            self._post_bw(call.module_ref(), grads)
        task.active.pop(call, None)

    def _task_finished(self, task_id: int) -> None:
        """Engine callback: calls whose inputs needed no gradient end with the task."""
        task = self._tasks.get(task_id)
        if task is None:
            return
        for call in reversed(list(task.active)):
            self._backward_finished(task, call, ())
        del self._tasks[task_id]

    def active_tasks(self) -> "Iterator[int]":
        """Graph tasks with backward state now (for tests: empty between steps)."""
        return iter(list(self._tasks))


class CallWrapper:
    """``module_class.__call__`` wrapped so that the tracker sees each module call
    start and end (also when its forward raises); ``remove`` puts the original back."""

    def __init__(self, tracker: ModuleTracker, module_class: type) -> None:
        self._class = module_class
        self._original = original = module_class.__dict__["__call__"]
        started, finished = tracker._forward_started, tracker._forward_finished
        known = tracker._known

        def __call__(module: "Any", *args: "Any", **kwargs: "Any") -> "Any":
            if not tracker._plain:
                started(module, args)
                try:
                    output = original(module, *args, **kwargs)
                except BaseException:
                    finished(module, args, None)
                    raise
                finished(module, args, output)
                return output
            # _forward_started's and _forward_finished's short paths, inlined: they run
            # per module call, and on a small model the calls are most of a step.
            entry = known.get(id(module))
            name = entry[1] if entry is not None and entry[0]() is module \
                else tracker._name_new(module)
            try:
                stack = tracker._local.stack
            except AttributeError:
                stack = tracker._local.stack = []
            call = ModuleCall(name, module, len(stack))
            stack.append(call)
            try:
                output = original(module, *args, **kwargs)
            except BaseException:
                finished(module, args, None)
                raise
            if tracker._plain and stack and stack[-1] is call:
                # _forward_finished's short path (after a release, ``stack`` is an
                # abandoned list: popping it changes nothing anyone reads)
                stack.pop()
            else:
                finished(module, args, output)
            return output

        __call__.__wrapped__ = original   # type: ignore[attr-defined]
        __call__.__doc__ = original.__doc__
        self._wrapper = __call__
        module_class.__call__ = __call__   # type: ignore[method-assign]

    def remove(self) -> None:
        """Restore the original ``__call__``; if something wrapped it over ours since,
        leave that in place (removing ours would drop it too) and say so."""
        if self._class.__dict__.get("__call__") is self._wrapper:
            self._class.__call__ = self._original   # type: ignore[method-assign]
            return
        import warnings
        warnings.warn(f"{self._class.__qualname__}.__call__ was replaced after the module "
                      f"tracker wrapped it: the tracker's wrapper stays under it",
                      RuntimeWarning, stacklevel=3)


_TRACKERS: "List[ModuleTracker]" = []


def tracker_for(torch: "Any") -> ModuleTracker:
    """The process's one tracker (made on first use, after torch is imported)."""
    if not _TRACKERS:
        _TRACKERS.append(ModuleTracker(torch))
    return _TRACKERS[0]


def install(torch: "Any", patch: "Any", backward: bool = False) -> ModuleTracker:
    """A patch using the tracker: install its hooks (tracking backward too if ``backward``,
    recording call sites if LAZYPATCH_TRACE_CALL_SITES=1); the patch's undo releases them."""
    from .settings import call_sites
    wants = {"backward": backward, "call_sites": call_sites()}
    tracker = tracker_for(torch)
    tracker.acquire(**wants)
    patch.on_undo(lambda: tracker.release(**wants))
    return tracker

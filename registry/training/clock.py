"""The step counter shared by the brake, the profiler and the step sources.

A module of its own so that the sources (``steps.py``) and the listeners
(``brake.py``, which flushes every listener before it stops the process)
both import it, and neither imports the other.
"""

from __future__ import annotations

import threading
import weakref

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, List, Optional


class StepClock:
    """Counts finished training steps and tells the listeners."""

    def __init__(self) -> None:
        self.step = 0
        self.listeners: "List[Any]" = []
        self._optimizer_counts: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()
        self._local = threading.local()   # depth of mmengine iterations on this thread

    # -- listeners ----------------------------------------------------------

    def add_listener(self, listener: "Any") -> None:
        """Add a listener once; the profiler goes before the brake so it flushes first."""
        if listener not in self.listeners:
            self.listeners.append(listener)
            self.listeners.sort(key=lambda item: getattr(item, "order", 0))

    def remove_listener(self, listener: "Any") -> None:
        if listener in self.listeners:
            self.listeners.remove(listener)

    def close(self) -> None:
        """Let every listener flush (profiler output) before the process stops."""
        for listener in list(self.listeners):
            close = getattr(listener, "close", None)
            if close is not None:
                close()

    # -- sources ------------------------------------------------------------

    def inside_loop_iteration(self) -> bool:
        return getattr(self._local, "depth", 0) > 0

    def optimizer_stepped(self, optimizer: "Any", args: "Any", kwargs: "Any") -> None:
        """The global optimizer post-hook: count one step of any PyTorch loop."""
        if self.inside_loop_iteration():
            return   # an mmengine iteration counts itself with the loop's counter
        count = self._optimizer_counts.get(optimizer)
        if count is None:
            count = restored_step(optimizer) or 1
        else:
            count += 1
        self._optimizer_counts[optimizer] = count
        # Several optimizers (a GAN) step once each per iteration: the step is the largest.
        self.finished(max(self._optimizer_counts.values()), "optimizer step")

    def loop_iteration(self, wrapped: "Any", loop: "Any", args: "Any", kwargs: "Any") -> "Any":
        """``patch.wrap`` wrapper of mmengine's ``run_iter``."""
        for listener in list(self.listeners):
            listener.step_starting()
        self._local.depth = getattr(self._local, "depth", 0) + 1
        try:
            result = wrapped(*args, **kwargs)
        finally:
            self._local.depth -= 1
        self.finished(int(loop.iter), f"{type(loop).__name__} iteration")
        return result

    def finished(self, step: int, what: str) -> None:
        self.step = step
        for listener in list(self.listeners):
            listener.step_finished(step, what)


def restored_step(optimizer: "Any") -> "Optional[int]":
    """The step count an optimizer keeps in its state (Adam, AdamW, ...), if any.

    Read once per optimizer (a GPU-resident count would cost a sync each step).
    """
    largest = None
    try:
        states = optimizer.state.values()
    except AttributeError:
        return None
    for state in states:
        value = state.get("step") if isinstance(state, dict) else None
        if value is None:
            continue
        try:
            number = int(value.item() if hasattr(value, "item") else value)
        except (TypeError, ValueError):
            continue
        largest = number if largest is None else max(largest, number)
    return largest


CLOCK = StepClock()

"""Ranges around torch.distributed collectives: module path, process group and sizes.

The collectives are Python functions of ``torch.distributed.distributed_c10d``
re-exported by ``torch.distributed``; they are wrapped (``patch.wrap`` with
rebind, so ``torch.distributed.all_reduce`` and ``from ... import`` copies
see it too) and label a range only while a profiler records.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "broadcast", "reduce", "all_to_all_single", "barrier",
               "send", "recv", "gather", "scatter")


def describe_group(c10d: "Any", group: "Any") -> str:
    """"group 0 (gloo, rank 0 of 2)": the group's name, backend, this rank and its size."""
    try:
        group = group if group is not None else c10d._get_default_group()
        name = getattr(group, "group_name", "") or "default"
        return (f"group {name} ({c10d.get_backend(group)}, rank {c10d.get_rank(group)} of "
                f"{c10d.get_world_size(group)})")
    except Exception as error:   # an uninitialised group: the call itself will say why
        return f"group ? ({type(error).__name__})"


def describe_tensors(value: "Any", tensor_type: type) -> str:
    """"[16] float32 64 B" for a tensor; lists of tensors are listed."""
    if isinstance(value, tensor_type):
        size = value.numel() * value.element_size()
        return f"{list(value.shape)} {str(value.dtype).replace('torch.', '')} {size} B"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(describe_tensors(item, tensor_type) for item in value
                               if isinstance(item, tensor_type)) + "]"
    return ""


def make_wrapper(c10d: "Any", tracker: "Any", ranges: "Any", recording: "Callable[[], bool]",
                 tensor_type: type) -> "Callable[..., Any]":
    """The ``patch.wrap`` wrapper naming a collective's range while a profiler records."""
    def collective(wrapped: "Any", instance: "Any", args: "Any", kwargs: "Any") -> "Any":
        if not recording():
            return wrapped(*args, **kwargs)
        shown = [describe_tensors(value, tensor_type) for value in args]
        group = describe_group(c10d, kwargs.get("group"))
        path = tracker.current
        label = f"{wrapped.__name__}({', '.join(text for text in shown if text)}; {group})"
        scope = ranges.open(f"{path}: {label}" if path else label)
        try:
            return wrapped(*args, **kwargs)
        finally:
            ranges.close(scope)
    return collective


def install(torch: "Any", tracker: "Any", ranges: "Any", recording: "Callable[[], bool]",
            patch: "Any") -> None:
    """Wrap every collective present in ``distributed_c10d`` (none when unavailable)."""
    if not torch.distributed.is_available():
        return
    from torch.distributed import distributed_c10d as c10d
    wrapper = make_wrapper(c10d, tracker, ranges, recording, torch.Tensor)
    for name in COLLECTIVES:
        if callable(getattr(c10d, name, None)):
            patch.wrap(c10d, name, wrapper, rebind=True)

"""mmengine 0.10 resuming its own checkpoints under torch >= 2.6, still weights-only.

torch 2.6 changed ``torch.load``'s default to ``weights_only=True``. mmengine
0.10.x saves its message hub (``HistoryBuffer`` objects holding NumPy arrays)
in every checkpoint and loads local files with a plain
``torch.load(filename, map_location=...)``, so ``Runner(resume=True)`` fails
with "Weights only load failed".

``openmmlab.mmengine_checkpoint_load`` (on by default) keeps the weights-only
unpickler and, only while mmengine's local loader runs, allows exactly the
globals mmengine 0.10.7's own checkpoints contain (:func:`mmengine_checkpoint_globals`,
measured on real Runner checkpoints). Anything else in a checkpoint (a
pickled object whose ``__reduce__`` runs a command, a user class) still
fails with torch's own "Weights only load failed" ``UnpicklingError``. A
caller's explicit ``weights_only=`` is passed to ``torch.load`` unchanged.

``openmmlab.mmengine_checkpoint_load_unsafe`` (off, tag ``unsafe``; enable it
by name) makes the same loader unpickle fully (``weights_only=False``), as
mmengine did before torch 2.6: for trusted checkpoints holding objects
outside the list (a custom statistics method, a user class in ``meta``). A
full unpickle runs whatever code the file names, so it is never on by
default; note that the selectors ``*`` and ``openmmlab`` (the family) select
it too.

The replacement is a copy of mmengine 0.10.7's ``load_from_local`` with the
allow-list added, so it is pinned to that function's source (see
``lazypatch.source_drift``): another mmengine skips the patch with a reason.
Other schemes (http, s3, ...) are untouched.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Callable, List, Optional, Tuple, Union

import lazypatch

#: SHA-256 of ``inspect.getsource(mmengine.runner.checkpoint.load_from_local)``, 0.10.7.
PINNED_LOAD_FROM_LOCAL = frozenset({
    "aa24a2a99a65f3f6bfda9e682038e22fda6b6ebf0ef5b8fd751d9e7f8c741645",
})

#: Set (through the patch context, so undone exactly) by
#: ``openmmlab.mmengine_checkpoint_load_unsafe``: the loader unpickles fully.
FULL_UNPICKLING = False

#: The statistics methods ``HistoryBuffer._set_default_statistics`` registers.
HISTORY_BUFFER_STATISTICS = frozenset({"min", "max", "current", "mean"})

# torch's allow-list is one process-wide set: of two loads at once, the first
# to finish would remove the entries the other still needs.
ALLOW_LIST_LOCK = threading.RLock()

SafeGlobal = Union[Callable[..., Any], Tuple[Callable[..., Any], str]]


def history_buffer_statistic(owner: Any, name: str) -> Any:
    """``getattr`` as mmengine's checkpoints use it: one of HistoryBuffer's default statistics.

    ``HistoryBuffer.__getstate__`` saves its class-level statistics dict, whose
    values are the functions ``HistoryBuffer.min`` etc.; pickle protocol 2
    writes a function with a dotted ``__qualname__`` as ``getattr(HistoryBuffer,
    "min")``. Allowing the real ``builtins.getattr`` would hand a checkpoint
    every attribute of every allowed object, so this stands in for it.
    """
    import pickle

    from mmengine.logging.history_buffer import HistoryBuffer
    if owner is HistoryBuffer and name in HISTORY_BUFFER_STATISTICS:
        return getattr(HistoryBuffer, name)
    raise pickle.UnpicklingError(
        f"getattr({owner!r}, {name!r}) is not allowed: under "
        f"openmmlab.mmengine_checkpoint_load a checkpoint may only name the HistoryBuffer "
        f"statistics {sorted(HISTORY_BUFFER_STATISTICS)}")


def numeric_dtype_classes(numpy: Any) -> List[type]:
    """The DType classes of NumPy's boolean, integer and floating dtypes (not object, str, void)."""
    return list(dict.fromkeys(type(numpy.dtype(code)) for code in "?bBhHiIlLqQefdg"))


def mmengine_checkpoint_globals() -> List[SafeGlobal]:
    """The globals mmengine 0.10.7 Runner checkpoints contain beyond torch's own allow-list.

    Measured with ``torch.serialization.get_unsafe_globals_in_checkpoint`` on
    checkpoints of real Runner trainings on CPU (iteration and epoch loops,
    validation with ``save_best``, LR/momentum schedulers, EMAHook, dataset
    metainfo from a config). ``collections.OrderedDict`` and ``Counter``
    (MultiStepLR milestones) are in torch's default list already.
    """
    import numpy
    from mmengine.config.config import ConfigDict
    from mmengine.logging.history_buffer import HistoryBuffer
    try:
        from numpy._core import multiarray
    except ImportError:   # NumPy 1.x, where numpy.core is not a deprecated alias yet
        from numpy.core import multiarray  # type: ignore[no-redef]

    return [
        # message_hub["log_scalars"]: one HistoryBuffer per logged scalar.
        HistoryBuffer,
        # HistoryBuffer's statistics dict (see history_buffer_statistic).
        (history_buffer_statistic, "builtins.getattr"),
        # HistoryBuffer._log_history / _count_history are NumPy arrays.
        numpy.ndarray, numpy.dtype,
        (multiarray._reconstruct, "numpy._core.multiarray._reconstruct"),
        # NumPy scalars: metrics, best_score, values the HistoryBuffer returns.
        (multiarray.scalar, "numpy._core.multiarray.scalar"),
        # A pickled dtype is rebuilt by BUILD on an instance of its DType class
        # (no GLOBAL, so get_unsafe_globals_in_checkpoint does not list them).
        # Measured: float64 and int64; an evaluator's metric (runtime_info,
        # best_score) may be any boolean, integer or floating NumPy type.
        *numeric_dtype_classes(numpy),
        # The same two functions as checkpoints saved under NumPy 1.x name them.
        (multiarray._reconstruct, "numpy.core.multiarray._reconstruct"),
        (multiarray.scalar, "numpy.core.multiarray.scalar"),
        # meta["dataset_meta"] / message_hub runtime_info: a dataset's metainfo
        # given in a config keeps nested dicts as ConfigDict (mmdet3d's
        # seg_label_mapping, for instance).
        ConfigDict,
    ]


def load_from_local(filename: str, map_location: Any, weights_only: Optional[bool] = None) -> Any:
    """mmengine 0.10.7's local checkpoint loader, weights-only with mmengine's own types allowed.

    An explicit ``weights_only`` goes to ``torch.load`` as given. Otherwise
    the load is torch's default (weights-only) with :func:`mmengine_checkpoint_globals`
    allowed for this call only, or a full unpickle when
    ``openmmlab.mmengine_checkpoint_load_unsafe`` is applied.
    """
    import torch
    filename = os.path.expanduser(filename)
    if not os.path.isfile(filename):
        raise FileNotFoundError(f"{filename} can not be found.")
    if weights_only is not None:
        return torch.load(filename, map_location=map_location, weights_only=weights_only)
    if FULL_UNPICKLING:
        return torch.load(filename, map_location=map_location, weights_only=False)
    # torch's safe_globals removes on exit every entry it added, even one the
    # user had registered before: add only the entries not registered yet, so
    # the process-wide list is exactly as it was once the load returns.
    with ALLOW_LIST_LOCK:
        registered = set(torch.serialization.get_safe_globals())
        missing = [entry for entry in mmengine_checkpoint_globals() if entry not in registered]
        with torch.serialization.safe_globals(missing):
            return torch.load(filename, map_location=map_location)


def load_local_checkpoints_weights_only(checkpoint: Any, patch: lazypatch.PatchContext) -> None:
    """Make mmengine's '' (local file) scheme load its own checkpoints, weights-only."""
    drift = lazypatch.source_drift(checkpoint, "load_from_local", PINNED_LOAD_FROM_LOCAL,
                                   copied_from="mmengine 0.10.7")
    if drift is not None:
        patch.skip(drift)
    schemes = checkpoint.CheckpointLoader._schemes
    if schemes.get("") is not checkpoint.load_from_local:
        patch.skip("mmengine's local checkpoint scheme is not its load_from_local any more "
                   "(replaced by another library); leaving it alone")
    patch.setitem(schemes, "", load_from_local)
    patch.setattr(checkpoint, "load_from_local", load_from_local)
    patch.note("mmengine loads local checkpoints weights-only, with the types mmengine's own "
               "checkpoints hold allowed during the load; anything else fails as torch says "
               "(openmmlab.mmengine_checkpoint_load_unsafe unpickles fully, trusted files only)")


def allow_full_unpickling(checkpoint: Any, patch: lazypatch.PatchContext) -> None:
    """Make the local loader installed by openmmlab.mmengine_checkpoint_load unpickle fully."""
    if checkpoint.CheckpointLoader._schemes.get("") is not load_from_local:
        patch.skip("works through openmmlab.mmengine_checkpoint_load's local loader, which is "
                   "not installed (disabled, skipped or unpatched)")
    patch.setattr(sys.modules[__name__], "FULL_UNPICKLING", True)
    patch.note("mmengine loads local checkpoints with torch.load(weights_only=False): any code "
               "a checkpoint names runs; load only checkpoints you trust")

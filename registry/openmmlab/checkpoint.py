"""mmengine 0.10 resuming its own checkpoints under torch >= 2.6.

torch 2.6 changed ``torch.load``'s default to ``weights_only=True``. mmengine
0.10.x saves its message hub (``HistoryBuffer`` objects holding NumPy arrays)
in every checkpoint and loads local files with a plain
``torch.load(filename, map_location=...)``, so ``Runner(resume=True)`` fails
with "Weights only load failed". mmengine's local loader is replaced by one
that asks for the full unpickling mmengine was written for, explicitly: it
is the user's own training checkpoint. Other schemes (http, s3, ...) are
untouched.

The replacement is a copy of mmengine 0.10.7's ``load_from_local`` with the
keyword added, so it is pinned to that function's source (see
``lazypatch.source_drift``): another mmengine skips the patch with a reason.
"""

from __future__ import annotations

import os
from typing import Any

import lazypatch

#: SHA-256 of ``inspect.getsource(mmengine.runner.checkpoint.load_from_local)``, 0.10.7.
PINNED_LOAD_FROM_LOCAL = frozenset({
    "aa24a2a99a65f3f6bfda9e682038e22fda6b6ebf0ef5b8fd751d9e7f8c741645",
})


def load_from_local(filename: str, map_location: Any) -> Any:
    """mmengine 0.10.7's local checkpoint loader, with ``weights_only=False`` spelled out."""
    import torch
    filename = os.path.expanduser(filename)
    if not os.path.isfile(filename):
        raise FileNotFoundError(f"{filename} can not be found.")
    return torch.load(filename, map_location=map_location, weights_only=False)


def load_local_checkpoints_fully(checkpoint: Any, patch: lazypatch.PatchContext) -> None:
    """Make mmengine's '' (local file) checkpoint scheme load as mmengine expects."""
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
    patch.note("mmengine loads local checkpoints with torch.load(weights_only=False), as it "
               "did before torch 2.6: resume works; load only checkpoints you trust")

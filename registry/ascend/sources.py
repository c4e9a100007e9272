"""Guard for the few methods this pack must copy instead of wrapping.

A copied method body silently drifts from upstream: the DrivingSDK patcher's
ResNet forwards replace whatever the installed mmdet has with the text of
the version they were written against. Here each copied method is pinned to
the SHA-256 of ``inspect.getsource`` of the upstream method it was copied
from; a patch refuses to install its copy when the installed source differs
(a new mmdet version, or another patch already replaced the method).
``tests/packs/test_ascend_*`` fails when the tested version's source changes.
"""

from __future__ import annotations

import hashlib
import inspect
from typing import Any, Dict, FrozenSet, Optional

#: "Class.method" -> hashes of the upstream sources the copy is equivalent to.
#: Recorded from mmdet 3.3.0 (mmdet/models/backbones/resnet.py).
PINNED_SOURCES: Dict[str, FrozenSet[str]] = {
    "BasicBlock.forward": frozenset({
        "e4d81381d11d1d1bf323df4a4ecd85dc05938f72467c7d6414731ddd6b5c3b15",
    }),
    "Bottleneck.forward": frozenset({
        "8e53bcf5bdfc9ddaf1e9f49bfc9795c7d976a70e173eb5adfe96f94f7a8bbf5f",
    }),
    "ResNet.forward": frozenset({
        "3d2f14c8f0a1f6d7830f965f2447ef6c7b8551fb002af0f79d0eefa2686b823d",
    }),
}


def source_hash(function: Any) -> Optional[str]:
    """SHA-256 of the function's source text, or None when it has no source."""
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return None
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def drift_reason(owner: type, method: str) -> Optional[str]:
    """Why the copy of ``owner.method`` must not be installed, or None when it may.

    Reads the method from the class's own ``__dict__`` (not ``getattr``) so a
    wrapper installed by someone else is seen as what it is.
    """
    key = f"{owner.__name__}.{method}"
    current = owner.__dict__.get(method)
    if current is None:
        return f"{owner.__module__}.{key} is not defined on the class"
    if getattr(current, "__wrapped__", None) is not None:
        # inspect.getsource follows __wrapped__ to the original's text, which
        # would hide that another patch wrapped the method already.
        return (f"{owner.__module__}.{key} is already wrapped by "
                f"{getattr(current, '__module__', '?')}.{getattr(current, '__qualname__', '?')}; "
                f"installing the copy would discard that wrapper")
    digest = source_hash(current)
    if digest not in PINNED_SOURCES[key]:
        where = f"{getattr(current, '__module__', '?')}.{getattr(current, '__qualname__', '?')}"
        return (f"the source of {owner.__module__}.{key} (now {where}, sha256 "
                f"{(digest or 'unavailable')[:12]}) differs from the version this patch "
                f"copied (mmdet 3.3.0); installing the copy would discard those changes")
    return None

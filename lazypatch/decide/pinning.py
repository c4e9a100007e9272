"""Pinning copied upstream code to the source it was copied from.

Wrapping the original is always preferred, but a few patches must replace a
function with an edited copy (a call in the middle of a forward changes). A
copy silently drifts from upstream: installed over a newer version it throws
away whatever upstream changed. So a copy is pinned to the SHA-256 of
``inspect.getsource`` of the function it was copied from, and the patch
refuses to install (``patch.skip(reason)``) when the installed source differs.

``hashlib`` and ``inspect`` are imported when a patch checks, never at
activation.
"""

from __future__ import annotations

from ..slots import MISSING, describe, read_slot

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable, Optional


def source_sha256(function: "Any") -> "Optional[str]":
    """SHA-256 of ``inspect.getsource(function)``, or None when it has no source."""
    import hashlib
    import inspect
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return None
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def source_drift(owner: "Any", name: str, pinned: "Iterable[str]",
                 copied_from: str) -> "Optional[str]":
    """Why a copy of ``owner.name`` must not be installed, or None when it may.

    ``pinned`` are the SHA-256 digests of the upstream sources the copy is
    equivalent to; ``copied_from`` names that upstream (for the message, e.g.
    ``"mmdet 3.3.0"``). The current object is read raw from the owner's own
    namespace, so a wrapper someone else installed is seen for what it is.
    """
    current = read_slot("attribute", owner, name)
    where = f"{describe(owner)}.{name}"
    if current is MISSING:
        return f"{where} is not defined there"
    if getattr(current, "__wrapped__", None) is not None:
        # inspect.getsource follows __wrapped__ to the original's text, which
        # would hide that another patch wrapped the function already.
        return (f"{where} is already wrapped by {getattr(current, '__module__', '?')}."
                f"{getattr(current, '__qualname__', '?')}; installing the copy would "
                f"discard that wrapper")
    function = getattr(current, "__func__", current)   # classmethod / staticmethod
    digest = source_sha256(function)
    if digest not in set(pinned):
        return (f"the source of {where} (sha256 {(digest or 'unavailable')[:12]}) differs "
                f"from the version this patch copied ({copied_from}); installing the copy "
                f"would discard those changes")
    return None

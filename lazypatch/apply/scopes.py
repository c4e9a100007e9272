"""``lazypatch.patched(...)``: patches enabled and applied for a scope, undone at its end.

Scopes are counted per patch, not remembered per scope object: the first
scope to hold a patch records what it was before (enabled? applied?), and
the last one to let go puts exactly that back. So scopes may overlap in
any order, from any number of threads, nest, and re-enter the same
``patched`` object: the patch stays applied while any scope holds it, and
the original comes back when none does. A patch that was applied before
the first scope stays applied after the last.

Entering is all-or-nothing too: if applying one chosen patch fails in
strict mode (or is interrupted), the patches this entry already took hold
of are let go again before the exception propagates.
"""

from __future__ import annotations

from ..decide.selection import select, set_enabled
from ..declare.registration import ensure_finder
from ..state import DISABLED, REVERTED, STATE
from .application import apply_to_imported
from .undo import detach, undo_contexts

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Iterable, List, Optional

    from ..state import RegisteredPatch

SCOPE_ENDED = "scope of lazypatch.patched() ended"


def hold(patch: "RegisteredPatch") -> None:
    """Take hold of ``patch`` for a scope: enable it (apply separately)."""
    with STATE.lock:
        if patch.scope_holds == 0:
            patch.scope_saved = (patch.enabled, bool(patch.live))
        patch.scope_holds += 1
        set_enabled(patch, True, "")


def release(patch: "RegisteredPatch") -> None:
    """Let go of ``patch``; the last scope puts back what it was before the first."""
    contexts: "List[Any]" = []
    with STATE.lock:
        if patch.scope_holds <= 0:
            return
        patch.scope_holds -= 1
        if patch.scope_holds:
            return
        was_enabled, was_applied = patch.scope_saved or (patch.enabled, bool(patch.live))
        patch.scope_saved = None
        if not was_applied:
            # Back to the state before the scope: a default-off patch reads "disabled" again.
            contexts = detach(patch, REVERTED if was_enabled else DISABLED, SCOPE_ENDED)
        set_enabled(patch, was_enabled, SCOPE_ENDED)
    if contexts:
        undo_contexts(patch, contexts)


class patched:
    """Context manager: enable and apply the chosen patches for a scope, undo on exit.

    ``with lazypatch.patched("a.b", tags=["compat"]): ...`` selects by names
    (or globs) and tags, including patches registered with ``enabled=False``.
    Patches that were already applied before the block are left as they were.
    Scopes overlap and nest freely, across threads too.
    """

    def __init__(self, *names: str, tags: "Iterable[str]" = ()) -> None:
        tags = [tags] if isinstance(tags, str) else list(tags)
        for item in list(names) + tags:
            if not isinstance(item, str) or not item:
                raise TypeError(f"patched() takes patch names, globs and tags as non-empty "
                                f"strings, got {item!r}")
        self._selectors = list(names) + [f"tag:{tag}" for tag in tags]
        # One list of held patches per entry not yet exited (re-entry nests).
        self._entries: "List[List[RegisteredPatch]]" = []
        self.names: "List[str]" = []

    def __enter__(self) -> "patched":
        chosen, unmatched = select(self._selectors)
        if unmatched or not self._selectors:
            from ..decide.unmatched_selectors import unmatched_message
            raise KeyError(unmatched_message(unmatched, "patched()"))
        ensure_finder()
        held: "List[RegisteredPatch]" = []
        try:
            for patch in chosen:
                hold(patch)
                held.append(patch)
                apply_to_imported(patch)
        except BaseException:
            _release_all(held)
            raise
        with STATE.lock:
            self._entries.append(held)
        self.names = [patch.name for patch in chosen]
        return self

    def __exit__(self, *exc_info: "Any") -> None:
        with STATE.lock:
            held = self._entries.pop() if self._entries else []
        _release_all(held)


def _release_all(held: "List[RegisteredPatch]") -> None:
    """Release every held patch, newest first; raise the first failure at the end."""
    first: "Optional[BaseException]" = None
    for patch in reversed(held):
        try:
            release(patch)
        except BaseException as error:
            if first is None:
                first = error
    if first is not None:
        raise first

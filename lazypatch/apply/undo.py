"""Undoing patches: the other half of ``application.py``.

An application is taken off its patch (``detach``, under the lock), then undone
without the lock (``undo_contexts``: ``PatchContext.undo`` in the ledger restores
each change exactly). Every change is attempted even when one fails; one
``UndoError`` names the failures at the end. Applications taken off a patch wait in
``patch.undoing`` until their undo claims them, so an interrupt in between loses
nothing.
"""

from __future__ import annotations

from ..decide.selection import set_enabled
from ..slots import describe_exception
from ..state import APPLIED, REVERTED, STATE

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Callable, List, Optional, Tuple

    from ..state import RegisteredPatch
    from .ledger import PatchContext


def detach(patch: "RegisteredPatch", status: str, reason: str,
           module: "Any" = None) -> "List[PatchContext]":
    """Take a patch's live applications (those on ``module`` only, if given) off it and
    mark it; the caller holds the lock and undoes the returned contexts after releasing it.

    Between this and the undo the applications are nowhere but in the caller's hands: an
    interrupt (KeyboardInterrupt from a signal handler) landing there would lose them. So
    they wait in ``patch.undoing`` until ``undo_contexts`` claims them, and any left there
    unclaimed are handed out again, first, by the next detach of this patch."""
    # One read of ``live`` (it settles: applications not folded in yet are undone too),
    # and the rest written back without a second settle (replace_live says why).
    live = patch.live
    if module is None:
        contexts, kept = live, []
    else:
        contexts = [context for context in live if context.module is module]
        kept = [context for context in live if context.module is not module]
    if patch.undoing:
        contexts = [context for context in patch.undoing if context not in contexts] + contexts
    patch.undoing = list(contexts)   # first: at no moment are they in neither list
    patch.replace_live(kept)
    patch.generation += 1
    if not kept and patch.late_references:
        # The globals it named held the originals an application left them (or the
        # replacements an earlier undo could not place): with nothing of the patch live,
        # an original is right again. What this undo cannot place, it names afresh
        # (ledger._say_copies_kept, boundaries._say_who_keeps).
        patch.late_references = []
    if patch.status == APPLIED and not patch.live:
        patch.status, patch.reason = status, reason
        patch.remember(f"{status}: {reason}")
    return contexts


def _attempt_each(steps: "List[Tuple[RegisteredPatch, Callable[[], None]]]"
                  ) -> "Tuple[List[str], Optional[BaseException]]":
    """Run every undo step even when some fail: the failures ("patch: what") and the
    first interrupt (KeyboardInterrupt, SystemExit), for the caller to raise at the end."""
    from ..errors import UndoError
    failures: "List[str]" = []
    interrupt: "Optional[BaseException]" = None
    for patch, step in steps:
        try:
            step()
        except UndoError as error:
            failures.extend(error.failures)
        except Exception as error:
            failures.append(f"{patch.name}: {describe_exception(error)}")
        except BaseException as error:   # finish the others first, then propagate
            if interrupt is None:
                interrupt = error
    return failures, interrupt


def undo_contexts(patch: "RegisteredPatch", contexts: "List[PatchContext]") -> None:
    """Undo detached applications newest first; every one is attempted. Raises one
    ``UndoError`` naming what failed (or the first interrupt) at the end.

    Only the contexts still waiting in ``patch.undoing`` are undone, claimed under the
    lock: when two threads detached the same waiting ones, exactly one undoes each."""
    from ..errors import UndoError
    claimed: "List[PatchContext]" = []
    settled = False
    try:
        with STATE.lock:
            waiting = patch.undoing
            claimed = [context for context in contexts if context in waiting]
            if claimed:
                patch.undoing = [context for context in waiting if context not in claimed]
        failures, interrupt = _attempt_each([(patch, context.undo)
                                             for context in reversed(claimed)])
        incomplete = [context for context in claimed if context.live_changes()]
        if incomplete:
            with STATE.lock:   # keep what could not be undone reachable for another try
                patch.replace_live(incomplete + list(patch.live))
                patch.reason = "undo incomplete: " + "; ".join(failures or ["interrupted"])
        settled = True
    except BaseException:
        if not settled:
            # Interrupted after the claim, before the steps ran or before what they left
            # was put back: what is still live waits for the next detach (see detach).
            with STATE.lock:
                waiting = patch.undoing
                patch.undoing = [context for context in claimed if context not in waiting
                                 and context.live_changes()] + waiting
        raise
    if interrupt is not None:
        raise interrupt
    if failures:
        raise UndoError(f"undo of patch {patch.name!r} could not restore: " + "; ".join(failures),
                        failures=failures)


def revert(patch: "RegisteredPatch", status: str = REVERTED, reason: str = "reverted",
           module: "Any" = None) -> None:
    """Undo a patch's live changes exactly (on ``module`` only, if given); imports nothing."""
    with STATE.lock:
        contexts = detach(patch, status, reason, module)
    if contexts:
        undo_contexts(patch, contexts)


def revert_context(patch: "RegisteredPatch", context: PatchContext, status: str,
                   reason: str) -> None:
    """Undo one application of a patch (a rolled-back or reverted-after-import one)."""
    with STATE.lock:
        if context not in patch.live:
            return
        patch.undoing = [*patch.undoing, context]   # claimed by undo_contexts below (see detach)
        patch.live.remove(context)
        patch.generation += 1
        if not patch.live and patch.status == APPLIED:
            patch.status, patch.reason = status, reason
            patch.remember(f"{status}: {reason}")
    undo_contexts(patch, [context])


def unpatch(patch: "RegisteredPatch", reason: str) -> None:
    """Undo ``patch`` on every module it touched and keep it from applying again."""
    with STATE.lock:
        set_enabled(patch, False, "unpatched")
        contexts = detach(patch, REVERTED, reason)
    if contexts:
        undo_contexts(patch, contexts)


def unpatch_all(reason: str) -> None:
    """Undo every applied patch, newest first, and keep all from applying again.

    Every undo is attempted; one ``UndoError`` naming all failures is raised at
    the end (or the first interrupt, once everything else was undone).
    """
    from functools import partial

    from ..errors import UndoError
    with STATE.lock:
        everything = STATE.catalog.patches()
        work = []
        for patch in sorted(everything, key=lambda item: item.applied_order, reverse=True):
            set_enabled(patch, False, "unpatched")
            contexts = detach(patch, REVERTED, reason)
            if contexts:
                work.append((patch, contexts))
        for patch in everything:
            set_enabled(patch, False, "unpatched")
    failures, interrupt = _attempt_each(
        [(patch, partial(undo_contexts, patch, contexts)) for patch, contexts in work])
    if interrupt is not None:
        raise interrupt
    if failures:
        raise UndoError(f"unpatch_all() undid everything else but could not restore "
                        f"{len(failures)} change(s): " + "; ".join(failures), failures=failures)

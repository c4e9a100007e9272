"""Running patches against modules: ordering, claiming, conditions, rollback, status.

This is the one place that calls patch functions. The importer calls
``run_body`` around a watched module's execution; registration calls
``apply_to_imported`` for targets that are already there.

Threads: a module body runs once under the import system's per-module lock,
so the patches of one import never race each other. What can race is a
registration in one thread against the end of the target's import in
another; each patch is *claimed* under ``_lock`` before it runs, and patch
functions themselves run without holding ``_lock`` (a patch may import other
modules, and holding a global lock across an import is how deadlocks start).
"""

from __future__ import annotations

import sys
from _thread import RLock
from _warnings import warn  # the C half of warnings: no import cost
from os import environ
from time import perf_counter

from .catalog import AFTER, APPLIED, BEFORE, FAILED, PENDING, REVERTED, SKIPPED, Catalog, Patch
from .config import parse_flag
from .context import Change, PatchContext, own_dict
from .errors import LatePatchWarning, PatchConflictWarning, PatchError, PatchFailedWarning, SkipPatch
from .importer import (
    LazyPatchFinder,
    defer_until_executed,
    execute_with_loader,
    install_finder,
    watch_lazy_module,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~40M instructions to import; keep it off the activation path
    from typing import Any, Dict, List, Sequence

CATALOG = Catalog()
_lock = RLock()
_claimed: Dict[int, Patch] = {}
_applications = 0   # global application counter, so undo-all can go newest first


class Settings:
    """Engine switches. Read from the environment when lazypatch is imported, so
    that they hold without activation; activation re-reads them with the config."""

    strict = parse_flag("LAZYPATCH_STRICT", environ.get("LAZYPATCH_STRICT"))


SETTINGS = Settings()


def run_body(module: Any, loader: Any) -> None:
    """Execute ``module`` with ``loader``, running its patches before and after.

    Runs on every watched import, so the loops are written out here rather
    than split into helpers: each Python call costs about as much as the
    work it would do (DESIGN.md's budget is 5 µs before the patches run).
    """
    name = module.__name__
    patches = CATALOG.by_target.get(name, ())
    for patch in patches:
        if patch.module is module and patch.status == APPLIED:
            # A reload re-executes the same module object: first take back what
            # our patches did to it, so undo never restores objects of the old body.
            revert(patch, PENDING, "target re-executed (reload); re-applied after it")
    for patch in patches:
        if patch.phase == BEFORE and patch.enabled:
            apply(patch, module)
    try:
        execute_with_loader(module, loader)
    except BaseException:
        _revert_scoped(patches, name, "target import failed")
        raise
    for patch in patches:
        if patch.phase == BEFORE and patch.status == APPLIED:
            _revert_scoped(patches, name, "")   # some before-import patch is live: rare
            break
    # What sys.modules holds now is what the importer hands out: a module that
    # replaced itself (sys.modules[__name__] = ...) is patched as its replacement.
    # Re-read the catalog: the body may have registered patches on itself.
    received = sys.modules.get(name, module)
    for patch in CATALOG.by_target.get(name, ()):
        if patch.phase == AFTER and patch.enabled:
            apply(patch, received)


def run_patches(target: str, module: Any, phase: str) -> None:
    """Apply every enabled patch of ``phase`` on ``target``, by priority."""
    for patch in CATALOG.by_target.get(target, ()):
        if patch.phase == phase:
            apply(patch, module)


def apply(patch: Patch, module: Any, *, late: bool = False) -> None:
    """Apply one patch to one module object, at most once; never raises unless strict."""
    if not patch.enabled:
        return      # the common case of default-off packs: no lock needed to say no
    key = id(patch)
    with _lock:
        if not patch.enabled or key in _claimed or \
                (patch.status == APPLIED and patch.module is module):
            return
        _claimed[key] = patch
    try:
        _apply_claimed(patch, module, late)
    finally:
        # Only claiming needs the lock; dict.pop is atomic under the GIL.
        _claimed.pop(key, None)


def _apply_claimed(patch: Patch, module: Any, late: bool) -> None:
    for requirement in patch.requires:
        reason = requirement.unmet_reason()
        if reason is not None:
            patch.status, patch.reason = SKIPPED, reason
            patch.history.append(f"skipped: {reason}")
            logger = _debug_logger()
            if logger is not None:
                logger.debug("patch %s skipped: %s", patch.name, reason)
            return
    context = PatchContext(patch.name, module)
    namespace = own_dict(module)
    if not isinstance(namespace, dict):
        namespace = None
    # A shallow copy (in C) both detects plain assignments afterwards and keeps
    # the old values alive, so their id()s cannot be reused while we compare.
    before = dict(namespace) if namespace is not None else None
    started = perf_counter()
    try:
        if patch.takes_context:
            patch.function(module, context)
        else:
            patch.function(module)
    except SkipPatch as skip:
        patch.duration_ms = (perf_counter() - started) * 1000.0
        context.undo()
        patch.notes.extend(context.notes)
        patch.status, patch.reason = SKIPPED, skip.reason
        patch.history.append(f"skipped: {skip.reason}")
        return
    except Exception as error:
        patch.duration_ms = (perf_counter() - started) * 1000.0
        patch.notes.extend(context.notes)
        _fail(patch, context, error)
        return
    patch.duration_ms = (perf_counter() - started) * 1000.0
    patch.notes.extend(context.notes)
    patch.note_providers = list(context.note_providers)
    patch.status, patch.reason, patch.error = APPLIED, "", ""
    patch.context, patch.module = context, module
    patch.applications += 1
    global _applications
    _applications += 1
    patch.applied_order = _applications
    # Plain assignments are found when the report is built, from two C-level
    # copies taken here: the diff itself stays off the import path.
    patch.untracked_changes = []
    patch.namespace_snapshots = None if namespace is None else \
        (before, dict(namespace), context.module, context.changes)
    patch.history.append(f"applied to {getattr(module, '__name__', module)!r}")
    for change, others in context.conflicts:
        _record_conflict(change, others)
    logger = _debug_logger()
    if logger is not None:
        logger.debug("patch %s applied to %s (%d change(s), %.3f ms)", patch.name,
                     patch.target, len(context.changes), patch.duration_ms)
    if late:
        _warn_late(patch, context)


def _fail(patch: Patch, context: PatchContext, error: Exception) -> None:
    import traceback
    rollback_error = ""
    try:
        context.undo()
    except RuntimeError as undo_error:
        rollback_error = f"; rollback incomplete: {undo_error}"
    patch.status = FAILED
    patch.reason = f"{type(error).__name__}: {error}{rollback_error}"
    patch.error = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    patch.context, patch.module = None, None
    patch.history.append(f"failed: {patch.reason}")
    consequence = ("Strict mode (LAZYPATCH_STRICT=1) stops the import" if SETTINGS.strict
                   else "The import continues unpatched by it")
    message = (f"lazypatch: patch {patch.name!r} on {patch.target!r} failed and was rolled "
               f"back ({len(context.changes)} change(s) undone): {patch.reason}. "
               f"{consequence}; disable it with LAZYPATCH_DISABLE={patch.name}")
    if SETTINGS.strict:
        raise PatchError(message, patch_name=patch.name, target=patch.target) from error
    warn(message, PatchFailedWarning, stacklevel=2)


def _record_conflict(change: Change, others: List[Change]) -> None:
    winner = CATALOG.by_name.get(change.patch_name)
    losers = sorted({other.patch_name for other in others})
    text = (f"{change.describe()[len(change.action) + 1:]} is changed by "
            f"{', '.join(repr(name) for name in losers + [change.patch_name])}; "
            f"{change.patch_name!r} wins (applied last)")
    for name in losers + [change.patch_name]:
        patch = winner if name == change.patch_name else CATALOG.by_name.get(name)
        if patch is not None and text not in patch.conflicts:
            patch.conflicts.append(text)
    warn(f"lazypatch: conflict: {text}", PatchConflictWarning, stacklevel=3)


def _warn_late(patch: Patch, context: PatchContext) -> None:
    from .references import describe_references
    replaced = [original for _, original in context.replaced_objects()]
    if not replaced:
        return
    rebound = tuple(change.owner for change in context.changes if change.action == "rebind")
    holders = describe_references(replaced, exclude=(context.module,) + rebound)
    patch.late_references = holders
    if holders:
        warn(
            f"lazypatch: patch {patch.name!r} was applied to {patch.target!r}, which was "
            f"imported before lazypatch was active; these module globals still hold the "
            f"original objects: {', '.join(holders)}. Activate lazypatch earlier (first "
            f"line: import lazypatch.auto, or `lazypatch run`), or use "
            f"patch.setattr(..., rebind=True).", LatePatchWarning, stacklevel=4)


def revert(patch: Patch, status: str = REVERTED, reason: str = "reverted") -> None:
    """Undo a patch's live changes exactly; imports nothing."""
    with _lock:
        context = patch.context
        patch.context, patch.module = None, None
        if context is not None:
            context.undo()
        if patch.status == APPLIED:
            patch.status, patch.reason = status, reason
            patch.history.append(f"{status}: {reason}")


def _revert_scoped(patches: "Sequence[Patch]", target: str, reason: str) -> None:
    for patch in patches:
        if patch.phase == BEFORE and patch.status == APPLIED and patch.context is not None \
                and (reason or patch.context.revert_after_import_requested):
            revert(patch, REVERTED, reason or f"scoped to the execution of {target!r}; "
                                              f"undone when it finished")


# --- registration-time application ---------------------------------------

FINDER = LazyPatchFinder(CATALOG.by_target, run_body)


def ensure_finder() -> None:
    """Install the finder first on sys.meta_path unless it is there."""
    install_finder(FINDER)


def apply_to_imported(patch: Patch) -> None:
    """Apply ``patch`` now if its target is already imported, as the import would have."""
    module = sys.modules.get(patch.target)
    if module is None or not patch.enabled:
        return
    if watch_lazy_module(module, run_body):
        return  # applied by the proxy when the lazy module really loads
    if defer_until_executed(module, lambda: _after_deferred(patch)):
        return  # still executing: never patch a half-built module
    if patch.phase == BEFORE:
        if patch.status == PENDING:
            patch.reason = (f"{patch.target!r} was already imported; runs before its body "
                            f"executes next (reload)")
        return
    apply(patch, module, late=True)


def _after_deferred(patch: Patch) -> None:
    received = sys.modules.get(patch.target)
    if received is not None and patch.phase == AFTER:
        apply(patch, received)


def _debug_logger() -> Any:
    """The ``lazypatch`` logger if logging is already imported and DEBUG is on, else None.

    Never imports logging (20 ms): a process that configured no logging pays
    nothing, not even for formatting the message.
    """
    logging_module = sys.modules.get("logging")
    if logging_module is None:
        return None
    logger = logging_module.getLogger("lazypatch")
    return logger if logger.isEnabledFor(logging_module.DEBUG) else None


__all__ = ["CATALOG", "SETTINGS", "FINDER", "apply", "revert", "run_body",
           "apply_to_imported", "ensure_finder"]

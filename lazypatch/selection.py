"""Deciding whether a patch applies: selection rules, requirements and strict mode.

A patch applies to an import when it is *enabled* (its default, then the
configuration's ``LAZYPATCH_ENABLE``/``LAZYPATCH_DISABLE`` rules, then
``enable()``/``disable()``/``unpatch()`` calls, in that order of time) and
its *requirements* hold on the installed distributions. Strict mode decides
what a failure does. This module is the only place that makes those
decisions; application asks it, doctor and the CLI ask it.

Rules from configuration apply to every patch, however lazypatch was
imported: they are read when ``lazypatch`` is imported (see
``configure``), and apply to patches registered later as well.
"""

from __future__ import annotations

from .state import DISABLED, PENDING, STATE

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Iterable, List, Optional, Tuple

    from .configuration import Configuration
    from .state import RegisteredPatch

# A patch with this tag is chosen only by its exact name: never by "*", a glob,
# a family prefix or another of its tags. For patches that weaken a safety
# default (full unpickling, say), which nobody should enable by accident.
EXPLICIT_TAG = "explicit"

DISABLED_BY_CONFIGURATION = "disabled by configuration"
ENABLED_BY_CONFIGURATION = "enabled by configuration"


def is_glob(selector: str) -> bool:
    return any(character in selector for character in "*?[")


def matches(selector: str, patch: "RegisteredPatch") -> bool:
    """Whether a name, glob, or tag selector chooses ``patch``.

    ``*`` alone means every patch; ``tag:x`` a tag; a dotted prefix a whole
    family (``openmmlab`` chooses ``openmmlab.mmcv_ext``). A patch tagged
    ``explicit`` is chosen by its exact name only. fnmatch (which
    imports ``re``) is only loaded when a selector really is a glob.
    """
    if selector == patch.name:
        return True
    if EXPLICIT_TAG in patch.tags:
        return False
    if selector == "*" or selector in patch.tags:
        return True
    if selector.startswith("tag:"):
        return selector[4:] in patch.tags
    if is_glob(selector):
        from fnmatch import fnmatchcase
        return fnmatchcase(patch.name, selector)
    return patch.name.startswith(selector + ".")


def select(selectors: "Iterable[str]") -> "Tuple[List[RegisteredPatch], List[str]]":
    """Patches matching any selector (name, glob or tag), by order, and unmatched selectors."""
    chosen = {}
    unmatched = []
    with STATE.lock:
        everything = list(STATE.catalog.by_name.values())
    for selector in selectors:
        if not isinstance(selector, str) or not selector:
            raise TypeError(f"a patch selector must be a non-empty string (a name, glob or "
                            f"'tag:...'), got {selector!r}")
        hits = [patch for patch in everything if matches(selector, patch)]
        if not hits:
            unmatched.append(selector)
        for patch in hits:
            chosen[patch.name] = patch
    return sorted(chosen.values(), key=lambda patch: patch.order), unmatched


def set_enabled(patch: "RegisteredPatch", enabled: bool, reason: str) -> None:
    """Switch a patch on or off from now on (the caller holds the lock); a patch
    switched off while an application is in flight sees it as stale."""
    if not enabled and patch.enabled:
        patch.generation += 1
    patch.enabled = enabled
    if not enabled and patch.status == PENDING:
        patch.status, patch.reason = DISABLED, reason
    elif enabled and patch.status == DISABLED:
        patch.status, patch.reason = PENDING, ""


def decide_at_registration(patch: "RegisteredPatch") -> None:
    """Apply the configuration's rules to a new patch; ``LAZYPATCH_DISABLE`` wins."""
    if STATE.disable_rules and any(matches(rule, patch) for rule in STATE.disable_rules):
        set_enabled(patch, False, DISABLED_BY_CONFIGURATION)
    elif STATE.enable_rules and any(matches(rule, patch) for rule in STATE.enable_rules):
        set_enabled(patch, True, ENABLED_BY_CONFIGURATION)


def configure(configuration: "Configuration") -> "List[RegisteredPatch]":
    """Adopt a configuration's rules and strict mode; return the registered patches
    its rules newly enabled (the caller applies those whose target is imported)."""
    newly_enabled = []
    with STATE.lock:
        STATE.configuration = configuration
        STATE.strict = configuration.strict
        STATE.enable_rules = list(configuration.enable)
        STATE.disable_rules = list(configuration.disable)
        for patch in STATE.catalog.patches():
            was_enabled = patch.enabled
            decide_at_registration(patch)
            if patch.enabled and not was_enabled:
                newly_enabled.append(patch)
    return newly_enabled


def unmet_requirement(patch: "RegisteredPatch", module: "Any" = None) -> "Optional[str]":
    """Why the patch's requirements do not hold now, or None when they do.

    ``module`` is the module being imported: a requirement on it that no
    distribution provides is checked against its ``__version__``. A version
    that came from somewhere other than the distribution the requirement
    names (an import name, a ``__version__``) is said in the patch's history.
    """
    for requirement in patch.requires:
        reason, source = requirement.evaluate(module)
        if source and source != f"distribution {requirement.name}":
            with STATE.lock:
                patch.remember(f"requirement {requirement}: version of {requirement.name} "
                               f"from {source}")
        if reason is not None:
            return reason
    return None


def unmet_requirements(patch: "RegisteredPatch", module: "Any" = None) -> "List[Tuple[str, str]]":
    """(requirement, reason) for every requirement of the patch that does not hold."""
    found = []
    for requirement in patch.requires:
        reason = requirement.unmet_reason(module)
        if reason is not None:
            found.append((str(requirement), reason))
    return found


def set_strict(strict: bool = True) -> None:
    """In strict mode a failing patch fails its target's import (``PatchError``)."""
    if not isinstance(strict, bool):
        raise TypeError(f"set_strict() takes True or False, got {strict!r}")
    with STATE.lock:
        STATE.strict = strict

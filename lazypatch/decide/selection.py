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

import sys

from ..activate.configuration import BUILTIN_PACKS
from ..state import DISABLED, PENDING, STATE
from .requirements import parse_requirements

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Dict, Iterable, List, Optional, Tuple

    from ..activate.configuration import Configuration
    from ..state import RegisteredPatch

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


def could_name(selector: object, pack: str) -> bool:
    """Whether ``selector`` may choose a patch of ``pack`` (its name, a name under it,
    its tag, ``*``, or a glob whose literal start is compatible). Errs towards yes:
    loading a pack too many costs time, one too few loses the user's choice."""
    if not isinstance(selector, str):
        return False
    if selector.startswith("tag:"):
        selector = selector[4:]
    if selector == pack or selector.startswith(pack + "."):
        return True
    if is_glob(selector):
        literal = selector
        for character in "*?[":
            literal = literal.split(character, 1)[0]
        return pack.startswith(literal) or literal.startswith(pack + ".")
    return False


def load_opt_in_packs(selectors: "Iterable[object]") -> None:
    """Import every declared opt-in pack that one of ``selectors`` may name, so that
    its patches exist before the selectors are matched. A pack is imported once."""
    selectors = list(selectors)
    with STATE.lock:
        wanted = [(pack, module) for pack, module in STATE.opt_in_packs.items()
                  if any(could_name(selector, pack) for selector in selectors)]
        for pack, _ in wanted:
            del STATE.opt_in_packs[pack]
    for _, module in wanted:
        # Outside the lock: the pack's import registers patches (which take it).
        __import__(module)


def select(selectors: "Iterable[str]") -> "Tuple[List[RegisteredPatch], List[str]]":
    """Patches matching any selector (name, glob or tag), by order, and unmatched selectors.
    Opt-in packs a selector may name are imported first."""
    selectors = list(selectors)
    if STATE.opt_in_packs:
        load_opt_in_packs(selectors)
    chosen, unmatched = _select_loaded(selectors)
    if unmatched and declare_builtin_opt_in_packs():
        # Without activation nobody declared the built-in opt-in packs: a pack named
        # in patched()/enable() is registered on demand, active or not.
        load_opt_in_packs(unmatched)
        more, unmatched = _select_loaded(unmatched)
        chosen = sorted({patch.name: patch for patch in chosen + more}.values(),
                        key=lambda patch: patch.order)
    return chosen, unmatched


def declare_builtin_opt_in_packs() -> bool:
    """Declare every built-in opt-in pack that is neither declared nor imported (as
    activation does); whether one was. Their patches are all off by default, so this
    changes nothing until a selector names one. Only on the unmatched path: it imports
    ``lazypatch.registry``'s small ``__init__``."""
    from importlib import import_module
    try:
        registry = import_module(BUILTIN_PACKS)
    except ImportError:   # an installation without the built-in packs
        return False
    declared = False
    with STATE.lock:
        for name in getattr(registry, "OPT_IN", ()):
            module = f"{BUILTIN_PACKS}.{name}"
            if module not in sys.modules and name not in STATE.opt_in_packs:
                STATE.opt_in_packs[name] = module
                declared = True
    return declared


def _select_loaded(selectors: "List[str]") -> "Tuple[List[RegisteredPatch], List[str]]":
    """``select`` among the patches registered now."""
    chosen: "Dict[str, RegisteredPatch]" = {}
    unmatched = []
    for selector in selectors:
        if not isinstance(selector, str) or not selector:
            raise TypeError(f"a patch selector must be a non-empty string (a name, glob or "
                            f"'tag:...'), got {selector!r}")
        with STATE.lock:
            hits = _matching(selector)
        if not hits:
            unmatched.append(selector)
        chosen.update(hits)
    return sorted(chosen.values(), key=lambda patch: patch.order), unmatched


def _matching(selector: str) -> "Dict[str, RegisteredPatch]":
    """The patches ``matches(selector, patch)`` chooses, found through the catalog's
    indexes (only a glob walks every patch); the caller holds the lock."""
    catalog = STATE.catalog.with_indexes()
    found: "Dict[str, RegisteredPatch]" = {}
    exact = catalog.by_name.get(selector)
    if exact is not None:
        found[selector] = exact   # an exact name chooses even an explicit patch

    def add(patches: "Iterable[RegisteredPatch]") -> None:
        for patch in patches:
            if EXPLICIT_TAG not in patch.tags:
                found[patch.name] = patch

    if selector == "*":
        add(catalog.by_name.values())
        return found
    add(catalog.by_tag.get(selector, {}).values())
    if selector.startswith("tag:"):
        add(catalog.by_tag.get(selector[4:], {}).values())
    elif is_glob(selector):
        from fnmatch import fnmatchcase
        add(patch for patch in catalog.by_name.values() if fnmatchcase(patch.name, selector))
    else:
        add(catalog.by_family.get(selector, {}).values())
    return found


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


# A patch with this tag weakens a safety default (it unpickles, say): only the user's
# own environment or command line enables it, never a TOML file (docs/configuration.md).
UNSAFE_TAG = "unsafe"


def decide_at_registration(patch: "RegisteredPatch") -> None:
    """Apply the configuration's rules to a new patch; ``LAZYPATCH_DISABLE`` wins."""
    if STATE.disable_rules and any(matches(rule, patch) for rule in STATE.disable_rules):
        set_enabled(patch, False, DISABLED_BY_CONFIGURATION)
    elif STATE.enable_rules and any(matches(rule, patch) for rule in STATE.enable_rules):
        from_files = getattr(STATE.configuration, "enable_from_files", ())
        if UNSAFE_TAG in patch.tags and not any(
                matches(rule, patch) for rule in STATE.enable_rules if rule not in from_files):
            with STATE.lock:
                patch.remember(f"not enabled: {patch.name} is unsafe, and only LAZYPATCH_ENABLE "
                               f"or `lazypatch run --enable` may enable it, not a file")
            return
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
    if STATE.opt_in_packs:   # their patches are decided (and applied) as they register
        load_opt_in_packs(list(configuration.enable) + list(configuration.disable))
    return newly_enabled


def unmet_requirement(patch: "RegisteredPatch", module: "Any" = None) -> "Optional[str]":
    """Why the patch's requirements do not hold now, or None when they do.

    ``module`` is the module being imported: a requirement on it that no
    distribution provides is checked against its ``__version__``. A version
    that came from somewhere other than the distribution the requirement
    names (an import name, a ``__version__``) is said in the patch's history.
    """
    for requirement in parse_requirements(patch.requires):
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
    for requirement in parse_requirements(patch.requires):
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

"""DrivingSDK 2.0's ``conflicts_with`` and ``legacy_name`` for the 2.0 Patcher (``v2.patcher``).

DrivingSDK checks declared conflicts inside one ``Patcher``: ``add()`` logs a warning
(on its ``mx_driving.patcher`` logger) when
the new group conflicts with one already added, ``apply()`` raises ``ValueError``
with the fix when both are still enabled. The same happens here, counting the
built-in patches ``default_patcher`` enables (``resnet_maxpool`` is
``ascend.resnet_maxpool``). lazypatch goes one step further because its patches
outlive ``apply()``: a group whose conflicting group was applied first by
*another* patcher (or a lazypatch patch named in ``conflicts_with``, such as
``ascend.resnet_maxpool``) is ``skipped`` when its module is imported, with the
reason and the fix; the first one declared wins, so two patchers never both skip.

``legacy_name`` is the name a group had before (the DrivingSDK 1.0 function
name: ``numpy_type`` for ``numpy_compat``). ``disable``, ``enable`` and
``conflicts_with`` still accept it, mapped to the group's name, with a
``FutureWarning`` naming the new spelling. DrivingSDK's own built-in groups are
known by their names and old names too (``v2.builtin_packs``).
"""

from __future__ import annotations

from ...errors import SkipPatch
from ...notices import notify
from ...state import STATE
from . import builtin_packs as builtins

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple


def legacy_names(groups: "Iterable[Any]") -> "Dict[str, str]":
    """Old name -> name, for the groups that declare a ``legacy_name``."""
    return {group.legacy_name: group.name for group in groups
            if getattr(group, "legacy_name", None)}


def current_name(name: str, groups: "Iterable[Any]", caller: str,
                 with_builtins: bool = True) -> str:
    """``name``, or the group's name when ``name`` is its old one (with a notice): a
    group of ``groups`` or, ``with_builtins``, a DrivingSDK built-in group."""
    groups = list(groups)
    if any(group.name == name for group in groups):
        return name
    renamed = legacy_names(groups).get(name) or (builtins.renamed(name) if with_builtins
                                                 else None)
    if renamed is None:
        return name
    notify(f"lazypatch: {caller}({name!r}): {name!r} is the old (legacy_name) name of the "
           f"patch group {renamed!r}; write {caller}({renamed!r})", FutureWarning)
    return renamed


def _declared(group: "Any", groups: "Iterable[Any]") -> "Set[str]":
    """The group names ``group`` declares conflicts with, old names mapped."""
    return {current_name(name, groups, "conflicts_with")
            for name in getattr(group, "conflicts_with", None) or ()}


def conflicting(first: "Any", second: "Any") -> bool:
    """Whether either group declares the other (by name or old name)."""
    pair = [first, second]
    return first.name != second.name and (
        second.name in _declared(first, pair) or first.name in _declared(second, pair))


def guidance(preferred: "Any", other_name: str, other: "Optional[Any]" = None) -> str:
    """The fix, as DrivingSDK words it: disable one of the two, then add the other."""
    lines = ["If one of them comes from default_patcher, disable the default patch you do "
             "not want first, then add the patch you want.",
             "Recommended fix:",
             f"  patcher.disable({other_name!r}).add({preferred.__name__})"]
    if other is not None:
        lines += ["Or keep the other patch instead:",
                  f"  patcher.disable({preferred.name!r}).add({other.__name__})"]
    return "\n".join(lines)


def warn_when_added(new: "Any", enabled: "Iterable[Any]") -> None:
    """DrivingSDK's early warning: ``new`` conflicts with a group already added."""
    for existing in enabled:
        if conflicting(new, existing):
            # A warning record on DrivingSDK's logger, where DrivingSDK says it.
            from .summary import patcher_logger
            patcher_logger.warning(f"Patch {new.name!r} conflicts with already-enabled patch "
                                   f"{existing.name!r}.\n{guidance(new, existing.name, existing)}")


def _builtin_matches(name: str, builtin_names: "Iterable[str]") -> "List[str]":
    """The built-in patches a conflict name means: a DrivingSDK built-in group's
    (``resnet_maxpool`` -> ``ascend.resnet_maxpool``), else those whose last part it is."""
    chosen = set(builtin_names)
    mapped = builtins.lazypatch_names([name])
    if mapped or name in builtins.BY_NAME:
        return sorted(mapped & chosen)
    return sorted(patch for patch in chosen if patch.rsplit(".", 1)[-1] == name)


def refuse_conflicts(enabled: "List[Any]", builtin_names: "Iterable[str]") -> None:
    """Raise ``ValueError`` with the fix when two enabled groups of one patcher conflict,
    a group conflicts with a built-in patch the patcher enables, or two built-in groups
    it enables do (``resnet_fp16`` and ``resnet_maxpool``)."""
    builtin_names = list(builtin_names)
    for index, group in enumerate(enabled):
        for other in enabled[index + 1:]:
            if conflicting(group, other):
                raise ValueError(f"Patch conflict: {group.name!r} conflicts with "
                                 f"{other.name!r}. Both are enabled.\n"
                                 f"{guidance(group, other.name, other)}")
    for group in enabled:
        for name in sorted(_declared(group, enabled)):
            found = _builtin_matches(name, builtin_names)
            if found:
                raise ValueError(f"Patch conflict: {group.name!r} conflicts with {name!r} "
                                 f"(the built-in patch {found[0]!r} this patcher "
                                 f"enables). Both are enabled.\n{guidance(group, name)}")
    on = {group.name for group in builtins.GROUPS
          if group.patches and set(group.patches) <= set(builtin_names)}
    for group in builtins.GROUPS:
        for other in group.conflicts_with:
            if group.name in on and other in on:
                raise ValueError(
                    f"Patch conflict: {group.name!r} conflicts with {other!r}. Both are "
                    f"enabled.\nRecommended fix:\n  patcher.disable({other!r})"
                    f".enable({group.name!r})\nOr keep the other patch instead:\n"
                    f"  patcher.disable({group.name!r})")


class _Declared:
    """A group some applied patcher declared: what a later group checks against."""

    __slots__ = ("owner", "group", "patch_names")

    def __init__(self, owner: int, group: "Any", patch_names: "List[str]") -> None:
        self.owner = owner
        self.group = group
        self.patch_names = patch_names


_DECLARED: "List[_Declared]" = []


def remember(owner: int, group: "Any", patch_names: "List[str]") -> None:
    """Record that patcher ``owner`` declared ``group`` as these lazypatch patches."""
    _DECLARED.append(_Declared(owner, group, patch_names))


def forget(owner: int) -> None:
    """The patcher ``owner`` was restored: its groups no longer take precedence."""
    _DECLARED[:] = [entry for entry in _DECLARED if entry.owner != owner]


def _in_force(patch: "Any") -> bool:
    """Enabled, with its requirements met: it applies, or will when its module is
    imported (a built-in Ascend patch on a host without torch_npu never does)."""
    from ...decide.selection import unmet_requirements
    return patch is not None and bool(patch.enabled) and not unmet_requirements(patch)


def _enabled(name: str) -> bool:
    return _in_force(STATE.catalog.by_name.get(name))


def _builtin_in_force(name: str) -> "Optional[str]":
    """The built-in patch of DrivingSDK's default set that ``name`` means (its group's
    patch, ``ascend.resnet_maxpool``, else one whose last part is ``name``) and which
    is in force, if any."""
    from ..v1.patcher import DEFAULT_TAGS
    candidates = [patch for patch in STATE.catalog.patches()
                  if set(DEFAULT_TAGS).intersection(patch.tags)]
    for found in _builtin_matches(name, [patch.name for patch in candidates]):
        if _in_force(STATE.catalog.by_name.get(found)):
            return found
    return None


def guard_for(owner: int, group: "Any") -> "Optional[Callable[[], None]]":
    """A check run when each of ``group``'s patches applies: skip (``SkipPatch``) while a
    conflicting group declared earlier by another patcher, or a lazypatch patch named in
    ``conflicts_with``, is enabled. None when there is nothing to check."""
    earlier: "List[Tuple[str, List[str]]]" = [
        (entry.group.name, list(entry.patch_names)) for entry in _DECLARED
        if entry.owner != owner and conflicting(group, entry.group)]
    named = sorted(set(getattr(group, "conflicts_with", None) or ()))
    if not earlier and not named:
        return None

    def conflicts_with_declared() -> None:
        for other, names in earlier:
            if any(_enabled(name) for name in names):
                raise SkipPatch(f"conflicts with patch group {other!r}, applied first by "
                                f"another DrivingSDK patcher; to use {group.name!r} instead, "
                                f"disable {other!r} there (patcher.disable({other!r})) or "
                                f"restore() that patcher first")
        for name in named:
            found = name if _enabled(name) else None if "." in name else \
                _builtin_in_force(name)
            if found is not None:
                raise SkipPatch(f"conflicts with the enabled lazypatch patch {found!r}; to use "
                                f"{group.name!r} instead, disable it (lazypatch.disable"
                                f"({found!r}) or LAZYPATCH_DISABLE={found})")
    return conflicts_with_declared


__all__ = ["legacy_names", "current_name", "conflicting", "guidance", "warn_when_added",
           "refuse_conflicts", "remember", "forget", "guard_for"]

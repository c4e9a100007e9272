"""The DrivingSDK one-click patcher's API, on lazypatch.

Porting a DrivingSDK ``patch.py`` means changing one line::

    from mx_driving.patcher import Patch, Patcher, PatcherBuilder, default_patcher_builder
    # becomes
    from lazypatch.driving_sdk.mx_driving import Patch, Patcher, PatcherBuilder, default_patcher_builder

Patch functions keep their signature ``func(module, options)`` and receive
the module named in ``add_module_patch`` (usually the root package). What
changes is what the original got wrong:

* nothing is imported by ``build()`` or ``with``: each patch runs when its
  module is first imported (at once if it already is);
* leaving the ``with`` block undoes every patch exactly, including plain
  assignments a patch function makes (they are captured and recorded);
* a failing patch is rolled back and reported (``report()``), it
  never stops the program; ``patch_failure_warning=False`` silences its warning;
* profiling and the brake hook the training loop instead of replacing it,
  and a resumed run past the brake step stops;
* ``default_patcher_builder`` is lazypatch's built-in packs selected by tag
  (``ascend``, ``numpy``, ``openmmlab``), chosen when the patcher is entered;
* ``build()`` makes the patcher as DrivingSDK 2.0 does, of its 2.0 ``Patcher``
  (``LegacyPatcher._patcher``); the patch functions themselves run as
  ``v1.patcher`` runs them.
"""

from __future__ import annotations

from ..declare.registration import validate_target
from .v1.patcher import DEFAULT_TAGS, Patch, Patcher, as_patch_list
from .v2.builtin_packs import renamed
from .v2.builtin_patches import DEFAULT_CLASS_NAMES, LEGACY_NAME_TO_CLASS
from .v2.patcher import Patcher as GroupPatcher
from .v2.patches import LegacyPatch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterable, List, Optional, Set


class PatcherBuilder:
    """Fluent construction of DrivingSDK 1.0's patcher (every method returns the builder);
    ``build()`` makes it of the 2.0 ``Patcher`` (see ``LegacyPatcher``)."""

    def __init__(self, builtin_tags: "Iterable[str]" = (),
                 default_groups: "Iterable[str]" = ()) -> None:
        self._default_groups = tuple(default_groups)
        self._module_patches: "Dict[str, List[Patch]]" = {}
        self._blacklist: "Set[str]" = set()
        self._profiling_options: "Optional[Dict[str, Any]]" = None
        self._brake_step: "Optional[int]" = None
        self.builtin_tags = tuple(builtin_tags)

    def add_module_patch(self, module_name: str, *patches: Patch) -> "PatcherBuilder":
        """Patches whose functions receive module ``module_name`` once it is imported,
        run in ``priority`` order (lower first)."""
        validate_target(module_name)
        added = self._module_patches.setdefault(module_name, [])
        added.extend(as_patch_list(module_name, patches))
        added.sort(key=lambda item: item.priority)
        return self

    def disable_patches(self, *patch_names: str) -> "PatcherBuilder":
        """Leave out patches by function name (built-in ones also by their 2.0 group
        name or lazypatch name)."""
        for name in patch_names:
            if not isinstance(name, str) or not name:
                raise TypeError(f"disable_patches takes patch function names, got {name!r}")
        self._blacklist.update(patch_names)
        return self

    def with_profiling(self, path: str, level: int = 0, skip_first: int = 20, wait: int = 1,
                       warmup: int = 1, active: int = 1, repeat: int = 1) -> "PatcherBuilder":
        """Profile training steps into ``path`` at ``level`` 0, 1 or 2, on
        ``torch.profiler.schedule``'s schedule (the training pack's ``profile_to``)."""
        from ..registry.training.settings import ProfileSettings
        options = {"path": path, "level": level, "skip_first": skip_first, "wait": wait,
                   "warmup": warmup, "active": active, "repeat": repeat}
        ProfileSettings(**options)   # bad input fails here, not when training
        self._profiling_options = options
        return self

    def brake_at(self, brake_step: int) -> "PatcherBuilder":
        """Stop training cleanly after step ``brake_step`` (exit code 0)."""
        from ..registry.training.settings import check_step
        self._brake_step = check_step(brake_step)
        return self

    with_brake = brake_at   # the name the DrivingSDK documentation also uses

    def build(self, allow_internal_format: bool = False) -> "LegacyPatcher":
        """A patcher of everything added so far; use it as ``with builder.build():``.

        As DrivingSDK 2.0 builds it: a 2.0 ``Patcher`` holding a ``LegacyPatch`` per
        patch function, and, for a function named as a built-in group's 1.0 name
        (``index``, ``msda``...; ``_LEGACY_NAME_TO_CLASS``), that group's patches
        (each marked with the group's name as ``_parent_name``)."""
        patcher = GroupPatcher(builtin_tags=self.builtin_tags)
        for module_name, patches in self._with_defaults().items():
            for patch_object in patches:
                if patch_object.name in self._blacklist:
                    continue
                group = LEGACY_NAME_TO_CLASS.get(patch_object.name)
                if group is None:
                    patcher.add(LegacyPatch.of(patch_object, module_name))
                    continue
                for patch in group.patches(patch_object.options or None):
                    patch._parent_name = group.name
                    patcher.add(patch)
        # 1.0 names are this API's own: mapped without 2.0's notice about old names.
        patcher._blacklist.update(renamed(name) or name for name in self._blacklist)
        if self._profiling_options is not None:
            patcher.with_profiling(**self._profiling_options)
        if self._brake_step is not None:
            patcher.brake_at(self._brake_step)
        return LegacyPatcher(patcher, allow_internal_format)


    def _with_defaults(self) -> "Dict[str, List[Patch]]":
        """The patches added, after the default groups' 1.0 functions on their target
        modules (``default_patcher_builder``: DrivingSDK's default groups, in its order)."""
        if not self._default_groups:
            return self._module_patches
        from .v2.builtin_patches import CLASSES, FUNCTIONS
        combined: "Dict[str, List[Patch]]" = {}
        for class_name in self._default_groups:
            group: "Any" = CLASSES[class_name]
            combined.setdefault(group.target_module, []).append(
                Patch(FUNCTIONS[group.legacy_name]))
        for module_name, patches in self._module_patches.items():
            combined.setdefault(module_name, []).extend(patches)
        return combined


class LegacyPatcher:
    """What ``PatcherBuilder.build()`` returns: the 2.0 ``Patcher`` holding the builder's
    patches (``_patcher``), applied with ``allow_internal_format``. ``with`` applies it
    and, unlike DrivingSDK, undoes it all when the block ends."""

    def __init__(self, patcher: "Any", allow_internal_format: bool = False) -> None:
        self._patcher = patcher
        self._allow_internal_format = bool(allow_internal_format)

    def apply(self) -> "LegacyPatcher":
        self._patcher.apply(allow_internal_format=self._allow_internal_format)
        return self

    def restore(self) -> None:
        self._patcher.restore()

    @property
    def is_applied(self) -> bool:
        return bool(self._patcher.is_applied)

    def __enter__(self) -> "LegacyPatcher":
        return self.apply()

    def __exit__(self, *exc_info: "Any") -> None:
        self.restore()


default_patcher_builder = PatcherBuilder(builtin_tags=DEFAULT_TAGS,
                                         default_groups=DEFAULT_CLASS_NAMES)

__all__ = ["Patch", "Patcher", "PatcherBuilder", "LegacyPatcher", "default_patcher_builder"]

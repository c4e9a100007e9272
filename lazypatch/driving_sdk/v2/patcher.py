"""The DrivingSDK patcher 2.0 API, as a thin layer over lazypatch's declarations.

Porting a DrivingSDK 2.0 ``patch.py`` means changing its import line::

    from mx_driving.patcher import Patcher, Patch, AtomicPatch, RegistryPatch, replace_with
    # becomes
    from lazypatch.driving_sdk.v2.patcher import (Patcher, Patch, AtomicPatch, RegistryPatch,
                                               replace_with)

What each piece becomes:

* ``AtomicPatch(target, replacement, aliases, precheck, runtime_check,
  replacement_wrapper, target_wrapper)``: ``lazypatch.replace`` by dotted
  path (with ``aliases``; ``target_wrapper`` replaces the target with
  ``target_wrapper(original)``), applied when the module holding the target is
  imported, not when ``apply()`` runs; nothing is imported by ``apply()``.
* ``RegistryPatch(registry, module_cls, name, force, precheck, module_factory)``:
  ``lazypatch.registry_entry``; undone exactly.
* ``skip_import``: a stand-in whose attributes are inert stubs (DrivingSDK's
  semantics: any attribute is a stub, calling one returns None), for the
  module and any submodule; ``replace_import``: ``lazypatch.replace_module``
  (``replace_with.module(base, **exports)`` builds the module when it is
  imported); ``inject_import``: a patch on the target module that sets the
  name (and extends ``__all__``) when the target is imported, leaving an
  existing attribute alone, as DrivingSDK does.
* ``configure_patcher_logging(on_apply, on_skip, on_fail, on_error)``: event
  actions (``lazypatch.set_event_action``) for the patches of these patchers
  (tag ``driving_sdk``): ``debug``/``info``/``warning``/``error`` log at that
  level, ``exception`` raises ``PatchError``, ``exit`` exits, ``silent``.
* ``print_info(diff=True)``: the status of every patch from ``lazypatch.report()``,
  and for each applied replacement the unified diff of the original's source
  against the replacement's: the report's ``change_diff`` where it has one,
  else ``difflib`` here (and always here for a ``runtime_check`` patch, whose
  recorded change is the dispatching wrapper).
* ``Patch.conflicts_with``: two enabled groups of one patcher that declare a
  conflict (or one group and a built-in patch ``default_patcher`` enables, such as
  ``resnet_maxpool``) make ``add()`` log a warning on DrivingSDK's logger and
  ``apply()`` raise ``ValueError`` with DrivingSDK's fix
  (``patcher.disable('resnet_maxpool').add(FP16)``) before anything is declared.
  Beyond DrivingSDK: against a group applied first by *another* patcher, or a
  lazypatch patch named in ``conflicts_with`` that is in force, the group's
  patches are ``skipped`` at import with the reason and the fix (first wins).
* ``Patch.legacy_name``: the group's old name, accepted by ``disable``,
  ``enable`` (takes back a ``disable``) and ``conflicts_with``, mapped to the
  name, with a ``FutureWarning`` naming the new spelling.
* DrivingSDK's built-in groups by name and old name (``tensor_index``/``index``,
  ``numpy_compat``/``numpy_type``...): on a patcher with built-in packs
  (``default_patcher``) they select the lazypatch patches doing that work
  (``v2.builtin_packs``): ``disable("tensor_index")``, ``enable("resnet_fp16")``
  for an optional group (DrivingSDK's ``add(ResNetFP16)``).
* ``Patch.apply_before_collect``: DrivingSDK's bootstrap step (collection is the
  call of ``patches()``, not pytest's): such groups are declared before the other
  groups' ``patches()`` run, so a collection that imports their target finds them.
* ``get_version``, ``check_version``, ``mmcv_version``, ``is_mmcv_v1x/v2x``:
  read from installed metadata like ``requires=`` (nothing imported; ``mmcv``
  found as ``mmcv-lite``); ``version_requirement("mmcv", 2)`` is the ``requires=``
  string ``"mmcv>=2,<3"``, which ``AtomicPatch``/``RegistryPatch`` accept.
* ``with_profiling(path, level, skip_first, wait, warmup, active, repeat)``: the
  training pack's ``profile_to`` with that ``torch.profiler`` schedule, from
  ``apply()`` to ``restore()``; ``brake_at``, ``allow_internal_format`` and the
  built-in packs of ``default_patcher`` are those of the 1.0 layer (``mx_driving``).
* ``configure_summary(enabled, level, show_applied, show_skipped, show_failed,
  show_import_events)`` and ``patcher_logger``: the summary is logged at
  ``restore()`` or at exit (``apply()`` decides nothing here), on rank 0, to the
  ``lazypatch`` logger; see ``v2.summary``.
* The pieces live in ``v2.patches`` (patch declarations, ``with_imports``),
  ``v2.imports`` (stubs, ``replace_with``, ``inject_import``),
  ``v2.conflicts``, ``v2.builtin_packs``, ``v2.versions`` and
  ``v2.summary``.
* Leaving ``with patcher:`` (or ``restore()``) undoes everything exactly.
"""

from __future__ import annotations

import itertools
import sys

from ...declare.boundaries import Deferred
from ...declare.registration import register, validate_target
from ...state import STATE
from ..v1 import patcher as v1
from . import builtin_packs as builtins
from . import conflicts, summary
from .imports import ImportReplacementSpec, Stub, StubModule, inject_function, replace_with, stub_getattr
from .patches import (
    TAG,
    AtomicPatch,
    BasePatch,
    LegacyPatch,
    Patch,
    RegistryPatch,
    undo_patches,
    unique_name,
    with_imports,
)
from .summary import configure_patcher_logging, configure_summary, patcher_logger, set_patcher_log_level
from .versions import (
    check_version,
    get_version,
    is_mmcv_v1x,
    is_mmcv_v2x,
    mmcv_version,
    version_requirement,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

    from ...registry.training.settings import ProfileSettings

NAME_PREFIX = "driving_sdk"


_PATCHER_KEYS = itertools.count(1)


class Patcher:
    """Collects patches and import controls; ``apply()`` declares them (each applies when
    its module is imported); ``restore()`` or leaving ``with`` undoes everything."""

    def __init__(self, *, builtin_tags: "Iterable[str]" = ()) -> None:
        self._entries: "List[Tuple[Any, Optional[Dict[str, Any]]]]" = []
        self._blacklist: "Set[str]" = set()
        self.builtin_tags = tuple(builtin_tags)
        self.names: "List[str]" = []           # lazypatch patch names declared by this patcher
        self._declared: "List[Tuple[BasePatch, str, str]]" = []   # (patch, group, name)
        self._profiling: "Optional[ProfileSettings]" = None
        self._import_events: "List[Tuple[str, str, str]]" = []   # (section, what, name)
        self._summary_due = False
        self._builtins: "List[str]" = []       # built-in patches this patcher enabled
        self._builtin_on: "Set[str]" = set()   # optional built-in groups enable() named
        self._turned_on: "List[str]" = []      # their patches, enabled by apply()
        self._loaded_here: "Set[str]" = set()  # built-in patches loaded by apply()
        # Who declared a group, for conflicts across patchers (not id(): it is reused
        # once a patcher is garbage collected, and its groups may still be declared).
        self._key = next(_PATCHER_KEYS)
        self._brake_step: "Optional[int]" = None
        self._allow_internal_format: "Optional[bool]" = None   # None: not chosen (False)
        self._legacy: "Optional[v1.Patcher]" = None
        self._applied = False
        self._collected: "Optional[List[Tuple[BasePatch, str]]]" = None
        self._switched_off: "Set[str]" = set()   # disabled names, lazypatch's included

    # -- collecting ---------------------------------------------------------------

    def add(self, *items: "Any", options: "Optional[Dict[str, Any]]" = None) -> "Patcher":
        """Add ``Patch`` classes (with ``options``) or ``AtomicPatch``/``RegistryPatch``."""
        self._collected = None
        for item in items:
            if isinstance(item, type) and callable(getattr(item, "patches", None)):
                if getattr(item, "conflicts_with", None) is not None:
                    conflicts.warn_when_added(item, self._enabled_groups())
                self._entries.append((item, options))
            elif isinstance(item, BasePatch):
                self._entries.append((item, None))
            else:
                # DrivingSDK's words first: code matching its message keeps working.
                raise TypeError(f"Patcher.add: Expected Patch class or BasePatch instance "
                                f"(a Patch subclass, an AtomicPatch, RegistryPatch or "
                                f"LegacyPatch), got {item!r}")
        return self

    def disable(self, *names: "Any") -> "Patcher":
        """Leave out patches by name, ``Patch`` class or patch object, or DrivingSDK's
        built-in groups by their names (``default_patcher.disable("tensor_index")``); an
        old ``legacy_name`` is mapped to the name (with a ``FutureWarning``)."""
        self._collected = None
        for name in self._names_of(names, "disable"):
            self._blacklist.add(name)
            self._builtin_on.discard(name)
        return self

    def enable(self, *names: "Any") -> "Patcher":
        """Take back an earlier ``disable``; on a patcher with built-in packs, also turn
        on an optional built-in group (``default_patcher.enable("resnet_fp16")``, where
        DrivingSDK writes ``add(ResNetFP16)``). Old names are mapped as for ``disable``."""
        self._collected = None
        for name in self._names_of(names, "enable"):
            self._blacklist.discard(name)
            self._blacklist -= {old for old, new in conflicts.legacy_names(
                self._groups()).items() if new == name}
            if self.builtin_tags and name in builtins.BY_NAME:
                self._builtin_on.add(name)
        return self

    def _names_of(self, items: "Iterable[Any]", caller: str) -> "List[str]":
        chosen = []
        for item in items:
            name = item if isinstance(item, str) else getattr(item, "name", None)
            if not isinstance(name, str) or not name:
                raise TypeError(f"Patcher.{caller}: expected a patch name, Patch class or "
                                f"patch, got {item!r}")
            chosen.append(conflicts.current_name(name, self._groups(), caller,
                                                 bool(self.builtin_tags)))
        return chosen

    def _collect_all_patches(self, force_refresh: bool = False) -> "List[Tuple[BasePatch, str]]":
        """(patch, group name) of every entry not disabled, in the order added: a
        group's ``patches()`` (called now), a patch added directly under its own name.
        Kept until ``add``/``disable``/``enable`` change the entries or ``force_refresh``."""
        if self._collected is None or force_refresh:
            blacklist = self._resolved_blacklist()
            collected: "List[Tuple[BasePatch, str]]" = []
            for item, options in self._entries:
                if item.name in blacklist:
                    continue
                if isinstance(item, BasePatch):
                    collected.append((item, getattr(item, "_parent_name", item.name)))
                else:
                    collected.extend((patch, item.name)
                                     for patch in self._collect(item, options, blacklist))
            self._collected = collected
        return self._collected

    def _groups(self) -> "List[Any]":
        return [item for item, _ in self._entries if isinstance(item, type)]

    def _resolved_blacklist(self) -> "Set[str]":
        """Disabled names, old names of groups added after ``disable`` mapped now."""
        return {conflicts.current_name(name, self._groups(), "disable",
                                       bool(self.builtin_tags))
                for name in self._blacklist}

    def _enabled_groups(self) -> "List[Any]":
        blacklist = self._resolved_blacklist()
        return [group for group in self._groups() if group.name not in blacklist]

    def skip_import(self, *module_paths: str) -> "Patcher":
        """Imports of these modules (and any submodule) succeed with inert stubs, where
        nothing installed provides them. Declared now, as in DrivingSDK."""
        for path in module_paths:
            validate_target(path)
            name = _stand_in(path)
            self.names.append(name)
            self._import_event("Skipped Modules", path, name)
            _materialize_stand_in(path)
        return self

    def replace_import(self, module_path: str, replacement: "Any" = None, *,
                       base_module: "Optional[str]" = None,
                       exports: "Optional[Dict[str, Any]]" = None, **attrs: "Any") -> "Patcher":
        """``import module_path`` gives ``replacement`` (a module path, or
        ``replace_with.module(...)``); the compatible forms ``base_module=``/``exports=``
        and keyword exports build a module the same way."""
        validate_target(module_path)
        value = _import_replacement(module_path, replacement, base_module, exports, attrs)
        target = value if isinstance(value, str) else "replace_with.module(...)"
        if module_path in sys.modules:
            # DrivingSDK's documented behaviour: modules that imported the real one keep it,
            # so a late replacement is skipped with a warning rather than half-applied.
            patcher_logger.warning(
                f"replace_import skipped for {module_path}: it is already imported, and the "
                f"modules that imported it keep it. Call replace_import() before importing "
                f"the target module")
            self._import_event("Replaced Imports",
                               f"{module_path} -> {target} (skipped: already imported)", "")
            return self
        from ...declare.boundaries import replace_module
        name = replace_module(module_path, value, name=_unique(
            f"{NAME_PREFIX}.replace_import:{module_path}"), tags=(TAG,))
        self.names.append(name)
        self._import_event("Replaced Imports", f"{module_path} -> {target}", name)
        _materialize_stand_in(module_path)
        return self

    def _import_event(self, section: str, description: str, name: str) -> None:
        """Record an import control for this patcher's summary, and in ``patcher_logger``'s
        buffers as DrivingSDK records it."""
        self._import_events.append((section, description, name))
        {"Skipped Modules": patcher_logger.add_skipped_module,
         "Injected Imports": patcher_logger.add_injected_import,
         "Replaced Imports": patcher_logger.add_replaced_import}[section](description)

    def inject_import(self, source_module: str, class_name: str,
                      target_module: str) -> "Patcher":
        """``from target_module import class_name`` works: the name is taken from
        ``source_module`` when ``target_module`` is imported (an existing one is kept)."""
        validate_target(source_module)
        validate_target(target_module)
        if not isinstance(class_name, str) or not class_name.isidentifier():
            raise ValueError(f"inject_import: {class_name!r} is not an identifier")
        name = register(
            inject_function(source_module, class_name), target_module,
            name=_unique(f"{NAME_PREFIX}.inject_import:{target_module}.{class_name}"),
            tags=(TAG,))
        self.names.append(name)
        self._import_event("Injected Imports", f"{target_module}.{class_name}", name)
        return self

    def with_profiling(self, path: str, level: int = 0, skip_first: int = 20, wait: int = 1,
                       warmup: int = 1, active: int = 1, repeat: int = 1) -> "Patcher":
        """Profile training steps into directory ``path`` from ``apply()`` to ``restore()``
        with the training pack (``lazypatch.registry.training.profile_to``): ``level``
        0-2, and the schedule of ``torch.profiler.schedule`` (skip the first
        ``skip_first`` steps, then ``repeat`` cycles of ``wait`` idle, ``warmup`` and
        ``active`` recorded steps; ``repeat=0``: until training ends). Checked now."""
        from ...registry.training.settings import ProfileSettings
        self._profiling = ProfileSettings(path, level, skip_first=skip_first, wait=wait,
                                          warmup=warmup, active=active, repeat=repeat)
        return self

    @property
    def _profiling_options(self) -> "Optional[Dict[str, Any]]":
        """``with_profiling``'s settings in DrivingSDK's options form (``profiling_path``,
        ``profiling_level``, ``step_ctrl`` = (wait, warmup, active, repeat, skip_first)),
        None without profiling."""
        settings = self._profiling
        if settings is None:
            return None
        return {"enable_profiler": True, "profiling_path": settings.path,
                "profiling_level": settings.level,
                "step_ctrl": (settings.wait, settings.warmup, settings.active, settings.repeat,
                              settings.skip_first)}

    def brake_at(self, step: int) -> "Patcher":
        """Stop training cleanly after step ``step``."""
        from ...registry.training.settings import check_step
        self._brake_step = check_step(step)
        return self

    def allow_internal_format(self, allow: bool = True) -> "Patcher":
        self._allow_internal_format = bool(allow)
        return self

    def disallow_internal_format(self) -> "Patcher":
        return self.allow_internal_format(False)

    # -- applying ----------------------------------------------------------------------

    def _builtin_names(self, blacklist: "Set[str]") -> "List[str]":
        """The built-in patches this patcher enables (``default_patcher``'s packs, and
        the optional groups ``enable`` named); ``blacklist`` holds lazypatch names too."""
        if not self.builtin_tags:
            return []
        from ...registry import load_packs
        known_before = set(STATE.catalog.by_name)
        load_packs()
        # Packs loaded only now (no activation) are this patcher's doing: restore()
        # takes all of their patches back, as the 1.0 layer does for the packs it loads.
        self._loaded_here |= set(STATE.catalog.by_name) - known_before   # kept if refused
        wanted = set(self.builtin_tags)
        optional = builtins.lazypatch_names(self._builtin_on)
        # The catalog, not report(): a record reads each target's distribution, and
        # this runs at every apply() of default_patcher.
        return [patch.name for patch in STATE.catalog.patches()
                if wanted.intersection(patch.tags)
                and (patch.enabled_by_default or patch.name in optional)
                and patch.name not in blacklist
                and patch.name.rsplit(".", 1)[-1] not in blacklist]

    def apply(self, allow_internal_format: "Optional[bool]" = None) -> "Patcher":
        """Declare every patch; each applies when its module is imported. Imports nothing.

        Groups with ``apply_before_collect`` are declared before the other groups'
        ``patches()`` run; two enabled groups declaring a conflict raise ``ValueError``
        (with the fix) before anything is declared."""
        if self._applied:
            return self
        blacklist = self._resolved_blacklist()
        # DrivingSDK's names of built-in groups, as the lazypatch patches doing their work.
        switched_off = blacklist | builtins.lazypatch_names(blacklist)
        enabled = [group for group in self._groups() if group.name not in blacklist]
        builtin_names = self._builtin_names(switched_off)
        conflicts.refuse_conflicts(enabled, builtin_names)
        self._applied = True
        if allow_internal_format is not None:
            self._allow_internal_format = bool(allow_internal_format)
        start = len(self.names)
        self._switched_off = switched_off
        try:
            self._declare_entries(blacklist)
        except BaseException:
            # A bad patches() result: take back what this apply() declared, so that the
            # fixed patcher can apply again (skip_import & co. stay: declared earlier).
            undo_patches(self.names[start:])
            del self.names[start:]
            self._declared = [entry for entry in self._declared if entry[2] in self.names]
            conflicts.forget(self._key)
            self._applied = False
            raise
        self._legacy = v1.Patcher({}, sorted(switched_off), bool(self._allow_internal_format),
                                          builtin_tags=self.builtin_tags,
                                          brake_step=self._brake_step)
        self._legacy.apply()
        self._builtins = builtin_names
        self._turn_on_optional_builtins(set(builtin_names))
        self._record_decided()
        if self._profiling is not None:
            from ...registry import training
            settings = self._profiling
            training.profile_to(settings.path, settings.level, skip_first=settings.skip_first,
                                wait=settings.wait, warmup=settings.warmup,
                                active=settings.active, repeat=settings.repeat)
        self._summary_due = True
        _summary_at_exit(self)
        return self

    def _record_decided(self) -> None:
        """Put the outcome of each patch decided by ``apply()`` itself (its module was
        imported) into ``patcher_logger``'s buffers, where DrivingSDK's ``apply()`` leaves
        every outcome; the others are decided at their import (the summary says them).
        Only while buffering: lazypatch's event rules have acted on each already."""
        if not patcher_logger._buffer_enabled:
            return
        for patch, group, name in self._declared:
            record = STATE.catalog.by_name.get(name)
            status = record.status if record is not None else ""
            where = {"package": patch.module or patch.name.split(".")[0],
                     "patch_name": group or getattr(patch, "_parent_name", None) or patch.name}
            if status == "applied":
                patcher_logger.applied(patch.name, **where)
            elif status == "skipped":
                patcher_logger.skipped(patch.name, getattr(record, "reason", "") or "", **where)
            elif status == "failed" and patcher_logger._on_fail not in ("exception", "exit"):
                patcher_logger.failed(patch.name, getattr(record, "reason", "") or "", **where)

    def _turn_on_optional_builtins(self, chosen: "Set[str]") -> None:
        """Enable the optional built-in patches ``enable`` named (off by default, so the
        1.0 layer leaves them off); ``restore()`` turns them off again."""
        from ...apply.application import enable
        for name in sorted(builtins.lazypatch_names(self._builtin_on) & chosen):
            patch = STATE.catalog.by_name.get(name)
            if patch is not None and not patch.enabled:
                enable((name,))
                self._turned_on.append(name)

    def _declare_entries(self, blacklist: "Set[str]") -> None:
        """Collect (call ``patches()``) and declare: the ``apply_before_collect`` groups
        first, each declared as soon as collected (DrivingSDK's bootstrap step, so that
        a later ``patches()`` importing their target finds them declared); then all
        the others collected before any of them is declared."""
        first = [index for index, (item, _) in enumerate(self._entries)
                 if isinstance(item, type) and getattr(item, "apply_before_collect", False)
                 and getattr(item, "name", None) not in blacklist]
        for index in first:
            group, options = self._entries[index]
            patches = self._collect_without_importing(group, options, blacklist)
            if patches is not None:
                self._declare_group(group, patches)
        collected: "List[Tuple[Any, Optional[List[BasePatch]]]]" = []
        for index, (item, options) in enumerate(self._entries):
            if index in first or item.name in blacklist:
                continue
            if isinstance(item, BasePatch):
                collected.append((item, None))
                continue
            patches = self._collect_without_importing(item, options, blacklist)
            if patches is not None:
                collected.append((item, patches))
        for item, patches in collected:
            if patches is None:
                self._declare(item, "", None)
            else:
                self._declare_group(item, patches)

    def _collect_without_importing(self, group: "Any", options: "Optional[Dict[str, Any]]",
                                   blacklist: "Set[str]") -> "Optional[List[BasePatch]]":
        """``_collect`` with imports refused (``v2.collect``): the group's
        patches, or None when ``patches()`` needs a module not imported yet (the group is
        then collected and declared when that module is imported). What ``patches()``
        changed is recorded through a patch, so ``restore()`` takes it back."""
        from ..capture import differences, imports_copied, put_back, snapshot
        from .collect import ImportRefused, imports_refused
        function = getattr(group.patches, "__func__", group.patches)
        copies = snapshot(function, getattr(group, "__module__", "") or "")
        try:
            with imports_refused(), imports_copied(copies):
                patches = self._collect(group, options, blacklist)
        except ImportRefused as refused:
            put_back(copies)
            self._collect_when_imported(group, options, blacklist, refused.module)
            return None
        if differences(copies):
            self._record_collection_changes(group, copies)
        return patches

    def _collection_patch_name(self, group: "Any") -> str:
        return _unique(f"{NAME_PREFIX}.{group.name}.patches")

    def _record_collection_changes(self, group: "Any", copies: "Any") -> None:
        """What ``patches()`` changed, recorded by a patch applied at once (on the
        group's module, imported by definition), undone by ``restore()``."""
        from ..capture import record_plain_assignments

        def record_collection(module: "Any", patch: "Any") -> None:
            record_plain_assignments(copies, patch)
        record_collection.__doc__ = f"what {group.__name__}.patches() changed"
        name = self._collection_patch_name(group)
        self.names.append(name)
        register(record_collection, group.__module__, name=name, tags=(TAG,))

    def _collect_when_imported(self, group: "Any", options: "Optional[Dict[str, Any]]",
                               blacklist: "Set[str]", module_name: str) -> None:
        """A patch waiting for ``module_name``: then ``patches()`` runs again (refusing
        imports again: it may wait for the next module), its changes recorded, and the
        group's patches are declared."""
        from ...decide.events import waiting
        from ...declare.paths import move_patch
        from ..capture import imports_copied, put_back, record_plain_assignments, snapshot
        from ..v1.patcher import registrations_recorded
        from .collect import ImportRefused, imports_refused
        name = self._collection_patch_name(group)

        def collect_group(module: "Any", patch: "Any") -> None:
            function = getattr(group.patches, "__func__", group.patches)
            copies = snapshot(function, getattr(group, "__module__", "") or "")
            try:
                with imports_refused(), imports_copied(copies), registrations_recorded(patch):
                    patches = self._collect(group, options, blacklist)
            except ImportRefused as refused:
                put_back(copies)
                move_patch(name, refused.module)
                raise waiting(f"{group.__name__}.patches() imports {refused.module!r}: the "
                              f"group is collected when the program imports it") from None
            record_plain_assignments(copies, patch)
            self._declare_group(group, patches)
        collect_group.__doc__ = (f"{group.__name__}.patches(), run when the modules it "
                                 f"imports are imported")
        self.names.append(name)
        register(collect_group, module_name, name=name, tags=(TAG,))

    @staticmethod
    def _collect(group: "Any", options: "Optional[Dict[str, Any]]",
                 blacklist: "Set[str]") -> "List[BasePatch]":
        """The group's patches (``patches(options)``) not disabled by name, checked."""
        patches = list(group.patches(options))
        for patch in patches:
            if not isinstance(patch, BasePatch):
                raise TypeError(f"{group.__name__}.patches() returned {patch!r}, not an "
                                f"AtomicPatch / RegistryPatch")
        return [patch for patch in patches if patch.name not in blacklist]

    def _declare_group(self, group: "Any", patches: "List[BasePatch]") -> None:
        guard = conflicts.guard_for(self._key, group)
        names = [self._declare(patch, group.name, guard) for patch in patches]
        conflicts.remember(self._key, group, names)

    def _declare(self, patch: BasePatch, group: str, guard: "Any") -> str:
        if not patch.leave_out(self._switched_off):
            self._declared.append((patch, group, ""))
            return ""   # its work is all done by built-in patches disabled by name
        prefix = patch.name_prefix or NAME_PREFIX
        base = f"{prefix}.{group}.{patch.name}" if group else f"{prefix}.{patch.name}"
        names = patch.declare_all(_unique(base), guard)
        self.names.extend(name for name in names if name and name not in patch.kept_on)
        self._declared.append((patch, group, names[0]))
        return names[0]

    @property
    def is_applied(self) -> bool:
        return self._applied

    def restore(self) -> None:
        """Emit the summary (once per ``apply()``), then undo everything, newest first
        (aliases with their patch). Imports nothing."""
        self.emit_summary()
        conflicts.forget(self._key)
        if self._legacy is not None:
            self._legacy.restore()
            self._legacy = None
        if self._profiling is not None and self._applied:
            from ...registry import training
            training.profile_to(None)
        undo_patches(self.names + self._turned_on)
        undo_patches(sorted(name for name in self._loaded_here
                          if STATE.catalog.by_name[name].enabled))
        self._turned_on, self._loaded_here = [], set()
        self._applied = False
        if self in _APPLIED:
            _APPLIED.remove(self)

    def __enter__(self) -> "Patcher":
        return self.apply()

    def __exit__(self, *exc_info: "Any") -> None:
        self.restore()

    # -- reporting -----------------------------------------------------------------

    def summary(self) -> str:
        """The summary text (see ``v2.summary``) of this patcher now: its
        patches, its import controls and the built-in patches it enabled."""
        declared = [(patch.name, group or patch.name, name)
                    for patch, group, name in self._declared]
        declared += [(name, builtins.group_of(name) or name.split(".", 1)[0], name)
                     for name in self._builtins]
        return summary.summary_text(declared, self._import_events)

    def emit_summary(self) -> None:
        """Log the summary if this ``apply()`` has not logged it yet (restore, exit)."""
        if self._summary_due:
            self._summary_due = False
            summary.emit(self.summary())
            patcher_logger.forget_buffered()   # said by the summary

    def print_info(self, diff: bool = False) -> "Patcher":
        """Log (INFO, on DrivingSDK's ``mx_driving.patcher`` logger, as DrivingSDK does)
        each declared patch's status grouped by module; with ``diff``, the source diff of
        every applied replacement against its original."""
        patcher_logger._logger.info(self.info(diff=diff))
        return self

    def info(self, diff: bool = False) -> str:
        from ...reports.reporting import report
        records = {record.name: record for record in report()}
        groups: "Dict[str, List[str]]" = {}
        # Before apply(), what apply() would declare, each "pending" (DrivingSDK lists them).
        listed = self._declared or [(patch, group, "") for patch, group
                                    in self._collect_all_patches()]
        for patch, _group, name in listed:
            record = records.get(name)
            status = record.status if record is not None else \
                "disabled" if name else "pending"
            module = patch.name.split(".", 1)[0]
            lines = groups.setdefault(module, [])
            reason = f" ({record.reason})" if record is not None and record.reason else ""
            lines.append(f"  [{status}] {patch.describe()}{reason}")
            if diff and status == "applied" and isinstance(patch, AtomicPatch):
                lines.extend("    " + line for line in _diff_lines(patch, name, record))
        total = sum(len(lines) for lines in groups.values())
        out = ["=" * 70, f"Patcher Info ({len(groups)} modules, {len(listed)} patches)",
               "=" * 70]
        for module, lines in groups.items():
            out.append(f"[{module}]")
            out.extend(lines)
        if not total:
            out.append("  (nothing added: add() a patch group first)")
        out.append("=" * 70)
        return "\n".join(out)


def _diff_lines(patch: AtomicPatch, name: str, record: "Any") -> "List[str]":
    """The report's own source diff of the patch's changes where it offers one
    (``reporting.change_diff``); otherwise, and for a ``runtime_check`` patch (whose
    change is the dispatching wrapper, not the replacement), ``_source_diff``."""
    from ...reports import reporting
    change_diff = getattr(reporting, "change_diff", None)
    if change_diff is not None and patch.runtime_check is None:
        texts = [change_diff(record, change) for change in (record.get("changes") or ())
                 if "original_code" in change]
        if texts:
            return "\n".join(texts).splitlines()
    return _source_diff(patch, name)


def _source_diff(patch: AtomicPatch, name: str) -> "List[str]":
    """Unified diff of the original's source against the replacement's."""
    import difflib
    import inspect
    registered = STATE.catalog.by_name.get(name)
    declaration = getattr(getattr(registered, "function", None), "lazypatch_path", None)
    applied = getattr(declaration, "applied", None)
    if applied is None:
        return ["(no source: not applied)"]
    original = applied[2]
    replacement = patch.resolved_replacement() if patch.replacement is not None else applied[3]

    def source(value: "Any") -> "List[str]":
        value = getattr(value, "__func__", value)      # staticmethod / classmethod
        value = getattr(value, "__wrapped__", value)
        try:
            return inspect.getsource(value).splitlines()
        except (OSError, TypeError):
            return [f"<no source for {value!r}>"]
    return list(difflib.unified_diff(source(original), source(replacement),
                                     fromfile=f"original {patch.target}",
                                     tofile="replacement", lineterm="")) or ["(same source)"]


def _import_replacement(module_path: str, replacement: "Any", base_module: "Optional[str]",
                        exports: "Optional[Dict[str, Any]]", attrs: "Dict[str, Any]") -> "Any":
    """What ``replace_import``'s arguments ask ``import module_path`` to give: a module
    path, or a deferred ``replace_with.module`` built from a base module and exports."""
    both = sorted(set(exports or {}) & set(attrs))
    if both:
        raise ValueError(f"replace_import({module_path!r}): {', '.join(both)} given both in "
                         f"exports= and as a keyword; give each name once")
    if replacement is not None and base_module is not None:
        raise ValueError(f"replace_import({module_path!r}): give the replacement or "
                         f"base_module=, not both (they name the same thing)")
    overrides = {**(exports or {}), **attrs}
    if isinstance(replacement, str) and overrides:
        # DrivingSDK's replace_import(path, "pkg.mod", NAME=value): the module's names
        # with these overriding them.
        replacement = ImportReplacementSpec(replacement, overrides)
    elif isinstance(replacement, ImportReplacementSpec) and overrides:
        replacement = ImportReplacementSpec(replacement.base_module,
                                            {**replacement.exports, **overrides})
    elif replacement is None:
        replacement = ImportReplacementSpec(base_module, overrides)
    if isinstance(replacement, ImportReplacementSpec):
        spec = replacement
        return Deferred(lambda: spec.build(module_path), f"replace_with.module for {module_path}")
    if isinstance(replacement, str):
        return replacement
    raise TypeError(f"replace_import({module_path!r}, ...): the replacement must be a "
                    f"module path or replace_with.module(...), got {replacement!r}")


def _materialize_stand_in(path: str) -> None:
    """Put the stand-in (or replacement) into ``sys.modules`` now, as DrivingSDK's
    ``skip_import``/``replace_import`` do (code may read ``sys.modules[path]`` before
    importing), when nothing is installed under the path's top-level name: then the
    "import" runs no code but lazypatch's. With the top-level package installed nothing
    is imported now (that would run the package): the module appears at its import."""
    if path in sys.modules:
        return
    from importlib import import_module
    from importlib.machinery import PathFinder
    try:
        # PathFinder, not importlib.util.find_spec: lazypatch's own finder would answer
        # with the stand-in just declared.
        if PathFinder.find_spec(path.partition(".")[0]) is not None:
            return
        import_module(path)
    except (ImportError, ValueError):
        return


def _stand_in(path: str) -> str:
    from ...declare.boundaries import stand_in
    return stand_in(path, {"__getattr__": stub_getattr, "__all__": [], "__class__": StubModule},
                    name=_unique(
        f"{NAME_PREFIX}.skip_import:{path}"), tags=(TAG,), submodules=True)


_APPLIED: "List[Patcher]" = []


_EXIT_HOOK: "List[bool]" = []


def _summary_at_exit(patcher: Patcher) -> None:
    """Emit the summary of ``patcher`` at interpreter exit unless ``restore()`` did."""
    if not _EXIT_HOOK:
        import atexit
        import logging  # noqa: F401 - imported first, so logging's own exit hook runs after ours
        atexit.register(_emit_all)
        _EXIT_HOOK.append(True)
    if patcher not in _APPLIED:
        _APPLIED.append(patcher)


def _emit_all() -> None:
    for patcher in list(_APPLIED):
        patcher.emit_summary()


_unique = unique_name


default_patcher = Patcher(builtin_tags=v1.DEFAULT_TAGS)

__all__ = ["Patcher", "Patch", "AtomicPatch", "RegistryPatch", "BasePatch", "LegacyPatch",
           "replace_with",
           "with_imports",
           "configure_patcher_logging", "set_patcher_log_level", "default_patcher", "Stub",
           "configure_summary", "patcher_logger",
           "get_version", "check_version", "version_requirement", "mmcv_version",
           "is_mmcv_v1x", "is_mmcv_v2x"]

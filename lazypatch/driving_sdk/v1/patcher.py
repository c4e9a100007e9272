"""DrivingSDK 1.0's patch functions on lazypatch: ``Patch(func, options, priority)``, how a
function ``func(module, options)`` runs as a lazypatch patch (``legacy_patch_function``,
its plain assignments and registry registrations recorded and undone), and the
``Patcher`` that registers them with the built-in packs, ``allow_internal_format``,
profiling and the brake (the 2.0 ``Patcher`` uses it for those). The builder users
write against is ``mx_driving`` (``PatcherBuilder``, ``default_patcher_builder``).
"""

from __future__ import annotations

import re
import sys
import warnings
from contextlib import contextmanager

from ...apply import application, undo
from ...decide.events import waiting
from ...declare.paths import module_exists, move_patch
from ...declare.registration import register, validate_target
from ...errors import PatchFailedWarning, SkipPatch
from ...reports.reporting import report
from ...state import STATE
from ..capture import (
    REGISTRY_CLASSES,
    SWAPPED_REGISTRATIONS,
    imports_copied,
    names_in_code,
    record_plain_assignments,
    snapshot,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Set, Tuple, Union

DEFAULT_TAGS = ("ascend", "numpy", "openmmlab")
NAME_PREFIX = "mx_driving"


class Patch:
    """One patch function ``func(module, options)`` with its options and priority.

    Lower ``priority`` runs first among the patches of one module (as in the
    DrivingSDK). ``patch_failure_warning=False`` keeps a failure quiet (it is
    still rolled back and listed by ``report()``).
    """

    def __init__(self, func: "Callable[[ModuleType, Dict[str, Any]], Any]",
                 options: "Optional[Dict[str, Any]]" = None, priority: int = 0,
                 patch_failure_warning: bool = True) -> None:
        if not callable(func):
            raise TypeError(f"Patch(func): func must be a function taking (module, options), "
                            f"got {func!r}")
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"Patch({getattr(func, '__name__', func)}): options must be a dict "
                            f"or None, got {type(options).__name__}")
        from ...declare.argument_checks import validate_priority
        priority = validate_priority(priority, f"Patch({getattr(func, '__name__', func)})")
        self.func = func
        self.options: "Dict[str, Any]" = options if options is not None else {}
        self.priority = priority
        self.patch_failure_warning = bool(patch_failure_warning)
        self.name: str = getattr(func, "__name__", None) or repr(func)
        self.declared_names: "List[str]" = []   # the lazypatch patches made of it
        if not Patch._migration_warning_shown:
            Patch._migration_warning_shown = True
            from ..v2.summary import patcher_logger
            patcher_logger.info(MIGRATION_NOTICE)

    # DrivingSDK tells once per process that Patch(func) is its compatibility layer.
    _migration_warning_shown = False

    @property
    def is_applied(self) -> bool:
        """Whether a lazypatch patch made of this one is in force now."""
        return any_applied(self.declared_names)

    def __repr__(self) -> str:
        return f"Patch({self.name}, options={self.options!r}, priority={self.priority})"

    def __lt__(self, other: "Patch") -> bool:
        """Patches sort by priority (lower first), as DrivingSDK sorts them."""
        if not isinstance(other, Patch):
            return NotImplemented
        return self.priority < other.priority


MIGRATION_NOTICE = (
    "Using the legacy patcher API (Patch(func)). This is a compatibility-layer notice, not a "
    "patch failure. The Patch class API says the same per target:\n"
    "  class MyPatch(Patch):\n"
    "      @classmethod\n"
    "      def patches(cls, options=None):\n"
    "          return [AtomicPatch('target.path', replacement)]\n"
    "  MyPatch.apply_all()  # or patcher.add(MyPatch).apply()")


def any_applied(names: "Iterable[str]") -> bool:
    """Whether any of these lazypatch patches is applied now."""
    found = [STATE.catalog.by_name.get(name) for name in names]
    return any(patch is not None and patch.status == "applied" for patch in found)


def as_patch_list(module_name: str, patches: "Any") -> "List[Patch]":
    items = [patches] if isinstance(patches, Patch) else list(patches)
    for item in items:
        if not isinstance(item, Patch):
            raise TypeError(f"patches for {module_name!r} must be Patch(...) objects, got "
                            f"{item!r}; wrap the function: Patch({getattr(item, '__name__', item)})")
    return items


def unique_name(base: str) -> str:
    """``base``, or ``base#2``, ``base#3``... when a patch of that name is registered."""
    name, number = base, 2
    while name in STATE.catalog.by_name:
        name, number = f"{base}#{number}", number + 1
    return name


def legacy_patch_function(func: "Callable[[Any, Any], Any]", options: "Dict[str, Any]",
                          module_name: str, patch_name: str) -> "Callable[[Any, Any], None]":
    """Adapt ``func(module, options)`` to lazypatch's ``fn(module, patch)``, recording
    its plain assignments so that they are undone with the patch.

    The function always receives module ``module_name`` (usually the root package). When
    it reaches for a submodule that package does not import (``pkg.sub.attr`` on a
    ``pkg`` whose ``__init__`` never imports ``pkg.sub``), CPython raises "partially
    initialized module 'pkg' has no attribute 'sub'": the patch runs when ``pkg``'s body
    ends. That failure is recognised, rolled back, and the patch moves to ``pkg.sub``
    (reported ``skipped``, "waiting for 'pkg.sub'"); it runs again when that is imported.
    """

    def apply_legacy_patch(module: "Any", patch: "Any") -> None:
        target = sys.modules.get(module_name, module)
        _bind_imported_submodules(getattr(module, "__name__", module_name), module_name)
        copies = snapshot(func, module_name)
        try:
            try:
                with registrations_recorded(patch), imports_copied(copies):
                    func(target, options)
            except AttributeError as error:
                submodule = _submodule_not_imported(error) or _submodule_named_by(func, module_name)
                if submodule is None:
                    # DrivingSDK's rule: a patch function that meets a missing attribute
                    # (another version of the target) is skipped, not failed; its partial
                    # changes are rolled back all the same, and a reload tries it again.
                    raise SkipPatch(f"AttributeError: {error}") from None
                move_patch(patch_name, submodule)
                raise waiting(f"waiting for {submodule!r} to be imported (the patch "
                              f"function reaches into it); applied when it is") from None
        finally:   # also on failure: the engine's rollback then covers these changes
            record_plain_assignments(copies, patch)
    apply_legacy_patch.__doc__ = (func.__doc__ or f"DrivingSDK-style patch "
                                  f"{getattr(func, '__name__', func)} on {module_name}")
    return apply_legacy_patch




@contextmanager
def registrations_recorded(patch: "Any") -> "Iterator[None]":
    """While a 1.0 patch function runs, every entry it registers in an OpenMMLab
    ``Registry`` (``@ATTENTION.register_module()`` inside the function) goes through the
    patch's ledger, so that leaving the patcher's ``with`` block takes it back exactly
    (an entry that replaced another restores that one) instead of reporting
    ``reverted`` while the entry stays.

    The registry's own ``_register_module`` still does the work (its checks, its
    errors); what it changed in ``_module_dict`` is then written again through
    ``patch.setitem``. The class attribute is swapped only for the call, and put back
    whatever happens."""
    swapped = []
    for module_name, class_name in REGISTRY_CLASSES:
        registry_class: "Any" = getattr(sys.modules.get(module_name), class_name, None)
        original = getattr(registry_class, "_register_module", None)
        if registry_class is None or original is None or \
                "_register_module" not in vars(registry_class):
            continue

        def recording(self: "Any", *args: "Any", _original: "Any" = original,
                      **kwargs: "Any") -> "Any":
            table = self._module_dict
            before = dict(table)
            result = _original(self, *args, **kwargs)
            for key, value in list(table.items()):
                if key not in before or before[key] is not value:
                    # back to what it was, then the same change through the ledger
                    if key in before:
                        table[key] = before[key]
                    else:
                        del table[key]
                    patch.setitem(table, key, value)
            return result
        registry_class._register_module = recording
        swapped.append((registry_class, original))
        # the outermost swap holds the registry's own function
        SWAPPED_REGISTRATIONS.setdefault(registry_class, {"_register_module": original})
    try:
        yield
    finally:
        for registry_class, original in reversed(swapped):
            registry_class._register_module = original
            if SWAPPED_REGISTRATIONS.get(registry_class, {}).get("_register_module") is original:
                del SWAPPED_REGISTRATIONS[registry_class]


def register_legacy(func: "Callable[[Any, Any], Any]", options: "Dict[str, Any]",
                    module_name: str, patch_name: str, *, priority: int = 0,
                    tags: "Tuple[str, ...]" = (NAME_PREFIX,),
                    guard: "Optional[Callable[[], None]]" = None) -> str:
    """Register ``func(module, options)`` as the lazypatch patch ``patch_name`` on
    ``module_name`` (``legacy_patch_function``), ``guard()`` asked first when it applies
    (it skips by raising); the name."""
    legacy = legacy_patch_function(func, options, module_name, patch_name)
    if guard is not None:
        run = legacy

        def legacy(module: "Any", patch: "Any") -> None:   # noqa: F811 - the guarded form
            guard()
            run(module, patch)
    register(legacy, module_name, name=patch_name, priority=priority, tags=tags)
    return patch_name


def quiet_failure_warnings(patch_name: str) -> "Any":
    """Silence the failure warning of the lazypatch patch ``patch_name`` (``Patch(...,
    patch_failure_warning=False)``; the failure is still rolled back and reported); the
    warnings filter added."""
    warnings.filterwarnings("ignore", message=re.escape(f"lazypatch: patch {patch_name!r}"),
                            category=PatchFailedWarning)
    return warnings.filters[0]


def _submodule_named_by(func: "Any", module_name: str) -> "Optional[str]":
    """A submodule the patch function names (an attribute it reads, a string it passes
    to ``hasattr``) that exists in the target's package but is not imported yet: the
    function raised its own AttributeError after ``hasattr(pkg.sub, "mod")`` answered
    no only because ``pkg.sub.mod`` was not imported when the patch ran."""
    if getattr(func, "__code__", None) is None:
        return None
    names = names_in_code(func, strings=True)
    root = module_name.partition(".")[0]
    for name, module in sorted(sys.modules.items()):
        # the root, and the packages the function itself names on its way down
        if module is None or not (name == root or name.startswith(root + ".") and
                                  name.rpartition(".")[2] in names) or \
                not hasattr(module, "__path__"):
            continue
        for attribute in sorted(names):
            submodule = f"{name}.{attribute}"
            if submodule not in sys.modules and module_exists(submodule):
                return submodule
    return None


def _submodule_not_imported(error: AttributeError) -> "Optional[str]":
    """The submodule a failed attribute read wanted, when it exists but is not imported."""
    owner, attribute = getattr(error, "obj", None), getattr(error, "name", None)
    if not isinstance(owner, type(sys)) or not isinstance(attribute, str) or \
            not hasattr(owner, "__path__"):
        return None
    submodule = f"{owner.__name__}.{attribute}"
    if submodule in sys.modules or not module_exists(submodule):
        return None
    return submodule


def _bind_imported_submodules(current: str, root: str) -> None:
    """Bind ``current`` and its imported parents below ``root`` on their parents now.

    CPython binds a submodule on its package right after the submodule's body ran
    (``_bootstrap._find_and_load_unlocked``); a patch running at the end of that body
    comes just before, so ``pkg.sub`` would still be missing. The binding made here
    is the very one the import system is about to make.
    """
    if not current.startswith(root + "."):
        return
    parts = current.split(".")
    for depth in range(len(root.split(".")) + 1, len(parts) + 1):
        name = ".".join(parts[:depth])
        parent, child = sys.modules.get(".".join(parts[:depth - 1])), parts[depth - 1]
        module = sys.modules.get(name)
        if parent is not None and module is not None and child not in vars(parent):
            setattr(parent, child, module)


class Patcher:
    """Applies a set of module patches while entered; undoes them on exit.

    ``module_patches`` maps a module name to a ``Patch`` or a list of them;
    ``blacklist`` holds patch function names (or lazypatch patch names) to
    leave out; ``allow_internal_format`` is set on ``torch.npu.config`` when
    ``torch_npu`` is imported (off by default, as in the DrivingSDK).
    """

    def __init__(self, module_patches: "Mapping[str, Union[Patch, Iterable[Patch]]]",
                 blacklist: "Iterable[str]" = (), allow_internal_format: bool = False, *,
                 builtin_tags: "Iterable[str]" = (),
                 profiling: "Optional[Tuple[Any, ...]]" = None,
                 brake_step: "Optional[int]" = None) -> None:
        self.module_patches: "Dict[str, List[Patch]]" = {}
        for module_name, patches in dict(module_patches).items():
            validate_target(module_name)
            self.module_patches[module_name] = sorted(as_patch_list(module_name, patches),
                                                      key=lambda item: item.priority)
        self.blacklist: "Set[str]" = set([blacklist] if isinstance(blacklist, str) else blacklist)
        self.allow_internal_format = bool(allow_internal_format)
        self.builtin_tags = tuple(builtin_tags)
        self.profiling = profiling
        self.brake_step = brake_step
        self.names: "List[str]" = []          # lazypatch names of the patches registered here
        self._enabled_builtins: "List[str]" = []
        self._disabled_builtins: "List[str]" = []
        self._quiet_filters: "List[Any]" = []
        self._internal_format_saved: "List[Tuple[Any, Any]]" = []
        self._applied = False

    # -- applying -----------------------------------------------------------

    def apply(self) -> "Patcher":
        """Register every patch (each applies when its module is imported) and
        switch on the built-in packs, profiling and the brake. Imports nothing."""
        if self._applied:
            return self
        self._applied = True
        for module_name, patches in self.module_patches.items():
            for patch_object in patches:
                if patch_object.name in self.blacklist:
                    continue
                self._register(module_name, patch_object)
        if self.builtin_tags:
            self._select_builtins()
        self._register_internal_format()
        if self.profiling is not None or self.brake_step is not None:
            from ...registry import training
            if self.profiling is not None:
                path, level, *schedule = self.profiling
                training.profile_to(path, level, **(schedule[0] if schedule else {}))
            if self.brake_step is not None:
                training.brake_at(self.brake_step)
        return self

    def _register(self, module_name: str, patch_object: Patch) -> None:
        name = register_legacy(patch_object.func, patch_object.options, module_name,
                               unique_name(f"{NAME_PREFIX}.{module_name}.{patch_object.name}"),
                               priority=patch_object.priority, tags=(NAME_PREFIX,))
        patch_object.declared_names.append(name)
        self.names.append(name)
        if not patch_object.patch_failure_warning:
            self._quiet_filters.append(quiet_failure_warnings(name))

    def _blacklisted(self, name: str) -> bool:
        """Left out by its lazypatch name, its last part (``function_aliases``), or the
        DrivingSDK group doing the same work (``index``, ``numpy_type``, ``msda``, or the
        2.0 names ``tensor_index``, ``numpy_compat``...)."""
        if name in self.blacklist or name.rsplit(".", 1)[-1] in self.blacklist:
            return True
        from ..v2.builtin_packs import lazypatch_names, renamed
        return name in lazypatch_names(renamed(item) or item for item in self.blacklist)

    def _select_builtins(self) -> None:
        """Enable the built-in packs' patches with the chosen tags (they may have been
        loaded after this patcher was built: the selection happens now)."""
        from ...registry import load_packs
        known_before = {record.name for record in report()}
        load_packs()
        wanted = set(self.builtin_tags)
        for record in report():
            if not wanted.intersection(record.tags) or record.name in self.names:
                continue
            # Packs loaded only now (no activation) are this patcher's doing: all of
            # their patches are taken back on exit, whatever their default.
            loaded_here = record.name not in known_before
            if self._blacklisted(record.name):
                if record.enabled:
                    if record.status == "applied":
                        _unpatch(record.name)
                    else:
                        application.disable((record.name,))
                    if not loaded_here:
                        self._disabled_builtins.append(record.name)
            elif record.enabled_by_default and (not record.enabled or loaded_here):
                # Optional patches (off by default, e.g. ascend.resnet_fp16) are not
                # part of DrivingSDK's default set: enable those by name if wanted.
                if not record.enabled:
                    application.enable((record.name,))
                self._enabled_builtins.append(record.name)

    def _register_internal_format(self) -> None:
        saved = self._internal_format_saved
        flag = self.allow_internal_format

        def internal_format(module: "Any") -> None:
            """Set torch.npu.config.allow_internal_format as the patcher was built."""
            config = module.npu.config
            saved.append((config, getattr(config, "allow_internal_format", None)))
            # A property on torch_npu's config object: the ledger cannot restore a
            # property's value, so the patcher restores it itself on exit.
            config.allow_internal_format = flag

        name = unique_name(f"{NAME_PREFIX}.torch_npu.allow_internal_format")
        self.names.append(name)
        register(internal_format, "torch_npu", name=name, tags=(NAME_PREFIX,))

    @property
    def is_applied(self) -> bool:
        """Whether ``apply()`` ran and ``restore()`` has not undone it yet."""
        return self._applied

    # -- undoing ------------------------------------------------------------

    def restore(self) -> None:
        """Undo everything ``apply`` did, newest first. Imports nothing."""
        if not self._applied:
            return
        self._applied = False
        if self.profiling is not None or self.brake_step is not None:
            training = sys.modules.get("lazypatch.registry.training")
            if training is not None:
                if self.brake_step is not None:
                    training.brake_at(None)
                if self.profiling is not None:
                    training.profile_to(None)
        for config, value in reversed(self._internal_format_saved):
            config.allow_internal_format = value
        self._internal_format_saved.clear()
        for name in reversed(self.names + self._enabled_builtins):
            _unpatch(name)
        for name in self._disabled_builtins:
            application.enable((name,))
        for entry in self._quiet_filters:
            if entry in warnings.filters:
                warnings.filters.remove(entry)  # type: ignore[attr-defined]
        self._enabled_builtins, self._disabled_builtins, self._quiet_filters = [], [], []

    def __enter__(self) -> "Patcher":
        return self.apply()

    def __exit__(self, *exc_info: "Any") -> None:
        self.restore()


__all__ = ["Patch", "Patcher", "DEFAULT_TAGS", "NAME_PREFIX", "legacy_patch_function",
           "quiet_failure_warnings", "any_applied", "unique_name", "registrations_recorded"]


def _unpatch(name: str) -> None:
    undo.unpatch(STATE.catalog.find(name), "undone by the DrivingSDK patcher's restore()")

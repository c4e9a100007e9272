"""DrivingSDK 2.0's patch declarations (``AtomicPatch``, ``RegistryPatch``, ``Patch``,
``with_imports``) over ``lazypatch.replace`` / ``registry_entry``; see ``v2.patcher``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import contextmanager

from ...decide.requirements import parse_requirements
from ...declare.boundaries import Deferred, resolve, validate_reference
from ...declare.paths import declare_path, replace, split_path
from ...declare.registry_entries import registry_entry
from ..v1 import patcher as v1
from .summary import TAG, patcher_logger

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple

unique_name = v1.unique_name   # one definition, in the 1.0 layer below


class BasePatch(ABC):
    """What a ``Patcher`` holds: DrivingSDK's abstract base, whose subclasses give a
    ``name`` and an ``apply()``. lazypatch's own (``DeclaredPatch``) declare lazypatch
    patches; a subclass of this written for DrivingSDK, whose ``apply()`` changes things
    itself, is run by the ``Patcher`` at ``apply()`` as DrivingSDK runs it."""

    requires: "Tuple[str, ...]" = ()
    target_kind = "module"   # what a "not found" result names
    # Patches declare_all() found in force already (a pack patch activation turned on):
    # named in results, not this declaration's to undo.
    kept_on: "Tuple[str, ...]" = ()
    # Where a Patcher's name for it starts (None: "driving_sdk"; the 1.0 layer's
    # "mx_driving.<module>").
    name_prefix: "Optional[str]" = None

    @property
    @abstractmethod
    def name(self) -> str:
        """The patch's name (an AtomicPatch's target)."""

    @abstractmethod
    def apply(self) -> "Any":
        """Apply the patch now; a ``PatchResult``."""

    def declare(self, patch_name: str,
                guard: "Optional[Callable[[], None]]" = None) -> str:
        """Register the patch as ``patch_name``; ``guard()`` runs first when it applies
        (it raises ``SkipPatch`` to skip, e.g. for a declared conflict). Here, for a
        subclass written for DrivingSDK: its own ``apply()`` runs now (its changes are its
        own: nothing is recorded or undone); no lazypatch patch, so no name ("")."""
        self.apply()
        return ""

    def declare_all(self, patch_name: str,
                    guard: "Optional[Callable[[], None]]" = None) -> "List[str]":
        """``declare``, as the list of the lazypatch patches it declared or enabled (a
        built-in group's patch enables the pack patches doing its work: one or more)."""
        return [self.declare(patch_name, guard)]

    def describe(self) -> str:
        return self.name

    def leave_out(self, names: "Set[str]") -> bool:
        """Leave out of this patch the lazypatch patches ``names`` disable (by name or
        last part); whether anything of it is left to declare."""
        return True

    def apply_to(self, root: "Any") -> None:
        """DrivingSDK 1.0's way, for the module object a 1.0 patch function is given when
        it is not the imported module (a stand-in, a test double): make the change on
        ``root`` now, without the engine (nothing recorded, no precheck: the object given
        is patched as asked). AttributeError where ``root`` lacks a part of the target."""
        raise TypeError(f"{type(self).__name__} cannot be applied to a given module object")

    @property
    def module(self) -> str:
        """The target's top-level package, DrivingSDK's grouping key."""
        return self.name.split(".")[0] if "." in self.name else ""

    def get_info(self, show_diff: bool = False) -> str:
        """One line naming the patch (and, with ``show_diff``, what it replaced)."""
        return self.describe()


class DeclaredPatch(BasePatch):
    """A patch that ``declare`` makes a lazypatch patch (``AtomicPatch``,
    ``RegistryPatch``, ``LegacyPatch``): applied when its module is imported."""

    @property
    def name(self) -> str:   # pragma: no cover - every subclass names itself
        raise NotImplementedError

    def declare(self, patch_name: str,
                guard: "Optional[Callable[[], None]]" = None) -> str:   # pragma: no cover
        raise NotImplementedError

    def declared_names(self) -> "List[str]":
        """The lazypatch patches ``apply()`` declared for this object, oldest first."""
        return self.__dict__.setdefault("_declared_names", [])

    def apply(self) -> "Any":
        """Declare this patch now (outside a ``Patcher``) and return a ``PatchResult``:
        ``APPLIED`` when its module was imported (it applied at once), else ``SKIPPED``
        with the reason (a module not imported yet: it applies when it is), or ``FAILED``.
        Applying an object that is in force again does nothing and says so."""
        from .results import PatchResult, PatchStatus, result_of
        invalid = getattr(self, "invalid_target", "")
        if invalid:
            return PatchResult(PatchStatus.FAILED, self.name, self.module, invalid)
        if self.is_applied:
            if not self.overwritten():
                return PatchResult(PatchStatus.SKIPPED, self.name, self.module,
                                   "already applied")
            # Something assigned over the patch since: applying again puts the patch back
            # in force, as DrivingSDK's second apply() does (the first taken back, so
            # nothing stacks).
            undo_patches(self.declared_names())
            self.declared_names().clear()
        names = self.declare_all(unique_name(f"{v1.NAME_PREFIX}.{self.name}"))
        declared = self.declared_names()
        declared.extend(name for name in names if name not in declared)
        return result_of(names[0], self.name, self.module, self.target_kind)

    def overwritten(self) -> bool:
        """Whether a slot this object's patches set holds another value now (assigned
        over the patch by someone else since)."""
        from ...slots import read_slot
        from ...state import STATE
        for name in self.declared_names():
            registered = STATE.catalog.by_name.get(name)
            for context in registered.live if registered is not None else ():
                for change in context.changes:
                    if change.live and change.action == "setattr" and \
                            read_slot(change.kind, change.owner, change.key) is not change.after:
                        return True
        return False

    @property
    def is_applied(self) -> bool:
        """Whether a patch ``apply()`` declared for this object is in force now."""
        return v1.any_applied(self.declared_names())


def _no_argument_check(check: "Optional[Callable[..., Any]]",
                       available: "Dict[str, Any]") -> "Optional[Callable[[], Any]]":
    """A precheck callable as lazypatch wants it (no argument); DrivingSDK also passes
    the constructor's arguments by name to a precheck that asks for them."""
    if check is None:
        return None
    if not callable(check):
        raise TypeError(f"precheck must be callable, got {check!r}")
    import inspect
    try:
        wanted = [name for name in inspect.signature(check).parameters]
    except (TypeError, ValueError):
        wanted = []

    def asked() -> "Any":
        with worded("precheck"):
            answer = check(**{name: available[name] for name in wanted if name in available})
        if not answer:
            from ...errors import SkipPatch
            raise SkipPatch("precheck failed")   # DrivingSDK's words for a precheck's no
        return True
    asked.__qualname__ = getattr(check, "__qualname__", "precheck")
    return asked


@contextmanager
def worded(callback: str) -> "Iterator[None]":
    """An error raised by a patch's own ``callback`` (precheck, replacement_wrapper,
    target_wrapper, module_factory) reads as DrivingSDK reports it, "<callback> error:
    ...", in the same exception type where it can be built with one message."""
    try:
        yield
    except Exception as error:
        message = f"{callback} error: {error}"
        try:
            reworded = type(error)(message)
        except Exception:
            reworded = RuntimeError(message)
        raise reworded from error


def _guarded(precheck: "Optional[Callable[[], Any]]",
             guard: "Optional[Callable[[], None]]") -> "Optional[Callable[[], Any]]":
    """The precheck with ``guard()`` asked first (the guard skips by raising)."""
    if guard is None:
        return precheck

    def checked() -> "Any":
        guard()
        return True if precheck is None else precheck()
    checked.__qualname__ = getattr(precheck, "__qualname__", "precheck")
    return checked


def _requirements(requires: "Any", owner: str) -> "Tuple[str, ...]":
    """``requires=`` as lazypatch takes it, checked now (a bad string fails here)."""
    if isinstance(requires, str):
        requires = (requires,)
    try:
        chosen = tuple(requires or ())
        parse_requirements(chosen)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{owner}: requires must be a list of requirements such as "
                          f"['mmcv>=2,<3']: {error}") from None
    return chosen


class AtomicPatch(DeclaredPatch):
    """Replace (or wrap) the attribute at ``target``; see the module docstring."""

    def __init__(self, target: str, replacement: "Any" = None, *,
                 aliases: "Optional[List[str]]" = None,
                 precheck: "Optional[Callable[..., Any]]" = None,
                 runtime_check: "Optional[Callable[..., Any]]" = None,
                 replacement_wrapper: "Optional[Callable[[Any], Any]]" = None,
                 target_wrapper: "Optional[Callable[[Any], Any]]" = None,
                 requires: "Iterable[str]" = ()) -> None:
        if replacement is None and target_wrapper is None:
            raise ValueError(f"AtomicPatch({target!r}): Either replacement or target_wrapper "
                             f"must be provided")
        # DrivingSDK answers FAILED "invalid target path" at apply() for a single-part
        # target; other malformed targets fail here, at the declaration.
        self.invalid_target = ""
        if isinstance(target, str) and target.isidentifier():
            self.invalid_target = (f"invalid target path: {target!r} names no attribute inside "
                                   f"a module; write 'pkg.mod.function' or "
                                   f"'pkg.mod.Class.method'")
        else:
            split_path(target)
        for what, value in (("runtime_check", runtime_check),
                            ("replacement_wrapper", replacement_wrapper),
                            ("target_wrapper", target_wrapper)):
            if value is not None and not callable(value):
                raise TypeError(f"AtomicPatch({target!r}): {what} must be callable, got {value!r}")
        self.target = target
        self.replacement = replacement
        self.aliases = list(aliases or [])
        self.precheck = precheck
        self.runtime_check = runtime_check
        self.replacement_wrapper = replacement_wrapper
        self.target_wrapper = target_wrapper
        self.requires = _requirements(requires, f"AtomicPatch({target!r})")

    @property
    def name(self) -> str:
        return self.target

    # DrivingSDK keeps these under private names; code reading them keeps working.
    @property
    def _replacement(self) -> "Any":
        return self.replacement

    @property
    def _replacement_wrapper(self) -> "Any":
        return self.replacement_wrapper

    @property
    def _target_wrapper(self) -> "Any":
        return self.target_wrapper

    def resolved_replacement(self) -> "Any":
        """The replacement object (resolved, wrapped as declared)."""
        value = resolve(self.replacement)
        if self.replacement_wrapper is None:
            return value
        with worded("replacement_wrapper"):
            return self.replacement_wrapper(value)

    def declare(self, patch_name: str,
                guard: "Optional[Callable[[], None]]" = None) -> str:
        if self.invalid_target:
            raise ValueError(f"AtomicPatch: {self.invalid_target}")
        precheck = _guarded(_no_argument_check(self.precheck, {
            "target": self.target, "replacement": self.replacement, "aliases": self.aliases,
            "runtime_check": self.runtime_check, "target_wrapper": self.target_wrapper,
            "replacement_wrapper": self.replacement_wrapper}), guard)
        precheck = _guarded(precheck, self._target_present)
        if self.replacement is not None:
            value = self.replacement if self.replacement_wrapper is None else \
                Deferred(self.resolved_replacement, f"replacement_wrapper of {self.target}")
            if self.runtime_check is not None:
                return replace(self.target, value, name=patch_name, precheck=precheck,
                               runtime_check=self.runtime_check, aliases=self.aliases,
                               tags=(TAG,), requires=self.requires)
            validate_reference(value, f"AtomicPatch({self.target!r}): the replacement")
            shown = value if isinstance(value, str) else getattr(value, "__qualname__", repr(value))
            change, description = _value_change(value), f"Replace {self.target} with {shown}"
        else:
            change = _target_wrapper_change(self.target_wrapper)
            description = (f"Wrap {self.target} with target_wrapper "
                           f"{getattr(self.target_wrapper, '__qualname__', '')}")
        return declare_path(self.target, change, description, patch_name, name=patch_name,
                            rebind=False, priority=0, requires=self.requires, tags=(TAG,),
                            enabled=True, precheck=precheck, aliases=self.aliases)

    def _target_present(self) -> None:
        """Skip, in DrivingSDK's words, where the target's owner is there without the
        attribute (another version of the target); an owner not imported yet is the
        engine's to wait for."""
        from .helpers import object_at
        owner_path, _, attribute = self.target.rpartition(".")
        owner = object_at(owner_path, ensure_import=False)
        present = attribute in owner if isinstance(owner, dict) else hasattr(owner, attribute)
        if owner is not None and not present:
            from ...errors import SkipPatch
            raise SkipPatch(f"target not found: {self.target}")

    def replacement_for(self, root: "Any", original: "Any") -> "Any":
        """The replacement for ``apply_to(root)`` of the target holding ``original``: a
        string path under ``root``'s name read from ``root``'s attributes, any other
        resolved; wrapped as declared."""
        value = self.replacement
        if isinstance(value, str) and value.partition(".")[0] == getattr(root, "__name__", None):
            owner, attribute = attribute_under(root, value.replace(":", "."))
            value = getattr(owner, attribute)
        else:
            value = resolve(value)
        if self.replacement_wrapper is None:
            return value
        with worded("replacement_wrapper"):
            return self.replacement_wrapper(value)

    def apply_to(self, root: "Any") -> None:
        owner, attribute = attribute_under(root, self.target)
        original = getattr(owner, attribute)   # a target that is not there: AttributeError
        if self.replacement is None:
            with worded("target_wrapper"):
                value = self.target_wrapper(original)   # type: ignore[misc]
        else:
            value = self.replacement_for(root, original)
            if self.runtime_check is not None:
                value = _dispatching(original, value, self.runtime_check)
        setattr(owner, attribute, value)

    def get_info(self, show_diff: bool = False) -> str:
        """``"target: original -> replacement"`` (the original as it was before any live
        patch, ``<missing>`` when its module is not imported or lacks it); with
        ``show_diff``, the unified diff of their sources below it. Imports nothing."""
        from ... import original as original_of
        from .helpers import callable_name, object_at, source_diff
        owner_path, _, attribute = self.target.rpartition(".")
        owner = object_at(owner_path, ensure_import=False)
        original: "Any" = None
        if owner is not None:
            try:
                original = original_of(owner, attribute)
            except AttributeError:
                original = None
        # A string replacement is named as written: resolving it would import its module.
        replacement = self.target_wrapper if self.replacement is None else self.replacement
        shown = replacement if isinstance(replacement, str) else callable_name(replacement)
        info = (f"{self.target}: "
                f"{callable_name(original) if original is not None else '<missing>'} -> {shown}")
        if show_diff and callable(original) and callable(replacement):
            diff = source_diff(original, replacement)
            if diff:
                info += "\n" + diff
        return info

    def __repr__(self) -> str:
        return f"AtomicPatch({self.target!r})"


def _dispatching(original: "Any", replacement: "Any", check: "Callable[..., Any]") -> "Any":
    """``replacement`` where ``check(*args, **kwargs)`` says yes, else ``original`` (a check
    that raises runs the original, as DrivingSDK does)."""
    import functools

    @functools.wraps(original)
    def dispatch(*args: "Any", **kwargs: "Any") -> "Any":
        try:
            chosen = bool(check(*args, **kwargs))
        except Exception:
            chosen = False
        return (replacement if chosen else original)(*args, **kwargs)
    return dispatch


def attribute_under(root: "Any", path: str) -> "Tuple[Any, str]":
    """(owner, attribute name) of dotted ``path`` read from the object ``root`` named by
    its first part (``mmcv.ops.X.f`` on a given ``mmcv``); AttributeError where ``root``
    has another name or lacks a part, as DrivingSDK 1.0's patch functions fail."""
    first, *middle, last = path.split(".")
    name = root.__name__   # AttributeError for an object without one, as in DrivingSDK
    if first != name:
        raise AttributeError(f"{path} is not under {name!r}")
    owner = root
    for part in middle:
        owner = getattr(owner, part)
    return owner, last


def _value_change(value: "Any") -> "Callable[[Any, Any, str], None]":
    """Set ``value`` (resolved when applied) at the target: an attribute, or, where the
    target's owner is a dict (``REGISTRY._module_dict.Name``, as DrivingSDK's targets go),
    that key; recorded either way."""
    from ...declare.paths import _replace_value

    def change(patch: "Any", owner: "Any", attribute: str) -> None:
        if isinstance(owner, dict):
            if attribute not in owner:
                raise AttributeError(f"the dict at the target has no key {attribute!r}")
            patch.setitem(owner, attribute, resolve(value))
        else:
            _replace_value(value)(patch, owner, attribute)
    change.rebind = False  # type: ignore[attr-defined]
    return change


def _target_wrapper_change(target_wrapper: "Any") -> "Callable[[Any, Any, str], None]":
    def change(patch: "Any", owner: "Any", attribute: str) -> None:
        # as DrivingSDK reads it (bound for classes; a dict's item)
        original = owner[attribute] if isinstance(owner, dict) else getattr(owner, attribute)
        with worded("target_wrapper"):
            wrapped = target_wrapper(original)
        # The wrapper's result is the value itself (a string is not a path to resolve).
        _value_change(Deferred(lambda: wrapped, "target_wrapper's result"))(
            patch, owner, attribute)
    change.rebind = False  # type: ignore[attr-defined]
    return change


class RegistryPatch(DeclaredPatch):
    """Register ``module_cls`` (or ``module_factory()``) as ``name`` in ``registry``."""

    target_kind = "registry"

    def __init__(self, registry: str, module_cls: "Any" = None, *,
                 name: "Optional[str]" = None, force: bool = True,
                 precheck: "Optional[Callable[..., Any]]" = None,
                 module_factory: "Optional[Callable[[], Any]]" = None,
                 requires: "Iterable[str]" = ()) -> None:
        if module_cls is None and module_factory is None:
            raise ValueError("RegistryPatch: Either module_cls or module_factory must be provided "
                             "(the class to register, or a function returning it)")
        if module_cls is None and name is None:
            raise ValueError("RegistryPatch: name is required when using module_factory")
        if module_factory is not None and not callable(module_factory):
            raise TypeError(f"RegistryPatch: module_factory must be callable, got "
                            f"{module_factory!r}")
        split_path(registry)
        self.registry = registry
        self.module_cls = module_cls
        self.module_factory = module_factory
        self.register_name: str = str(name or getattr(module_cls, "__name__", ""))
        self.force = bool(force)
        self.precheck = precheck
        self.requires = _requirements(requires, f"RegistryPatch({registry!r})")

    @property
    def name(self) -> str:
        return f"{self.registry}.{self.register_name}"

    def declare(self, patch_name: str,
                guard: "Optional[Callable[[], None]]" = None) -> str:
        value = self.module_cls if self.module_factory is None else \
            Deferred(self.built_class, f"module_factory of {self.name}")
        precheck = _no_argument_check(self.precheck, {
            "registry": self.registry, "module_cls": self.module_cls,
            "name": self.register_name, "force": self.force,
            "module_factory": self.module_factory})
        return registry_entry(self.registry, self.register_name, value, name=patch_name,
                              tags=(TAG,), force=self.force, precheck=_guarded(precheck, guard),
                              requires=self.requires, any_registry=True)

    def built_class(self) -> "Any":
        """``module_factory()``, its errors worded as DrivingSDK words them."""
        assert self.module_factory is not None
        with worded("factory"):
            return self.module_factory()

    def class_for(self, root: "Any") -> "Any":
        """The class ``apply_to(root)`` registers: ``module_cls`` or ``module_factory()``."""
        return self.module_cls if self.module_factory is None else self.built_class()

    def apply_to(self, root: "Any") -> None:
        owner, attribute = attribute_under(root, self.registry)
        registry = getattr(owner, attribute)   # a registry that is not there: AttributeError
        registry.register_module(name=self.register_name, force=self.force)(
            self.class_for(root))

    def get_info(self, show_diff: bool = False) -> str:
        """``"registry.name: registers Class"`` (``<factory>`` when the class comes from
        ``module_factory``, which is not called to describe it)."""
        from .helpers import callable_name
        what = "<factory>" if self.module_cls is None else callable_name(self.module_cls)
        return f"{self.name}: registers {what}"

    def __repr__(self) -> str:
        return f"RegistryPatch({self.registry}, {self.register_name})"


class LegacyPatch(DeclaredPatch):
    """A DrivingSDK 1.0 patch function ``func(module, options)`` as a 2.0 patch on
    ``target_module``: run when that module is imported (at once if it is), its changes
    recorded and undone with it, as the 1.0 layer runs it. ``priority`` (lower first)
    orders it among the patches of its module; ``quiet`` keeps its failure warning quiet
    (1.0's ``patch_failure_warning=False``)."""

    def __init__(self, func: "Callable[..., Any]", options: "Optional[Dict[str, Any]]" = None,
                 target_module: "Optional[str]" = None, *, priority: int = 0,
                 quiet: bool = False) -> None:
        if not callable(func):
            raise TypeError(f"LegacyPatch: func must be a function taking (module, options), "
                            f"got {func!r}")
        if target_module is None:
            raise ValueError(f"LegacyPatch requires target_module: "
                             f"LegacyPatch({getattr(func, '__name__', 'func')}, "
                             f"target_module='module_name')")
        from ...declare.registration import validate_target
        validate_target(target_module)
        self.func = func
        self.options: "Dict[str, Any]" = dict(options or {})
        self.target_module = target_module
        self.priority = priority
        self.quiet = quiet
        self.tags: "Tuple[str, ...]" = (TAG,)

    @classmethod
    def of(cls, patch_object: "v1.Patch", target_module: str) -> "LegacyPatch":
        """The 1.0 ``Patch(func, options, priority, patch_failure_warning)`` on
        ``target_module``, as the 1.0 layer registers it (tagged ``mx_driving``); the
        names it declares are recorded on ``patch_object`` too (its ``is_applied``)."""
        legacy = cls(patch_object.func, patch_object.options, target_module,
                     priority=patch_object.priority, quiet=not patch_object.patch_failure_warning)
        legacy.tags = (v1.NAME_PREFIX,)
        legacy.name_prefix = f"{v1.NAME_PREFIX}.{target_module}"
        legacy.__dict__["_declared_names"] = patch_object.declared_names
        return legacy

    @property
    def name(self) -> str:
        explicit = getattr(self.func, "__patch_name__", None)
        if explicit:
            return str(explicit)
        name = str(getattr(self.func, "__name__", None) or "legacy_patch")
        outer, _, _ = str(getattr(self.func, "__qualname__", "")).rpartition(".<locals>.")
        if name.startswith("_") and outer:
            # ``build_X_patch()`` returning LegacyPatch(_apply): the patch is "X", as
            # DrivingSDK names it.
            builder = outer.rpartition(".")[2]
            builder = builder[len("build_"):] if builder.startswith("build_") else builder
            return builder[:-len("_patch")] if builder.endswith("_patch") else builder
        return name

    @property
    def module(self) -> str:
        return self.target_module

    def declare(self, patch_name: str,
                guard: "Optional[Callable[[], None]]" = None) -> str:
        if self.quiet:
            v1.quiet_failure_warnings(patch_name)
        v1.register_legacy(self.func, self.options, self.target_module, patch_name,
                                     priority=self.priority, tags=self.tags, guard=guard)
        self.declared_names().append(patch_name)
        return patch_name

    def apply_to(self, root: "Any") -> None:
        self.func(root, self.options)

    def __repr__(self) -> str:
        return f"LegacyPatch({self.name})"


class _PatchMeta(type):
    """``Patch(func, options)`` (the 1.0 form) gives the 1.0 layer's ``Patch``;
    subclasses with a ``patches()`` classmethod are the 2.0 form."""

    def __call__(cls, *args: "Any", **kwargs: "Any") -> "Any":
        if cls is Patch and args and callable(args[0]) and not isinstance(args[0], type):
            return v1.Patch(*args, **kwargs)
        return super().__call__(*args, **kwargs)


class Patch(metaclass=_PatchMeta):
    """A group of patches: subclasses return them from ``patches(options)``; ``name``
    defaults to the class name.

    ``legacy_name``: the group's old (1.0) name, still accepted by ``disable``,
    ``enable`` and ``conflicts_with`` with a deprecation notice. ``conflicts_with``:
    names of groups that must not be used with this one (a ``Patcher`` holding both
    refuses to apply; one applied by another patcher first makes this one skip).
    ``apply_before_collect``: declared before the other groups' ``patches()`` run.
    Each is checked when the class is defined.
    """

    name: "Optional[str]" = None
    legacy_name: "Optional[str]" = None
    conflicts_with: "Tuple[str, ...]" = ()
    apply_before_collect: bool = False

    def __repr__(self) -> str:
        return f"<Patch group {type(self).__qualname__} name={self.name!r}>"

    def __init_subclass__(cls, **kwargs: "Any") -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("name") is None:
            cls.name = cls.__name__
        _check_group_attributes(cls)

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        raise NotImplementedError(f"{cls.__name__}.patches(options) must return a list of "
                                  f"AtomicPatch / RegistryPatch")

    @classmethod
    def apply_all(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[Any]":
        """``apply()`` each patch of the group, without a ``Patcher``: their results."""
        return [patch.apply() for patch in cls.patches(options)]

    def apply(self) -> "Any":
        """The group applied as one: ``FAILED`` if a patch failed, ``APPLIED`` if one
        applied, else ``SKIPPED``."""
        from .results import PatchResult, PatchStatus
        results = type(self).apply_all()
        failed = sum(result.status is PatchStatus.FAILED for result in results)
        applied = sum(result.status is PatchStatus.APPLIED for result in results)
        if failed:
            return PatchResult(PatchStatus.FAILED, str(self.name), "", f"{failed} patches failed")
        if applied:
            return PatchResult(PatchStatus.APPLIED, str(self.name), "",
                               f"{applied} patches applied")
        return PatchResult(PatchStatus.SKIPPED, str(self.name), "", "all patches skipped")

    def __iter__(self) -> "Any":
        return iter(type(self).patches())


def _check_group_attributes(cls: "Any") -> None:
    """Refuse a malformed ``name``/``legacy_name``/``conflicts_with``/
    ``apply_before_collect`` where the class is defined, naming the fix."""
    where = f"Patch class {cls.__qualname__}"
    if not isinstance(cls.name, str) or not cls.name.strip():
        raise TypeError(f"{where}: name must be a non-empty string, got {cls.name!r}")
    legacy = cls.legacy_name
    if legacy is not None and (not isinstance(legacy, str) or not legacy.strip()):
        raise TypeError(f"{where}: legacy_name must be the old name as a string (or None), "
                        f"got {legacy!r}")
    # legacy_name == name is allowed: DrivingSDK's own groups write both (pseudo_sampler).
    conflicts = cls.conflicts_with
    if isinstance(conflicts, str) or not isinstance(conflicts, (list, tuple, set, frozenset)) \
            or not all(isinstance(item, str) and item.strip() for item in conflicts):
        raise TypeError(f"{where}: conflicts_with must be a list of patch names such as "
                        f"['resnet_maxpool'], got {conflicts!r}")
    if cls.name in conflicts or (legacy is not None and legacy in conflicts):
        raise ValueError(f"{where}: conflicts_with names the group itself ({cls.name!r}); "
                         f"list the other groups it cannot be used with")
    if not isinstance(cls.apply_before_collect, bool):
        raise TypeError(f"{where}: apply_before_collect must be True or False, got "
                        f"{cls.apply_before_collect!r}")


def with_imports(*import_specs: "Any",
                 apply_decorators: "Optional[List[Tuple[str, Dict[str, Any]]]]" = None
                 ) -> "Callable[[Any], Any]":
    """Declare what a replacement imports, done on its first call (so declaring a patch
    imports nothing), with DrivingSDK's meaning:

    * ``"pkg.mod"`` binds the module under its last name (``mod``);
    * ``("pkg.mod", "a", "b", ...)`` binds every listed name (a name the module lacks
      is skipped, as DrivingSDK does; a module that cannot be imported is warned about);
      ``"a as b"`` inside the tuple binds ``a`` under the name ``b`` (lazypatch's alias
      form: no identifier contains a space, so it cannot be mistaken for a name);
    * ``"@expression"`` decorates the function, evaluated once the names are bound;
      ``apply_decorators=[("pkg.mod.decorator", {kwargs})]`` the older form.

    The names are bound in a namespace of their own laid over the defining module's
    globals (``LiveGlobals``): every other global is read from the module at each use,
    and a ``global X`` the function assigns lands in the module when the call returns;
    the imported names themselves are never written into the module."""
    for spec in import_specs:
        if isinstance(spec, str) and spec.strip():
            continue
        if isinstance(spec, tuple) and len(spec) >= 1 and all(
                isinstance(part, str) and part.strip() for part in spec):
            continue
        raise TypeError(f"with_imports: {spec!r} must be 'pkg.module', ('pkg.module', 'name', "
                        f"...), ('pkg.module', 'name as alias') or '@decorator(...)'")

    def decorate(function: "Any") -> "Any":
        import functools
        if getattr(function, "_with_imports_decorated", False):
            _warn(f"with_imports: stacking multiple @with_imports on "
                  f"{getattr(function, '__name__', function)!r} does not combine their "
                  f"names; list every import in one @with_imports")
        ready: "List[Any]" = []

        @functools.wraps(function)
        def call(*args: "Any", **kwargs: "Any") -> "Any":
            if not ready:
                ready[:] = _prepared(function, import_specs, apply_decorators or [])
            prepared, namespace = ready[0], ready[1]
            try:
                return prepared(*args, **kwargs)
            finally:
                namespace.write_back()
        call._with_imports_decorated = True   # type: ignore[attr-defined]
        return call
    return decorate


def _bound_names(spec: "Any") -> "Tuple[str, List[Tuple[str, str]]]":
    """(module, [(attribute, name it is bound to)]); no attributes: bind the module."""
    if isinstance(spec, str):
        return spec, []
    pairs = []
    for item in spec[1:]:
        attribute, _, alias = item.partition(" as ")
        pairs.append((attribute.strip(), (alias or attribute).strip()))
    return spec[0], pairs


def _prepared(function: "Any", specs: "Tuple[Any, ...]",
              apply_decorators: "List[Tuple[str, Dict[str, Any]]]") -> "Tuple[Any, LiveGlobals]":
    """The function with its imports bound (and decorated), and its namespace."""
    import types
    from importlib import import_module
    namespace = LiveGlobals(function.__globals__)
    expressions = []
    for spec in specs:
        if isinstance(spec, str) and spec.startswith("@"):
            expressions.append(spec[1:])
            continue
        module_name, pairs = _bound_names(spec)
        try:
            module = import_module(module_name)
        except ImportError as error:
            _warn(f"with_imports: failed to import {module_name}: {error}")
            continue
        if not pairs:
            namespace[module_name.rpartition(".")[2]] = module
        for attribute, bound in pairs:
            if hasattr(module, attribute):
                namespace[bound] = getattr(module, attribute)
    namespace.seal()
    result = types.FunctionType(function.__code__, namespace, function.__name__,
                                function.__defaults__, function.__closure__)
    result.__kwdefaults__ = function.__kwdefaults__
    result.__dict__.update(function.__dict__)
    result.__qualname__ = getattr(function, "__qualname__", function.__name__)
    # DrivingSDK's order: the "@expression" decorators as listed, then the older form.
    for expression in expressions:
        result = eval(expression, namespace)(result)  # noqa: S307 - the patch author's own text
    for path, arguments in apply_decorators:
        decorator = object_at_path(path)
        if decorator is None:
            _warn(f"with_imports: decorator not found: {path}")
            continue
        result = decorator(**arguments)(result) if arguments else decorator(result)
    return result, namespace


class LiveGlobals(dict):
    """The globals of a ``with_imports`` function: the names it imports, over its
    module's globals, which are read live (``__missing__``: the interpreter asks it for
    any name not bound here when the namespace is not a plain dict).

    CPython stores a ``global X`` assignment straight into this dict (no method of
    ours runs), so after each call ``write_back`` moves every name that is not an
    imported one into the module, where the assignment was meant to go."""

    __slots__ = ("module_globals", "imported")

    def __init__(self, module_globals: "Dict[str, Any]") -> None:
        super().__init__()
        self.module_globals = module_globals
        self.imported: "Set[str]" = set()
        # Read by the interpreter without __missing__ when the function is made.
        self["__builtins__"] = module_globals.get("__builtins__", __builtins__)

    def __missing__(self, key: str) -> "Any":
        return self.module_globals[key]

    def seal(self) -> None:
        """The names bound so far are the imported ones; any other is a write-back."""
        self.imported = set(self)

    def write_back(self) -> None:
        """Move the globals the function assigned into its module."""
        for key in [key for key in self if key not in self.imported]:
            self.module_globals[key] = self.pop(key)


def _warn(message: str) -> None:
    """A warning of ``with_imports``, on the patchers' logger as DrivingSDK logs it."""
    patcher_logger.warning(message)


def object_at_path(path: str) -> "Any":
    """The object at dotted ``path`` (importing its module), or None."""
    from .helpers import object_at
    return object_at(path)


__all__ = ["BasePatch", "DeclaredPatch", "AtomicPatch", "RegistryPatch", "LegacyPatch", "Patch",
           "with_imports", "TAG", "unique_name"]


def undo_patches(names: "List[str]") -> None:
    """Unpatch these patches, newest first, with their aliases and stand-ins (what a
    ``Patcher``'s ``restore()`` and a patch applied again both take back)."""
    from ...apply.undo import unpatch
    from ...declare.paths import derived_from
    from ...state import STATE
    for name in reversed(names):
        patch = STATE.catalog.by_name.get(name)
        if patch is None:
            continue
        for derived in derived_from(name):   # aliases, stand-ins of submodules
            unpatch(STATE.catalog.by_name[derived], "undone by the DrivingSDK patcher")
        unpatch(patch, "undone by the DrivingSDK patcher")

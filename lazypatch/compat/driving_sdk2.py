"""The DrivingSDK patcher 2.0 API, as a thin layer over lazypatch's declarations.

Porting a DrivingSDK 2.0 ``patch.py`` means changing its import line::

    from mx_driving.patcher import Patcher, Patch, AtomicPatch, RegistryPatch, replace_with
    # becomes
    from lazypatch.compat.driving_sdk2 import Patcher, Patch, AtomicPatch, RegistryPatch, replace_with

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
  against the replacement's (``difflib``, written here: lazypatch's report has
  no source-diff renderer yet).
* ``with_profiling``, ``brake_at``, ``allow_internal_format`` and the built-in
  packs of ``default_patcher`` are those of the 1.0 layer (``mx_driving``).
* Leaving ``with patcher:`` (or ``restore()``) undoes everything exactly.
"""

from __future__ import annotations

import sys
from types import ModuleType

from ..boundaries import Deferred, resolve
from ..events import set_event_action
from ..paths import declare_path, replace, split_path
from ..registration import register, validate_target
from ..registry_entries import registry_entry
from ..state import STATE
from . import mx_driving

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

NAME_PREFIX = "driving_sdk"
TAG = "driving_sdk"


# --- patches ----------------------------------------------------------------------

class BasePatch:
    """A declaration a ``Patcher`` turns into lazypatch patches when it applies."""

    name = ""

    def declare(self, patch_name: str) -> str:   # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:
        return self.name


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
    if not wanted:
        return check

    def asked() -> "Any":
        return check(**{name: available[name] for name in wanted if name in available})
    asked.__qualname__ = getattr(check, "__qualname__", "precheck")
    return asked


class AtomicPatch(BasePatch):
    """Replace (or wrap) the attribute at ``target``; see the module docstring."""

    def __init__(self, target: str, replacement: "Any" = None, *,
                 aliases: "Optional[List[str]]" = None,
                 precheck: "Optional[Callable[..., Any]]" = None,
                 runtime_check: "Optional[Callable[..., Any]]" = None,
                 replacement_wrapper: "Optional[Callable[[Any], Any]]" = None,
                 target_wrapper: "Optional[Callable[[Any], Any]]" = None) -> None:
        if replacement is None and target_wrapper is None:
            raise ValueError(f"AtomicPatch({target!r}): either replacement or target_wrapper "
                             f"must be provided")
        split_path(target)   # a malformed target fails here, at the declaration
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

    @property
    def name(self) -> str:   # type: ignore[override]
        return self.target

    def resolved_replacement(self) -> "Any":
        """The replacement object (resolved, wrapped as declared)."""
        value = resolve(self.replacement)
        return self.replacement_wrapper(value) if self.replacement_wrapper else value

    def declare(self, patch_name: str) -> str:
        precheck = _no_argument_check(self.precheck, {
            "target": self.target, "replacement": self.replacement, "aliases": self.aliases,
            "runtime_check": self.runtime_check, "target_wrapper": self.target_wrapper,
            "replacement_wrapper": self.replacement_wrapper})
        if self.replacement is not None:
            value = self.replacement if self.replacement_wrapper is None else \
                Deferred(self.resolved_replacement, f"replacement_wrapper of {self.target}")
            return replace(self.target, value, name=patch_name, precheck=precheck,
                           runtime_check=self.runtime_check, aliases=self.aliases, tags=(TAG,))
        return declare_path(self.target, _target_wrapper_change(self.target_wrapper),
                            f"Wrap {self.target} with target_wrapper "
                            f"{getattr(self.target_wrapper, '__qualname__', '')}",
                            patch_name, name=patch_name, rebind=False, priority=0, requires=(),
                            tags=(TAG,), enabled=True, precheck=precheck, aliases=self.aliases)

    def __repr__(self) -> str:
        return f"AtomicPatch({self.target!r})"


def _target_wrapper_change(target_wrapper: "Any") -> "Callable[[Any, Any, str], None]":
    from ..paths import _replace_value

    def change(patch: "Any", owner: "Any", attribute: str) -> None:
        original = getattr(owner, attribute)   # as DrivingSDK reads it (bound for classes)
        _replace_value(target_wrapper(original))(patch, owner, attribute)
    change.rebind = False  # type: ignore[attr-defined]
    return change


class RegistryPatch(BasePatch):
    """Register ``module_cls`` (or ``module_factory()``) as ``name`` in ``registry``."""

    def __init__(self, registry: str, module_cls: "Any" = None, *,
                 name: "Optional[str]" = None, force: bool = True,
                 precheck: "Optional[Callable[..., Any]]" = None,
                 module_factory: "Optional[Callable[[], Any]]" = None) -> None:
        if module_cls is None and module_factory is None:
            raise ValueError("RegistryPatch: either module_cls or module_factory must be provided")
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

    @property
    def name(self) -> str:   # type: ignore[override]
        return f"{self.registry}.{self.register_name}"

    def declare(self, patch_name: str) -> str:
        value = self.module_cls if self.module_factory is None else \
            Deferred(self.module_factory, f"module_factory of {self.name}")
        precheck = _no_argument_check(self.precheck, {
            "registry": self.registry, "module_cls": self.module_cls,
            "name": self.register_name, "force": self.force,
            "module_factory": self.module_factory})
        return registry_entry(self.registry, self.register_name, value, name=patch_name,
                              tags=(TAG,), force=self.force, precheck=precheck)

    def __repr__(self) -> str:
        return f"RegistryPatch({self.registry}, {self.register_name})"


class _PatchMeta(type):
    """``Patch(func, options)`` (the 1.0 form) gives the 1.0 layer's ``Patch``;
    subclasses with a ``patches()`` classmethod are the 2.0 form."""

    def __call__(cls, *args: "Any", **kwargs: "Any") -> "Any":
        if cls is Patch and args and callable(args[0]) and not isinstance(args[0], type):
            return mx_driving.Patch(*args, **kwargs)
        return super().__call__(*args, **kwargs)


class Patch(metaclass=_PatchMeta):
    """A group of patches: subclasses return them from ``patches(options)``; ``name``
    defaults to the class name."""

    name: "Optional[str]" = None

    def __init_subclass__(cls, **kwargs: "Any") -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("name") is None:
            cls.name = cls.__name__

    @classmethod
    def patches(cls, options: "Optional[Dict[str, Any]]" = None) -> "List[BasePatch]":
        raise NotImplementedError(f"{cls.__name__}.patches(options) must return a list of "
                                  f"AtomicPatch / RegistryPatch")


def with_imports(*import_specs: "Any",
                 apply_decorators: "Optional[List[Tuple[str, Dict[str, Any]]]]" = None
                 ) -> "Callable[[Any], Any]":
    """Declare what a replacement imports, done on its first call (so declaring a patch
    imports nothing): ``"module"``, ``("module", "name")``, ``("module", "name", "alias")``
    bind into the function's module globals, as DrivingSDK does; ``"@expression"``
    strings and ``apply_decorators=[("pkg.mod.decorator", {kwargs})]`` decorate it then."""
    for spec in import_specs:
        if isinstance(spec, str) and (spec.startswith("@") or spec):
            continue
        if isinstance(spec, tuple) and len(spec) in (2, 3) and all(isinstance(part, str)
                                                                  for part in spec):
            continue
        raise TypeError(f"with_imports: {spec!r} must be 'module', ('module', 'name'), "
                        f"('module', 'name', 'alias') or '@decorator(...)'")

    def decorate(function: "Any") -> "Any":
        import functools
        ready: "List[Any]" = []

        @functools.wraps(function)
        def call(*args: "Any", **kwargs: "Any") -> "Any":
            if not ready:
                ready.append(_prepared(function, import_specs, apply_decorators or []))
            return ready[0](*args, **kwargs)
        return call
    return decorate


def _prepared(function: "Any", specs: "Tuple[Any, ...]",
              apply_decorators: "List[Tuple[str, Dict[str, Any]]]") -> "Any":
    from importlib import import_module
    namespace = function.__globals__
    expressions = []
    for spec in specs:
        if isinstance(spec, str) and spec.startswith("@"):
            expressions.append(spec[1:])
        elif isinstance(spec, str):
            import_module(spec)
            top = spec.partition(".")[0]
            namespace[top] = sys.modules[top]
        else:
            module_name, attribute = spec[0], spec[1]
            value = getattr(import_module(module_name), attribute)
            namespace[spec[2] if len(spec) == 3 else attribute] = value
    result = function
    for path, arguments in apply_decorators:
        module_name, _, attribute = path.rpartition(".")
        result = getattr(import_module(module_name), attribute)(**arguments)(result)
    for expression in reversed(expressions):
        result = eval(expression, namespace)(result)  # noqa: S307 - the patch author's own text
    return result


# --- import boundaries --------------------------------------------------------------

class Stub:
    """What a skipped module hands out: any attribute is a stub, a call returns None."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, name: str) -> "Stub":
        if name.startswith("__"):
            raise AttributeError(name)
        return Stub(f"{self._name}.{name}")

    def __call__(self, *args: "Any", **kwargs: "Any") -> None:
        return None

    def __iter__(self) -> "Any":
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __len__(self) -> int:
        return 0

    def __contains__(self, item: "Any") -> bool:
        return False

    def __repr__(self) -> str:
        return f"<driving_sdk stub {self._name}>"


def _stub_getattr(name: str) -> "Any":
    """A skipped module's ``__getattr__`` (PEP 562): private names stay missing, so that
    tools probing modules (pickle, inspect) are not misled."""
    if name.startswith("_"):
        raise AttributeError(name)
    return Stub(name)


class _ImportReplacementSpec:
    """What ``replace_with.module(...)`` returns: a module built when it is imported."""

    def __init__(self, base_module: "Optional[str]", exports: "Dict[str, Any]") -> None:
        if base_module is not None:
            validate_target(base_module)
        self.base_module = base_module
        self.exports = dict(exports)

    def build(self, module_path: str) -> ModuleType:
        module = ModuleType(module_path)
        if self.base_module is not None:
            # A snapshot of the base module's public names, as DrivingSDK makes it.
            base = resolve(self.base_module)
            module.__dict__.update({key: value for key, value in vars(base).items()
                                    if not key.startswith("__")})
        module.__dict__.update(self.exports)
        return module


class _ReplaceWith:
    @staticmethod
    def module(base: "Optional[str]" = None, **exports: "Any") -> _ImportReplacementSpec:
        """A replacement module: a copy of ``base``'s names (if given) plus ``exports``."""
        return _ImportReplacementSpec(base, exports)


replace_with = _ReplaceWith()


def _inject_function(source: str, name: str) -> "Callable[[Any, Any], None]":
    def inject_import(module: "Any", patch: "Any") -> None:
        if name in vars(module):
            patch.skip(f"{module.__name__}.{name} exists already; left as it is")
        patch.setattr(module, name, resolve(f"{source}:{name}"))
        exported = vars(module).get("__all__")
        if isinstance(exported, (list, tuple)) and name not in exported:
            patch.setattr(module, "__all__", type(exported)(list(exported) + [name]))
    inject_import.__doc__ = f"from {source} import {name}, made available in the target"
    return inject_import


# --- the patcher ----------------------------------------------------------------------

EVENT_ACTIONS = {"debug": "log:debug", "info": "log:info", "warning": "log:warning",
                 "error": "log:error", "exception": "raise", "exit": "exit",
                 "silent": "silent"}


def configure_patcher_logging(on_apply: "Optional[str]" = None, on_skip: "Optional[str]" = None,
                              on_fail: "Optional[str]" = None,
                              on_error: "Optional[str]" = None) -> None:
    """What applying, skipping and failing do for the patches of DrivingSDK patchers
    (``on_error``, an unexpected error, is a failure here too; ``on_fail`` wins)."""
    chosen = {"apply": on_apply, "skip": on_skip, "failure": on_fail or on_error}
    for event, value in chosen.items():
        if value is None:
            continue
        action = EVENT_ACTIONS.get(str(value).lower()) if isinstance(value, str) else None
        if action is None:
            raise ValueError(f"configure_patcher_logging: {value!r} is not an action; use one "
                             f"of {', '.join(EVENT_ACTIONS)}")
        set_event_action(event, action, selector=f"tag:{TAG}")


def set_patcher_log_level(level: "Any") -> None:
    """The threshold of the ``lazypatch`` logger (where these patchers log)."""
    import logging
    logging.getLogger("lazypatch").setLevel(level)


class Patcher:
    """Collects patches and import controls; ``apply()`` declares them (each applies when
    its module is imported); ``restore()`` or leaving ``with`` undoes everything."""

    def __init__(self, *, builtin_tags: "Iterable[str]" = ()) -> None:
        self._entries: "List[Tuple[Any, Optional[Dict[str, Any]]]]" = []
        self._blacklist: "Set[str]" = set()
        self.builtin_tags = tuple(builtin_tags)
        self.names: "List[str]" = []           # lazypatch patch names declared by this patcher
        self._declared: "List[Tuple[BasePatch, str, str]]" = []   # (patch, group, name)
        self._profiling: "Optional[Tuple[str, int]]" = None
        self._brake_step: "Optional[int]" = None
        self._internal_format = False
        self._legacy: "Optional[mx_driving.Patcher]" = None
        self._applied = False

    # -- collecting ---------------------------------------------------------------

    def add(self, *items: "Any", options: "Optional[Dict[str, Any]]" = None) -> "Patcher":
        """Add ``Patch`` classes (with ``options``) or ``AtomicPatch``/``RegistryPatch``."""
        for item in items:
            if isinstance(item, type) and callable(getattr(item, "patches", None)):
                self._entries.append((item, options))
            elif isinstance(item, BasePatch):
                self._entries.append((item, None))
            else:
                raise TypeError(f"Patcher.add: expected a Patch class or an AtomicPatch / "
                                f"RegistryPatch, got {item!r}")
        return self

    def disable(self, *names: "Any") -> "Patcher":
        """Leave out patches by name, ``Patch`` class or patch object."""
        for item in names:
            name = item if isinstance(item, str) else getattr(item, "name", None)
            if not isinstance(name, str) or not name:
                raise TypeError(f"Patcher.disable: expected a patch name, Patch class or "
                                f"patch, got {item!r}")
            self._blacklist.add(name)
        return self

    def skip_import(self, *module_paths: str) -> "Patcher":
        """Imports of these modules (and any submodule) succeed with inert stubs, where
        nothing installed provides them. Declared now, as in DrivingSDK."""
        for path in module_paths:
            validate_target(path)
            self.names.append(_stand_in(path))
        return self

    def replace_import(self, module_path: str, replacement: "Any" = None, *,
                       base_module: "Optional[str]" = None,
                       exports: "Optional[Dict[str, Any]]" = None, **attrs: "Any") -> "Patcher":
        """``import module_path`` gives ``replacement`` (a module path, or
        ``replace_with.module(...)``); the compatible forms ``base_module=``/``exports=``
        and keyword exports build a module the same way."""
        validate_target(module_path)
        if replacement is not None and (base_module is not None or exports or attrs):
            raise ValueError(f"replace_import({module_path!r}): give the replacement, or "
                             f"base_module/exports, not both")
        if replacement is None:
            replacement = _ImportReplacementSpec(base_module, {**(exports or {}), **attrs})
        if isinstance(replacement, _ImportReplacementSpec):
            spec = replacement
            value: "Any" = Deferred(lambda: spec.build(module_path),
                                    f"replace_with.module for {module_path}")
        elif isinstance(replacement, str):
            value = replacement
        else:
            raise TypeError(f"replace_import({module_path!r}, ...): the replacement must be a "
                            f"module path or replace_with.module(...), got {replacement!r}")
        from ..boundaries import replace_module
        self.names.append(replace_module(module_path, value, name=_unique(
            f"{NAME_PREFIX}.replace_import:{module_path}"), tags=(TAG,)))
        return self

    def inject_import(self, source_module: str, class_name: str,
                      target_module: str) -> "Patcher":
        """``from target_module import class_name`` works: the name is taken from
        ``source_module`` when ``target_module`` is imported (an existing one is kept)."""
        validate_target(source_module)
        validate_target(target_module)
        if not isinstance(class_name, str) or not class_name.isidentifier():
            raise ValueError(f"inject_import: {class_name!r} is not an identifier")
        self.names.append(register(
            _inject_function(source_module, class_name), target_module,
            name=_unique(f"{NAME_PREFIX}.inject_import:{target_module}.{class_name}"),
            tags=(TAG,)))
        return self

    def with_profiling(self, path: str, level: int = 0, **_schedule: "Any") -> "Patcher":
        """Profile training steps into ``path`` (the 1.0 layer's training pack)."""
        from ..registry.training.settings import ProfileSettings
        ProfileSettings(path, level)
        self._profiling = (path, level)
        return self

    def brake_at(self, step: int) -> "Patcher":
        """Stop training cleanly after step ``step``."""
        from ..registry.training.settings import check_step
        self._brake_step = check_step(step)
        return self

    def allow_internal_format(self, allow: bool = True) -> "Patcher":
        self._internal_format = bool(allow)
        return self

    def disallow_internal_format(self) -> "Patcher":
        return self.allow_internal_format(False)

    # -- applying ----------------------------------------------------------------------

    def _collect(self) -> "List[Tuple[BasePatch, str]]":
        collected: "List[Tuple[BasePatch, str]]" = []
        for item, options in self._entries:
            if isinstance(item, BasePatch):
                collected.append((item, ""))
                continue
            if item.name in self._blacklist:
                continue
            for patch in item.patches(options):
                if not isinstance(patch, BasePatch):
                    raise TypeError(f"{item.__name__}.patches() returned {patch!r}, not an "
                                    f"AtomicPatch / RegistryPatch")
                collected.append((patch, item.name))
        return [(patch, group) for patch, group in collected
                if patch.name not in self._blacklist]

    def apply(self, allow_internal_format: "Optional[bool]" = None) -> "Patcher":
        """Declare every patch; each applies when its module is imported. Imports nothing."""
        if self._applied:
            return self
        self._applied = True
        if allow_internal_format is not None:
            self._internal_format = bool(allow_internal_format)
        for patch, group in self._collect():
            base = f"{NAME_PREFIX}.{group}.{patch.name}" if group else \
                f"{NAME_PREFIX}.{patch.name}"
            name = patch.declare(_unique(base))
            self.names.append(name)
            self._declared.append((patch, group, name))
        self._legacy = mx_driving.Patcher({}, sorted(self._blacklist), self._internal_format,
                                          builtin_tags=self.builtin_tags,
                                          profiling=self._profiling, brake_step=self._brake_step)
        self._legacy.apply()
        return self

    @property
    def is_applied(self) -> bool:
        return self._applied

    def restore(self) -> None:
        """Undo everything, newest first (aliases with their patch). Imports nothing."""
        if self._legacy is not None:
            self._legacy.restore()
            self._legacy = None
        from ..application import unpatch
        from ..paths import derived_from
        for name in reversed(self.names):
            patch = STATE.catalog.by_name.get(name)
            if patch is None:
                continue
            for derived in derived_from(name):   # aliases, stand-ins of submodules
                unpatch(STATE.catalog.by_name[derived], "undone by the DrivingSDK patcher")
            unpatch(patch, "undone by the DrivingSDK patcher")
        self._applied = False

    def __enter__(self) -> "Patcher":
        return self.apply()

    def __exit__(self, *exc_info: "Any") -> None:
        self.restore()

    # -- reporting -----------------------------------------------------------------

    def print_info(self, diff: bool = False) -> "Patcher":
        """Print each declared patch's status grouped by module; with ``diff``, the source
        diff of every applied replacement against its original."""
        print(self.info(diff=diff))
        return self

    def info(self, diff: bool = False) -> str:
        from ..reporting import report
        records = {record.name: record for record in report()}
        groups: "Dict[str, List[str]]" = {}
        for patch, _group, name in self._declared:
            record = records.get(name)
            status = record.status if record is not None else "disabled"
            module = patch.name.split(".", 1)[0]
            lines = groups.setdefault(module, [])
            reason = f" ({record.reason})" if record is not None and record.reason else ""
            lines.append(f"  [{status}] {patch.describe()}{reason}")
            if diff and status == "applied" and isinstance(patch, AtomicPatch):
                lines.extend("    " + line for line in _source_diff(patch, name))
        total = sum(len(lines) for lines in groups.values())
        out = ["=" * 70, f"  DrivingSDK patcher (lazypatch): {len(self._declared)} patches in "
                         f"{len(groups)} modules", "=" * 70]
        for module, lines in groups.items():
            out.append(f"[{module}]")
            out.extend(lines)
        if not total:
            out.append("  (nothing declared: call apply() first)")
        out.append("=" * 70)
        return "\n".join(out)


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


def _stand_in(path: str) -> str:
    from ..boundaries import stand_in
    return stand_in(path, {"__getattr__": _stub_getattr}, name=_unique(
        f"{NAME_PREFIX}.skip_import:{path}"), tags=(TAG,), submodules=True)


def _unique(base: str) -> str:
    name, number = base, 2
    while name in STATE.catalog.by_name:
        name, number = f"{base}#{number}", number + 1
    return name


default_patcher = Patcher(builtin_tags=mx_driving.DEFAULT_TAGS)

__all__ = ["Patcher", "Patch", "AtomicPatch", "RegistryPatch", "BasePatch", "replace_with",
           "with_imports",
           "configure_patcher_logging", "set_patcher_log_level", "default_patcher", "Stub"]

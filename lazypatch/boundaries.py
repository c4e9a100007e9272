"""Import boundaries: stand-ins for modules that are not installed, replaced modules,
names injected into a module, and patches for modules placed in ``sys.modules`` by hand.

Each boundary is an ordinary registered patch (reported, ``unpatch``-able,
enabled and disabled by name or tag like any other), and everything it
changes goes through its ``patch`` context, so undo is exact:

* ``stand_in("flash_attn.ops", attributes={...})``: when nothing on
  ``sys.path`` provides the name, the finder asks the declaration for a spec
  (``importer.LazyPatchFinder._boundary_spec``); its loader creates a
  ``StandInModule``, and the patch, which runs before the (empty) body,
  records ``sys.modules`` and the parent attribute through
  ``patch.provide_module``, then the given attributes through
  ``patch.setattr``. Parents that are missing get bare stand-ins of their own.
  Where the real module is installed, it is imported and the patch reports
  itself ``skipped``.
* ``replace_module("apex", "my_pkg.apex_shim")``: the finder answers for the
  name before any other finder, so the real body never runs; the patch
  resolves the replacement then (not at registration) and provides it.
* ``inject("mmcv.ops", {"name": "pkg.mod:obj"})``: after the body ran, each
  name is set through ``patch.setattr``.

Why the patch deletes the import system's entry before providing: the
import system puts the placeholder module into ``sys.modules`` before the
body runs (``_bootstrap._load_unlocked``). Recorded as it is, undo would
"restore" that placeholder; removed first (we hold the module's import lock,
so no other import of it is running), the ledger records the name as absent
before, and undo removes it again, so ``import`` fails as it did before.
"""

from __future__ import annotations

import sys
from types import ModuleType

from .application import apply
from .registration import FIRST, ensure_finder, register, validate_target
from .slots import ITEM
from .state import AFTER, BEFORE, STATE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional

BOUNDARY_TAG = "import-boundary"


class StandInError(AttributeError):
    """An attribute was read from a bare stand-in module; the message names the
    patch that provided it and the ways out.

    An ``AttributeError``, so that ``hasattr``/``getattr(m, x, default)``
    feature checks keep answering "no" instead of crashing.
    """


class StandInModule(ModuleType):
    """A module provided by ``stand_in`` for one that is not installed."""

    def __repr__(self) -> str:
        namespace = object.__getattribute__(self, "__dict__")
        return (f"<lazypatch stand-in module {namespace.get('__name__')!r} provided by patch "
                f"{namespace.get('__lazypatch_stand_in__')!r}>")

    def __getattr__(self, name: str) -> "Any":
        namespace = object.__getattribute__(self, "__dict__")
        module_name = namespace.get("__name__", "?")
        if name.startswith("_"):
            # Tools probe private and dunder names on every module (pickle, inspect,
            # doctest): a plain AttributeError, as a real module would give.
            raise AttributeError(f"module {module_name!r} (a lazypatch stand-in) has no "
                                 f"attribute {name!r}")
        patch_name = namespace.get("__lazypatch_stand_in__", "?")
        raise StandInError(
            f"{module_name}.{name} is not available: {module_name!r} is not installed, and "
            f"lazypatch patch {patch_name!r} provides an empty stand-in for it. Give the "
            f"stand-in this attribute (lazypatch.stand_in({module_name!r}, attributes="
            f"{{{name!r}: ...}})), install the real package, or turn the stand-in off "
            f"(LAZYPATCH_DISABLE={patch_name})")


def resolve(reference: "Any") -> "Any":
    """The object a ``"package.module:attribute.path"`` string names (importing the
    module now), the module itself for ``"package.module"``; other values as they are."""
    if not isinstance(reference, str):
        return reference
    module_name, _, attributes = reference.partition(":")
    validate_target(module_name)
    from importlib import import_module
    found: "Any" = import_module(module_name)
    for depth, attribute in enumerate(attributes.split(".") if attributes else ()):
        try:
            found = getattr(found, attribute)
        except AttributeError:
            where = module_name + ":" + ".".join(attributes.split(".")[:depth]) if depth \
                else module_name
            raise AttributeError(f"cannot resolve {reference!r}: {where!r} has no attribute "
                                 f"{attribute!r}") from None
    return found


def validate_reference(reference: "Any", what: str) -> None:
    """Refuse a malformed reference string at registration (it is resolved later)."""
    if isinstance(reference, str):
        module_name, colon, attributes = reference.partition(":")
        validate_target(module_name)
        if colon and not all(part.isidentifier() for part in attributes.split(".")):
            raise ValueError(f"{what} {reference!r} must look like 'package.module' or "
                             f"'package.module:attribute'")


class Boundary:
    """One declared boundary: where its module comes from when the finder asks."""

    takes_over = False   # True: answer before the other finders (a replaced module)

    def __init__(self, module_name: str) -> None:
        self.module_name = module_name
        self.patch_name = ""

    def spec(self, fullname: str) -> "Any":
        from importlib.machinery import ModuleSpec
        # A package (empty __path__): stand-ins below it can be imported, real
        # submodules cannot, as the module is not there.
        return ModuleSpec(fullname, BoundaryLoader(self), is_package=True)  # type: ignore[arg-type]

    def create(self, fullname: str) -> "Any":
        module = StandInModule(fullname)
        module.__dict__["__lazypatch_stand_in__"] = self.patch_name
        return module

    def owns(self, module: "Any") -> bool:
        """Whether ``module`` is the placeholder this declaration's loader created."""
        try:
            namespace = object.__getattribute__(module, "__dict__")
        except (AttributeError, TypeError):
            return False
        return isinstance(module, StandInModule) and \
            namespace.get("__lazypatch_stand_in__") == self.patch_name


class Replacement(Boundary):
    takes_over = True


class BoundaryLoader:
    """The loader of a boundary's spec: the module has no body; its patch does the work."""

    def __init__(self, boundary: Boundary) -> None:
        self.boundary = boundary

    def __repr__(self) -> str:
        return f"<lazypatch BoundaryLoader of patch {self.boundary.patch_name!r}>"

    def create_module(self, spec: "Any") -> "Any":
        return self.boundary.create(spec.name)

    def exec_module(self, module: "Any") -> None:
        # The boundary's patch ran just before (phase "before"). If it did not provide
        # the module (it failed, or was turned off meanwhile), the import must fail as
        # it would without the boundary rather than hand out an empty module.
        name = self.boundary.module_name
        if not STATE.ledger.is_patched(ITEM, sys.modules, name):
            raise ModuleNotFoundError(
                f"No module named {name!r}: the import boundary of lazypatch patch "
                f"{self.boundary.patch_name!r} did not provide it (see lazypatch.report())",
                name=name)


def _take_over_entry(patch: "Any", name: str, placeholder: "Any", module: "Any") -> None:
    """Provide ``module`` as ``name`` through the ledger, the placeholder's entry first
    removed so that undo leaves the name absent (see the module docstring)."""
    if sys.modules.get(name) is placeholder:
        del sys.modules[name]
    patch.provide_module(name, module)


def _stand_in_function(declaration: Boundary, attributes: "Dict[str, Any]") -> "Callable[..., None]":
    def provide_stand_in(module: "Any", patch: "Any") -> None:
        if not declaration.owns(module):
            patch.skip(f"{declaration.module_name!r} is installed (or provided otherwise): "
                       f"the stand-in is not needed")
        _take_over_entry(patch, declaration.module_name, module, module)
        for key, value in attributes.items():
            patch.setattr(module, key, value)
    provide_stand_in.__doc__ = f"Stand-in for {declaration.module_name}, which is not installed"
    provide_stand_in.lazypatch_boundary = declaration  # type: ignore[attr-defined]
    return provide_stand_in


def _replacement_function(declaration: Boundary, replacement: "Any") -> "Callable[..., None]":
    def provide_replacement(module: "Any", patch: "Any") -> None:
        # Applied late to a module imported for real, the real one is what undo restores.
        placeholder = module if declaration.owns(module) else None
        if placeholder is None:
            patch.note(f"{declaration.module_name!r} was imported before the replacement was "
                       f"declared: modules that imported it earlier keep the real one")
        _take_over_entry(patch, declaration.module_name, placeholder, resolve(replacement))
    described = replacement if isinstance(replacement, str) else repr(replacement)
    provide_replacement.__doc__ = f"import {declaration.module_name} gives {described}"
    provide_replacement.lazypatch_boundary = declaration  # type: ignore[attr-defined]
    return provide_replacement


def _stand_in_declared(module_name: str) -> bool:
    for patch in STATE.catalog.by_target.get(module_name, ()):
        boundary = getattr(patch.function, "lazypatch_boundary", None)
        if boundary is not None and not boundary.takes_over:
            return True
    return False


def _declare_parents(module_name: str, patch_name: str, tags: "List[str]",
                     enabled: bool) -> None:
    """Bare stand-ins for the parents of ``module_name`` that have none declared; each
    acts only if its parent is not installed. Named ``<patch_name>.parent:<parent>`` so
    that selecting ``patch_name`` selects them too."""
    parts = module_name.split(".")
    for depth in range(1, len(parts)):
        parent = ".".join(parts[:depth])
        if parent in sys.modules or _stand_in_declared(parent):
            continue   # imported already, so installed (or provided) and never needed
        declaration = Boundary(parent)
        declaration.patch_name = f"{patch_name}.parent:{parent}"
        register(_stand_in_function(declaration, {}), parent, phase=BEFORE,
                 name=declaration.patch_name, priority=FIRST, tags=tags, enabled=enabled)


def _tags(tags: "Iterable[str]") -> "List[str]":
    chosen = [tags] if isinstance(tags, str) else list(tags)
    return chosen + [BOUNDARY_TAG] if BOUNDARY_TAG not in chosen else chosen


def stand_in(module_name: str, attributes: "Optional[Mapping[str, Any]]" = None, *,
             name: "Optional[str]" = None, tags: "Iterable[str]" = (),
             enabled: bool = True) -> str:
    """Provide an empty module (carrying ``attributes``) for ``module_name`` when nothing
    installed provides it, at any depth, missing parents included; return the patch name."""
    validate_target(module_name)
    if attributes is not None and not all(isinstance(key, str) and key.isidentifier()
                                          for key in attributes):
        raise ValueError(f"stand_in({module_name!r}): attributes must be a mapping of "
                         f"identifier names to values, got {attributes!r}")
    declaration = Boundary(module_name)
    declaration.patch_name = name or f"stand_in:{module_name}"
    chosen_tags = _tags(tags)
    patch_name = register(_stand_in_function(declaration, dict(attributes or {})), module_name,
                          phase=BEFORE, name=declaration.patch_name, priority=FIRST,
                          tags=chosen_tags, enabled=enabled)
    _declare_parents(module_name, patch_name, chosen_tags, enabled)
    existing = sys.modules.get(module_name)
    if existing is not None and enabled:
        # Imported already: the patch says at once that it is not needed ("skipped"),
        # rather than waiting as a before-import patch for a reload.
        apply(STATE.catalog.by_name[patch_name], existing)
    return patch_name


def replace_module(module_name: str, replacement: "Any", *, name: "Optional[str]" = None,
                   tags: "Iterable[str]" = (), enabled: bool = True) -> str:
    """Make ``import module_name`` give ``replacement`` (a module or object, or a
    ``"package.module:attribute"`` string resolved when the import happens) without
    running the real module; return the patch name."""
    validate_target(module_name)
    validate_reference(replacement, f"replace_module({module_name!r}, ...): the replacement")
    declaration = Replacement(module_name)
    declaration.patch_name = name or f"replace_module:{module_name}"
    chosen_tags = _tags(tags)
    function = _replacement_function(declaration, replacement)
    patch_name = register(function, module_name, phase=BEFORE, name=declaration.patch_name,
                          priority=FIRST, tags=chosen_tags, enabled=enabled)
    with STATE.lock:
        STATE.finder.declare_replacement(module_name)
    _declare_parents(module_name, patch_name, chosen_tags, enabled)
    existing = sys.modules.get(module_name)
    if existing is not None and enabled:
        # Imported already: from now on `import module_name` gives the replacement;
        # modules that imported it earlier keep their reference (the report's notes say so).
        apply(STATE.catalog.by_name[patch_name], existing)
    return patch_name


def inject(module_name: str, names: "Mapping[str, Any]", *, name: "Optional[str]" = None,
           priority: int = 0, requires: "Iterable[str]" = (), tags: "Iterable[str]" = (),
           enabled: bool = True) -> str:
    """Set ``names`` on module ``module_name`` right after it is imported (values given
    as ``"package.module:attribute"`` strings are resolved then); return the patch name."""
    validate_target(module_name)
    if not hasattr(names, "items") or not names:
        raise ValueError(f"inject({module_name!r}, ...) takes a non-empty mapping of names "
                         f"to values or 'package.module:attribute' strings, got {names!r}")
    for key, value in names.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise ValueError(f"inject({module_name!r}, ...): {key!r} is not an identifier")
        validate_reference(value, f"inject({module_name!r}, ...): the value of {key!r}")
    chosen = dict(names)

    def inject_names(module: "Any", patch: "Any") -> None:
        for key, value in chosen.items():
            patch.setattr(module, key, resolve(value))
    inject_names.__doc__ = f"Inject {', '.join(chosen)} into {module_name}"
    return register(inject_names, module_name, phase=AFTER,
                    name=name or f"inject:{module_name}", priority=priority,
                    requires=requires, tags=_tags(tags), enabled=enabled)


def notify_module_loaded(module: "Any", name: "Optional[str]" = None) -> "List[str]":
    """Apply the ``when_imported`` patches of ``name`` (default: the module's
    ``__name__``) to a module that was placed into ``sys.modules`` by hand, as an
    import would have; return the names of the patches now applied to it."""
    target = validate_target(name if name is not None else getattr(module, "__name__", None))
    ensure_finder()
    for patch in list(STATE.catalog.by_target.get(target, ())):
        if patch.phase == AFTER:
            apply(patch, module)
    return [patch.name for patch in STATE.catalog.by_target.get(target, ())
            if patch.is_applied_to(module)]


__all__ = ["stand_in", "replace_module", "inject", "notify_module_loaded", "resolve",
           "StandInModule", "StandInError", "BOUNDARY_TAG"]

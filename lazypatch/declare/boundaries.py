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
* ``stand_in("flash_attn", submodules=True)``: the stand-in's ``__path__`` is
  ``[]`` and a meta-path finder of ours answers for its submodules
  (``StandInChildFinder``): importing ``flash_attn.any.depth`` declares, on
  demand, a stand-in of its own for that name (patch ``<name>.sub:<module>``,
  same attributes, same tags, so selecting the name selects it), and the
  finder's boundary spec provides it, so every submodule is recorded and
  undone like the first. That finder is put last on ``sys.meta_path`` by the
  first such stand-in to apply and taken off when the last one is undone.
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

from ..slots import ITEM
from ..state import AFTER, BEFORE, STATE
from .registration import FIRST, ensure_finder, register, validate_target

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from ..watch.importer import BOUNDARY_TAG, boundary_of  # noqa: E402


class StandInError(AttributeError):
    """An attribute was read from a bare stand-in module; the message names the
    patch that provided it and the ways out.

    An ``AttributeError``, so that ``hasattr``/``getattr(m, x, default)``
    feature checks keep answering "no" instead of crashing.
    """


if TYPE_CHECKING:
    from types import ModuleType
else:
    # ``type(sys)`` is ModuleType: importing ``types`` for it would cost activation
    # about 1M instructions when a pack declares stand-ins there.
    ModuleType = type(sys)


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
        return reference.produce() if isinstance(reference, Deferred) else reference
    module_name, colon, attributes = reference.partition(":")
    validate_target(module_name)
    from importlib import import_module
    if not colon:
        module_name, attributes = _module_and_attributes(reference)
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


def _module_and_attributes(dotted: str) -> "Tuple[str, str]":
    """Split ``"pkg.mod.func"`` (DrivingSDK's spelling, no ``:``) where the module ends:
    the longest prefix that imports. Only a module that does not exist moves the split;
    an import error from inside a module that exists propagates."""
    from importlib import import_module
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        candidate = ".".join(parts[:cut])
        try:
            import_module(candidate)
        except ModuleNotFoundError as error:
            # "No module named 'pkg.mod.func'" (or a prefix of it): not a module, cut more
            if error.name is not None and candidate.startswith(error.name) and cut > 1:
                continue
            raise
        return candidate, ".".join(parts[cut:])
    return dotted, ""


def validate_reference(reference: "Any", what: str) -> None:
    """Refuse a malformed reference string at registration (it is resolved later)."""
    if isinstance(reference, str):
        module_name, colon, attributes = reference.partition(":")
        validate_target(module_name)
        if colon and not all(part.isidentifier() for part in attributes.split(".")):
            raise ValueError(f"{what} {reference!r} must look like 'package.module' or "
                             f"'package.module:attribute'")


class Deferred:
    """A value computed by ``produce()`` when the patch applies (``resolve`` calls it):
    for replacements that can only be built once their module exists."""

    def __init__(self, produce: "Callable[[], Any]", description: str = "") -> None:
        if not callable(produce):
            raise TypeError(f"Deferred needs a callable taking no argument, got {produce!r}")
        self.produce = produce
        self.description = description or getattr(produce, "__qualname__", repr(produce))

    def __repr__(self) -> str:
        return f"<value made by {self.description} when applied>"


class Boundary:
    """One declared boundary: where its module comes from when the finder asks."""

    takes_over = False   # True: answer before the other finders (a replaced module)

    def __init__(self, module_name: str) -> None:
        self.module_name = module_name
        self.patch_name = ""
        self.submodules = False          # stand_in(..., submodules=True)
        self.child_finder_holds = 0      # live applications that need the child finder
        self.attributes: "Dict[str, Any]" = {}
        self.tags: "List[str]" = []

    def spec(self, fullname: str) -> "Any":
        from importlib.machinery import ModuleSpec
        # A package (empty __path__): stand-ins below it can be imported, real
        # submodules cannot, as the module is not there.
        return ModuleSpec(fullname, BoundaryLoader(self), is_package=True)  # type: ignore[arg-type]

    def create(self, fullname: str) -> "Any":
        module = StandInModule(fullname)
        module.__dict__["__lazypatch_stand_in__"] = self.patch_name
        # `from stand_in import name` fails in the interpreter's own code, which names
        # the module's location from __file__ ("(unknown location)" without one): this
        # one says what the module is and which patch provides it. (Attribute access
        # goes through __getattr__ and its longer message.)
        module.__dict__["__file__"] = (f"<lazypatch stand-in: {fullname!r} is not installed; "
                                       f"patch {self.patch_name!r} provides it>")
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
        from ..apply.ledger import process_ledger
        if not process_ledger().is_patched(ITEM, sys.modules, name):
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
        # Registered first, so it runs last at undo: after the entry and attributes are gone.
        patch.on_undo(lambda: _say_who_keeps(declaration, module))
        _take_over_entry(patch, declaration.module_name, module, module)
        if declaration.submodules:
            _hold_child_finder(declaration, patch)
            patch.setattr(module, "__path__", [])
        for key, value in attributes.items():
            patch.setattr(module, key, value)
    provide_stand_in.__doc__ = f"Stand-in for {declaration.module_name}, which is not installed"
    provide_stand_in.lazypatch_boundary = declaration  # type: ignore[attr-defined]
    return provide_stand_in


def _say_who_keeps(declaration: Boundary, module: "Any") -> None:
    """After a stand-in's undo, name the module globals still holding it.

    A module imported while the stand-in was in place may have bound it (mmdet3d 1.0's
    ``try: import spconv`` under DrivingSDK's ``skip_import("spconv")``), and a module
    cannot be un-imported: the leftover is said (a warning, and the patch's record's
    ``late_references``), never silent."""
    from ..apply.references import describe_references
    prefix = declaration.module_name + "."
    stand_ins = tuple(value for name, value in list(sys.modules.items())
                      if name == declaration.module_name or name.startswith(prefix))
    holders = describe_references([module], exclude=(module,) + stand_ins)
    if not holders:
        return
    with STATE.lock:
        registered = STATE.catalog.by_name.get(declaration.patch_name)
        if registered is not None:
            registered.late_references = holders
    from ..errors import LatePatchWarning
    from ..notices import notify  # only on this path: see benchmarks/COSTS.md
    notify(f"lazypatch: patch {declaration.patch_name!r} is undone, but these module globals, "
           f"bound while its stand-in for {declaration.module_name!r} was in place, still hold "
           f"the stand-in: {', '.join(holders)}. A module cannot be un-imported: import those "
           f"modules after the undo (or importlib.reload them) to see the real import again.",
           LatePatchWarning, stacklevel=2)


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


def _stand_in_declared(module_name: str, enabled_only: bool = False) -> bool:
    """Whether a stand-in is declared on ``module_name``; with ``enabled_only``, an enabled
    one (a pack's disabled one, the cuda_extensions pack's ``flash_attn.flash_attn_interface``
    say, provides nothing until it is enabled)."""
    for patch in STATE.catalog.by_target.get(module_name, ()):
        boundary = boundary_of(patch.function)
        if boundary is not None and not boundary.takes_over and \
                (patch.enabled or not enabled_only):
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
             enabled: bool = True, submodules: bool = False) -> str:
    """Provide an empty module (carrying ``attributes``) for ``module_name`` when nothing
    installed provides it, at any depth, missing parents included; with ``submodules``,
    any ``module_name.x.y`` imported gets one too. Return the patch name."""
    validate_target(module_name)
    if attributes is not None and not all(isinstance(key, str) and key.isidentifier()
                                          for key in attributes):
        raise ValueError(f"stand_in({module_name!r}): attributes must be a mapping of "
                         f"identifier names to values, got {attributes!r}")
    if not isinstance(submodules, bool):
        raise TypeError(f"stand_in({module_name!r}): submodules must be True or False, "
                        f"got {submodules!r}")
    declaration = Boundary(module_name)
    declaration.patch_name = name or f"stand_in:{module_name}"
    declaration.submodules = submodules
    declaration.attributes = dict(attributes or {})
    chosen_tags = _tags(tags)
    declaration.tags = chosen_tags
    patch_name = register(_stand_in_function(declaration, dict(attributes or {})), module_name,
                          phase=BEFORE, name=declaration.patch_name, priority=FIRST,
                          tags=chosen_tags, enabled=enabled)
    _declare_parents(module_name, patch_name, chosen_tags, enabled)
    existing = sys.modules.get(module_name)
    if existing is not None and enabled:
        # Imported already: the patch says at once that it is not needed ("skipped"),
        # rather than waiting as a before-import patch for a reload.
        from ..apply.application import apply  # loaded on first need: activation stays lean
        apply(STATE.catalog.by_name[patch_name], existing)
    return patch_name


class StandInChildFinder:
    """The meta-path finder of the submodules of stand-ins that provide them, on
    ``sys.meta_path`` (last) while one lives: for ``parent.child`` whose ``parent`` is
    such a stand-in, declares a stand-in for the child (once) and returns the spec the
    engine's finder makes. The stand-in's ``__path__`` stays ``[]``, a package with no
    folder (as DrivingSDK's stubs have it): no path entry finder is ever asked."""

    @staticmethod
    def find_spec(fullname: str, path: "Any" = None, target: "Any" = None) -> "Any":
        parent = fullname.rpartition(".")[0]
        declaration = _submodule_declaration(parent) if parent else None
        if declaration is None or not _provided_by(declaration, sys.modules.get(parent)):
            return None
        name = f"{declaration.patch_name}.sub:{fullname}"
        if name not in STATE.catalog.by_name and not _stand_in_declared(fullname, True):
            stand_in(fullname, declaration.attributes, name=name, tags=declaration.tags,
                     submodules=True)
        finder = STATE.finder
        return finder._boundary_spec(fullname, takes_over=False) if finder is not None else None

    @staticmethod
    def invalidate_caches() -> None:
        """Nothing cached: the declarations are read on each import."""


_CHILD_FINDER = StandInChildFinder()


def _provided_by(declaration: Boundary, module: "Any") -> bool:
    """Whether ``module`` is the stand-in ``declaration`` provided (its class may have been
    given as an attribute: DrivingSDK's stubs are ``StubModule``)."""
    try:
        namespace = object.__getattribute__(module, "__dict__")
    except (AttributeError, TypeError):
        return False
    return namespace.get("__lazypatch_stand_in__") == declaration.patch_name


def _submodule_declaration(module_name: str) -> "Optional[Boundary]":
    """The enabled stand-in declaration of ``module_name`` that provides submodules."""
    for patch in STATE.catalog.by_target.get(module_name, ()):
        boundary = boundary_of(patch.function)
        if boundary is not None and boundary.submodules and patch.enabled and \
                patch.live:
            return boundary
    return None


def _hold_child_finder(declaration: Boundary, patch: "Any") -> None:
    """Have the child finder on ``sys.meta_path`` while this application lives; its undo
    lets go (the finder leaves with the last stand-in that needs it)."""
    with STATE.lock:
        declaration.child_finder_holds += 1
        if not any(finder is _CHILD_FINDER for finder in sys.meta_path):
            sys.meta_path.append(_CHILD_FINDER)

    def release_child_finder() -> None:
        _release_child_finder(declaration)
    patch.on_undo(release_child_finder)


def _release_child_finder(declaration: Boundary) -> None:
    """Take the child finder off once no stand-in with submodules is live, so undo
    leaves ``sys.meta_path`` as it found it."""
    with STATE.lock:
        declaration.child_finder_holds -= 1
        if any(boundary.child_finder_holds for boundary in _submodule_declarations()):
            return
        while any(finder is _CHILD_FINDER for finder in sys.meta_path):
            sys.meta_path.remove(_CHILD_FINDER)


def _submodule_declarations() -> "List[Boundary]":
    """Every registered stand-in declaration that provides submodules."""
    found = []
    for patches in list(STATE.catalog.by_target.values()):
        for patch in patches:
            boundary = boundary_of(patch.function)
            if boundary is not None and boundary.submodules:
                found.append(boundary)
    return found


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
        from ..apply.application import apply  # loaded on first need: activation stays lean
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
            from ..apply.application import apply
            apply(patch, module)
    return [patch.name for patch in STATE.catalog.by_target.get(target, ())
            if patch.is_applied_to(module)]


__all__ = ["stand_in", "replace_module", "inject", "notify_module_loaded", "resolve",
           "StandInModule", "StandInError", "BOUNDARY_TAG", "Deferred"]

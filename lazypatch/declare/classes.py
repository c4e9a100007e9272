"""Declarative class patches: a class whose members replace another class's.

::

    @lazypatch.patches("transformers.cache_utils.DynamicCache")
    class patched_DynamicCache:
        def update(self, ...): ...            # plain method
        @classmethod
        def from_legacy_cache(cls, ...): ...  # stays a classmethod on the target
        @lazypatch.declare.classes.requires("torch<2.6")
        def crop(self, ...): ...              # replaced only on old torch

When module ``transformers.cache_utils`` is imported, every member of the
decorating class's *own* ``__dict__`` is set on the target class through
``patch.setattr``. Members are taken raw from ``__dict__`` (never through
``getattr``, which would turn a classmethod into a bound method), and the
engine's ledger records the target's own previous value, so undo is exact:
a classmethod comes back as the same classmethod object, and a member the
target only inherited is deleted again instead of being left as a shadow
copy on the subclass (the defect of onnx-diagnostic's ``getattr`` undo).

As in onnx-diagnostic, the decorating class gets ``_PATCHED_CLASS_`` (the
target's dotted name until it is imported, then the class itself) and
``_PATCHES_`` (the members it replaces where the conditions hold); a class
that defines ``_PATCHES_`` itself limits the members to that list.
``class_patches()`` lists every declaration and what it replaced.

Limitation (Python's, not lazypatch's): a zero-argument ``super()`` inside
a patch method refers to the decorating class; write ``super(Target, self)``.
"""

from __future__ import annotations

from ..decide.requirements import parse_requirements
from ..state import STATE
from .registration import register, validate_target

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, TypeVar

    Member = TypeVar("Member")

# Entries every class body gets from Python itself: never members to copy.
_CLASS_METADATA = frozenset({
    "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__",
    "__annotations__", "__firstlineno__", "__static_attributes__", "__orig_bases__",
    "__parameters__", "__slots__", "__type_params__", "_PATCHES_", "_PATCHED_CLASS_",
})

# id(member) -> (member, requirements): what @requires attached to a member.
# Keyed by id because properties and staticmethods cannot carry attributes;
# the member is kept alive by the entry itself, so the id cannot be reused.
# It is metadata of the user's class body, like an attribute the decorator
# would have set, not engine state: declarations themselves live in STATE.
_MEMBER_REQUIREMENTS: "Dict[int, Tuple[Any, tuple]]" = {}


def requires(*conditions: str) -> "Callable[[Member], Member]":
    """Member decorator: replace the target's member only where every condition holds.

    Conditions are PEP 508 strings on installed distributions (``"torch>=2.1"``),
    checked without importing anything; a member whose conditions fail is
    skipped and listed with the reason by ``class_patches()``. Works above or
    below ``@classmethod``, ``@staticmethod`` and ``@property``.
    """
    if len(conditions) == 1 and not isinstance(conditions[0], str):
        conditions = tuple(conditions[0])   # requires(["a>=1", "b<2"])
    parsed = parse_requirements(conditions)   # a typo fails here, at the decorator line

    def mark(member: "Member") -> "Member":
        _, earlier = _MEMBER_REQUIREMENTS.get(id(member), (member, ()))
        _MEMBER_REQUIREMENTS[id(member)] = (member, earlier + parsed)
        return member
    return mark


def member_requirements(member: "Any") -> tuple:
    """The parsed conditions attached to a member (through any classmethod/staticmethod)."""
    found: tuple = ()
    seen = set()
    while member is not None and id(member) not in seen:
        seen.add(id(member))
        entry = _MEMBER_REQUIREMENTS.get(id(member))
        if entry is not None and entry[0] is member:
            found += entry[1]
        # @requires may sit below @classmethod/@staticmethod/@property: look inside.
        member = getattr(member, "__func__", None) or getattr(member, "fget", None)
    return found


def unmet_reasons(member: "Any") -> "List[str]":
    """Why a member's conditions fail now (empty when it should be applied)."""
    reasons = []
    for requirement in member_requirements(member):
        reason = requirement.unmet_reason()
        if reason is not None:
            reasons.append(reason)
    return reasons


def split_target(target: str) -> "Tuple[str, List[str]]":
    """Split "pkg.mod.Outer.Inner" into the module name and the attribute path.

    ``"pkg.mod:Outer.Inner"`` says where the module ends explicitly. Without a
    colon the class path starts at the first component that begins with an
    upper-case letter (Python's class naming convention); when none does, the
    last component is the class.
    """
    if not isinstance(target, str) or not target.strip():
        raise TypeError(f"class patch target must be a string such as 'pkg.mod.ClassName', "
                        f"got {target!r}")
    if ":" in target:
        module, _, path = target.partition(":")
        attributes = path.split(".")
    else:
        parts = target.split(".")
        first_class = next((index for index, part in enumerate(parts)
                            if index > 0 and part[:1].isupper()), len(parts) - 1)
        module, attributes = ".".join(parts[:first_class]), parts[first_class:]
    validate_target(module)
    if not module or not all(part.isidentifier() for part in attributes):
        raise ValueError(f"class patch target {target!r} must name a class inside a module, "
                         f"such as 'pkg.mod.ClassName' or 'pkg.mod:Outer.Inner'")
    return module, attributes


class ClassPatch:
    """One ``@patches`` declaration and what its last application did."""

    def __init__(self, carrier: type, target: str, module: str, path: "List[str]",
                 members: "Dict[str, Any]", name: str) -> None:
        self.carrier = carrier
        self.target = target
        self.module = module
        self.path = path
        self.members = members
        self.name = name
        self.replaced: "List[str]" = []
        self.skipped: "Dict[str, str]" = {}

    def resolve(self, module: "Any") -> type:
        """Walk the attribute path from the imported module to the target class."""
        owner = module
        for depth, attribute in enumerate(self.path):
            try:
                owner = getattr(owner, attribute)
            except AttributeError:
                where = ".".join([self.module] + self.path[:depth])
                raise AttributeError(f"class patch {self.name!r}: {where!r} has no attribute "
                                     f"{attribute!r}, so {self.target!r} cannot be patched "
                                     f"(renamed or moved in this version?)") from None
        if not isinstance(owner, type):
            raise TypeError(f"class patch {self.name!r}: {self.target!r} is "
                            f"{type(owner).__name__}, not a class")
        return owner

    def apply(self, module: "Any", patch: "Any") -> None:
        """The patch function: replace each member whose conditions hold."""
        target_class = self.resolve(module)
        replaced, skipped = [], {}
        for member_name, member in self.members.items():
            reasons = unmet_reasons(member)
            if reasons:
                skipped[member_name] = "; ".join(reasons)
                continue
            patch.setattr(target_class, member_name, member)
            replaced.append(member_name)
        self.replaced, self.skipped = replaced, skipped
        type.__setattr__(self.carrier, "_PATCHED_CLASS_", target_class)
        type.__setattr__(self.carrier, "_PATCHES_", list(replaced))

    def describe(self) -> "Dict[str, Any]":
        """A plain-dict summary for ``class_patches()``."""
        registered = STATE.catalog.by_name.get(self.name)
        return {
            "name": self.name, "target": self.target, "module": self.module,
            "patch_class": f"{self.carrier.__module__}.{self.carrier.__qualname__}",
            "members": list(self.members), "replaced": list(self.replaced),
            "skipped": dict(self.skipped),
            "status": registered.status if registered is not None else "unregistered",
        }


def _patch_function(declaration: ClassPatch) -> "Callable[[Any, Any], None]":
    # A plain function with its own name and docstring, so that the report
    # describes the class patch rather than a generic bound method.
    def apply_class_patch(module: "Any", patch: "Any") -> None:
        declaration.apply(module, patch)
    apply_class_patch.__doc__ = f"Replace members of {declaration.target}"
    return apply_class_patch


def _collect_members(carrier: type) -> "Dict[str, Any]":
    namespace = carrier.__dict__
    chosen = namespace.get("_PATCHES_")
    if chosen is not None:
        if isinstance(chosen, str) or not all(isinstance(item, str) for item in chosen):
            raise TypeError(f"{carrier.__qualname__}._PATCHES_ must be a list of member "
                            f"names, got {chosen!r}")
        missing = [item for item in chosen if item not in namespace]
        if missing:
            raise ValueError(f"{carrier.__qualname__}._PATCHES_ names {missing}, which the "
                             f"class does not define")
        return {item: namespace[item] for item in chosen}
    return {key: value for key, value in namespace.items() if key not in _CLASS_METADATA}


def patches(target: str, *, name: "Optional[str]" = None, priority: int = 0,
            requires: "Iterable[str]" = (), tags: "Iterable[str]" = (),
            enabled: bool = True) -> "Callable[[type], type]":
    """Class decorator: the decorated class's own members replace ``target``'s.

    ``target`` is "pkg.mod.ClassName" (nested classes: "pkg.mod.Outer.Inner",
    or "pkg.mod:Outer.Inner" to say where the module ends). The replacement
    happens when ``pkg.mod`` is imported (at once if it already is), through
    one lazypatch patch named ``name`` (default: the decorating class's
    qualified name), with the usual ``priority``, ``requires``, ``tags`` and
    ``enabled``. Returns the class unchanged apart from ``_PATCHES_`` and
    ``_PATCHED_CLASS_``.
    """
    module, path = split_target(target)
    requirement_texts = (requires,) if isinstance(requires, str) else tuple(requires)

    def declare(carrier: type) -> type:
        if not isinstance(carrier, type):
            raise TypeError(f"@lazypatch.patches({target!r}) decorates a class whose members "
                            f"replace the target's; got {carrier!r}")
        members = _collect_members(carrier)
        if not members:
            raise ValueError(f"@lazypatch.patches({target!r}) on {carrier.__qualname__}: the "
                             f"class defines no members to replace")
        patch_name = name or f"{carrier.__module__}.{carrier.__qualname__}"
        declaration = ClassPatch(carrier, target, module, path, members, patch_name)
        type.__setattr__(carrier, "_PATCHED_CLASS_", target)
        type.__setattr__(carrier, "_PATCHES_", [
            member_name for member_name, member in members.items() if not unmet_reasons(member)])
        with STATE.lock:
            STATE.class_declarations.append(declaration)
        try:   # applies at once (and refines _PATCHES_) when the target is already imported
            register(_patch_function(declaration), module, name=patch_name, priority=priority,
                     requires=requirement_texts, tags=tags, enabled=enabled)
        except BaseException:
            with STATE.lock:
                STATE.class_declarations.remove(declaration)
            raise
        return carrier
    return declare


def class_patches() -> "List[Dict[str, Any]]":
    """Every declared class patch: name, target, members, replaced, skipped (with
    reasons) and the patch's status, in declaration order."""
    with STATE.lock:
        declarations = list(STATE.class_declarations)
    return [declaration.describe() for declaration in declarations]


__all__ = ["patches", "requires", "class_patches", "split_target", "ClassPatch"]

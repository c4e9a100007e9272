"""Reading and writing one slot (an attribute or a mapping item) exactly as it is stored.

Every other part of the engine that looks at user objects goes through
these few functions, because the obvious ways are wrong:

* ``getattr(cls, "m")`` on a classmethod returns a *bound method*, and on an
  inherited attribute returns the base class's object; writing either back
  would change the class. The owner's own ``__dict__`` gives the raw
  descriptor, or "absent" (``MISSING``), which undo turns back into absent.
* ``object.__getattribute__`` reads a module's ``__dict__`` without calling a
  lazy module's ``__getattribute__`` (``importlib.util._LazyModule``), which
  would run the module's body just because we looked at it.
"""

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Optional

ATTRIBUTE = "attribute"
ITEM = "item"


class _Missing:
    """The value of a slot that does not exist (distinct from ``None``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<missing>"

    def __bool__(self) -> bool:
        return False


MISSING: "Any" = _Missing()


def own_dict(owner: "Any") -> "Optional[Any]":
    """The owner's own ``__dict__`` (a dict or mappingproxy), or None; never loads a lazy module."""
    try:
        return object.__getattribute__(owner, "__dict__")
    except (AttributeError, TypeError):
        return None


def is_unloaded_lazy_module(module: "Any") -> bool:
    """Whether ``module`` is an ``importlib.util.LazyLoader`` module whose body has not run.

    Nothing can have made one unless ``importlib.util`` is loaded, so this
    never imports it.
    """
    util = sys.modules.get("importlib.util")
    lazy_class = getattr(util, "_LazyModule", None) if util is not None else None
    return lazy_class is not None and type(module) is lazy_class


def read_slot(kind: str, owner: "Any", key: "Any") -> "Any":
    """The raw value stored in a slot, or MISSING when the owner has none of its own."""
    if kind == ITEM:
        try:
            return owner[key]
        except KeyError:
            return MISSING
    namespace = own_dict(owner)
    if namespace is not None:
        return namespace.get(key, MISSING)
    # Objects without a __dict__ (slots, C types): the value lives in a slot
    # descriptor on the type, so getattr is the only way to read it.
    return getattr(owner, key, MISSING)


def write_slot(kind: str, owner: "Any", key: "Any", value: "Any") -> None:
    """Store ``value`` in a slot, or remove the slot's own value for MISSING."""
    if kind == ITEM:
        if value is not MISSING:
            owner[key] = value
        elif key in owner:
            del owner[key]
        return
    if value is MISSING:
        namespace = own_dict(owner)
        if namespace is None or key in namespace:
            delattr(owner, key)
    else:
        setattr(owner, key, value)


def describe(owner: "Any") -> str:
    """A short human name for an owner object, for reports."""
    if owner is sys.modules:
        return "sys.modules"
    name = getattr(owner, "__name__", None) if isinstance(owner, type) or \
        type(owner).__name__ in ("module", "_LazyModule") else None
    if isinstance(name, str):
        module = getattr(owner, "__module__", None)
        if isinstance(owner, type) and module and module != "builtins":
            return f"{module}.{getattr(owner, '__qualname__', name)}"
        return name
    return f"<{type(owner).__name__} at {id(owner):#x}>"


def describe_exception(error: "BaseException") -> str:
    """``"Type: message"`` for any exception, even one whose ``__str__`` raises.

    A patch may raise anything; the report and the warning must still be
    written, so a broken ``__str__`` becomes a note instead of a second failure.
    """
    kind = type(error).__name__
    try:
        text = str(error)
    except Exception as broken:
        text = f"<str() of the exception raised {type(broken).__name__}>"
    return f"{kind}: {text}" if text else kind

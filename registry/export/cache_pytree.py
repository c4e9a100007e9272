"""Pytree registration of transformers' cache classes, written through the ledger.

torch.export flattens its inputs and outputs with ``torch.utils._pytree``; a
``DynamicCache`` is not a node there, so export fails with "Unsupported input
type". Instead of calling ``register_pytree_node`` (whose effect cannot be taken
back: it also queues a C++ pytree registration), every registry entry that
function would write is set with ``patch.setitem``: the ledger restores each
entry to exactly its previous value at undo, including a node registered before
the scope (it comes back as the very same ``NodeDef`` object).

Flattening is generic over the cache's own state, so any cache class of the
installed version round-trips: the children are the attributes holding tensors,
layers or nested caches; every other attribute travels in the context.
Imported only when ``transformers.cache_utils`` is imported.
"""

from __future__ import annotations

from typing import Any, List, Tuple

import torch
import torch.fx._pytree as fx_pytree
import torch.utils._pytree as pytree

# Integer state that is a tensor's length while the cache has not dropped anything:
# DynamicSlidingWindowLayer.cumulative_length (transformers 5.x) before the window
# is full, DynamicCache._seen_tokens (4.x) after ``update``. Kept as a plain number
# in the context, it would be the example's length: a constant baked into the masks
# ("specialized to a constant", gemma2), or a tree spec that no input of another
# cache length matches (4.48). Recorded as "equal to that length" instead, unflatten
# reads it from the (symbolic) tensor. attribute -> (tensor attribute, index in it
# when it is a list of tensors or None, dimension).
DERIVED_LENGTHS = {"cumulative_length": ("keys", None, -2),
                   "_seen_tokens": ("key_cache", 0, -2)}


class _LengthOf(tuple):
    """Context marker: this attribute equals the length of (tensor attribute, index, dim)."""


def _length_source(state: Any, source: Tuple[str, Any, int]) -> Any:
    """The tensor a derived length is read from, or None when the state has none."""
    holder, index, _ = source
    tensor = state.get(holder)
    if index is not None:
        tensor = tensor[index] if isinstance(tensor, (list, tuple)) and len(tensor) > index \
            else None
    return tensor if isinstance(tensor, torch.Tensor) and tensor.dim() else None


def _is_child(value: Any, node_types: Tuple[type, ...]) -> bool:
    """Whether an attribute's value belongs to the flattened children."""
    if isinstance(value, torch.Tensor) or isinstance(value, node_types):
        return True
    if isinstance(value, (list, tuple)) and value:
        return all(isinstance(item, torch.Tensor) or isinstance(item, node_types)
                   for item in value)
    return False


def _derived(state: Any, key: str, value: Any) -> Any:
    """``value``, or a ``_LengthOf`` marker when it is the length of a tensor attribute."""
    source = DERIVED_LENGTHS.get(key)
    if source is None or not isinstance(value, (int, torch.SymInt)) or isinstance(value, bool):
        return value
    tensor = _length_source(state, source)
    if tensor is None:
        return value
    length = tensor.shape[source[2]]
    if isinstance(value, torch.SymInt) or isinstance(length, torch.SymInt):
        # while tracing: compare without adding a guard on the symbolic sizes
        from torch.fx.experimental.symbolic_shapes import statically_known_true
        same = statically_known_true(value == length)
    else:
        same = value == length
    return _LengthOf(source) if same else value


def make_flatteners(cls: type, node_types: Tuple[type, ...]) -> Tuple[Any, Any, Any]:
    """flatten, unflatten and flatten-with-keys functions for instances of ``cls``."""

    def split(obj: Any) -> Tuple[List[str], List[Any], Tuple[Tuple[str, Any], ...]]:
        state = vars(obj)
        names = sorted(key for key, value in state.items() if _is_child(value, node_types))
        rest = tuple(sorted((key, _derived(state, key, value)) for key, value in state.items()
                            if key not in names))
        return names, [state[name] for name in names], rest

    def flatten(obj: Any) -> Tuple[List[Any], Any]:
        names, children, rest = split(obj)
        kinds = tuple(type(state).__name__ if isinstance(state, (list, tuple)) else ""
                      for state in children)
        return children, (tuple(names), kinds, rest)

    def flatten_with_keys(obj: Any) -> Tuple[List[Tuple[Any, Any]], Any]:
        children, context = flatten(obj)
        return [(pytree.GetAttrKey(name), child)
                for name, child in zip(context[0], children)], context

    def unflatten(children: Any, context: Any) -> Any:
        names, kinds, rest = context
        obj = object.__new__(cls)
        state = vars(obj)
        for key, value in rest:
            # mutable containers (a dict of flags) must not be shared between copies
            state[key] = value.copy() if isinstance(value, (dict, list, set)) else value
        for name, kind, child in zip(names, kinds, children):
            state[name] = tuple(child) if kind == "tuple" else \
                list(child) if kind == "list" else child
        for key, value in rest:
            if isinstance(value, _LengthOf):
                state[key] = _length_source(state, value).shape[value[2]]
        return obj

    return flatten, unflatten, flatten_with_keys


def node_bases(module: Any) -> Tuple[type, ...]:
    """The base classes of caches and cache layers in the installed ``transformers.cache_utils``."""
    return tuple(getattr(module, name) for name in ("Cache", "CacheLayerMixin")
                 if isinstance(getattr(module, name, None), type))


def node_classes(module: Any) -> List[type]:
    """The cache and cache-layer classes: those ``module`` defines and every subclass of
    them that exists now (a user's ``class LoggingCache(DynamicCache)``), bases first."""
    bases = node_bases(module)
    found: List[type] = []
    pending = [value for value in vars(module).values()
               if isinstance(value, type) and value.__module__ == module.__name__ and bases
               and issubclass(value, bases)]
    while pending:
        cls = pending.pop(0)
        if cls not in found:
            found.append(cls)
            pending.extend(type.__subclasses__(cls))
    return found


def register(module: Any, patch: Any) -> None:
    """Register every cache class of ``module``, and every subclass, now or defined while
    the patch is applied, as a pytree node, through ``patch``."""
    classes = node_classes(module)
    if not classes:
        patch.skip(f"{module.__name__} defines no Cache classes this patch knows "
                   f"(no Cache/CacheLayerMixin base)")
    node_types = node_bases(module)
    for cls in classes:
        register_one(cls, node_types, patch)
    for base in node_bases(module):
        if "__init_subclass__" not in vars(base):
            # Only where the hook replaces nothing: replacing a class's own hook would
            # make every (late) application search all modules for stale references to
            # it. A subclass of the others is registered if it exists when applied.
            register_future_subclasses(base, node_types, patch)
    patch.note(f"{len(classes)} cache classes registered as pytree nodes: "
               + ", ".join(cls.__name__ for cls in classes))


def register_one(cls: type, node_types: Tuple[type, ...], patch: Any) -> None:
    """Make ``cls`` a pytree node (torch.utils._pytree and torch.fx._pytree), through ``patch``."""
    flatten, unflatten, flatten_with_keys = make_flatteners(cls, node_types)
    flatten.lazypatch_cache_node = True   # type: ignore[attr-defined]  # program_calls.py
    name = f"{cls.__module__}.{cls.__qualname__}"
    patch.setitem(pytree.SUPPORTED_NODES, cls,
                  pytree.NodeDef(cls, flatten, unflatten, flatten_with_keys))
    from .context_codec import codec
    dump, load = codec(cls, _LengthOf)
    patch.setitem(pytree.SUPPORTED_SERIALIZED_TYPES, cls,
                  pytree._SerializeNodeDef(cls, name, dump, load))
    patch.setitem(pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE, name, cls)

    def flatten_spec(obj: Any, spec: Any, flatten: Any = flatten) -> List[Any]:
        return flatten(obj)[0]
    patch.setitem(fx_pytree.SUPPORTED_NODES, cls, flatten_spec)
    patch.setitem(fx_pytree.SUPPORTED_NODES_EXACT_MATCH, cls, None)


def register_future_subclasses(base: type, node_types: Tuple[type, ...], patch: Any) -> None:
    """While the patch is applied, a class defined as a subclass of ``base`` becomes a
    node as it is created (pytree looks nodes up by exact type, never by base)."""
    def __init_subclass__(cls: type, **kwargs: Any) -> None:
        super(base, cls).__init_subclass__(**kwargs)   # type: ignore[misc]
        if pytree.SUPPORTED_NODES.get(base) is not None:   # the patch is still applied
            register_one(cls, node_types, patch)

    patch.setattr(base, "__init_subclass__", classmethod(__init_subclass__))


def children_shapes(value: Any, shape_of: Any) -> Any:
    """The ``dynamic_shapes`` entry torch.export expects for ``value``: a registered
    node or a cache (registered or not: the scope may not have begun yet) becomes the
    list of its children's entries, a tensor ``shape_of(tensor)``."""
    if isinstance(value, torch.Tensor):
        return shape_of(value)
    node = pytree.SUPPORTED_NODES.get(type(value))
    flatten = node.flatten_fn if node is not None else _cache_flatten(value)
    if flatten is None:
        return None
    children, _ = flatten(value)
    shapes = [children_shapes(child, shape_of) for child in children]
    return shapes if type(value) is list or type(value) not in (tuple, dict) else \
        tuple(shapes) if type(value) is tuple else dict(zip(value, shapes))


def _cache_flatten(value: Any) -> Any:
    """The flatten function this module registers for ``value``'s class, when it is a
    cache or cache layer; else None."""
    import sys
    module = sys.modules.get("transformers.cache_utils")
    bases = node_bases(module) if module is not None else ()
    if not bases or not isinstance(value, bases):
        return None
    return make_flatteners(type(value), bases)[0]

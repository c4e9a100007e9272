"""A cache node's pytree context as JSON, for ``torch.export.save`` / ``load``.

torch serialises a program's call spec with ``json``; a cache's context holds the
cache's non-tensor state (a device, flags, a layer class, the ``nn.Module`` bookkeeping
of transformers 4.x caches), which ``json`` cannot write. Each value becomes a tagged
JSON value and comes back as the same type, so that a loaded program's spec equals the
spec of a freshly flattened cache. A value of another kind makes saving fail, naming
the attribute. Imported when ``transformers.cache_utils`` is.
"""

from __future__ import annotations

import importlib
import json
from collections import OrderedDict
from typing import Any, Callable

import torch


def encode(value: Any, where: str, marker: type) -> Any:
    """``value`` as a tagged JSON-able value; ``marker`` is the derived-length tuple type."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, marker):
        return {"length_of": [encode(item, where, marker) for item in value]}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).rsplit(".", 1)[-1]}
    if isinstance(value, type):
        return {"class": f"{value.__module__}:{value.__qualname__}"}
    for tag, kind in (("tuple", tuple), ("list", list)):
        if type(value) is kind:
            return {tag: [encode(item, where, marker) for item in value]}
    if type(value) in (set, frozenset):   # nn.Module's _non_persistent_buffers_set (4.x)
        return {type(value).__name__: [encode(item, where, marker)
                                       for item in sorted(value, key=repr)]}
    if type(value) in (dict, OrderedDict):
        tag = "dict" if type(value) is dict else "ordered_dict"
        return {tag: [[encode(key, where, marker), encode(item, where, marker)]
                      for key, item in value.items()]}
    raise TypeError(f"cannot save this cache's pytree context: {where} holds a "
                    f"{type(value).__name__}, which lazypatch's export pack does not "
                    f"know how to write")


def decode(value: Any, marker: type) -> Any:
    """The value ``encode`` wrote."""
    if not isinstance(value, dict):
        return value
    (tag, payload), = value.items()
    if tag == "length_of":
        return marker(decode(item, marker) for item in payload)
    if tag == "device":
        return torch.device(payload)
    if tag == "dtype":
        return getattr(torch, payload)
    if tag == "class":
        module_name, qualified = payload.split(":")
        found: Any = importlib.import_module(module_name)
        for part in qualified.split("."):
            found = getattr(found, part)
        return found
    if tag in ("set", "frozenset"):
        members = (decode(item, marker) for item in payload)
        return set(members) if tag == "set" else frozenset(members)
    if tag in ("tuple", "list"):
        items = [decode(item, marker) for item in payload]
        return tuple(items) if tag == "tuple" else items
    pairs = [(decode(key, marker), decode(item, marker)) for key, item in payload]
    return dict(pairs) if tag == "dict" else OrderedDict(pairs)


def codec(cls: type, marker: type) -> "tuple[Callable[[Any], str], Callable[[str], Any]]":
    """to_dumpable_context and from_dumpable_context for the nodes of ``cls``."""
    def dump(context: Any) -> str:
        names, kinds, rest = context
        return json.dumps([list(names), list(kinds),
                           [[key, encode(value, f"{cls.__name__}.{key}", marker)]
                            for key, value in rest]])

    def load(text: str) -> Any:
        names, kinds, rest = json.loads(text)
        return (tuple(names), tuple(kinds),
                tuple((key, decode(value, marker)) for key, value in rest))
    return dump, load

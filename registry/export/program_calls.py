"""Programs exported inside the scope keep working after it.

A program whose inputs or outputs hold a cache (``DynamicCache``...) flattens them
with ``torch.utils._pytree`` at every call of ``program.module()``; after the scope the
cache classes are no pytree nodes any more and the call fails with "Trying to flatten
user inputs with exported input tree spec". Leaving them registered would change
pytree for the whole process. Instead, such a program (made while this patch is
applied) gets a ``module()`` whose graph modules hold ``patched("export.cache_pytree")``
for the duration of each call: the registration exists exactly while the program
runs. Imported when ``torch.export.exported_program`` is.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Iterator, List

import torch.utils._pytree as pytree

import lazypatch

CACHE_PATCH = "export.cache_pytree"


def install(module: Any, patch: Any) -> None:
    """Make every ExportedProgram built while ``patch`` is applied carry what it needs."""
    program_class = module.ExportedProgram
    original_init = program_class.__dict__["__init__"]

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        keep_working(self)

    patch.setattr(program_class, "__init__", __init__)


def _spec_types(spec: Any) -> Iterator[type]:
    """Every node type of a TreeSpec, depth first."""
    pending = [spec]
    while pending:
        current = pending.pop()
        if current is None:
            continue
        yield current.type
        children = getattr(current, "children", None)   # children_specs before torch 2.10
        pending.extend(children() if callable(children) else current.children_specs)


def cache_types(program: Any) -> List[type]:
    """The cache classes (registered by export.cache_pytree) in a program's call spec."""
    try:
        specs = [program.call_spec.in_spec, program.call_spec.out_spec]
    except Exception:   # no module call graph: nothing to flatten (never fail a construction)
        return []
    found = []
    for spec in specs:
        for node_type in _spec_types(spec):
            node = pytree.SUPPORTED_NODES.get(node_type)
            if node is not None and getattr(node.flatten_fn, "lazypatch_cache_node", False) \
                    and node_type not in found:
                found.append(node_type)
    return found


def keep_working(program: Any) -> None:
    """Give ``program`` (if it takes or returns caches) a ``module()`` whose modules
    register the cache classes during each call."""
    if cache_types(program):
        # an instance attribute: the class stays untouched, and copy.deepcopy of the
        # program carries it (a partial's arguments are copied with the program)
        program.module = functools.partial(module_with_cache_nodes, program)


def module_with_cache_nodes(program: Any, *args: Any, **kwargs: Any) -> Any:
    """``program.module(...)``, whose calls hold ``patched("export.cache_pytree")``."""
    with lazypatch.patched(CACHE_PATCH):   # building it flattens the call spec too
        graph_module = type(program).module(program, *args, **kwargs)
    hold_nodes_during_calls(graph_module)
    return graph_module


def hold_nodes_during_calls(graph_module: Any) -> None:
    """Enter the cache registration before the module's input check and flattening,
    leave it after its outputs are built, also when the call raises."""
    scopes = threading.local()

    def enter(module: Any, args: Any, kwargs: Any) -> None:
        scope = lazypatch.patched(CACHE_PATCH)
        scope.__enter__()
        stack = getattr(scopes, "stack", None)
        if stack is None:
            stack = scopes.stack = []
        stack.append(scope)

    def leave(module: Any, args: Any, output: Any) -> None:
        stack = getattr(scopes, "stack", None)
        if stack:
            stack.pop().__exit__(None, None, None)

    graph_module.register_forward_pre_hook(enter, prepend=True, with_kwargs=True)
    graph_module.register_forward_hook(leave, always_call=True)

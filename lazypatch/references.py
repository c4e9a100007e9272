"""Finding other references to an object that a patch replaced.

``from torch.nn.functional import relu`` copies the function into the
importing module's globals; patching ``torch.nn.functional.relu`` afterwards
does not reach that copy (the DrivingSDK patcher's "re-exports keep the old
object" defect). gevent diagnoses this with ``gc.get_referrers``; we only
need module globals, so we walk ``sys.modules`` and compare identities.

The walk must never load a lazy module: it reads each module's ``__dict__``
with ``object.__getattribute__`` (bypassing ``_LazyModule.__getattribute__``)
and skips modules that are still lazy, whose dict holds only import
metadata. Module-level ``__getattr__`` (PEP 562, ``lazy_loader.attach``) is
never called because we never look up a missing name.
"""

from __future__ import annotations

import sys

from .context import is_unloaded_lazy_module, own_dict

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs ~40M instructions to import; keep it off the activation path
    from typing import Any, Dict, Iterator, List, Tuple


def _module_globals(exclude: Tuple[Any, ...]) -> Iterator[Tuple[str, Any, str, Any]]:
    """(module name, module, global name, value) for every loaded module's globals."""
    excluded = {id(item) for item in exclude}
    for module_name, module in list(sys.modules.items()):
        if module is None or id(module) in excluded or is_unloaded_lazy_module(module) \
                or module_name == "lazypatch" or module_name.startswith("lazypatch."):
            # lazypatch's own modules (packs included) hold originals on purpose,
            # to call them: rebinding those would make a wrapper call itself.
            continue
        namespace = own_dict(module)
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            yield module_name, module, name, value


def find_module_references(target: Any, exclude: Tuple[Any, ...] = ()) -> Iterator[Tuple[Any, str]]:
    """Yield (module, global name) for each module global that *is* ``target``."""
    for _, module, name, value in _module_globals(exclude):
        if value is target:
            yield module, name


def find_holders(targets: List[Any], exclude: Tuple[Any, ...] = ()) -> Dict[int, List[Tuple[Any, str]]]:
    """For each target (by id), the (module, global name) pairs holding it: one walk for all."""
    found: Dict[int, List[Tuple[Any, str]]] = {id(target): [] for target in targets}
    for _, module, name, value in _module_globals(exclude):
        holders = found.get(id(value))
        if holders is not None:
            holders.append((module, name))
    return found


def describe_references(targets: List[Any], exclude: Tuple[Any, ...] = (), limit: int = 20) -> List[str]:
    """"module.name" for module globals holding any of ``targets``, at most ``limit``."""
    wanted = {id(item) for item in targets}
    found: List[str] = []
    for module_name, _, name, value in _module_globals(exclude):
        if id(value) in wanted:
            found.append(f"{module_name}.{name}")
            if len(found) >= limit:
                break
    return found

"""The numpy ``__getattr__`` hook that resolves restored aliases, warning once each.

One table (:data:`ALIASES`) is shared by the alias patches; each patch adds
its entries with ``patch.setitem`` so its undo removes exactly its own.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Callable, List, Optional, Set, Tuple

import lazypatch

from .aliases import AliasTable, OnFirstUse

_HOOK_MARK = "_lazypatch_numpy_compat_hook"


class RestoredAliases(dict):
    """name -> (object, modern spelling); a named type so reports say what it is."""


ALIASES: RestoredAliases = RestoredAliases()
_warned: Set[str] = set()


def _make_hook(numpy_getattr: Optional[Callable[[str], Any]]) -> Callable[[str], Any]:
    def __getattr__(name: str) -> Any:
        entry = ALIASES.get(name)
        if entry is not None:
            value, modern = entry
            if isinstance(value, OnFirstUse):
                value = value.resolve()
            if name not in _warned:
                _warned.add(name)
                message = (f"np.{name} was removed from NumPy; lazypatch restored it "
                           f"(patch numpy_compat). Use {modern} instead.")
                try:
                    # stacklevel 2: the frame that wrote np.<name> (attribute lookup
                    # calls a module __getattr__ directly from that frame).
                    warnings.warn(message, DeprecationWarning, stacklevel=2)
                except Exception:
                    # -W error turned the notice into an exception: the alias was
                    # restored so that legacy code runs, so say it on stderr instead
                    # of breaking the very line the pack exists to keep working.
                    sys.stderr.write(f"DeprecationWarning: {message}\n")
            return value
        if numpy_getattr is None:
            raise AttributeError(f"module 'numpy' has no attribute {name!r}")
        return numpy_getattr(name)
    setattr(__getattr__, _HOOK_MARK, True)
    return __getattr__


def install_hook(numpy: Any, patch: lazypatch.PatchContext) -> None:
    """Replace numpy's module ``__getattr__`` by one that consults :data:`ALIASES` first.

    NumPy's own ``__getattr__`` (lazy submodules, expiry messages) still
    answers every name the table does not hold, so nothing NumPy serves changes.
    """
    patch.setattr(numpy, "__getattr__", _make_hook(numpy.__dict__.get("__getattr__")))


def _numpy_defines(numpy: Any, name: str) -> bool:
    """Whether the running NumPy itself provides ``name`` (directly or lazily)."""
    if name in numpy.__dict__:
        return True
    try:
        numpy_getattr = lazypatch.original(numpy, "__getattr__")
    except AttributeError:
        return False
    with warnings.catch_warnings():
        # np.object/np.str emit a FutureWarning before raising; we only ask.
        warnings.simplefilter("ignore")
        try:
            numpy_getattr(name)
        except AttributeError:
            return False
    return True


def restore(numpy: Any, patch: lazypatch.PatchContext, table: AliasTable) -> List[Tuple[str, str]]:
    """Add each alias of ``table`` that this NumPy lacks to :data:`ALIASES`.

    Returns ``(name, modern)`` for each restored name. Names NumPy defines
    (``np.bool``, ``np.long`` on NumPy 2) and aliases whose replacement this
    NumPy does not have are left alone.
    """
    if not getattr(numpy.__dict__.get("__getattr__"), _HOOK_MARK, False):
        patch.skip("numpy_compat.attribute_hook is not applied (disabled?), so restored "
                   "names could not be resolved; nothing to do")
    restored = []
    for name, (make, modern) in table.items():
        if _numpy_defines(numpy, name):
            continue
        try:
            value = make(numpy)
        except AttributeError:
            continue   # the replacement itself is missing from this NumPy
        patch.setitem(ALIASES, name, (value, modern))
        restored.append((name, modern))
    if not restored:
        patch.skip(f"NumPy {numpy.__version__} defines every name of this table")
    patch.note("restored " + ", ".join(f"np.{name}" for name, _ in restored))
    return restored


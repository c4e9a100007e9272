"""What to tell a user whose patch selectors matched nothing: the closest known
names, and whether activation is what is missing. Error path only."""

from __future__ import annotations

import sys

from ..activate.configuration import BUILTIN_PACKS, suggestion
from ..state import STATE
from .selection import could_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable, List


def selector_candidates() -> "List[str]":
    """Everything a selector may name: patch names, their pack prefixes, tags, the
    declared opt-in packs and the built-in packs (loaded or not)."""
    with STATE.lock:
        patches = list(STATE.catalog.by_name.values())
        opt_in = set(STATE.opt_in_packs)
    return sorted({patch.name for patch in patches}
                  | {patch.name.split(".", 1)[0] for patch in patches}
                  | {tag for patch in patches for tag in patch.tags}
                  | opt_in | set(_builtin_packs()))


def _builtin_packs() -> "List[str]":
    """The built-in packs' names, or none when ``lazypatch.registry`` cannot be imported."""
    try:
        __import__(BUILTIN_PACKS)
    except ImportError:
        return []
    return list(sys.modules[BUILTIN_PACKS].pack_names())


def _default_on_builtin_packs() -> "List[str]":
    """Built-in packs registered only by activation (every other one is opt-in and
    registers on demand)."""
    registry = sys.modules.get(BUILTIN_PACKS)
    opt_in = set(getattr(registry, "OPT_IN", ()))
    return [name for name in _builtin_packs() if name not in opt_in]


def unmatched_message(unmatched: "Iterable[str]", caller: str) -> str:
    """The KeyError text for selectors of ``caller`` (``"patched()"``...) that match no
    patch: a "did you mean" for each close one; for a built-in pack that only
    activation registers, how to activate."""
    unmatched = list(unmatched)
    if not unmatched:
        return (f"{caller}: an empty selection; pass patch names, globs or tags=[...] "
                f"(`lazypatch list --all` shows them)")
    needing_activation: "List[str]" = []
    if not STATE.activation.activated_by:
        needing_activation = sorted({pack for pack in _default_on_builtin_packs()
                                     for selector in unmatched if could_name(selector, pack)})
    candidates = [name for name in selector_candidates() if name not in unmatched]
    hints = "".join(suggestion(selector, candidates) for selector in unmatched)
    message = (f"{caller}: no patch matches {', '.join(map(repr, unmatched))}{hints}; pass "
               f"patch names, globs or tags=[...] (`lazypatch list --all` shows them)")
    if needing_activation:
        packs = ", ".join(map(repr, needing_activation))
        what = "is a built-in pack" if len(needing_activation) == 1 else "are built-in packs"
        message += (f"; {packs} {what} that only activation registers, and lazypatch is "
                    f"not active: activate it first (import lazypatch.auto, or "
                    f"`lazypatch run`)")
    return message

"""TorchScript keeps compiling code that calls a redirected torch function.

``torch.jit.script`` resolves ``torch.zeros_like`` inside a scripted function
by looking the Python object up, by ``id``, in
``torch.jit._builtins._get_builtin_table()`` (id -> "aten::zeros_like"). Our
replacement is not in that table, so the compiler tries to compile it as
Python, follows ``__wrapped__`` to the C builtin and fails in
``inspect.getfile``. Registering each replacement under the original's
operator name makes the compiler emit the very same aten call it emitted
before (compiled code never runs Python, so a literal ``device="cuda"`` in
scripted code is not redirected; the surface table says so).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional


def builtin_table() -> "Optional[Dict[int, str]]":
    """TorchScript's id -> operator table, built now if torch built none yet (call it
    before replacing anything, so the table records the originals); None without torch.jit."""
    builtins = sys.modules.get("torch.jit._builtins")
    if builtins is None:
        try:
            import torch.jit._builtins as builtins
        except ImportError:
            return None
    return builtins._get_builtin_table()


def register_like(table: "Optional[Dict[int, str]]", replacement: "Any", original: "Any",
                  patch: "Any") -> None:
    """Make TorchScript treat ``replacement`` as the operator ``original`` stands for.

    Recorded with ``patch.setitem`` so undo removes the entry: a stale id
    could otherwise be reused by an unrelated object after the replacement dies.
    """
    if table is None:
        return
    operator = table.get(id(original))
    if operator is not None and table.get(id(replacement)) != operator:
        patch.setitem(table, id(replacement), operator)

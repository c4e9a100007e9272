"""The export pack: ``torch.export.export`` of transformers models, undone exactly.

Off by default (tag ``export``): ``with lazypatch.patched("export"): ...`` or
``LAZYPATCH_ENABLE=export``. This module only declares patches; each one's code
is imported when its target module (``transformers.cache_utils``, a model
family's modeling module) is imported, never before, so entering the scope
imports nothing the user's code did not import. See docs/export.md.
"""

from __future__ import annotations

import lazypatch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

TAGS = ["export"]


@lazypatch.when_imported("transformers.cache_utils", name="export.cache_pytree", tags=TAGS,
                         enabled=False)
def cache_pytree(module: "Any", patch: "Any") -> None:
    """Register the installed version's cache classes as pytree nodes (torch.export
    inputs and outputs), restored entry by entry at undo."""
    from .cache_pytree import register
    register(module, patch)


def dynamic_shapes(value: "Any", shape_of: "Any") -> "Any":
    """The ``dynamic_shapes`` entry of ``torch.export.export`` for ``value`` (a cache,
    or a list/tuple/dict of them), with ``shape_of(tensor)`` for each tensor, e.g.
    ``lambda t: {0: batch, 2: cache_length}``. Call inside the scope (the cache
    classes must be pytree nodes)."""
    from .cache_pytree import children_shapes
    return children_shapes(value, shape_of)

"""``mx_driving.patcher.torch_scatter_patch``: built-in groups and 1.0 functions.

Names only (see ``__init__.py`` of this folder): loaded under any name, this file
gives the very objects of ``lazypatch.compat``.
"""

from lazypatch.compat.driving_sdk2_builtin_groups import (
    TorchScatter,
)
from lazypatch.compat.driving_sdk2_builtin_patches import (
    scatter,
)

__all__ = ["TorchScatter", "scatter"]

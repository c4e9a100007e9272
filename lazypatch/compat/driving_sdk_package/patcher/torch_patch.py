"""``mx_driving.patcher.torch_patch``: built-in groups and 1.0 functions.

Names only (see ``__init__.py`` of this folder): loaded under any name, this file
gives the very objects of ``lazypatch.compat``.
"""

from lazypatch.compat.driving_sdk2_builtin_groups import (
    BatchMatmul,
    TensorIndex,
)
from lazypatch.compat.driving_sdk2_builtin_patches import (
    batch_matmul,
    index,
)

__all__ = ["BatchMatmul", "TensorIndex", "batch_matmul", "index"]

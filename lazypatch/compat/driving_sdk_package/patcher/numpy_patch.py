"""``mx_driving.patcher.numpy_patch``: built-in groups and 1.0 functions.

Names only (see ``__init__.py`` of this folder): loaded under any name, this file
gives the very objects of ``lazypatch.compat``.
"""

from lazypatch.compat.driving_sdk2_builtin_groups import (
    NumpyCompat,
)
from lazypatch.compat.driving_sdk2_builtin_patches import (
    numpy_type,
)

__all__ = ["NumpyCompat", "numpy_type"]

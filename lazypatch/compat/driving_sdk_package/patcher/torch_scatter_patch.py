"""``mx_driving.patcher.torch_scatter_patch``: built-in groups (driving_sdk2_builtin_groups).

Names only (see ``__init__.py`` of this folder): loaded under any name, this file
gives the very objects of ``lazypatch.compat``.
"""

from lazypatch.compat.driving_sdk2_builtin_groups import (
    TorchScatter,
)

__all__ = ["TorchScatter"]

"""``mx_driving.patcher.torch_scatter_patch``: built-in groups and 1.0 functions.

Names only (see ``__init__.py`` of this folder): loaded under any name, this file
gives the very objects of ``lazypatch.driving_sdk``.
"""

from lazypatch.driving_sdk.v2.builtin_groups import TorchScatter
from lazypatch.driving_sdk.v2.builtin_patches import scatter

__all__ = ["TorchScatter", "scatter"]

"""``mx_driving.patcher.mmdet_patch``: built-in groups (driving_sdk2_builtin_groups).

Names only (see ``__init__.py`` of this folder): loaded under any name, this file
gives the very objects of ``lazypatch.compat``.
"""

from lazypatch.compat.driving_sdk2_builtin_groups import (
    PseudoSampler,
    ResNetAddRelu,
    ResNetFP16,
    ResNetMaxPool,
)

__all__ = ["PseudoSampler", "ResNetAddRelu", "ResNetFP16", "ResNetMaxPool"]

"""``mx_driving.patcher.mmdet_patch``: built-in groups and 1.0 functions.

Names only (see ``__init__.py`` of this folder): loaded under any name, this file
gives the very objects of ``lazypatch.driving_sdk``.
"""

from lazypatch.driving_sdk.v2.builtin_groups import PseudoSampler, ResNetAddRelu, ResNetFP16, ResNetMaxPool
from lazypatch.driving_sdk.v2.builtin_patches import (
    pseudo_sampler,
    resnet_add_relu,
    resnet_fp16,
    resnet_maxpool,
)

__all__ = ["PseudoSampler", "ResNetAddRelu", "ResNetFP16", "ResNetMaxPool", "pseudo_sampler",
           "resnet_add_relu", "resnet_fp16", "resnet_maxpool"]

"""``mx_driving.patcher.legacy``: DrivingSDK 1.0's builder API (mx_driving).

Names only (see ``__init__.py`` of this folder): loaded under any name, this file
gives the very objects of ``lazypatch.driving_sdk``.
"""

from lazypatch.driving_sdk.mx_driving import Patch as LegacyPatchWrapper
from lazypatch.driving_sdk.mx_driving import PatcherBuilder, default_patcher_builder

LegacyPatcherBuilder = PatcherBuilder

__all__ = ["LegacyPatchWrapper", "LegacyPatcherBuilder", "PatcherBuilder",
           "default_patcher_builder"]

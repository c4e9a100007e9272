"""``mx_driving.patcher.patcher``: the Patcher (v2.patcher).

Names only (see ``__init__.py`` of this folder): loaded under any name, this file
gives the very objects of ``lazypatch.driving_sdk``.
"""

from lazypatch.driving_sdk.mx_driving import PatcherBuilder
from lazypatch.driving_sdk.v2.patcher import Patcher, default_patcher, replace_with

__all__ = ["Patcher", "PatcherBuilder", "default_patcher", "replace_with"]

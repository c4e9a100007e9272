"""``mx_driving.patcher.patcher``: the Patcher (driving_sdk2).

Names only (see ``__init__.py`` of this folder): loaded under any name, this file
gives the very objects of ``lazypatch.compat``.
"""

from lazypatch.compat.driving_sdk2 import Patcher, default_patcher, replace_with
from lazypatch.compat.mx_driving import PatcherBuilder

__all__ = ["Patcher", "PatcherBuilder", "default_patcher", "replace_with"]

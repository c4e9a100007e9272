"""``mx_driving.patcher.patcher_logger``: logging and the summary (v2.summary).

Names only (see ``__init__.py`` of this folder): loaded under any name, this file
gives the very objects of ``lazypatch.driving_sdk``.
"""

from lazypatch.driving_sdk.v2.summary import (
    PatcherLogger,
    configure_patcher_logging,
    configure_summary,
    patcher_logger,
    set_patcher_log_level,
)
from lazypatch.driving_sdk.v2.summary import rank_from_environment as _get_rank_from_env
from lazypatch.errors import PatchError

__all__ = ["PatcherLogger", "_get_rank_from_env", "PatchError",
           "configure_patcher_logging", "configure_summary", "patcher_logger",
           "set_patcher_log_level"]

"""The ``lazypatch`` logger, rank-aware, imported only when something is logged.

``logging`` costs more to import than activation's whole budget
(benchmarks/COSTS.md), so nothing on the activation path imports this module unless
LAZYPATCH_LOG is set. In a job with many ranks, informational messages are
logged on rank 0 only (unless LAZYPATCH_LOG_ALL_RANKS=1); warnings and
failures are logged on every rank, because each rank may differ.
"""

from __future__ import annotations

import logging
import os

from .activate.configuration import RANK_VARIABLES, current_rank

logger = logging.getLogger("lazypatch")


class _RankFilter(logging.Filter):
    def __init__(self, all_ranks: bool) -> None:
        super().__init__()
        self.all_ranks = all_ranks

    def filter(self, record: logging.LogRecord) -> bool:
        return self.all_ranks or record.levelno >= logging.WARNING or current_rank() == 0


def info(message: str) -> None:
    """Log an informational message (shown on rank 0 only, unless all ranks were asked)."""
    logger.info(message)


def configure_logging(level: str, all_ranks: bool = False) -> None:
    """Set the ``lazypatch`` logger's level and attach a stderr handler once."""
    logger.setLevel(int(level) if level.isascii() and level.isdigit() else level)
    if not any(getattr(handler, "_lazypatch", False) for handler in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(
            f"[lazypatch rank {current_rank()} pid {os.getpid()}] %(levelname)s %(message)s"))
        handler._lazypatch = True  # type: ignore[attr-defined]
        handler.addFilter(_RankFilter(all_ranks))
        logger.addHandler(handler)
        logger.propagate = False


__all__ = ["logger", "configure_logging", "current_rank", "info", "RANK_VARIABLES"]

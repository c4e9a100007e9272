"""Dask: the same patches in every worker of a ``distributed`` cluster.

Two ways in, for workers already running or started by someone else:

* ``client.register_plugin(LazypatchWorkerPlugin())``: the plugin carries the
  client's settings (PYTHONLAZYPATCH) to every worker, present and future,
  and activates lazypatch there;
* ``dask worker --preload lazypatch.integrations.dask`` (or
  ``--preload lazypatch.auto``): each worker activates with the settings of
  its own environment (``lazypatch run -- dask worker ...`` puts them there).

A worker has imported distributed and its dependencies first: patches of
those targets apply late and its report lists them under ``imported_before``.
"""

from __future__ import annotations

from typing import Any, Optional

from distributed.diagnostics.plugin import WorkerPlugin

from . import activate_worker, driver_settings


class LazypatchWorkerPlugin(WorkerPlugin):
    """Activates lazypatch in each worker with the settings of the process that
    created the plugin (or ``settings``, a PYTHONLAZYPATCH value)."""

    name = "lazypatch"
    idempotent = True   # registering it twice (two clients, a reconnect) changes nothing

    def __init__(self, settings: Optional[str] = None) -> None:
        self.settings = driver_settings() if settings is None else settings

    def setup(self, worker: Any) -> None:
        activate_worker(_worker_name(worker), self.settings, "dask worker plugin")


def dask_setup(worker: Any) -> None:
    """``--preload`` entry point: activate with this worker's own environment."""
    activate_worker(_worker_name(worker), "", "dask preload")


def _worker_name(worker: Any) -> str:
    """``dask-`` and the worker's name (LocalCluster numbers them 0, 1, ...)."""
    name = getattr(worker, "name", None)
    return f"dask-{name}" if name is not None else ""

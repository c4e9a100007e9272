"""Bringing lazypatch to the workers of distributed frameworks (Ray, Dask).

Nothing here is imported by activation: ``lazypatch.integrations.ray`` and
``lazypatch.integrations.dask`` are imported by the user's driver or by the
framework's worker, which already hold the framework itself. What they share
lives here: the settings value the driver hands its workers and the one
activation step a worker runs.
"""

from __future__ import annotations

import os

from ..activate.configuration import PORTABLE_VARIABLE, WORKER_VARIABLE, encode_settings, portable_value
from ..state import STATE


def driver_settings() -> str:
    """The PYTHONLAZYPATCH value for this process's workers: the settings this
    process runs with (read when lazypatch was imported or activated), else the
    settings its environment holds now."""
    configuration = STATE.configuration
    if configuration is not None:
        return encode_settings(configuration.settings)
    return portable_value()


def activate_worker(worker_name: str, settings: str, source: str) -> bool:
    """Activate lazypatch in a worker with the driver's ``settings`` (a PYTHONLAZYPATCH
    value; empty keeps the worker's own) and name the worker for ``{worker}`` in
    report paths. Targets the worker imported already are patched late and listed
    as ``imported_before`` in its report. Returns whether lazypatch is active."""
    if settings:   # the driver's settings win over what the worker's node inherited
        os.environ[PORTABLE_VARIABLE] = settings
    if worker_name:
        os.environ.setdefault(WORKER_VARIABLE, worker_name)
    from ..activate.activation import activate
    return activate(source)


def keep_report_current(interval: float = 0.5) -> None:
    """Rewrite this worker's report (LAZYPATCH_REPORT) whenever a patch changed, from a
    daemon thread, besides the usual report at exit.

    Ray ends its workers with SIGKILL when the cluster or the job goes away, and a
    killed process runs no exit handler: without this, a Ray worker's report would
    never be written. Each write is atomic, so a kill mid-write leaves the last one.
    """
    configuration = STATE.configuration
    if configuration is None or not configuration.report_path or not STATE.activation.activated_by:
        return
    import threading
    import time

    from ..reports.reporting import write_report
    path, started = configuration.report_path, time.time()

    def state_signature() -> tuple:
        return tuple((patch.status, patch.application_count, len(patch.live))
                     for patch in list(STATE.catalog.by_name.values()))

    def watch() -> None:
        written = None
        while True:
            signature = state_signature()
            if signature != written:
                try:
                    write_report(path, started)
                    written = signature
                except Exception:   # a full disk: the report at exit (if any) says it
                    pass
            time.sleep(interval)

    threading.Thread(target=watch, name="lazypatch-report", daemon=True).start()

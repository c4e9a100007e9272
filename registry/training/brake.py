"""The brake: stop training cleanly after step N, exit code 0.

It compares ``step >= N`` (never ``==``, the DrivingSDK's bug): a run
resumed from a checkpoint already past N stops at its next step instead of
training on forever.
"""

from __future__ import annotations

import os
import sys

from .clock import CLOCK
from .settings import STATE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn


class Brake:
    """A step listener that ends the process once the brake step is reached."""

    order = 100   # after the profiler, so that its trace is complete

    def step_starting(self) -> None:
        pass

    def step_finished(self, step: int, what: str) -> None:
        limit = STATE.brake_step
        if limit is not None and step >= limit:
            stop(step, what, limit)

    def close(self) -> None:
        pass


BRAKE = Brake()


def stop(step: int, what: str, limit: int) -> "NoReturn":
    """Flush profiler output and reports, say where training stopped, exit with 0.

    ``SystemExit`` unwinds the training loop's ``finally`` blocks and runs the
    ``atexit`` handlers (lazypatch's LAZYPATCH_REPORT writer among them).
    """
    CLOCK.close()
    _write_report_if_not_scheduled()
    source = STATE.brake_source or f"brake_at({limit})"
    sys.stderr.write(f"lazypatch: brake: stopped training after {what} {step} "
                     f"(brake step {limit}, from {source}); exiting with code 0\n")
    sys.stderr.flush()
    sys.stdout.flush()
    raise SystemExit(0)


def _write_report_if_not_scheduled() -> None:
    """Activation schedules the LAZYPATCH_REPORT writer at exit; without activation
    (the API used directly) write it here, since nobody else will."""
    import lazypatch
    path = lazypatch.setting("LAZYPATCH_REPORT").strip()
    if not path or lazypatch.activation_info()["active"]:
        return
    try:
        lazypatch.write_report(path)
    except Exception as error:   # the stop itself must still happen
        sys.stderr.write(f"lazypatch: brake: cannot write LAZYPATCH_REPORT={path!r}: "
                         f"{error} (pid {os.getpid()})\n")

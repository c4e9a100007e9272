"""Heavy dependencies imported on first need, their one-time cost kept apart.

``import wrapt`` costs about 0.13 s here, and more on newer Pythons (it imports
asyncio and importlib.metadata): far more than any patch. The engine imports it
the first time a patch wraps something, which would charge that one-time cost
to whichever patch happened to come first and make its MS column say 270 ms
for half a millisecond of work. ``import_once`` measures the import, records it
in ``STATE.one_time_imports`` (reported once, on its own line), and adds it to
the importing thread's tally, which ``application`` subtracts from the time of
the patch that was running.
"""

from __future__ import annotations

import sys
from _thread import get_ident
from time import perf_counter

from .state import STATE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType


def import_once(name: str) -> "ModuleType":
    """``import name``; the first time, its cost is recorded instead of charged to a patch."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    started = perf_counter()
    __import__(name)
    milliseconds = (perf_counter() - started) * 1000.0
    with STATE.lock:
        STATE.one_time_imports[name] = STATE.one_time_imports.get(name, 0.0) + milliseconds
        thread = get_ident()
        STATE.one_time_import_ms_by_thread[thread] = \
            STATE.one_time_import_ms_by_thread.get(thread, 0.0) + milliseconds
    return sys.modules[name]

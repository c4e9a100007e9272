"""Telling the user something went wrong, in a way that can never stop their program.

lazypatch reports problems (bad configuration, a failing patch, a late
patch, a conflict) as warnings of its own classes, so that users can filter
them. But ``python -W error`` and ``PYTHONWARNINGS=error`` (the default of
many CI set-ups) turn every warning into an exception raised from
``warnings.warn``: raised inside activation it made the whole program run
unpatched, and raised inside an import it broke the import that the failing
patch was promised not to break. So a warning that the filters turn into an
error is caught here and written to stderr instead (and to the ``lazypatch``
logger when logging is configured): the message still reaches the user, and
the program goes on. Strict mode is the one way to make a patch failure stop
an import, and it raises ``PatchError`` itself.
"""

from __future__ import annotations

import sys
from _warnings import warn  # the C half of warnings: no import cost


def notify(message: str, category: type, stacklevel: int = 2) -> None:
    """Emit ``message`` as a ``category`` warning; if the warnings filters make that
    an error, write it to stderr instead of raising."""
    try:
        warn(message, category, stacklevel + 1)
    except Exception:
        try:
            sys.stderr.write(f"{category.__name__}: {message}\n")
        except Exception:   # no usable stderr (pythonw, closed stream): nothing more to do
            pass
        logging_module = sys.modules.get("logging")
        if logging_module is not None:
            try:
                logging_module.getLogger("lazypatch").warning(message)
            except Exception:
                pass

"""Writing a file so that readers see the old content or the new one, never half of it.

Reports are read by other processes (``lazypatch report``), ``.pth`` files by
``site.py`` of any interpreter starting at that moment, and the plugin cache
by every activating process: each is written to a temporary file in the same
directory and moved into place with ``os.replace`` (atomic on POSIX and
Windows). On any failure the temporary file is removed again: an unwritable
destination must not leave debris behind.
"""

from __future__ import annotations

import os


def atomic_write(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically; raise OSError, leaving nothing behind."""
    directory = os.path.dirname(path) or "."
    temporary = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.remove(temporary)
        except OSError:
            pass
        raise

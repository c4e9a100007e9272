"""Writing a file so that readers see the old content or the new one, never half of it.

Reports are read by other processes (``lazypatch report``), ``.pth`` files by
``site.py`` of any interpreter starting at that moment, and the plugin cache
by every activating process: each is written to a temporary file in the same
directory and moved into place with ``os.replace`` (atomic on POSIX and
Windows). On any failure the temporary file is removed again: an unwritable
destination must not leave debris behind.

Report folders are often shared (a cluster's scratch space). The temporary
file therefore has an unpredictable name and is created with ``O_EXCL`` and
``O_NOFOLLOW``: a symbolic link planted at a guessable name cannot redirect
the write. And only a regular file (or nothing) at the destination is
replaced: a FIFO, a device or a directory there is refused, never swapped for
a regular file.
"""

import os
import stat

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)   # Windows has none (and no symlink planting by users)


def atomic_write(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically; raise OSError, leaving nothing behind.

    Refuses (``OSError``) when something other than a regular file is at ``path``."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        found = None
    if found is not None and not stat.S_ISREG(found.st_mode):
        kind = ("a symbolic link" if stat.S_ISLNK(found.st_mode) else
                "a directory" if stat.S_ISDIR(found.st_mode) else
                "a FIFO" if stat.S_ISFIFO(found.st_mode) else "a special file")
        raise OSError(f"{path} is {kind}, not a regular file: lazypatch writes only regular "
                      f"files; choose another path")
    directory = os.path.dirname(path) or "."
    stem = f".{os.path.basename(path)}."
    temporary = ""
    try:
        for _ in range(100):
            candidate = os.path.join(directory, stem + os.urandom(8).hex() + ".tmp")
            try:
                descriptor = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW,
                                     0o644)
            except FileExistsError:
                continue
            temporary = candidate
            break
        else:
            raise OSError(f"cannot create a temporary file beside {path}")
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        if temporary:
            try:
                os.remove(temporary)
            except OSError:
                pass
        raise

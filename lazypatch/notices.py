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

Every warning is attributed to the user's line: the innermost frame outside
lazypatch's files (the engine, its bootstrap, the built-in packs) and the
import machinery, so ``import lazypatch.auto`` or the ``import torch`` that
applied a failing patch, never ``sitecustomize.py:39``. When only start-up
hooks are on the stack (``lazypatch run``, a ``.pth`` file), it is
attributed to ``<lazypatch activation>``.

Every warning is said once per process tree: ``lazypatch run`` and the site
hook activate in every child Python process (DataLoader workers, torchrun
ranks, ``subprocess``), and each would repeat what its parent said (a plugin
that fails to import, a bad setting). A process that shows a message adds its
fingerprint to ``LAZYPATCH_SAID`` in its environment, which the children it
starts afterwards inherit; a child stays quiet about a message its parent
already showed. Within one process the warnings filters decide, as usual.
This is the only such mechanism: configuration messages (``configuration.alert``),
failing patches and plugin packs all go through ``notify``.
"""

import os
import sys
from _warnings import warn_explicit  # the C half of warnings: no import cost

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from types import FrameType
    from typing import Optional, Tuple

# lazypatch's own files: this package (every stage folder, its bootstrap and the
# DrivingSDK layer too) and the built-in packs, which live in their own directory in
# a source checkout.
_HERE = __file__.rpartition("notices.")[0]


def _own_prefixes() -> "Tuple[str, ...]":
    prefixes = [_HERE]
    registry = sys.modules.get("lazypatch.registry")
    for directory in getattr(registry, "__path__", None) or ():
        prefixes.append(directory + ("\\" if "\\" in directory else "/"))
    return tuple(prefixes)


def _is_machinery(filename: str) -> bool:
    """Frames no user wrote: the import system, site's start-up hooks, and the
    ``lazypatch`` console script pip writes (``bin/lazypatch``, which only calls
    ``lazypatch.cli.main:main``: a warning of ``lazypatch run`` is not about that file)."""
    return ("importlib" in filename and "_bootstrap" in filename) or \
        filename in ("<frozen site>", "<frozen runpy>") or \
        filename.endswith(("/site.py", "\\site.py", "/runpy.py", "\\runpy.py")) or \
        (filename == sys.argv[0] and filename.rpartition("/")[2].startswith("lazypatch")
         if sys.argv else False)


def user_frame() -> "Optional[FrameType]":
    """The innermost frame outside lazypatch's files and the import machinery: the
    user's line that led here, or None when only lazypatch and start-up hooks are on
    the stack (activation by ``lazypatch run`` or a ``.pth`` file)."""
    own = _own_prefixes()
    frame: "Optional[FrameType]" = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(own) and not _is_machinery(filename):
            return frame
        frame = frame.f_back
    return None


def notify(message: str, category: "type", stacklevel: int = 2) -> None:
    """Emit ``message`` as a ``category`` warning attributed to the user's line (or,
    when activation started from a start-up hook, to the activation itself); if the
    warnings filters make that an error, write it to stderr instead of raising.

    ``stacklevel`` is accepted for callers written before the frames were walked
    here, and ignored: counting frames by hand pointed into lazypatch's own files.
    Silent when a parent process already said the same (``LAZYPATCH_SAID``).
    """
    key = fingerprint(category.__name__ + ": " + message)
    if key in _said_by_parents():
        return
    _remember(key)
    frame = user_frame()
    try:
        if frame is not None:
            module_globals = frame.f_globals
            registry = module_globals.setdefault("__warningregistry__", {})
            # No module_globals, as warnings.warn itself does: given them, the C code
            # asks the module's loader for its source, which raises for `python -c`.
            warn_explicit(message, category, frame.f_code.co_filename, frame.f_lineno,
                          module_globals.get("__name__"), registry)
        else:
            # Activated by `lazypatch run` or a .pth file: no user line yet. One
            # registry for these, so that a message is shown once per process.
            warn_explicit(message, category, "<lazypatch activation>", 0,
                          "lazypatch", _START_UP_REGISTRY)
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


_START_UP_REGISTRY: "dict" = {}


def fingerprint(text: str) -> str:
    """A stable hash of ``text`` (FNV-1a, 32 bits, 8 hex digits): ``hash()`` of a str
    differs between processes, and hashlib or zlib would be imported on the start-up path."""
    value = 0x811C9DC5
    for character in text:
        value = ((value ^ ord(character)) * 0x01000193) & 0xFFFFFFFF
    return "%08x" % value


# Internal: set by lazypatch only (configuration.INTERNAL_VARIABLES names it).
SAID_VARIABLE = "LAZYPATCH_SAID"
# Fingerprints handed down, newest last: 9 bytes each, so the environment stays small
# however chatty a program is (the oldest are forgotten first).
MAX_HANDED_DOWN = 64
_inherited: "Optional[frozenset]" = None


def _said_by_parents() -> "frozenset":
    """The fingerprints this process's parents showed, as its environment had them at
    the first warning (before this process added its own)."""
    global _inherited
    if _inherited is None:
        _inherited = frozenset(os.environ.get(SAID_VARIABLE, "").split(",")) - {""}
    return _inherited


def _remember(key: str) -> None:
    """Hand ``key`` down to the child processes started from now on."""
    try:
        said = [item for item in os.environ.get(SAID_VARIABLE, "").split(",") if item]
        if key not in said:
            os.environ[SAID_VARIABLE] = ",".join((said + [key])[-MAX_HANDED_DOWN:])
    except Exception:   # an environment that cannot be written: children may repeat it
        pass

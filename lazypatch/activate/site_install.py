"""``lazypatch site install|uninstall|status``: activation at every interpreter start.

``install`` writes ``lazypatch-activate.pth`` into the current environment's
site-packages (``sysconfig.get_paths()["purelib"]``). Python's ``site``
module executes lines of a ``.pth`` file that start with ``import`` at
start-up, so every interpreter of that environment activates lazypatch
before the user's code runs, with the same routine as ``import
lazypatch.auto``. The line is cheap and can never raise: it checks
``LAZYPATCH=0`` before importing anything of lazypatch, and swallows a
missing lazypatch (a ``.pth`` left behind after ``pip uninstall lazypatch``,
which does not know about this file, costs nothing and says nothing).
The file name sorts after ``__editable__.*.pth``, so an editable install of
lazypatch is importable when the line runs.

Python 3.15 and PEP 829: ``import`` lines in ``.pth`` files are deprecated.
Their replacement is a ``<name>.start`` file beside the ``.pth`` holding
entry points in the ``pkg.mod:callable`` form, called with no arguments
after all ``.pth`` path entries are added; when ``<name>.start`` exists, the
``import`` lines of the matching ``<name>.pth`` are skipped. Import lines
keep working (with a warning under ``-v``) in 3.15-3.17, are silently
ignored in 3.18-3.19, and are an error after that. ``install`` therefore
writes both ``lazypatch-activate.pth`` (used up to 3.14) and
``lazypatch-activate.start`` naming :func:`activate_from_start` (used from
3.15 on, which then ignores the ``.pth`` line); ``uninstall`` removes both.
"""

from __future__ import annotations

import os
import sys

from .configuration import FALSE_WORDS, is_off

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List, Optional

FILE_STEM = "lazypatch-activate"

# One line, executed by site.py with exec(). Everything inside the try: a
# start-up hook that raises prints a traceback in every Python process. Only a
# lazypatch that is not installed at all (a line left after `pip uninstall`) is
# silent: an ImportError from inside lazypatch (a file written by another version,
# whose modules have moved since) would otherwise turn activation off unsaid.
PTH_LINE = (
    "import os, sys; exec(\"try:\\n"
    " if os.environ.get('LAZYPATCH', '1').strip().lower() not in "
    + repr(FALSE_WORDS).replace('"', "'") +
    ": import lazypatch.activate.activation as _lazypatch; _lazypatch.activate('site .pth')\\n"
    "except ImportError as error:\\n"
    " if getattr(error, 'name', None) != 'lazypatch': sys.stderr.write('lazypatch: .pth "
    "activation failed: %r; run `lazypatch site install` again\\\\n' % (error,))\\n"
    "except Exception as error:\\n"
    " sys.stderr.write('lazypatch: .pth activation failed: %r\\\\n' % (error,))\")\n"
)
START_LINE = "lazypatch.activate.site_install:activate_from_start\n"
HEADER = ("# Written by `lazypatch site install`; remove with `lazypatch site uninstall`.\n"
          "# Activates lazypatch at interpreter start; LAZYPATCH=0 turns it off.\n")


def site_packages() -> str:
    """The current environment's site-packages (pure-Python library directory)."""
    import sysconfig
    return sysconfig.get_paths()["purelib"]


def files(directory: "Optional[str]" = None) -> "Dict[str, str]":
    """``{"pth": path, "start": path}`` of the activation files in ``directory``."""
    directory = directory or site_packages()
    return {"pth": os.path.join(directory, FILE_STEM + ".pth"),
            "start": os.path.join(directory, FILE_STEM + ".start")}


def install(directory: "Optional[str]" = None) -> "List[str]":
    """Write the ``.pth`` and ``.start`` files; return their paths.

    Raises OSError (for example PermissionError) when the directory is not
    writable; the CLI turns that into a message naming the fix.
    """
    from ..files import atomic_write
    paths = files(directory)
    written = []
    for kind, content in (("pth", HEADER + PTH_LINE), ("start", HEADER + START_LINE)):
        # site.py may read the directory at any moment in another process:
        # never let it see a half-written line.
        atomic_write(paths[kind], content)
        written.append(paths[kind])
    _record_in_distribution(os.path.dirname(paths["pth"]), written, add=True)
    return written


def _distribution_record(directory: str) -> "Optional[str]":
    """The RECORD file of lazypatch's own installation in ``directory``, if it is there."""
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    for name in names:
        if name.startswith("lazypatch-") and name.endswith(".dist-info"):
            record = os.path.join(directory, name, "RECORD")
            if os.path.isfile(record):
                return record
    return None


def _record_in_distribution(directory: str, paths: "List[str]", add: bool) -> None:
    """List the activation files in (or drop them from) lazypatch's RECORD.

    ``pip uninstall`` removes exactly the files a distribution's RECORD names;
    files written after installation are otherwise left behind, and a
    ``.pth`` line outliving the package would try to activate it at every
    start. Naming them in RECORD (relative to the site directory, no hash:
    the wheel spec allows that for files the installer did not write) makes
    ``pip uninstall lazypatch`` take them away with the package.
    """
    record = _distribution_record(directory)
    if record is None:
        return
    names = {os.path.basename(path) + ",," for path in paths}
    try:
        with open(record, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
        kept = [line for line in lines if line not in names]
        wanted = kept + sorted(names) if add else kept
        if wanted != lines:
            from ..files import atomic_write
            atomic_write(record, "".join(line + "\n" for line in wanted))
    except OSError:
        # A read-only or vanished RECORD only means pip will not remove the files
        # itself; `lazypatch site uninstall` still does.
        return


def uninstall(directory: "Optional[str]" = None) -> "List[str]":
    """Remove the activation files; return the paths that were removed."""
    removed = []
    for path in files(directory).values():
        try:
            os.remove(path)
        except FileNotFoundError:
            continue
        removed.append(path)
    _record_in_distribution(directory or site_packages(), list(files(directory).values()), add=False)
    return removed


def status(directory: "Optional[str]" = None) -> "Dict[str, object]":
    """Which activation files exist and whether their content is current."""
    paths = files(directory)
    state: "Dict[str, object]" = {"directory": os.path.dirname(paths["pth"])}
    for kind, expected in (("pth", HEADER + PTH_LINE), ("start", HEADER + START_LINE)):
        try:
            with open(paths[kind], encoding="utf-8") as handle:
                content = handle.read()
        except OSError:
            state[kind] = "absent"
            continue
        state[kind] = "installed" if content == expected else "outdated"
    state["installed"] = state["pth"] == "installed"
    state["disabled_by_environment"] = is_off(os.environ.get("LAZYPATCH"))
    return state


def activate_from_start() -> None:
    """The PEP 829 ``.start`` entry point (Python 3.15+): activate unless LAZYPATCH=0."""
    if is_off(os.environ.get("LAZYPATCH")):
        return
    try:
        from .activation import activate
        activate("site .start")
    except Exception as error:   # never break interpreter start-up
        sys.stderr.write(f"lazypatch: .start activation failed: {error!r}\n")

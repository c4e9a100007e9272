"""The built-in patch packs, shipped as ``lazypatch.registry``.

Each module or package directly in this folder is one pack. A pack is written
against lazypatch's public API only (exactly what a third-party pack would
use): importing it *declares* patches and imports none of their targets, so
that activation stays cheap. Heavy code (torch kernels, wrappers) lives in
submodules that a patch imports when its target is imported.
"""

from __future__ import annotations

import os


def pack_names() -> list:
    """The built-in packs, in a stable order (found by listing this folder)."""
    names = set()
    for entry in os.listdir(os.path.dirname(__file__)):
        if entry.startswith(("_", ".")):
            continue
        if entry.endswith(".py"):
            names.add(entry[:-3])
        elif os.path.isfile(os.path.join(os.path.dirname(__file__), entry, "__init__.py")):
            names.add(entry)
    return sorted(names)


def load_packs() -> None:
    """Import every built-in pack, registering its patches; a broken pack warns, and
    the other packs still load whatever the warnings filters say."""
    import sys
    from _warnings import warn

    from lazypatch import ConfigurationWarning
    for name in pack_names():
        try:
            __import__(f"{__name__}.{name}")
        except Exception as error:
            message = (f"lazypatch: built-in pack {name!r} failed to load: "
                       f"{type(error).__name__}: {error}")
            try:
                warn(message, ConfigurationWarning, stacklevel=2)
            except Exception:   # -W error made the warning an exception: say it, go on
                sys.stderr.write(f"ConfigurationWarning: {message}\n")

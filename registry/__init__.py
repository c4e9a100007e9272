"""The built-in patch packs, shipped as ``lazypatch.registry``.

Each module or package directly in this folder is one pack. A pack is written
against lazypatch's public API only (exactly what a third-party pack would
use): importing it *declares* patches and imports none of their targets, so
that activation stays cheap. Heavy code (torch kernels, wrappers) lives in
submodules that a patch imports when its target is imported.
"""

import os

#: Packs whose every patch is off by default. Activation only declares them
#: (``lazypatch.declare_opt_in_pack``): one is imported, and its patches registered,
#: when LAZYPATCH_ENABLE, ``lazypatch.enable()`` or ``lazypatch list`` names it. Their
#: dozens of registrations would otherwise cost every process about 3M instructions
#: each (benchmarks/COSTS.md) for patches that almost never run.
OPT_IN = ("cuda_extensions", "device", "export")


def pack_names() -> "list":
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

    import lazypatch
    from lazypatch import ConfigurationWarning

    from . import _opt_in_settings  # noqa: F401
    for name in pack_names():
        try:
            if name in OPT_IN:
                # Its patches are registered when a selector names the pack; its
                # settings are declared by _opt_in_settings, imported above.
                lazypatch.declare_opt_in_pack(name, f"{__name__}.{name}")
                continue
            __import__(f"{__name__}.{name}")
        except Exception as error:
            message = (f"lazypatch: built-in pack {name!r} failed to load: "
                       f"{type(error).__name__}: {error}")
            try:
                warn(message, ConfigurationWarning, stacklevel=2)
            except Exception:   # -W error made the warning an exception: say it, go on
                sys.stderr.write(f"ConfigurationWarning: {message}\n")

"""The one activation routine behind ``import lazypatch.auto``, sitecustomize and ``.pth``.

Activation must cost under 10 ms on top of interpreter start and import no
target package (and not wrapt): it reads the configuration, installs the
finder, and imports the built-in packs, which only *declare* patches.
Everything rich (reports, logging set-up, plugin discovery caches) is
imported only when configured or needed.

It never raises: a broken pack or bad configuration becomes a warning, since
activation runs before the user's program and must not stop it.

The three ways in share this routine: ``import lazypatch.auto`` (source
``"import lazypatch.auto"``), the ``sitecustomize`` that ``lazypatch run``
puts on ``PYTHONPATH`` (``"lazypatch run"``), and the ``.pth``/``.start``
file of ``lazypatch site install`` (``"site .pth"``). Whichever runs first in
a process wins; the others find it active and return.
"""

from __future__ import annotations

import os
import sys
from _warnings import warn
from time import perf_counter

from . import config as _config
from . import dispatch as _dispatch
from .catalog import Patch, matches, set_enabled
from .errors import ConfigurationWarning

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Dict, List, Optional

    from .config import Configuration

CONFIGURATION: "Optional[Configuration]" = None
ACTIVATED_BY = ""
# Watched targets that were already in sys.modules when activation finished:
# their patches applied late, and earlier `from x import y` copies may be stale.
IMPORTED_BEFORE: "List[str]" = []
ACTIVATION_MS = 0.0
# patch name -> where activation registered it from ("built-in", "plugin",
# "LAZYPATCH_MODULES"); `lazypatch list` shows it.
SOURCES: "Dict[str, str]" = {}
# Set in the environment while activating: a Python child started during
# activation (a pack running a subprocess) sees it and does not activate, so
# the bootstrap can never recurse. Removed again when activation ends.
ACTIVATING_VARIABLE = "LAZYPATCH_ACTIVATING"

BUILTIN_PACKS = "lazypatch.registry"


def activate(source: str = "auto") -> bool:
    """Activate lazypatch once per process; return whether it is active.

    Returns False when ``LAZYPATCH=0`` or when this process was started by
    another process in the middle of its own activation.
    """
    global CONFIGURATION, ACTIVATED_BY, ACTIVATION_MS
    if ACTIVATED_BY:
        return True
    if os.environ.get(ACTIVATING_VARIABLE):
        return False
    started = perf_counter()
    configuration = _config.read()
    CONFIGURATION = configuration
    if not configuration.active:
        return False
    ACTIVATED_BY = source
    os.environ[ACTIVATING_VARIABLE] = str(os.getpid())
    try:
        _activate(configuration)
    finally:
        os.environ.pop(ACTIVATING_VARIABLE, None)
    ACTIVATION_MS = (perf_counter() - started) * 1000.0
    if configuration.log_level:
        from .log import info
        info(f"active (by {source}): {len(_dispatch.CATALOG.by_name)} patches registered "
             f"in {ACTIVATION_MS:.2f} ms")
    return True


def _activate(configuration: "Configuration") -> None:
    _dispatch.SETTINGS.strict = configuration.strict
    if configuration.log_level:
        from .log import configure_logging
        configure_logging(configuration.log_level, configuration.log_all_ranks)
    catalog = _dispatch.CATALOG
    catalog.enable_rules = list(configuration.enable)
    catalog.disable_rules = list(configuration.disable)
    for patch in catalog.patches():   # registered before activation (e.g. by a plugin)
        _apply_rules(patch)
    _dispatch.ensure_finder()
    _registering("built-in", lambda: _import_modules([BUILTIN_PACKS], "built-in packs"))
    if configuration.plugins:
        _registering("plugin", _load_plugins)
    _registering("LAZYPATCH_MODULES",
                 lambda: _import_modules(configuration.modules, "LAZYPATCH_MODULES"))
    _warn_unmatched_selectors(configuration)
    _config.warn_unknown_variables()
    if configuration.report_path:
        from .reporting import write_report_at_exit
        write_report_at_exit(configuration.report_path)
    modules = sys.modules
    IMPORTED_BEFORE[:] = sorted(target for target in _dispatch.CATALOG.by_target
                                if target in modules)


def _registering(source: str, register: "Callable[[], None]") -> None:
    """Run ``register`` and remember ``source`` for every patch name it added."""
    by_name = _dispatch.CATALOG.by_name
    before = set(by_name)
    register()
    for name in by_name:
        if name not in before:
            SOURCES[name] = source


def _apply_rules(patch: Patch) -> None:
    catalog = _dispatch.CATALOG
    # LAZYPATCH_DISABLE wins over LAZYPATCH_ENABLE, as in Catalog.add; decide
    # before applying anything, so a disabled patch never applies even briefly.
    if any(matches(rule, patch) for rule in catalog.disable_rules):
        set_enabled(patch, False, "disabled by configuration")
    elif any(matches(rule, patch) for rule in catalog.enable_rules):
        set_enabled(patch, True, "")
        _dispatch.apply_to_imported(patch)


def _import_modules(names: "List[str]", what: str) -> None:
    for name in names:
        try:
            __import__(name)
            module = sys.modules[name]
            load = getattr(module, "load_packs", None)
            if callable(load):
                load()
        except Exception as error:
            warn(f"lazypatch: could not import {name!r} from {what}: "
                 f"{type(error).__name__}: {error}; its patches are not registered",
                 ConfigurationWarning, stacklevel=4)


def _load_plugins() -> None:
    try:
        from .plugins import register_plugin_packs
    except ImportError:
        return
    try:
        register_plugin_packs()
    except Exception as error:
        warn(f"lazypatch: plugin packs could not be loaded: {type(error).__name__}: "
             f"{error}", ConfigurationWarning, stacklevel=3)


def _warn_unmatched_selectors(configuration: "Configuration") -> None:
    for variable, selectors in (("LAZYPATCH_DISABLE", configuration.disable),
                                ("LAZYPATCH_ENABLE", configuration.enable)):
        if not selectors:
            continue
        _, unmatched = _dispatch.CATALOG.select(selectors)
        if unmatched:
            known = sorted(_dispatch.CATALOG.by_name)
            warn(f"lazypatch: {variable} names {', '.join(map(repr, unmatched))}, which "
                 f"match no registered patch; known patches: {', '.join(known) or 'none'} "
                 f"(names, globs such as 'numpy.*', or tags)", ConfigurationWarning,
                 stacklevel=4)

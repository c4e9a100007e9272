"""The one activation routine behind ``import lazypatch.auto``, sitecustomize and ``.pth``.

Activation must cost under 10 ms on top of interpreter start and import no
target package (and not wrapt): it reads the configuration, installs the
finder, and imports the built-in packs, which only *declare* patches.
Everything rich (reports, logging set-up, plugin discovery caches) is
imported only when configured or needed.

It never raises: a broken pack or bad configuration becomes a warning, since
activation runs before the user's program and must not stop it.
"""

from __future__ import annotations

import sys
from _warnings import warn

from . import config as _config
from . import dispatch as _dispatch
from .catalog import Patch, matches, set_enabled
from .errors import ConfigurationWarning

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Optional

    from .config import Configuration

CONFIGURATION: "Optional[Configuration]" = None
ACTIVATED_BY = ""

BUILTIN_PACKS = "lazypatch.registry"


def activate(source: str = "auto") -> bool:
    """Activate lazypatch once per process; return whether it is active."""
    global CONFIGURATION, ACTIVATED_BY
    if ACTIVATED_BY:
        return True
    configuration = _config.read()
    CONFIGURATION = configuration
    if not configuration.active:
        return False
    ACTIVATED_BY = source
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
    _import_modules([BUILTIN_PACKS], "built-in packs")
    if configuration.plugins:
        _load_plugins()
    _import_modules(configuration.modules, "LAZYPATCH_MODULES")
    _warn_unmatched_selectors(configuration)
    _config.warn_unknown_variables()
    if configuration.report_path:
        from .report import write_report_at_exit
        write_report_at_exit(configuration.report_path)
    return True


def _apply_rules(patch: Patch) -> None:
    catalog = _dispatch.CATALOG
    if any(matches(rule, patch) for rule in catalog.enable_rules):
        set_enabled(patch, True, "")
        _dispatch.apply_to_imported(patch)
    if any(matches(rule, patch) for rule in catalog.disable_rules):
        set_enabled(patch, False, "disabled by configuration")


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

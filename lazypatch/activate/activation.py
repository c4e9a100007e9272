"""The one activation routine behind ``import lazypatch.auto``, sitecustomize and ``.pth``.

Activation must stay within its budget (benchmarks/COSTS.md) and import no
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

import os
import sys
from time import perf_counter

from ..declare.registration import ensure_finder
from ..state import STATE
from ..watch.importer import guard_the_front
from . import configuration as _configuration

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Callable, Dict, List

# Set in the environment while activating: a Python child started during
# activation (a pack running a subprocess) sees it and does not activate, so
# the bootstrap can never recurse. Removed again when activation ends.
ACTIVATING_VARIABLE = "LAZYPATCH_ACTIVATING"



def activate(source: str = "auto") -> bool:
    """Activate lazypatch once per process; return whether it is active.

    Returns False when ``LAZYPATCH=0`` or when this process was started by
    another process in the middle of its own activation. Never raises: a
    broken pack or bad configuration becomes a warning that no warnings
    filter can turn into an exception (see ``notices``).
    """
    info = STATE.activation
    if info.activated_by:
        return True
    if os.environ.get(ACTIVATING_VARIABLE):
        return False
    started = perf_counter()
    configuration = _configuration.read()
    if not configuration.active:
        STATE.configuration = configuration
        return False
    with STATE.lock:
        if info.activated_by:
            return True
        info.activated_by = source
    os.environ[ACTIVATING_VARIABLE] = str(os.getpid())
    try:
        _activate(configuration)
    except Exception as error:   # a bug of ours must not stop the user's program
        _configuration.alert(f"lazypatch: activation stopped early ({type(error).__name__}: "
                             f"{error}); the patches registered so far stay active")
    finally:
        os.environ.pop(ACTIVATING_VARIABLE, None)
    info.milliseconds = (perf_counter() - started) * 1000.0
    if configuration.log_level:
        from ..log import info as log_info
        log_info(f"active (by {source}): {len(STATE.catalog.by_name)} patches registered "
                 f"in {info.milliseconds:.2f} ms")
    return True


def _activate(configuration: "_configuration.Configuration") -> None:
    if configuration.log_level:
        from ..log import configure_logging
        configure_logging(configuration.log_level, configuration.log_all_ranks)
    newly_enabled = []
    if not _configuration.adopt_without_rules(configuration):
        from ..decide.selection import configure
        newly_enabled = configure(configuration)   # registered before activation (a plugin)
    if newly_enabled:
        from ..apply.application import apply_to_imported
        for patch in newly_enabled:
            apply_to_imported(patch)
    guard_the_front(STATE.finder, write_check_in=False)   # before the program: importer.MetaPath
    ensure_finder()
    _registering("built-in", lambda: _import_modules([_configuration.BUILTIN_PACKS], "built-in packs"))
    if configuration.plugins:
        _registering("plugin", _load_plugins)
    _registering("LAZYPATCH_MODULES",
                 lambda: _import_modules(configuration.modules, "LAZYPATCH_MODULES"))
    # A message a parent process said already is not repeated (notices.notify).
    _warn_unmatched_selectors(configuration)
    # Only now have the packs declared their variables: TOML keys such as
    # brake_step were kept when the file was read and are checked here.
    _configuration.warn_unknown_settings(configuration)
    _announce_device_redirect(configuration)
    if configuration.report_path:
        from ..reports.reporting import write_report_at_exit
        write_report_at_exit(configuration.report_path)
    # The check of sys.meta_path's front now written into the import system's own code
    # (importer.check_each_import): activation's imports above ran with the wrapper.
    guard_the_front(STATE.finder)
    modules = sys.modules
    STATE.activation.imported_before[:] = sorted(
        target for target in STATE.catalog.by_target if target in modules)


def _registering(source: str, register: "Callable[[], None]") -> None:
    """Run ``register`` and remember ``source`` for every patch name it added."""
    catalog = STATE.catalog
    first = catalog.sequence
    register()
    # The catalog numbers patches as it indexes them, in its by_name order: the new
    # ones are at its end, found without a walk over every patch.
    added = []
    for patch in reversed(catalog.by_name.values()):
        if patch.sequence <= first:
            break
        added.append(patch.name)
    sources = STATE.activation.sources
    for name in reversed(added):
        sources[name] = source


def _import_from_current_directory(name: str) -> None:
    """Import ``name`` as ``python -m`` would find it: from the current directory too.

    Activation runs before the program sets ``sys.path[0]`` (from ``site``, under
    ``lazypatch run`` or a ``.pth`` file), so a user's ``mypatches.py`` beside their
    script is not importable yet. Only a module that is not found anywhere else is
    looked up there, and the directory is taken off ``sys.path`` again afterwards:
    the program sees the path it would see without lazypatch.
    """
    try:
        __import__(name)
        return
    except ModuleNotFoundError as error:
        top = name.partition(".")[0]
        here = os.getcwd()
        if error.name != top or here in sys.path or "" in sys.path:
            raise
    sys.path.insert(0, here)
    try:
        __import__(name)
    except ModuleNotFoundError as error:
        if error.name != top:
            raise
        raise ModuleNotFoundError(
            f"No module named {top!r} on sys.path or in the current directory {here}; run "
            f"from the directory holding it, add that directory to PYTHONPATH, or install "
            f"it", name=top) from None
    finally:
        try:
            sys.path.remove(here)
        except ValueError:
            pass


def _import_modules(names: "List[str]", what: str) -> None:
    for name in names:
        try:
            _import_from_current_directory(name)
            module = sys.modules[name]
            load = getattr(module, "load_packs", None)
            if callable(load):
                load()
        except Exception as error:
            _configuration.alert(f"lazypatch: could not import {name!r} from {what}: "
                                 f"{type(error).__name__}: {error}; its patches are not "
                                 f"registered")


def _load_plugins() -> None:
    try:
        from .plugin_cache import cached_entries
        if cached_entries() == []:
            return   # a current cache lists no plugin pack: plugins.py is not needed
        from .plugins import register_plugin_packs
        register_plugin_packs()
    except Exception as error:
        _configuration.alert(f"lazypatch: plugin packs could not be loaded: "
                             f"{type(error).__name__}: {error}")


def _warn_unmatched_selectors(configuration: "_configuration.Configuration") -> None:
    for variable, selectors in (("LAZYPATCH_DISABLE", configuration.disable),
                                ("LAZYPATCH_ENABLE", configuration.enable)):
        if not selectors:
            continue
        from ..decide.selection import select  # loaded already: the rules were adopted
        _, unmatched = select(selectors)
        if unmatched:
            from ..decide.unmatched_selectors import selector_candidates
            patches = list(STATE.catalog.by_name.values())
            candidates = selector_candidates()
            hints = "".join(_configuration.suggestion(selector, candidates)
                            for selector in unmatched)
            example = next((f"'{patch.name.split('.', 1)[0]}.*'" for patch in patches
                            if "." in patch.name), "'pack.*'")
            _configuration.alert(
                f"lazypatch: {variable} names {', '.join(map(repr, unmatched))}, which "
                f"match no registered patch{hints}; give names, globs such as {example}, "
                f"packs or tags (`lazypatch list` shows them)")


DEVICE_NOTICE_VARIABLE = "LAZYPATCH_DEVICE_NOTICE_SHOWN"


def _announce_device_redirect(configuration: "_configuration.Configuration") -> None:
    """With the device pack on, say once per process tree (rank 0, on stderr) where
    CUDA calls go; a log level of WARNING or above silences it.

    Decided without importing torch: LAZYPATCH_DEVICE when set, else the NPU when
    torch_npu is installed (if it sees one), else the CPU, as the pack decides.
    """
    by_name = STATE.catalog.by_name
    # Every name searched at once, each after a "\0": no walk over every patch unless a
    # name starts with "device." (the device pack is opt-in: usually none does).
    if "\0device." not in "\0" + "\0".join(by_name) or not any(
            patch.enabled and patch.name.startswith("device.") for patch in by_name.values()):
        return
    if os.environ.get(DEVICE_NOTICE_VARIABLE) or _configuration.current_rank() != 0:
        return
    level = configuration.log_level
    numeric = int(level) if level and level.isascii() and level.isdigit() else 0
    if level and _configuration.LOG_LEVELS.get(level, numeric) >= _configuration.LOG_LEVELS["WARNING"]:
        return
    chosen = _configuration.setting("LAZYPATCH_DEVICE").strip().lower()
    if chosen:
        # Named as the user set it: the variable, or the file's key (`device` in a
        # pyproject.toml), so that the user finds where to change it.
        where = f"'{chosen}' ({_configuration.setting_source('LAZYPATCH_DEVICE')})"
    else:
        from ..decide.requirements import installed_version
        where = ("the NPU if torch_npu sees one, else the CPU" if installed_version("torch_npu")
                 else "the CPU (torch_npu is not installed)")
        where += "; LAZYPATCH_DEVICE or `lazypatch run --device` chooses"
    os.environ[DEVICE_NOTICE_VARIABLE] = "1"
    try:
        sys.stderr.write(f"lazypatch: device pack enabled: CUDA calls go to {where}\n")
    except Exception:   # no usable stderr: nothing to tell
        pass


def activation_info() -> "Dict[str, object]":
    """Whether and how this process activated lazypatch: ``activated_by`` ("" when not),
    ``milliseconds``, ``imported_before`` (watched targets imported earlier), ``strict``,
    ``report_path``, ``sources`` (patch name -> where activation registered it from) and
    ``settings`` (this process's settings fingerprint, the launcher's from PYTHONLAZYPATCH,
    the differences)."""
    info = STATE.activation
    configuration = STATE.configuration
    return {"active": bool(info.activated_by), "activated_by": info.activated_by,
            "milliseconds": info.milliseconds, "imported_before": list(info.imported_before),
            "strict": STATE.strict, "sources": dict(info.sources),
            "report_path": configuration.report_path if configuration is not None else "",
            "settings": _configuration.settings_facts(configuration)}

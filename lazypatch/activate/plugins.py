"""Plugin packs shipped by other distributions, found without ``importlib.metadata``.

A distribution declares patches for lazypatch in its ``entry_points.txt``::

    [lazypatch]
    mmcv.ops = acme_patches.mmcv_ops:apply     # module:function, called as fn(module[, patch])
    mmdet = acme_patches.mmdet_compat           # a module: importing it declares patches

The entry point's *name* is the target module and its *value* is the pack
(wrapt's ``module:function`` post-import hooks are the model). At activation
each entry becomes one small lazypatch patch on its target named
``<distribution>.<target>`` and tagged ``plugin`` and ``<distribution>``;
the pack module itself is imported only when that target is imported, never
at activation.

Why not ``importlib.metadata.entry_points()``: in the full stack environment
it costs about ten times the whole activation budget (benchmarks/COSTS.md).
Instead this module lists the ``*.dist-info`` and
``*.egg-info`` directories on ``sys.path`` and reads only their
``entry_points.txt`` with plain string parsing. The result is cached per
interpreter in a small text file (the ``LAZYPATCH_CACHE_DIR`` setting: the
variable or the ``cache_dir`` TOML key; else ``$XDG_CACHE_HOME/lazypatch``,
else ``~/.cache/lazypatch``), one section per
``sys.path`` directory keyed by that directory's modification time:
installing or removing a distribution adds or removes a directory entry,
which changes the mtime and invalidates that section only; the
``entry_points.txt`` files that declared packs are stat'ed too, so editing
one in place is noticed. A cache hit costs one ``stat`` per ``sys.path``
directory and one small file read. Distributions inside zip files on
``sys.path`` are not scanned.
"""

import os
import sys

from ..errors import ConfigurationWarning
from ..state import AFTER, BEFORE, STATE
from .plugin_cache import (
    CACHE_FORMAT,
    MAX_CACHED_DIRECTORIES,
    cache_file,
    first_of_each_distribution,
    modification_time,
    read_cache,
    search_path,
    section_is_current,
)
from .plugin_entries import PluginEntry

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Sequence, Tuple

GROUP = "lazypatch"
TAG = "plugin"


# --- discovery ------------------------------------------------------------

def normalise_distribution(name: str) -> str:
    """``Acme-Patches`` and ``acme.patches`` -> ``acme_patches``: PEP 503 normalisation
    with ``_`` as separator, so that it can start a dotted patch name."""
    from ..decide.distributions import canonical_name
    return canonical_name(name.strip()).replace("-", "_")


def parse_entry_points(text: str, group: str = GROUP) -> "List[Tuple[str, str]]":
    """``(name, value)`` pairs of one section of an ``entry_points.txt`` text.

    The INI-like format of the packaging specification: ``[group]`` headers,
    ``name = value`` lines, ``#``/``;`` comments; extras (``value [extra]``)
    are dropped because lazypatch does not install anything.
    """
    pairs = []
    in_group = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line[0] == "[" and line[-1] == "]":
            in_group = line[1:-1].strip() == group
            continue
        if not in_group or "=" not in line:
            continue
        name, _, value = line.partition("=")
        value = value.split("[", 1)[0].strip()
        if name.strip() and value:
            pairs.append((name.strip(), value))
    return pairs


def scan_directory(directory: str) -> "List[PluginEntry]":
    """The ``[lazypatch]`` entry points of the distributions installed in one directory."""
    # Imported here, on a stale cache only: a warm start never lists a directory.
    from ..decide.distributions import metadata_entries
    entries: "List[PluginEntry]" = []
    for name, distribution, _ in metadata_entries(directory):
        location = os.path.join(directory, name)
        try:
            with open(os.path.join(location, "entry_points.txt"), encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError):
            continue
        if "[" + GROUP not in text:
            continue
        for target, value in parse_entry_points(text):
            entries.append(PluginEntry(normalise_distribution(distribution), target, value,
                                       location))
    return entries


def scan(path: "Optional[Sequence[str]]" = None) -> "List[PluginEntry]":
    """Every ``[lazypatch]`` entry point on ``path`` (default ``sys.path``), uncached."""
    entries: "List[PluginEntry]" = []
    for directory in search_path(path):
        entries += scan_directory(directory)
    return first_of_each_distribution(entries)


def _write_cache(filename: str, sections: "Dict[str, Tuple[int, List[PluginEntry]]]") -> None:
    lines = [CACHE_FORMAT]
    for directory, (mtime, entries) in list(sections.items())[-MAX_CACHED_DIRECTORIES:]:
        lines.append(f"dir {directory}\t{mtime}")
        for entry in entries:
            stamp = modification_time(os.path.join(entry.location, "entry_points.txt"))
            lines.append("ep " + "\t".join((entry.distribution, entry.target, entry.value,
                                             entry.location, str(stamp))))
    from ..files import atomic_write
    try:
        os.makedirs(os.path.dirname(filename), exist_ok=True)
        # atomic: ranks starting together never see half a file
        atomic_write(filename, "\n".join(lines) + "\n")
    except OSError:
        pass   # a cache that cannot be written only costs the next process a scan


def discover(path: "Optional[Sequence[str]]" = None, use_cache: bool = True) -> "List[PluginEntry]":
    """The ``[lazypatch]`` entry points on ``path`` (default ``sys.path``), cached.

    An unwritable cache directory only costs a rescan; it never fails.
    """
    directories = search_path(path)
    if not use_cache:
        return scan(directories)
    filename = cache_file()
    sections = read_cache(filename)
    changed = False
    entries: "List[PluginEntry]" = []
    for directory in directories:
        cached = sections.get(directory)
        if cached is None or not section_is_current(cached[0], cached[1], directory):
            mtime = modification_time(directory)
            cached = (mtime, scan_directory(directory))
            sections.pop(directory, None)
            sections[directory] = cached   # newest last: trimming drops the oldest
            changed = True
        entries += cached[1]
    if changed:
        _write_cache(filename, sections)
    return first_of_each_distribution(entries)


# --- registration ---------------------------------------------------------

def _split_value(entry: "PluginEntry") -> "Tuple[str, str]":
    """``module:function`` -> (module, function); raise ValueError naming the fix."""
    module, _, attribute = entry.value.partition(":")
    module, attribute = module.strip(), attribute.strip()
    parts = module.split(".") + (attribute.split(".") if attribute else [])
    if not module or not all(part.isidentifier() for part in parts):
        raise ValueError(f"entry point {entry.target} = {entry.value} of distribution "
                         f"{entry.distribution!r} ({entry.location}) is not 'module' or "
                         f"'module:function'; fix its [lazypatch] section")
    return module, attribute


def _resolve(module_name: str, attribute: str) -> "Any":
    __import__(module_name)
    obj: "Any" = sys.modules[module_name]
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj


def _function_loader(entry: "PluginEntry", module_name: str, attribute: str) -> "Any":
    def load_plugin_function(module: "Any", patch: "Any") -> None:
        from ..declare.argument_checks import takes_context
        function = _resolve(module_name, attribute)
        if takes_context(function, entry.patch_name):
            function(module, patch)
        else:
            function(module)
    load_plugin_function.__doc__ = (f"plugin pack {entry.value} from distribution "
                                    f"{entry.distribution}, called with {entry.target}")
    return load_plugin_function


def _module_loader(entry: "PluginEntry", module_name: str) -> "Any":
    def load_plugin_module(module: "Any", patch: "Any") -> None:
        from ..apply.application import run_patches
        __import__(module_name)
        # The pack just declared its patches; its before_import patches on this
        # very target missed this pass (it was snapshotted), so run them now.
        # This patch itself is claimed, so it is not run twice.
        run_patches(entry.target, module, BEFORE)
    load_plugin_module.__doc__ = (f"plugin pack module {entry.value} from distribution "
                                  f"{entry.distribution}, imported with {entry.target}")
    return load_plugin_module


def register_entry(entry: "PluginEntry") -> str:
    """Register the patch that loads ``entry``'s pack when its target is imported."""
    from ..declare.registration import FIRST, register
    module_name, attribute = _split_value(entry)
    if attribute:
        function, phase, priority = _function_loader(entry, module_name, attribute), AFTER, 0
    else:
        # A module pack is imported just before its target's body runs, first of
        # all, so that the before_import and when_imported patches it declares
        # all take part in this very import. If the target is already imported,
        # a before-import hook would wait for a reload: load it at once instead.
        function = _module_loader(entry, module_name)
        if entry.target in sys.modules:
            phase, priority = AFTER, FIRST
        else:
            phase, priority = BEFORE, FIRST
    name = register(function, entry.target, phase=phase, name=entry.patch_name,
                    priority=priority, tags=(TAG, entry.distribution))
    with STATE.lock:
        STATE.plugin_entries[name] = entry
    return name


def register_plugin_packs(path: "Optional[Sequence[str]]" = None) -> "List[str]":
    """Register every plugin pack on ``path`` (default ``sys.path``); return the patch names.

    A malformed entry point warns (``ConfigurationWarning``) and is skipped;
    it never stops activation.
    """
    names = []
    for entry in discover(path):
        if entry.patch_name in STATE.plugin_entries or entry.patch_name in STATE.catalog.by_name:
            continue   # activation ran twice, or two copies of one distribution
        try:
            names.append(register_entry(entry))
        except (ValueError, TypeError) as error:
            from ..notices import notify  # only on this path: see benchmarks/COSTS.md
            notify(f"lazypatch: plugin pack skipped: {error}", ConfigurationWarning, stacklevel=2)
    return names

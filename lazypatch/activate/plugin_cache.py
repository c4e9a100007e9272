"""The plugin cache: which ``[lazypatch]`` entry points are on ``sys.path``, read cheaply.

Activation asks this module first, on every start of every process: with a
current cache that lists no plugin pack (the usual case), that is one small
file read and one ``stat`` per ``sys.path`` directory, and ``plugins.py``
(scanning, writing the cache, registering packs) is never imported
(benchmarks/COSTS.md).

One text file per interpreter, with a section per directory ever seen on
its sys.path: "dir <path>\t<mtime_ns>" then its entries. A section is
valid while the directory's mtime is unchanged (installing or removing a
distribution adds or removes an entry in it) and the entry_points.txt files
it lists are unchanged. Only stale directories are listed again, so a new
script directory on sys.path[0] costs one listdir, not a full rescan.
"""

import os
import sys

from .configuration import setting

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List, Optional, Sequence, Tuple

    from .plugin_entries import PluginEntry

CACHE_FORMAT = "lazypatch-plugins 2"


def search_path(path: "Optional[Sequence[str]]") -> "List[str]":
    entries = []
    for entry in (sys.path if path is None else path):
        if not isinstance(entry, str):
            continue
        entry = entry or os.getcwd()   # '' means the current directory, as for imports
        if entry not in entries:
            entries.append(entry)
    return entries


def first_of_each_distribution(entries: "List[PluginEntry]") -> "List[PluginEntry]":
    # The first directory on the path that declares a distribution wins, as for imports.
    owner: "Dict[str, str]" = {}
    kept = []
    for entry in entries:
        directory = owner.setdefault(entry.distribution, entry.location)
        if directory == entry.location:
            kept.append(entry)
    return kept


MAX_CACHED_DIRECTORIES = 64


def cache_directory() -> str:
    """Where the plugin cache lives (may not exist yet): the LAZYPATCH_CACHE_DIR setting
    (environment, LAZYPATCH_CONFIG or pyproject.toml, as every setting), else the XDG one."""
    configured = setting("LAZYPATCH_CACHE_DIR").strip()
    if configured:
        return configured
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or \
        os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "lazypatch")


def modification_time(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1


def cache_file() -> str:
    """This interpreter's cache file."""
    # hash() of a tuple of ints is not randomised per process (str hashes are),
    # and it avoids importing zlib or hashlib on the start-up path.
    identity = f"{sys.prefix}\n{sys.executable}\n{sys.implementation.cache_tag}"
    digest = hash(tuple(identity.encode("utf-8", "surrogateescape"))) & 0xFFFFFFFFFFFF
    return os.path.join(cache_directory(), f"plugins-{digest:012x}.txt")


def read_cache(filename: str) -> "Dict[str, Tuple[int, List[PluginEntry]]]":
    """``{directory: (mtime, entries)}``; empty when the file is missing or foreign."""
    try:
        with open(filename, encoding="utf-8") as handle:
            lines = handle.read().split("\n")
    except (OSError, UnicodeDecodeError):
        return {}
    if not lines or lines[0] != CACHE_FORMAT:
        return {}
    sections: "Dict[str, Tuple[int, List[PluginEntry]]]" = {}
    current: "Optional[List[PluginEntry]]" = None
    for line in lines[1:]:
        kind, _, rest = line.partition(" ")
        fields = rest.split("\t")
        if kind == "dir" and len(fields) == 2 and fields[1].lstrip("-").isdigit():
            current = []
            sections[fields[0]] = (int(fields[1]), current)
        elif kind == "ep" and len(fields) == 5 and current is not None:
            # Its module only when a cache lists an entry: usually none does.
            from .plugin_entries import PluginEntry
            current.append(PluginEntry(fields[0], fields[1], fields[2], fields[3]))
            current[-1].stamp = fields[4]
        elif line:
            return {}   # damaged: rebuild
    return sections


def section_is_current(recorded: int, entries: "List[PluginEntry]", directory: str) -> bool:
    if modification_time(directory) != recorded:
        return False
    for entry in entries:   # an entry_points.txt edited in place (a developer's own dist)
        stamp = str(modification_time(os.path.join(entry.location, "entry_points.txt")))
        if entry.stamp and entry.stamp != stamp:
            return False
    return True


def cached_entries(path: "Optional[Sequence[str]]" = None) -> "Optional[List[PluginEntry]]":
    """The entry points on ``path`` (default ``sys.path``) as the cache has them, or None
    when any directory of it is missing from the cache or changed since (rescan)."""
    sections = read_cache(cache_file())
    entries: "List[PluginEntry]" = []
    for directory in search_path(path):
        cached = sections.get(directory)
        if cached is None or not section_is_current(cached[0], cached[1], directory):
            return None
        entries += cached[1]
    return first_of_each_distribution(entries)

"""Installed distributions, read from ``*.dist-info`` / ``*.egg-info`` names on ``sys.path``.

The one scanner of distribution metadata: requirement checks ask it for a
version, plugin discovery for the metadata directories of one ``sys.path``
entry. It never imports the packages it describes, and it does not import
``importlib.metadata`` (see benchmarks/COSTS.md) unless a ``sys.path`` entry
is not a plain directory (a zip or egg), where a listing cannot see the
metadata.

Listings are cached per directory by its mtime: installing or removing a
distribution adds or removes an entry there, which changes the mtime. The
cache is a memo of the file system, not engine state: it cannot change
what any patch does, only how fast the answer comes.
"""

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

# directory -> (mtime, [(metadata entry name, distribution name, version)])
_listings: "Dict[str, Tuple[float, List[Tuple[str, str, str]]]]" = {}
# directory -> (mtime, {canonical name: version})
_versions: "Dict[str, Tuple[float, Dict[str, str]]]" = {}
# directory -> (mtime, {top-level import name: [(distribution name, version)]})
_top_levels: "Dict[str, Tuple[float, Dict[str, List[Tuple[str, str]]]]]" = {}


def canonical_name(name: str) -> str:
    """Normalise a distribution name as PEP 503 does (``Foo_Bar`` -> ``foo-bar``)."""
    out = []
    previous_separator = False
    for character in name.lower():
        if character in "-_.":
            if not previous_separator:
                out.append("-")
            previous_separator = True
        else:
            out.append(character)
            previous_separator = False
    return "".join(out)


def split_metadata_directory(entry: str) -> "Optional[Tuple[str, str]]":
    """(distribution name, version or "") of a ``*.dist-info``/``*.egg-info`` entry
    name such as ``acme_patches-1.0.dist-info``; None for any other name."""
    for suffix in (".dist-info", ".egg-info"):
        if entry.endswith(suffix):
            name, _, version = entry[:-len(suffix)].partition("-")
            # "name-1.0-py3.11.egg-info" carries the Python tag after the version.
            return name, version.split("-", 1)[0]
    return None


def _version_from_metadata_file(path: str) -> "Optional[str]":
    for file_name in ("METADATA", "PKG-INFO"):
        candidate = path if os.path.isfile(path) else os.path.join(path, file_name)
        try:
            with open(candidate, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    if line.startswith("Version:"):
                        return line[len("Version:"):].strip()
                    if not line.strip():
                        break
        except OSError:
            continue
    return None


def _mtime(directory: str) -> "Optional[float]":
    try:
        return os.stat(directory).st_mtime
    except OSError:
        return None


def _memoised_by_mtime(cache: "Dict[str, Tuple[float, Any]]", directory: str,
                       build: "Callable[[str], Any]", empty: "Any") -> "Any":
    """``build(directory)``, remembered in ``cache`` until the directory's mtime changes
    (installing or removing a distribution adds or removes an entry there); ``empty``
    when the directory cannot be looked at."""
    mtime = _mtime(directory)
    if mtime is None:
        return empty
    cached = cache.get(directory)
    if cached is not None and cached[0] == mtime:
        return cached[1]
    found = build(directory)
    cache[directory] = (mtime, found)
    return found


def metadata_entries(directory: str) -> "List[Tuple[str, str, str]]":
    """(entry name, distribution name, version or "") for every metadata directory
    in ``directory``, sorted by entry name; empty when it cannot be listed."""
    return _memoised_by_mtime(_listings, directory, _list_metadata_entries, [])


def _list_metadata_entries(directory: str) -> "List[Tuple[str, str, str]]":
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        names = []   # not a directory (zip file), no permission
    found = []
    for entry in names:
        parsed = split_metadata_directory(entry)
        if parsed is not None:
            found.append((entry, parsed[0], parsed[1]))
    return found


def _versioned_entries(directory: str) -> "Iterator[Tuple[str, str, str]]":
    """(entry name, distribution name, version) for the entries whose version is known,
    from the entry's name or else its METADATA/PKG-INFO file."""
    for entry, name, version in metadata_entries(directory):
        if not version:
            version = _version_from_metadata_file(os.path.join(directory, entry)) or ""
        if version:
            yield entry, name, version


def distributions_in(directory: str) -> "Dict[str, str]":
    """Map canonical distribution name -> version for one ``sys.path`` directory."""
    return _memoised_by_mtime(_versions, directory, _read_versions, {})


def _read_versions(directory: str) -> "Dict[str, str]":
    found: "Dict[str, str]" = {}
    for _, name, version in _versioned_entries(directory):
        found.setdefault(canonical_name(name), version)
    return found


def _names_from_record(path: str) -> "List[str]":
    """First path components of the files a ``RECORD`` lists, as import names
    (``cv2/__init__.py`` -> ``cv2``, ``six.py`` -> ``six``, ``_x.cpython-311-...so`` -> ``_x``)."""
    names: "List[str]" = []
    try:
        with open(os.path.join(path, "RECORD"), encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return names
    for line in lines:
        first = line.split(",", 1)[0].split("/", 1)
        component = first[0]
        if len(first) == 1:     # a module file beside the packages, not a directory
            if not component.endswith((".py", ".so", ".pyd")):
                continue
            component = component.split(".", 1)[0]
        if not component.isidentifier() or component == "__pycache__":
            continue             # "..", "name-1.0.dist-info", "name.data", scripts
        if component not in names:
            names.append(component)
    return names


def top_level_names(directory: str, entry: str) -> "List[str]":
    """Import names a distribution's metadata directory provides: its ``top_level.txt``,
    else the first path components in its ``RECORD``."""
    path = os.path.join(directory, entry)
    try:
        with open(os.path.join(path, "top_level.txt"), encoding="utf-8", errors="replace") as handle:
            # setuptools writes "pkg/sub" for namespace packages: the top is what imports.
            listed = [line.strip().replace("\\", "/").split("/", 1)[0] for line in handle]
        return [name for name in listed if name]
    except OSError:
        return _names_from_record(path)


def providers_in(directory: str) -> "Dict[str, List[Tuple[str, str]]]":
    """Map top-level import name -> [(distribution name, version)] for one ``sys.path``
    directory, in metadata entry order; read only when a requirement names
    something that is not a distribution, and cached by the directory's mtime."""
    return _memoised_by_mtime(_top_levels, directory, _read_providers, {})


def _read_providers(directory: str) -> "Dict[str, List[Tuple[str, str]]]":
    found: "Dict[str, List[Tuple[str, str]]]" = {}
    for entry, name, version in _versioned_entries(directory):
        for import_name in top_level_names(directory, entry):
            found.setdefault(import_name, []).append((name, version))
    return found


def import_name_providers(name: str) -> "List[Tuple[str, str]]":
    """(distribution name, version) of every installed distribution that provides the
    top-level import name ``name``, in ``sys.path`` order (the first one is what an
    import of a plain package finds first), importing nothing."""
    found: "List[Tuple[str, str]]" = []
    needs_metadata_fallback = False
    for entry in sys.path:
        if not isinstance(entry, str):
            continue
        directory = entry or os.getcwd()
        if os.path.isdir(directory):
            for provider in providers_in(directory).get(name, ()):
                if provider not in found:
                    found.append(provider)
        elif os.path.exists(directory):
            needs_metadata_fallback = True
    if not found and needs_metadata_fallback:
        from importlib import metadata
        for distribution in metadata.packages_distributions().get(name, ()):
            try:
                found.append((distribution, metadata.version(distribution)))
            except metadata.PackageNotFoundError:
                continue
    return found


def findable(top_level: str) -> bool:
    """Whether an import of top-level module ``top_level`` would find something, asking
    the finders on ``sys.meta_path`` where (never importing it: finders only locate).
    A finder that fails to answer counts as yes, so the metadata still decides."""
    if top_level in sys.modules:
        return True
    from ..state import STATE
    for finder in sys.meta_path:
        if finder is STATE.finder:
            continue        # lazypatch's own finder only hands on what the others find
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            return True     # a legacy find_module finder: cannot ask without loading
        try:
            if find_spec(top_level, None) is not None:
                return True
        except Exception:
            return True
    return False


def installed_version(name: str) -> "Optional[str]":
    """The installed version of distribution ``name``, or None, importing nothing."""
    key = canonical_name(name)
    needs_metadata_fallback = False
    for entry in sys.path:
        if not isinstance(entry, str):
            continue
        directory = entry or os.getcwd()
        if os.path.isdir(directory):
            version = distributions_in(directory).get(key)
            if version is not None:
                return version
        elif os.path.exists(directory):
            needs_metadata_fallback = True
    if needs_metadata_fallback:
        from importlib import metadata
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None
    return None

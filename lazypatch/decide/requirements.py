"""Requirements (PEP 508) on installed distributions, checked without importing them.

A patch's ``requires`` is a list of PEP 508 requirement strings. They are
checked at registration (so that a typo fails early, naming the bad string:
declare/registration.py checks the simplest forms itself and has the others
parsed here) and evaluated when the target is imported, against the *installed
distribution metadata*: importing a package to read its ``__version__`` is
exactly the eager behaviour lazypatch exists to avoid. A requirement's name
is a distribution or an import name (``mmcv`` installed as ``mmcv-lite``);
only a module with no distribution at all is asked for its ``__version__``,
and only when it is being imported anyway or already is (``find_version``).

Installed versions are read from ``*.dist-info`` / ``*.egg-info`` directory
names on ``sys.path``; ``importlib.metadata`` (see benchmarks/COSTS.md) is only
consulted when a ``sys.path`` entry is not a plain directory (a zip or egg),
where a directory listing cannot see the metadata.
"""

import sys

from .versions import InvalidVersion, Version, parse_specifiers

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Any, Callable, Dict, Iterable, Optional, Tuple, Union

    Marker = Callable[[Dict[str, str]], bool]

_NAME_CHARACTERS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


class Requirement:
    """A parsed PEP 508 requirement: name, specifiers and an optional marker."""

    __slots__ = ("text", "name", "specifiers", "marker")

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"requirement must be a string such as 'mmcv>=2.0', "
                            f"got {text!r}")
        self.text = text
        requirement, _, marker_text = text.partition(";")
        requirement = requirement.strip()
        if "@" in requirement:
            raise ValueError(f"invalid requirement {text!r}: direct references "
                             f"('name @ url') cannot be checked; use a version "
                             f"specifier such as 'name>=1.0'")
        position = 0
        while position < len(requirement) and requirement[position] in _NAME_CHARACTERS:
            position += 1
        name = requirement[:position]
        if not name or not name[0].isalnum() or not name[-1].isalnum():
            raise ValueError(f"invalid requirement {text!r}: it must start with a "
                             f"distribution name, as in 'mmcv>=2.0,<2.2'")
        rest = requirement[position:].strip()
        if rest.startswith("["):
            closing = rest.find("]")
            if closing < 0:
                raise ValueError(f"invalid requirement {text!r}: unclosed '[' of extras")
            rest = rest[closing + 1:].strip()
        if rest.startswith("(") and rest.endswith(")"):
            rest = rest[1:-1]
        self.name = name
        try:
            self.specifiers = parse_specifiers(rest)
        except ValueError as error:
            raise ValueError(f"invalid requirement {text!r}: {error}") from None
        marker_text = marker_text.strip()
        if marker_text:
            from .markers import parse_marker  # only a marker needs it: see benchmarks/COSTS.md
            self.marker: "Optional[Marker]" = parse_marker(marker_text, text)
        else:
            self.marker = None

    @property
    def key(self) -> str:
        """The distribution name, normalised as PEP 503 does."""
        from .distributions import canonical_name
        return canonical_name(self.name)

    def __repr__(self) -> str:
        return f"Requirement({self.text!r})"

    def __str__(self) -> str:
        return self.text

    def unmet_reason(self, module: "Any" = None) -> "Optional[str]":
        """Why this requirement is not met now, or None when it is."""
        return self.evaluate(module)[0]

    def evaluate(self, module: "Any" = None) -> "Tuple[Optional[str], str]":
        """(why it is not met or None, where the version came from: ``distribution X``,
        ``X.__version__`` or "" when nothing gave one). ``module`` is the module being
        imported, whose ``__version__`` is the last resort (see ``find_version``)."""
        if self.marker is not None:
            from .markers import marker_environment
            if not self.marker(marker_environment()):
                return None, ""
        found = find_version(self.name, module)
        if found is None:
            # Neither a distribution of that name, nor one providing that import
            # name, nor a __version__ of the module: "not installed" says it all.
            return f"requires {self.text}: {self.name} is not installed", ""
        installed, source = found
        if not self.specifiers:
            return None, source
        try:
            version = Version(installed)
        except InvalidVersion:
            return (f"requires {self.text}: installed {self.name} {installed} ({source}) has "
                    f"a non-PEP 440 version"), source
        for specifier in self.specifiers:
            if not specifier.contains(version):
                return f"requires {self.text}: installed {self.name} is {installed} ({source})", source
        return None, source


def find_version(name: str, module: "Any" = None) -> "Optional[Tuple[str, str]]":
    """(version, source) of what a requirement names, importing nothing.

    Users write requirements in terms of what they import: ``mmcv`` is often
    the distribution ``mmcv-lite`` or ``mmcv-full``, ``cv2`` is
    ``opencv-python-headless``. So, in order: the distribution of that name;
    the distributions whose top-level import names include it (the first on
    ``sys.path``; the source names the others too); the ``__version__`` of
    the module itself when it is ``module`` (being imported right now) or
    already in ``sys.modules`` (a vendored package with no metadata).
    """
    # Imported on first check, not when packs declare requirements at activation.
    from .distributions import findable, import_name_providers, installed_version
    version = installed_version(name)
    if version is not None:
        return version, f"distribution {name}"
    import_name = name.replace("-", "_")
    if module is None or getattr(module, "__name__", None) != import_name:
        module = sys.modules.get(import_name)   # the module itself, if imported or importing
    if module is None and not findable(import_name.split(".", 1)[0]):
        # Nothing on sys.path or sys.meta_path has that module: "not installed", without
        # reading the RECORD of every installed distribution to learn which one provides
        # the name (the ascend pack's torch_npu requirements cost `import torch` 100M
        # instructions that way on a stack of 55 distributions).
        return None
    providers = import_name_providers(import_name)
    if providers:
        distribution, version = providers[0]
        source = f"distribution {distribution}"
        if len(providers) > 1:
            others = ", ".join(f"{other} {other_version}" for other, other_version in providers[1:])
            source += f", the first of the distributions providing {import_name} (also {others})"
        return version, source
    version = getattr(module, "__version__", None) if module is not None else None
    if isinstance(version, str) and version:
        return str(version), f"{import_name}.__version__"
    return None


_parsed: "Dict[str, Requirement]" = {}


def parse_requirements(requirements: "Iterable[Union[str, Requirement]]") -> "Tuple[Requirement, ...]":
    """Parse requirement strings (parsed ones pass through), raising ValueError/TypeError
    naming a bad one.

    Parsed requirements are immutable and packs repeat the same strings
    ("torch_npu", "mmcv>=2.0"), so each distinct string is parsed once per
    process: registration runs at activation, inside its 10 ms budget.
    """
    if isinstance(requirements, str):
        requirements = (requirements,)
    elif requirements.__class__ is not tuple:
        requirements = tuple(requirements)   # (a list, as packs write them; iterated once)
    # The same lists come back (a pack's patches share them; a decorator's parsed tuple
    # is checked again when it registers): one dict lookup then.
    try:
        known = _parsed_lists.get(requirements)
    except TypeError:   # an unhashable item: the loop below names it
        known = None
    if known is not None:
        return known
    parsed = []
    for text in requirements:
        if isinstance(text, Requirement):
            parsed.append(text)
            continue
        requirement = _parsed.get(text) if isinstance(text, str) else None
        if requirement is None:
            requirement = Requirement(text)
            _parsed[text] = requirement
        parsed.append(requirement)
    result = tuple(parsed)
    _parsed_lists[requirements] = _parsed_lists[result] = result
    return result


# Tuples of requirements (strings or parsed) -> the parsed tuple; see parse_requirements.
_parsed_lists: "Dict[Tuple[Any, ...], Tuple[Requirement, ...]]" = {}


def version_matches(version: str, specifiers: str) -> bool:
    """Whether a version string satisfies a specifier set such as ``>=2.0,<2.2``."""
    candidate = Version(version)
    return all(specifier.contains(candidate) for specifier in parse_specifiers(specifiers))


def installed_version(name: str) -> "Optional[str]":
    """The installed version of distribution ``name``, or None, importing nothing."""
    from .distributions import installed_version as read
    return read(name)

"""PEP 440 versions and specifiers, parsed without ``re`` or ``packaging``.

Registration validates every requirement string, and registration happens at
activation, whose budget ``packaging.requirements`` alone would exceed several
times over (and ``re`` would take a quarter of it; see benchmarks/COSTS.md),
so this module parses by hand and imports nothing.

It agrees with ``packaging`` 26 (the test oracle, never imported here):
versions are matched as its reference regex matches them (first match in
the regex's order of trial, ASCII digits only), and specifiers are the
intervals it gives each operator; what it refuses as a specifier (a local
label in ``>=2.0+cpu``, ``.*`` after a pre-release, ``~=`` on one release
segment) is refused at registration. tests/decide/test_versions_differential.py
checks both on generated versions and specifiers. Environment markers
(requirements.py) still lack PEP 508's string-comparison fallback.
"""

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Optional, Tuple


_PRE_SPELLINGS = {
    "a": "a", "alpha": "a",
    "b": "b", "beta": "b",
    "rc": "rc", "c": "rc", "pre": "rc", "preview": "rc",
}
_POST_SPELLINGS = ("post", "rev", "r")
_DEV_SPELLING = "dev"
_SEPARATORS = ".-_"

# Sort keys for the optional segments, following PEP 440's ordering:
# 1.0.dev0 < 1.0a1 < 1.0 < 1.0.post1.
_NEGATIVE_INFINITY = (-1,)
_INFINITY = (1 << 62,)


class InvalidVersion(ValueError):
    """A string is not a PEP 440 version."""


class Version:
    """A parsed PEP 440 version that orders like ``packaging.version.Version``."""

    __slots__ = ("text", "epoch", "release", "pre", "post", "dev", "local", "_key")

    def __init__(self, text: str) -> None:
        self.text = text
        (self.epoch, self.release, self.pre, self.post, self.dev,
         self.local) = _parse(text)
        self._key = _sort_key(self)

    @property
    def is_prerelease(self) -> bool:
        return self.pre is not None or self.dev is not None

    @property
    def public(self) -> "Version":
        return self if not self.local else Version(self.text.split("+", 1)[0])

    def __repr__(self) -> str:
        return f"Version({self.text!r})"

    def __str__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __lt__(self, other: "Version") -> bool:
        return self._key < other._key

    def __le__(self, other: "Version") -> bool:
        return self._key <= other._key

    def __gt__(self, other: "Version") -> bool:
        return self._key > other._key

    def __ge__(self, other: "Version") -> bool:
        return self._key >= other._key


_DIGITS = "0123456789"
_LOCAL_CHARACTERS = set("abcdefghijklmnopqrstuvwxyz" + _DIGITS)
_PRE_LABELS = ("alpha", "a", "beta", "b", "preview", "pre", "c", "rc")   # PEP 440's regex order


def _digits_end(text: str, position: int) -> int:
    # ASCII digits only: str.isdigit() also accepts "٣", which PEP 440 does not.
    while position < len(text) and text[position] in _DIGITS:
        position += 1
    return position


def _optional_separator(text: str, position: int) -> "Tuple[int, ...]":
    """Positions after ``[-_.]?``, greedy first, as a regex would try them."""
    if position < len(text) and text[position] in _SEPARATORS:
        return (position + 1, position)
    return (position,)


def _optional_number(text: str, position: int) -> "Tuple[Tuple[int, Optional[int]], ...]":
    """(position after, number or None) for ``[0-9]+)?``, longest first. No part that
    can follow starts with a digit, so shorter digit runs never match where the longest failed."""
    end = _digits_end(text, position)
    if end == position:
        return ((position, None),)
    return ((end, int(text[position:end])), (position, None))


def _labelled(text: str, position: int, labels: "Tuple[str, ...]"):
    """Every way ``[-_.]?(label)[-_.]?([0-9]+)?`` matches at ``position``, in the
    order PEP 440's reference regex tries them: (position after, label, number)."""
    for after_separator in _optional_separator(text, position):
        for label in labels:
            if text.startswith(label, after_separator):
                after_label = after_separator + len(label)
                for after_second in _optional_separator(text, after_label):
                    for end, number in _optional_number(text, after_second):
                        yield end, label, number


def _pre_options(text: str, position: int):
    for end, label, number in _labelled(text, position, _PRE_LABELS):
        yield end, (_PRE_SPELLINGS[label], number or 0)
    yield position, None


def _post_options(text: str, position: int):
    if position < len(text) and text[position] == "-":
        end = _digits_end(text, position + 1)
        if end > position + 1:          # "1.0-1" is the implicit post-release spelling
            yield end, int(text[position + 1:end])
    for end, _label, number in _labelled(text, position, _POST_SPELLINGS):
        yield end, number or 0
    yield position, None


def _dev_options(text: str, position: int):
    for end, _label, number in _labelled(text, position, (_DEV_SPELLING,)):
        yield end, number or 0
    yield position, None


def _parse_local(text: str, original: str) -> "Tuple[object, ...]":
    parts = text.replace("-", ".").replace("_", ".").split(".")
    if not all(part and set(part) <= _LOCAL_CHARACTERS for part in parts):
        raise InvalidVersion(f"invalid local version label in {original!r}")
    return tuple(int(part) if part.isdigit() else part for part in parts)


def _parse(original: str):
    """The parts of a PEP 440 version, matched exactly as ``packaging``'s reference
    regex matches (case-insensitive, first match in the regex's order of trial)."""
    text = original.strip().lower()
    local: "Tuple[object, ...]" = ()
    if "+" in text:
        text, local_text = text.split("+", 1)
        local = _parse_local(local_text, original)
    if text.startswith("v"):
        text = text[1:]
    epoch = 0
    end = _digits_end(text, 0)
    if end and end < len(text) and text[end] == "!":
        epoch, text = int(text[:end]), text[end + 1:]
    release = []
    position = 0
    while True:
        end = _digits_end(text, position)
        if end == position:
            raise InvalidVersion(f"{original!r} is not a PEP 440 version")
        release.append(int(text[position:end]))
        position = end
        if position + 1 < len(text) and text[position] == "." and text[position + 1] in _DIGITS:
            position += 1
            continue
        break
    for after_pre, pre in _pre_options(text, position):
        for after_post, post in _post_options(text, after_pre):
            for after_dev, dev in _dev_options(text, after_post):
                if after_dev == len(text):
                    return epoch, tuple(release), pre, post, dev, local
    raise InvalidVersion(f"{original!r} is not a PEP 440 version")


def _sort_key(version: "Version"):
    release = list(version.release)
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    if version.pre is None and version.post is None and version.dev is not None:
        pre_key: Tuple[object, ...] = _NEGATIVE_INFINITY
    elif version.pre is None:
        pre_key = _INFINITY
    else:
        pre_key = (0, ("a", "b", "rc").index(version.pre[0]), version.pre[1])
    post_key = _NEGATIVE_INFINITY if version.post is None else (0, version.post)
    dev_key = _INFINITY if version.dev is None else (0, version.dev)
    local_key: Tuple[object, ...]
    if not version.local:
        local_key = ()     # sorts before every local label, as "no label" must
    else:
        # Numeric local segments sort above alphanumeric ones (PEP 440).
        local_key = tuple((1, part, "") if isinstance(part, int) else (0, 0, part)
                          for part in version.local)
    return (version.epoch, tuple(release), pre_key, post_key, dev_key, local_key)


_OPERATORS = ("===", "~=", "==", "!=", "<=", ">=", "<", ">")


class Specifier:
    """One PEP 440 version clause such as ``>=2.0`` or ``==1.4.*``."""

    __slots__ = ("operator", "version_text", "wildcard", "version")

    def __init__(self, text: str) -> None:
        text = text.strip()
        for operator in _OPERATORS:
            if text.startswith(operator):
                break
        else:
            raise ValueError(
                f"invalid version specifier {text!r}: it must start with one of "
                f"{', '.join(_OPERATORS)} (for example '>=2.0')")
        self.operator = operator
        self.version_text = text[len(operator):].strip()
        if operator == "===":
            # Arbitrary equality takes any string (PEP 440), compared as text.
            if not self.version_text or any(character.isspace() or character in ";)"
                                            for character in self.version_text):
                raise ValueError(f"invalid version specifier {text!r}")
            self.wildcard, self.version = False, None
            return
        self.wildcard = self.version_text.endswith(".*")
        if self.wildcard and operator not in ("==", "!="):
            raise ValueError(f"invalid version specifier {text!r}: '.*' is only "
                             f"allowed with '==' and '!='")
        try:
            version = Version(self.version_text[:-2] if self.wildcard else self.version_text)
        except InvalidVersion:
            raise ValueError(f"invalid version specifier {text!r}: "
                             f"{self.version_text!r} is not a PEP 440 version") from None
        # PEP 440's restrictions, as packaging enforces them: a local label only in
        # exact (in)equality, a wildcard only after a plain release.
        if version.local and (self.wildcard or operator not in ("==", "!=")):
            raise ValueError(f"invalid version specifier {text!r}: a local version label "
                             f"('+...') is only allowed with '==' and '!='")
        if self.wildcard and (version.pre or version.post is not None or version.dev is not None):
            raise ValueError(f"invalid version specifier {text!r}: '.*' may only follow a "
                             f"release such as '2.1'")
        if operator == "~=" and len(version.release) < 2:
            raise ValueError(f"invalid version specifier {text!r}: '~=' needs at "
                             f"least two release segments, as in '~=2.1'")
        self.version = version

    def __str__(self) -> str:
        return f"{self.operator}{self.version_text}"

    def contains(self, candidate: "Version") -> bool:
        """Whether ``candidate`` satisfies this clause, as ``packaging`` 26 decides.

        Pre-releases are accepted: this checks versions that are already
        installed, where pip also accepts them. Each operator is the interval
        PEP 440 gives it (packaging's ``_ranges``): ``==2.1.*`` is
        ``[2.1.dev0, 2.2.dev0)``, ``~=2.2`` is ``[2.2, 3.dev0)``, ``<2.2`` stops
        before ``2.2.dev0``, ``>2.2`` starts after every ``2.2.postN``.
        """
        operator, spec = self.operator, self.version
        if operator == "===":
            return candidate.text.lower() == self.version_text.lower()   # the raw strings
        assert spec is not None
        public = candidate.public
        if self.wildcard:
            inside = _with_parts(spec, dev=0) <= candidate < _next_prefix_dev0(spec.release, spec)
            return inside if operator == "==" else not inside
        if operator in ("==", "!="):
            matches = candidate == spec if spec.local else public == spec
            return matches if operator == "==" else not matches
        if operator == ">=":
            return public >= spec
        if operator == "<=":
            return public <= spec       # V+local is still V
        if operator == "~=":
            return public >= spec and public < _next_prefix_dev0(spec.release[:-1], spec)
        if operator == "<":
            # "<2.2" must not admit 2.2's own pre-releases (2.2.dev0 onwards) unless
            # the bound is itself a pre-release.
            bound = spec if spec.is_prerelease else _with_parts(spec, pre=spec.pre, post=spec.post, dev=0)
            return public < bound
        # ">": "must not allow a post-release of the given version unless V itself
        # is a post release"; after a dev or post release, the next one up.
        if spec.dev is not None:
            return public >= _with_parts(spec, pre=spec.pre, post=spec.post, dev=spec.dev + 1)
        if spec.post is not None:
            return public >= _with_parts(spec, pre=spec.pre, post=spec.post + 1, dev=0)
        if public <= spec:
            return False
        return not (public.post is not None and public.pre == spec.pre and
                    _release_key(public) == _release_key(spec))


def _with_parts(version: "Version", pre: "Optional[Tuple[str, int]]" = None,
                post: "Optional[int]" = None, dev: "Optional[int]" = None,
                release: "Optional[Tuple[int, ...]]" = None) -> "Version":
    """A version with ``version``'s epoch and release (or ``release``) and the given suffixes."""
    text = f"{version.epoch}!" + ".".join(map(str, release or version.release))
    if pre is not None:
        text += f"{pre[0]}{pre[1]}"
    if post is not None:
        text += f".post{post}"
    if dev is not None:
        text += f".dev{dev}"
    return Version(text)


def _next_prefix_dev0(prefix: "Tuple[int, ...]", version: "Version") -> "Version":
    """The first version after every version starting with ``prefix``: (2, 1) -> 2.2.dev0."""
    return _with_parts(version, dev=0, release=prefix[:-1] + (prefix[-1] + 1,))


def _release_key(version: "Version") -> "Tuple[int, ...]":
    release = list(version.release)
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    return (version.epoch,) + tuple(release)


def parse_specifiers(text: str) -> "Tuple[Specifier, ...]":
    """Parse a comma-separated specifier set such as ``>=2.0,<2.2``."""
    text = text.strip()
    if not text:
        return ()
    # Empty clauses are skipped, as packaging does: ">=2.0," is ">=2.0".
    return tuple(Specifier(part) for part in text.split(",") if part.strip())

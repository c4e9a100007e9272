"""PEP 440 versions and specifiers, parsed without ``re`` or ``packaging``.

Registration validates every requirement string, and registration happens at
activation, whose budget ``packaging.requirements`` alone would exceed several
times over (and ``re`` would take a quarter of it; see benchmarks/COSTS.md),
so this module parses by hand and imports nothing.
"""

from __future__ import annotations

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


def _read_number(text: str, position: int) -> Tuple[Optional[int], int]:
    start = position
    while position < len(text) and text[position].isdigit():
        position += 1
    if start == position:
        return None, position
    return int(text[start:position]), position


def _read_word(text: str, position: int) -> Tuple[str, int]:
    start = position
    while position < len(text) and text[position].isalpha():
        position += 1
    return text[start:position], position


def _skip_separator(text: str, position: int) -> int:
    if position < len(text) and text[position] in _SEPARATORS:
        return position + 1
    return position


def _parse(original: str):
    text = original.strip().lower()
    local: Tuple[object, ...] = ()
    if "+" in text:
        text, local_text = text.split("+", 1)
        parts = local_text.replace("-", ".").replace("_", ".").split(".")
        if not local_text or not all(part.isalnum() for part in parts):
            raise InvalidVersion(f"invalid local version label in {original!r}")
        local = tuple(int(part) if part.isdigit() else part for part in parts)
    if text.startswith("v"):
        text = text[1:]
    epoch = 0
    if "!" in text:
        epoch_text, text = text.split("!", 1)
        if not epoch_text.isdigit():
            raise InvalidVersion(f"invalid epoch in {original!r}")
        epoch = int(epoch_text)
    release = []
    position = 0
    while True:
        number, position = _read_number(text, position)
        if number is None:
            raise InvalidVersion(f"{original!r} is not a PEP 440 version")
        release.append(number)
        if position < len(text) and text[position] == "." and \
                position + 1 < len(text) and text[position + 1].isdigit():
            position += 1
            continue
        break
    pre = post = dev = None
    while position < len(text):
        after_separator = _skip_separator(text, position)
        word, after_word = _read_word(text, after_separator)
        if not word and text[position] == "-" and post is None and pre is None and dev is None:
            # "1.0-1" is the implicit post-release spelling.
            number, after_number = _read_number(text, after_separator)
            if number is None:
                raise InvalidVersion(f"{original!r} is not a PEP 440 version")
            post, position = number, after_number
            continue
        number, after_number = _read_number(text, _skip_separator(text, after_word))
        if word in _PRE_SPELLINGS and pre is None and post is None and dev is None:
            pre = (_PRE_SPELLINGS[word], number or 0)
        elif word in _POST_SPELLINGS and post is None and dev is None:
            post = number or 0
        elif word == _DEV_SPELLING and dev is None:
            dev = number or 0
        else:
            raise InvalidVersion(f"{original!r} is not a PEP 440 version")
        position = after_number if number is not None else after_word
    return epoch, tuple(release), pre, post, dev, local


def _sort_key(version: Version):
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
        self.wildcard = self.version_text.endswith(".*")
        if self.wildcard and operator not in ("==", "!="):
            raise ValueError(f"invalid version specifier {text!r}: '.*' is only "
                             f"allowed with '==' and '!='")
        if operator == "~=" and "." not in self.version_text:
            raise ValueError(f"invalid version specifier {text!r}: '~=' needs at "
                             f"least two release segments, as in '~=2.1'")
        if operator == "===":
            self.version = None
            return
        try:
            self.version = Version(self.version_text[:-2] if self.wildcard
                                   else self.version_text)
        except InvalidVersion:
            raise ValueError(f"invalid version specifier {text!r}: "
                             f"{self.version_text!r} is not a PEP 440 version") from None

    def __str__(self) -> str:
        return f"{self.operator}{self.version_text}"

    def contains(self, candidate: Version) -> bool:
        """Whether ``candidate`` satisfies this clause.

        Pre-releases are accepted: this checks versions that are already
        installed, where pip also accepts them.
        """
        operator, spec = self.operator, self.version
        if operator == "===":
            return candidate.text.strip().lower() == self.version_text.lower()
        assert spec is not None
        if operator in ("==", "!="):
            if self.wildcard:
                prefix = spec.release
                padded = candidate.release + (0,) * max(0, len(prefix) - len(candidate.release))
                matches = candidate.epoch == spec.epoch and padded[:len(prefix)] == prefix
            else:
                compared = candidate if spec.local else candidate.public
                matches = compared == spec
            return matches if operator == "==" else not matches
        public = candidate.public
        if operator == "~=":
            upper_prefix = spec.release[:-1]
            padded = public.release + (0,) * max(0, len(upper_prefix) - len(public.release))
            return public >= spec and padded[:len(upper_prefix)] == upper_prefix
        if operator == "<=":
            return public <= spec
        if operator == ">=":
            return public >= spec
        if operator == "<":
            # "<2.2" must not admit 2.2.0rc1 unless the bound is a pre-release.
            if public >= spec:
                return False
            return not (public.is_prerelease and not spec.is_prerelease
                        and _release_key(public) == _release_key(spec))
        # ">": "must not allow a post-release of the given version".
        if public <= spec:
            return False
        if public.post is not None and spec.post is None and \
                _release_key(public) == _release_key(spec):
            return False
        return True


def _release_key(version: Version) -> Tuple[int, ...]:
    release = list(version.release)
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    return (version.epoch,) + tuple(release)


def parse_specifiers(text: str) -> Tuple[Specifier, ...]:
    """Parse a comma-separated specifier set such as ``>=2.0,<2.2``."""
    text = text.strip()
    if not text:
        return ()
    return tuple(Specifier(part) for part in text.split(","))

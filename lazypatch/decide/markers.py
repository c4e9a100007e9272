"""PEP 508 environment markers (``; python_version >= "3.10"``): parsed and evaluated.

Apart from ``requirements.py`` because few requirements have a marker: activation,
which parses the built-in packs' requirements, does not load this (benchmarks/COSTS.md).
"""

import os
import sys

from .versions import InvalidVersion, Specifier, Version

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Callable, Dict, List

    Marker = Callable[[Dict[str, str]], bool]

_MARKER_VARIABLES = {
    "python_version", "python_full_version", "os_name", "sys_platform",
    "platform_system", "platform_machine", "platform_release", "platform_version",
    "platform_python_implementation", "implementation_name",
    "implementation_version", "extra",
}


def marker_environment() -> "Dict[str, str]":
    import platform
    info = sys.implementation.version
    implementation_version = f"{info.major}.{info.minor}.{info.micro}"
    return {
        "python_version": "%d.%d" % sys.version_info[:2],
        "python_full_version": platform.python_version(),
        "os_name": os.name,
        "sys_platform": sys.platform,
        "platform_system": platform.system(),
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_version": platform.version(),
        "platform_python_implementation": platform.python_implementation(),
        "implementation_name": sys.implementation.name,
        "implementation_version": implementation_version,
        "extra": "",
    }


def _tokenize_marker(text: str, requirement: str) -> "List[str]":
    tokens: List[str] = []
    position = 0
    while position < len(text):
        character = text[position]
        if character.isspace():
            position += 1
        elif character in "()":
            tokens.append(character)
            position += 1
        elif character in "'\"":
            closing = text.find(character, position + 1)
            if closing < 0:
                raise ValueError(f"invalid requirement {requirement!r}: unclosed quote in marker")
            tokens.append(text[position:closing + 1])
            position = closing + 1
        elif character in "<>=!~":
            end = position
            while end < len(text) and text[end] in "<>=!~":
                end += 1
            tokens.append(text[position:end])
            position = end
        else:
            end = position
            while end < len(text) and (text[end].isalnum() or text[end] in "_."):
                end += 1
            if end == position:
                raise ValueError(f"invalid requirement {requirement!r}: unexpected "
                                 f"{character!r} in marker")
            tokens.append(text[position:end])
            position = end
    return tokens


def parse_marker(text: str, requirement: str) -> "Marker":
    """Compile a PEP 508 environment marker into a predicate on an environment."""
    parser = _MarkerParser(_tokenize_marker(text, requirement), requirement)
    marker = parser.disjunction()
    if not parser.at_end():
        raise parser.fail(f"unexpected {parser.tokens[parser.position]!r} in marker")
    return marker


_OPERATORS = ("in", "==", "!=", "<", "<=", ">", ">=", "~=", "===")


class _MarkerParser:
    """Recursive descent over a marker's tokens: ``or`` binds looser than ``and``,
    parentheses group, each comparison is ``operand operator operand``."""

    def __init__(self, tokens: "List[str]", requirement: str) -> None:
        self.tokens = tokens
        self.requirement = requirement
        self.position = 0

    def fail(self, message: str) -> ValueError:
        return ValueError(f"invalid requirement {self.requirement!r}: {message}")

    def at_end(self) -> bool:
        return self.position >= len(self.tokens)

    def next_is(self, token: str) -> bool:
        return not self.at_end() and self.tokens[self.position] == token

    def take(self, missing: str) -> str:
        """The next token (consumed); ``missing`` is the error when there is none."""
        if self.at_end():
            raise self.fail(missing)
        self.position += 1
        return self.tokens[self.position - 1]

    def operand(self) -> "Callable[[Dict[str, str]], str]":
        token = self.take("marker ends early")
        if token[0] in "'\"":
            value = token[1:-1]
            return lambda environment: value
        if token not in _MARKER_VARIABLES:
            raise self.fail(f"unknown marker variable {token!r}")
        return lambda environment: environment.get(token, "")

    def comparison(self) -> "Marker":
        if self.next_is("("):
            self.position += 1
            inner = self.disjunction()
            if not self.next_is(")"):
                raise self.fail("unbalanced parentheses in marker")
            self.position += 1
            return inner
        left = self.operand()
        operator = self.take("marker comparison has no operator")
        if operator == "not":
            if not self.next_is("in"):
                raise self.fail("expected 'not in' in marker")
            self.position += 1
            operator = "not in"
        elif operator not in _OPERATORS:
            raise self.fail(f"unknown marker operator {operator!r}")
        right = self.operand()
        return lambda environment: _compare(left(environment), operator, right(environment))

    def conjunction(self) -> "Marker":
        parts = [self.comparison()]
        while self.next_is("and"):
            self.position += 1
            parts.append(self.comparison())
        return lambda environment: all(part(environment) for part in parts)

    def disjunction(self) -> "Marker":
        parts = [self.conjunction()]
        while self.next_is("or"):
            self.position += 1
            parts.append(self.conjunction())
        return lambda environment: any(part(environment) for part in parts)


def _compare(left: str, operator: str, right: str) -> bool:
    if operator == "in":
        return left in right
    if operator == "not in":
        return left not in right
    try:
        return Specifier(operator + right).contains(Version(left))
    except (ValueError, InvalidVersion):
        if operator == "==":
            return left == right
        if operator == "!=":
            return left != right
        return False

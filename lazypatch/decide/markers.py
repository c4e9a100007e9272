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
    tokens = _tokenize_marker(text, requirement)
    position = 0

    def fail(message: str) -> "ValueError":
        return ValueError(f"invalid requirement {requirement!r}: {message}")

    def operand() -> "Callable[[Dict[str, str]], str]":
        nonlocal position
        if position >= len(tokens):
            raise fail("marker ends early")
        token = tokens[position]
        position += 1
        if token[0] in "'\"":
            value = token[1:-1]
            return lambda environment: value
        if token not in _MARKER_VARIABLES:
            raise fail(f"unknown marker variable {token!r}")
        return lambda environment: environment.get(token, "")

    def comparison() -> "Marker":
        nonlocal position
        if position < len(tokens) and tokens[position] == "(":
            position += 1
            inner = disjunction()
            if position >= len(tokens) or tokens[position] != ")":
                raise fail("unbalanced parentheses in marker")
            position += 1
            return inner
        left = operand()
        if position >= len(tokens):
            raise fail("marker comparison has no operator")
        operator = tokens[position]
        position += 1
        if operator == "not":
            if position >= len(tokens) or tokens[position] != "in":
                raise fail("expected 'not in' in marker")
            position += 1
            operator = "not in"
        elif operator not in ("in", "==", "!=", "<", "<=", ">", ">=", "~=", "==="):
            raise fail(f"unknown marker operator {operator!r}")
        right = operand()
        return lambda environment: _compare(left(environment), operator, right(environment))

    def conjunction() -> "Marker":
        nonlocal position
        parts = [comparison()]
        while position < len(tokens) and tokens[position] == "and":
            position += 1
            parts.append(comparison())
        return lambda environment: all(part(environment) for part in parts)

    def disjunction() -> "Marker":
        nonlocal position
        parts = [conjunction()]
        while position < len(tokens) and tokens[position] == "or":
            position += 1
            parts.append(conjunction())
        return lambda environment: any(part(environment) for part in parts)

    marker = disjunction()
    if position != len(tokens):
        raise fail(f"unexpected {tokens[position]!r} in marker")
    return marker


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

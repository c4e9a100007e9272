"""The run's settings as one value that every launcher passes on unchanged.

``PYTHONLAZYPATCH=v1:<fingerprint>:disable=device.%2A:report=/r/lp-%7Brank%7D.json``:
keys are the variable names without ``LAZYPATCH_``, in lower case; every
character outside a small safe set is percent-encoded (UTF-8). Nothing here
imports anything: ``configuration`` imports this module only when the variable
is present or being written.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Dict, Mapping, Tuple

VERSION = "v1"
# Characters kept as they are: none is special to a shell, inside double quotes
# (DeepSpeed's pdsh runner writes `export NAME="VALUE";`) or out of them, nor to
# mpirun's -x, so the value survives every launcher's command line.
SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,/+-@")


def _quote(text: str) -> str:
    return "".join(character if character in SAFE else
                   "".join("%%%02X" % byte for byte in character.encode("utf-8"))
                   for character in text)


def _unquote(text: str) -> str:
    """Undo ``_quote``; ValueError on a broken escape."""
    if "%" not in text:
        return text
    pieces = text.split("%")
    data = bytearray(pieces[0].encode("utf-8"))
    for piece in pieces[1:]:
        if len(piece) < 2:
            raise ValueError(f"broken escape %{piece}")
        data += bytes.fromhex(piece[:2]) + piece[2:].encode("utf-8")
    return data.decode("utf-8", "replace")


def encode(settings: "Mapping[str, str]", fingerprint: str) -> str:
    """``settings`` (LAZYPATCH* name -> value) and their fingerprint as one value."""
    entries = [VERSION, fingerprint]
    for name in sorted(settings):
        key = "lazypatch" if name == "LAZYPATCH" else name[len("LAZYPATCH_"):].lower()
        entries.append(f"{_quote(key)}={_quote(settings[name])}")
    return ":".join(entries)


def decode(value: str) -> "Tuple[str, Dict[str, str]]":
    """(fingerprint, settings) of an ``encode`` value; ValueError saying what is wrong.

    Surrounding quotes are dropped: Open MPI's ``-x NAME="VALUE"`` given without a
    shell (DeepSpeed's OpenMPIRunner does that) keeps them in the value.
    """
    entries = value.strip().strip("\"'").split(":")
    if len(entries) < 2 or entries[0] != VERSION:
        raise ValueError(f"it does not start with {VERSION}:")
    settings: "Dict[str, str]" = {}
    for entry in entries[2:]:
        key, separator, encoded = entry.partition("=")
        if not separator or not key:
            raise ValueError(f"{entry!r} is not key=value")
        key = _unquote(key).upper()
        settings["LAZYPATCH" if key == "LAZYPATCH" else "LAZYPATCH_" + key] = _unquote(encoded)
    return entries[1], settings

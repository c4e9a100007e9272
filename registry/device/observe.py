"""Counters of redirected calls, with the first call site in user code per API.

Cheap enough to leave on: a redirected call costs one dict lookup and an
increment. Only the *first* redirected call of each API looks at the stack,
walking out of torch, wrapt and lazypatch frames once to find the user's
line, so the report says where to port without a stack walk per call.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Set, Tuple

# api name -> [redirected calls, "file:line" of the first one]
COUNTS: "Dict[str, List[Any]]" = {}
TARGET_TYPE = [""]            # filled by target.resolve(); shown in each row
_internal_prefixes: "Tuple[str, ...]" = ()
# Single-file modules whose frames sit between the user and torch (decorators
# such as typing_extensions.deprecated wrap torch.cuda.amp classes).
_INTERNAL_MODULES = ("typing_extensions", "functools", "contextlib")
_internal_files: "Set[str]" = set()


def _internal() -> "Tuple[str, ...]":
    """Directories whose frames are not "user code": torch, wrapt, lazypatch."""
    global _internal_prefixes
    if not _internal_prefixes:
        prefixes = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]  # the registry
        for name in ("torch", "wrapt", "lazypatch", "torch_npu"):
            module = sys.modules.get(name)
            path = getattr(module, "__file__", None)
            if path:
                prefixes.append(os.path.dirname(os.path.abspath(path)))
        _internal_prefixes = tuple(prefix + os.sep for prefix in prefixes)
        for name in _INTERNAL_MODULES:
            path = getattr(sys.modules.get(name), "__file__", None)
            if path:
                _internal_files.add(path)
    return _internal_prefixes


def call_site() -> str:
    """"file:line" of the innermost frame outside torch/wrapt/lazypatch."""
    internal = _internal()
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(internal) and not filename.startswith("<frozen") \
                and filename not in _internal_files:
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


def record(api: str) -> None:
    """Count one redirected call of ``api``; remember where the first came from."""
    entry = COUNTS.get(api)
    if entry is None or not entry[0]:
        site = call_site()
        if entry is None:
            COUNTS[api] = [1, site]
        else:
            entry[:] = [1, site]    # in place: wrappers hold this list (see counter)
        _log_first(api, site)
    else:
        entry[0] += 1


def counter(api: str) -> "List[Any]":
    """``api``'s ``[calls, first call site]`` entry, created now with no calls.

    For wrappers on per-step paths: they keep the entry and write
    ``if calls[0]: calls[0] += 1`` / ``else: record(api)``, one increment
    instead of a function call and a dict lookup per redirected call.
    """
    entry = COUNTS.get(api)
    if entry is None:
        entry = COUNTS[api] = [0, ""]
    return entry


def _log_first(api: str, site: str) -> None:
    logging = sys.modules.get("logging")   # torch imported it already; never import it here
    if logging is not None:
        logging.getLogger("lazypatch").debug(
            "device pack: first redirected call of %s at %s", api, site)


def rows() -> "List[Dict[str, Any]]":
    """The report rows, most called first."""
    return [{"api": api, "calls": count, "first_call_site": site, "target": TARGET_TYPE[0]}
            for api, (count, site) in sorted(COUNTS.items(), key=lambda item: -item[1][0])
            if count]

"""A patch group's ``patches()`` never forces an import, and what it changes is undone.

DrivingSDK calls every group's ``patches()`` in ``apply()``. Some build their
replacements there, importing the model's modules (PanoOcc's ``PanoSegOccHeadPatch``
imports ``mmdet.models`` and ``mmcv.runner`` and registers its head in ``HEADS``). Here
``patches()`` runs with imports refused (``imports_refused``): the first module it
would import that is installed but not imported yet stops it, whatever it changed so
far is put back, and the group is collected again when the program imports that module
(a lazypatch patch ``driving_sdk.<group>.patches`` waits for it, listed in the report).

Whatever ``patches()`` changes behind the ledger's back (a registration with
``force=True``) is found by the copies of ``capture`` and recorded through a patch, so
``restore()`` takes it back.
"""

from __future__ import annotations

import builtins
import importlib
import sys
import threading
from contextlib import contextmanager
from importlib.util import find_spec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterator, Optional


class ImportRefused(BaseException):
    """Raised inside ``patches()`` where it would import ``module``; a BaseException so
    that the group's own ``except ImportError`` / ``except Exception`` lets it through."""

    def __init__(self, module: str) -> None:
        super().__init__(module)
        self.module = module


def first_unimported(name: str) -> "Optional[str]":
    """The first module along dotted ``name`` that is installed but not imported yet;
    None when all are imported or one is not installed (that import fails as usual).
    Imports nothing: each parent asked about is imported already."""
    parts = name.split(".")
    for depth in range(1, len(parts) + 1):
        current = ".".join(parts[:depth])
        if current in sys.modules:
            continue
        try:
            found = find_spec(current)
        except (ImportError, ValueError, AttributeError):
            return None
        return current if found is not None else None
    return None


def _absolute(name: str, namespace: "Any", level: int) -> str:
    if not level:
        return name
    package = (namespace or {}).get("__package__") or ""
    base = package.rsplit(".", level - 1)[0] if level > 1 else package
    return f"{base}.{name}" if name else base


@contextmanager
def imports_refused() -> "Iterator[None]":
    """In this thread, an import of a module that is installed but not imported raises
    ``ImportRefused`` (``import`` statements, ``from x import submodule`` and
    ``importlib.import_module``); other threads import as usual."""
    owner = threading.get_ident()
    original_import, original_import_module = builtins.__import__, importlib.import_module

    def check(absolute: str, fromlist: "Any") -> None:
        missing = first_unimported(absolute)
        if missing is None and fromlist and absolute in sys.modules:
            module = sys.modules[absolute]
            for item in fromlist:
                if isinstance(item, str) and item != "*" and not hasattr(module, item):
                    missing = first_unimported(f"{absolute}.{item}")
                    if missing is not None:
                        break
        if missing is not None:
            raise ImportRefused(missing)

    def refusing_import(name: str, globals: "Any" = None, locals: "Any" = None,
                        fromlist: "Any" = (), level: int = 0) -> "Any":
        if threading.get_ident() == owner:
            check(_absolute(name, globals, level), fromlist)
        return original_import(name, globals, locals, fromlist, level)

    def refusing_import_module(name: str, package: "Any" = None) -> "Any":
        if threading.get_ident() == owner and isinstance(name, str) and \
                not name.startswith("."):
            check(name, ())
        return original_import_module(name, package)
    builtins.__import__ = refusing_import
    importlib.import_module = refusing_import_module
    try:
        yield
    finally:
        builtins.__import__ = original_import
        importlib.import_module = original_import_module


__all__ = ["ImportRefused", "imports_refused", "first_unimported"]

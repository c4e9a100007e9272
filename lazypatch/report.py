"""Compatibility name for :mod:`lazypatch.reporting`; prefer that module.

Why this shim is odd: a submodule named ``report`` becomes the attribute
``lazypatch.report`` as soon as anything imports it, shadowing the public
function ``lazypatch.report()``. The module object is therefore made
callable, forwarding to the catalog's report, so ``lazypatch.report()``
keeps working whichever of the two the attribute holds.
"""

from __future__ import annotations

import sys
from types import ModuleType

from .reporting import (  # noqa: F401
    FORMATS,
    ReportFileError,
    differences,
    expand_path,
    load_report,
    process_label,
    render,
    render_many,
    render_table,
    write_report,
    write_report_at_exit,
)


class _CallableReportModule(ModuleType):
    def __call__(self) -> list:
        """Same as the public ``lazypatch.report()``: a record per registered patch."""
        from . import dispatch
        from .catalog import record_of
        return [record_of(patch) for patch in dispatch.CATALOG.patches()]


sys.modules[__name__].__class__ = _CallableReportModule

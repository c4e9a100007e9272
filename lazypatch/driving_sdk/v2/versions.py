"""DrivingSDK 2.0's version helpers (``get_version``, ``check_version``, ``mmcv_version``,
``is_mmcv_v1x``/``is_mmcv_v2x``) over lazypatch's requirement lookup; see ``v2.patcher``.

DrivingSDK answers them by importing the package (``__import__("mmcv")``) and reading
its ``__version__``, so a ``precheck=lambda: mmcv_version.is_v2x`` imports mmcv,
and through it torch. Here the answer comes from installed metadata, the way
``requires=`` is checked (``mmcv`` is found through whichever distribution provides
it: ``mmcv``, ``mmcv-lite``, ``mmcv-full``); nothing is imported. A module with no
metadata at all is read from its ``__version__`` only when it is already imported.

``from mx_driving.patcher.version import get_version, check_version`` becomes an
import from this module (``v2.patcher`` re-exports them, as ``mx_driving.patcher``
does).

Each helper has a ``requires=`` spelling, which is the better one: a patch whose
requirement is unmet is reported ``skipped`` with the installed version in the
reason, where a precheck only says it said no.
"""

from __future__ import annotations

import re

from ...decide.requirements import find_version

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, Optional, Tuple

_NUMERIC_PREFIX = re.compile(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def _package_name(package: object, caller: str) -> str:
    if not isinstance(package, str) or not package.strip() or not \
            re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", package.strip()):
        raise ValueError(f"{caller}: the package must be a name such as 'mmcv' or 'torch', "
                         f"got {package!r}")
    return package.strip()


def _version_part(value: object, label: str) -> "Optional[int]":
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"check_version: {label} must be a non-negative integer such as 2 "
                         f"(or None for any), got {value!r}")
    return value


def get_version(package: str) -> "Optional[str]":
    """The installed version of ``package`` (an import or distribution name), or None;
    imports nothing."""
    found = find_version(_package_name(package, "get_version"))
    return found[0] if found is not None else None


def _numeric(version: str) -> "Tuple[int, ...]":
    """(major, minor, micro) read from the start of a version string, as DrivingSDK does."""
    match = _NUMERIC_PREFIX.match(version)
    return tuple(int(part) for part in match.groups() if part is not None) if match else ()


def check_version(package: str, major: "Optional[int]" = None,
                  minor: "Optional[int]" = None) -> bool:
    """Whether ``package`` is installed with this major (and minor) version; False when it
    is not installed. ``requires=["mmcv>=2,<3"]`` says the same on a patch."""
    name = _package_name(package, "check_version")
    wanted = (_version_part(major, "major"), _version_part(minor, "minor"))
    version = get_version(name)
    parts = _numeric(version) if version is not None else ()
    if not parts:
        return False
    for position, expected in enumerate(wanted):
        if expected is not None and (len(parts) <= position or parts[position] != expected):
            return False
    return True


def version_requirement(package: str, major: int, minor: "Optional[int]" = None) -> str:
    """The ``requires=`` string meaning ``check_version(package, major, minor)``:
    ``version_requirement("mmcv", 2)`` is ``"mmcv>=2,<3"``."""
    name = _package_name(package, "version_requirement")
    if major is None:
        raise ValueError("version_requirement: give the major version, e.g. "
                         "version_requirement('mmcv', 2)")
    first = _version_part(major, "major")
    second = _version_part(minor, "minor")
    if second is None:
        return f"{name}>={first},<{first + 1}"    # type: ignore[operator]
    return f"{name}>={first}.{second},<{first}.{second + 1}"


class MMCVVersion:
    """``mmcv_version``: ``version``, ``is_v1x``, ``is_v2x``, ``has_mmcv``,
    ``has_mmengine``, ``available``; true when mmcv is installed; calling it gives the
    version. Read from installed metadata (importing nothing) at first use and kept, as
    DrivingSDK keeps it (``_cached``); ``refresh()`` reads it again (after an install)."""

    def __init__(self) -> None:
        self._cached = False
        self._versions: "Dict[str, Optional[str]]" = {}

    def _detect(self) -> "Dict[str, Optional[str]]":
        if not self._cached:
            self._versions = {name: get_version(name) for name in ("mmcv", "mmengine")}
            self._cached = True
        return self._versions

    def refresh(self) -> "MMCVVersion":
        """Forget what was read: the next question reads the installed metadata again."""
        self._cached = False
        return self

    def _major_is(self, major: int) -> bool:
        version = self._detect()["mmcv"]
        parts = _numeric(version) if version is not None else ()
        return bool(parts) and parts[0] == major

    @property
    def version(self) -> "Optional[str]":
        return self._detect()["mmcv"]

    @property
    def is_v1x(self) -> bool:
        return self._major_is(1)

    @property
    def is_v2x(self) -> bool:
        return self._major_is(2)

    @property
    def has_mmcv(self) -> bool:
        return self.version is not None

    @property
    def has_mmengine(self) -> bool:
        return self._detect()["mmengine"] is not None

    @property
    def available(self) -> bool:
        return self.has_mmcv

    def __bool__(self) -> bool:
        return self.has_mmcv

    def __call__(self) -> "Optional[str]":
        return self.version

    def __repr__(self) -> str:
        return f"MMCVVersion(version={self.version!r}, is_v1x={self.is_v1x}, " \
               f"is_v2x={self.is_v2x})"


mmcv_version = MMCVVersion()


def is_mmcv_v1x() -> bool:
    """mmcv 1.x is installed (``requires=["mmcv>=1,<2"]``)."""
    return mmcv_version.is_v1x


def is_mmcv_v2x() -> bool:
    """mmcv 2.x is installed (``requires=["mmcv>=2,<3"]``)."""
    return mmcv_version.is_v2x


__all__ = ["get_version", "check_version", "version_requirement", "mmcv_version",
           "MMCVVersion", "is_mmcv_v1x", "is_mmcv_v2x"]

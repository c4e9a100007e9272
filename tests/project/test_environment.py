"""The suite runs against the real, pinned stack; a drifted environment fails here, loudly."""

from __future__ import annotations

import pytest
from conftest import REPOSITORY

from lazypatch import installed_version


def _pins():
    for name in ("stack.txt", "stack-nodeps.txt"):
        for line in (REPOSITORY / "requirements" / name).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if "==" in line:
                distribution, version = line.split("==")
                yield distribution.strip(), version.strip()


@pytest.mark.stack
def test_every_pinned_distribution_is_installed_at_its_pinned_version():
    wrong = {name: (version, installed_version(name)) for name, version in _pins()
             if installed_version(name) is None
             or installed_version(name).split("+")[0] != version}
    assert wrong == {}, "run ./dev setup: installed versions differ from requirements/ " + repr(wrong)

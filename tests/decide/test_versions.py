"""The hand-written PEP 440 parser orders and matches like ``packaging`` does."""

from __future__ import annotations

import itertools

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version as PackagingVersion

from lazypatch.decide.distributions import canonical_name
from lazypatch.decide.requirements import Requirement, version_matches
from lazypatch.decide.versions import InvalidVersion, Version

VERSIONS = ["0.9", "1.0.dev0", "1.0a1", "1.0a2.dev1", "1.0b1", "1.0rc1", "1.0", "1.0.0",
            "1.0.post1", "1.0.post1.dev2", "1.0+local.1", "1.0+abc", "1.1", "1!0.5",
            "2.0.0rc4", "2.1.0", "2.2.0", "2.2.0rc1", "2.2.1", "2.10", "v2.3", "1.0-1",
            "1.0.ALPHA3", "1.0-preview2", "1.0c1", "1.0.rev4"]

SPECIFIERS = [">=2.0", "<2.2", ">=2.0.0rc4,<2.2.0", "==2.1.*", "!=2.1.*", "~=2.1", "~=1.0.0",
              "==1.0", "==1.0+abc", ">1.0", "<=1.0", ">=1.0a1", "<2.2.0rc2", "===2.1.0", ">1.0.post1"]


@pytest.mark.parametrize("left, right", list(itertools.combinations(VERSIONS, 2)))
def test_ordering_matches_packaging(left, right):
    ours = (Version(left) < Version(right), Version(left) == Version(right))
    theirs = (PackagingVersion(left) < PackagingVersion(right),
              PackagingVersion(left) == PackagingVersion(right))
    assert ours == theirs


@pytest.mark.parametrize("specifier", SPECIFIERS)
def test_specifiers_match_packaging_with_prereleases_allowed(specifier):
    for version in VERSIONS:
        expected = SpecifierSet(specifier).contains(version, prereleases=True)
        assert version_matches(version, specifier) == expected, (version, specifier)


@pytest.mark.parametrize("text", ["", "abc", "1..0", "1.0+", "1.0-", "1.0foo", "x!1.0"])
def test_invalid_versions_raise(text):
    with pytest.raises(InvalidVersion):
        Version(text)


def test_requirement_parts_and_markers():
    requirement = Requirement("Mmcv_Lite[extra] (>=2.0,<2.2) ; "
                              "python_version >= '3.8' and os_name == 'posix'")
    assert requirement.key == "mmcv-lite"
    assert [str(item) for item in requirement.specifiers] == [">=2.0", "<2.2"]
    assert requirement.marker({"python_version": "3.11", "os_name": "posix"})
    assert not requirement.marker({"python_version": "3.7", "os_name": "posix"})
    assert canonical_name("Foo__Bar.baz") == "foo-bar-baz"


@pytest.mark.stack
def test_installed_versions_come_from_metadata_without_import():
    import subprocess
    import sys
    code = ("import sys, lazypatch; v = lazypatch.installed_version('numpy'); "
            "print(v, 'numpy' in sys.modules, lazypatch.installed_version('MMCV_lite'))")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.split()
    import numpy
    assert output[0] == numpy.__version__ and output[1] == "False"
    assert output[2].startswith("2.")

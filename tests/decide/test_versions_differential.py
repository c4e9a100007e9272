"""lazypatch's hand-written PEP 440 parser against ``packaging`` (the test oracle).

Generated versions (epochs, pre/post/dev in their alternative spellings,
implicit post releases, local labels such as ``2.13.0+cpu``) and specifiers
(``==2.*``, ``~=``, ``!=``, ``===``...): wherever ``packaging`` accepts the
input, both must order, compare and match alike (pre-releases allowed, as for
an installed version). ``LAZYPATCH_HYPOTHESIS_PROFILE=ci`` (the default) runs
a fixed, derandomized number of examples; ``dev`` ten times as many.

Validity agrees too: a specifier packaging refuses is refused at registration.
"""

from __future__ import annotations

import itertools
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion as PackagingInvalidVersion
from packaging.version import Version as PackagingVersion

from lazypatch.decide.requirements import version_matches
from lazypatch.decide.versions import InvalidVersion, Version, parse_specifiers

PROFILE_VARIABLE = "LAZYPATCH_HYPOTHESIS_PROFILE"
# Generating an example costs far more than checking it, so each example is checked
# many ways: a specifier against 8 versions, all 28 pairs of 8 versions. In CI:
# 300 parses + 300 * 28 orderings + 500 * 8 matches = 12,700 comparisons with packaging.
EXAMPLES = {("ci", "versions"): 300, ("ci", "order"): 300, ("ci", "specifiers"): 500}


def examples(variant: str) -> settings:
    profile = os.environ.get(PROFILE_VARIABLE, "ci")
    if profile not in ("ci", "dev"):
        raise SystemExit(f"{PROFILE_VARIABLE}={profile!r}: use 'ci' or 'dev'")
    count = EXAMPLES[("ci", variant)] * (10 if profile == "dev" else 1)
    return settings(max_examples=count, derandomize=profile == "ci", deadline=None,
                    database=None, suppress_health_check=list(HealthCheck))


small = st.integers(0, 12)
separator = st.sampled_from(["", ".", "-", "_"])


@st.composite
def versions(draw) -> str:
    text = ""
    if draw(st.integers(0, 5)) == 0:
        text += f"{draw(st.integers(0, 2))}!"
    text += ".".join(str(draw(small)) for _ in range(draw(st.integers(1, 4))))
    if draw(st.booleans()):
        spelling = draw(st.sampled_from(["a", "alpha", "b", "beta", "rc", "c", "pre", "preview",
                                         "A", "RC"]))
        number = draw(st.one_of(st.just(""), small.map(str)))
        text += f"{draw(separator)}{spelling}{draw(separator) if number else ''}{number}"
    post = draw(st.integers(0, 3))
    if post == 1:
        number = draw(st.one_of(st.just(""), small.map(str)))
        spelling = draw(st.sampled_from(["post", "rev", "r"]))
        text += f"{draw(separator)}{spelling}{draw(separator) if number else ''}{number}"
    elif post == 2:
        text += f"-{draw(small)}"          # the implicit post release
    if draw(st.integers(0, 3)) == 0:
        number = draw(st.one_of(st.just(""), small.map(str)))
        text += f"{draw(separator)}dev{number}"
    if draw(st.integers(0, 4)) == 0:
        label = draw(st.lists(st.sampled_from(["cpu", "cu121", "1", "7", "abc", "ubuntu", "0"]),
                              min_size=1, max_size=3))
        text += "+" + draw(st.sampled_from([".", "-", "_"])).join(label)
    if draw(st.integers(0, 9)) == 0:
        text = "v" + text
    return text


@st.composite
def specifiers(draw) -> str:
    operator = draw(st.sampled_from(["==", "!=", "<=", ">=", "<", ">", "~=", "==="]))
    version = draw(versions())
    wildcard = draw(st.integers(0, 5))
    if operator == "===":
        version = str(PackagingVersion(version)) if draw(st.booleans()) else version
    elif operator in ("==", "!=") and wildcard < 3:
        version = ".".join(str(draw(small)) for _ in range(draw(st.integers(1, 3)))) + ".*"
    elif wildcard == 5:
        version += ".*"        # after a pre/post/dev release or a local label: invalid
    spaces = draw(st.sampled_from(["", " "]))
    return f"{operator}{spaces}{version}"


def packaging_accepts_version(text: str) -> bool:
    try:
        PackagingVersion(text)
    except PackagingInvalidVersion:
        return False
    return True


@given(versions())
@examples("versions")
def test_generated_versions_parse_as_packaging_parses_them(text):
    assert packaging_accepts_version(text)       # the generator makes valid versions only
    ours, theirs = Version(text), PackagingVersion(text)
    assert ours.epoch == theirs.epoch and ours.release == theirs.release
    assert (ours.pre, ours.post, ours.dev) == (theirs.pre, theirs.post, theirs.dev)
    assert ours.is_prerelease == theirs.is_prerelease
    assert Version(str(theirs)) == ours        # the normal form is the same version


@given(st.lists(versions(), min_size=8, max_size=8))
@examples("order")
def test_generated_versions_order_as_packaging_orders_them(texts):
    for left, right in itertools.combinations(texts, 2):
        ours = (Version(left) < Version(right), Version(left) == Version(right),
                Version(left) > Version(right))
        theirs = (PackagingVersion(left) < PackagingVersion(right),
                  PackagingVersion(left) == PackagingVersion(right),
                  PackagingVersion(left) > PackagingVersion(right))
        assert ours == theirs, (left, right)


@st.composite
def specifier_sets(draw) -> str:
    clauses = draw(st.lists(specifiers(), min_size=1, max_size=2))
    return ",".join(clauses) + draw(st.sampled_from(["", "", ",", " , "]))


@given(specifier_sets(), st.lists(versions(), min_size=8, max_size=8))
@examples("specifiers")
def test_generated_specifiers_match_as_packaging_matches(specifier, candidates):
    try:
        oracle = SpecifierSet(specifier)
    except InvalidSpecifier:
        # Invalid in PEP 440 (a local label in ">=2.0+cpu", ".*" after a pre-release,
        # "~=" on one release segment): refused at registration, as packaging refuses it.
        with pytest.raises(ValueError):
            parse_specifiers(specifier)
        return
    parse_specifiers(specifier)     # what packaging accepts, we accept
    for candidate in candidates:
        expected = oracle.contains(candidate, prereleases=True)
        assert version_matches(candidate, specifier) == expected, (candidate, specifier)


@pytest.mark.parametrize("candidate, specifier, expected", [
    ("2.13.0+cpu", ">=2.6", True), ("2.13.0+cpu", "==2.13.0", True),
    ("2.13.0+cpu", "==2.13.0+cpu", True), ("2.13.0+cpu", "==2.13.0+cu121", False),
    ("2.13.0+cpu", "==2.*", True), ("2.13.0+cpu", "!=2.13.*", False),
    ("1!2.3", "~=2.2", False), ("1!2.3", ">=2.2", True), ("1!2.3", "==1!2.*", True),
    ("2.2.0rc1", "<2.2", False), ("2.2.0rc1", "<2.2rc2", True), ("2.2.post1", ">2.2", False),
    ("2.2.post1", ">2.2.post0", True), ("2.2.0", "===2.2.0", True), ("2.2", "===2.2.0", False),
    ("2.0", "~=2.0", True), ("3.0", "~=2.0", False), ("2.1.9", "~=2.1.0", True),
    ("2.2.0", "~=2.1.0", False), ("2.0.dev1", ">=2.0.dev0", True),
])
def test_named_cases_match_packaging(candidate, specifier, expected):
    assert SpecifierSet(specifier).contains(candidate, prereleases=True) == expected
    assert version_matches(candidate, specifier) == expected


@pytest.mark.parametrize("text", ["1.0", "1.0a1-1", "1.0bpost2", "2.13.0+cpu", "1!2.0.post3.dev4"])
def test_valid_versions_are_accepted(text):
    assert packaging_accepts_version(text)
    assert Version(text) == Version(str(PackagingVersion(text)))


def test_invalid_versions_are_rejected_like_packaging():
    for text in ["", "abc", "1..0", "1.0+", "1.0-", "1.0foo", "x!1.0", "1.0+a..b", "1.0 0"]:
        assert not packaging_accepts_version(text), text
        with pytest.raises(InvalidVersion):
            Version(text)

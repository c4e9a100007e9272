"""Registration validates early and names the bad value; it never imports the target."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lazypatch
from lazypatch.state import STATE


@pytest.fixture(autouse=True)
def forget_registrations():
    """These tests register into the test process's state; start and end clean."""
    lazypatch.reset()
    yield
    lazypatch.reset()


@pytest.mark.parametrize("target, error, fragment", [
    ("", ValueError, "empty"),
    (".relative", ValueError, "relative"),
    ("pkg..mod", ValueError, "not a valid dotted module name"),
    ("pkg.1mod", ValueError, "'1mod' is not an identifier"),
    (42, TypeError, "42"),
    (None, TypeError, "None"),
])
def test_bad_targets_are_refused_at_the_decorator_line(target, error, fragment):
    with pytest.raises(error, match=fragment):
        lazypatch.when_imported(target)


@pytest.mark.parametrize("requirement, fragment", [
    ("mmcv>>2.0", "invalid"),
    ("mmcv>=two", "not a PEP 440 version"),
    (">=2.0", "must start with a distribution name"),
    ("mmcv ~=2", "at least two release segments"),
    ("mmcv>=2.0; python_versio > '3'", "unknown marker variable"),
    ("mmcv @ https://example.invalid/x.whl", "direct references"),
])
def test_malformed_requirements_are_refused_naming_the_string(requirement, fragment):
    with pytest.raises(ValueError, match=fragment) as caught:
        lazypatch.when_imported("some.module", requires=[requirement])
    assert repr(requirement) in str(caught.value)


@pytest.mark.parametrize("function", [lambda: None, lambda a, b, c: None, "not callable"])
def test_patch_functions_with_a_wrong_signature_are_refused(function):
    with pytest.raises(TypeError, match="bad_signature"):
        lazypatch.register(function, "some.module", name="bad_signature")


def test_duplicate_names_are_refused_naming_the_existing_target():
    lazypatch.register(lambda module: None, "first.target", name="unique.name")
    with pytest.raises(ValueError, match="already registered \\(on 'first.target'\\)"):
        lazypatch.register(lambda module: None, "second.target", name="unique.name")


def test_default_name_is_module_and_qualified_name_and_decorator_returns_function():
    def my_patch(module):
        return None
    returned = lazypatch.when_imported("some.other.module")(my_patch)
    assert returned is my_patch
    names = [record["name"] for record in lazypatch.report()]
    assert f"{__name__}.test_default_name_is_module_and_qualified_name_and_decorator_returns_function" \
           f".<locals>.my_patch" in names


def test_unknown_names_in_unpatch_and_enable_say_how_to_find_names():
    with pytest.raises(KeyError, match="lazypatch.report"):
        lazypatch.unpatch("does.not.exist")
    with pytest.raises(KeyError, match="no patch matches 'nothing.\\*'"):
        lazypatch.enable("nothing.*")


def test_bound_methods_are_accepted_as_patch_functions():
    class Pack:
        def apply(self, module, patch):
            return None

        def apply_module_only(self, module):
            return None
    lazypatch.register(Pack().apply, "some.module", name="bound.with_context")
    lazypatch.register(Pack().apply_module_only, "some.module", name="bound.module_only")
    patches = STATE.catalog.by_name
    assert patches["bound.with_context"].takes_context is True
    assert patches["bound.module_only"].takes_context is False


def test_an_explicit_patch_is_chosen_by_its_exact_name_only():
    def ordinary(module):
        pass

    def dangerous(module):
        pass
    lazypatch.register(ordinary, "some.module", name="family.ordinary", tags=["risky"],
                       enabled=False)
    lazypatch.register(dangerous, "some.module", name="family.dangerous",
                       tags=["risky", "explicit"], enabled=False)
    assert lazypatch.enable("*") == ["family.ordinary"]
    assert lazypatch.enable("family") == ["family.ordinary"]
    assert lazypatch.enable("family.*") == ["family.ordinary"]
    assert lazypatch.enable("tag:risky") == ["family.ordinary"]
    assert not STATE.catalog.by_name["family.dangerous"].enabled
    assert lazypatch.enable("family.dangerous") == ["family.dangerous"]


# Requirement strings in their simplest forms are checked at registration without the
# parser (declare/registration.py), so that activation never loads decide/. What that
# check accepts, the parser must accept too; what it leaves to the parser keeps the
# parser's errors, at the decorator line.
_REQUIREMENT_PIECES = ["mmcv", "torch_npu", "a", "A-b.c", "-x", "x.", "1", "0", "10", "2.0",
                       ".", ",", "<", "<=", ">", ">=", "==", "!=", "~=", "===", "!", "=",
                       " ", "rc1", ".*", "+cpu", "[x]", ";", "@", "²", "٣", "é", "(", ")"]


@given(st.lists(st.sampled_from(_REQUIREMENT_PIECES), min_size=1, max_size=7).map("".join))
@settings(max_examples=400, deadline=None)
def test_a_requirement_checked_in_its_simple_form_is_one_the_parser_accepts(text):
    from lazypatch.decide.requirements import Requirement
    from lazypatch.declare import registration
    if registration._is_simple_requirement(text):
        parsed = Requirement(text)   # never raises for what the simple check accepted
        assert parsed.text == text and parsed.marker is None


@pytest.mark.parametrize("requirement", ["torch_npu", "mmcv<2.0.0", "mmengine>=0.10,<0.11",
                                         "zope.interface==5", "a!=1.0.0"])
def test_simple_requirements_are_kept_as_written_and_decided_at_the_import(requirement):
    from lazypatch.declare import registration
    assert registration._is_simple_requirement(requirement)
    lazypatch.register(lambda module: None, "some.module", name="simple", requires=[requirement])
    assert STATE.catalog.find("simple").requires == (requirement,)
    (record,) = [record for record in lazypatch.report() if record["name"] == "simple"]
    assert record["requires"] == [requirement]
    # Parsed when first evaluated: the report's reason names the requirement.
    assert all(requirement in reason for reason in record["unmet_requirements"])


@pytest.mark.parametrize("requirement", ["mmcv>=2.0rc1", "mmcv ~=2.0", "mmcv[ops]>=2",
                                         "mmcv>=2.0; python_version >= '3'", "mmcv==2.*"])
def test_other_requirements_are_parsed_at_the_decorator_line(requirement):
    from lazypatch.decide.requirements import Requirement
    from lazypatch.declare import registration
    assert not registration._is_simple_requirement(requirement)
    lazypatch.register(lambda module: None, "some.module", name="parsed", requires=[requirement])
    (parsed,) = STATE.catalog.find("parsed").requires
    assert isinstance(parsed, Requirement) and parsed.text == requirement

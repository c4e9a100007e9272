"""Bad input at registration is refused with an error naming the problem and the fix, and
registers nothing; the callables and priorities that make sense keep working.

Refusals are checked in this process (registration imports nothing); the accepted forms
are applied to a real module in a fresh interpreter.
"""

from __future__ import annotations

import functools
import math

import pytest

import lazypatch

pytestmark = pytest.mark.usefixtures("forget_new_patches")

NEVER_IMPORTED = "trust_bad_input_target_never_imported"


def registered_names() -> list:
    return [item["name"] for item in lazypatch.report()]


def register_through(form: str, function, target: str = NEVER_IMPORTED, **options) -> None:
    """Register ``function`` with one of the three public entry points."""
    if form == "register":
        lazypatch.register(function, target, **options)
    elif form == "when_imported":
        lazypatch.when_imported(target, **options)(function)
    else:
        lazypatch.before_import(target, **options)(function)


FORMS = ["register", "when_imported", "before_import"]


def harmless(module):
    """A patch function that is fine in every respect."""


# --- priorities ----------------------------------------------------------------

BAD_PRIORITIES = [
    pytest.param(math.nan, "nan", id="nan"),
    pytest.param(math.inf, "inf", id="plus-infinity"),
    pytest.param(-math.inf, "-inf", id="minus-infinity"),
    pytest.param(1.5, "1.5", id="non-integral-float"),
    pytest.param(True, "True", id="bool-true"),
    pytest.param(False, "False", id="bool-false"),
    pytest.param("1", "'1'", id="string"),
    pytest.param(None, "None", id="none"),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("priority, shown", BAD_PRIORITIES)
def test_bad_priorities_are_refused_naming_the_value_and_registering_nothing(form, priority, shown):
    before = registered_names()
    with pytest.raises((TypeError, ValueError)) as caught:
        register_through(form, harmless, name="trust.bad_priority", priority=priority)
    message = str(caught.value)
    assert "priority" in message, f"the error does not say the priority is the problem: {message!r}"
    assert shown in message, f"the error does not show the bad value {shown}: {message!r}"
    assert "int" in message.lower(), f"the error does not say an integer is expected (the fix): {message!r}"
    assert registered_names() == before, "a refused registration still registered a patch"


@pytest.mark.parametrize("priority", [0, -3, 7, 10**6, 2.0, -1.0])
def test_integral_priorities_are_accepted(priority):
    name = f"trust.good_priority.{priority!r}"
    lazypatch.register(harmless, NEVER_IMPORTED, name=name, priority=priority)
    assert name in registered_names()


def test_a_nan_priority_never_reorders_the_other_patches():
    """Even if a NaN slipped through, the others must keep ascending priority order."""
    for priority in (3, 1):
        lazypatch.register(harmless, NEVER_IMPORTED, name=f"trust.order.{priority}", priority=priority)
    with pytest.raises((TypeError, ValueError)):
        lazypatch.register(harmless, NEVER_IMPORTED, name="trust.order.nan", priority=math.nan)
    lazypatch.register(harmless, NEVER_IMPORTED, name="trust.order.2", priority=2)
    ordered = [item["name"] for item in sorted(
        (item for item in lazypatch.report() if item["name"].startswith("trust.order.")),
        key=lambda item: item["priority"])]
    assert ordered == ["trust.order.1", "trust.order.2", "trust.order.3"]


# --- patch functions -----------------------------------------------------------

async def coroutine_patch(module):
    module.never = True


async def async_generator_patch(module):
    yield module


def generator_patch(module, patch):
    patch.setattr(module, "never", True)
    yield


class TakesThree:
    def __init__(self, module, patch, extra):
        pass


class CallableTakingThree:
    def __call__(self, module, patch, extra):
        pass


BAD_FUNCTIONS = [
    pytest.param(coroutine_patch, ("coroutine", "async"), id="coroutine-function"),
    pytest.param(async_generator_patch, ("async", "generator"), id="async-generator-function"),
    pytest.param(generator_patch, ("generator",), id="generator-function"),
    pytest.param(lambda: None, ("argument", "parameter", "accept", "takes"), id="no-parameters"),
    pytest.param(lambda module, patch, extra: None, ("argument", "parameter", "accept", "takes"),
                 id="three-required-parameters"),
    pytest.param(TakesThree, ("argument", "parameter", "accept", "takes"), id="class-taking-three"),
    pytest.param(CallableTakingThree(), ("argument", "parameter", "accept", "takes"),
                 id="callable-instance-taking-three"),
    pytest.param("not callable", ("callable",), id="a-string"),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("function, problem_words", BAD_FUNCTIONS)
def test_functions_that_cannot_run_as_patches_are_refused_registering_nothing(form, function,
                                                                            problem_words):
    before = registered_names()
    with pytest.raises((TypeError, ValueError)) as caught:
        register_through(form, function, name="trust.bad_function")
    message = str(caught.value)
    assert "trust.bad_function" in message, f"the error does not name the patch: {message!r}"
    assert any(word in message.lower() for word in problem_words), \
        f"the error does not name the problem (one of {problem_words}): {message!r}"
    assert "(module" in message or "def " in message, \
        f"the error does not say what to write instead ((module) / (module, patch) or a plain def): " \
        f"{message!r}"
    assert registered_names() == before, "a refused registration still registered a patch"


# --- targets -------------------------------------------------------------------

BAD_TARGETS = [
    pytest.param("", ("empty", "''"), id="empty"),
    pytest.param(".x", ("'.x'",), id="relative"),
    pytest.param("a..b", ("'a..b'",), id="empty-part"),
    pytest.param("a.", ("'a.'",), id="trailing-dot"),
    pytest.param("1a", ("'1a'",), id="starts-with-digit"),
    pytest.param("a.b-c", ("'a.b-c'",), id="dash"),
    pytest.param("a b", ("'a b'",), id="space"),
    pytest.param(3, ("3",), id="an-int"),
    pytest.param(None, ("None",), id="none"),
    pytest.param(b"a.b", ("b'a.b'",), id="bytes"),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("target, shown", BAD_TARGETS)
def test_targets_that_are_not_absolute_dotted_module_names_are_refused(form, target, shown):
    before = registered_names()
    with pytest.raises((TypeError, ValueError)) as caught:
        register_through(form, harmless, target=target, name="trust.bad_target")
    message = str(caught.value)
    assert any(fragment in message for fragment in shown), \
        f"the error does not show the bad target ({shown}): {message!r}"
    assert "module" in message, f"the error does not say a module name is expected: {message!r}"
    assert registered_names() == before, "a refused registration still registered a patch"


# --- what keeps working ----------------------------------------------------------

ACCEPTED_FORMS = """
import functools, json, lazypatch
from trust_helpers import emit, status

class ByClass:
    \"\"\"A class called with the module: its __init__ does the patching.\"\"\"
    def __init__(self, module):
        module.ORDER.append("class")

def with_prefix(prefix, module, patch):
    patch.setattr(module, "partial_value", prefix)
    module.ORDER.append("partial")

class Owner:
    def method(self, module, patch):
        patch.setattr(module, "bound_value", "bound")
        module.ORDER.append("bound-method")

class CallsWithModule:
    def __call__(self, module):
        module.ORDER.append("callable-module")

class CallsWithPatch:
    def __call__(self, module, patch):
        patch.setattr(module, "callable_value", "called")
        module.ORDER.append("callable-patch")

def with_default(module, patch=None):
    module.ORDER.append("default-patch")

accepted = [
    ("class", ByClass, 0),
    ("partial", functools.partial(with_prefix, "prefixed"), 1),
    ("bound-method", Owner().method, 2.0),
    ("callable-module", CallsWithModule(), 3),
    ("callable-patch", CallsWithPatch(), 4.0),
    ("default-patch", with_default, 5),
]
for label, function, priority in reversed(accepted):   # registration order must not decide
    lazypatch.register(function, "trust_accepting", name=f"trust.{label}", priority=priority)

import trust_accepting
emit({"statuses": {label: status(f"trust.{label}") for label, _, _ in accepted},
      "order": trust_accepting.ORDER,
      "values": [trust_accepting.partial_value, trust_accepting.bound_value,
                 trust_accepting.callable_value]})
"""


def test_classes_partials_bound_methods_and_callable_instances_keep_working(trust_interpreter):
    trust_interpreter.write({"trust_accepting.py": "ORDER = []\n"})
    result = trust_interpreter.run_json(ACCEPTED_FORMS)
    labels = ["class", "partial", "bound-method", "callable-module", "callable-patch", "default-patch"]
    assert result["statuses"] == {label: "applied" for label in labels}
    assert result["order"] == labels, "integral priorities (ints and floats like 2.0) set the order"
    assert result["values"] == ["prefixed", "bound", "called"]


def test_a_partial_and_a_bound_method_are_refused_when_their_remaining_arity_is_wrong():
    def three(module, patch, extra):
        pass

    class Owner:
        def method(self):
            pass

    before = registered_names()
    for function in (functools.partial(three), Owner().method):
        with pytest.raises((TypeError, ValueError)):
            lazypatch.register(function, NEVER_IMPORTED, name="trust.bad_arity")
    assert registered_names() == before

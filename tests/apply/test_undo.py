"""Exact undo: identity of every restored object, in any order, descriptors included."""

from __future__ import annotations

import types

from hypothesis import given, settings
from hypothesis import strategies as st

from lazypatch import PatchContext, original

CLASS_HIERARCHY = """
class Base:
    LIMIT = 10

    def method(self):
        return "base"

    @classmethod
    def build(cls):
        return cls

    @staticmethod
    def helper():
        return "helper"

    @property
    def size(self):
        return 1


class Child(Base):
    def own(self):
        return "own"
"""


def test_undo_restores_descriptors_and_deletes_inherited_attributes_again(interpreter):
    interpreter.write({"hierarchy/__init__.py": CLASS_HIERARCHY})
    result = interpreter.run_json("""
import json, lazypatch, hierarchy
from hierarchy import Base, Child
before = {cls.__name__: dict(vars(cls)) for cls in (Base, Child)}

@lazypatch.when_imported("hierarchy", name="everything")
def everything(module, patch):
    patch.setattr(Base, "build", classmethod(lambda cls: "patched"))
    patch.setattr(Base, "helper", staticmethod(lambda: "patched"))
    patch.setattr(Base, "size", property(lambda self: 2))
    patch.wrap(Child, "method", lambda wrapped, instance, args, kwargs: "wrapped " + wrapped())
    patch.wrap(Child, "build", lambda wrapped, instance, args, kwargs: ("wrapped", wrapped()))
    patch.setattr(Child, "LIMIT", 99)
    patch.delattr(Child, "own")
during = [Child().method(), Child.build(), Base.helper(), Child().size, Child.LIMIT,
          hasattr(Child, "own"), "method" in vars(Child)]
lazypatch.unpatch("everything")
after = {cls.__name__: dict(vars(cls)) for cls in (Base, Child)}
identical = {name: sorted(before[name]) == sorted(after[name]) and
             all(before[name][key] is after[name][key] for key in before[name])
             for name in before}
print(json.dumps({"during": during, "identical": identical,
                  "inherited_back": [Child.build() is Child, "LIMIT" in vars(Child), "method" in vars(Child)],
                  "classmethod_kind": type(vars(Base)["build"]).__name__}))
""")
    assert result["during"] == ["wrapped base", ["wrapped", "patched"], "patched", 2, 99, False, True]
    assert result["identical"] == {"Base": True, "Child": True}
    assert result["inherited_back"] == [True, False, False]
    assert result["classmethod_kind"] == "classmethod"


def test_undo_of_a_middle_patch_keeps_later_patches_and_final_undo_is_exact():
    module = types.ModuleType("layered")
    module.value = original_value = object()
    first, second, third = (PatchContext(name, module) for name in ("first", "second", "third"))
    first.setattr(module, "value", "one")
    second.setattr(module, "value", "two")
    third.setattr(module, "value", "three")
    second.undo()                          # a middle layer leaves: the top value stays
    assert module.value == "three"
    assert original(module, "value") is original_value
    third.undo()                           # back to what the first patch set
    assert module.value == "one"
    first.undo()
    assert module.value is original_value


def test_wrap_on_inherited_classmethod_binds_like_the_original():
    class Base:
        @classmethod
        def make(cls, value):
            return (cls, value)

    class Child(Base):
        pass
    context = PatchContext("wrap-classmethod", None)
    context.wrap(Child, "make", lambda wrapped, instance, args, kwargs: wrapped(*args, **kwargs) + ("seen",))
    assert Child.make(1) == (Child, 1, "seen")
    assert Base.make(2) == (Base, 2)
    context.undo()
    assert "make" not in vars(Child) and Child.make(3) == (Child, 3)


# --- property: any sequence of changes, undone in any order, restores everything ---

NAMES = ["alpha", "beta", "method", "build", "gamma"]


def _make_world():
    class Base:
        alpha = "base-alpha"

        def method(self):
            return "base"

        @classmethod
        def build(cls):
            return cls

    class Child(Base):
        beta = "child-beta"

    module = types.ModuleType("world")
    module.alpha = "module-alpha"
    module.method = lambda: "module-method"
    mapping = {"alpha": 1, "gamma": 2}
    return [Base, Child, module], mapping


operation = st.tuples(
    st.sampled_from(["setattr", "delattr", "wrap", "setitem", "delitem"]),
    st.integers(min_value=0, max_value=2),         # which owner
    st.sampled_from(NAMES),
    st.integers(min_value=0, max_value=2),         # which patch context does it
)


def _snapshot(owners, mapping):
    return [dict(vars(owner)) for owner in owners] + [dict(mapping)]


def _same(before, after):
    return all(first.keys() == second.keys() and all(first[key] is second[key] for key in first)
               for first, second in zip(before, after))


@settings(max_examples=300, deadline=None)
@given(operations=st.lists(operation, max_size=25), undo_order=st.permutations([0, 1, 2]))
def test_any_changes_undone_in_any_order_leave_every_dict_identical(operations, undo_order):
    owners, mapping = _make_world()
    before = _snapshot(owners, mapping)
    contexts = [PatchContext(f"patch-{index}", None) for index in range(3)]
    for action, owner_index, name, context_index in operations:
        context, owner = contexts[context_index], owners[owner_index]
        try:
            if action == "setattr":
                context.setattr(owner, name, object())
            elif action == "delattr":
                context.delattr(owner, name)
            elif action == "wrap":
                context.wrap(owner, name, lambda wrapped, instance, args, kwargs: wrapped(*args, **kwargs))
            elif action == "setitem":
                context.setitem(mapping, name, object())
            else:
                context.delitem(mapping, name)
        except (AttributeError, KeyError, TypeError):
            pass   # refused changes (deleting what is not there) must leave no trace
    for index in undo_order:
        contexts[index].undo()
    assert _same(before, _snapshot(owners, mapping))


def test_source_drift_accepts_the_pinned_source_and_names_drift_and_wrappers(tmp_path):
    import importlib.util

    import lazypatch
    from lazypatch.decide.pinning import source_sha256
    path = tmp_path / "upstream.py"
    path.write_text("class Model:\n    def forward(self):\n        return 1\n")
    spec = importlib.util.spec_from_file_location("upstream_for_drift", path)
    upstream = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(upstream)
    pinned = {source_sha256(upstream.Model.forward)}
    assert lazypatch.source_drift(upstream.Model, "forward", pinned, "upstream 1.0") is None
    changed = lazypatch.source_drift(upstream.Model, "forward", {"0" * 64}, "upstream 1.0")
    assert "differs from the version this patch copied (upstream 1.0)" in changed
    context = PatchContext("wrapper", None)
    context.wrap(upstream.Model, "forward", lambda wrapped, instance, args, kwargs: 2)
    wrapped = lazypatch.source_drift(upstream.Model, "forward", pinned, "upstream 1.0")
    assert "already wrapped" in wrapped
    context.undo()
    assert lazypatch.source_drift(upstream.Model, "missing", pinned, "x") == \
        "upstream_for_drift.Model.missing is not defined there"


def test_undoing_a_wrap_under_another_takes_its_wrapper_out_of_the_calls():
    # Two patches wrap one function (and one method); undoing the first, lower one must
    # leave only the second's wrapper running, not both (the second wrapped the first's
    # wrapper object): the wrap above is pointed at what the undone one wrapped.
    module = types.ModuleType("stacked_wraps")

    def function(value):
        return value
    module.function = function

    class Holder:
        def method(self, value):
            return value
    module.Holder = Holder
    raw_method = Holder.__dict__["method"]

    def times(factor):
        return lambda wrapped, instance, args, kwargs: wrapped(*args, **kwargs) * factor
    lower, upper = PatchContext("lower", module), PatchContext("upper", module)
    for context, factor in ((lower, 2), (upper, 3)):
        context.wrap(module, "function", times(factor))
        context.wrap(Holder, "method", times(factor))
    assert module.function(1) == 6 and Holder().method(1) == 6
    lower.undo()
    assert module.function(1) == 3 and Holder().method(1) == 3
    assert module.function.__wrapped__ is function
    upper.undo()
    assert module.function is function and Holder.__dict__["method"] is raw_method

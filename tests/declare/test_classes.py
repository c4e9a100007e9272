"""Declarative class patches (``@lazypatch.patches``): lazy, exact undo, conditions, listing.

Each scenario writes a real target package to disk and runs in a fresh
interpreter, so the patch fires through the real import of its module.
"""

from __future__ import annotations

import textwrap

import pytest

TARGET_PACKAGE = {
    "shapes/__init__.py": "",
    "shapes/geometry.py": """
        class Base:
            def area(self):
                return "base-area"

            @classmethod
            def make(cls):
                return ("base-make", cls.__name__)

        class Square(Base):
            side = 2

            def perimeter(self):
                return 4 * self.side

            @classmethod
            def unit(cls):
                return cls()

            @staticmethod
            def sides():
                return 4

            @property
            def diagonal(self):
                return "original-diagonal"

            class Corner:
                def angle(self):
                    return 90
    """,
}

DECLARATIONS = """
    import json, sys
    import lazypatch
    from lazypatch.declare.classes import requires, class_patches

    @lazypatch.patches("shapes.geometry.Square", name="demo.square")
    class patched_Square:
        def perimeter(self):
            return "patched-perimeter"

        @classmethod
        def unit(cls):
            return ("patched-unit", cls.__name__)

        @staticmethod
        def sides():
            return "patched-sides"

        @property
        def diagonal(self):
            return "patched-diagonal"

        def area(self):                      # inherited from Base on the target
            return "patched-area"

        @requires("pytest>=1")                # installed: applied
        def kept(self):
            return "kept"

        @classmethod
        @requires("pytest<1")                 # fails: skipped, not replaced
        def make(cls):
            return "patched-make"

    @lazypatch.patches("shapes.geometry.Square.Corner", name="demo.corner")
    class patched_Corner:
        def angle(self):
            return "patched-angle"
"""


def test_members_replace_the_target_lazily_and_undo_exactly(interpreter):
    interpreter.write(TARGET_PACKAGE)
    result = interpreter.run_json(textwrap.dedent(DECLARATIONS) + textwrap.dedent("""
        imported_early = "shapes.geometry" in sys.modules
        from shapes.geometry import Square, Base
        originals = {key: lazypatch.original(Square, key)
                     for key in ("perimeter", "unit", "sides", "diagonal")}
        square = Square()
        applied = {
            "perimeter": square.perimeter(), "unit": Square.unit(),
            "sides": Square.sides(), "diagonal": square.diagonal, "area": square.area(),
            "make": Square.make(), "kept": square.kept(),
            "angle": Square.Corner().angle(),
            "unit_is_classmethod": isinstance(Square.__dict__["unit"], classmethod),
            "sides_is_staticmethod": isinstance(Square.__dict__["sides"], staticmethod),
            "patched_class": patched_Square._PATCHED_CLASS_ is Square,
            "patches_list": sorted(patched_Square._PATCHES_),
        }
        listing = {entry["name"]: entry for entry in class_patches()}
        lazypatch.unpatch("demo.square")
        lazypatch.unpatch("demo.corner")
        restored = dict(Square.__dict__)
        undone = {
            "identity": all(restored[key] is originals[key] for key in originals),
            "unit": Square.unit().__class__.__name__, "sides": Square.sides(),
            "diagonal": square.diagonal, "perimeter": square.perimeter(),
            "area_inherited_again": "area" not in Square.__dict__ and square.area() == "base-area",
            "kept_gone": "kept" not in Square.__dict__,
            "angle": Square.Corner().angle(),
            "unit_is_classmethod": isinstance(Square.__dict__["unit"], classmethod),
        }
        print(json.dumps({"imported_early": imported_early, "applied": applied,
                          "listing": listing, "undone": undone}))
    """))
    assert result["imported_early"] is False          # declaring imports nothing
    applied = result["applied"]
    assert applied["perimeter"] == "patched-perimeter"
    assert applied["unit"] == ["patched-unit", "Square"]   # still binds to the class
    assert applied["sides"] == "patched-sides"
    assert applied["diagonal"] == "patched-diagonal"
    assert applied["area"] == "patched-area"
    assert applied["make"] == ["base-make", "Square"]      # its condition failed
    assert applied["kept"] == "kept"
    assert applied["angle"] == "patched-angle"             # nested class resolved
    assert applied["unit_is_classmethod"] and applied["sides_is_staticmethod"]
    assert applied["patched_class"] is True
    assert applied["patches_list"] == ["area", "diagonal", "kept", "perimeter", "sides", "unit"]
    square = result["listing"]["demo.square"]
    assert square["target"] == "shapes.geometry.Square"
    assert square["status"] == "applied"
    assert "make" in square["skipped"] and "pytest<1" in square["skipped"]["make"]
    assert "make" not in square["replaced"]
    undone = result["undone"]
    assert undone["identity"] is True
    assert undone["unit"] == "Square" and undone["sides"] == 4
    assert undone["diagonal"] == "original-diagonal" and undone["perimeter"] == 8
    assert undone["area_inherited_again"] is True      # no shadow copy left on Square
    assert undone["kept_gone"] is True
    assert undone["angle"] == 90
    assert undone["unit_is_classmethod"] is True


def test_already_imported_target_is_patched_at_declaration(interpreter):
    interpreter.write(TARGET_PACKAGE)
    result = interpreter.run_json("""
        import json
        import lazypatch
        from shapes.geometry import Square
        before = Square.sides()

        @lazypatch.patches("shapes.geometry:Square", name="late.square")
        class patched:
            @staticmethod
            def sides():
                return "late"

        print(json.dumps([before, Square.sides(), patched._PATCHES_,
                          patched._PATCHED_CLASS_ is Square]))
    """)
    assert result == [4, "late", ["sides"], True]


@pytest.mark.stack
def test_real_torch_class_classmethod_and_inherited_method(interpreter):
    """torch.nn.Linear inherits ``extra_repr``-style members from Module: undo must not
    leave a copy on Linear, and a patched classmethod must bind to subclasses."""
    result = interpreter.run_json("""
        import json
        import lazypatch

        @lazypatch.patches("torch.nn.modules.linear.Linear", name="torch.linear_demo")
        class patched_Linear:
            def train(self, mode=True):           # inherited from torch.nn.Module
                self.flag = ("patched-train", mode)
                return self

            @classmethod
            def describe(cls):
                return cls.__name__

        import torch
        layer = torch.nn.Linear(2, 2)
        layer.train(False)
        patched_flag = list(layer.flag)
        class Sub(torch.nn.Linear):
            pass
        bound = Sub.describe()
        lazypatch.unpatch("torch.linear_demo")
        print(json.dumps({
            "patched": patched_flag, "bound": bound,
            "train_own_after_undo": "train" in torch.nn.Linear.__dict__,
            "train_is_module_train": torch.nn.Linear.train is torch.nn.Module.train,
            "describe_gone": not hasattr(torch.nn.Linear, "describe"),
        }))
    """)
    assert result == {"patched": ["patched-train", False], "bound": "Sub",
                      "train_own_after_undo": False, "train_is_module_train": True,
                      "describe_gone": True}


def test_missing_target_class_fails_the_patch_not_the_import(interpreter):
    interpreter.write(TARGET_PACKAGE)
    result = interpreter.run_json("""
        import json, warnings
        import lazypatch

        @lazypatch.patches("shapes.geometry.Circle", name="demo.circle")
        class patched_Circle:
            def area(self):
                return 0

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import shapes.geometry
        record = [r for r in lazypatch.report() if r.name == "demo.circle"][0]
        print(json.dumps([record.status, record.reason, len(caught)]))
    """)
    status, reason, warning_count = result
    assert status == "failed"
    assert "Circle" in reason and "shapes.geometry" in reason
    assert warning_count >= 1


def test_bad_declarations_fail_at_the_decorator_line():
    import lazypatch
    from lazypatch.declare.classes import requires, split_target

    with pytest.raises(ValueError, match="requirement"):
        requires("not a version spec ===")
    with pytest.raises(TypeError, match="decorates a class"):
        lazypatch.patches("somepkg.mod.Thing", name="bad.function")(lambda: None)
    with pytest.raises(ValueError, match="no members"):
        lazypatch.patches("somepkg.mod.Thing", name="bad.empty")(type("Empty", (), {}))
    with pytest.raises(ValueError, match="not a valid dotted module"):
        split_target("1pkg.Thing")
    assert split_target("pkg.mod.Outer.Inner") == ("pkg.mod", ["Outer", "Inner"])
    assert split_target("pkg.mod:outer.inner") == ("pkg.mod", ["outer", "inner"])
    assert split_target("pkg.mod.thing") == ("pkg.mod", ["thing"])

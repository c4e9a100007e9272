"""``aliases=[...]`` on ``lazypatch.replace`` / ``lazypatch.wrap``: re-exports rebound too.

Each alias is resolved when its own module is imported, holds the very object
the main path holds, and is undone exactly with it. Fresh interpreters, real
packages on disk, and the real mmdet for its ``FPN`` re-export.
"""

from __future__ import annotations

import pytest

REEXPORT_FILES = {
    # The defining module, a package that re-exports it, and one imported later.
    "lib/__init__.py": "",
    "lib/ops/__init__.py": "from .kernels import fused, Kernel\n",
    "lib/ops/kernels.py": """
        def fused(x):
            return ("cuda fused", x)

        class Kernel:
            def run(self):
                return "cuda run"
    """,
    "lib/api.py": "from lib.ops.kernels import fused as public_fused\n",
    "lib/unrelated.py": "def fused(x):\n    return ('unrelated', x)\n",
    "shims.py": """
        def fused(x):
            return ("npu fused", x)

        def run(self):
            return "npu run"
    """,
}


def test_aliases_are_rebound_to_the_same_object_when_each_module_is_imported(interpreter):
    interpreter.write(REEXPORT_FILES)
    result = interpreter.run_json("""
    import json, sys, lazypatch
    name = lazypatch.replace("lib.ops.kernels.fused", "shims:fused",
                             aliases=["lib.ops.fused", "lib.api.public_fused"])
    imported = [m for m in ("lib", "lib.ops", "lib.api", "shims") if m in sys.modules]
    import lib.ops
    ops_fused = lib.ops.fused(1)
    api_before_import = "lib.api" in sys.modules
    import lib.api                       # imported later: its alias applies then
    same_object = lib.api.public_fused is lib.ops.kernels.fused is lib.ops.fused
    api_fused = lib.api.public_fused(2)
    statuses = {r.name: r.status for r in lazypatch.report()}
    lazypatch.unpatch(name)
    print(json.dumps({"imported": imported, "ops": ops_fused, "api_before": api_before_import,
                      "api": api_fused, "same": same_object,
                      "statuses": statuses,
                      "undone": [lib.ops.kernels.fused(3), lib.ops.fused(3),
                                 lib.api.public_fused(3)],
                      "after": {r.name: r.status for r in lazypatch.report()}}))
    """)
    assert result["imported"] == []
    assert result["ops"] == ["npu fused", 1]
    assert result["api_before"] is False
    assert result["api"] == ["npu fused", 2] and result["same"] is True
    main = "replace:lib.ops.kernels.fused"
    assert result["statuses"] == {main: "applied", f"{main}.alias:lib.ops.fused": "applied",
                                  f"{main}.alias:lib.api.public_fused": "applied"}
    assert result["undone"] == [["cuda fused", 3]] * 3
    assert set(result["after"].values()) == {"reverted"}


def test_wrap_with_an_alias_gives_one_wrapper_and_a_class_alias_changes_nothing_twice(interpreter):
    interpreter.write(REEXPORT_FILES)
    result = interpreter.run_json("""
    import json, warnings, lazypatch
    calls = []

    def count(wrapped, instance, args, kwargs):
        calls.append(1)
        return wrapped(*args, **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter("error")          # a conflict warning would fail here
        lazypatch.wrap("lib.ops.kernels.fused", count, aliases=["lib.ops.fused"])
        # The same class reached by two paths: one slot, changed once.
        lazypatch.replace("lib.ops.kernels.Kernel.run", "shims:run",
                          aliases=["lib.ops.Kernel.run"], name="kernel-run")
        import lib.ops
    lib.ops.fused(1); lib.ops.kernels.fused(2)
    records = {r.name: r for r in lazypatch.report()}
    alias = records["kernel-run.alias:lib.ops.Kernel.run"]
    print(json.dumps({"one_wrapper": lib.ops.fused is lib.ops.kernels.fused, "calls": len(calls),
                      "run": lib.ops.Kernel().run(), "alias_status": alias.status,
                      "alias_notes": alias.notes}))
    """)
    assert result["one_wrapper"] is True and result["calls"] == 2
    assert result["run"] == "npu run"
    assert result["alias_status"] == "applied"
    assert any("the same attribute" in note for note in result["alias_notes"])


def test_an_alias_that_holds_another_object_fails_and_leaves_it_alone(interpreter):
    interpreter.write(REEXPORT_FILES)
    result = interpreter.run_json("""
    import json, warnings, lazypatch
    lazypatch.replace("lib.ops.kernels.fused", "shims:fused", aliases=["lib.unrelated.fused"])
    import lib.ops
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        import lib.unrelated
    alias = [r for r in lazypatch.report() if ".alias:" in r.name][0]
    print(json.dumps({"status": alias.status, "reason": alias.reason,
                      "unrelated": lib.unrelated.fused(1), "main": lib.ops.kernels.fused(1)}))
    """)
    assert result["status"] == "failed" and "not the original" in result["reason"]
    assert result["unrelated"] == ["unrelated", 1]
    assert result["main"] == ["npu fused", 1]


def test_an_alias_imported_before_the_main_path_makes_the_same_change_itself(interpreter):
    interpreter.write({**REEXPORT_FILES,
                       # Re-exports without importing the defining module first.
                       "early/__init__.py": "def fused(x):\n    return ('cuda', x)\n",
                       "early/late.py": "from early import fused\n"})
    result = interpreter.run_json("""
    import json, lazypatch
    name = lazypatch.replace("early.late.fused", "shims:fused", aliases=["early.fused"])
    import early                          # the alias's module; the main path's is not yet
    alias_first = early.fused(1)
    statuses = {r.name: r.status for r in lazypatch.report()}
    lazypatch.unpatch(name)
    print(json.dumps({"alias_first": alias_first, "statuses": statuses,
                      "undone": early.fused(2)}))
    """)
    assert result["alias_first"] == ["npu fused", 1]
    assert result["statuses"] == {"replace:early.late.fused": "skipped",   # waiting for early.late
                                  "replace:early.late.fused.alias:early.fused": "applied"}
    assert result["undone"] == ["cuda", 2]


@pytest.mark.stack
def test_alias_on_real_mmdet_fpn_reexport(interpreter):
    interpreter.write({"npu_fpn.py": """
        from mmdet.models.necks.fpn import FPN

        class NpuFPN(FPN):
            def forward(self, inputs):
                return ("npu fpn", len(inputs))
    """})
    result = interpreter.run_json("""
    import lazypatch.auto              # the openmmlab pack lets mmdet accept mmcv-lite 2.2
    import json, sys, lazypatch
    name = lazypatch.replace("mmdet.models.necks.fpn.FPN", "npu_fpn:NpuFPN",
                             aliases=["mmdet.models.necks.FPN", "mmdet.models.FPN"])
    imported_at_declaration = "mmdet" in sys.modules
    import mmdet.models
    from mmdet.models.necks import fpn as fpn_module
    from npu_fpn import NpuFPN
    original = NpuFPN.__mro__[1]
    rebound = [mmdet.models.FPN is NpuFPN, mmdet.models.necks.FPN is NpuFPN,
               fpn_module.FPN is NpuFPN]
    statuses = sorted({r.status for r in lazypatch.report() if r.name.startswith(name)})
    lazypatch.unpatch(name)
    restored = [mmdet.models.FPN is original, mmdet.models.necks.FPN is original,
                fpn_module.FPN is original]
    print(json.dumps({"imported": imported_at_declaration, "rebound": rebound,
                      "statuses": statuses, "restored": restored}))
    """, timeout=300)
    assert result == {"imported": False, "rebound": [True, True, True], "statuses": ["applied"],
                      "restored": [True, True, True]}


@pytest.mark.parametrize("aliases, message", [
    ("lib.ops.fused", "list of dotted paths"),
    (["toplevel"], "dotted path"),
    (["lib.ops.kernels.fused"], "the path itself"),
    (["a.b", "a.b"], "repeat"),
    (42, "list of dotted paths"),
])
def test_bad_aliases_raise_and_register_nothing(forget_new_patches, aliases, message):
    import lazypatch
    with pytest.raises((TypeError, ValueError), match=message):
        lazypatch.replace("lib.ops.kernels.fused", "shims:fused", aliases=aliases)
    assert lazypatch.report() == []

"""``lazypatch.registry_entry``: entries of real mmengine / mmdet registries, lazily and exactly.

Each scenario runs the real mmengine and mmdet in a fresh interpreter: the
entry is set when the registry's module is imported, ``build`` from a config
returns the replacement, and after ``unpatch`` it returns the original again
(an entry that did not exist is gone).
"""

from __future__ import annotations

import pytest

SHIM = {"npu_necks.py": """
    from mmdet.models.necks.fpn import FPN

    class NpuFPN(FPN):
        '''An FPN whose forward says it is the replacement.'''
        def forward(self, inputs):
            return ("npu fpn", len(inputs))
""", "plain_necks.py": """
    # Imports nothing of mmdet: resolving it does not register the real FPN.
    class PlainFPN:
        def __init__(self, **config):
            self.config = config

    class ExtraNeck:
        def __init__(self, width=1):
            self.width = width
"""}

FPN_CONFIG = 'dict(type="FPN", in_channels=[4, 8], out_channels=4, num_outs=2)'


@pytest.mark.stack
def test_build_gives_the_replacement_and_the_original_after_unpatch(interpreter):
    interpreter.write(SHIM)
    result = interpreter.run_json(f"""
    import lazypatch.auto              # the openmmlab pack lets mmdet accept mmcv-lite 2.2
    import json, sys, lazypatch
    name = lazypatch.registry_entry("mmdet.registry:MODELS", "FPN", "plain_necks:PlainFPN")
    added = lazypatch.registry_entry("mmdet.registry.MODELS", "ExtraNeck", "plain_necks:ExtraNeck")
    imported_at_declaration = [m for m in ("mmdet", "mmengine", "npu_necks") if m in sys.modules]
    from mmdet.registry import MODELS
    # MODELS imports mmdet.models on first use (its locations): the real FPN registers
    # itself then, while the replacement holds the key.
    neck = MODELS.build({FPN_CONFIG})
    extra = MODELS.build(dict(type="ExtraNeck", width=3))
    records = {{r.name: r for r in lazypatch.report()}}
    lazypatch.unpatch(name)
    lazypatch.unpatch(added)
    restored = MODELS.build({FPN_CONFIG})
    print(json.dumps({{
        "imported": imported_at_declaration,
        "built": type(neck).__name__, "extra": [type(extra).__name__, extra.width],
        "statuses": [records[name].status, records[added].status],
        "notes": records[name].notes + records[added].notes,
        "restored": type(restored).__module__ + "." + type(restored).__name__,
        "extra_gone": MODELS.get("ExtraNeck") is None,
        "guard_gone": "_register_module" not in vars(MODELS),
    }}))
    """, timeout=300)
    assert result["imported"] == []
    assert result["built"] == "PlainFPN"
    assert result["extra"] == ["ExtraNeck", 3]
    assert result["statuses"] == ["applied", "applied"]
    assert "mmdet.registry:MODELS['FPN']: added" in result["notes"]      # not registered yet
    assert "mmdet.registry.MODELS['ExtraNeck']: added" in result["notes"]
    assert result["restored"] == "mmdet.models.necks.fpn.FPN"
    assert result["extra_gone"] is True and result["guard_gone"] is True


@pytest.mark.stack
def test_entry_of_an_already_filled_registry_is_replaced_and_restored_by_identity(interpreter):
    interpreter.write(SHIM)
    result = interpreter.run_json(f"""
    import lazypatch.auto
    import json, lazypatch
    from mmdet.registry import MODELS
    import mmdet.models
    original = MODELS.get("FPN")
    name = lazypatch.registry_entry("mmdet.registry:MODELS", "FPN", "npu_necks:NpuFPN")
    neck = MODELS.build({FPN_CONFIG})
    record = [r for r in lazypatch.report() if r.name == name][0]
    lazypatch.unpatch(name)
    print(json.dumps({{"built": type(neck).__name__, "notes": record.notes,
                      "restored": MODELS.get("FPN") is original}}))
    """, timeout=300)
    assert result["built"] == "NpuFPN"
    assert result["notes"] == ["mmdet.registry:MODELS['FPN']: replaced 'FPN'"]
    assert result["restored"] is True


@pytest.mark.stack
def test_build_through_the_default_scope_and_the_root_registry_is_separate(interpreter):
    interpreter.write(SHIM)
    result = interpreter.run_json(f"""
    import lazypatch.auto
    import json, lazypatch
    from mmengine.registry import DefaultScope, MODELS as ROOT
    lazypatch.registry_entry("mmdet.registry:MODELS", "FPN", "npu_necks:NpuFPN")
    lazypatch.registry_entry("mmengine.registry:MODELS", "ExtraNeck", "plain_necks:ExtraNeck",
                             name="root-extra")
    from mmdet.registry import MODELS
    DefaultScope.get_instance("scenario", scope_name="mmdet")
    via_root = ROOT.build({FPN_CONFIG})             # the default scope picks mmdet's MODELS
    from_child = MODELS.build(dict(type="ExtraNeck"))  # found in the parent (root) registry
    lazypatch.unpatch("root-extra")
    print(json.dumps({{"via_root": type(via_root).__name__,
                      "from_child": type(from_child).__name__,
                      "root_gone": "ExtraNeck" not in ROOT.module_dict}}))
    """, timeout=300)
    assert result == {"via_root": "NpuFPN", "from_child": "ExtraNeck", "root_gone": True}


def test_a_path_that_is_not_a_registry_fails_naming_it(interpreter):
    interpreter.write({"notregistry.py": "MODELS = {}\n", **SHIM})
    result = interpreter.run_json("""
    import json, warnings, lazypatch
    name = lazypatch.registry_entry("notregistry:MODELS", "FPN", "plain_necks:ExtraNeck")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        import notregistry
    record = [r for r in lazypatch.report() if r.name == name][0]
    print(json.dumps({"status": record.status, "reason": record.reason,
                      "untouched": notregistry.MODELS}))
    """)
    assert result["status"] == "failed"
    assert "not an mmengine/mmcv Registry" in result["reason"]
    assert result["untouched"] == {}


@pytest.mark.parametrize("arguments, message", [
    (("mmdet.registry:MODELS", "", "x:y"), "non-empty string"),
    (("mmdet.registry:MODELS", "FPN", None), "None"),
    (("mmdet.registry:MODELS", "FPN", "x:"), "package.module:attribute"),
    (("MODELS", "FPN", "x:y"), "dotted path"),
])
def test_bad_registry_entries_raise_and_register_nothing(forget_new_patches, arguments, message):
    import lazypatch
    with pytest.raises((TypeError, ValueError), match=message):
        lazypatch.registry_entry(*arguments)
    assert lazypatch.report() == []

"""Opt-in packs: declared at activation, imported only when a selector names them.

A pack whose every patch is off by default (the device and cuda_extensions packs)
would cost every process its registrations for patches that almost never run;
``lazypatch.declare_opt_in_pack`` defers the import until LAZYPATCH_ENABLE,
``enable()``, ``configure`` or ``lazypatch list`` names the pack.
"""

from __future__ import annotations

import pytest

import lazypatch

PACK = {
    "mypacks/__init__.py": "",
    "mypacks/gpuish.py": """
        import sys, lazypatch
        sys.modules.setdefault("gpuish_imports", []).append(1)

        @lazypatch.when_imported("gpuish_target", name="gpuish.shout", enabled=False,
                                 tags=["gpuish"])
        def shout(module):
            module.VALUE = "patched"
    """,
    "gpuish_target.py": "VALUE = 'original'\n",
}

DECLARE = """
import json, sys, lazypatch
lazypatch.declare_opt_in_pack("gpuish", "mypacks.gpuish")
"""


def _names() -> str:
    return '[r["name"] for r in lazypatch.report() if r["name"].startswith("gpuish")]'


def test_declared_pack_is_not_imported_until_named(interpreter):
    interpreter.write(PACK)
    result = interpreter.run_json(DECLARE + f"""
before = ("mypacks.gpuish" in sys.modules, {_names()})
import gpuish_target
untouched = gpuish_target.VALUE
chosen = lazypatch.enable("gpuish")          # loads the pack, then enables, then applies
print(json.dumps({{"before": before, "untouched": untouched, "chosen": chosen,
                  "value": gpuish_target.VALUE, "imports": len(sys.modules["gpuish_imports"]),
                  "after": {_names()}}}))
""")
    assert result["before"] == [False, []]
    assert result["untouched"] == "original"
    assert result["chosen"] == ["gpuish.shout"]
    assert result["value"] == "patched"
    assert result["imports"] == 1
    assert result["after"] == ["gpuish.shout"]


@pytest.mark.parametrize("selector", ["gpuish", "gpuish.shout", "gpuish.*", "tag:gpuish", "*"])
def test_configuration_naming_the_pack_loads_it_at_declaration(interpreter, selector):
    interpreter.write(PACK)
    result = interpreter.run_json(DECLARE + """
import gpuish_target
print(json.dumps({"loaded": "mypacks.gpuish" in sys.modules, "value": gpuish_target.VALUE}))
""", env={"LAZYPATCH_ENABLE": selector})
    assert result == {"loaded": True, "value": "patched"}


@pytest.mark.parametrize("selector", ["other", "gpuishness", "tag:other", "othe*"])
def test_selectors_that_cannot_name_the_pack_leave_it_unloaded(interpreter, selector):
    interpreter.write(PACK)
    result = interpreter.run_json(DECLARE + """
print(json.dumps({"loaded": "mypacks.gpuish" in sys.modules}))
""", env={"LAZYPATCH_DISABLE": selector})
    assert result == {"loaded": False}


def test_disable_by_name_loads_and_keeps_it_off(interpreter):
    interpreter.write(PACK)
    result = interpreter.run_json(DECLARE + """
lazypatch.disable("gpuish.shout")
import gpuish_target
print(json.dumps({"value": gpuish_target.VALUE,
                  "status": [r["status"] for r in lazypatch.report() if r["name"] == "gpuish.shout"]}))
""")
    assert result == {"value": "original", "status": ["disabled"]}


def test_builtin_opt_in_packs_cost_nothing_until_enabled(interpreter):
    result = interpreter.run_json("""
import json, sys
import lazypatch.auto, lazypatch
loaded = [m for m in ("lazypatch.registry.device", "lazypatch.registry.cuda_extensions")
          if m in sys.modules]
print(json.dumps({"loaded": loaded,
                  "device_rows": [r["name"] for r in lazypatch.report() if r["name"].startswith("device.")]}))
""")
    assert result == {"loaded": [], "device_rows": []}
    enabled = interpreter.run_json("""
import json, sys
import lazypatch.auto, lazypatch
print(json.dumps({"loaded": "lazypatch.registry.cuda_extensions" in sys.modules,
                  "device": "lazypatch.registry.device" in sys.modules}))
""", env={"LAZYPATCH_ENABLE": "cuda_extensions"})
    assert enabled == {"loaded": True, "device": False}


def test_list_shows_opt_in_packs(interpreter):
    result = interpreter.run_command(
        [__import__("sys").executable, "-m", "lazypatch", "list", "--all"])
    assert "device.factories" in result.stdout
    assert "cuda_extensions.flash_attn" in result.stdout


@pytest.mark.parametrize("name, module", [("", "x"), ("a.b", "x"), (3, "x"), ("ok", ""),
                                          ("ok", None)])
def test_bad_declarations_are_refused_early(name, module):
    with pytest.raises(ValueError, match="opt-in pack|module must be"):
        lazypatch.declare_opt_in_pack(name, module)


def test_naming_an_opt_in_pack_without_activation_registers_it(interpreter):
    """`import lazypatch` then `patched("export")`: the built-in opt-in pack is registered
    on demand (no activation needed), a typo gets "did you mean", and a default-on
    built-in pack (registered only by activation) says how to activate."""
    result = interpreter.run_json("""
        import json, sys, lazypatch
        with lazypatch.patched("export") as scope:
            names = scope.names
        errors = []
        for selector in ("exports", "numpy_compat"):
            try:
                with lazypatch.patched(selector):
                    pass
            except KeyError as error:
                errors.append(str(error))
        try:
            lazypatch.enable("devce")
        except KeyError as error:
            errors.append(str(error))
        print(json.dumps({"names": names, "errors": errors,
                          "transformers": "transformers" in sys.modules}))
    """)
    assert "export.cache_pytree" in result["names"]
    assert not result["transformers"]
    typo, default_on, enable_typo = result["errors"]
    assert "did you mean 'export'?" in typo and "not active" not in typo
    assert "'numpy_compat' is a built-in pack that only activation registers" in default_on
    assert "import lazypatch.auto" in default_on
    assert "enable(): no patch matches 'devce' (did you mean 'device'?)" in enable_typo

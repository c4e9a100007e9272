"""Plugin packs from installed distributions (``[lazypatch]`` entry points).

Each test installs a real distribution the way pip would lay it out (a
``*.dist-info`` directory with METADATA and entry_points.txt, beside the
pack's package) in a temporary directory on sys.path, and runs a fresh
interpreter.
"""

from __future__ import annotations

from lazypatch.activate.plugins import parse_entry_points

TARGET = {
    "acme_target/__init__.py": """
        VALUE = "original"
        SEEN_BEFORE_FLAG = globals().get("BEFORE_FLAG", False)
    """,
}

PACK = {
    "acme_patches-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: acme-patches\nVersion: 1.0\n",
    "acme_patches-1.0.dist-info/entry_points.txt": """
        [console_scripts]
        acme = acme_patches:main

        [lazypatch]
        acme_target = acme_patches.fix:apply
    """,
    "acme_patches/__init__.py": "",
    "acme_patches/fix.py": """
        def apply(module, patch):
            patch.setattr(module, "VALUE", "patched by acme")
    """,
}


def _install(interpreter, pack=PACK):
    """Install target and pack into ``<tmp>/site`` (on PYTHONPATH); the test's env."""
    interpreter.write(TARGET)
    interpreter.write({f"site/{path}": text for path, text in pack.items()})
    return {"LAZYPATCH_CACHE_DIR": str(interpreter.root / "cache"),
            "PYTHONPATH": str(interpreter.root / "site")}


def test_pack_module_is_imported_only_with_its_target(interpreter):
    env = _install(interpreter)
    result = interpreter.run_json("""
        import json, sys
        import lazypatch.auto
        import lazypatch
        at_activation = "acme_patches.fix" in sys.modules or "acme_patches" in sys.modules
        metadata_loaded = "importlib.metadata" in sys.modules
        import acme_target
        record = {r.name: r for r in lazypatch.report()}["acme_patches.acme_target"]
        print(json.dumps([at_activation, metadata_loaded, "acme_patches.fix" in sys.modules,
                          acme_target.VALUE, record.status, record.tags]))
    """, env=env)
    assert result == [False, False, True, "patched by acme", "applied", ["acme_patches", "plugin"]]


def test_module_pack_takes_part_in_the_first_import_before_and_after(interpreter):
    env = _install(interpreter, {
        "declaring-2.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: declaring\nVersion: 2.0\n",
        "declaring-2.0.dist-info/entry_points.txt": "[lazypatch]\nacme_target = declaring_pack\n",
        "declaring_pack.py": """
            import lazypatch

            @lazypatch.before_import("acme_target", name="declaring.flag")
            def flag(module, patch):
                patch.setattr(module, "BEFORE_FLAG", True)

            @lazypatch.when_imported("acme_target", name="declaring.value")
            def value(module, patch):
                patch.setattr(module, "VALUE", "after " + module.VALUE)
        """,
    })
    result = interpreter.run_json("""
        import json, sys
        import lazypatch.auto
        imported_early = "declaring_pack" in sys.modules
        import acme_target
        print(json.dumps([imported_early, acme_target.SEEN_BEFORE_FLAG, acme_target.VALUE]))
    """, env=env)
    assert result == [False, True, "after original"]


def test_cache_is_used_and_invalidated_when_a_distribution_is_installed(interpreter):
    env = _install(interpreter)
    code = """
        import json, lazypatch.activate.plugins as plugins
        if {forbid_scan}:
            scan_directory = plugins.scan_directory
            def scan_unless_site(directory):
                assert not directory.endswith("site"), "rescanned " + directory
                return scan_directory(directory)
            plugins.scan_directory = scan_unless_site
        import lazypatch.auto
        from lazypatch.state import STATE
        print(json.dumps(sorted(STATE.plugin_entries)))
    """
    first = interpreter.run_json(code.format(forbid_scan=False), env=env)
    assert first == ["acme_patches.acme_target"]
    # Nothing changed on disk: the cache answers without listing any directory.
    cached = interpreter.run_json(code.format(forbid_scan=True), env=env)
    assert cached == first
    interpreter.write({
        "site/other_pack-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: other-pack\nVersion: 0.1\n",
        "site/other_pack-0.1.dist-info/entry_points.txt": "[lazypatch]\nacme_target.sub = other:fix\n",
    })
    after_install = interpreter.run_json(code.format(forbid_scan=False), env=env)
    assert after_install == ["acme_patches.acme_target", "other_pack.acme_target.sub"]


def test_malformed_entry_point_warns_and_the_rest_still_loads(interpreter):
    env = _install(interpreter, dict(PACK, **{
        "broken-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: broken\nVersion: 1.0\n",
        "broken-1.0.dist-info/entry_points.txt": "[lazypatch]\n9bad = x:y\nok_target = not a module\n",
    }))
    result = interpreter.run("""
        import lazypatch.auto, acme_target
        print(acme_target.VALUE)
    """, env=env)
    assert "patched by acme" in result.stdout
    assert "plugin pack skipped" in result.stderr and "9bad" in result.stderr
    assert "not 'module' or 'module:function'" in result.stderr


def test_failing_pack_is_reported_and_never_breaks_the_import(interpreter):
    env = _install(interpreter, dict(PACK, **{"acme_patches/fix.py": "raise RuntimeError('pack bug')\n"}))
    result = interpreter.run_json("""
        import json, warnings, lazypatch
        warnings.simplefilter("ignore")
        import lazypatch.auto, acme_target
        record = {r.name: r for r in lazypatch.report()}["acme_patches.acme_target"]
        print(json.dumps([acme_target.VALUE, record.status, "pack bug" in record.reason]))
    """, env=env)
    assert result == ["original", "failed", True]


def test_plugins_can_be_turned_off(interpreter):
    env = _install(interpreter)
    env["LAZYPATCH_PLUGINS"] = "0"
    result = interpreter.run_json("""
        import json, lazypatch.auto, acme_target
        print(json.dumps(acme_target.VALUE))
    """, env=env)
    assert result == "original"


def test_entry_points_text_parsing():
    text = """
        # comment
        [lazypatch]
        mmcv.ops = acme.ops:apply [extra]
        ; another comment
        numpy=acme.np
        [other]
        torch = nope:nope
    """
    assert parse_entry_points(text) == [("mmcv.ops", "acme.ops:apply"), ("numpy", "acme.np")]

"""The one activation routine: cheap imports, configuration that never breaks."""

from __future__ import annotations

# Modules activation must never import: targets and heavy libraries, and the
# costly standard modules (lazypatch's own code must not pull them in; the
# environment may already have, e.g. an editable install's finder imports re).
FORBIDDEN = ["torch", "numpy", "wrapt", "mmcv", "mmdet", "mmengine", "re", "typing",
             "logging", "json", "importlib.metadata", "argparse", "tomllib",
             # `from __future__ import annotations` imports this module at run time (0.7M
             # instructions): the activation path quotes its annotations instead.
             "__future__",
             # built in, but made at import: 0.28M instructions (benchmarks/COSTS.md)
             "_collections"]
# Engine and pack modules a plain activation does not run, each loaded when first needed.
LOADED_WHEN_FIRST_USED = ["lazypatch.notices", "lazypatch.slots", "lazypatch.decide.markers",
                          "lazypatch.watch.unfinished", "lazypatch.registry.training.settings",
                          "lazypatch.on_demand", "lazypatch.declare.argument_checks",
                          "lazypatch.activate.setting_files"]
# And those the plugin scan of a first start loads, but not a start that reads the cache:
# the packs' requirement strings are checked at registration and parsed when their
# targets are imported, and with no rule to apply nothing of decide/ is loaded.
LOADED_BY_A_SCAN = ["lazypatch.errors", "lazypatch.activate.plugin_entries", "lazypatch.decide",
                    "lazypatch.decide.selection", "lazypatch.decide.requirements",
                    "lazypatch.decide.versions"]


def test_import_auto_imports_no_target_and_no_costly_module(interpreter):
    script = """
        import sys
        before = set(sys.modules)
        import lazypatch.auto
        added = sorted(set(sys.modules) - before)
        print(lazypatch.activation_info()["activated_by"])
        print(" ".join(added))
    """
    # The first start finds no plugin cache: it scans (plugins.py) and writes one.
    # The second reads the current cache, which lists no pack: plugins.py stays out.
    # A cache of its own: the cache file is per interpreter, and the other tests' starts
    # (each with its own temporary directory on sys.path) rewrite the shared one between
    # these two runs (1 failure in a full parallel run).
    # (Made before the first start: a folder created inside a sys.path directory later
    # would change that directory's mtime, which the cache rightly takes as a change.)
    (interpreter.root / "plugin-cache").mkdir()
    cache = {"LAZYPATCH_CACHE_DIR": str(interpreter.root / "plugin-cache")}
    for run, scanned in ((1, True), (2, False)):
        activated_by, added = interpreter.run(script, env=cache).stdout.splitlines()[-2:]
        assert activated_by == "import lazypatch.auto"
        added = added.split()
        assert "lazypatch.registry" in added and "lazypatch.activate.plugin_cache" in added
        assert ("lazypatch.activate.plugins" in added) is scanned, (run, added)
        assert [name for name in FORBIDDEN if name in added] == []
        # Loaded when first used, never by a plain activation (benchmarks/COSTS.md).
        assert [name for name in LOADED_WHEN_FIRST_USED if name in added] == [], added
        if not scanned:
            assert [name for name in LOADED_BY_A_SCAN if name in added] == [], added


def test_bad_configuration_warns_with_accepted_values_and_never_breaks(interpreter):
    interpreter.write({"bad.toml": "[lazypatch]\nstrict = true\ncolour = 'red'\n",
                       "broken.toml": "this is = = not toml\n"})
    env = {"LAZYPATCH_STRICT": "maybe", "LAZYPATCH_LOG": "LOUD", "LAZYPATCH_DISABEL": "x",
           "LAZYPATCH_DISABLE": "no-such-patch", "LAZYPATCH_MODULES": "no_such_module",
           "LAZYPATCH_CONFIG": str(interpreter.root / "bad.toml"), "LAZYPATCH_PLUGINS": "2"}
    result = interpreter.run("""
        import lazypatch.auto, lazypatch
        info = lazypatch.activation_info()
        print("program ran", info["activated_by"], info["strict"])
    """, env=env)
    assert "program ran import lazypatch.auto False" in result.stdout
    stderr = result.stderr
    assert "LAZYPATCH_STRICT='maybe' is not understood; use one of 1, true" in stderr
    assert "LAZYPATCH_LOG='LOUD' is not a log level; use one of DEBUG" in stderr
    # issue 15: one message per name, with the closest accepted one instead of the full list
    assert "unknown environment variable LAZYPATCH_DISABEL (did you mean 'LAZYPATCH_DISABLE'" \
        in stderr
    assert "'no-such-patch', which match no registered patch" in stderr
    assert "could not import 'no_such_module'" in stderr
    assert "unknown key 'colour'" in stderr and "`lazypatch run --help` lists the accepted keys" \
        in stderr
    broken = interpreter.run("import lazypatch.auto; print('still ran')",
                             env={"LAZYPATCH_CONFIG": str(interpreter.root / "broken.toml")})
    assert "still ran" in broken.stdout and "cannot read LAZYPATCH_CONFIG" in broken.stderr


def test_config_file_settings_apply_and_environment_overrides_them(interpreter):
    interpreter.write({
        "settings.toml": "[lazypatch]\nmodules = ['demo_patches']\nstrict = true\n",
        "demo_target.py": "VALUE = 1\n",
        "demo_patches.py": """
            import lazypatch
            @lazypatch.when_imported("demo_target", name="demo.double")
            def double(module, patch):
                patch.setattr(module, "VALUE", module.VALUE * 2)
        """,
    })
    code = """
        import json, lazypatch.auto, lazypatch, demo_target
        print(json.dumps([demo_target.VALUE, lazypatch.activation_info()["strict"]]))
    """
    config = {"LAZYPATCH_CONFIG": str(interpreter.root / "settings.toml")}
    assert interpreter.run_json(code, env=config) == [2, True]
    assert interpreter.run_json(code, env=dict(config, LAZYPATCH_STRICT="0")) == [2, False]


def test_lazypatch_0_turns_activation_off(interpreter):
    result = interpreter.run_json("""
        import json, sys, lazypatch.auto, lazypatch
        print(json.dumps([lazypatch.activation_info()["activated_by"],
                          "lazypatch.registry" in sys.modules]))
    """, env={"LAZYPATCH": "0"})
    assert result == ["", False]


def test_activation_records_targets_imported_before_it(interpreter):
    interpreter.write({"early.py": "X = 1\n", "early_patches.py": """
        import lazypatch
        @lazypatch.when_imported("early", name="early.mark")
        def mark(module, patch):
            patch.setattr(module, "X", 2)
    """})
    result = interpreter.run_json("""
        import json, early
        import lazypatch.auto, lazypatch
        info = lazypatch.activation_info()
        print(json.dumps([info["imported_before"], early.X, info["sources"]["early.mark"]]))
    """, env={"LAZYPATCH_MODULES": "early_patches"})
    assert result == [["early"], 2, "LAZYPATCH_MODULES"]


def test_what_activation_leaves_unloaded_is_still_reachable_from_the_facade(interpreter):
    result = interpreter.run("""
        import sys
        import lazypatch.auto, lazypatch
        print("slots" in dir(lazypatch), "notices" in dir(lazypatch), "ATTRIBUTE" in dir(lazypatch))
        print("lazypatch.slots" in sys.modules, "lazypatch.notices" in sys.modules)
        from lazypatch import ATTRIBUTE
        print(ATTRIBUTE, lazypatch.slots.ATTRIBUTE, callable(lazypatch.notices.notify))
    """)
    assert result.stdout.splitlines()[-3:] == ["True True True", "False False",
                                               "attribute attribute True"]


def test_a_brake_step_in_the_environment_loads_the_training_settings_at_activation(interpreter):
    script = """
        import sys
        import lazypatch.auto, lazypatch
        on = [record["name"] for record in lazypatch.report() if record["enabled"]
              and record["name"].startswith("training.")]
        print("lazypatch.registry.training.settings" in sys.modules, on)
    """
    braking = interpreter.run(script, env={"LAZYPATCH_BRAKE_STEP": "5"})
    assert braking.stdout.splitlines()[-1] == (
        "True ['training.optimizer_steps', 'training.mmengine_iterations']")
    bad = interpreter.run(script, env={"LAZYPATCH_BRAKE_STEP": "five"})
    assert bad.stdout.splitlines()[-1] == "True []"
    assert "LAZYPATCH_BRAKE_STEP='five' is not a positive integer" in bad.stderr
    plain = interpreter.run(script)
    assert plain.stdout.splitlines()[-1] == "False []"

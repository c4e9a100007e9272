"""A module known under two names: patches keyed by each name it is imported under.

``six.moves.cPickle`` is ``pickle``: six's importer answers the alias name with a
loader whose ``create_module`` hands out the module that already exists, and whose
``exec_module`` runs nothing. A module can also be put into ``sys.modules`` under a
second name by its package (``sys.modules["pkg.alias"] = real``), with no import at all.
"""

SIX_LIKE = {
    "sixlike.py": """
        '''A six.moves-style importer: sixlike.moves.cPickle is the pickle module.'''
        import importlib.util, sys

        __path__ = []   # a package, so that sixlike.moves can be imported from it

        class Importer:
            names = {"sixlike.moves.cPickle": "pickle"}

            def find_spec(self, fullname, path=None, target=None):
                if fullname in self.names or fullname == "sixlike.moves":
                    return importlib.util.spec_from_loader(
                        fullname, self, is_package=fullname == "sixlike.moves")
                return None

            def create_module(self, spec):
                if spec.name in self.names:
                    return importlib.import_module(self.names[spec.name])
                return None

            def exec_module(self, module):
                pass

        sys.meta_path.append(Importer())
    """,
}


def test_an_alias_imported_through_an_importer_gets_its_own_patches_and_leaves_the_real_names(
        interpreter):
    interpreter.write(SIX_LIKE)
    result = interpreter.run_json("""
        import json, lazypatch
        import sixlike

        @lazypatch.when_imported("pickle", name="on_pickle")
        def on_pickle(module, patch):
            patch.setattr(module, "REAL_PATCHED", True)

        @lazypatch.when_imported("sixlike.moves.cPickle", name="on_alias")
        def on_alias(module, patch):
            patch.setattr(module, "ALIAS_PATCHED", True, new=True)

        import pickle
        from sixlike.moves import cPickle
        records = {record["name"]: [record["status"], record["history"]]
                   for record in lazypatch.report()}
        alias_applied = getattr(pickle, "ALIAS_PATCHED", None)
        lazypatch.unpatch("on_alias")
        print(json.dumps({"same": cPickle is pickle, "records": records,
                          "alias_applied": alias_applied,
                          "after_unpatch": [getattr(pickle, "REAL_PATCHED", None),
                                            hasattr(pickle, "ALIAS_PATCHED")]}))
    """)
    assert result["same"] is True
    # The real name's patch was applied once and never taken for a reload.
    assert result["records"]["on_pickle"] == ["applied", ["applied"]]
    assert result["records"]["on_alias"] == ["applied", ["applied"]]
    assert result["alias_applied"] is True
    assert result["after_unpatch"] == [True, False]


def test_an_alias_assigned_into_sys_modules_is_reported_with_the_call_that_applies_it(interpreter):
    interpreter.write({"pkg/__init__.py": """
                           import sys
                           from . import real
                           sys.modules[__name__ + ".alias"] = real
                       """,
                       "pkg/real.py": "VALUE = 'original'\n"})
    result = interpreter.run_json("""
        import json, sys, lazypatch

        @lazypatch.when_imported("pkg.alias", name="on_alias")
        def on_alias(module, patch):
            patch.setattr(module, "VALUE", "patched")

        import pkg.alias
        pending = lazypatch.report()[0]
        applied = lazypatch.notify_module_loaded(sys.modules["pkg.alias"], "pkg.alias")
        import pkg.real
        print(json.dumps({"pending": [pending["status"], pending["reason"]],
                          "applied": applied, "value": pkg.real.VALUE}))
    """)
    status, reason = result["pending"]
    assert status == "pending"
    assert "pkg.alias is in sys.modules but was put there without an import" in reason
    assert "lazypatch.notify_module_loaded(sys.modules['pkg.alias'], 'pkg.alias')" in reason
    assert result["applied"] == ["on_alias"] and result["value"] == "patched"

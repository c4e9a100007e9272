"""rewrite_class: pinned copies of a class's members replace them when the class's
module is imported, only where the version range holds and every member's installed
source is the pinned one; a drifted copy is reported skipped with the reason, and undo
puts back the very same members. Real packages on disk, fresh interpreters.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.stack

# The "upstream" method a carrier copies, as inspect.getsource returns it.
UPSTREAM_TOTAL = '''    def total(self, values):
        return len(values)
'''
DRIFTED_TOTAL = '''    def total(self, values):
        return len(list(values))
'''


def upstream_module(total_source: str) -> str:
    return ("class Counter:\n" + total_source +
            "\n    @classmethod\n    def make(cls):\n        return cls()\n")


def carrier_module(digest: str) -> str:
    """TotalOnly: a pinned copy of Counter.total; WithUnpinned: also a member no digest
    covers (the carrier's own mistake)."""
    return textwrap.dedent(f'''
        class TotalOnly:
            """counts any iterable, not only sized ones"""
            _COPIED_FROM_ = "counting 1.0"
            _PINNED_ = {{"total": frozenset({{{digest!r}}})}}

            def total(self, values):
                return sum(1 for _ in values)

        class WithUnpinned:
            _COPIED_FROM_ = "counting 1.0"
            _PINNED_ = {{"total": frozenset({{{digest!r}}})}}

            def total(self, values):
                return -1

            def extra(self):
                return None
    ''')


# Each declaration targets its own copy of the upstream package; the carriers are
# imported only when a target is.
CODE = '''
import json, sys
import lazypatch.auto, lazypatch
import lazypatch.registry.export as export_pack

def declare(package, carrier="rewrites:TotalOnly", **options):
    return export_pack.rewrite_class(f"{package}.layers:Counter", carrier, **options)

names = dict(
    pinned=declare("pinned"), drifted=declare("drifted"),
    out_of_range=declare("out_of_range", requires=["torch<1"]),
    missing_class=export_pack.rewrite_class("pinned.layers:Absent", "rewrites:TotalOnly"),
    unpinned_member=declare("unpinned", carrier="rewrites:WithUnpinned"),
)
imported_at_declaration = sorted(m for m in ("pinned", "pinned.layers", "rewrites")
                                 if m in sys.modules)
import pinned.layers, drifted.layers, out_of_range.layers, unpinned.layers
originals = {package: vars(sys.modules[package + ".layers"].Counter)["total"]
             for package in ("pinned", "drifted", "out_of_range", "unpinned")}
with lazypatch.patched(*names.values()):
    inside = {package: vars(sys.modules[package + ".layers"].Counter)["total"] is not original
              for package, original in originals.items()}
    counted = pinned.layers.Counter().total(iter("abc"))
    records = {key: dict(status=r.status, reason=r.reason, notes=list(r.notes), error=str(r.error))
               for key, name in names.items() for r in lazypatch.report() if r.name == name}
restored = {package: vars(sys.modules[package + ".layers"].Counter)["total"] is original
            for package, original in originals.items()}
print("RESULT" + json.dumps(dict(names=names, imported_at_declaration=imported_at_declaration,
                                 inside=inside, counted=counted, records=records,
                                 restored=restored)))
'''


def run(code: str, path: str, *arguments: str) -> dict:
    completed = subprocess.run([sys.executable, "-W", "ignore", "-c", code, *arguments],
                               capture_output=True, text=True, timeout=300, cwd=path,
                               env={**os.environ, "PYTHONPATH": path})
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT")]
    assert lines, completed.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT"):])


def test_pinned_rewrite_applies_and_drift_range_and_absence_are_skipped(tmp_path):
    digest = hashlib.sha256(UPSTREAM_TOTAL.encode()).hexdigest()
    for package, source in (("pinned", UPSTREAM_TOTAL), ("drifted", DRIFTED_TOTAL),
                            ("out_of_range", UPSTREAM_TOTAL), ("unpinned", UPSTREAM_TOTAL)):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
        (tmp_path / package / "layers.py").write_text(upstream_module(source))
    (tmp_path / "rewrites.py").write_text(carrier_module(digest))
    result = run(CODE, str(tmp_path))
    records = result["records"]
    assert result["names"]["pinned"] == "export.rewrite.pinned.layers.Counter"
    assert result["imported_at_declaration"] == []

    assert records["pinned"]["status"] == "applied", records["pinned"]
    assert result["inside"]["pinned"] and result["counted"] == 3   # an iterator has no len()
    assert any("counting 1.0" in note and "counts any iterable" in note
               for note in records["pinned"]["notes"]), records["pinned"]

    drifted = records["drifted"]
    assert drifted["status"] == "skipped" and not result["inside"]["drifted"], drifted
    assert "differs from the version this patch copied (counting 1.0)" in drifted["reason"]

    assert records["out_of_range"]["status"] == "skipped", records["out_of_range"]
    assert "torch" in records["out_of_range"]["reason"]
    assert not result["inside"]["out_of_range"]

    assert records["missing_class"]["status"] == "skipped"
    assert "Absent" in records["missing_class"]["reason"]

    unpinned = records["unpinned_member"]
    assert unpinned["status"] == "failed" and "extra" in unpinned["error"], unpinned
    assert not result["inside"]["unpinned"]

    assert all(result["restored"].values()), result["restored"]   # the same objects back


@pytest.mark.parametrize("target, carrier", [("pkg.mod.Class", "a.b:C"), ("pkg.mod:Class", 3),
                                             ("pkg.mod:Class.", "a:B")])
def test_bad_declarations_fail_early(target, carrier):
    code = (f"import lazypatch.auto, lazypatch.registry.export as e\n"
            f"try:\n    e.rewrite_class({target!r}, {carrier!r})\nexcept ValueError as error:\n"
            f"    print('RESULT', error)\n")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               timeout=120)
    assert "RESULT" in completed.stdout and "'pkg.mod:Class'" in completed.stdout, \
        completed.stdout + completed.stderr[-2000:]


DYNAMIC_CACHE = '''
import json, sys
from importlib.metadata import version
import lazypatch.auto, lazypatch
name = "export.rewrite.transformers.cache_utils.DynamicCache"
CARRIER = "lazypatch.registry.export.transformers_4x"

def copies(cls):
    return sorted(key for key, value in vars(cls).items()
                  if getattr(value, "__module__", None) == CARRIER)

# first imported inside the scope, then already imported when a scope is entered
with lazypatch.patched("export") as scope:
    from transformers import cache_utils
    first = [r for r in lazypatch.report() if r.name == name][0]
    replaced_on_import = copies(cache_utils.DynamicCache)
left_after_first = copies(cache_utils.DynamicCache)
before = dict(vars(cache_utils.DynamicCache))
with lazypatch.patched("export"):
    replaced_at_entry = copies(cache_utils.DynamicCache)
restored = all(vars(cache_utils.DynamicCache).get(key) is value for key, value in before.items())
print("RESULT" + json.dumps(dict(
    version=version("transformers"), selected=name in scope.names, status=first.status,
    reason=first.reason, replaced_on_import=replaced_on_import, replaced_at_entry=replaced_at_entry,
    left_after_first=left_after_first, restored=restored)))
'''


def test_the_dynamic_cache_rewrite_applies_only_to_the_versions_it_copies(tmp_path):
    pytest.importorskip("transformers")
    result = run(DYNAMIC_CACHE, str(tmp_path))
    assert result["selected"] and result["restored"], result
    assert result["left_after_first"] == [], result
    major_minor = tuple(int(part) for part in result["version"].split(".")[:2])
    if (4, 47) <= major_minor < (4, 51):
        assert result["status"] == "applied", result
        assert result["replaced_on_import"] == ["get_seq_length", "update"], result
        assert result["replaced_at_entry"] == ["get_seq_length", "update"], result
    else:
        assert result["status"] == "skipped" and "transformers" in result["reason"], result
        assert result["replaced_on_import"] == result["replaced_at_entry"] == [], result

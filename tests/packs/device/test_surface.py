"""The CUDA surface table (registry/device/SURFACE.md) covers the installed torch.

The enumeration runs in a fresh interpreter without the pack, on the torch
installed here: a new torch that adds a CUDA entry point fails the first
test until the table classifies it (rerun
``python -m lazypatch.registry.device.surface``). Entries marked
``redirected`` must really be replaced or wrapped under the pack, or reach a
replaced function (their "how" says "through").
"""

from __future__ import annotations

import json

# The table as the installed pack reads it (registry/device/SURFACE.md).
TABLE_ROWS = """
import json, sys
from lazypatch.registry.device.surface import TABLE, parse
with open(TABLE) as handle:
    ROWS = parse(handle.read())
"""


def test_table_classifies_every_cuda_entry_point_of_the_installed_torch(interpreter):
    output = interpreter.run_json(TABLE_ROWS + '''
import warnings
warnings.simplefilter("ignore")
from lazypatch.registry.device.surface import classify, enumerate_surface
entries = enumerate_surface()
print(json.dumps({"rows": ROWS,
                  "entries": {name: [kind, *classify(name)] for name, kind in entries.items()}}))
''')
    result, rows = output["entries"], {name: tuple(row) for name, row in output["rows"].items()}
    missing = sorted(set(result) - set(rows))
    assert not missing, f"CUDA entry points the table lacks (regenerate it): {missing}"
    unclassified = sorted(name for name, row in rows.items() if row[1] == "unclassified")
    assert not unclassified, f"unclassified in SURFACE.md: {unclassified}"
    stale = sorted(name for name, (kind, treatment, _how) in result.items()
                   if rows[name][:2] != (kind, treatment))
    assert not stale, f"SURFACE.md disagrees with surface_treatments.py: {stale}"
    assert len(result) > 250 and {row[1] for row in rows.values()} == {
        "redirected", "honest", "unsupported"}


def test_redirected_entries_are_replaced_under_the_pack(interpreter):
    """Every `redirected` entry is a replaced/wrapped object, a class with a patched
    constructor (in its MRO), or says which redirected function it goes through."""
    rows = interpreter.run_json(TABLE_ROWS + "print(json.dumps(ROWS))")
    redirected = sorted(name for name, row in rows.items()
                        if row[1] == "redirected" and "through" not in row[2])
    assert len(redirected) > 100
    result = interpreter.run_json('''
        import lazypatch.auto
        import importlib, inspect, json, sys, warnings
        warnings.simplefilter("ignore")
        import lazypatch, torch, torch.cuda.amp, torch.cuda.nvtx, torch.distributed
        import torch.nn.parallel, torch.profiler, torch.jit
        names = json.loads(sys.argv[1])

        def resolve(name):
            parts = name.split(".")
            for split in range(len(parts) - 1, 0, -1):
                try:
                    owner = importlib.import_module(".".join(parts[:split]))
                except ImportError:
                    continue
                for part in parts[split:-1]:
                    owner = getattr(owner, part)
                return owner, parts[-1]

        def patched(name):
            owner, attribute = resolve(name)
            value = getattr(owner, attribute)
            if value is not lazypatch.original(owner, attribute):
                return True
            if any(lazypatch.is_patched(klass, attribute)        # an inherited method
                   for klass in getattr(owner, "__mro__", ())):
                return True
            if inspect.isclass(value):
                return any(lazypatch.is_patched(klass, method) for klass in value.__mro__
                           for method in ("__init__", "__new__"))
            return False
        print(json.dumps([name for name in names if not patched(name)]))
    ''', env={"LAZYPATCH_ENABLE": "device"}, args=[json.dumps(redirected)])
    assert result == [], result
    assert len(rows) - len(redirected) > 100

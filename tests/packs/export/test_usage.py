"""The export pack used as it was asked to be used: ``import lazypatch``, then
``with lazypatch.patched("export"):`` (no activation), on a stock transformers decoder
built from a config, in a fresh interpreter; what the user sees only.

- the scope registers the opt-in pack on demand, and a typo gets "did you mean";
- the program exported inside the scope runs after it, on another shape, equal to
  eager, while pytree's registries are exactly what they were before the scope
  (also after that call);
- a user's own ``class LoggingCache(DynamicCache)``, defined before the scope or
  inside it, exports and runs the same way;
- a program saved and loaded inside the scope runs after it.

Runs on transformers 5.x (.venv) and 4.48 (.venv448): the stock model's cache argument
is ``cache`` on 5.x and ``past_key_values`` on 4.x.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("transformers", reason="the export pack needs transformers "
                    "(pip install -r requirements/export.txt)")
pytestmark = pytest.mark.stack

SCENARIO = r'''
import copy, inspect, json, sys
import lazypatch
import torch
import torch.fx._pytree as fx_pytree
import torch.utils._pytree as pytree
import transformers
from torch.export import Dim

torch.manual_seed(0)
config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=100)
model = transformers.LlamaForCausalLM(config).eval()
CACHE = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class LoggingCache(transformers.DynamicCache):
    updates = 0

    def update(self, *args, **kwargs):
        type(self).updates += 1
        return super().update(*args, **kwargs)


def inputs(batch, length, cached, cache_class):
    try:
        cache = cache_class(config=config)
    except TypeError:   # transformers 4.x: no config argument
        cache = cache_class()
    for layer in range(config.num_hidden_layers):
        cache.update(torch.randn(batch, 2, cached, 8), torch.randn(batch, 2, cached, 8), layer)
    return {"input_ids": torch.randint(0, 100, (batch, length)),
            "attention_mask": torch.ones(batch, length + cached, dtype=torch.long),
            CACHE: cache}


def registries():
    return [dict(table) for table in (pytree.SUPPORTED_NODES, pytree.SUPPORTED_SERIALIZED_TYPES,
                                      pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE,
                                      fx_pytree.SUPPORTED_NODES,
                                      fx_pytree.SUPPORTED_NODES_EXACT_MATCH)]


def export(cache_class):
    import lazypatch.registry.export as export_pack
    example = inputs(2, 3, 5, cache_class)
    shapes = {"input_ids": {0: Dim.DYNAMIC, 1: Dim.DYNAMIC},
              "attention_mask": {0: Dim.DYNAMIC, 1: Dim.DYNAMIC},
              CACHE: export_pack.dynamic_shapes(example[CACHE],
                                                lambda tensor: {0: Dim.DYNAMIC, 2: Dim.DYNAMIC})}
    return torch.export.export(model, (), kwargs=example, dynamic_shapes=shapes)


def difference(program, cache_class):
    other = inputs(3, 4, 7, cache_class)
    eager = model(**copy.deepcopy(other)).logits
    return (program.module()(**other).logits - eager).abs().max().item()


result = {}
try:
    with lazypatch.patched("exports"):
        pass
except KeyError as error:
    result["typo"] = str(error)
before = registries()
with lazypatch.patched("export") as scope:
    result["names"] = scope.names
    program = export(transformers.DynamicCache)
    logging_program = export(LoggingCache)

    class LateCache(transformers.DynamicCache):
        """defined inside the scope"""

    late_program = export(LateCache)
    inside_module = program.module()
result["restored"] = registries() == before
result["after"] = difference(program, transformers.DynamicCache)
result["logging_after"] = difference(logging_program, LoggingCache)
result["late_after"] = difference(late_program, LateCache)
other = inputs(1, 2, 4, transformers.DynamicCache)
eager = model(**copy.deepcopy(other)).logits
result["kept_module"] = (inside_module(**other).logits - eager).abs().max().item()
result["still_restored"] = registries() == before
result["logging_updates"] = LoggingCache.updates
import os, tempfile
path = os.path.join(tempfile.mkdtemp(), "program.pt2")
with lazypatch.patched("export"):   # saving and loading look the cache classes up by name
    torch.export.save(program, path)
    loaded = torch.export.load(path)
result["loaded_after"] = difference(loaded, transformers.DynamicCache)
result["restored_after_loading"] = registries() == before
print("RESULT" + json.dumps(result))
'''


def test_patched_export_without_activation_keeps_the_program_working():
    completed = subprocess.run([sys.executable, "-W", "ignore", "-c", SCENARIO],
                               capture_output=True, text=True, timeout=600)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT")]
    assert lines, completed.stderr[-4000:]
    result = json.loads(lines[-1][len("RESULT"):])
    assert "did you mean 'export'?" in result["typo"] and "not active" not in result["typo"]
    assert "export.cache_pytree" in result["names"]
    assert result["restored"] and result["still_restored"] and result["restored_after_loading"]
    for key in ("after", "logging_after", "late_after", "kept_module", "loaded_after"):
        assert result[key] < 1e-4, (key, result)
    assert result["logging_updates"] > 0

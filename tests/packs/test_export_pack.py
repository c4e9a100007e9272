"""The export pack: torch.export of tiny transformers decoders inside patched("export"),
matching eager on a second shape, and the pytree registries exactly as before afterwards.

Each scenario runs in a fresh interpreter (the pack must import nothing by itself).
Models come from config objects only (2 layers, hidden 32): no weights are downloaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("transformers", reason="the export pack needs transformers "
                    "(requirements/export.txt)")

SCRIPT = textwrap.dedent('''
    import copy, json, sys
    import lazypatch.auto
    import torch
    import torch.fx._pytree as fx_pytree
    import torch.utils._pytree as pytree
    import transformers
    from transformers import DynamicCache
    from torch.export import Dim

    def registries():
        return {name: dict(table) for name, table in (
            ("nodes", pytree.SUPPORTED_NODES), ("serialized", pytree.SUPPORTED_SERIALIZED_TYPES),
            ("by_name", pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE), ("fx", fx_pytree.SUPPORTED_NODES),
            ("fx_exact", fx_pytree.SUPPORTED_NODES_EXACT_MATCH))}

    def same(before, after):
        return all(before[k].keys() == after[k].keys()
                   and all(before[k][key] is after[k][key] for key in before[k]) for k in before)

    FAMILIES = {
        "llama": ("LlamaConfig", "LlamaForCausalLM"),
        "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
        "mistral": ("MistralConfig", "MistralForCausalLM"),
    }

    class Wrapper(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model
        def forward(self, input_ids, attention_mask, past_key_values):
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              past_key_values=past_key_values).logits

    def inputs(config, batch, length, cached):
        cache = DynamicCache(config=config)
        heads = config.num_key_value_heads
        dim = config.hidden_size // config.num_attention_heads
        for layer in range(config.num_hidden_layers):
            cache.update(torch.randn(batch, heads, cached, dim),
                         torch.randn(batch, heads, cached, dim), layer)
        return dict(input_ids=torch.randint(0, config.vocab_size, (batch, length)),
                    attention_mask=torch.ones(batch, length + cached, dtype=torch.long),
                    past_key_values=cache)

    # a node registered before the scope must come back as the very same object
    class Before: pass
    pytree.register_pytree_node(Before, lambda o: ([], None), lambda c, x: Before())
    results = {}
    import lazypatch.registry.export as export_pack
    restored = []
    for family in sys.argv[1].split(","):
        config_name, model_name = FAMILIES[family]
        config = getattr(transformers, config_name)(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=100)
        torch.manual_seed(0)
        model = Wrapper(getattr(transformers, model_name)(config).eval())
        before = registries()
        with lazypatch.patched("export"):
            example = inputs(config, 2, 3, 5)
            flat, spec = pytree.tree_flatten(example["past_key_values"])
            rebuilt = pytree.tree_unflatten(flat, spec)
            roundtrip = all(a is b for a, b in zip(pytree.tree_leaves(rebuilt), flat))
            dynamic = Dim.DYNAMIC
            shapes = dict(input_ids={0: dynamic, 1: dynamic},
                          attention_mask={0: dynamic, 1: dynamic},
                          past_key_values=export_pack.dynamic_shapes(
                              example["past_key_values"], lambda t: {0: dynamic, 2: dynamic}))
            program = torch.export.export(model, (), kwargs=example, dynamic_shapes=shapes,
                                          strict=False)
            other = inputs(config, 3, 4, 7)
            eager = model(**copy.deepcopy(other))
            exported = program.module()(**copy.deepcopy(other))
        results[family] = dict(diff=(eager - exported).abs().max().item(),
                               roundtrip=roundtrip)
        restored.append(same(before, registries()))
    results["registries_restored"] = all(restored)
    results["before_kept"] = pytree.SUPPORTED_NODES.get(Before) is before["nodes"][Before]
    results["cache_registered_after"] = DynamicCache in pytree.SUPPORTED_NODES
    print("RESULT" + json.dumps(results))
''')


def run(families: str) -> dict:
    completed = subprocess.run([sys.executable, "-W", "ignore", "-c", SCRIPT, families],
                               capture_output=True, text=True, timeout=600)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT")]
    assert lines, completed.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT"):])


def test_decoders_export_and_match_eager_registries_restored():
    results = run("llama,qwen2")
    for family in ("llama", "qwen2"):
        assert results[family]["roundtrip"], family
        assert results[family]["diff"] < 1e-4, (family, results[family])
    assert results["registries_restored"]
    assert results["before_kept"]
    assert not results["cache_registered_after"]


@pytest.mark.slow
def test_more_decoders_export():
    results = run("mistral")
    assert results["mistral"]["diff"] < 1e-4


def test_entering_the_scope_imports_nothing():
    code = textwrap.dedent('''
        import sys, json
        import lazypatch.auto, lazypatch
        before = set(sys.modules)
        with lazypatch.patched("export"):
            inside = set(sys.modules) - before
        print("RESULT" + json.dumps(sorted(m for m in inside if not m.startswith("lazypatch"))))
    ''')
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               timeout=120)
    line = [item for item in completed.stdout.splitlines() if item.startswith("RESULT")]
    assert line, completed.stderr[-3000:]
    imported = json.loads(line[0][len("RESULT"):])
    assert not [name for name in imported
                if name.split(".")[0] in ("torch", "transformers", "onnx", "sympy")], imported

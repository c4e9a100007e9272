# ruff: noqa: E501  (the SCENARIO script below is kept as the models' plain code)
"""The export pack: torch.export of tiny transformers models inside patched("export").

Each scenario runs in a fresh interpreter (the pack must import nothing by itself):
models come from config objects only (2 layers, hidden 32; no weights downloaded),
batch, sequence and cache length are dynamic, the exported program must match eager
within 1e-4 on a second input of another shape, and after the scope a fingerprint
of every function, descriptor and class of torch, transformers and sympy, and every
pytree registry entry, must be what it was before.

The same file runs on transformers 5.x (.venv, requirements/export.txt) and 4.48
(.venv448, requirements/export448.txt). CI runs a few models in one subprocess;
LAZYPATCH_EXPORT_MATRIX=1 runs every model, one subprocess each (spread them with
pytest -n), with the cache registration alone and with the whole pack.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("transformers", reason="the export pack needs transformers "
                    "(pip install -r requirements/export.txt)")
pytestmark = pytest.mark.stack

SCENARIO = r'''import copy, json, sys, traceback
import lazypatch.auto, lazypatch
import torch
import torch.utils._pytree as pytree
import transformers
from torch.export import Dim

SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=100)
DECODERS = {"llama": "Llama", "qwen2": "Qwen2", "mistral": "Mistral", "phi": "Phi",
            "gemma2": "Gemma2", "qwen3_moe": "Qwen3Moe"}

def new_cache(config):
    """An empty DynamicCache (transformers 4.x takes no config)."""
    try:
        return transformers.DynamicCache(config=config)
    except TypeError:
        return transformers.DynamicCache()


class CausalLM(torch.nn.Module):
    def __init__(self, model):
        super().__init__(); self.model = model
    def forward(self, input_ids, attention_mask, past_key_values):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          past_key_values=past_key_values).logits

class Unavailable(Exception):
    """The installed transformers does not define this model family."""


def build(family):
    if family in DECODERS:
        prefix = DECODERS[family]
        if not hasattr(transformers, prefix + "Config"):
            raise Unavailable(f"transformers {transformers.__version__} has no {prefix}Config")
        extra = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, head_dim=8) if family == "qwen3_moe" else {}
        if family == "gemma2": extra = dict(head_dim=8, sliding_window=32)
        config = getattr(transformers, prefix + "Config")(**SMALL, **extra)
        model = CausalLM(getattr(transformers, prefix + "ForCausalLM")(config).eval())
        def inputs(batch, length, cached):
            cache = new_cache(config)
            heads = config.num_key_value_heads
            dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
            for layer in range(config.num_hidden_layers):
                cache.update(torch.randn(batch, heads, cached, dim), torch.randn(batch, heads, cached, dim), layer)
            return dict(input_ids=torch.randint(0, 100, (batch, length)),
                        attention_mask=torch.ones(batch, length + cached, dtype=torch.long),
                        past_key_values=cache)
        return model, inputs, (dict(batch=2, length=3, cached=5), dict(batch=3, length=4, cached=7))
    if family == "gpt2":
        config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=100, n_positions=64)
        model = CausalLM(transformers.GPT2LMHeadModel(config).eval())
        def inputs(batch, length, cached):
            cache = new_cache(config)
            for layer in range(2):
                cache.update(torch.randn(batch, 4, cached, 8), torch.randn(batch, 4, cached, 8), layer)
            return dict(input_ids=torch.randint(0, 100, (batch, length)),
                        attention_mask=torch.ones(batch, length + cached, dtype=torch.long),
                        past_key_values=cache)
        return model, inputs, (dict(batch=2, length=3, cached=5), dict(batch=3, length=4, cached=7))
    if family == "bert":
        config = transformers.BertConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=100)
        class Encoder(torch.nn.Module):
            def __init__(self):
                super().__init__(); self.model = transformers.BertModel(config).eval()
            def forward(self, input_ids, attention_mask):
                return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        def inputs(batch, length):
            return dict(input_ids=torch.randint(0, 100, (batch, length)), attention_mask=torch.ones(batch, length, dtype=torch.long))
        return Encoder(), inputs, (dict(batch=2, length=5), dict(batch=3, length=7))
    if family in ("bart", "bart_encoder_fp16"):
        config = transformers.BartConfig(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                                         decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=100)
        if family == "bart_encoder_fp16":
            class Encoder(torch.nn.Module):
                def __init__(self):
                    super().__init__(); self.model = transformers.BartModel(config).get_encoder().eval().half()
                def forward(self, input_ids, attention_mask):
                    return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state.float()
            def inputs(batch, length):
                return dict(input_ids=torch.randint(0, 100, (batch, length)), attention_mask=torch.ones(batch, length, dtype=torch.long))
            return Encoder(), inputs, (dict(batch=2, length=5), dict(batch=3, length=7))
        class Seq2Seq(torch.nn.Module):
            def __init__(self):
                super().__init__(); self.model = transformers.BartForConditionalGeneration(config).eval()
            def forward(self, input_ids, attention_mask, decoder_input_ids):
                out = self.model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids, use_cache=True)
                return out.logits, out.past_key_values
        def inputs(batch, length):
            return dict(input_ids=torch.randint(0, 100, (batch, length)), attention_mask=torch.ones(batch, length, dtype=torch.long),
                        decoder_input_ids=torch.randint(0, 100, (batch, length - 1)))
        return Seq2Seq(), inputs, (dict(batch=2, length=5), dict(batch=3, length=7))
    raise KeyError(family)

def shapes_of(value, export_pack):
    d = Dim.DYNAMIC
    out = {}
    for key, item in value.items():
        if isinstance(item, torch.Tensor):
            out[key] = {i: d for i in range(min(item.dim(), 2))}
        else:
            out[key] = export_pack.dynamic_shapes(item, lambda t: {0: d, 2: d})
    return out

import types
DESCRIPTORS = (types.FunctionType, types.BuiltinFunctionType, property, classmethod,
               staticmethod, type, types.MethodType)


def is_code(value):
    """Functions, descriptors and classes: what a patch replaces (state such as
    counters, caches and submodule attributes changes by exporting at all)."""
    return isinstance(value, DESCRIPTORS) or type(value).__name__ in (
        "FunctionWrapper", "BoundFunctionWrapper", "method_descriptor", "getset_descriptor")


def fingerprint():
    """id of every module attribute and class member of torch, transformers and sympy,
    plus every pytree registry entry."""
    import torch.fx._pytree as fx_pytree
    prints = {}
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".")[0] not in ("torch", "transformers", "sympy"):
            continue
        try:
            items = list(vars(module).items())
        except TypeError:
            continue
        for key, value in items:
            if is_code(value):
                prints[f"{name}:{key}"] = id(value)
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                for member, raw in list(vars(value).items()):
                    if is_code(raw):
                        prints[f"{name}:{key}.{member}"] = id(raw)
    for label, table in (("nodes", pytree.SUPPORTED_NODES),
                         ("serialized", pytree.SUPPORTED_SERIALIZED_TYPES),
                         ("by_name", pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE),
                         ("fx", fx_pytree.SUPPORTED_NODES),
                         ("fx_exact", fx_pytree.SUPPORTED_NODES_EXACT_MATCH)):
        for key, value in list(table.items()):
            prints[f"pytree.{label}:{key!r}"] = id(value)
    return prints


def warm_up():
    """Export a tiny module with torch.cond first: torch replaces some of its own
    functions on first use (lazy dynamo wrappers, cached properties), which a
    fingerprint around the scope would otherwise blame on the pack."""
    class Tiny(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda y: y.sin(), lambda y: y.cos(), (x,))
    torch.export.export(Tiny(), (torch.ones(3),), dynamic_shapes=({0: Dim.DYNAMIC},))


def largest_difference(eager_leaves, got_leaves):
    """Largest absolute difference between matching leaves; inf when one is not finite."""
    worst = 0.0
    for a, b in zip(eager_leaves, got_leaves):
        if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
            return float("inf")
        worst = max(worst, (a.float() - b.float()).abs().max().item())
    return worst


def export_patches(scope):
    """The export patches the scope holds applied, with the skipped ones' reasons."""
    applied, skipped = [], {}
    for record in lazypatch.report():
        if record.name in scope.names and record.name.startswith("export."):
            if record.status == "applied":
                applied.append(record.name)
            elif record.status == "skipped":
                skipped[record.name] = record.reason
    return sorted(applied), skipped


def run(family, selectors):
    try:
        torch.manual_seed(0)
        model, inputs, (first, second) = build(family)
        modules_before = set(sys.modules)
        before = fingerprint()
        with lazypatch.patched(*selectors) as scope:
            import lazypatch.registry.export as export_pack
            example = inputs(**first)
            program = torch.export.export(model, (), kwargs=example, dynamic_shapes=shapes_of(example, export_pack), strict=False)
            other = inputs(**second)
            eager = model(**copy.deepcopy(other))
            got = program.module()(**copy.deepcopy(other))
            eager_leaves, got_leaves = pytree.tree_leaves(eager), pytree.tree_leaves(got)
            applied, skipped = export_patches(scope)
        assert len(eager_leaves) == len(got_leaves), (len(eager_leaves), len(got_leaves))
        after = fingerprint()
        # keys that appeared are new imports (torch imports more while exporting);
        # every key that existed must hold the same object, and no pytree entry is new
        changed = sorted(key for key in set(before) | set(after) if before.get(key) != after.get(key)
                         and (key in before or key.startswith("pytree.")))
        new_modules = sorted(name for name in set(sys.modules) - modules_before
                             if name.split(".")[0] in ("transformers", "onnx", "onnxruntime", "onnx_diagnostic")
                             and ".models." in name or name.split(".")[0] in ("onnx", "onnxruntime", "onnx_diagnostic"))
        return dict(changed=changed[:20], new_modules=new_modules, applied=applied, skipped=skipped,
                    diff=largest_difference(eager_leaves, got_leaves))
    except Unavailable as error:
        return dict(unavailable=str(error))
    except Exception as error:
        return dict(error=f"{type(error).__name__}: {str(error)[:3000]}")


warm_up()
# argv[1..]: jobs "family" (inside patched("export")) or "family@selector+selector",
# run one after the other in this interpreter; results[job]
results = {}
for job in sys.argv[1:]:
    family, _, selectors = job.partition("@")
    results[job] = run(family, (selectors or "export").split("+"))
print("RESULT" + json.dumps(results))
'''

FAMILIES = ["llama", "qwen2", "mistral", "phi", "gemma2", "qwen3_moe", "gpt2", "bert", "bart",
            "bart_encoder_fp16"]
MATRIX = os.environ.get("LAZYPATCH_EXPORT_MATRIX") == "1"
REGISTRATION_ALONE = "export.cache_pytree"


def run_scenario(*jobs: str) -> dict:
    """results[job] of SCENARIO in one fresh interpreter: a job is a family, exported
    inside patched("export"), or "family@selector+selector"."""
    completed = subprocess.run([sys.executable, "-W", "ignore", "-c", SCENARIO, *jobs],
                               capture_output=True, text=True, timeout=900)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT")]
    assert lines, completed.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT"):])


def check(family: str, result: dict) -> None:
    if "unavailable" in result:
        pytest.skip(result["unavailable"])
    assert "error" not in result, (family, result)
    assert result["diff"] < 1e-4, (family, result)
    assert result["changed"] == [], (family, result["changed"])
    assert result["new_modules"] == [], (family, result["new_modules"])


ALONE = f"@{REGISTRATION_ALONE}"


@pytest.fixture(scope="module")
def ci_models() -> dict:
    """The models CI exports, all in one interpreter to keep it short: a decoder with a
    cache (on transformers 4.48 it also needs the DynamicCache rewrite), the
    sliding-window decoder, the float16 encoder whose data-dependent `if` becomes
    torch.cond, and bart with the registration alone and with the whole pack."""
    return run_scenario("llama", "gemma2", "bart_encoder_fp16", "bart" + ALONE, "bart")


def test_a_few_models_export_match_eager_and_leave_nothing_behind(ci_models):
    for family in ("llama", "gemma2", "bart_encoder_fp16", "bart"):
        check(family, ci_models[family])


def test_the_pack_never_breaks_a_model_that_registration_alone_exports(ci_models):
    # bart (float32, with its EncoderDecoderCache output) exports with the cache
    # registration alone; the whole pack also rewrites its encoder layers'
    # float16 branch: the export must still succeed and match
    alone, whole = ci_models["bart" + ALONE], ci_models["bart"]
    check("bart", alone)
    check("bart", whole)
    extra = set(whole["applied"]) - set(alone["applied"])
    assert any(name.startswith("export.control_flow.transformers.models.bart.")
               for name in extra), whole["applied"]   # the pack did more than register


@pytest.mark.skipif(not MATRIX, reason="the full model matrix runs with LAZYPATCH_EXPORT_MATRIX=1")
@pytest.mark.parametrize("family", FAMILIES)
def test_model_matrix(family):
    results = run_scenario(family + ALONE, family)
    alone, whole = results[family + ALONE], results[family]
    # the pack never makes a model fail that exports with registration alone
    # (whether registration alone suffices depends on the transformers version)
    if "error" not in alone and "unavailable" not in alone:
        check(family, alone)
    check(family, whole)


def run_code(code: str) -> dict:
    completed = subprocess.run([sys.executable, "-W", "ignore", "-c", textwrap.dedent(code)],
                               capture_output=True, text=True, timeout=300)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT")]
    assert lines, completed.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT"):])


def test_import_and_scope_entry_import_nothing():
    result = run_code('''
        import sys, json
        before = set(sys.modules)
        import lazypatch.auto, lazypatch
        after_import = set(sys.modules) - before
        with lazypatch.patched("export") as scope:
            inside = set(sys.modules) - before
        names = scope.names
        foreign = lambda found: sorted(m for m in found if m.split(".")[0] in
                                       ("torch", "transformers", "onnx", "sympy", "numpy"))
        print("RESULT" + json.dumps(dict(at_import=foreign(after_import),
                                         in_scope=foreign(inside), names=names)))
    ''')
    assert result["at_import"] == [] and result["in_scope"] == [], result
    assert "export.cache_pytree" in result["names"]
    assert any(name.startswith("export.control_flow.transformers.models.bart.")
               for name in result["names"])


def test_model_module_imported_inside_the_scope_is_patched_and_restored():
    result = run_code('''
        import sys, json
        import lazypatch.auto, lazypatch
        def rewritten(function):
            """The function, or the one a decorator's closure holds (transformers 5 wraps
            every layer's forward), is a rewritten copy."""
            inner = [cell.cell_contents for cell in function.__closure__ or ()
                     if callable(cell.cell_contents)]
            return any(getattr(f, "__lazypatch_rewritten_from__", None) is not None
                       for f in [function] + inner)

        with lazypatch.patched("export"):
            from transformers.models.bart import modeling_bart
            was_rewritten = rewritten(modeling_bart.BartEncoderLayer.__dict__["forward"])
            import torch.utils._pytree as pytree
            from transformers.cache_utils import DynamicCache
            registered = DynamicCache in pytree.SUPPORTED_NODES
        after = modeling_bart.BartEncoderLayer.__dict__["forward"]
        models = sorted(m for m in sys.modules if m.startswith("transformers.models.")
                        and m.count(".") >= 3 and not m.startswith("transformers.models.bart")
                        and not m.startswith("transformers.models.auto"))
        print("RESULT" + json.dumps(dict(
            rewritten=was_rewritten, registered=registered,
            restored=not rewritten(after),
            unregistered=DynamicCache not in pytree.SUPPORTED_NODES, other_models=models)))
    ''')
    assert result["rewritten"] and result["registered"], result
    assert result["restored"] and result["unregistered"], result
    assert result["other_models"] == [], result

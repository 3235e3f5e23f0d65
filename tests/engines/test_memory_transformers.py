"""posenc's memory model of transformers (posenc_cli/engines/caches/transformers.py) against the cache ``generate``
builds: tiny random twins of real configs (the text model, shrunk as the per-layer cache sweep shrinks a config:
``generate_layer_cache.shrink``, windows of 5 tokens) run ``generate`` over a prompt of N tokens (one new token: the
cache then holds the prompt), in each dtype and for one and several sequences; the bytes of every tensor the returned
cache holds equal ``MEMORY.cost`` at N, group by group, exact.

Architectures: full attention with GQA (Llama 3.1), MoE with sliding windows (gpt-oss), sliding windows (Gemma 3),
MLA (DeepSeek V3), linear attention (Qwen3-Next) and a Mamba-2 hybrid (Nemotron-H). What each layer caches for every
other model type is proven by tests/models/test_cache_layout.py; this test proves the engine model's settings and
its grouping on the cache ``generate`` itself makes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from posenc_cli.engines.caches.transformers import MEMORY
from posenc_cli.models.cache_layout import cache_layout
from posenc_cli.models.config_keys import text_config

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
gen = pytest.importorskip("generate_layer_cache")

CORPUS = Path(__file__).resolve().parents[2] / "tests" / "corpus"


def twin(name: str, **changes: Any) -> dict[str, Any]:
    """The text config of corpus ``name`` shrunk (4 layers, windows of 5 tokens), with its text model type."""
    cfg = json.loads((CORPUS / f"{name}.json").read_text(encoding="utf-8"))
    text, text_type, _ = text_config(cfg)
    out = gen.shrink(dict(text), 4)
    out.update(model_type=text_type, **changes)
    return out


def cache_bytes(cache: Any, layers: int) -> list[int]:
    """Per layer, the bytes of every tensor transformers' cache holds (its bookkeeping left out, as the cache
    sweep records it: ``generate_layer_cache.record``)."""
    out = []
    for layer in gen.record(cache, layers):
        total = 0
        for shape, dtype in layer["tensors"].values():
            n = getattr(torch, dtype).itemsize
            for d in shape:
                n *= d
            total += n
        out.append(total)
    return out


def generated_cache(cfg: dict[str, Any], tokens: int, batch: int, dtype: str) -> Any:
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config = CONFIG_MAPPING[cfg["model_type"]].from_dict(dict(cfg))
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(getattr(torch, dtype)).eval()
    vocab = int(config.vocab_size)
    ids = torch.arange(1, tokens * batch + 1).remainder(vocab - 1).add(1).reshape(batch, tokens)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=1, do_sample=False,
                             return_dict_in_generate=True, pad_token_id=0)
    return out.past_key_values


CASES = [
    ("llama-3.1-8b-instruct", {}),  # full attention, GQA
    ("gpt-oss-20b", {}),  # sliding windows and MoE
    ("gemma-3-1b-it", {"sliding_window_pattern": 2}),  # sliding windows
    ("deepseek-v3", {}),  # MLA
    ("qwen3-next-80b-a3b-thinking", {}),  # linear attention (gated delta net)
    ("nemotron-h-56b-base-8k", {"hybrid_override_pattern": "M*M-", "num_hidden_layers": 4}),  # Mamba-2 hybrid
]


@pytest.mark.parametrize(("name", "changes"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize(("tokens", "batch", "dtype"), [(11, 1, "float32"), (17, 2, "bfloat16"), (3, 1, "float16")])
def test_the_cache_generate_builds(name: str, changes: dict[str, Any], tokens: int, batch: int, dtype: str) -> None:
    cfg = twin(name, **changes)
    layout = cache_layout(cfg)
    cache = generated_cache(cfg, tokens, batch, dtype)
    measured = cache_bytes(cache, layout.num_layers)
    cost = MEMORY.cost(layout, tokens, MEMORY.settings_for({"dtype": dtype, "batch_size": batch}))
    assert cost.cache_bytes == sum(measured)
    for group in layout.groups():
        modelled = next(g for g in cost.groups if g.kind == group.cache.kind and g.layers == len(group.layers))
        assert modelled.bytes == sum(measured[i] for i in group.layers)
    assert cost.sequences == batch and cost.settings["dtype"] == dtype

"""Unit and property tests of posenc's SGLang 0.5.23 pool model (posenc_cli/engines/caches/sglang.py) on real corpus
configs; its check against SGLang's own sizing functions is tests/engines/test_memory_sglang.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc_cli.engines.caches import sglang
from posenc_cli.engines.caches.model import Unsupported
from posenc_cli.errors import PosencError
from posenc_cli.models.cache_layout import CacheLayout, cache_layout

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
MODELS = ("llama-3.1-8b-instruct", "qwen3-235b-a22b", "gemma-3-27b-it", "gpt-oss-120b", "deepseek-v3",
          "llama-4-scout-17b-16e-instruct", "qwen3-next-80b-a3b-thinking", "qwen3.5-9b", "nemotron-h-56b-base-8k",
          "mistral-7b-v0.1", "gpt-oss-20b")


def layout(name: str) -> CacheLayout:
    return cache_layout(json.loads((CORPUS / f"{name}.json").read_text(encoding="utf-8")))


def cost(name: str, ctx: int, **given_settings: Any) -> Any:
    return sglang.MEMORY.cost(layout(name), ctx, sglang.MEMORY.settings_for(given_settings))


def test_defaults_are_sglangs() -> None:
    s = sglang.MEMORY.settings_for()
    assert (s["page_size"], s["kv_cache_dtype"], s["swa_full_tokens_ratio"], s["mamba_full_memory_ratio"]) == \
        (1, "auto", "0.8", "0.9")
    assert sglang.MEMORY.basis == "modelled from source at SGLang 0.5.23"


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(MODELS), a=st.integers(1, 1 << 20), b=st.integers(1, 1 << 20),
       page=st.sampled_from([1, 16, 64]), kv=st.sampled_from(["auto", "fp8_e4m3"]))
def test_monotone_in_context(name: str, a: int, b: int, page: int, kv: str) -> None:
    lo, hi = sorted((a, b))
    small, big = (cost(name, n, page_size=page, kv_cache_dtype=kv) for n in (lo, hi))
    assert small.cache_bytes <= big.cache_bytes
    for c in (small, big):
        assert c.cache_bytes == sum(g.bytes for g in c.groups) and all(g.bytes >= 0 for g in c.groups)
        assert c.allocated % page == 0 and c.allocated >= c.ctx


def test_token_pool_is_cell_times_tokens() -> None:
    """Llama 3.1 8B: 8 KV heads x (128 + 128) x 32 layers x 2 bytes per token, the pool paged."""
    assert cost("llama-3.1-8b-instruct", 1000).cache_bytes == 1000 * 8 * 256 * 32 * 2
    assert cost("llama-3.1-8b-instruct", 1000, page_size=64).cache_bytes == 1024 * 8 * 256 * 32 * 2
    assert cost("deepseek-v3", 1000).cache_bytes == 1000 * 576 * 61 * 2


def test_sliding_layers_are_full_size_unless_hybrid_swa() -> None:
    """Gemma 3 and Mistral 7B v0.1 are not hybrid-SWA architectures in SGLang 0.5.23: their sliding layers take
    the whole context; gpt-oss's sliding pool is --swa-full-tokens-ratio of the full pool."""
    gemma = cost("gemma-3-27b-it", 131072)
    assert {g.cells for g in gemma.groups} == {131072}
    oss = cost("gpt-oss-120b", 131072)
    assert next(g.cells for g in oss.groups if g.kind == "sliding") == int(131072 * 0.8)
    assert cost("gpt-oss-120b", 131072, swa_full_tokens_ratio="0.1").cache_bytes < oss.cache_bytes


def test_sliding_pool_floor() -> None:
    """The sliding pool must exceed the window + one page: Llama 4's chunk of 8192 needs a full pool of 10241+
    tokens at ratio 0.8, whatever the context."""
    short = cost("llama-4-scout-17b-16e-instruct", 100)
    assert short.allocated == 100 and next(g.cells for g in short.groups if g.kind == "full") > 8193 / 0.8


def test_state_pool() -> None:
    """A hybrid state model's budget is (1 + ratio) x its token pool, or what one request's state slots need."""
    c = cost("qwen3-next-80b-a3b-thinking", 131072)
    attention = sum(g.bytes for g in c.groups if g.kind == "full")
    assert 1.9 * attention <= c.cache_bytes <= 1.9 * attention + sglang.pools(
        layout("qwen3-next-80b-a3b-thinking"), sglang.MEMORY.settings_for()).state_slot * 2
    assert cost("qwen3-next-80b-a3b-thinking", 131072, mamba_full_memory_ratio="0.5").cache_bytes < c.cache_bytes
    few = cost("nemotron-h-56b-base-8k", 1000)
    p = sglang.pools(layout("nemotron-h-56b-base-8k"), sglang.MEMORY.settings_for())
    assert few.cache_bytes >= (p.slots + 1) * p.state_slot


def test_fp8_and_tp_shrink_it() -> None:
    base = cost("llama-3.1-8b-instruct", 65536).cache_bytes
    assert cost("llama-3.1-8b-instruct", 65536, kv_cache_dtype="fp8_e4m3").cache_bytes * 2 == base
    assert cost("llama-3.1-8b-instruct", 65536, tp_size=2).cache_bytes * 2 == base
    assert cost("llama-3.1-8b-instruct", 65536, tp_size=16).cache_bytes * 8 == base  # 1 KV head per GPU


def test_dsa_indexer() -> None:
    """DeepSeek V3.2: a bfloat16 latent (576 x 2) and 128 + 4 bytes of index keys per layer and token; fp8_e4m3 rows
    of 512 + 16 scale bytes + 64 x 2 rope bytes."""
    assert cost("deepseek-v3.2", 1000).cache_bytes == 1000 * 61 * (576 * 2 + 132)
    assert cost("deepseek-v3.2", 1000, kv_cache_dtype="fp8_e4m3").cache_bytes == 1000 * 61 * (656 + 132)


def test_refusals() -> None:
    with pytest.raises(Unsupported, match="without attention"):
        sglang.MEMORY.cost(cache_layout({"model_type": "mamba2", "architectures": ["Mamba2ForCausalLM"],
                                         "num_hidden_layers": 2, "hidden_size": 64, "num_heads": 2, "head_dim": 64,
                                         "state_size": 16, "conv_kernel": 4, "n_groups": 1, "expand": 2}),
                           100, sglang.MEMORY.settings_for())
    with pytest.raises(PosencError, match="at most 1"):
        cost("gpt-oss-120b", 4096, swa_full_tokens_ratio="1.5")
    with pytest.raises(PosencError, match="not a number"):
        cost("gpt-oss-120b", 4096, swa_full_tokens_ratio="lots")
    with pytest.raises(PosencError, match="is not allowed; use one of"):
        sglang.MEMORY.settings_for({"--kv-cache-dtype": "q4_0"})


def test_levers_and_budget() -> None:
    s = sglang.MEMORY.settings_for()
    assert [label for label, _ in sglang.levers(s)][0] == "--kv-cache-dtype fp8_e4m3"
    for _label, change in sglang.levers(s):
        assert sglang.MEMORY.cost(layout("gpt-oss-120b"), 131072, {**s, **change}).cache_bytes <= \
            cost("gpt-oss-120b", 131072).cache_bytes
    assert sglang.kv_budget(80 << 30, 16 << 30, s) is None
    assert sglang.kv_budget(100, 10, {**s, "mem_fraction_static": "0.9"}) == 80

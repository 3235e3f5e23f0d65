"""Unit and property tests of posenc's vLLM 0.34 cache model (posenc_cli/engines/caches/vllm.py) on real corpus
configs; its parity with vLLM's own planner is tests/engines/test_memory_vllm.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc_cli.engines.caches import vllm
from posenc_cli.engines.caches.model import Unsupported
from posenc_cli.errors import PosencError
from posenc_cli.models.cache_layout import CacheLayout, cache_layout

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
MODELS = ("llama-3.1-8b-instruct", "qwen3-235b-a22b", "gemma-3-27b-it", "gpt-oss-120b", "deepseek-v3",
          "llama-4-scout-17b-16e-instruct", "qwen3-next-80b-a3b-thinking", "qwen3.5-9b", "nemotron-h-56b-base-8k",
          "qwen3.5-35b-a3b", "minicpm3-4b", "mistral-7b-v0.1", "lfm2.5-vl-1.6b")
SLIDING = ("gemma-3-27b-it", "gpt-oss-120b")


def layout(name: str) -> CacheLayout:
    return cache_layout(json.loads((CORPUS / f"{name}.json").read_text(encoding="utf-8")))


def cost(name: str, ctx: int, **given_settings: Any) -> Any:
    return vllm.MEMORY.cost(layout(name), ctx, vllm.MEMORY.settings_for(given_settings))


def test_defaults_are_vllms_on_the_card_assumed() -> None:
    s = vllm.MEMORY.settings_for()
    assert (s["block_size"], s["max_num_batched_tokens"], s["kv_cache_dtype"], s["async_scheduling"]) == \
        (64, 8192, "auto", True)
    assert vllm.MEMORY.setting("--block-size").key == "block_size"
    code = "import sys, posenc_cli.engines.caches.vllm; sys.exit('vllm' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0  # the model never imports vLLM


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(MODELS), a=st.integers(1, 1 << 20), b=st.integers(1, 1 << 20),
       kv=st.sampled_from(["auto", "fp8", "int4_per_token_head"]), tp=st.sampled_from([1, 2, 4]))
def test_monotone_in_context(name: str, a: int, b: int, kv: str, tp: int) -> None:
    lo, hi = sorted((a, b))
    if name in ("deepseek-v3", "minicpm3-4b") and kv != "fp8" and kv != "auto":
        kv = "fp8"
    try:
        small, big = cost(name, lo, kv_cache_dtype=kv, tensor_parallel_size=tp), \
            cost(name, hi, kv_cache_dtype=kv, tensor_parallel_size=tp)
    except PosencError:  # a state layer that does not split over tp
        return
    assert small.cache_bytes <= big.cache_bytes
    for c in (small, big):
        assert c.cache_bytes == sum(g.bytes for g in c.groups) and all(g.bytes >= 0 for g in c.groups)
        assert c.sequences == 1 and c.allocated >= c.ctx


@pytest.mark.parametrize("name", SLIDING)
def test_sliding_layers_stop_growing_at_window_plus_tokens_in_flight(name: str) -> None:
    """A sliding group holds window - 1 + 2 x --max-num-batched-tokens tokens (+ one block) at most."""
    window = next(x.window for x in layout(name).layers if x.kind == "sliding")
    assert window is not None
    flat = window - 1 + 2 * 8192
    sizes = [next(g.bytes for g in cost(name, ctx).groups if g.kind == "sliding") for ctx in (flat, 4 * flat, 1 << 20)]
    assert sizes[0] == sizes[1] == sizes[2]
    assert next(g.cells for g in cost(name, 1 << 20).groups if g.kind == "sliding") < flat + 2 * 64
    assert next(g.bytes for g in cost(name, 1 << 20, max_num_batched_tokens=2048).groups if g.kind == "sliding") \
        < sizes[0]
    promoted = cost(name, 1 << 20, disable_hybrid_kv_cache_manager=True)
    assert {g.kind for g in promoted.groups} == {"full"} and promoted.cache_bytes > cost(name, 1 << 20).cache_bytes


@pytest.mark.parametrize("name", MODELS)
def test_quantized_cache_is_smaller_and_tp_splits_heads(name: str) -> None:
    ctx = 131072
    base = cost(name, ctx).cache_bytes
    assert cost(name, ctx, kv_cache_dtype="fp8").cache_bytes < base
    if not any(x.states for x in layout(name).layers) and name not in ("deepseek-v3", "minicpm3-4b"):
        assert cost(name, ctx, kv_cache_dtype="int4_per_token_head").cache_bytes < \
            cost(name, ctx, kv_cache_dtype="fp8").cache_bytes
        heads = min(x.kv_heads for x in layout(name).layers if x.kind in ("full", "sliding", "chunked"))
        if heads % 2 == 0:
            assert cost(name, ctx, tensor_parallel_size=2).cache_bytes * 2 == base


def test_per_token_head_scales() -> None:
    """int8 per token and head: one byte per element plus an fp32 scale per head for K and for V."""
    lay = layout("llama-3.1-8b-instruct")
    plain = vllm.MEMORY.cost(lay, 64, vllm.MEMORY.settings_for({"kv_cache_dtype": "fp8"})).cache_bytes
    scaled = vllm.MEMORY.cost(lay, 64, vllm.MEMORY.settings_for({"kv_cache_dtype": "int8_per_token_head"})).cache_bytes
    assert scaled - plain == 32 * 64 * 8 * 2 * 4


def test_hybrid_block_alignment_and_state_pages() -> None:
    """Qwen3-Next: the attention block grows to hold a state page, a state layer keeps 2 + 1 checkpoint pages with
    prefix caching (1 without); the state pages are padded to the attention page."""
    p = vllm.plan(layout("qwen3-next-80b-a3b-thinking"), vllm.MEMORY.settings_for())
    assert p.block_size > 64 and p.block_size % 64 == 0
    states = [g for g in p.groups if g.spec.kind == "mamba"]
    assert states and all(g.spec.fixed_pages == 3 and g.spec.page >= g.spec.content for g in states)
    off = vllm.plan(layout("qwen3-next-80b-a3b-thinking"), vllm.MEMORY.settings_for({"enable_prefix_caching": False}))
    assert all(g.spec.fixed_pages == 1 for g in off.groups if g.spec.kind == "mamba")


def test_padding_layers() -> None:
    """Gemma 3 27B: 52 sliding layers in 6 groups of 10 beside 10 full: 8 padding layers, as vLLM warns."""
    c = cost("gemma-3-27b-it", 32768)
    assert next(g for g in c.groups if g.kind == "padding").layers == 8


def test_refusals() -> None:
    with pytest.raises(Unsupported, match="indexer"):
        cost("deepseek-v3.2", 4096)
    with pytest.raises(Unsupported, match="hybrid KV cache manager"):
        cost("qwen3-next-80b-a3b-thinking", 4096, disable_hybrid_kv_cache_manager=True)
    with pytest.raises(PosencError, match="MLA backend"):
        cost("deepseek-v3", 4096, kv_cache_dtype="int8_per_token_head")
    with pytest.raises(PosencError, match="multiples of 16"):
        cost("llama-3.1-8b-instruct", 4096, block_size=24)
    with pytest.raises(PosencError, match="is not allowed; use one of"):
        vllm.MEMORY.settings_for({"--kv-cache-dtype": "q8_0"})


def test_levers_buy_context() -> None:
    s = vllm.MEMORY.settings_for()
    labels = [label for label, _ in vllm.levers(s)]
    assert labels[0] == "--kv-cache-dtype fp8" and "--tensor-parallel-size 2" in labels
    base = cost("gpt-oss-120b", 131072).cache_bytes
    for _label, change in vllm.levers(s):
        assert vllm.MEMORY.cost(layout("gpt-oss-120b"), 131072, {**s, **change}).cache_bytes <= base


def test_max_concurrency() -> None:
    lay, s = layout("llama-3.1-8b-instruct"), vllm.MEMORY.settings_for()
    per_block = next(e.bytes for e in vllm.MEMORY.cost(lay, 8192, s).extras if e.name == "null block")
    assert vllm.max_concurrency(lay, 8192, s, 40 * per_block * 128) == 40.0

"""posenc_cli.engines.caches.ollama: Ollama 0.32.15's GGUF runner is llama.cpp's arithmetic with the llama-server flags
Ollama passes (``-c num_ctx x parallel -np parallel``, no unified cache, one cache type for K and V, its flash
attention and batch choices), on the real-config corpus. Against the real llama.cpp:
tests/engines/test_memory_ollama.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc_cli.engines.caches import llamacpp
from posenc_cli.engines.caches.ollama import MEMORY, auto_batch, default_num_ctx, ollama_params
from posenc_cli.errors import PosencError
from posenc_cli.frameworks.registry import load_memory
from posenc_cli.models.cache_layout import CacheLayout, cache_layout

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
MODELS = ["llama-3.1-8b-instruct", "gemma-3-27b-it", "gpt-oss-120b", "deepseek-v3", "qwen3.5-9b"]


def layout(name: str) -> CacheLayout:
    return cache_layout(json.loads((CORPUS / f"{name}.json").read_text()))


def test_registered_with_ollamas_defaults() -> None:
    assert load_memory("ollama") is MEMORY
    assert MEMORY.settings_for() == {"num_parallel": 1, "kv_cache_type": "f16", "flash_attention": "unset",
                                     "num_batch": 0}
    assert MEMORY.basis.startswith("modelled from source at Ollama 0.32.15")
    assert [default_num_ctx(v << 30) for v in (8, 23, 24, 47, 80)] == [4096, 32768, 32768, 262144, 262144]
    assert default_num_ctx(80 << 30, context_length_env=8192) == 8192
    assert [auto_batch(n) for n in (2048, 4096, 4097, 32768, 32769)] == [512, 512, 1024, 1024, 2048]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(MODELS), st.integers(1, 300_000), st.integers(1, 4), st.sampled_from(["f16", "q8_0", "q4_0"]),
       st.sampled_from(["unset", "1"]), st.sampled_from([0, 256, 512, 2048]))
def test_it_is_llama_cpp_with_ollamas_flags(name: str, ctx: int, slots: int, kv: str, flash: str, batch: int) -> None:
    """-c num_ctx x parallel, -np parallel, no --kv-unified, K and V of OLLAMA_KV_CACHE_TYPE, -b and -ub num_batch."""
    lay = layout(name)
    s = MEMORY.settings_for({"OLLAMA_NUM_PARALLEL": slots, "OLLAMA_KV_CACHE_TYPE": kv,
                             "OLLAMA_FLASH_ATTENTION": flash, "num_batch": batch})
    slots = 1 if name == "qwen3.5-9b" else slots  # Ollama serves Qwen3.5 one request at a time
    b = batch or auto_batch(ctx * slots)
    expected = llamacpp.Params(ctx * slots, slots, False, kv, kv, "on" if flash == "1" else "auto", False, b, b)
    assert ollama_params(lay, ctx, s, []) == expected
    ours = MEMORY.cost(lay, ctx, s)
    assert ours.cache_bytes == llamacpp.cost_with("ollama", lay, ctx, s, expected, []).cache_bytes
    assert ours.cache_bytes == sum(x.bytes for x in llamacpp.allocate(lay, expected)[0])
    assert ours.sequences == slots and ours.allocated >= ctx


def test_a_quantized_cache_without_flash_attention_does_not_load() -> None:
    with pytest.raises(PosencError, match="OLLAMA_FLASH_ATTENTION"):
        MEMORY.cost(layout("llama-3.1-8b-instruct"), 8192,
                    MEMORY.settings_for({"OLLAMA_KV_CACHE_TYPE": "q8_0", "OLLAMA_FLASH_ATTENTION": "0"}))
    off = MEMORY.cost(layout("llama-3.1-8b-instruct"), 8192, MEMORY.settings_for({"OLLAMA_FLASH_ATTENTION": "false"}))
    assert off.cache_bytes == MEMORY.cost(layout("llama-3.1-8b-instruct"), 8192, MEMORY.settings_for()).cache_bytes


def test_parallel_multiplies_the_context_and_one_slot_architectures() -> None:
    lay = layout("llama-3.1-8b-instruct")
    one, four = (MEMORY.cost(lay, 32768, MEMORY.settings_for({"num_parallel": n})).cache_bytes for n in (1, 4))
    assert four == 4 * one
    qwen = MEMORY.cost(layout("qwen3.5-9b"), 32768, MEMORY.settings_for({"num_parallel": 4}))
    assert qwen.sequences == 1 and any("one request at a time" in n for n in qwen.notes)


def test_a_gguf_with_mtp_layers_keeps_rollback_rows() -> None:
    """MTP drafting (--spec-draft-n-max 4) on a hybrid that rolls back: 5 rows of recurrent state per sequence."""
    lay = replace(layout("qwen3.5-9b"), text_type="qwen35")
    plain = MEMORY.cost(lay, 32768, MEMORY.settings_for())
    mtp = MEMORY.cost(replace(lay, nextn_layers=1), 32768, MEMORY.settings_for())
    state = [next(g.state_bytes for g in c.groups if g.kind == "state") for c in (plain, mtp)]
    assert state[1] == 5 * state[0]
    assert any(e.name == "MTP draft context" and e.bytes is None for e in mtp.extras)


def test_levers() -> None:
    start = MEMORY.settings_for({"num_parallel": 2, "OLLAMA_FLASH_ATTENTION": "0"})
    assert MEMORY.levers(start) == [
        ("q8_0 K and V caches with OLLAMA_FLASH_ATTENTION=1", {"kv_cache_type": "q8_0", "flash_attention": "1"}),
        ("q4_0 K and V caches with OLLAMA_FLASH_ATTENTION=1", {"kv_cache_type": "q4_0", "flash_attention": "1"}),
        ("OLLAMA_NUM_PARALLEL=1", {"num_parallel": 1})]
    lay = layout("gemma-3-27b-it")
    base = MEMORY.cost(lay, 65536, start).cache_bytes
    assert all(MEMORY.cost(lay, 65536, {**start, **c}).cache_bytes < base for _, c in MEMORY.levers(start))

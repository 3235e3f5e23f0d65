"""posenc_cli.engines.caches.llamacpp on the real-config corpus: properties of llama.cpp's allocation (monotone in the
context, sliding layers stop growing, quantized caches smaller, slots and unified caches, MLA without V, recurrent
states fixed), its refusals and llama-server's settings. The bytes themselves are proven against llama.cpp's log in
tests/engines/test_memory_llamacpp.py; here only relations and llama.cpp's own formulas (module docstring)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc_cli.engines.caches.llamacpp import (
    CACHE_TYPES,
    MEMORY,
    PAD,
    Params,
    allocate,
    cost,
    pad,
    row_bytes,
    server_params,
)
from posenc_cli.engines.caches.model import Unsupported
from posenc_cli.errors import PosencError
from posenc_cli.frameworks.registry import load_memory
from posenc_cli.models.cache_layout import CacheLayout, cache_layout

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
MODELS = ["llama-3.1-8b-instruct", "qwen3-235b-a22b", "gemma-3-27b-it", "gemma-4-26b-a4b", "gpt-oss-120b",
          "deepseek-v3", "qwen3.5-9b", "qwen3-next-80b-a3b-thinking", "nemotron-h-56b-base-8k", "mistral-7b-v0.1",
          "llama-4-scout-17b-16e-instruct"]


@cache
def layout(name: str) -> CacheLayout:
    return cache_layout(json.loads((CORPUS / f"{name}.json").read_text()))


def bytes_at(name: str, ctx: int, **flags: object) -> int:
    return cost(layout(name), ctx, MEMORY.settings_for(flags)).cache_bytes  # type: ignore[arg-type]


def test_registered() -> None:
    assert load_memory("llama.cpp") is MEMORY
    assert MEMORY.settings_for() == {"parallel": -1, "kv_unified": "auto", "cache_type_k": "f16",
                                     "cache_type_v": "f16", "flash_attn": "auto", "swa_full": False,
                                     "batch_size": 2048, "ubatch_size": 512}


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(MODELS), st.integers(1, 600_000), st.integers(1, 600_000),
       st.sampled_from([{}, {"parallel": 2}, {"parallel": 3, "kv_unified": "on"}, {"swa_full": True},
                        {"cache_type_k": "q8_0", "cache_type_v": "q8_0"}, {"ubatch_size": 64, "batch_size": 128}]))
def test_monotone_in_the_context(name: str, a: int, b: int, flags: dict[str, object]) -> None:
    a, b = sorted((a, b))
    assert bytes_at(name, a, **flags) <= bytes_at(name, b, **flags)


@pytest.mark.parametrize("name", ["gemma-3-27b-it", "gpt-oss-120b", "gemma-4-26b-a4b"])
def test_sliding_layers_stop_growing_at_their_window(name: str) -> None:
    """A sliding group keeps pad(window x slots + ubatch) cells (unified: 4 auto slots) past that context."""
    lay = layout(name)
    window = next(x.window for x in lay.layers if x.kind == "sliding")
    assert window is not None
    cells = pad(window * 4 + 512)
    small, large = (cost(lay, n, MEMORY.settings_for()) for n in (cells, 16 * cells))
    for g_small, g_large in zip(small.groups, large.groups, strict=True):
        if g_small.kind == "sliding":
            assert g_small.cells == g_large.cells == cells
            assert g_small.bytes == g_large.bytes
        else:
            assert g_large.bytes == 16 * g_small.bytes
    full = cost(lay, 16 * cells, MEMORY.settings_for({"swa_full": "on"}))
    assert all(g.cells == 16 * cells for g in full.groups if g.kind == "sliding")
    assert full.cache_bytes > large.cache_bytes


@pytest.mark.parametrize("name", MODELS)
def test_quantized_caches_are_smaller_and_unified_slots_cheaper(name: str) -> None:
    ctx = 65536
    f16 = bytes_at(name, ctx)
    q8 = bytes_at(name, ctx, cache_type_k="q8_0", cache_type_v="q8_0")
    q4 = bytes_at(name, ctx, cache_type_k="q4_0", cache_type_v="q4_0")
    assert q4 < q8 < f16 < bytes_at(name, ctx, cache_type_k="f32", cache_type_v="f32")
    assert bytes_at(name, ctx, parallel=4, kv_unified="on") <= bytes_at(name, ctx, parallel=4)
    assert bytes_at(name, ctx, parallel=1) <= bytes_at(name, ctx)


def test_a_full_layer_costs_its_row_per_cell_per_stream() -> None:
    """Llama 3.1 8B: 32 layers of 8 KV heads of 128 dims, K and V, 2 bytes (f16) or 34 per 32 (q8_0)."""
    lay = layout("llama-3.1-8b-instruct")
    for ctx, slots, unified, ctk in [(1000, 1, False, "f16"), (131072, 4, True, "q8_0"), (40000, 3, False, "f16")]:
        p = Params(ctx if unified else ctx * slots, slots, unified, ctk, ctk, "on")
        (line,), _, _ = allocate(lay, p)
        cells = pad(ctx) if unified else pad(pad(ctx * slots) // slots)
        assert (line.cells, line.streams, line.layers) == (cells, 1 if unified else slots, 32)
        assert line.k_bytes == line.v_bytes == 32 * row_bytes(ctk, 8 * 128) * cells * line.streams
    assert pad(1) == PAD and pad(PAD) == PAD and pad(PAD + 1) == 2 * PAD


def test_mla_is_one_latent_of_k_and_no_v() -> None:
    lay = layout("deepseek-v3")
    c = cost(lay, 32768, MEMORY.settings_for())
    (group,) = c.groups
    assert (group.kind, group.layers, group.v_bytes) == ("mla", 61, 0)
    assert group.k_bytes == 61 * (512 + 64) * 2 * 32768
    with pytest.raises(Unsupported, match="different K"):
        cost(lay, 4096, MEMORY.settings_for({"cache_type_k": "q8_0"}))


@pytest.mark.parametrize("name", ["qwen3.5-9b", "qwen3-next-80b-a3b-thinking", "nemotron-h-56b-base-8k"])
def test_recurrent_states_do_not_grow_and_count_sequences(name: str) -> None:
    lay = layout(name)
    state = [next(g.state_bytes for g in cost(lay, ctx, MEMORY.settings_for(flags)).groups if g.kind == "state")
             for ctx, flags in [(4096, {}), (262144, {}), (4096, {"parallel": 1})]]
    assert state[0] == state[1] == 4 * state[2] > 0  # 4 auto slots: 4 rows of f32 states


def test_a_window_llama_cpp_does_not_keep_caches_every_token() -> None:
    """Mistral 7B v0.1 slides in transformers (window 4096); llama.cpp's llama architecture keeps every token."""
    lay = layout("mistral-7b-v0.1")
    assert {x.kind for x in lay.layers} == {"sliding"}
    c = cost(lay, 32768, MEMORY.settings_for())
    assert [(g.kind, g.cells) for g in c.groups] == [("full", 32768)]
    assert any("no sliding window" in n for n in c.notes)
    scout = cost(layout("llama-4-scout-17b-16e-instruct"), 65536, MEMORY.settings_for())
    assert {g.cells for g in scout.groups if g.kind == "chunked"} == {pad(8192 * 4 + 512)}


def test_llama_servers_parameters() -> None:
    notes: list[str] = []
    assert server_params(1000, MEMORY.settings_for(), notes) == Params(1000, 4, True)
    assert "-c 1000" in notes[0]
    assert server_params(1000, MEMORY.settings_for({"--parallel": "3"}), []) == Params(3000, 3, False)
    p = server_params(1000, MEMORY.settings_for({"--parallel": "2", "--kv-unified": "on", "--swa-full": "on",
                                                 "--cache-type-k": "q4_0", "--flash-attn": "off"}), [])
    assert p == Params(1000, 2, True, "q4_0", "f16", "off", True)
    with pytest.raises(PosencError, match="--parallel 0"):
        cost(layout("llama-3.1-8b-instruct"), 1000, MEMORY.settings_for({"parallel": 0}))


def test_llama_cpps_refusals_and_bad_values() -> None:
    lay = layout("llama-3.1-8b-instruct")
    with pytest.raises(PosencError, match="needs flash attention"):
        cost(lay, 4096, MEMORY.settings_for({"cache_type_v": "q8_0", "flash_attn": "off"}))
    auto = cost(lay, 4096, MEMORY.settings_for({"cache_type_v": "q8_0"}))
    assert any("flash attention turned on" in n for n in auto.notes)
    with pytest.raises(PosencError, match="use one of: f32, f16, bf16, q8_0"):
        MEMORY.settings_for({"--cache-type-k": "q3_K"})
    with pytest.raises(PosencError, match="on, off, auto"):
        MEMORY.settings_for({"--flash-attn": "maybe"})
    phi = cache_layout(json.loads((CORPUS / "phi-2.json").read_text()))  # head size 80: no block of 32 divides it
    with pytest.raises(Unsupported, match="block size 32 does not divide the head size 80"):
        cost(phi, 4096, MEMORY.settings_for({"cache_type_k": "q8_0", "cache_type_v": "q8_0"}))
    assert cost(phi, 4096, MEMORY.settings_for({"cache_type_k": "q8_0", "flash_attn": "off"})).cache_bytes > 0


def test_levers_in_order_and_each_buys_memory() -> None:
    lay = layout("gemma-3-27b-it")
    start = MEMORY.settings_for({"parallel": 4, "swa_full": True, "flash_attn": "off"})
    labels = [label for label, _ in MEMORY.levers(start)]
    assert labels == ["q8_0 K and V caches with --flash-attn on", "q4_0 K and V caches with --flash-attn on",
                      "--parallel 1", "--kv-unified", "no --swa-full"]
    base = cost(lay, 65536, start).cache_bytes
    for _, change in MEMORY.levers(start):
        assert cost(lay, 65536, {**start, **change}).cache_bytes < base
    assert [label for label, _ in MEMORY.levers(MEMORY.settings_for({"cache_type_k": "q4_0", "cache_type_v": "q4_0",
                                                                      "parallel": 1}))] == ["q8_0 K and V caches"]


def test_every_cache_type_has_its_block() -> None:
    assert set(CACHE_TYPES) == {"f32", "f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl"}
    assert [row_bytes(t, 64) for t in ("f32", "f16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl")] == \
        [256, 128, 68, 48, 44, 40, 36, 36]

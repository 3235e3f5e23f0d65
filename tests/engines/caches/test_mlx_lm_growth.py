"""posenc's MLX-LM memory model (posenc_cli/engines/caches/mlx_lm.py, mlx_lm_growth.py) on the real-config corpus,
without mlx: properties the byte-exact parity test (tests/engines/test_memory_mlx_lm.py) does not sweep (every context
length, every shipped model), and the settings' checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc_cli.engines.caches import mlx_lm as modelled
from posenc_cli.engines.caches import mlx_lm_growth as growth
from posenc_cli.engines.caches.model import Unsupported
from posenc_cli.errors import PosencError
from posenc_cli.frameworks.registry import load_memory
from posenc_cli.models.cache_layout import CacheLayout, cache_layout

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
MEMORY = modelled.MEMORY


def layout(name: str) -> CacheLayout:
    cfg: dict[str, Any] = json.loads((CORPUS / f"{name}.json").read_text(encoding="utf-8"))
    return cache_layout(cfg)


def modelled_corpus() -> list[str]:
    out = []
    for path in sorted(CORPUS.glob("*.json")):
        try:
            modelled.mlx_caches(cache_layout(json.loads(path.read_text(encoding="utf-8"))))
        except (Unsupported, PosencError):
            continue
        out.append(path.stem)
    return out


NAMES = modelled_corpus()


def test_the_registry_serves_it_and_most_of_the_corpus_is_modelled() -> None:
    assert load_memory("mlx-lm") is MEMORY
    assert len(NAMES) >= 45
    for name in ("llama-3.1-8b-instruct", "gemma-3-27b-it", "gpt-oss-120b", "deepseek-v3", "qwen3.5-9b",
                 "nemotron-h-56b-base-8k", "qwen3-235b-a22b", "llama-4-scout-17b-16e-instruct"):
        assert name in NAMES


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(NAMES), a=st.integers(0, 300_000), b=st.integers(0, 300_000))
def test_the_cost_grows_with_the_context(name: str, a: int, b: int) -> None:
    """Monotone at the default --prefill-step-size (a multiple of 256); sliding groups stop at their window."""
    lay = layout(name)
    s = MEMORY.settings_for({})
    lo, hi = sorted((a, b))
    small, large = MEMORY.cost(lay, lo, s), MEMORY.cost(lay, hi, s)
    assert small.cache_bytes <= large.cache_bytes
    for g_small, g_large in zip(small.groups, large.groups, strict=True):
        if g_small.kind == "sliding" and lo >= int(g_small.note.split("max_size=")[1].split(",")[0]):
            assert g_small.bytes == g_large.bytes  # a rotating cache holds max_size cells past its window
        if g_small.kind == "state":
            assert g_small.bytes == g_large.bytes or lo == 0 < hi


@settings(max_examples=40, deadline=None)
@given(tokens=st.integers(1, 10**6), step=st.sampled_from([256, 512, 2048, 4096]))
def test_a_full_cache_is_the_prompt_padded_to_256_cells(tokens: int, step: int) -> None:
    """With calls of a multiple of 256 tokens, KVCache holds the prompt rounded up to 256 cells."""
    calls = growth.prompt_calls(tokens, step)
    assert growth.cells_after(growth.Growing(), calls) == -(-tokens // 256) * 256


def test_other_step_sizes_are_not_monotone_in_mlx_lm_either() -> None:
    """With --prefill-step-size 300 a 513-token prompt ends on a 768-cell KVCache, a 514-token one on 556 cells:
    mlx-lm's own growth (proven against its KVCache by the parity test), which posenc reports as it is."""
    assert growth.cells_after(growth.Growing(), growth.prompt_calls(513, 300)) == 768
    assert growth.cells_after(growth.Growing(), growth.prompt_calls(514, 300)) == 556


def test_llama_3_1_8b_at_128k_is_its_keys_and_values() -> None:
    """32 layers x 8 KV heads x 128 x 2 (K and V) x 2 bytes per token: 128 KiB a token, 16 GiB at 131072."""
    lay = layout("llama-3.1-8b-instruct")
    cost = MEMORY.cost(lay, 131072, MEMORY.settings_for({}))
    per_token = sum(2 * x.kv_heads * x.k_head_dim * 2 for x in lay.layers)
    assert cost.cache_bytes == per_token * 131072 == 16 * 2**30
    q8 = MEMORY.cost(lay, 131072, MEMORY.settings_for({"--kv-bits": "8"}))
    assert q8.cache_bytes * 32 == cost.cache_bytes * 17  # 8.5 bits a value: 1 byte plus a 2-byte scale and bias per 64


@pytest.mark.parametrize("name", ["llama-3.1-8b-instruct", "qwen3-8b", "qwen3.5-9b", "nemotron-h-56b-base-8k"])
def test_quantized_caches_are_smaller_past_the_start(name: str) -> None:
    lay = layout(name)
    plain = MEMORY.cost(lay, 8192, MEMORY.settings_for({}))
    q8 = MEMORY.cost(lay, 8192, MEMORY.settings_for({"kv_bits": 8}))
    q4 = MEMORY.cost(lay, 8192, MEMORY.settings_for({"kv_bits": 4}))
    assert q4.cache_bytes < q8.cache_bytes < plain.cache_bytes
    below = MEMORY.cost(lay, 4999, MEMORY.settings_for({"kv_bits": 8}))
    assert below.cache_bytes == MEMORY.cost(lay, 4999, MEMORY.settings_for({})).cache_bytes
    assert any("nothing quantized" in n for n in below.notes)


def test_max_kv_size_bounds_only_models_without_make_cache() -> None:
    capped = MEMORY.settings_for({"--max-kv-size": "4096"})
    qwen = layout("qwen3-8b")
    assert MEMORY.cost(qwen, 10**6, capped).cache_bytes == MEMORY.cost(qwen, 4097, capped).cache_bytes
    assert MEMORY.cost(qwen, 10**6, capped).cache_bytes < MEMORY.cost(qwen, 10**6, MEMORY.settings_for({})).cache_bytes
    llama = layout("llama-3.1-8b-instruct")
    ignored = MEMORY.cost(llama, 10**5, capped)
    assert ignored.cache_bytes == MEMORY.cost(llama, 10**5, MEMORY.settings_for({})).cache_bytes
    assert any("ignored" in n for n in ignored.notes)


@pytest.mark.parametrize("name", ["mistral-7b-v0.1", "gemma-2-9b-it"])
def test_layers_transformers_windows_that_mlx_lm_keeps_whole(name: str) -> None:
    """Mistral 7B (sliding_window 4096; mlx-lm's llama.py windows only layers its layer_types name) and Gemma 2
    (gemma2.py has no make_cache)."""
    lay = layout(name)
    assert "sliding" in {x.kind for x in lay.layers}
    cost = MEMORY.cost(lay, 32768, MEMORY.settings_for({}))
    assert [g.kind for g in cost.groups] == ["full"] and cost.groups[0].cells == 32768
    assert any("keep every token in mlx-lm" in n for n in cost.notes)


@pytest.mark.parametrize(("name", "given", "why"), [
    ("gemma-3-27b-it", {"kv_bits": 8}, "RotatingKVCache"),
    ("deepseek-v3", {"kv_bits": 4}, "rotated keys"),
    ("phi-2", {"kv_bits": 8}, "multiple of --kv-group-size"),
    ("qwen3-8b", {"kv_bits": 8, "max_kv_size": 1000}, "RotatingKVCache"),
    ("chatglm2-6b", {}, "no model file"),
    ("llama-3.3-nemotron-super-49b-v1", {}, "does not model"),
])
def test_what_mlx_lm_cannot_run_is_unsupported(name: str, given: dict[str, Any], why: str) -> None:
    with pytest.raises(Unsupported, match=why):
        MEMORY.cost(layout(name), 1000, MEMORY.settings_for(given))


def test_a_gguf_layout_is_not_an_mlx_lm_model() -> None:
    lay = layout("llama-3.1-8b-instruct")
    lay.config = None
    with pytest.raises(Unsupported, match="GGUF"):
        MEMORY.cost(lay, 1000, MEMORY.settings_for({}))


@pytest.mark.parametrize(("flag", "value", "allowed"), [
    ("--kv-bits", "7", "1, 2, 3, 4, 5, 6, 8"), ("--kv-group-size", "16", "32, 64, 128"),
    ("--dtype", "float8", "bfloat16"), ("--prefill-step-size", "0", "at least 1"),
])
def test_settings_name_what_mlx_allows(flag: str, value: str, allowed: str) -> None:
    with pytest.raises(PosencError, match=allowed):
        MEMORY.settings_for({flag: value})


def test_levers() -> None:
    assert [v for _, v in MEMORY.levers(MEMORY.settings_for({}))] == [{"kv_bits": 8}, {"kv_bits": 4},
                                                                       {"max_kv_size": 4096}]
    assert [v for _, v in MEMORY.levers(MEMORY.settings_for({"kv_bits": 8}))] == [{"kv_bits": 4},
                                                                                  {"max_kv_size": 4096}]
    assert "no longer sees the whole context" in MEMORY.levers(MEMORY.settings_for({}))[-1][0]


def test_the_dtype_is_the_configs_unless_given() -> None:
    gpt_oss = layout("gpt-oss-20b")  # its config names no dtype
    cost = MEMORY.cost(gpt_oss, 1000, MEMORY.settings_for({}))
    assert cost.settings["dtype"] == "bfloat16" and any("bfloat16 assumed" in n for n in cost.notes)
    f32 = MEMORY.cost(gpt_oss, 1000, MEMORY.settings_for({"--dtype": "float32"}))
    assert f32.cache_bytes == 2 * cost.cache_bytes

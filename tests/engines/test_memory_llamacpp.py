"""posenc's llama.cpp memory model (posenc_cli.engines.caches.llamacpp) against the bytes the REAL llama.cpp allocates,
read from its own log, on GGUFs made by llama.cpp's own converter.

The twins (tests/harness/llamacpp_memory.py: tiny random models of corpus configs, saved by transformers and converted
by ``convert_hf_to_gguf.py`` of the llama-cpp-python 0.3.36 sdist, found through ``POSENC_LLAMA_CONVERTER``) cover full
attention (Llama 3.1), GQA with a MoE (Qwen3 MoE), sliding windows (Gemma 3: 5 of 6 layers, window 512; Gemma 4,
whose sliding and full layers have different head sizes, so V is padded without flash attention; gpt-oss: every other
layer, window 128), MLA (DeepSeek-V3's rope dims) and two hybrids (Qwen3.5: gated delta net with
attention every 4th layer; Nemotron 3 Nano: Mamba2, MoE and attention layers). Each is loaded once in llama.cpp
(llama-cpp-python's low-level API, CPU) and a context created per case with the context parameters
(:class:`~posenc_cli.engines.caches.llamacpp.Params`) of fixed corner cases (padding, 1 and 4 sequences, unified or
not, q8_0/q4_0 K and V with flash attention, ``--swa-full``, small batches, flash attention off, the refusals) and of
combinations drawn with a fixed seed.

What is compared: every line llama.cpp prints for its caches (``llama_kv_cache: size = X MiB (N cells, L layers,
S/U seqs), K (type): X MiB, V (type): X MiB`` and ``llama_memory_recurrent: size = ...``), in order, against
:func:`~posenc_cli.engines.caches.llamacpp.allocate` on the GGUF's header (``gguf_cache_layout``) and on the config
(``cache_layout``; and the two layouts against each other): the cells, sequences and streams (and a KV cache's
layers) exactly, each MiB figure within the log's rounding: ``%7.2f`` of ``(float) bytes / 2^20``, so 0.005 MiB plus
float32 rounding (``TOL`` = 0.00501). A
context llama.cpp refuses (a quantized V without flash attention, different K and V types for MLA) is one posenc
refuses. Then llama-server's own settings: :func:`~posenc_cli.engines.caches.llamacpp.cost` of the server defaults
and flags, through the same parameters.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("transformers")
pytest.importorskip("torch")

from converted_harness import converter_dir  # noqa: E402
from llamacpp_memory import TOL, TWINS, LlamaModel, compare, twin_gguf  # noqa: E402

from posenc_cli.engines.caches.llamacpp import CACHE_TYPES, MEMORY, Params, allocate, server_params  # noqa: E402
from posenc_cli.errors import PosencError  # noqa: E402
from posenc_cli.models.cache_layout import CacheLayout, cache_layout
from posenc_cli.models.gguf.caches import gguf_cache_layout  # noqa: E402

CONVERTER = converter_dir()
pytestmark = pytest.mark.skipif(CONVERTER is None, reason="POSENC_LLAMA_CONVERTER does not name llama.cpp's "
                                "convert_hf_to_gguf.py folder (.ci/run sets it after pip download)")
MIB = 1 << 20
#: fixed corner cases: padding (ctx not a multiple of 256, and one that is), 1 and 4 sequences, unified or not,
#: quantized K and V with flash attention, --swa-full, small batches (the sliding cache's cells), flash attention
#: off (V transposed), and the refusals (a quantized V without flash attention; mixed K and V types on MLA)
CORNERS = [
    Params(1000, 1, False),
    Params(2048, 1, False),
    Params(1000, 4, False),
    Params(1000, 4, True),
    Params(3000, 4, True, "q8_0", "q8_0", "on"),
    Params(700, 2, False, "q4_0", "q4_0", "auto", swa_full=True),
    Params(5000, 3, False, "f16", "f16", "off", n_batch=2048, n_ubatch=256),
    Params(4000, 1, False, "q8_0", "f16", "off", n_batch=100, n_ubatch=64),
    Params(1200, 2, True, "q8_0", "q8_0", "off"),
    Params(1500, 1, False, "q8_0", "q4_0", "on"),
    Params(300, 32, False, "f32", "f32", "auto", n_batch=128, n_ubatch=64),
    Params(1000, 2, False, n_rs_seq=3),  # MTP rollback rows: kept by Qwen3.5 and Nemotron-H, clamped to 0 elsewhere
]
SAMPLED_PER_TWIN = 4


def sampled(seed: int, n: int) -> list[Params]:
    """Combinations drawn with a fixed seed: context, sequences, unified, K and V types, flash attention, swa-full,
    batch and ubatch."""
    rng = random.Random(seed)
    types = sorted(CACHE_TYPES)
    return [Params(rng.randint(1, 6000), rng.choice([1, 2, 3, 4, 8]), rng.random() < 0.5, rng.choice(types),
                   rng.choice(types), rng.choice(["on", "off", "auto"]), rng.random() < 0.3,
                   rng.choice([2048, 512, 100]), rng.choice([512, 256, 32])) for _ in range(n)]


@pytest.fixture(scope="module", params=TWINS)
def twin(request: pytest.FixtureRequest) -> Iterator[tuple[str, LlamaModel, dict[str, CacheLayout]]]:
    assert CONVERTER is not None
    gguf, config = twin_gguf(request.param, CONVERTER)
    model = LlamaModel(gguf)
    yield request.param, model, {"gguf": gguf_cache_layout(gguf), "config": cache_layout(config)}
    model.close()


def test_every_cache_line_llama_cpp_prints(twin: tuple[str, LlamaModel, dict[str, CacheLayout]]) -> None:
    name, model, layouts = twin
    cases = CORNERS + sampled(36 + TWINS.index(name), SAMPLED_PER_TWIN)
    failures = []
    allocated = 0
    for p in cases:
        printed, log = model.caches(p)
        allocated += bool(printed)
        for source, layout in layouts.items():
            failures += [f"{name} {source} {p}: {f}" for f in compare(layout, p, printed, log)]
    assert failures == []
    assert allocated >= len(CORNERS) - 3  # most cases allocate (the refusals are the exception)


def test_the_refusals_are_llama_cpps(twin: tuple[str, LlamaModel, dict[str, CacheLayout]]) -> None:
    """A quantized V with flash attention off: llama.cpp refuses (llama_init_from_model), so does posenc."""
    name, model, layouts = twin
    p = Params(1000, 1, False, "q8_0", "q8_0", "off")
    printed, log = model.caches(p)
    assert printed == [] and "quantized V cache requires flash_attn" in log
    with pytest.raises(PosencError, match="needs flash attention"):
        allocate(layouts["gguf"], p)


@pytest.mark.parametrize(("flags", "expected"), [
    ({}, Params(3000, 4, True)),  # llama-server's defaults: 4 auto slots, unified
    ({"parallel": 2}, Params(6000, 2, False)),  # -np 2 and no unified cache: -c 2 x ctx
    ({"parallel": 2, "kv_unified": "on"}, Params(3000, 2, True)),
    ({"parallel": -1, "kv_unified": "off"}, Params(3000, 4, True)),  # auto slots force the unified cache
    ({"cache_type_k": "q8_0", "cache_type_v": "q8_0", "swa_full": "on", "ubatch_size": 128},
     Params(3000, 4, True, "q8_0", "q8_0", "auto", True, 2048, 128)),
])
def test_llama_server_settings_give_these_parameters(
        twin: tuple[str, LlamaModel, dict[str, CacheLayout]], flags: dict[str, Any], expected: Params) -> None:
    """llama-server's flags (and defaults) as context parameters, and what the real llama.cpp allocates with them."""
    name, model, layouts = twin
    settings = MEMORY.settings_for(flags)
    p = server_params(3000, settings, [])
    assert p == expected
    printed, log = model.caches(p)
    assert compare(layouts["gguf"], p, printed, log) == []
    cost = MEMORY.cost(layouts["gguf"], 3000, settings)
    assert cost.cache_bytes == sum(x.bytes for x in allocate(layouts["gguf"], p)[0])
    assert abs(cost.cache_bytes / MIB - sum(x.size for x in printed)) <= TOL * len(printed)


def test_gguf_cache_layout_reads_what_the_config_says(twin: tuple[str, LlamaModel, dict[str, CacheLayout]]) -> None:
    """The converted GGUF's header (gguf_cache_layout) against the config it came from (cache_layout): the same cache
    facts per layer (kind, KV heads, head sizes, window, MLA's latent). Where they are written differently, the
    same thing as llama.cpp caches it: a GGUF's recurrent layer carries its ssm.* sizes where the config carries
    transformers' state shapes (equal R and S in llama.cpp), and names its mixer by the architecture."""
    name, _, layouts = twin
    gguf, config = layouts["gguf"], layouts["config"]
    assert gguf.num_layers == config.num_layers and gguf.nextn_layers == 0

    def facts(layout: CacheLayout) -> list[tuple[Any, ...]]:
        return [(x.kind, x.kv_heads, x.k_head_dim, x.v_head_dim, x.window, x.mla) for x in layout.layers]

    assert facts(gguf) == facts(config)
    p = Params(1000, 2, False)
    assert allocate(gguf, p)[1] == allocate(config, p)[1]  # llama.cpp's view of every layer, states' sizes included

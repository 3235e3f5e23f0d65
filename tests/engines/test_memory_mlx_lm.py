"""posenc's memory model of MLX-LM 0.32.2 (posenc_cli/engines/caches/mlx_lm.py) against mlx-lm's own caches on mlx
0.32.4's CPU backend: exact to the byte.

* The growth rules: mlx-lm's ``KVCache``, ``RotatingKVCache`` and ``ChunkedKVCache`` driven with the calls
  ``generate_step`` makes for a prompt (``prompt_calls``), over prompt lengths, prefill step sizes, windows and keeps
  (fixed corner cases and hypothesis samples): the cells they hold equal posenc's.
* The models: tiny random twins of real configs (``mlx_harness.twin``: the layer pattern, head sizes, windows, MLA
  ranks and state sizes kept, the rest tiny) built by mlx-lm's own model files, a prompt of N tokens run by
  ``mlx_lm.generate.generate_step``, and each cache's ``nbytes`` (mlx-lm's own accounting) compared with posenc's
  bytes per layer at N for the same config and settings: full attention, GQA, MoE, sliding (Gemma 3, gpt-oss), a
  model file without ``make_cache`` (sliding layers kept whole, ``--max-kv-size``), Llama 4's chunked layers, MLA
  (DeepSeek V3's latent, V3.2's indexer), linear attention (Qwen3.5, Qwen3-Next), Mamba hybrids (Nemotron-H,
  Granite 4.0-H, Jamba, Falcon-H1, Mamba), quantized caches (``--kv-bits`` 8, 4 and 3, group sizes, the
  ``--quantized-kv-start`` crossing), in bfloat16 and float32 (MoE twins in float32 only: mlx's CPU backend gathers
  experts in float32 only).
* Where posenc says mlx-lm fails (``Unsupported``), mlx-lm fails: ``--kv-bits`` on a rotating cache, on DeepSeek V3's
  latent, on a head size the group does not divide; and every corpus config posenc says mlx-lm has no file for does
  not load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given as hgiven
from hypothesis import settings
from hypothesis import strategies as st

from posenc_cli.engines.caches import mlx_lm as modelled
from posenc_cli.engines.caches import mlx_lm_growth as growth
from posenc_cli.engines.caches.model import Unsupported
from posenc_cli.models.cache_layout import cache_layout

mh = pytest.importorskip("mlx_harness")
if not mh.available():
    pytest.skip("mlx and mlx-lm do not import here (see tests/harness/mlx_harness.py)", allow_module_level=True)

import mlx.core as mx  # noqa: E402 - after the skip
from mlx_lm.models import cache as mlx_cache  # noqa: E402

CORPUS = Path(__file__).resolve().parents[2] / "tests" / "corpus"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CORPUS / f"{name}.json").read_text(encoding="utf-8"))
    return data


# --- the growth rules, on mlx-lm's cache classes ----------------------------------------------------------------

def _drive(cache: Any, calls: list[tuple[int, int]], chunked: bool = False) -> int:
    """The cells ``cache`` holds after the calls (one head of 2 elements per token: only the token axis matters)."""
    for size, count in calls:
        for _ in range(count):
            if chunked:
                cache.maybe_trim_front()  # what llama4.py's model does before each call
            x = mx.zeros((1, 1, size, 2), dtype=mx.float16)
            cache.update_and_fetch(x, x)
            mx.eval(cache.keys, cache.values)
    return int(cache.keys.shape[2])


def _check_growth(tokens: int, step: int, window: int, keep: int) -> None:
    calls = growth.prompt_calls(tokens, step)
    assert sum(size * count for size, count in calls) == tokens
    assert _drive(mlx_cache.KVCache(), calls) == growth.cells_after(growth.Growing(), calls)
    assert (_drive(mlx_cache.RotatingKVCache(max_size=window, keep=keep), calls)
            == growth.cells_after(growth.Rotating(window, keep), calls)), (tokens, step, window, keep)
    assert (_drive(mlx_cache.ChunkedKVCache(window), calls, chunked=True)
            == growth.cells_after(growth.Chunked(window), calls)), (tokens, step, window)


@pytest.mark.parametrize(("tokens", "step", "window", "keep"), [
    (1, 2048, 128, 0), (2, 2048, 128, 0), (256, 2048, 128, 0), (257, 2048, 128, 0), (513, 300, 200, 0),
    (514, 300, 200, 4), (1000, 1, 300, 4), (2049, 2048, 4096, 0), (5000, 2048, 1024, 0), (700, 128, 128, 4),
    (3000, 512, 511, 0), (900, 256, 257, 0), (40, 3, 20, 4),
])
def test_the_cells_are_mlx_lms_own(tokens: int, step: int, window: int, keep: int) -> None:
    _check_growth(tokens, step, window, keep)


@settings(max_examples=40, deadline=None)
@hgiven(tokens=st.integers(1, 3000), step=st.sampled_from([1, 7, 100, 255, 256, 300, 512, 1000, 2048]),
       window=st.integers(1, 1500), keep=st.sampled_from([0, 4]))
def test_the_cells_are_mlx_lms_own_for_sampled_prompts(tokens: int, step: int, window: int, keep: int) -> None:
    if step < 100 and tokens > 600:
        tokens = 600  # one mlx call per step: keep the sample fast
    _check_growth(tokens, step, max(window, keep + 1), keep)


def test_a_long_prompt_skips_whole_cycles() -> None:
    """A million tokens in calls of one token: the same cells as the rule applied call by call (a shorter run), at
    once."""
    calls = growth.prompt_calls(10**6, 1)
    assert growth.cells_after(growth.Growing(), calls) == 10**6 + 192
    assert growth.cells_after(growth.Rotating(131072, 4), calls) == 131072
    assert growth.cells_after(growth.Chunked(8192), calls) == 8192 + 256


# --- the models ------------------------------------------------------------------------------------------------

def _posenc_layers(cfg: dict[str, Any], tokens: int, **given: Any) -> list[int]:
    memory = modelled.MEMORY
    cost = memory.cost(cache_layout(cfg), tokens, memory.settings_for(given))
    out = []
    for g in cost.groups:
        assert g.bytes % g.layers == 0
        out += [g.bytes // g.layers] * g.layers
    return sorted(b for b in out if b)


def _mlx_settings(given: dict[str, Any]) -> dict[str, Any]:
    """generate_step's keyword arguments for posenc's settings (``kv_bits`` 0: not given)."""
    keys = {"kv_bits", "kv_group_size", "quantized_kv_start", "prefill_step_size"}
    return {k: v for k, v in given.items() if k in keys and not (k == "kv_bits" and not v)}


def check(cfg: dict[str, Any], tokens: int, dtype: str = "float32", model: Any = None, **given: Any) -> Any:
    """mlx-lm's caches after ``tokens`` prompt tokens equal posenc's, layer by layer (as multisets of bytes)."""
    model = model or mh.build(cfg, dtype)
    cache = mh.prefill(model, tokens, max_kv_size=given.get("max_kv_size") or None, **_mlx_settings(given))
    measured = sorted(b for b in mh.layer_nbytes(cache) if b)
    assert measured == _posenc_layers(cfg, tokens, dtype=dtype, **given), (tokens, dtype, given)
    return model


#: Llama 3.1 8B's twin, two query heads on one KV head of 128 (mlx's CPU attention is slow: the twins stay narrow)
LLAMA = mh.twin(load("llama-3.1-8b-instruct"), layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                hidden_size=256)


@pytest.mark.parametrize("tokens", [1, 255, 256, 257, 600, 2049])
def test_llama_gqa_full_attention(tokens: int) -> None:
    check(LLAMA, tokens, "bfloat16")


def test_llama_settings() -> None:
    model = mh.build(LLAMA, "bfloat16")
    for tokens, given in [
        (513, {"prefill_step_size": 300}), (514, {"prefill_step_size": 300}), (300, {"prefill_step_size": 1}),
        (600, {"kv_bits": 8, "quantized_kv_start": 300}), (600, {"kv_bits": 4, "quantized_kv_start": 300}),
        (600, {"kv_bits": 3, "quantized_kv_start": 0, "kv_group_size": 32}),
        (600, {"kv_bits": 4, "quantized_kv_start": 599, "kv_group_size": 128, "prefill_step_size": 200}),
        (600, {"kv_bits": 8, "quantized_kv_start": 600}),  # crossed by the last token's call
        (600, {"kv_bits": 8, "quantized_kv_start": 601}),  # below the start: nothing quantized
        (600, {"max_kv_size": 200}),  # Llama's own make_cache ignores it
    ]:
        check(LLAMA, tokens, "bfloat16", model, **given)
    check(LLAMA, 700, "float32", None, kv_bits=8, quantized_kv_start=100)
    check(LLAMA, 300, "float16", None, kv_bits=2, quantized_kv_start=100)


def test_a_model_file_without_make_cache() -> None:
    """Qwen3 (plain KVCache per layer; --max-kv-size a RotatingKVCache(keep=4) per layer), Mistral 7B and Gemma 2
    (sliding in transformers, every token kept by mlx-lm)."""
    qwen = mh.twin(load("qwen3-8b"), layers=2, num_attention_heads=2, num_key_value_heads=1, hidden_size=256)
    model = mh.build(qwen, "bfloat16")
    for tokens, given in [(300, {}), (150, {"max_kv_size": 200}), (600, {"max_kv_size": 200}),
                          (600, {"max_kv_size": 200, "prefill_step_size": 64}),
                          (600, {"kv_bits": 8, "quantized_kv_start": 10})]:
        check(qwen, tokens, "bfloat16", model, **given)
    check(mh.twin(load("mistral-7b-v0.1"), layers=2, sliding_window=64), 300, "float16")
    check(mh.twin(load("gemma-2-9b-it"), layers=2, sliding_window=64), 300, "bfloat16")


def test_sliding_windows() -> None:
    gemma = mh.twin(load("gemma-3-27b-it"), layers=6, sliding_window=128, num_attention_heads=2,
                    num_key_value_heads=1, hidden_size=256)
    model = mh.build(gemma, "bfloat16")
    for tokens, given in [(100, {}), (129, {}), (400, {}), (700, {"prefill_step_size": 100}),
                          (700, {"prefill_step_size": 300})]:
        check(gemma, tokens, "bfloat16", model, **given)
    gpt_oss = mh.twin(load("gpt-oss-20b"), layers=4, num_attention_heads=2, num_key_value_heads=1)  # window 128
    model = mh.build(gpt_oss)  # MoE: float32
    for tokens, given in [(50, {}), (200, {}), (400, {"prefill_step_size": 128})]:
        check(gpt_oss, tokens, "float32", model, **given)


def test_chunked_llama4() -> None:
    llama4 = mh.twin(load("llama-4-scout-17b-16e-instruct"), layers=4, attention_chunk_size=200,
                     num_attention_heads=2, num_key_value_heads=1)
    model = mh.build(llama4)
    for tokens, given in [(150, {}), (450, {"prefill_step_size": 128}), (700, {}),
                          (700, {"kv_bits": 8, "quantized_kv_start": 100})]:
        check(llama4, tokens, "float32", model, **given)


def test_mla() -> None:
    v3 = mh.twin(load("deepseek-v3"), layers=2)
    model = mh.build(v3)
    for tokens, given in [(300, {}), (700, {"prefill_step_size": 256})]:
        check(v3, tokens, "float32", model, **given)
    v32 = mh.twin(load("deepseek-v3.2"), layers=2)
    model = mh.build(v32)
    check(v32, 300, "float32", model)
    check(v32, 300, "float32", model, kv_bits=8, quantized_kv_start=100)  # a CacheList: never quantized


def test_linear_attention() -> None:
    qwen35 = mh.twin(load("qwen3.5-9b"), layers=4, num_attention_heads=2, num_key_value_heads=1)
    model = mh.build(qwen35, "bfloat16")
    for tokens, given in [(40, {}), (300, {}), (300, {"kv_bits": 8, "quantized_kv_start": 100})]:
        check(qwen35, tokens, "bfloat16", model, **given)
    check(mh.twin(load("qwen3-next-80b-a3b-thinking"), layers=4), 100)


def test_mamba_hybrids() -> None:
    nemotron = mh.twin(load("nemotron-h-56b-base-8k"), layers=4, hybrid_override_pattern="M*M-",
                       mamba_num_heads=4)
    check(nemotron, 100, "bfloat16")
    check(mh.twin(load("nemotron-3-nano-30b-a3b-bf16"), layers=4, hybrid_override_pattern="M*ME",
                  mamba_num_heads=4), 100)


def _default_twin(model_type: str, **changes: Any) -> dict[str, Any]:
    """A twin of transformers' default config of ``model_type`` (for model files no corpus config reaches)."""
    from transformers import CONFIG_MAPPING

    cfg = mh.twin(CONFIG_MAPPING[model_type]().to_dict(), layers=4, **changes)
    cfg["model_type"] = model_type
    return cfg


@pytest.mark.parametrize(("model_type", "changes", "dtype"), [
    ("mamba", {}, "bfloat16"),
    ("falcon_mamba", {}, "float32"),
    ("mamba2", {"intermediate_size": 128, "hidden_size": 64, "num_heads": 8, "head_dim": 16}, "bfloat16"),
    ("falcon_h1", {}, "float32"),
    ("granitemoehybrid", {"layer_types": ["mamba", "attention", "mamba", "attention"]}, "float32"),
    ("jamba", {"attn_layer_period": 2, "attn_layer_offset": 1}, "float32"),
    ("olmo_hybrid", {}, "bfloat16"),
    ("cohere2", {"sliding_window": 64}, "bfloat16"),
    ("glm4_moe_lite", {}, "float32"),
    # DeepSeek-V2(-Lite) and MiniCPM3: MLA in transformers, every head's keys and values in mlx-lm
    ("deepseek_v2", {"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096,
                                      "beta_fast": 32, "beta_slow": 1, "mscale": 1, "mscale_all_dim": 1}}, "float32"),
    ("minicpm3", {"rope_scaling": {"type": "longrope", "long_factor": [1.0] * 16, "short_factor": [1.0] * 16,
                                   "original_max_position_embeddings": 4096}}, "bfloat16"),
])
def test_default_config_twins(model_type: str, changes: dict[str, Any], dtype: str) -> None:
    check(_default_twin(model_type, **changes), 24, dtype)


#: twin settings a corpus config needs to build small: Nemotron-H's pattern with its attention layer kept and fewer
#: Mamba heads, Gemma 4's experts per token within the twin's experts
SWEEP_CHANGES: dict[str, dict[str, Any]] = {
    "nemotron-h-56b-base-8k": {"hybrid_override_pattern": "M-M*M-", "mamba_num_heads": 4},
    "nemotron-3-nano-30b-a3b-bf16": {"hybrid_override_pattern": "M*MEM*", "mamba_num_heads": 4},
    "gemma-4-26b-a4b": {"top_k_experts": 2},
    "gemma-3-4b-it": {"num_attention_heads": 2, "num_key_value_heads": 1, "hidden_size": 512},
}
#: corpus configs left out of the sweep: Phi-3-small's block-sparse attention takes seconds on mlx's CPU backend (a
#: model file without make_cache, as Phi-3's, which the sweep runs)
SWEEP_SKIPS = frozenset({"phi-3-small-8k-instruct"})


def test_every_corpus_config_mlx_lm_builds() -> None:
    """Every corpus config: its twin built by mlx-lm equals posenc at 40 tokens (calls of 16), or
    posenc says mlx-lm has no file / posenc does not model it and mlx-lm indeed has none where posenc says so."""
    from mlx_lm.utils import _get_classes

    compared = []
    for path in sorted(CORPUS.glob("*.json")):
        if path.name == "SOURCES.json" or path.stem in SWEEP_SKIPS:
            continue
        cfg = load(path.stem)
        try:
            modelled.mlx_caches(cache_layout(cfg))
        except Unsupported as why:
            if "no model file" in str(why):
                with pytest.raises((ValueError, KeyError)):
                    _get_classes(config=cfg)
            continue
        except Exception:  # noqa: BLE001 - posenc cannot read the layout (a PosencError of its own)
            continue
        twin = mh.twin(cfg, layers=6, **SWEEP_CHANGES.get(path.stem, {}))
        try:
            model = mh.build(twin)
        except Exception:  # noqa: BLE001 - a twin mlx-lm's ModelArgs will not take (a required key shrunk away)
            continue
        check(twin, 40, "float32", model, prefill_step_size=16)
        compared.append(path.stem)
    assert len(compared) >= 30, compared


# --- where mlx-lm fails -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "layers", "given", "error"), [
    ("gemma-3-27b-it", 6, {"kv_bits": 8}, NotImplementedError),
    ("gpt-oss-20b", 4, {"kv_bits": 4}, NotImplementedError),
    ("qwen3-8b", 2, {"kv_bits": 8, "max_kv_size": 200}, NotImplementedError),
    ("deepseek-v3", 2, {"kv_bits": 8, "kv_group_size": 32}, AttributeError),
    ("phi-2", 2, {"kv_bits": 8}, ValueError),
])
def test_kv_bits_fails_where_posenc_says(name: str, layers: int, given: dict[str, Any], error: type) -> None:
    cfg = mh.twin(load(name), layers=layers, num_attention_heads=2, num_key_value_heads=1)
    with pytest.raises(Unsupported):
        _posenc_layers(cfg, 150, **given)
    model = mh.build(cfg)
    with pytest.raises(error):
        mh.prefill(model, 150, max_kv_size=given.get("max_kv_size"), quantized_kv_start=100,
                   **_mlx_settings({k: v for k, v in given.items() if k != "quantized_kv_start"}))


def test_the_model_files_without_make_cache_are_the_installed_ones() -> None:
    import importlib

    plain = set()
    for name in mh.model_files():
        try:
            module = importlib.import_module(f"mlx_lm.models.{name}")
        except BaseException:  # noqa: BLE001 - olmo.py exits when ai2-olmo is absent
            plain.add(name) if name == "olmo" else None
            continue
        if not hasattr(module.Model, "make_cache"):
            plain.add(name)
    assert plain == modelled.PLAIN
    assert growth.STEP == mlx_cache.KVCache.step == mlx_cache.RotatingKVCache.step == mlx_cache.QuantizedKVCache.step


def test_the_defaults_are_mlx_lms() -> None:
    import importlib
    import inspect

    generate = importlib.import_module("mlx_lm.generate")
    params = inspect.signature(generate.generate_step).parameters
    assert params["prefill_step_size"].default == modelled.PREFILL_STEP_SIZE == generate.DEFAULT_PREFILL_STEP_SIZE
    assert params["quantized_kv_start"].default == modelled.QUANTIZED_KV_START
    assert params["kv_group_size"].default == modelled.KV_GROUP_SIZE
    assert inspect.signature(mlx_cache.RotatingKVCache).parameters["keep"].default == 0
    source = inspect.getsource(mlx_cache.make_prompt_cache)
    assert f"keep={modelled.MAX_KV_KEEP}" in source

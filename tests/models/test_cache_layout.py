"""What each layer caches: posenc's :mod:`posenc_cli.models.cache_layout` against the cache tensors transformers keeps.

``tests/data/layer_cache.json`` (written by ``tests/harness/generate_layer_cache.py``) holds, for every causal-LM model
type transformers builds on CPU, a tiny random model's cache after one forward pass of ``seq`` tokens with windows of
``window`` tokens: per layer, every tensor the cache holds, with its shape and dtype. Each record is compared with
:func:`~posenc_cli.models.cache_layout.transformers_cache` of :func:`~posenc_cli.models.cache_layout.cache_layout` of
the very config dict the model was built from (its dtype set to the one the model ran in): the same tensors, the same
shapes, the same dtypes, so the same bytes.

A model type whose reading differs is listed in :data:`MISMATCHES` with the reason, and is checked to still differ,
so the list cannot go stale. The real-config corpus (``tests/corpus``) is read too: no file raises anything but a
one-line PosencError, and a few shipped models are checked against their config's own numbers.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import generate_layer_cache as gen
import pytest

from posenc_cli.errors import PosencError
from posenc_cli.models.cache_layout import (
    CacheLayout,
    LayerCache,
    cache_layout,
    transformers_cache,
    transformers_cache_bytes,
)

DATA: dict[str, Any] = json.loads(gen.OUT.read_text(encoding="utf-8"))
CORPUS = Path(__file__).resolve().parents[1] / "corpus"

#: Model types whose cache posenc reads otherwise than transformers keeps it, with why. Each is checked to still
#: differ.
_DECODER_KEYS = ("the decoder of an encoder-decoder model: its text config's saved dict keeps no decoder layer count "
                 "(decoder_layers), so posenc refuses it; transformers' decoder caches like a full-attention model")
_INKLING = ("Inkling's hybrid layers run attention beside four float32 short convolutions, with sliding_window_size "
            "and swa_* head counts of their own: no rule in posenc; refused, not misread")
MISMATCHES: dict[str, str] = {
    "blenderbot-small": _DECODER_KEYS, "plbart": _DECODER_KEYS, "whisper": _DECODER_KEYS,
    "cpmant": "CPM-Ant prepends prompt_length (32) learned prompt tokens to every sequence, so its cache holds "
              "32 more positions than the tokens given",
    "deepseek_v4": "DeepSeek-V4's compressed attention caches (compressor and indexer buffers, compressed keys): no "
                   "rule in posenc; refused, not misread",
    "dots3_note": "dots3's sliding layers cache hidden_size-wide keys and qk_rope_head_dim values with one head "
                  "beside its MLA layers: no rule in posenc",
    "dots3_note_text": "dots3's sliding layers cache hidden_size-wide keys and qk_rope_head_dim values with one head "
                       "beside its MLA layers: no rule in posenc",
    "inkling2": _INKLING, "inkling2_loop": _INKLING, "inkling2_loop_text": _INKLING, "inkling2_text": _INKLING,
    "inkling_mm_model": _INKLING, "inkling_text": _INKLING,
    "zaya": "ZAYA's hybrid layers keep a two-tap convolution state and a per-channel recurrent state of their own "
            "(CCA): no rule in posenc; refused, not misread",
}


def cases() -> dict[str, str]:
    return {t: v["build"] for t, v in DATA["types"].items() if "build" in v}


CASES = cases()

Tensors = list[dict[str, tuple[tuple[int, ...], str]]]


def measured(build: dict[str, Any]) -> Tensors:
    """Per layer, the tensors transformers' cache held: name -> (shape, dtype)."""
    return [{name: (tuple(shape), dtype) for name, (shape, dtype) in layer["tensors"].items()}
            for layer in build["layers"]]


def predicted(config: dict[str, Any], dtype: str, n: int, seq: int) -> Tensors:
    """Per layer, the tensors posenc says transformers keeps after ``seq`` tokens."""
    layout = cache_layout({**json.loads(json.dumps(config)), "dtype": dtype})
    out: Tensors = [{} for _ in range(max(n, layout.num_layers))]
    for t in transformers_cache(layout, seq):
        out[t.layer][t.name] = (t.shape, t.dtype)
    return out


def differences(build: dict[str, Any]) -> list[str]:
    theirs = measured(build)
    try:
        ours = predicted(build["config"], build["dtype"], len(theirs), DATA["seq"])
    except PosencError as exc:
        return [f"posenc refuses the config: {exc}"]
    out = []
    if len(ours) != len(theirs):
        out.append(f"layers: transformers {len(theirs)}, posenc {len(ours)}")
    for i, (hf, mine) in enumerate(zip(theirs, ours, strict=False)):
        if hf != mine:
            out.append(f"layer {i}: transformers {hf}, posenc {mine}")
    return out


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_every_layer_caches_what_posenc_says(model_type: str) -> None:
    build = DATA["builds"][CASES[model_type]]
    found = differences(build)
    if model_type in MISMATCHES:
        assert found, f"{model_type} now matches: drop it from MISMATCHES ({MISMATCHES[model_type]})"
        return
    assert not found, f"{model_type} ({build['model_class']}, {build['cache_class']}): " + "; ".join(found[:4])


def test_the_mismatch_list_names_built_types() -> None:
    assert set(MISMATCHES) <= set(CASES), sorted(set(MISMATCHES) - set(CASES))


def test_the_sweep_covers_every_kind_of_cache() -> None:
    """Most causal-LM types build, and among them every kind of layer: full, sliding, chunked, MLA, shared, states."""
    assert len(CASES) >= 150, len(CASES)
    kinds: set[str] = set()
    for model_type in CASES:
        try:
            layout = cache_layout(DATA["builds"][CASES[model_type]]["config"])
        except PosencError:
            continue
        kinds |= {layer.kind for layer in layout.layers}
    assert {"full", "sliding", "chunked", "mla", "shared", "state"} <= kinds, kinds


def test_the_comparison_sees_a_wrong_head_count_window_and_state() -> None:
    build = copy.deepcopy(DATA["builds"][CASES["llama"]])
    build["config"]["num_key_value_heads"] = 1
    assert differences(build)
    build = copy.deepcopy(DATA["builds"][CASES["gemma3_text"]])
    build["config"]["sliding_window"] += 1
    assert differences(build)
    build = copy.deepcopy(DATA["builds"][CASES["qwen3_next"]])
    build["config"]["linear_conv_kernel_dim"] += 1
    assert differences(build)


def test_the_bytes_extrapolate_past_the_window() -> None:
    """Past the window only full layers grow, by their keys and values per token; a sliding layer stops at
    window - 1 tokens; states never grow. On the tiny Gemma 3 and Qwen3-Next configs the data proves at SEQ tokens."""
    def grow(layout: CacheLayout, a: int, b: int) -> int:
        return transformers_cache_bytes(layout, b, dtype="bfloat16") - transformers_cache_bytes(layout, a,
                                                                                                  dtype="bfloat16")

    for model_type in ("gemma3_text", "qwen3_next", "gpt_oss", "nemotron_h"):
        layout = cache_layout(DATA["builds"][CASES[model_type]]["config"])
        per_token = sum(2 * (x.k_per_token + x.v_per_token) for x in layout.layers if x.window is None)
        windows = [x.window for x in layout.layers if x.window is not None]
        past = 10 * max(windows, default=1)
        assert grow(layout, past, past + 1000) == 1000 * per_token, model_type
        if windows:
            assert grow(layout, 1, 2) > per_token, model_type  # below the window, sliding layers grow too
        assert per_token > 0


#: a sample regenerated in memory: plain, sliding, MLA and linear-attention caches
FRESH_TYPES = ["llama", "gemma3_text", "deepseek_v3", "qwen3_next"]


def test_the_data_is_current_for_the_installed_transformers() -> None:
    transformers = pytest.importorskip("transformers")
    if transformers.__version__ != DATA["transformers"]:
        pytest.skip(f"layer_cache.json is for transformers {DATA['transformers']}, {transformers.__version__} is "
                    "installed: run tests/harness/generate_layer_cache.py")
    start = time.monotonic()
    fresh = json.loads(json.dumps(gen.generate(FRESH_TYPES)))
    for model_type in FRESH_TYPES:
        assert fresh["types"][model_type] == DATA["types"][model_type], model_type
    for key, build in fresh["builds"].items():
        assert build == DATA["builds"][key], key
    assert time.monotonic() - start < 120


# --- the real-config corpus ------------------------------------------------------------------------------------

FILES = sorted(p for p in CORPUS.glob("*.json") if p.name != "SOURCES.json")


def corpus(name: str) -> CacheLayout:
    return cache_layout(json.loads((CORPUS / f"{name}.json").read_text(encoding="utf-8")))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_corpus_config_reads_or_is_refused_in_one_line(path: Path) -> None:
    cfg = json.loads(path.read_text(encoding="utf-8"))
    try:
        layout = cache_layout(cfg)
    except PosencError as exc:
        assert "\n" not in str(exc)
        return
    assert layout.layers and (layout.dtype or "names no dtype" in layout.dtype_source)
    assert transformers_cache_bytes(layout, 4096, dtype=layout.dtype or "bfloat16") > transformers_cache_bytes(
        layout, 1024, dtype=layout.dtype or "bfloat16") > 0


def _kinds(layout: CacheLayout) -> list[str]:
    return [x.kind for x in layout.layers]


def test_llama_3_1_8b() -> None:
    """config.json: num_hidden_layers 32, num_key_value_heads 8, hidden_size 4096 / num_attention_heads 32 = 128,
    torch_dtype bfloat16."""
    layout = corpus("llama-3.1-8b-instruct")
    assert layout.layers == [LayerCache("full", 8, 128, 128)] * 32
    assert layout.dtype == "bfloat16"
    assert transformers_cache_bytes(layout, 1000) == 32 * 2 * 8 * 128 * 2 * 1000


def test_gemma_3_27b() -> None:
    """text_config: 62 layers, sliding_window 1024, sliding_window_pattern 6 (five sliding per global),
    num_key_value_heads 16, head_dim 128."""
    layout = corpus("gemma-3-27b-it")
    kinds = _kinds(layout)
    assert len(kinds) == 62
    assert kinds[:6] == ["sliding"] * 5 + ["full"]
    assert kinds.count("full") == 10
    assert {x.window for x in layout.layers if x.kind == "sliding"} == {1024}
    assert {(x.kv_heads, x.k_head_dim, x.v_head_dim) for x in layout.layers} == {(16, 128, 128)}


def test_gpt_oss_120b() -> None:
    """config.json: 36 layers, layer_types alternating sliding_attention / full_attention, sliding_window 128,
    num_key_value_heads 8, head_dim 64."""
    layout = corpus("gpt-oss-120b")
    assert _kinds(layout) == ["sliding", "full"] * 18
    assert {x.window for x in layout.layers if x.kind == "sliding"} == {128}
    assert {(x.kv_heads, x.k_head_dim) for x in layout.layers} == {(8, 64)}


def test_deepseek_v3() -> None:
    """config.json: 61 layers, kv_lora_rank 512, qk_rope_head_dim 64: one 576-wide latent per token, no V."""
    layout = corpus("deepseek-v3")
    assert len(layout.layers) == 61
    assert {(x.kind, x.kv_heads, x.k_head_dim, x.v_head_dim) for x in layout.layers} == {("mla", 1, 576, 0)}
    assert layout.layers[0].mla is not None and (layout.layers[0].mla.kv_lora_rank, layout.layers[0].mla.rope_dim) == (
        512, 64)
    assert transformers_cache_bytes(layout, 10) == 61 * 576 * 10 * 2


@pytest.mark.parametrize("name", ["qwen3-next-80b-a3b-thinking", "qwen3.5-9b", "qwen3.5-35b-a3b"])
def test_qwen_linear_attention(name: str) -> None:
    """full_attention_interval 4 (or layer_types): three gated-delta-net layers per full-attention layer."""
    layout = corpus(name)
    kinds = _kinds(layout)
    assert kinds[:4] == ["state"] * 3 + ["full"]
    assert kinds.count("state") == 3 * kinds.count("full")
    assert {x.mixer for x in layout.layers if x.kind == "state"} == {"gated_delta_net"}


def test_nemotron_h() -> None:
    """hybrid_override_pattern: M = Mamba2, * = attention, - = MLP (no cache)."""
    cfg = json.loads((CORPUS / "nemotron-h-56b-base-8k.json").read_text(encoding="utf-8"))
    pattern = cfg["hybrid_override_pattern"]
    layout = cache_layout(cfg)
    want = {"M": "state", "*": "full", "-": "none", "E": "none"}
    assert _kinds(layout) == [want[c] for c in pattern]
    assert {x.mixer for x in layout.layers if x.kind == "state"} == {"mamba2"}

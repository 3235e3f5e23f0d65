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
_DEEPSEEK_V4 = ("DeepSeek-V4's compressed attention caches (compressor and indexer buffers, compressed keys): no "
                "rule in posenc; refused, not misread")
_ZAYA = ("ZAYA's hybrid layers keep a two-tap convolution state and a per-channel recurrent state of their own (CCA): "
         "no rule in posenc; refused, not misread")
MISMATCHES: dict[str, str] = {
    "type:blenderbot-small": _DECODER_KEYS, "type:plbart": _DECODER_KEYS, "type:whisper": _DECODER_KEYS,
    "type:cpmant": "CPM-Ant prepends prompt_length (32) learned prompt tokens to every sequence, so its cache holds "
                   "32 more positions than the tokens given",
    "type:deepseek_v4": _DEEPSEEK_V4, "variant:deepseek_v4 derived": _DEEPSEEK_V4,
    "variant:dots3_note_text derived": "without layer_types dots3's text class derives its indexed / sliding pattern "
                                       "in code posenc has no rule for",
    "type:inkling2": _INKLING, "type:inkling2_loop": _INKLING, "type:inkling2_loop_text": _INKLING,
    "type:inkling2_text": _INKLING, "type:inkling_mm_model": _INKLING, "type:inkling_text": _INKLING,
    "variant:inkling_text derived": _INKLING, "variant:inkling2_text derived": _INKLING,
    "variant:inkling2_loop_text derived": _INKLING,
    "type:zaya": _ZAYA, "variant:zaya derived": _ZAYA,
}


def cases() -> dict[str, str]:
    """{case id: build key}: every built model type (``type:``) and variant (``variant:``)."""
    out = {f"type:{t}": v["build"] for t, v in DATA["types"].items() if "build" in v}
    out.update({f"variant:{label}": v["build"] for label, v in DATA["variants"].items() if "build" in v})
    return out


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


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_layer_caches_what_posenc_says(case: str) -> None:
    build = DATA["builds"][CASES[case]]
    found = differences(build)
    if case in MISMATCHES:
        assert found, f"{case} now matches: drop it from MISMATCHES ({MISMATCHES[case]})"
        return
    assert not found, f"{case} ({build['model_class']}, {build['cache_class']}): " + "; ".join(found[:4])


def test_the_mismatch_list_names_built_cases() -> None:
    assert set(MISMATCHES) <= set(CASES), sorted(set(MISMATCHES) - set(CASES))


def test_the_sweep_covers_every_kind_of_cache() -> None:
    """Most causal-LM types build, and among them every kind of layer: full, sliding, chunked, MLA, shared, states."""
    assert sum(case.startswith("type:") for case in CASES) >= 150, len(CASES)
    kinds: set[str] = set()
    mixers: set[str] = set()
    for case in CASES:
        try:
            layout = cache_layout(DATA["builds"][CASES[case]]["config"])
        except PosencError:
            continue
        kinds |= {layer.kind for layer in layout.layers}
        mixers |= {layer.mixer for layer in layout.layers}
    assert {"full", "sliding", "chunked", "mla", "shared", "state", "none"} <= kinds, kinds
    assert {"gated_delta_net", "kimi_delta", "mamba", "mamba2", "short_conv", "lightning",
            "attention+mamba2"} <= mixers, mixers


def test_the_comparison_sees_a_wrong_head_count_window_and_state() -> None:
    build = copy.deepcopy(DATA["builds"][CASES["type:llama"]])
    build["config"]["num_key_value_heads"] = 1
    assert differences(build)
    build = copy.deepcopy(DATA["builds"][CASES["type:gemma3_text"]])
    build["config"]["sliding_window"] += 1
    assert differences(build)
    build = copy.deepcopy(DATA["builds"][CASES["type:qwen3_next"]])
    build["config"]["linear_conv_kernel_dim"] += 1
    assert differences(build)


def test_the_bytes_extrapolate_past_the_window() -> None:
    """Past the window only full layers grow, by their keys and values per token; a sliding layer stops at
    window - 1 tokens; states never grow. On the tiny Gemma 3 and Qwen3-Next configs the data proves at SEQ tokens."""
    def grow(layout: CacheLayout, a: int, b: int) -> int:
        return transformers_cache_bytes(layout, b, dtype="bfloat16") - transformers_cache_bytes(layout, a,
                                                                                                  dtype="bfloat16")

    for model_type in ("gemma3_text", "qwen3_next", "gpt_oss", "nemotron_h"):
        layout = cache_layout(DATA["builds"][CASES[f"type:{model_type}"]]["config"])
        per_token = sum(2 * (x.k_per_token + x.v_per_token) for x in layout.layers if x.window is None)
        windows = [x.window for x in layout.layers if x.window is not None]
        past = 10 * max(windows, default=1)
        assert grow(layout, past, past + 1000) == 1000 * per_token, model_type
        if windows:
            assert grow(layout, 1, 2) > per_token, model_type  # below the window, sliding layers grow too
        assert per_token > 0


#: a sample regenerated in memory: plain, sliding, MLA and linear-attention caches, and a derived layer pattern
FRESH_TYPES = ["llama", "gemma3_text", "deepseek_v3", "qwen3_next"]
FRESH_VARIANTS = ["qwen2 sliding from layer 4"]


def test_the_data_is_current_for_the_installed_transformers() -> None:
    transformers = pytest.importorskip("transformers")
    if transformers.__version__ != DATA["transformers"]:
        pytest.skip(f"layer_cache.json is for transformers {DATA['transformers']}, {transformers.__version__} is "
                    "installed: run tests/harness/generate_layer_cache.py")
    start = time.monotonic()
    fresh = json.loads(json.dumps(gen.generate(FRESH_TYPES, FRESH_VARIANTS)))
    for model_type in FRESH_TYPES:
        assert fresh["types"][model_type] == DATA["types"][model_type], model_type
    for label in FRESH_VARIANTS:
        assert fresh["variants"][label] == DATA["variants"][label], label
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


# --- GGUF headers -------------------------------------------------------------------------------------------------

def write_gguf(path: Path, arch: str, keys: dict[str, Any]) -> Path:
    """A GGUF file holding only metadata (no tensors): ints as uint32, lists of ints as int32 arrays, lists of bools
    as bool arrays, strings as strings (the GGUF spec's layout, written out here)."""
    import struct

    def string(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw

    def kv(key: str, value: Any) -> bytes:
        if isinstance(value, str):
            return string(key) + struct.pack("<I", 8) + string(value)
        if isinstance(value, list) and value and isinstance(value[0], bool):
            return string(key) + struct.pack("<IIQ", 9, 7, len(value)) + bytes(int(v) for v in value)
        if isinstance(value, list):
            return string(key) + struct.pack(f"<IIQ{len(value)}i", 9, 5, len(value), *value)
        return string(key) + struct.pack("<II", 4, value)

    fields = {"general.architecture": arch, **{f"{arch}.{k}": v for k, v in keys.items()}}
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(fields)) + b"".join(kv(k, v) for k, v in fields.items()))
    return path


def test_a_gguf_reads_per_layer_kv_heads_mla_and_recurrent_layers(tmp_path: Path) -> None:
    from posenc_cli.models.gguf.caches import gguf_cache_layout

    # Granite 4.0-H style: head_count_kv per layer, 0 on the Mamba2 layers
    hybrid = gguf_cache_layout(write_gguf(tmp_path / "h.gguf", "granitehybrid", {
        "block_count": 4, "embedding_length": 1536, "attention.head_count": 12,
        "attention.head_count_kv": [0, 4, 0, 4], "ssm.conv_kernel": 4, "ssm.state_size": 128, "ssm.group_count": 1,
        "ssm.inner_size": 3072, "ssm.time_step_rank": 48}))
    assert [x.kind for x in hybrid.layers] == ["state", "full", "state", "full"]
    assert hybrid.layers[1] == LayerCache("full", 4, 128, 128)
    assert hybrid.layers[0].ssm is not None and hybrid.layers[0].ssm.inner_size == 3072
    assert hybrid.dtype is None
    # DeepSeek-V3 style MLA: one latent of kv_lora_rank + rope dims, no V
    mla = gguf_cache_layout(write_gguf(tmp_path / "d.gguf", "deepseek2", {
        "block_count": 3, "attention.head_count": 128, "attention.head_count_kv": 1, "attention.key_length": 576,
        "attention.value_length": 512, "attention.kv_lora_rank": 512, "rope.dimension_count": 64}))
    assert {(x.kind, x.kv_heads, x.k_head_dim, x.v_head_dim) for x in mla.layers} == {("mla", 1, 576, 0)}
    # Gemma 3 style: a window and llama.cpp's period 6 for the architecture; Qwen3-Next's interval
    gemma = gguf_cache_layout(write_gguf(tmp_path / "g.gguf", "gemma3", {
        "block_count": 12, "attention.head_count": 8, "attention.head_count_kv": 4, "attention.key_length": 256,
        "attention.value_length": 256, "attention.sliding_window": 1024}))
    assert [x.kind for x in gemma.layers] == (["sliding"] * 5 + ["full"]) * 2
    assert any("period 6" in note for note in gemma.notes)
    pattern = gguf_cache_layout(write_gguf(tmp_path / "p.gguf", "gemma3", {
        "block_count": 3, "attention.head_count": 8, "attention.head_count_kv": 4, "attention.key_length": 256,
        "attention.sliding_window": 512, "attention.sliding_window_pattern": [True, False, True]}))
    assert [x.kind for x in pattern.layers] == ["sliding", "full", "sliding"] and not pattern.notes
    qwen = gguf_cache_layout(write_gguf(tmp_path / "q.gguf", "qwen3next", {
        "block_count": 8, "attention.head_count": 16, "attention.head_count_kv": 2, "attention.key_length": 256,
        "full_attention_interval": 4}))
    assert [x.kind for x in qwen.layers] == (["state"] * 3 + ["full"]) * 2


def test_a_gguf_as_llama_cpp_reads_it(tmp_path: Path) -> None:
    """llama.cpp's reading (src/models/*.cpp): the MTP (nextn) blocks left out, Nemotron-H's MLP layers, Gemma 4's
    sliding head sizes, Llama 4's 8192-token chunks, Falcon-H1's attention beside Mamba2."""
    from posenc_cli.models.gguf.caches import gguf_cache_layout

    mtp = gguf_cache_layout(write_gguf(tmp_path / "m.gguf", "qwen35", {
        "block_count": 5, "nextn_predict_layers": 1, "attention.head_count": 16, "attention.head_count_kv": 4,
        "attention.key_length": 256, "full_attention_interval": 4, "ssm.conv_kernel": 4, "ssm.inner_size": 4096,
        "ssm.state_size": 128, "ssm.group_count": 16, "ssm.time_step_rank": 32}))
    assert [x.kind for x in mtp.layers] == ["state"] * 3 + ["full"] and mtp.nextn_layers == 1
    nemotron = gguf_cache_layout(write_gguf(tmp_path / "n.gguf", "nemotron_h", {
        "block_count": 4, "embedding_length": 1024, "attention.head_count": 8, "attention.head_count_kv": [0, 0, 2, 0],
        "feed_forward_length": [0, 4096, 0, 0], "ssm.conv_kernel": 4, "ssm.inner_size": 2048, "ssm.state_size": 128,
        "ssm.group_count": 8}))
    assert [x.kind for x in nemotron.layers] == ["state", "none", "full", "state"]
    gemma4 = gguf_cache_layout(write_gguf(tmp_path / "g4.gguf", "gemma4", {
        "block_count": 2, "attention.head_count": 16, "attention.head_count_kv": [8, 2], "attention.key_length": 512,
        "attention.value_length": 512, "attention.key_length_swa": 256, "attention.value_length_swa": 256,
        "attention.sliding_window": 1024, "attention.sliding_window_pattern": [True, False]}))
    assert gemma4.layers == [LayerCache("sliding", 8, 256, 256, window=1024), LayerCache("full", 2, 512, 512)]
    llama4 = gguf_cache_layout(write_gguf(tmp_path / "l4.gguf", "llama4", {
        "block_count": 4, "attention.head_count": 40, "attention.head_count_kv": 8, "attention.key_length": 128}))
    assert [(x.kind, x.window) for x in llama4.layers] == [("chunked", 8192)] * 3 + [("full", None)]
    falcon = gguf_cache_layout(write_gguf(tmp_path / "f.gguf", "falcon-h1", {
        "block_count": 2, "attention.head_count": 8, "attention.head_count_kv": 2, "attention.key_length": 64,
        "ssm.conv_kernel": 4, "ssm.inner_size": 1024, "ssm.state_size": 256, "ssm.group_count": 1}))
    assert {(x.kind, x.mixer, x.ssm is not None) for x in falcon.layers} == {("full", "attention+mamba2", True)}


def test_a_bad_gguf_is_one_error(tmp_path: Path) -> None:
    from posenc_cli.models.gguf.caches import gguf_cache_layout

    with pytest.raises(PosencError, match="block_count"):
        gguf_cache_layout(write_gguf(tmp_path / "x.gguf", "llama", {"attention.head_count": 8}))
    with pytest.raises(PosencError, match="3 entries for 4 layers"):
        gguf_cache_layout(write_gguf(tmp_path / "y.gguf", "llama", {
            "block_count": 4, "attention.head_count": 8, "attention.head_count_kv": [1, 2, 3]}))
    (tmp_path / "z.gguf").write_bytes(b"nope")
    with pytest.raises(PosencError, match="GGUF magic"):
        gguf_cache_layout(tmp_path / "z.gguf")


def test_llama_4_scout() -> None:
    """text_config: 48 layers, attention_chunk_size 8192, no_rope_layers absent (Llama 4's interval 4: every fourth
    layer attends globally without RoPE, the others in chunks), num_key_value_heads 8, head_dim 128."""
    layout = corpus("llama-4-scout-17b-16e-instruct")
    assert _kinds(layout) == (["chunked"] * 3 + ["full"]) * 12
    assert {x.window for x in layout.layers if x.kind == "chunked"} == {8192}
    assert {(x.kv_heads, x.k_head_dim) for x in layout.layers} == {(8, 128)}


def test_minicpm3_and_gemma_4() -> None:
    """MiniCPM3-4B: kv_lora_rank 256 + qk_rope_head_dim 32. Gemma 4 26B-A4B: layer_types, sliding_window 1024 on
    8 KV heads of head_dim 256; full attention on num_global_key_value_heads 2 of global_head_dim 512
    (attention_k_eq_v)."""
    minicpm = corpus("minicpm3-4b")
    assert {(x.kind, x.kv_heads, x.k_head_dim, x.v_head_dim) for x in minicpm.layers} == {("mla", 1, 288, 0)}
    gemma = corpus("gemma-4-26b-a4b")
    cfg = json.loads((CORPUS / "gemma-4-26b-a4b.json").read_text(encoding="utf-8"))["text_config"]
    assert _kinds(gemma) == [{"sliding_attention": "sliding", "full_attention": "full"}[t]
                             for t in cfg["layer_types"]]
    assert {(x.kind, x.kv_heads, x.k_head_dim, x.window) for x in gemma.layers} == {
        ("sliding", 8, 256, 1024), ("full", 2, 512, None)}


def test_groups_collect_equal_layers_in_order() -> None:
    layout = corpus("gemma-3-27b-it")
    groups = layout.groups()
    assert [g.cache.kind for g in groups] == ["sliding", "full"]
    assert groups[1].layers == tuple(range(5, 62, 6))
    assert sum(len(g.layers) for g in groups) == 62


def _rule_cases() -> list[tuple[str, str]]:
    from posenc_cli.models import cache_layout as module

    names = ("_CLASS_LAYER_RULES", "_PURE_STATE_SPACE", "_SLIDING_KV_TIMES", "_INDEXER_FLOAT32", "_CACHES_PER_LAYER",
             "_GATED_DELTA_NET", "_KIMI_DELTA", "_MAMBA", "_MAMBA2", "_SHORT_CONV", "_LIGHTNING")
    return [(name, member) for name in names for member in sorted(getattr(module, name))]


@pytest.mark.parametrize(("rule", "member"), _rule_cases())
def test_every_hand_rule_is_needed(rule: str, member: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each entry of the module's per-type tables, taken out, makes some measured case differ: none is dead weight
    (Falcon Mamba shares Mamba's reading and is its own proof)."""
    from posenc_cli.models import cache_layout as module

    table = getattr(module, rule)
    monkeypatch.setattr(module, rule, {k: v for k, v in table.items() if k != member} if isinstance(table, dict)
                        else table - {member})
    assert any(differences(DATA["builds"][key]) for case, key in CASES.items() if case not in MISMATCHES), (
        f"{rule} {member!r} changes nothing")

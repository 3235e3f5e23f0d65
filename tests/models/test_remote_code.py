"""Remote-code families and engine-only position mechanisms (posenc_cli/models/remote_code.py), against vLLM 0.34.0's
own
rotary classes run on CPU (tests/harness/vllm_harness.py; skipped without vLLM).

Each family's config goes through vLLM's own config path (``ModelConfig`` for ChatGLM, whose config class vLLM ships;
transformers' ``PretrainedConfig`` plus vLLM's ``patch_rope_parameters`` for the remote-code config classes), then
``get_rope`` with the arguments the family's model class passes. posenc's numbers come from
``remote_code.engine_frequencies`` / ``DualChunk.position_tables``; nothing here is copied from posenc's output.

Tolerances:

* inv_freq: rtol 1e-6. vLLM computes ``1 / base ** (arange(0, d, 2) / d)`` in float32 with torch's float32 pow;
  posenc computes the power in float64 and rounds once, so the two differ by at most an ulp or two of float32
  (1.2e-7 relative each).
* cos/sin tables: atol ``2e-6 + (rows - 1) * max|inv_freq difference|``. vLLM multiplies float32 positions by its
  inv_freq in float32 and takes torch's float32 cos/sin (within 1e-6 of the exact value); the test takes numpy's
  cos/sin of the same float32 products made with posenc's inv_freq, and ``|cos a - cos b| <= |a - b|`` bounds what an
  inv_freq difference can add at the last row.

Configs: ``tests/corpus/chatglm2-6b.json`` is the shipped THUDM/chatglm2-6b file. No verbatim config.json of
GLM-4, InternLM2, MiniCPM 4, InternVL chat, Qwen v1, Baichuan 2 or Qwen2.5-1M was found in the public index
(SOURCES.json ``_not_found``), so those configs are written here with the keys their model code reads, values as
the model cards publish them.
"""

from __future__ import annotations

import ast
import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clihelpers import run

from posenc_cli.errors import PosencError
from posenc_cli.models import remote_code
from posenc_cli.models.inspection import report
from posenc_cli.models.model_positions import describe

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
CHATGLM2 = json.loads((CORPUS / "chatglm2-6b.json").read_text(encoding="utf-8"))
INV_RTOL = 1e-6

# written for the tests (see the module docstring): the keys each model class reads
GLM4_CHAT = {  # THUDM/glm-4-9b-chat: rope_ratio 500, 131072 positions, original_rope true
    "model_type": "chatglm", "architectures": ["ChatGLMModel"], "hidden_size": 4096, "num_attention_heads": 32,
    "num_layers": 40, "kv_channels": 128, "multi_query_attention": True, "multi_query_group_num": 2,
    "padded_vocab_size": 151552, "ffn_hidden_size": 13696, "seq_length": 131072, "rope_ratio": 500,
    "original_rope": True,
}
CHATGLM_NEOX = {**GLM4_CHAT, "original_rope": False, "seq_length": 8192}  # cogagent-style: half-split pairs
INTERNLM2 = {  # internlm/internlm2-chat-1_8b
    "model_type": "internlm2", "architectures": ["InternLM2ForCausalLM"], "hidden_size": 2048,
    "num_attention_heads": 16, "num_key_value_heads": 8, "num_hidden_layers": 24, "max_position_embeddings": 32768,
    "rope_scaling": {"type": "dynamic", "factor": 2.0}, "rope_theta": 1000000,
}
MINICPM4 = {  # openbmb/MiniCPM4-8B shape: longrope in rope_scaling (factors written here: 64 per head of 128)
    "model_type": "minicpm", "architectures": ["MiniCPMForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 2, "num_hidden_layers": 32, "max_position_embeddings": 32768, "rope_theta": 10000.0,
    "rope_scaling": {"rope_type": "longrope", "original_max_position_embeddings": 32768,
                     "short_factor": [1.0 + 0.01 * i for i in range(64)],
                     "long_factor": [1.0 + 0.5 * i for i in range(64)]},
}
MINICPM4_LONG = {**MINICPM4, "max_position_embeddings": 65536}  # serves past the original length: long factors
INTERNVL_CHAT = {  # OpenGVLab/InternVL2-8B shape: the language model in llm_config
    "model_type": "internvl_chat", "architectures": ["InternVLChatModel"],
    "llm_config": {**INTERNLM2, "hidden_size": 4096, "num_attention_heads": 32, "rope_scaling": {"type": "dynamic",
                                                                                                "factor": 3.0}},
}
INTERNVL_CHAT_QWEN2 = {  # OpenGVLab/InternVL2_5-8B-MPO-style: a Qwen2 language model in llm_config
    "model_type": "internvl_chat", "architectures": ["InternVLChatModel"],
    "llm_config": {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584,
                   "num_attention_heads": 28, "num_key_value_heads": 4, "num_hidden_layers": 2,
                   "intermediate_size": 18944, "vocab_size": 1024, "max_position_embeddings": 32768,
                   "rope_theta": 1000000.0},
}
QWEN_V1 = {  # Qwen/Qwen-7B-Chat
    "model_type": "qwen", "architectures": ["QWenLMHeadModel"], "hidden_size": 4096, "num_attention_heads": 32,
    "num_hidden_layers": 32, "kv_channels": 128, "max_position_embeddings": 8192, "seq_length": 8192,
    "rotary_emb_base": 10000, "rotary_pct": 1.0, "use_dynamic_ntk": True, "use_logn_attn": True,
}
BAICHUAN2_7B = {"model_type": "baichuan", "architectures": ["BaichuanForCausalLM"], "hidden_size": 4096,
                "num_attention_heads": 32, "num_hidden_layers": 32, "max_position_embeddings": 4096}
BAICHUAN2_13B = {**BAICHUAN2_7B, "hidden_size": 5120, "num_attention_heads": 40, "num_hidden_layers": 40}
HUNYUAN_7B = {  # tencent/Hunyuan-7B-Instruct shape: "dynamic" rope_scaling with alpha (transformers' own class)
    "model_type": "hunyuan_v1_dense", "architectures": ["HunYuanDenseV1ForCausalLM"], "hidden_size": 4096,
    "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "head_dim": 128,
    "max_position_embeddings": 262144, "rope_theta": 10000.0,
    "rope_scaling": {"alpha": 1000.0, "beta_fast": 32, "beta_slow": 1, "factor": 1.0, "mscale": 1.0,
                     "mscale_all_dim": 1.0, "type": "dynamic"},
}
QWEN25_1M = {  # Qwen/Qwen2.5-7B-Instruct-1M (two layers and a small vocab: the rope does not depend on them)
    "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "num_attention_heads": 28,
    "num_key_value_heads": 4, "num_hidden_layers": 2, "intermediate_size": 18944, "vocab_size": 1024,
    "max_position_embeddings": 1010000, "rope_theta": 10000000.0,
    "dual_chunk_attention_config": {"chunk_size": 262144, "local_size": 8192,
                                    "original_max_position_embeddings": 262144},
}

VLLM_FAMILIES = {"chatglm2-6b": CHATGLM2, "glm-4-9b-chat": GLM4_CHAT, "chatglm-original-rope-false": CHATGLM_NEOX,
                 "internlm2-chat-1.8b": INTERNLM2, "minicpm4": MINICPM4, "minicpm4-long": MINICPM4_LONG,
                 "internvl-chat-internlm2": INTERNVL_CHAT, "internvl-chat-qwen2": INTERNVL_CHAT_QWEN2}
SGLANG_FAMILIES = {"qwen-7b-chat": QWEN_V1, "baichuan2-7b": BAICHUAN2_7B}


# --- the reading, without any engine ------------------------------------------------------------------------------


def test_the_registry_is_keyed_by_model_type_and_architecture() -> None:
    assert set(remote_code.FAMILIES) >= {"chatglm", "internlm2", "minicpm", "internvl_chat", "qwen", "baichuan",
                                         "llava_llama", "vila"}
    assert remote_code.family_of({"architectures": ["ChatGLMForConditionalGeneration"]}) == "chatglm"
    assert remote_code.family_of({"model_type": "qwen2"}) is None
    assert remote_code.read({"model_type": "llama", "hidden_size": 64}) is None


def test_chatglm2_reads_as_vllm_chatglm_py() -> None:
    model = describe(CHATGLM2)
    r = model.engine
    assert r is not None and r.family == "chatglm" and r.remote_code and r.served
    assert r.source.endswith("models/chatglm.py") and r.engine == "vLLM 0.34.0"
    assert not r.is_neox_style  # original_rope true: interleaved pairs
    layer = model.layers[0]
    assert layer.params == {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
    out = report(model)
    assert out["rotary_dim"] == 64 and out["head_dim"] == 128 and out["native_window"] == 32768
    assert "chatglm.py" in out["numbers_from"]
    assert out["engine_reading"]["transformers_needs_remote_code"] is True


def test_inspect_says_remote_code_and_whose_numbers() -> None:
    result = run("inspect", str(CORPUS / "chatglm2-6b.json"))
    assert result.exit_code == 0, result.output
    assert "transformers: needs trust_remote_code for chatglm" in result.output
    assert "numbers from: vLLM 0.34.0's vllm/model_executor/models/chatglm.py" in result.output
    assert "interleaved pairs (is_neox_style=False" in result.output


def test_check_compares_nothing_for_remote_code() -> None:
    result = run("check", str(CORPUS / "chatglm2-6b.json"), "--json")
    assert result.exit_code == 3, result.output  # nothing was compared
    data = json.loads(result.output)
    assert data["passed"] is False and data["transformers"] is None and data["no_reference"]
    assert {e["verdict"] for e in data["engines"]} == {"not modelled"}
    assert "same" not in data["summary"].split(":")[0]


def test_qwen_v1_and_baichuan_are_not_served_by_vllm_033() -> None:
    qwen = describe(QWEN_V1)
    assert qwen.engine is not None and qwen.engine.engine == "SGLang 0.5.23"
    assert "vllm" in qwen.engine.refusal
    assert {"rotary_emb_base", "rotary_pct", "use_dynamic_ntk", "use_logn_attn"} <= set(qwen.engine.ignored)
    result = run("check", "-", "--engines", "vllm", "--json", input=json.dumps(QWEN_V1))
    assert result.exit_code == 1 and json.loads(result.output)["engines"][0]["verdict"] == "will not start"
    b13 = describe(BAICHUAN2_13B)
    assert b13.family == "alibi" and not b13.layers and b13.num_heads == 40


def test_llava_llama_and_vila_name_the_family_without_numbers() -> None:
    model = describe({"model_type": "llava_llama", "architectures": ["LlavaLlamaForCausalLM"], "hidden_size": 4096,
                      "num_attention_heads": 32, "max_position_embeddings": 4096})
    assert model.family == "unknown" and model.engine is not None and not model.engine.served
    assert any("neither" in n for n in model.notes)


def test_dual_chunk_is_not_read_as_plain_rope_over_the_window() -> None:
    model = describe(QWEN25_1M)
    r = model.engine
    assert r is not None and r.dual_chunk is not None and not r.remote_code
    assert r.dual_chunk.chunk_len == 262144 - 8192
    result = run("inspect", "-", input=json.dumps(QWEN25_1M))
    assert result.exit_code == 0, result.output
    assert "dual chunk rope: chunk_len 253,952" in result.output
    assert "vllm will not serve it as configured" in result.output
    checked = json.loads(run("check", "-", "--json", input=json.dumps(QWEN25_1M)).output)
    verdicts = {e["engine"]: e["verdict"] for e in checked["engines"]}
    assert verdicts["vllm"] == "will not start" and verdicts["sglang"] == "not modelled"


def test_scale_does_not_claim_what_the_model_code_ignores() -> None:
    """ChatGLM's rope never reads rope_scaling (vLLM's chatglm.py builds it from rope_ratio): scaling is refused;
    InternLM2's is read by vLLM's internlm2.py, and the output says transformers' side was not compared."""
    refused = run("scale", "yarn", "--config", str(CORPUS / "chatglm2-6b.json"), "--target", "128k")
    assert refused.exit_code == 2 and "never reads rope_scaling" in refused.output
    scaled = run("scale", "yarn", "--config", "-", "--target", "128k", input=json.dumps(INTERNLM2))
    assert scaled.exit_code == 0, scaled.output
    assert "internlm2 is remote code" in scaled.stderr and "not compared" in scaled.stderr


def test_hunyuan_alpha_is_transformers_ntk_alpha() -> None:
    """transformers 5.25's HunYuanDenseV1RotaryEmbedding turns "dynamic" + alpha into ntk_alpha (a static base)."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.hunyuan_v1_dense import modeling_hunyuan_v1_dense as hy

    model = describe(HUNYUAN_7B)
    assert model.engine is not None and not model.engine.remote_code
    config = transformers.HunYuanDenseV1Config(**{k: v for k, v in copy.deepcopy(HUNYUAN_7B).items()
                                                  if k != "model_type"})
    rotary = hy.HunYuanDenseV1RotaryEmbedding(config)
    assert rotary.rope_type == "ntk_alpha"
    ours = report(model)
    np.testing.assert_allclose(ours["inv_freq"], rotary.inv_freq.double().numpy(), rtol=INV_RTOL, atol=0)
    assert describe({**HUNYUAN_7B, "rope_scaling": None}).engine is None  # no alpha: transformers' generic rules
    checked = json.loads(run("check", "-", "--json", "--engines", "vllm,sglang,llama.cpp,ollama,lmstudio",
                             input=json.dumps(HUNYUAN_7B)).output)
    verdicts = {e["engine"]: e["verdict"] for e in checked["engines"]}
    assert verdicts == {"vllm": "same", "sglang": "same", "llama.cpp": "not modelled", "ollama": "not modelled",
                        "lmstudio": "not modelled"}  # the two serve GGUFs through llama.cpp


def test_v5_keys_are_refused_for_remote_code() -> None:
    """The remote config classes take rope_scaling (transformers 4): a v5 rope_parameters file would drop it there."""
    refused = run("convert", "-", "--to", "v5", input=json.dumps(INTERNLM2))
    assert refused.exit_code == 2 and "written for transformers 4" in refused.output
    assert run("convert", "-", "--to", "v4", input=json.dumps(INTERNLM2)).exit_code == 0


def test_a_bad_dual_chunk_config_is_a_user_error() -> None:
    bad = copy.deepcopy(QWEN25_1M)
    bad["dual_chunk_attention_config"]["local_size"] = 300000
    with pytest.raises(PosencError, match="local_size < chunk_size"):
        describe(bad)


# --- against vLLM 0.34.0's own code ----------------------------------------------------------------------------------

vllm_harness = pytest.importorskip("vllm_harness")
torch = pytest.importorskip("torch")
needs_vllm = pytest.mark.skipif(not vllm_harness.vllm_available(), reason="vLLM 0.34.0 is not installed")


def _cos_sin_close(cos: Any, sin: Any, positions: np.ndarray, inv: np.ndarray, magnitude: float,
                   inv_diff: float, what: str) -> None:
    angles = np.outer(positions.astype(np.float32), inv.astype(np.float32)).astype(np.float32)
    atol = 2e-6 + float(positions.max(initial=0)) * inv_diff
    np.testing.assert_allclose(cos.double().numpy(), np.cos(angles.astype(np.float64)) * magnitude, rtol=0,
                               atol=atol, err_msg=f"{what} cos")
    np.testing.assert_allclose(sin.double().numpy(), np.sin(angles.astype(np.float64)) * magnitude, rtol=0,
                               atol=atol, err_msg=f"{what} sin")


@needs_vllm
@pytest.mark.parametrize("name", list(VLLM_FAMILIES))
def test_family_matches_vllm(name: str) -> None:
    cfg = VLLM_FAMILIES[name]
    model = describe(cfg)
    r = model.engine
    assert r is not None and r.engine == "vLLM 0.34.0"
    max_model_len = r.max_position
    cos, sin, extra = vllm_harness.vllm_family_rope(cfg, max_model_len=max_model_len)
    call = extra["call"]
    assert (call["head_size"], call["max_position"], call["is_neox_style"]) == (
        r.head_dim, r.max_position, r.is_neox_style)
    assert extra["cls"] == r.rope_class
    assert extra["rotary_dim"] == remote_code.spec(r).rotary_dim
    ours = remote_code.engine_frequencies(r, model.layers[0].params, max_model_len)
    theirs = extra["engine_inv_freq"].double().numpy()
    np.testing.assert_allclose(ours.inv_freq, theirs, rtol=INV_RTOL, atol=0)
    assert ours.attention_factor == pytest.approx(extra["mscale"], rel=1e-6)
    diff = float(np.abs(ours.inv_freq.astype(np.float64) - theirs).max())
    _cos_sin_close(cos, sin, np.arange(cos.shape[0]), ours.inv_freq, ours.attention_factor, diff, name)


@needs_vllm
@pytest.mark.parametrize("name", ["chatglm2-6b", "chatglm-original-rope-false"])
def test_chatglm_rotation_layout_matches_vllms_forward(name: str) -> None:
    """q and k rotated by vLLM's own forward (forward_native: interleaved pairs when original_rope is true, over the
    first half of each head) equal posenc's apply_rope with the reading's layout and inv_freq. Tolerance atol 5e-5:
    both rotate float32 values of magnitude <= ~5 with float32 cos/sin that differ by ~1e-6 (see the docstring)."""
    from posenc_cli.rope.encodings import apply_rope

    cfg = VLLM_FAMILIES[name]
    model = describe(cfg)
    r = model.engine
    assert r is not None
    _, _, extra = vllm_harness.vllm_family_rope(cfg, max_model_len=r.max_position)
    generator = torch.Generator().manual_seed(0)
    head = int(r.head_dim or 0)
    positions = torch.tensor([0, 1, 2, 7, 100, 1000, 4095])
    q = torch.randn(len(positions), 2, head, generator=generator)
    k = torch.randn(len(positions), 1, head, generator=generator)
    q_out, k_out = vllm_harness.vllm_apply_rope(extra, positions, q, k)
    inv = remote_code.engine_frequencies(r, model.layers[0].params).inv_freq
    for ours_in, theirs in ((q, q_out), (k, k_out)):
        x = ours_in.numpy().transpose(1, 0, 2)  # (heads, seq, dim)
        rotated = apply_rope(x, positions.numpy(), inv_freq=inv, layout=r.pair_layout)  # type: ignore[arg-type]
        np.testing.assert_allclose(rotated.transpose(1, 0, 2), theirs.numpy(), rtol=0, atol=5e-5)
        other = "rotate-half" if r.pair_layout == "interleaved" else "interleaved"
        wrong = apply_rope(x, positions.numpy(), inv_freq=inv, layout=other)  # type: ignore[arg-type]
        assert np.abs(wrong.transpose(1, 0, 2) - theirs.numpy()).max() > 1e-2  # the layout is what decides


@needs_vllm
@pytest.mark.parametrize("name", list(SGLANG_FAMILIES))
def test_sglang_families_match_vllms_rotary_class(name: str) -> None:
    """Qwen v1 and Baichuan 2 7B: vLLM 0.34.0 has no model class any more; SGLang 0.5.23's (qwen.py:124-130,
    baichuan.py:197-203) calls its get_rope with the whole head, rope_theta (default 10000) and
    max_position_embeddings. SGLang's plain RotaryEmbedding is a fork of vLLM's, so vLLM's class is run with those
    arguments."""
    cfg = SGLANG_FAMILIES[name]
    r = describe(cfg).engine
    assert r is not None and r.engine == "SGLang 0.5.23" and r.rope is not None
    assert r.rope == {"rope_type": "default", "rope_theta": float(cfg.get("rope_theta", 10000))}
    with vllm_harness.capture_inv_freq() as seen:
        cos, sin, extra = vllm_harness.vllm_rope({"rope_theta": cfg.get("rope_theta", 10000)},
                                                 head_dim=cfg["hidden_size"] // cfg["num_attention_heads"],
                                                 rotary_dim=cfg["hidden_size"] // cfg["num_attention_heads"],
                                                 max_position=cfg["max_position_embeddings"])
    ours = remote_code.engine_frequencies(r)
    np.testing.assert_allclose(ours.inv_freq, seen[-1].double().numpy(), rtol=INV_RTOL, atol=0)
    assert cos.shape[0] == r.max_position
    diff = float(np.abs(ours.inv_freq.astype(np.float64) - seen[-1].double().numpy()).max())
    _cos_sin_close(cos, sin, np.arange(cos.shape[0]), ours.inv_freq, 1.0, diff, name)


@needs_vllm
def test_hunyuan_alpha_matches_vllms_dynamic_ntk_alpha_class() -> None:
    """vLLM's get_rope builds DynamicNTKAlphaRotaryEmbedding for a "dynamic" dict with alpha (rotary_embedding/
    __init__.py:212-223): the same base."""
    r = describe(HUNYUAN_7B).engine
    assert r is not None
    params = {"rope_type": "dynamic", "alpha": 1000.0, "rope_theta": 10000.0}
    with vllm_harness.capture_inv_freq() as seen:
        cos, sin, extra = vllm_harness.vllm_rope(params, head_dim=128, rotary_dim=128, max_position=4096)
    assert extra["cls"] == "DynamicNTKAlphaRotaryEmbedding"
    ours = remote_code.engine_frequencies(r)
    theirs = seen[-1].double().numpy()
    np.testing.assert_allclose(ours.inv_freq, theirs, rtol=INV_RTOL, atol=0)
    diff = float(np.abs(ours.inv_freq.astype(np.float64) - theirs).max())
    _cos_sin_close(cos, sin, np.arange(cos.shape[0]), ours.inv_freq, 1.0, diff, "hunyuan")


@needs_vllm
def test_dual_chunk_tables_match_vllm() -> None:
    """DualChunkRotaryEmbedding's five cos/sin tables are cos/sin of posenc's position tables times its inv_freq."""
    model = describe(QWEN25_1M)
    r = model.engine
    assert r is not None and r.dual_chunk is not None
    built = vllm_harness.vllm_dual_chunk_rope(QWEN25_1M)
    assert built["cls"] == r.rope_class == "DualChunkRotaryEmbedding"
    assert built["head_size"] == r.head_dim and built["module"].rotary_dim == remote_code.spec(r).rotary_dim
    assert (built["module"].chunk_size, built["module"].local_size) == (r.dual_chunk.chunk_size,
                                                                        r.dual_chunk.local_size)
    ours = remote_code.engine_frequencies(r)
    theirs = built["inv_freq"].double().numpy()
    np.testing.assert_allclose(ours.inv_freq, theirs, rtol=INV_RTOL, atol=0)
    diff = float(np.abs(ours.inv_freq.astype(np.float64) - theirs).max())
    positions = r.dual_chunk.position_tables(int(r.max_position or 0))
    assert set(positions) == set(built["tables"])
    for name, table in built["tables"].items():
        cos, sin = table.chunk(2, dim=-1)
        assert cos.shape[0] == positions[name].shape[0], name
        _cos_sin_close(cos, sin, positions[name], ours.inv_freq, 1.0, diff, name)
    # no key is rotated past chunk_len, no query past chunk_len - 1 + chunk_size
    assert positions["k"].max() == r.dual_chunk.chunk_len - 1
    assert max(p.max() for p in positions.values()) == remote_code.engine_section(r)["dual_chunk"][
        "largest_rotated_position"]


@needs_vllm
def test_vllm_has_no_dual_chunk_attention_backend() -> None:
    """qwen2.py hands layer_idx and dual_chunk_attention_config to Attention, which passes them on to the backend's
    implementation class (``**extra_impl_args``); the dense implementations' __init__ take neither and no **kwargs."""
    qwen2 = vllm_harness.vllm_source("model_executor/models/qwen2.py")
    assert '"dual_chunk_attention_config": dual_chunk_attention_config' in qwen2
    attention = vllm_harness.vllm_source("model_executor/layers/attention/attention.py")
    assert "**extra_impl_args" in attention
    for path, cls in [("v1/attention/backends/flash_attn.py", "FlashAttentionImpl"),
                      ("v1/attention/backends/flashinfer.py", "FlashInferImpl"),
                      ("v1/attention/backends/triton_attn.py", "TritonAttentionImpl"),
                      ("v1/attention/backends/cpu_attn.py", "CPUAttentionBackendImpl")]:
        tree = ast.parse(vllm_harness.vllm_source(path))
        init = next(f for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name == cls
                    for f in c.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
        names = {a.arg for a in init.args.args + init.args.kwonlyargs}
        assert init.args.kwarg is None and not {"layer_idx", "dual_chunk_attention_config"} & names, cls


@needs_vllm
def test_vllm_registry_serves_what_posenc_says() -> None:
    registry = vllm_harness.vllm_source("model_executor/models/registry.py")
    tree = ast.parse(registry)
    tables: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(target, ast.Name):
                tables[target.id] = {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    served = set().union(*(v for k, v in tables.items() if k != "_PREVIOUSLY_SUPPORTED_MODELS"))
    for arch in ("ChatGLMModel", "InternLM2ForCausalLM", "MiniCPMForCausalLM", "InternVLChatModel"):
        assert arch in served, arch
    for arch in ("QWenLMHeadModel", "BaichuanForCausalLM"):
        assert arch not in served and arch in tables["_PREVIOUSLY_SUPPORTED_MODELS"], arch
    for arch in ("LlavaLlamaForCausalLM", "LlavaLlamaModel"):
        assert arch not in served, arch
    for arch, family in remote_code._ARCHITECTURES.items():
        if arch.startswith("HunYuan"):  # served through vLLM's Transformers backend: see the HunYuan tests
            assert arch in served
            continue
        served_by_vllm = describe({"architectures": [arch], "hidden_size": 4096, "num_attention_heads": 32,
                                   "max_position_embeddings": 4096, "original_rope": True,
                                   "llm_config": {"architectures": ["InternLM2ForCausalLM"], "hidden_size": 64,
                                                  "num_attention_heads": 2}}).engine
        assert served_by_vllm is not None and served_by_vllm.family == family
        assert ("vllm" not in served_by_vllm.refusal) == (arch in served), arch


def test_deepseek_v2_text_with_mla_off_is_plain_multi_head_attention() -> None:
    """DeepSeek-VL2's language_config says ``use_mla: false``: its remote code (and vLLM, whose DeepseekV2 builds
    DeepseekAttention when kv_lora_rank is None) rotates all hidden_size / heads dims with no MLA softmax scale; the
    same text with MLA on keeps transformers' qk_rope_head_dim."""
    cfg = json.loads((CORPUS / "deepseek-vl2-tiny.json").read_text(encoding="utf-8"))
    text = cfg["language_config"]
    plain = describe(cfg)
    assert plain.head_dim == text["hidden_size"] // text["num_attention_heads"] == 128
    assert plain.softmax_scale == 1.0
    mla = describe({**cfg, "language_config": {**text, "use_mla": True, "qk_rope_head_dim": 64,
                                               "rope_scaling": {"type": "yarn", "factor": 4.0, "mscale_all_dim": 1.0,
                                                                "original_max_position_embeddings": 4096}}})
    assert mla.head_dim == 64 and mla.softmax_scale > 1.0


def test_the_readings_name_the_engine_versions_the_engine_modules_pin() -> None:
    """remote_code (a lower stage than the engines) names the versions its readings are proven against: the same
    as posenc_cli/engines/vllm.py and sglang.py."""
    from posenc_cli.engines import sglang, vllm
    from posenc_cli.models import remote_code

    assert (remote_code.VLLM, remote_code.SGLANG) == (f"vLLM {vllm.VERSION}", f"SGLang {sglang.VERSION}")

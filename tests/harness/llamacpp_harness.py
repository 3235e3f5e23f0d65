"""Run the real llama.cpp (through llama-cpp-python) and transformers' ``LlamaForCausalLM`` on the same tiny weights.

A plain helper module for the tests, imported as ``from llamacpp_harness import ...`` (like ``clihelpers``):

* :func:`write_tiny_llama_gguf` draws a random tiny llama (float32) and writes it as a GGUF file laid out the way
  ``convert_hf_to_gguf.py`` writes a Hugging Face llama: same tensor names, same metadata keys, and attn_q / attn_k
  rows permuted as ``LlamaModel.permute`` does. llama.cpp's llama architecture rotates interleaved pairs
  (``x[2i], x[2i+1]``, ggml's NORM rope) while transformers rotates halves (``x[i], x[i + d/2]``); the permutation
  turns one into the other, so both programs compute the same function of the same weights. It returns the weights
  un-permuted, under transformers' names.
* :func:`llamacpp_logits` evaluates token ids (no text, no tokenizer) in llama.cpp and returns every position's
  logits; RoPE settings go in as ``llama_cpp.Llama`` keyword arguments (``rope_freq_base``, ``rope_scaling_type``,
  ``yarn_orig_ctx``, ``kv_overrides``, ...).
* :func:`hf_logits` builds a ``LlamaConfig`` (float32, eager attention) for those weights, applies
  ``hf_config_overrides`` (for example ``rope_parameters``) and returns the logits for the same tokens.

The GGUF carries a ``no_vocab`` tokenizer with ``llama.vocab_size`` dummy tokens: llama.cpp loads it, and since
the harness feeds token ids directly no tokenizer is needed. The KV cache is float32 (llama.cpp's default is
float16), so the only differences left are float32 rounding and summation order.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

ARCH = "llama"
RMS_EPS = 1e-5

#: ``rope_scaling_type`` values of ``enum llama_rope_scaling_type`` (include/llama.h).
ROPE_SCALING_NONE = 0
ROPE_SCALING_LINEAR = 1
ROPE_SCALING_YARN = 2
#: ``enum ggml_type`` value for float32, for ``type_k`` / ``type_v``.
GGML_TYPE_F32 = 0


def permute(weights: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """``LlamaModel.permute`` of llama.cpp's ``conversion/llama.py``: rows of each head from halves to pairs."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2)
            .reshape(weights.shape))


def tiny_llama_weights(*, n_layer: int, n_embd: int, n_head: int, n_head_kv: int, n_ff: int, n_vocab: int,
                       seed: int) -> dict[str, np.ndarray]:
    """Random float32 weights under transformers' ``LlamaForCausalLM`` names (``nn.Linear`` layout: out x in).

    Scales: embeddings and the head are unit-ish; q and k are large enough (about 5 per entry) that attention is
    sharp and depends on relative position, so a different RoPE shows in the logits; norms are 1 plus noise so
    they are not a no-op.
    """
    rng = np.random.default_rng(seed)
    head_dim = n_embd // n_head

    def mat(rows: int, cols: int, scale: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    def norm() -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n_embd)).astype(np.float32)

    w: dict[str, np.ndarray] = {"model.embed_tokens.weight": mat(n_vocab, n_embd, 1.0)}
    for i in range(n_layer):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm()
        w[p + "self_attn.q_proj.weight"] = mat(n_head * head_dim, n_embd, 0.6)
        w[p + "self_attn.k_proj.weight"] = mat(n_head_kv * head_dim, n_embd, 0.6)
        w[p + "self_attn.v_proj.weight"] = mat(n_head_kv * head_dim, n_embd, 1 / math.sqrt(n_embd))
        w[p + "self_attn.o_proj.weight"] = mat(n_embd, n_head * head_dim, 1 / math.sqrt(n_head * head_dim))
        w[p + "post_attention_layernorm.weight"] = norm()
        w[p + "mlp.gate_proj.weight"] = mat(n_ff, n_embd, 1 / math.sqrt(n_embd))
        w[p + "mlp.up_proj.weight"] = mat(n_ff, n_embd, 1 / math.sqrt(n_embd))
        w[p + "mlp.down_proj.weight"] = mat(n_embd, n_ff, 1 / math.sqrt(n_ff))
    w["model.norm.weight"] = norm()
    w["lm_head.weight"] = mat(n_vocab, n_embd, 1.0)
    return w


def _add_scaling_key(writer: Any, key: str, value: Any) -> None:
    name = f"{ARCH}.rope.scaling.{key}"
    if isinstance(value, bool):
        writer.add_bool(name, value)
    elif isinstance(value, int):
        writer.add_uint32(name, value)
    elif isinstance(value, float):
        writer.add_float32(name, value)
    elif isinstance(value, str):
        writer.add_string(name, value)
    else:
        raise TypeError(f"rope.scaling.{key}: {type(value).__name__} is not bool, int, float or str")


def write_tiny_llama_gguf(path: str | Path, *, n_layer: int = 2, n_embd: int = 64, n_head: int = 4,
                          n_head_kv: int = 2, n_ff: int = 128, n_vocab: int = 128, ctx_train: int = 256,
                          rope_freq_base: float = 10000.0, seed: int = 0, scaling: dict[str, Any] | None = None,
                          rope_freqs: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Write a random float32 llama GGUF to ``path``; returns its weights, un-permuted, under transformers' names.

    ``scaling`` holds ``llama.rope.scaling.*`` keys without the prefix, e.g. ``{"type": "yarn", "factor": 4.0,
    "original_context_length": 256, "attn_factor": 0.88}`` (str, float32, uint32 or bool by the Python type).
    ``rope_freqs`` (``head_dim / 2`` values) becomes the ``rope_freqs.weight`` tensor: llama.cpp divides each
    frequency's angle by it (Llama 3's rope factors).
    """
    import gguf

    weights = tiny_llama_weights(n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, n_ff=n_ff,
                                 n_vocab=n_vocab, seed=seed)
    head_dim = n_embd // n_head
    writer = gguf.GGUFWriter(str(path), ARCH)
    writer.add_name("posenc tiny llama")
    writer.add_context_length(ctx_train)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(rope_freq_base)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    for key, value in (scaling or {}).items():
        _add_scaling_key(writer, key, value)
    writer.add_tokenizer_model("no_vocab")

    # numpy (rows, cols) is ggml {cols, rows}: an HF Linear weight (out, in) is the {in, out} llama.cpp expects
    tensors: dict[str, np.ndarray] = {
        "token_embd.weight": weights["model.embed_tokens.weight"],
    }
    if rope_freqs is not None:
        factors = np.ascontiguousarray(rope_freqs, dtype=np.float32)
        if factors.shape != (head_dim // 2,):
            raise ValueError(f"rope_freqs: shape {factors.shape}, expected ({head_dim // 2},)")
        tensors["rope_freqs.weight"] = factors
    for i in range(n_layer):
        p = f"model.layers.{i}."
        tensors |= {
            f"blk.{i}.attn_norm.weight": weights[p + "input_layernorm.weight"],
            f"blk.{i}.attn_q.weight": permute(weights[p + "self_attn.q_proj.weight"], n_head, n_head),
            f"blk.{i}.attn_k.weight": permute(weights[p + "self_attn.k_proj.weight"], n_head, n_head_kv),
            f"blk.{i}.attn_v.weight": weights[p + "self_attn.v_proj.weight"],
            f"blk.{i}.attn_output.weight": weights[p + "self_attn.o_proj.weight"],
            f"blk.{i}.ffn_norm.weight": weights[p + "post_attention_layernorm.weight"],
            f"blk.{i}.ffn_gate.weight": weights[p + "mlp.gate_proj.weight"],
            f"blk.{i}.ffn_up.weight": weights[p + "mlp.up_proj.weight"],
            f"blk.{i}.ffn_down.weight": weights[p + "mlp.down_proj.weight"],
        }
    tensors["output_norm.weight"] = weights["model.norm.weight"]
    tensors["output.weight"] = weights["lm_head.weight"]
    for name, data in tensors.items():
        writer.add_tensor(name, np.ascontiguousarray(data, dtype=np.float32))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return weights


def llamacpp_logits(gguf_path: str | Path, tokens: np.ndarray | list[int], *, n_ctx: int,
                    **llama_kwargs: Any) -> np.ndarray:
    """Logits (``len(tokens)`` x ``n_vocab``, float32) of llama.cpp evaluating ``tokens`` from position 0.

    ``llama_kwargs`` go to ``llama_cpp.Llama`` (``rope_freq_base``, ``rope_freq_scale``, ``rope_scaling_type``,
    ``yarn_orig_ctx``, ``yarn_ext_factor``, ``yarn_attn_factor``, ``yarn_beta_fast``, ``yarn_beta_slow``,
    ``kv_overrides``, ``type_k``, ...); the defaults here are one thread, no flash attention, a float32 KV cache and
    one batch for the whole sequence.
    """
    import llama_cpp

    ids = [int(t) for t in tokens]
    if len(ids) > n_ctx:
        raise ValueError(f"{len(ids)} tokens do not fit n_ctx={n_ctx}")
    kwargs: dict[str, Any] = {"n_threads": 1, "n_threads_batch": 1, "n_batch": n_ctx, "n_ubatch": n_ctx,
                              "flash_attn": False, "type_k": GGML_TYPE_F32, "type_v": GGML_TYPE_F32,
                              "seed": 0, "verbose": False}
    kwargs.update(llama_kwargs)
    llm = llama_cpp.Llama(model_path=str(gguf_path), n_ctx=n_ctx, logits_all=True, **kwargs)
    try:
        llm.eval(ids)
        return np.array(llm.scores[: len(ids)], dtype=np.float32, copy=True)
    finally:
        llm.close()


def hf_logits(weights: dict[str, np.ndarray], tokens: np.ndarray | list[int], *,
              hf_config_overrides: dict[str, Any] | None = None) -> np.ndarray:
    """Logits (``len(tokens)`` x ``n_vocab``, float32) of transformers' ``LlamaForCausalLM`` on ``weights``.

    The config is read off the weight shapes (head count from the caller via ``hf_config_overrides`` if it is not
    the harness default 4 / 2), with ``rope_parameters`` ``{"rope_type": "default", "rope_theta": 10000.0}`` and
    ``max_position_embeddings`` 256 unless overridden.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    n_vocab, n_embd = weights["model.embed_tokens.weight"].shape
    n_layer = sum(1 for k in weights if k.endswith("input_layernorm.weight"))
    n_ff = weights["model.layers.0.mlp.gate_proj.weight"].shape[0]
    settings: dict[str, Any] = {
        "vocab_size": int(n_vocab), "hidden_size": int(n_embd), "intermediate_size": int(n_ff),
        "num_hidden_layers": n_layer, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 256, "rms_norm_eps": RMS_EPS, "hidden_act": "silu",
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
    }
    settings.update(hf_config_overrides or {})
    config = LlamaConfig(**settings)
    config._attn_implementation = "eager"
    with torch.device("cpu"):
        model = LlamaForCausalLM(config).to(torch.float32).eval()
    state = {name: torch.from_numpy(np.ascontiguousarray(array)) for name, array in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [m for m in missing if "rotary_emb" not in m]:
        raise ValueError(f"weights do not fit the config: missing {missing}, unexpected {unexpected}")
    ids = torch.tensor([[int(t) for t in tokens]], dtype=torch.long)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=False)
    return out.logits[0].to(torch.float32).numpy().copy()


#: llama-server's ``--rope-scaling`` names as ``rope_scaling_type`` values
SCALING = {"none": ROPE_SCALING_NONE, "linear": ROPE_SCALING_LINEAR, "yarn": ROPE_SCALING_YARN}
#: llama-server flags that carry no RoPE setting (the binary, the model path given to -m)
_IGNORED = ("llama-server",)


def server_flags_as_kwargs(argv: list[str], arch: str = ARCH) -> dict[str, Any]:
    """llama-server's flags as ``llama_cpp.Llama`` context parameters (common/arg.cpp), no RoPE arithmetic:
    ``--rope-scale N`` is ``rope_freq_scale = 1/N``, ``--override-kv ARCH.key=float:v`` a float override of
    ``<arch>.key`` (``int:`` an integer one). A flag posenc prints that is not mapped here fails the test."""
    out: dict[str, Any] = {"kv_overrides": {}}
    it = iter(argv)
    for flag in it:
        if flag in _IGNORED:
            continue
        value = next(it)
        if flag == "-m":
            continue
        if flag == "--rope-scaling":
            out["rope_scaling_type"] = SCALING[value]
        elif flag == "--rope-scale":
            out["rope_freq_scale"] = 1.0 / float(value)
        elif flag == "--rope-freq-base":
            out["rope_freq_base"] = float(value)
        elif flag == "--yarn-orig-ctx":
            out["yarn_orig_ctx"] = int(value)
        elif flag == "--yarn-beta-fast":
            out["yarn_beta_fast"] = float(value)
        elif flag == "--yarn-beta-slow":
            out["yarn_beta_slow"] = float(value)
        elif flag == "--ctx-size":
            out["n_ctx"] = int(value)
        elif flag == "--override-kv":
            key, typed = value.split("=", 1)
            kind, number = typed.split(":", 1)
            assert kind in ("float", "int"), value  # int: llama-server's context_length past the GGUF's
            out["kv_overrides"][key.replace("ARCH.", arch + ".")] = float(number) if kind == "float" else int(number)
        else:
            raise AssertionError(f"posenc printed a flag this test does not map: {flag}")
    return out


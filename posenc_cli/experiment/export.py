"""Export the tiny passkey Llama as a GGUF file (llama.cpp) and a transformers checkpoint folder (transformers, vLLM).

Both take the float32 weights under transformers' ``LlamaForCausalLM`` names (``name -> numpy array``, nn.Linear
layout ``out x in``):

* :func:`write_gguf` writes what llama.cpp's ``convert_hf_to_gguf.py`` would for that checkpoint: architecture
  ``llama``, float32 tensors named ``token_embd``, ``blk.N.attn_q``, ..., ``output``; the attn_q / attn_k rows of
  each head permuted from transformers' rotate-half RoPE layout (pairs ``i, i + d/2``) to the interleaved pairs
  (``2i, 2i + 1``) llama.cpp's llama architecture rotates (:func:`permute_rope_rows`); and the byte-fallback SPM
  vocabulary of :mod:`posenc_cli.evaluation.bytevocab` (``tokenizer.ggml.model`` ``llama``, BOS added, no space prefix).
* :func:`write_hf_folder` writes ``config.json``, ``model.safetensors`` (written here: an 8-byte little-endian header
  length, the JSON header, the raw little-endian tensor bytes), ``tokenizer.json`` and ``tokenizer_config.json``.

Every file is written atomically (a temp file in the same folder, then ``os.replace``).
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from posenc_cli.errors import PosencError
from posenc_cli.evaluation import bytevocab
from posenc_cli.files import atomic_write_bytes

Weights = dict[str, npt.NDArray[np.float32]]
ARCH = "llama"


def permute_rope_rows(weights: npt.NDArray[np.float32], n_head: int) -> npt.NDArray[np.float32]:
    """Rows of each of ``n_head`` heads from the rotate-half order to interleaved pairs (``LlamaModel.permute``)."""
    rows = weights.shape[0]
    return np.ascontiguousarray(weights.reshape(n_head, 2, rows // n_head // 2, *weights.shape[1:])
                                .swapaxes(1, 2).reshape(weights.shape))


def hf_config(shape: Any) -> dict[str, Any]:
    """config.json for a ``LlamaShape`` (posenc_cli.experiment.passkey): transformers 5 and 4.x both read it."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": shape.vocab_size,
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "head_dim": shape.head_dim,
        "max_position_embeddings": shape.max_position_embeddings,
        "rms_norm_eps": shape.rms_norm_eps,
        "rope_parameters": {"rope_type": "default", "rope_theta": float(shape.rope_theta)},
        "rope_theta": float(shape.rope_theta),  # transformers 4.x reads the top-level key
        "rope_scaling": None,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "bos_token_id": bytevocab.BOS,
        "eos_token_id": bytevocab.EOS,
        "pad_token_id": None,
        "dtype": "float32",
        "torch_dtype": "float32",
        "use_cache": True,
    }


def safetensors_bytes(weights: Weights) -> bytes:
    """The safetensors file for float32 ``weights`` (tensors in name order, so the bytes are reproducible)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    blobs: list[bytes] = []
    offset = 0
    for name in sorted(weights):
        array = np.ascontiguousarray(weights[name], dtype="<f4")
        blob = array.tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":"), allow_nan=False).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def write_hf_folder(folder: str | os.PathLike[str], weights: Weights, shape: Any) -> list[Path]:
    """config.json, model.safetensors, tokenizer.json and tokenizer_config.json in ``folder`` (created)."""
    out = Path(folder)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PosencError(f"cannot create {out}: {exc.strerror or exc}") from None
    config = hf_config(shape)
    tok_config = bytevocab.hf_tokenizer_config() | {"model_max_length": shape.max_position_embeddings}
    files = {
        "config.json": (json.dumps(config, indent=2, allow_nan=False) + "\n").encode("utf-8"),
        "model.safetensors": safetensors_bytes(weights),
        "tokenizer.json": (json.dumps(bytevocab.hf_tokenizer_json(), indent=2, ensure_ascii=False, allow_nan=False)
                           + "\n").encode("utf-8"),
        "tokenizer_config.json": (json.dumps(tok_config, indent=2, allow_nan=False) + "\n").encode("utf-8"),
    }
    for name, data in files.items():
        atomic_write_bytes(out / name, data)
    return [out / name for name in files]


def gguf_tensors(weights: Weights, shape: Any) -> Weights:
    """llama.cpp's tensor names; attn_q / attn_k rows permuted per head (per KV head for attn_k)."""
    tensors: Weights = {"token_embd.weight": weights["model.embed_tokens.weight"]}
    for i in range(shape.num_hidden_layers):
        p = f"model.layers.{i}."
        tensors |= {
            f"blk.{i}.attn_norm.weight": weights[p + "input_layernorm.weight"],
            f"blk.{i}.attn_q.weight": permute_rope_rows(weights[p + "self_attn.q_proj.weight"],
                                                        shape.num_attention_heads),
            f"blk.{i}.attn_k.weight": permute_rope_rows(weights[p + "self_attn.k_proj.weight"],
                                                        shape.num_key_value_heads),
            f"blk.{i}.attn_v.weight": weights[p + "self_attn.v_proj.weight"],
            f"blk.{i}.attn_output.weight": weights[p + "self_attn.o_proj.weight"],
            f"blk.{i}.ffn_norm.weight": weights[p + "post_attention_layernorm.weight"],
            f"blk.{i}.ffn_gate.weight": weights[p + "mlp.gate_proj.weight"],
            f"blk.{i}.ffn_up.weight": weights[p + "mlp.up_proj.weight"],
            f"blk.{i}.ffn_down.weight": weights[p + "mlp.down_proj.weight"],
        }
    tensors["output_norm.weight"] = weights["model.norm.weight"]
    tensors["output.weight"] = weights["lm_head.weight"]
    return tensors


def write_gguf(path: str | os.PathLike[str], weights: Weights, shape: Any, *, name: str = "posenc passkey") -> Path:
    """The float32 llama GGUF with the byte-fallback SPM vocabulary, written atomically to ``path``."""
    import gguf

    target = Path(path)
    tmp = target.parent / f".{target.name}.posenc-{os.getpid()}.tmp"
    try:
        writer = gguf.GGUFWriter(str(tmp), ARCH)
        writer.add_name(name)
        writer.add_context_length(shape.max_position_embeddings)
        writer.add_embedding_length(shape.hidden_size)
        writer.add_block_count(shape.num_hidden_layers)
        writer.add_feed_forward_length(shape.intermediate_size)
        writer.add_head_count(shape.num_attention_heads)
        writer.add_head_count_kv(shape.num_key_value_heads)
        writer.add_layer_norm_rms_eps(shape.rms_norm_eps)
        writer.add_rope_dimension_count(shape.head_dim)
        writer.add_rope_freq_base(float(shape.rope_theta))
        writer.add_vocab_size(shape.vocab_size)
        writer.add_file_type(gguf.LlamaFileType.ALL_F32)
        writer.add_tokenizer_model("llama")
        writer.add_token_list(bytevocab.pieces())
        writer.add_token_scores([0.0] * bytevocab.VOCAB_SIZE)
        writer.add_token_types(bytevocab.token_types())
        writer.add_bos_token_id(bytevocab.BOS)
        writer.add_eos_token_id(bytevocab.EOS)
        writer.add_unk_token_id(bytevocab.UNK)
        writer.add_add_bos_token(True)
        writer.add_add_eos_token(False)
        writer.add_add_space_prefix(False)
        for tname, data in gguf_tensors(weights, shape).items():
            writer.add_tensor(tname, np.ascontiguousarray(data, dtype=np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise PosencError(f"cannot write {target}: {exc.strerror or exc}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def read_safetensors(path: str | os.PathLike[str]) -> Weights:
    """The float32 tensors of a safetensors file (the reader for :func:`safetensors_bytes`; F32 only)."""
    data = Path(path).read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    out: Weights = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise PosencError(f"{path}: tensor {name} is {info['dtype']}, only F32 is read")
        start, end = info["data_offsets"]
        out[name] = np.frombuffer(data[8 + size + start:8 + size + end], dtype="<f4").reshape(info["shape"]).copy()
    return out

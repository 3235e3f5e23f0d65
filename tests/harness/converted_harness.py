"""Tiny random twins of real configs, converted to GGUF by llama.cpp's OWN ``convert_hf_to_gguf.py``, and their
logits in llama.cpp (llama-cpp-python) and transformers on the same token ids.

A plain helper module for the tests (``from converted_harness import ...``), like ``llamacpp_harness``:

* :func:`converter_dir` finds the converter at run time: ``POSENC_LLAMA_CONVERTER`` names the ``vendor/llama.cpp``
  folder of the llama-cpp-python 0.3.36 sdist (``.ci/run`` downloads it with ``pip download --no-deps
  --no-binary :all: llama-cpp-python==0.3.36`` and unpacks it). Nothing of the converter is kept in this
  repository; without it the tests that need it skip.
* :func:`tiny_twin` keeps a corpus config's rope settings and head dims (``rope_scaling``/``rope_parameters``,
  ``rope_theta``, ``head_dim``, ``qk_rope_head_dim``, ``max_position_embeddings``, layer types) and shrinks the
  rest: 2 layers, 2 heads, a 128-token vocabulary, dense MLPs.
* :func:`save_twin` builds the transformers model from that config (float32), draws its weights so that attention
  is sharp (q/k projections large, norms 1 plus noise: a different RoPE shows in the logits) and saves it.
* :func:`convert` runs the converter on the saved folder in a subprocess (its vendored ``gguf-py`` comes first on
  its path) with ``--outtype f32`` (llama.cpp crashed on some quantized GGUFs on this CPU). The only change to
  the converter's run: the model class's ``set_vocab`` writes no tokenizer (``none``, plus ``vocab_size``), since
  the twins have none and the tests feed token ids (a wrapper class's inner model too: Mistral3Model's ``impl``);
  every rope key and tensor is the converter's own.
* :func:`hf_logits` runs the saved model in transformers (eager attention, float32), optionally with config
  overrides (the patched config ``posenc scale --engine hf`` prints).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

ENV = "POSENC_LLAMA_CONVERTER"
N_VOCAB = 128

_DRIVER = r"""
import importlib.util, sys
converter, model_dir, out, outtype = sys.argv[1:5]
extra = sys.argv[5:]
sys.path.insert(0, converter)
sys.path.insert(1, converter + "/gguf-py")
spec = importlib.util.spec_from_file_location("convert_hf_to_gguf", converter + "/convert_hf_to_gguf.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
found = module.get_model_class

def no_vocab(self):
    self._set_vocab_none()
    self.gguf_writer.add_vocab_size(self.hparams["vocab_size"])

def init(self, *args, **kwargs):
    super(type(self), self).__init__(*args, **kwargs)
    if hasattr(self, "impl"):  # a wrapper that writes through another model class (Mistral3Model)
        self.impl.set_vocab = no_vocab.__get__(self.impl)

def get_model_class(*args, **kwargs):
    cls = found(*args, **kwargs)
    return type(cls.__name__, (cls,), {"model_arch": cls.model_arch, "set_vocab": no_vocab, "__init__": init})

module.get_model_class = get_model_class
sys.argv = ["convert_hf_to_gguf.py", model_dir, "--outfile", out, "--outtype", outtype, *extra]
module.main()
"""


def converter_dir() -> Path | None:
    """The ``vendor/llama.cpp`` folder holding ``convert_hf_to_gguf.py`` (``POSENC_LLAMA_CONVERTER``), or None."""
    value = os.environ.get(ENV)
    if not value:
        return None
    path = Path(value)
    return path if (path / "convert_hf_to_gguf.py").is_file() and (path / "conversion").is_dir() else None


_SHRINK = {"num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": N_VOCAB,
           "intermediate_size": 64, "tie_word_embeddings": False, "bos_token_id": None, "eos_token_id": None,
           "pad_token_id": None}
_DROP = ("quantization_config", "auto_map", "torch_dtype", "dtype", "transformers_version", "moe_intermediate_size",
         "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "num_experts", "layer_types",
         "sliding_window_pattern", "max_window_layers", "use_sliding_window", "vision_config", "text_config",
         "num_nextn_predict_layers")


def tiny_twin(config: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """``config`` (its text part) with the rope settings and head dims kept and everything else tiny."""
    text = dict(config.get("text_config") or config)
    model_type = text.get("model_type") or config.get("model_type")
    head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    twin = {k: v for k, v in text.items() if k not in _DROP}
    twin.update(_SHRINK)
    twin["model_type"] = model_type
    if model_type in ("deepseek_v2", "deepseek_v3"):
        # MLA: the rotary part (qk_rope_head_dim) is kept; the rest shrinks; every layer dense; a q LoRA rank
        # (llama.cpp reads the key for every deepseek2 but the 27-layer Lite)
        twin.update({"hidden_size": 64, "kv_lora_rank": 32, "q_lora_rank": 32, "num_nextn_predict_layers": 0,
                     "qk_nope_head_dim": 16, "v_head_dim": 16, "first_k_dense_replace": 2, "n_routed_experts": 4,
                     "num_experts_per_tok": 2, "moe_intermediate_size": 16, "n_shared_experts": 1, "n_group": 1,
                     "topk_group": 1, "num_key_value_heads": 2})
        twin.pop("head_dim", None)
    else:
        twin["head_dim"] = head_dim
        twin["hidden_size"] = 2 * head_dim if head_dim >= 32 else 64
    if model_type == "gemma3_text":
        twin.update({"num_hidden_layers": 6, "sliding_window": 512, "query_pre_attn_scalar": head_dim})
        twin["layer_types"] = ["sliding_attention"] * 5 + ["full_attention"]
    twin.update(changes)
    return twin


def _architecture(model_type: str) -> str:
    from transformers import AutoConfig, AutoModelForCausalLM

    config_class = AutoConfig.for_model(model_type).__class__
    return AutoModelForCausalLM._model_mapping[config_class].__name__


def save_twin(twin: dict[str, Any], folder: Path, seed: int = 0) -> Path:
    """Build ``twin`` in transformers (float32), draw sharp random weights, save it (safetensors) to ``folder``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(twin)
    model_type = cfg.pop("model_type")
    config = AutoConfig.for_model(model_type, **cfg)
    config.architectures = [_architecture(model_type)]
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.ndim == 1:
                # norms: 1 plus noise (Gemma's are stored as weight - 1: noise only); biases small
                base = 0.0 if "norm" not in name or model_type.startswith("gemma") else 1.0
                param.copy_(base + 0.1 * torch.randn(param.shape, generator=gen))
            else:
                fan_in = param.shape[-1]
                sharp = any(k in name for k in ("q_proj", "k_proj", "q_a_proj", "q_b_proj", "kv_a_proj",
                                                  "kv_b_proj"))
                scale = 1.0 if "embed" in name or "lm_head" in name else (2.5 if sharp else 1.0) / fan_in ** 0.5
                param.copy_(scale * torch.randn(param.shape, generator=gen))
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    if model_type.startswith("gemma"):
        # the Gemma converter cuts the embedding to the tokenizer's size (tokenizer.json's vocab and added tokens):
        # a stub of the whole vocabulary keeps every row
        stub = {"model": {"vocab": {f"t{i}": i for i in range(int(cfg["vocab_size"]))}}, "added_tokens": []}
        (folder / "tokenizer.json").write_text(json.dumps(stub))
    return folder


def convert(converter: Path, folder: Path, out: Path, outtype: str = "f32", extra: tuple[str, ...] = ()) -> Path:
    """``convert_hf_to_gguf.py folder --outfile out --outtype f32 [extra]`` (see the module docstring; ``extra``: more
    converter flags, such as ``--no-mtp`` for a twin without multi-token-prediction layers)."""
    env = {k: v for k, v in os.environ.items() if k != "NO_LOCAL_GGUF"}
    done = subprocess.run([sys.executable, "-c", _DRIVER, str(converter), str(folder), str(out), outtype,
                           *extra],
                          capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"convert_hf_to_gguf.py failed:\n{done.stderr[-4000:]}")
    return out


def hf_logits(folder: Path, tokens: np.ndarray | list[int], overrides: dict[str, Any] | None = None) -> np.ndarray:
    """Logits (len(tokens) x vocab) of the saved model in transformers, float32, eager attention; ``overrides``
    replace config keys first (a patched config's keys)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = json.loads((folder / "config.json").read_text())
    raw.update(overrides or {})
    if raw.get("rope_parameters") is not None and overrides and overrides.get("rope_parameters") is not None:
        raw.pop("rope_scaling", None)
    raw = {k: v for k, v in raw.items() if v is not None or k not in ("rope_parameters", "rope_theta")}
    model_type = raw.pop("model_type")
    config = AutoConfig.for_model(model_type, **{k: v for k, v in raw.items() if k != "architectures"})
    config._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_pretrained(folder, config=config, dtype=torch.float32).eval()
    ids = torch.tensor([[int(t) for t in tokens]], dtype=torch.long)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=False)
    return out.logits[0].to(torch.float32).numpy().copy()


def relative_diff(ours: np.ndarray, theirs: np.ndarray, start: int = 1) -> float:
    """The largest per-position ``|ours - theirs| / |theirs|`` (L2 over the vocabulary), from ``start``."""
    diff = np.linalg.norm(ours[start:] - theirs[start:], axis=-1)
    size = np.linalg.norm(theirs[start:], axis=-1)
    return float((diff / size).max())

"""What Ollama's OWN safetensors-to-GGUF converter (``ollama create`` from a model folder) drops of a config's rope:
one fact, used by the Ollama engine's warnings (:mod:`posenc_cli.engines.ollama`) and by ``posenc lint``.

Read in github.com/ollama/ollama ``convert/convert_qwen2.go`` (and, as issue 27 records, ``convert_llama.go``): the
model's ``rope_scaling`` is parsed into a struct with only ``type``, ``factor``, ``original_max_position_embeddings``
(and ``mrope_section``), the base from the top-level ``rope_theta``; for ``type: yarn`` it writes
``rope.scaling.type`` and ``rope.scaling.factor``, and never ``rope.scaling.original_context_length``. So:

* a YaRN dict that names its type only as ``rope_type`` (transformers' current spelling) is read as no scaling:
  YaRN is dropped and the GGUF runs plain RoPE (Llama 3's ``rope_type: llama3`` is read by convert_llama.go);
* a transformers-5 ``rope_parameters`` dict is not read at all (nor the ``rope_theta`` inside it);
* YaRN's original length is not written: llama.cpp then takes ``context_length`` (the extended window) as YaRN's
  original length, so its correction range and attention factor are not the model's.

The fix in every case: convert with llama.cpp's ``convert_hf_to_gguf.py``, or write the GGUF with
``posenc scale ... --config MODEL.gguf -o NEW.gguf``. Stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["FIX", "READ_CONVERTERS", "ollama_converter_drops"]

#: the model types whose Ollama converter this module describes (convert_qwen2.go, convert_llama.go); other types
#: have converters of their own (gpt-oss's writes the original length), not described here
READ_CONVERTERS = ("qwen2", "llama")

FIX = ("convert with llama.cpp's convert_hf_to_gguf.py (then `ollama create` FROM that GGUF), or write the GGUF with "
       "`posenc scale METHOD --config MODEL.gguf --target N -o NEW.gguf`")


def ollama_converter_drops(text: Mapping[str, Any], model_type: str) -> list[str]:
    """What Ollama's converter would drop of the text config ``text`` of a ``model_type`` model (one sentence
    each; empty: nothing, or a model type whose converter is not in :data:`READ_CONVERTERS`)."""
    out: list[str] = []
    if model_type not in READ_CONVERTERS:
        return out
    scaling = text.get("rope_scaling")
    params = text.get("rope_parameters")
    if not isinstance(scaling, Mapping) and isinstance(params, Mapping):
        flat = params if "rope_type" in params or "rope_theta" in params else params.get("full_attention") or {}
        rope_type = flat.get("rope_type") if isinstance(flat, Mapping) else None
        if rope_type not in (None, "default"):
            out.append(f"Ollama's converter does not read rope_parameters: its {rope_type} scaling is dropped (the "
                       "GGUF runs plain RoPE), and so is the rope_theta inside it")
        return out
    if not isinstance(scaling, Mapping):
        return out
    kind = scaling.get("type")
    rope_type = scaling.get("rope_type")
    if kind is None and rope_type == "yarn":
        out.append("Ollama's converter reads YaRN from rope_scaling.type only; this dict names rope_type 'yarn', so "
                   "the scaling is dropped and the GGUF runs plain RoPE")
    elif (kind or rope_type) == "yarn":
        original = scaling.get("original_max_position_embeddings")
        out.append("Ollama's converter never writes rope.scaling.original_context_length: llama.cpp then takes "
                   f"context_length ({text.get('max_position_embeddings')}) as YaRN's original length"
                   + (f" instead of {original}" if original else ""))
    return out

"""The window a rope config serves, defined once for every command (stdlib only).

``pick``, ``scale``, ``inspect``, ``check``, ``verify``, ``eval`` and the trainer plans all ask two questions of a
model's rope dict: which context does it serve as written (its *native window*: asking for it changes nothing, asking
for more multiplies from it), and which length does its scaling refer to (its *original length*: a different method
scales from there). :func:`window` answers both, per rope type, as the engines admit lengths and as the model cards
write their recipes:

* ``yarn``: ``original_max_position_embeddings x factor``, or ``max_position_embeddings`` when that is longer.
  transformers computes YaRN from the dict alone (``factor`` stretches the original length; ``max_position_embeddings``
  only stands in for a missing factor), and the Qwen2/2.5/3 and QwQ cards' 128k recipe adds ``{"rope_type": "yarn",
  "factor": 4.0, "original_max_position_embeddings": 32768}`` and leaves ``max_position_embeddings`` as shipped
  (32,768 or 40,960): such a file serves 131,072, and a second x4 on top of it would be x16 from 32k. DeepSeek-V3
  (4,096 x 40 = 163,840), gpt-oss (4,096 x 32 = 131,072) and Devstral 2 ship both numbers equal. vLLM's length check
  still admits only ``max_position_embeddings`` for yarn (it assumes the file wrote the scaled length), so ``check``
  reports ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` for a card-patched file: that is vLLM's own code, see
  :mod:`posenc_cli.engines.vllm`.
* ``llama3`` and ``longrope``: ``max_position_embeddings``. Their factor does not give the reach (Llama 3.1: 8,192 x 8
  = 65,536, yet it serves 131,072; Phi-3.5's longrope factor is derived from the two lengths), and no engine
  multiplies them.
* ``linear``: ``max_position_embeddings``, no original length named. Files in the wild write both conventions: Gemma
  3 writes the scaled length (pretrained at 32k, x8 to 128k on its global layers), as posenc's own ``scale`` output
  does, while a Llama-2-era patch adds only the dict; vLLM and SGLang admit ``max_position_embeddings x factor``
  (vLLM except for gemma3 types). Reading the product would make every linear file posenc writes claim twice its
  target (tests/rope/test_windows.py's round trip), so posenc keeps the length the file names and ``check`` reports what
  each engine admits.
* ``dynamic``: transformers grows the base past ``max_position_embeddings`` for any length (unbounded); the window it
  was set for is ``max_position_embeddings x factor`` (what vLLM admits), its original length
  ``max_position_embeddings``.
* ``default`` and the types posenc reads but does not write: ``max_position_embeddings``, or a family's documented
  trained length where its authors say the two differ (:data:`TRAINED_LENGTHS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from posenc_cli.units import format_length

#: Families whose ``max_position_embeddings`` is not the length they were trained for, in their authors' words, keyed
#: by (text model type, ``max_position_embeddings`` and ``rope_theta`` as shipped). Read only for an unscaled rope
#: with the shipped theta: a file that adds a scaling dict, or a new theta (``scale ntk``), says itself what it
#: serves.
_QWEN3 = (32768, "the Qwen3 model cards: 'Qwen3 natively supports context lengths of up to 32,768 tokens' and 'The "
                 "default max_position_embeddings in config.json is set to 40,960. This allocation includes reserving "
                 "32,768 tokens for outputs and 8,192 tokens for typical prompts'; their YaRN recipe scales from "
                 "32,768")
TRAINED_LENGTHS: dict[tuple[str, int, float], tuple[int, str]] = {
    ("qwen3", 40960, 1e6): _QWEN3,
    ("qwen3_moe", 40960, 1e6): _QWEN3,
}

@dataclass(frozen=True)
class Window:
    """What a rope dict serves: ``native`` (the window; asking for it changes nothing), ``original`` (the length its
    scaling refers to, None when it names none), how they were read, and a documented fact that set them."""

    native: int
    original: int | None
    basis: str
    unbounded: bool = False  # dynamic NTK: transformers computes for any length
    fact: str = ""  # the authors' words behind a trained length (TRAINED_LENGTHS), shown as a note

    @property
    def served(self) -> int | None:
        """The window as ``inspect`` reports it: None where transformers computes for any length (dynamic)."""
        return None if self.unbounded else self.native

    @property
    def scale_from(self) -> int:
        """The length a different method scales from: the original length, else the window."""
        return self.original or self.native

    def note(self, label: str, max_position_embeddings: int) -> str | None:
        """The line that tells a user the window is not ``max_position_embeddings``, or None when it is."""
        if self.fact:
            return (f"note: {label} was trained at {format_length(self.native)}, not its max_position_embeddings "
                    f"{format_length(max_position_embeddings)}; extensions start there: {self.fact}")
        return None


def _factor(params: Mapping[str, Any]) -> float | None:
    value = params.get("factor")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def window(params: Mapping[str, Any], max_position_embeddings: int, model_type: str | None = None) -> Window:
    """The :class:`Window` of one resolved rope dict (transformers 5's standardised form: ``rope_type`` set, a
    yarn/llama3/longrope dict carrying ``original_max_position_embeddings``) on a model with the given
    ``max_position_embeddings``; ``model_type`` is the text model's type (for :data:`TRAINED_LENGTHS` and Gemma 3)."""
    max_pos = max_position_embeddings
    rope_type = params.get("rope_type", "default")
    factor = _factor(params)
    mtype = model_type or ""
    if rope_type in ("yarn", "llama3", "longrope"):
        original = int(params["original_max_position_embeddings"])
        if rope_type == "yarn" and factor is not None and round(original * factor) > max_pos:
            return Window(int(round(original * factor)), original,
                          f"original_max_position_embeddings {original:,} x factor {factor:g}; max_position_embeddings "
                          f"{max_pos:,} is left as shipped, as the model cards' recipe does")
        return Window(max_pos, original, "max_position_embeddings; scaling from original_max_position_embeddings")
    if rope_type == "dynamic":
        reach = int(round(max_pos * (factor or 1.0)))
        return Window(reach, max_pos, "dynamic NTK grows its base past max_position_embeddings", unbounded=True)
    if rope_type == "linear":
        return Window(max_pos, None, "max_position_embeddings; linear scaling names no original length")
    theta = params.get("rope_theta")
    trained = None
    if rope_type == "default" and isinstance(theta, (int, float)) and not isinstance(theta, bool):
        trained = TRAINED_LENGTHS.get((mtype, max_pos, float(theta)))
    if trained is not None:
        length, words = trained
        return Window(length, None, f"trained length; max_position_embeddings {max_pos:,} also reserves room for "
                                    "the output", fact=words)
    return Window(max_pos, None, "max_position_embeddings")

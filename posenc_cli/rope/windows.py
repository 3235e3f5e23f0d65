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

A third question has its own answer: the length the model was *trained* at (:attr:`Window.trained_length`), where a
jump is measured from. It is the window, except where the reach past it is training-free: the cards' yarn pattern
(trained at the original length), dynamic NTK (at ``max_position_embeddings``), and a yarn block with the window
multiplied out that no shipped config vouches for (:data:`TRAINED_SCALING`); posenc's own record of a file it wrote
overrides all of them (:mod:`posenc_cli.models.facts`). docs/conventions.md states the rule.
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

#: Shipped configs whose yarn or linear block multiplies the window out (``max_position_embeddings`` = the scaled
#: length) for scaling their authors TRAINED with, keyed by their shipped values: (text model type, rope type,
#: factor, original length (None for linear), ``max_position_embeddings``, ``rope_theta``). The file alone cannot
#: tell these from a training-free extension written the same way (posenc's own ``scale -o`` output, which carries
#: its ``posenc`` marker instead); a multiplied-out yarn block matched by neither is read as training-free. The
#: verbatim configs are in tests/corpus/ (SOURCES.json says where each came from; tests/rope/test_windows.py holds
#: every entry to them).
_DEEPSEEK_V3 = ("DeepSeek-V3 technical report (arXiv 2412.19437, section 4.3 'Long Context Extension'): YaRN with "
                "s = 40 trained in two 1,000-step phases, 4K -> 32K -> 128K; DeepSeek-R1, V3.1 and V3.2 ship the same "
                "rope")
_KIMI = ("Kimi K2 technical report (arXiv 2507.20534): the context window is extended with YaRN during training "
         "(long-context activation)")
_DEVSTRAL = ("mistralai/Devstral-2-123B-Instruct-2512 and Devstral-Small-2-24B-Instruct-2512 model cards: a 256K "
             "context, served with the yarn block they ship")
TRAINED_SCALING: dict[tuple[str, str, float, int | None, int, float], str] = {
    ("deepseek_v3", "yarn", 40.0, 4096, 163840, 10000.0): _DEEPSEEK_V3,
    ("deepseek_v32", "yarn", 40.0, 4096, 163840, 10000.0): _DEEPSEEK_V3,
    ("deepseek_v3", "yarn", 32.0, 4096, 131072, 50000.0): _KIMI,  # Kimi K2 (model_type kimi_k2, DeepSeek-V3 text)
    ("deepseek_v3", "yarn", 64.0, 4096, 262144, 50000.0): _KIMI + "; Kimi K2.5 at 256K",
    ("deepseek_v4", "yarn", 16.0, 65536, 1048576, 160000.0): (
        "DeepSeek-V4 technical report ('Towards Highly Efficient Million-Token Context Intelligence', DeepSeek_V4.pdf "
        "on the deepseek-ai/DeepSeek-V4-Pro Hub page): V4-Flash and V4-Pro support a context length of one million "
        "tokens, the window this yarn block ships with"),
    ("gpt_oss", "yarn", 32.0, 4096, 131072, 150000.0): (
        "gpt-oss-120b & gpt-oss-20b model card (arXiv 2508.10925): the context length of the dense layers is "
        "extended to 131,072 tokens with YaRN in pre-training"),
    ("ministral3", "yarn", 64.0, 4096, 262144, 1e6): _DEVSTRAL,
    ("ministral3", "yarn", 48.0, 8192, 393216, 1e8): _DEVSTRAL,
    ("olmo3", "yarn", 8.0, 8192, 65536, 500000.0): (
        "OLMo 3 report (allenai, 2025): a long-context extension stage trains 8K -> 65K with YaRN on the "
        "full-attention layers"),
    ("gemma3_text", "linear", 8.0, None, 131072, 1e6): (
        "Gemma 3 technical report (arXiv 2503.19786): pre-trained at 32K, then RoPE rescaled by 8 on the global "
        "layers at the end of pre-training"),
}


def trained_scaling(params: Mapping[str, Any], max_position_embeddings: int, model_type: str | None) -> str | None:
    """The source saying a shipped config's scaling was trained (:data:`TRAINED_SCALING`), or None."""
    factor, theta = _factor(params), params.get("rope_theta")
    if factor is None or isinstance(theta, bool) or not isinstance(theta, (int, float)):
        return None
    original = params.get("original_max_position_embeddings")
    key = (model_type or "", str(params.get("rope_type", "default")), factor,
           int(original) if isinstance(original, (int, float)) and params.get("rope_type") != "linear" else None,
           max_position_embeddings, float(theta))
    return TRAINED_SCALING.get(key)


@dataclass(frozen=True)
class Window:
    """What a rope dict serves: ``native`` (the window; asking for it changes nothing), ``original`` (the length its
    scaling refers to, None when it names none), how they were read, and a documented fact that set them; and the
    length the model was TRAINED at (``trained``: None is the window itself) with whether the reach past it is
    training-free. Warnings and ``pick``'s caps measure a jump from the trained length, a request multiplies the
    model's own factor from the window."""

    native: int
    original: int | None
    basis: str
    unbounded: bool = False  # dynamic NTK: transformers computes for any length
    fact: str = ""  # the authors' words behind a trained length (TRAINED_LENGTHS), shown as a note
    trained: int | None = None  # the trained length, when shorter than the window (a training-free reach)
    assumed: str = ""  # why the trained length was assumed (a multiplied-out yarn block nobody vouches for)
    source: str = ""  # the source saying the scaling was trained (TRAINED_SCALING)

    @property
    def trained_length(self) -> int:
        """The length the model was trained at: the window, unless its reach past it is training-free."""
        return self.trained or self.native

    @property
    def training_free(self) -> bool:
        """The window reaches past the trained length without training."""
        return self.trained_length < self.native

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
            # the card's pattern: the file shows the window is reached training-free from the original length
            return Window(int(round(original * factor)), original,
                          f"original_max_position_embeddings {original:,} x factor {factor:g}; max_position_embeddings "
                          f"{max_pos:,} is left as shipped, as the model cards' recipe does", trained=original)
        basis = "max_position_embeddings; scaling from original_max_position_embeddings"
        if rope_type == "yarn" and max_pos > original:
            source = trained_scaling(params, max_pos, mtype)
            if source:
                return Window(max_pos, original, basis, source=source)
            return Window(max_pos, original, basis, trained=original,
                          assumed=f"a yarn block with the window multiplied out is how a training-free extension is "
                                  f"written too, and this is no shipped config known to be trained at "
                                  f"{format_length(max_pos)}")
        return Window(max_pos, original, basis)
    if rope_type == "dynamic":
        # dynamic NTK is training-free by construction: trained at max_position_embeddings, grown past it per forward
        reach = int(round(max_pos * (factor or 1.0)))
        return Window(reach, max_pos, "dynamic NTK grows its base past max_position_embeddings", unbounded=True,
                      trained=max_pos if reach > max_pos else None)
    if rope_type == "linear":
        # position interpolation is fine-tuned in practice (Gemma 3, the Llama-2-era 16k models): the window is
        # trained unless posenc's own marker says otherwise
        return Window(max_pos, None, "max_position_embeddings; linear scaling names no original length",
                      source=trained_scaling(params, max_pos, mtype) or "")
    theta = params.get("rope_theta")
    trained = None
    if rope_type == "default" and isinstance(theta, (int, float)) and not isinstance(theta, bool):
        trained = TRAINED_LENGTHS.get((mtype, max_pos, float(theta)))
    if trained is not None:
        length, words = trained
        return Window(length, None, f"trained length; max_position_embeddings {max_pos:,} also reserves room for "
                                    "the output", fact=words)
    return Window(max_pos, None, "max_position_embeddings")

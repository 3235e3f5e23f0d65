"""What a model's config says about positions, resolved the way transformers 5.x builds it (stdlib only).

One entry point, :func:`describe`, turns a config dict (from a config.json, a Hub id, a model folder or a GGUF
file: see :mod:`posenc_cli.models.sources`) into a :class:`ModelPositions`: per group of layers, whether they rotate,
the
rope dict as transformers resolves it, the head dim its rope functions read, plus the model's windows and any
attention scaling applied outside the rope.

The rules follow transformers 5.25's config classes and rotary embeddings. What each config class assumes is
generated, not written by hand: ``model_types.json`` (written by ``tests/harness/generate_model_types.py`` from the
installed transformers, read here without importing it) holds, per model type, the path to the decoder's config,
the class defaults of every attribute the rotary embedding reads, its ``attribute_map`` aliases, how its head dim
is derived, whether plain RoPE honours ``partial_rotary_factor``, what the class builds from the keys real files
carry (``conversions``, probed: MiniMax-M2's ``rotary_dim``, Dots3's ``swa_rope_theta``, a flat dict on a per-layer
class, keys beside layer-type dicts) and the layer types it builds when a file names none (MiMo-V2-Flash).
:data:`_RULES` keeps only what no attribute or probe shows (code in a config class or an attention module), each
entry needed by a test.

* The text model is ``get_text_config(decoder=True)``: the generated path (``text_config``,
  ``thinker_config.text_config`` in Qwen2.5-Omni, ``decoder`` in T5Gemma); a sub-config the file leaves out is the
  class's defaults, and keys the file leaves out inside it are the sub-config class's defaults (Qwen2-Audio's
  ``text_config`` names no hidden size).
* A flat rope dict: legacy ``rope_scaling`` wins over ``rope_parameters``; ``rope_theta`` and
  ``partial_rotary_factor`` inside the dict win over the top-level keys, which win over the class default;
  ``type`` stands in for ``rope_type``; for yarn/llama3/longrope a top-level ``original_max_position_embeddings``
  (phi3: always, its class default is 4096) overrides the dict's, else the dict falls back to
  ``max_position_embeddings``.
* Per-layer-type rope built by the class: Gemma 3 (global theta plus ``rope_local_base_freq`` for sliding layers;
  legacy scaling goes to full-attention layers only), OLMo 3 (scaling on full-attention layers; sliding layers keep
  the class theta 500000), Gemma 4 (``proportional`` rope with ``global_head_dim`` on full-attention layers),
  DeepSeek V4 (``main`` plain rope on sliding layers, ``compress`` with ``compress_rope_theta`` elsewhere, YaRN
  attention factor 1). For nested dicts transformers reads YaRN's ``truncate`` from the outer dict, so it is
  always True.
* Rotary dims: MLA models (DeepSeek V2/V3, Kimi K2, MiniCPM3) rotate ``qk_rope_head_dim``; plain ``default`` rope
  uses ``partial_rotary_factor`` only in the model types whose rotary class reads it (``default_partial`` in the
  generated data); every scaled rope type reads it. ``int(head_dim * factor)`` may be odd (GLM-4.5's defaults):
  transformers then turns ``ceil(dim / 2)`` pairs, and so does posenc.
* Layers without RoPE: Llama 4 / SmolLM3 / Mistral Large 4 ``no_rope_layers`` (1 = rotates) and MUSE's
  ``layer_rope_theta`` (0 = none); linear-attention, recurrent and convolution layers (Qwen3-Next, Qwen3.5, MiniMax,
  OLMo hybrid, Recurrent Gemma, LFM2); every layer but the sliding-window ones in Cohere2 (Command R7B, Command A),
  Cohere2-MoE (whose dense prefix still rotates with ``prefix_dense_sliding_window_pattern`` 1), Flint, AFMoE and
  LARA-mini; full-attention layers of EXAONE 4 (4.5, MoE, Kolibri) when it has a sliding window; Granite 4.0-H unless
  its ``position_embedding_type`` is ``"rope"``; and models with no rotary embedding at all (Nemotron-H, Jamba, Kimi
  Linear, Mamba). ``tests/models/test_layer_rotation.py`` checks every one against a forward pass of transformers' own
  model code (``tests/data/layer_rotation.json``).
* DeepSeek V2/V3, Kimi K2 and MiniCPM3 multiply the softmax scale by ``mscale(factor, mscale_all_dim)**2`` in
  their attention module whenever the rope is scaled and ``mscale_all_dim`` is set.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.models import remote_code
from posenc_cli.rope.attention_factors import yarn_mscale
from posenc_cli.rope.scaling import METHODS
from posenc_cli.rope.windows import Window, window

ORIGINAL_FROM_DICT = ("yarn", "llama3", "longrope")
_LEGACY_TYPES = {"su": "longrope", "mrope": "default"}
# keys the frequency functions read unconditionally, per rope_type (a missing one would be a KeyError)
_REQUIRED = {
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("original_max_position_embeddings",),
    "longrope": ("short_factor", "long_factor", "original_max_position_embeddings"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "proportional": ("rope_theta",),
}
_NUMERIC = ("rope_theta", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings",
            "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "partial_rotary_factor",
            "short_mscale", "long_mscale")
#: Rope keys the frequency functions divide by or take the logarithm of: they must be greater than 0.
_RATIOS = ("rope_theta", "original_max_position_embeddings", "beta_fast", "beta_slow", "low_freq_factor",
           "high_freq_factor")

ALIBI_TYPES = frozenset({"bloom", "mpt"})
LEARNED_TYPES = frozenset({"gpt2", "opt", "gpt_bigcode", "bert", "roberta", "distilbert", "xlm-roberta", "bart",
                           "gpt_neo", "biogpt", "whisper", "electra", "albert", "mbart", "blenderbot"})
SINUSOIDAL_TYPES = frozenset({"marian", "pegasus", "m2m_100", "fsmt", "xglm", "speech_to_text", "nllb_moe", "trocr"})
RELATIVE_BIAS_TYPES = frozenset({"t5", "mt5", "umt5", "longt5", "switch_transformers", "t5gemma"})
#: Models with no rotary embedding at all (state-space or hybrid; their attention layers, if any, use no positions).
NO_POSITION_TYPES = frozenset({"nemotron_h", "jamba", "kimi_linear", "mamba", "mamba2", "falcon_mamba", "rwkv",
                               "xlstm", "lfm2_moe_ssm"})
#: Model types whose attention applies RoPE on sliding-window layers only (an ``if`` around the rotary call in
#: transformers' modeling code, or the model passing the other layers no position embeddings; tests/
#: test_layer_rotation.py measures each): Cohere2 (Command R7B, Command A), Cohere2-MoE (which also rotates its
#: dense prefix layers when ``prefix_dense_sliding_window_pattern`` is 1), Flint, AFMoE, LARA-mini.
SLIDING_ONLY_TYPES = frozenset({"cohere2", "cohere2_moe", "flint", "afmoe", "lara_mini"})
#: Model types whose full-attention layers skip RoPE when the model has a sliding window (NoPE), EXAONE 4's way.
FULL_NOPE_TYPES = frozenset({"exaone4", "exaone4_5", "exaone_moe", "kolibri1"})
#: Layer types that have no attention to rotate (state-space, recurrent, convolution, linear attention), in every
#: model type that names them.
_NO_ATTENTION_LAYER_TYPES = {
    "linear_attention": "linear attention (gated delta net, lightning, Mamba): no positional encoding",
    "recurrent": "recurrent blocks (RG-LRU): no attention, no RoPE",
    "conv": "short-convolution blocks: no attention, no RoPE",
}
#: Model types that build a rotary embedding only when ``position_embedding_type`` is ``"rope"`` (Granite 4.0-H:
#: its class default is None, and its NoPE checkpoints say ``"nope"``).
POSITION_TYPE_GATED = frozenset({"granitemoehybrid"})
_ROPE_KEYS = ("rope_theta", "rope_scaling", "rope_parameters", "rotary_dim", "rotary_pct", "rotary_emb_base",
              "partial_rotary_factor", "rope_local_base_freq", "qk_rope_head_dim")


@dataclass(frozen=True)
class _Kind:
    """What a text model type's config class assumes when config.json is silent."""

    theta: float = 10000.0
    head_dim: int | None = None  # class default head_dim (None: hidden_size // num_attention_heads)
    max_positions: int | None = None
    partial: float | None = None  # class default partial_rotary_factor
    mla: bool = False  # head_dim is qk_rope_head_dim; softmax scale gets mscale**2
    original: int | None = None  # a class *field* original_max_position_embeddings (phi3), which always wins
    neox: float | None = None  # GPT-NeoX: reads only rotary_emb_base / rotary_pct (this default pct)
    resolver: str = "flat"
    default_rope: dict[str, Any] | None = None  # the rope dict the class builds when the config has none
    default_partial: bool = False  # plain (default) RoPE applies partial_rotary_factor
    known: bool = False  # transformers has this text config class (generated data) or posenc a rule for it
    defaults: Mapping[str, Any] = field(default_factory=dict)  # class defaults of sizes, window, MLA dims, ...
    aliases: Mapping[str, str] = field(default_factory=dict)  # the class's attribute_map
    head_dim_times: int | None = None  # config.head_dim = times * hidden_size // num_attention_heads, always
    image: bool = False  # a vision encoder: its rotary embedding turns with 2-D patch coordinates
    scales: bool = True  # the rotary class applies the rope type (ESM's computes plain RoPE whatever it says)
    conversions: Mapping[str, Any] = field(default_factory=dict)  # what the class builds from keys files carry
    layer_rule: Mapping[str, Any] | None = None  # the layer types the class builds when a file names none


@functools.lru_cache(maxsize=1)
def generated() -> dict[str, Any]:
    """``model_types.json``: what transformers' config classes assume about positions, per model type, written by
    ``tests/harness/generate_model_types.py`` from the installed transformers (its version is in ``"transformers"``)."""
    data: dict[str, Any] = json.loads(Path(__file__).with_name("model_types.json").read_text(encoding="utf-8"))
    return data


def _release(version: str) -> tuple[int, ...]:
    """The leading numeric release segments of a version string (``5.26.0.dev0`` -> ``(5, 26, 0)``)."""
    parts = []
    for piece in version.split("."):
        digits = "".join(itertools.takewhile(str.isdigit, piece))
        if not digits:
            break
        parts.append(int(digits))
        if digits != piece:
            break
    return tuple(parts)


def installed_version(package: str) -> str | None:
    """The version of ``package`` that ``import`` would load, from the name of the first ``NAME-VERSION.dist-info``
    directory on ``sys.path`` (what ``importlib.metadata.version`` finds first), or None. A directory scan: importing
    ``importlib.metadata`` alone cost ``posenc inspect`` about 10 ms of its 130."""
    import os
    import sys

    def normal(name: str) -> str:
        return name.lower().replace("-", "_").replace(".", "_")

    wanted = normal(package)
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                dist, _, version = name.removesuffix(".dist-info").rpartition("-")
                if normal(dist) == wanted and version:
                    return version
    return None


def newer_transformers_notice() -> str | None:
    """One line for stderr when the installed transformers is newer than the one ``model_types.json`` was generated
    from (new model types, changed class defaults: posenc may read them otherwise than it does), else None (also when
    transformers is not installed). Reads the installed version from its package metadata: nothing is imported."""
    installed = installed_version("transformers")
    if installed is None:
        return None
    data = str(generated()["transformers"])
    if _release(installed) <= _release(data):
        return None
    return (f"note: transformers {installed} is installed, newer than {data}, which posenc's model-type data was "
            "generated from: model types or class defaults added since may read otherwise; upgrade posenc, or in "
            "a checkout run python tests/harness/generate_model_types.py")


#: What the generated data cannot hold, per text model type: code in the config class or the attention module that
#: no attribute shows. Each entry is needed by a test in tests/models/test_model_types.py or
#: tests/models/test_corpus.py.
_RULES: dict[str, dict[str, Any]] = {
    # per-layer-type rope built in the class's code (see the module docstring)
    "gemma3_text": {"resolver": "gemma3"},
    "olmo3": {"resolver": "olmo3"},
    "deepseek_v4": {"resolver": "deepseek_v4"},
    # Gemma 4's head_dim is a per-layer attribute that transformers refuses to read globally
    "gemma4_text": {"resolver": "gemma4", "head_dim": 256},
    "gemma4_unified_text": {"resolver": "gemma4", "head_dim": 256},
    "diffusion_gemma_text": {"resolver": "gemma4", "head_dim": 256},
    "embedding_gemma2_text": {"resolver": "gemma4", "head_dim": 256},
    # MLA: the rope rotates qk_rope_head_dim and the attention module multiplies its softmax scale by mscale**2
    "deepseek_v2": {"mla": True}, "deepseek_v3": {"mla": True}, "deepseek_v32": {"mla": True},
    "minicpm3": {"mla": True},
    # a class field that overrides the dict's original length
    "phi3": {"original": 4096},
    # GPT-NeoX reads rotary_emb_base / rotary_pct, never rope_theta / partial_rotary_factor
    "gpt_neox": {"neox": 0.25}, "gpt_neox_japanese": {"neox": 1.0},
    # vision encoders whose rotary embedding is 2-D over image patches: no sequence positions to report
    "efficientloftr": {"image": True}, "eomt_dinov3": {"image": True}, "mlcd_vision_model": {"image": True},
    "sam3_vit_model": {"image": True},
    # rotate `rotary_dim` features in their own attention code (no rotary class for the generator to probe)
    "gptj": {"default_partial": True, "known": True}, "codegen": {"default_partial": True, "known": True},
}


def _text_kind(text: Mapping[str, Any], text_type: str) -> _Kind:
    """:func:`_kind`, and a DeepSeek-V2 text whose file says ``use_mla: false`` (DeepSeek-VL2's remote code, and
    vLLM, then build plain multi-head attention: rope over all ``hidden_size / heads`` dims, no mscale on the
    softmax) read without MLA."""
    kind = _kind(text_type)
    if kind.mla and text.get("use_mla") is False:
        # the class's head_dim (= qk_rope_head_dim) is MLA's; plain attention splits hidden_size over the heads
        return replace(kind, mla=False, head_dim=None,
                       defaults={k: v for k, v in kind.defaults.items() if k != "head_dim"})
    return kind


@functools.cache
def _kind(text_type: str) -> _Kind:
    """The class facts of a text model type: generated from transformers, then the hand-written :data:`_RULES`."""
    gen = generated()["text"].get(text_type)
    fields: dict[str, Any] = {}
    if gen is not None:
        rope = gen.get("rope")
        head = gen.get("head_dim") or {}
        defaults = dict(gen.get("defaults") or {})
        theta = gen.get("theta")
        if theta is None and rope and isinstance(rope.get("full_attention"), Mapping):
            theta = rope["full_attention"].get("rope_theta")  # per-layer defaults: the full-attention layers'
        fields = {
            "theta": float(theta) if theta is not None else 10000.0,
            "head_dim": head.get("default"),
            "max_positions": _int_or_none(defaults.get("max_position_embeddings")),
            "partial": gen.get("partial") if gen.get("partial") != 1.0 else None,  # 1.0 rotates all: no key
            "default_rope": rope if rope and (any(isinstance(v, Mapping) for v in rope.values())
                                              or rope.get("rope_type", "default") != "default") else None,
            "default_partial": bool(gen.get("default_partial")),
            "known": True,
            "defaults": defaults,
            "aliases": dict(gen.get("aliases") or {}),
            "head_dim_times": head.get("times") if head.get("derived") and head.get("times", 1) != 1 else None,
            "scales": bool(gen.get("scales", True)),
            "conversions": dict(gen.get("conversions") or {}),
            "layer_rule": gen.get("layer_types"),
        }
    fields.update(_RULES.get(text_type, {}))
    return _Kind(**fields)


#: Remote-code model types (no config class in transformers) read with Llama's rules: theta 10000, plain RoPE over
#: the whole head.
LLAMA_LIKE = frozenset({"internlm2", "yi", "baichuan"})

#: Where remote-code composites (no class in transformers) keep their language model: InternVL chat's
#: ``llm_config``, VILA's ``llm_cfg``, DeepSeek-VL2's and Janus's ``language_config``.
_REMOTE_SUBCONFIGS = ("text_config", "llm_config", "llm_cfg", "language_config")
#: Remote-code model types that transformers reads with another class.
_ALIASES = {"kimi_k2": "deepseek_v3"}
_LEGACY_LAYER_TYPES = {"mamba": "linear_attention", "attention": "full_attention", "sliding": "sliding_attention",
                       "full": "full_attention"}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


#: The largest head dim posenc reads (the largest in any model is 512; Gemma 4's global 512).
MAX_HEAD_DIM = 4096
#: Counts and lengths a config gives, with what posenc allows: (keys, least, most). A value outside would make no
#: engine's model (a window of -4096 positions, 10**30 layers) or hang the reader; ``None`` means "not given".
#: The most: a length int32 engines can index (units.MAX_LENGTH); layers, heads and head dims far above any model.
SIZE_KEYS: tuple[tuple[tuple[str, ...], int, int], ...] = (
    (("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"), 1, 1 << 31),
    (("original_max_position_embeddings",), 1, 1 << 31),
    (("num_hidden_layers", "n_layer", "num_layers"), 0, 1 << 16),
    (("full_attention_interval", "no_rope_layer_interval"), 1, 1 << 16),  # a layer period: i % it
    (("num_attention_heads", "n_head", "n_heads"), 1, 1 << 16),
    (("hidden_size", "n_embd", "d_model"), 1, 1 << 24),
    (("head_dim", "qk_rope_head_dim", "rotary_dim", "global_head_dim"), 0, MAX_HEAD_DIM),  # DeepSeek-VL2: 0
)
#: The largest float32: every engine computes the rope in float32, so a setting past it has no value there.
FLOAT32_MAX = 3.4028234663852886e38
FLOAT32_TINY = 1.1754943508222875e-38  # the smallest normal float32: a smaller theta is 0 there
#: Sizes other models give per stage or per part (SegFormer's heads [1, 2, 5, 8], LXMERT's layers per encoder):
#: a list or object there is not read as the size, and not refused.
_PER_STAGE = frozenset({"num_attention_heads", "n_head", "n_heads", "hidden_size", "n_embd", "d_model",
                        "num_hidden_layers", "n_layer", "num_layers"})
#: Rope settings that must be positive (a theta of 0 or a factor of -2 has no frequencies any engine computes).
_POSITIVE = ("rope_theta", "factor", "original_max_position_embeddings", "rope_local_base_freq",
             "compress_rope_theta", "rotary_emb_base")


def bad_sizes(text: Mapping[str, Any], where: str = "") -> list[tuple[str, Any, str]]:
    """(key, value, what is allowed) for every count or length (:data:`SIZE_KEYS`) that is not a whole number in its
    range (a list or object of heads, sizes or layers is some other model's per-stage sizes: not read) and every
    theta (:data:`_POSITIVE`) that is not a positive finite number; ``where`` prefixes the key (``text_config.``).
    ``inspect --lint`` lists them all; :func:`describe` refuses the first."""
    out: list[tuple[str, Any, str]] = []
    for keys, least, most in SIZE_KEYS:
        for key in keys:
            value = text.get(key)
            if isinstance(value, (list, dict)) and key in _PER_STAGE:
                continue  # per-stage or per-part sizes (SegFormer's heads [1, 2, 5, 8], LXMERT's layers): not read
            if value is not None and not (_is_number(value) and value == int(value) and least <= value <= most):
                out.append((f"{where}{key}", value, f"a whole number from {least:,} to {most:,}"))
    for key in _POSITIVE:
        value = text.get(key)
        if value is not None and not (_is_number(value) and value > 0):
            out.append((f"{where}{key}", value, "a finite number greater than 0"))
    return out


def check_sizes(text: Mapping[str, Any], where: str = "") -> None:
    """One PosencError for the first value :func:`bad_sizes` finds, or a rope dict that is not a JSON object (a
    false-ish value, as transformers reads it, means none)."""
    for key, value, allowed in bad_sizes(text, where)[:1]:
        raise PosencError(f"{key} = {_shown(value)} is not allowed; use {allowed}")
    for key in ("rope_scaling", "rope_parameters"):
        value = text.get(key)
        if value and not isinstance(value, Mapping):
            raise PosencError(f"{where}{key} = {_shown(value)} is not allowed; use a JSON object (or null)")
    for key in ("layer_types", "no_rope_layers", "cross_attention_layers", "compress_ratios"):
        value = text.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, (int, float, str)) for v in value)):
            raise PosencError(f"{where}{key} = {_shown(value)} is not allowed; use a list with one entry per layer "
                              "(or null)")
    archs = text.get("architectures")
    if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise PosencError(f"{where}architectures = {_shown(archs)} is not allowed; use a list of class names "
                          "(or null)")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_rope_params(params: Mapping[str, Any], where: str) -> None:
    """One clear PosencError for a rope dict the frequency functions could not read (missing key, not a number, a
    theta, factor or original length that is not positive)."""
    rope_type = str(params.get("rope_type"))
    for key in _REQUIRED.get(rope_type, ()):
        if params.get(key) is None:
            raise PosencError(f"{where}: rope_type {rope_type!r} needs {key!r}, which the config does not set")
    for key in _NUMERIC:
        value = params.get(key)
        if value is not None and not _is_number(value):
            raise PosencError(f"{where}: {key} = {_shown(value)} is not a finite number")
    if params.get("rope_theta") is None:
        raise PosencError(f"{where}: rope_theta = None is not allowed; give the rope base (10000 for Llama 2)")
    for key in _NUMERIC:
        value = params.get(key)
        if value is not None and value != 0 and not FLOAT32_TINY <= abs(value) <= FLOAT32_MAX:
            raise PosencError(f"{where}: {key} = {value!r} is not allowed; every engine computes RoPE in float32: "
                              f"use 0 or a magnitude from {FLOAT32_TINY:.6g} to {FLOAT32_MAX:.6g}")
    for key in _RATIOS:
        value = params.get(key)
        if value is not None and value <= 0:
            raise PosencError(f"{where}: {key} = {value!r} is not allowed; use a finite number greater than 0")
    factor = params.get("factor")
    if factor is not None and factor < 1:
        # scaling lengthens the context; below 1 it shortens every wavelength (and 1e-147 divides by zero in float32)
        raise PosencError(f"{where}: factor = {factor!r} is not allowed; use a number of at least 1 (1: no scaling)")
    for key in ("attention_factor", "mscale", "mscale_all_dim", "short_mscale", "long_mscale"):
        value = params.get(key)
        if value is not None and value < 0:
            raise PosencError(f"{where}: {key} = {value!r} is not allowed; use a finite number of at least 0")
    prf = params.get("partial_rotary_factor", 1.0)
    if prf is None or not 0 < prf <= 1:  # None: transformers multiplies the head dim by it (a TypeError)
        raise PosencError(f"{where}: partial_rotary_factor = {prf!r} is not allowed; use a fraction of the head "
                          "greater than 0 and at most 1")
    original = params.get("original_max_position_embeddings")
    if original is not None and not (original == int(original) and original <= 1 << 31):
        raise PosencError(f"{where}: original_max_position_embeddings = {original!r} is not allowed; use a whole "
                          f"number from 1 to {1 << 31:,}")
    for key in ("short_factor", "long_factor"):
        values = params.get(key)
        if values is not None and (not isinstance(values, list)
                                   or not all(_is_number(v) and 0 < v <= FLOAT32_MAX for v in values)):
            raise PosencError(f"{where}: {key} must be a list of numbers greater than 0 (each divides a frequency)")


@dataclass
class LayerRope:
    """One rotary embedding and the layers that use it (transformers 5 ``rope_parameters`` after standardization).

    ``layers`` lists layer indices (None when the config does not say how many layers there are); ``head_dim`` is
    set when this group's rope functions read another head dim than the model's (Gemma 4 full attention).
    """

    name: str
    params: dict[str, Any]
    layers: list[int] | None = None
    head_dim: int | None = None
    rope_key: str = ""  # the key of this dict in a per-layer-type rope_parameters ("" for a flat one)


@dataclass
class NoRopeGroup:
    """Layers that apply no positional encoding, and why."""

    name: str
    layers: list[int] | None
    reason: str


@dataclass
class ModelPositions:
    """What a config says about positions."""

    family: str  # "rope", "alibi", "learned", "sinusoidal", "relative_bias", "none" or "unknown"
    model_type: str | None
    max_position_embeddings: int | None
    head_dim: int | None = None
    layers: list[LayerRope] = field(default_factory=list)
    top_level: dict[str, Any] | None = None  # the dict transformers reads YaRN's `truncate` from
    num_heads: int | None = None
    notes: list[str] = field(default_factory=list)
    text_model_type: str | None = None
    text_source: str = ""  # "text_config" when the text model is a sub-config
    num_layers: int | None = None
    no_rope: list[NoRopeGroup] = field(default_factory=list)
    default_partial: bool = True  # plain RoPE honours partial_rotary_factor
    softmax_scale: float = 1.0  # attention-module multiplier of the usual 1/sqrt(d) scale
    softmax_scale_reason: str = ""
    engine: remote_code.EngineReading | None = None  # a remote-code family / engine-only mechanism, engine-read


#: Model types whose config class rewrites a ``yarn`` (or ``su``) dict to ``longrope`` before reading it.
REMAPS_YARN = frozenset({"phi3"})


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


#: Model types an ``architectures`` entry can name when a (remote-code) config has no model_type of its own.
def accepted_rope_types(text_type: str) -> frozenset[str] | None:
    """The rope types the text config class builds a rotary embedding for (Phi-3's rejects all but longrope), as
    probed from transformers; None when unknown (a remote-code type, a per-layer class)."""
    gen = generated()["text"].get(text_type)
    accepts = gen.get("accepts") if gen else None
    return frozenset(accepts) if accepts is not None else None


#: generated reason for a model type transformers builds no rotary embedding for (tests/harness/generate_model_types.py)
NO_ROTARY = "its decoder has no rotary embedding"


def _known_type(model_type: str) -> bool:
    data = generated()
    return model_type in data["models"] or model_type in data["text"] or model_type in data["without_rotary"] \
        or model_type in _RULES


def _arch_types() -> frozenset[str]:
    return frozenset(generated()["models"]) | frozenset(_RULES) | ALIBI_TYPES | LLAMA_LIKE | {"chatglm"}
_ARCH_SUFFIXES = ("ForCausalLM", "ForConditionalGeneration", "LMHeadModel", "Model")


def infer_model_type(cfg: Mapping[str, Any]) -> tuple[str, str] | None:
    """(model type, the architectures entry it came from) for a config without ``model_type``."""
    names = {t.replace("_", "").replace("-", ""): t for t in _arch_types()}
    archs = cfg.get("architectures")
    for arch in archs if isinstance(archs, list) else []:  # describe refuses another kind; lint reads it anyway
        if not isinstance(arch, str):
            continue
        stem = arch
        for suffix in _ARCH_SUFFIXES:
            if stem.endswith(suffix):
                stem = stem[: -len(suffix)]
                break
        found = names.get(stem.lower())
        if found:
            return found, arch
    return None


def text_config(cfg: Mapping[str, Any]) -> tuple[Mapping[str, Any], str, str]:
    """(the text model's config, its model type, where it was found), as ``get_text_config(decoder=True)``.

    The path to the decoder's config comes from the generated data (``text_config``, ``thinker_config.text_config``
    in Qwen2.5-Omni, ``decoder`` in T5Gemma); a sub-config the file leaves out is the class's defaults. A
    ``model_type`` inside it picks the class only where the composite class reads it with ``AutoConfig``. A config
    without ``model_type`` (remote code such as MiniCPM3) is read as the type its ``architectures`` names."""
    model_type = str(cfg.get("model_type") or "")
    if not model_type:
        inferred = infer_model_type(cfg)
        model_type = inferred[0] if inferred else ""
    model_type = _ALIASES.get(model_type, model_type)
    entry = generated()["models"].get(model_type)
    path: list[str] = list(entry["path"]) if entry else next(
        ([key] for key in _REMOTE_SUBCONFIGS if isinstance(cfg.get(key), Mapping)), [])
    default_type = str(entry["text_type"]) if entry else ""
    honours_inner = bool(entry["auto"]) if entry else True
    node: Mapping[str, Any] = cfg
    for i, key in enumerate(path):
        sub = node.get(key)
        if sub is None and entry and entry.get("flat") and i == 0:
            return cfg, default_type, ""  # a flat file: the class moves the text keys into text_config
        if sub is None:
            where = ".".join(path)
            return dict(entry.get("absent") or {}) if entry else {}, default_type, f"{where}{ABSENT}"
        if not isinstance(sub, Mapping):
            raise PosencError(f"{'.'.join(path[:i + 1])} must be a JSON object, got {type(sub).__name__}")
        node = sub
    if not path:
        if entry and entry.get("decoder_prefix"):
            cfg = _decoder_keys(cfg)
        return cfg, _ALIASES.get(default_type or model_type, default_type or model_type), ""
    inner = _ALIASES.get(str(node.get("model_type") or ""), str(node.get("model_type") or ""))
    if inner and default_type and not _known_type(inner):
        inner = ""  # a sub-config type transformers has no class for (EXAONE 4.5's exaone4_5_text): the default
    text_type = (inner or default_type or model_type) if honours_inner else default_type
    return node, _ALIASES.get(text_type, text_type), ".".join(path)


def _decoder_keys(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """An encoder-decoder config as ``get_text_config(decoder=True)`` hands it out: ``decoder_layers`` ->
    ``num_hidden_layers``, ``decoder_attention_heads`` -> ``num_attention_heads``, ``decoder_X`` -> ``X``."""
    out = dict(cfg)
    for key, value in cfg.items():
        if key.startswith("decoder_"):
            new = {"decoder_layers": "num_hidden_layers", "decoder_attention_heads": "num_attention_heads"}.get(
                key, key.removeprefix("decoder_"))
            out[new] = value
    return out


def with_class_defaults(text: Mapping[str, Any], kind: _Kind) -> Mapping[str, Any]:
    """``text`` as the config class holds it: ``attribute_map`` aliases resolved both ways, the class defaults of
    sizes and windows filled in where the file is silent, and a head dim the class always derives (Zamba2:
    ``2 * hidden_size // num_attention_heads``) put in its place."""
    if not kind.defaults and not kind.aliases and kind.head_dim_times is None:
        return text
    out = dict(text)
    for alias, target in kind.aliases.items():
        if target not in out and alias in out:
            out[target] = out[alias]
    for key, value in kind.defaults.items():
        out.setdefault(key, value)
    for alias, target in kind.aliases.items():
        if target in out:
            out[alias] = out[target]
    hidden, heads = out.get("hidden_size"), out.get("num_attention_heads")
    if kind.head_dim_times is not None and isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        out["head_dim"] = kind.head_dim_times * hidden // heads
    return out


ABSENT = " (absent: class defaults)"


def with_text(cfg: Mapping[str, Any], where: str, text: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` with the text model's config (found at ``where``, as :func:`text_config` names it) replaced by
    ``text``; a sub-config the file leaves out is written where the class looks for it."""
    path = where.removesuffix(ABSENT).split(".") if where else []
    if not path:
        return text
    out = dict(cfg)
    node = out
    for key in path[:-1]:
        child = node.get(key)
        node[key] = dict(child) if isinstance(child, Mapping) else {}
        node = node[key]
    node[path[-1]] = text
    return out


def _head_dim(text: Mapping[str, Any], kind: _Kind, text_type: str) -> int | None:
    for key in ("qk_rope_head_dim", "head_dim", "rotary_dim", "global_head_dim"):
        value = text.get(key)
        if value is not None and not (_is_number(value) and value == int(value)):
            raise PosencError(f"{key} = {value!r} is not a whole number")
    for key, rules in (kind.conversions.get("keys") or {}).items():
        # a dim the class makes config.head_dim whatever head_dim the file writes (GLM-5's qk_rope_head_dim)
        if any(r["field"] == "head_dim" and r.get("wins") for r in rules) and text.get(key):
            return int(text[key])
    if kind.mla and text.get("qk_rope_head_dim"):
        return int(text["qk_rope_head_dim"])  # MLA: the config class sets head_dim = qk_rope_head_dim
    if kind.mla:
        return 32 if text_type == "minicpm3" else 64
    if text.get("head_dim"):
        return int(text["head_dim"])
    if kind.head_dim:
        return kind.head_dim
    hidden = text.get("hidden_size", text.get("n_embd", text.get("d_model")))
    heads = text.get("num_attention_heads", text.get("n_head", text.get("n_heads")))
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        if hidden // heads > MAX_HEAD_DIM:
            raise PosencError(f"hidden_size {hidden} / num_attention_heads {heads} gives head_dim {hidden // heads}; "
                              f"posenc reads head dims up to {MAX_HEAD_DIM} (no model comes near)")
        return hidden // heads
    return None


def _flat(rp: Mapping[str, Any], text: Mapping[str, Any], kind: _Kind, text_type: str,
          max_pos: int | None) -> dict[str, Any]:
    """A flat rope dict as the config class standardizes it (see the module docstring)."""
    out = dict(rp)
    rope_type = _rope_type(out)
    if rope_type in _LEGACY_TYPES:
        rope_type = _LEGACY_TYPES[rope_type]
    if text_type in REMAPS_YARN and rope_type == "yarn":
        rope_type = "longrope"  # Phi3Config remaps legacy yarn (and su) to longrope
    out["rope_type"] = rope_type
    out.pop("type", None)
    if kind.neox is not None:
        top, prf = text.get("rotary_emb_base"), text.get("rotary_pct", kind.neox)
    else:
        top = text.get("rope_theta", text.get("rotary_emb_base"))
        prf = text.get("partial_rotary_factor", text.get("rotary_pct", kind.partial))
    if "rope_theta" not in out:
        if top is not None and not _is_number(top):
            raise PosencError(f"rope_theta = {top!r} is not a finite number")
        out["rope_theta"] = float(top) if top is not None else kind.theta
    if prf is not None:
        out.setdefault("partial_rotary_factor", prf)
    if rope_type in ORIGINAL_FROM_DICT:
        top_original = text.get("original_max_position_embeddings", kind.original)
        if top_original is not None:
            # the rotary class standardizes again, when the top-level key has become an attribute: it wins
            out["original_max_position_embeddings"] = top_original
        elif max_pos is not None:
            out.setdefault("original_max_position_embeddings", max_pos)
    return out


def _rope_type(rp: Mapping[str, Any]) -> str:
    """The rope type a dict names (``rope_type``, else legacy ``type``, else default); not a string is an error."""
    rope_type = rp.get("rope_type", rp.get("type", "default"))
    if not isinstance(rope_type, str):
        raise PosencError(f"rope_type = {_shown(rope_type)} is not allowed; use a rope type name such as 'default', "
                          "'linear', 'dynamic', 'yarn', 'longrope' or 'llama3'")
    return rope_type


def _nested_standardize(params: dict[str, Any], max_pos: int | None) -> dict[str, Any]:
    out = dict(params)
    rope_type = _rope_type(out)
    out["rope_type"] = _LEGACY_TYPES.get(rope_type, rope_type)
    out.pop("type", None)
    if out["rope_type"] in ORIGINAL_FROM_DICT and max_pos is not None:
        out.setdefault("original_max_position_embeddings", max_pos)
    return out


def _rope_dict(text: Mapping[str, Any]) -> dict[str, Any]:
    legacy = text.get("rope_scaling")
    rp = legacy if legacy else text.get("rope_parameters")
    if rp and not isinstance(rp, Mapping):
        raise PosencError(f"rope_scaling / rope_parameters must be a JSON object, got {rp!r}")
    return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in (rp or {}).items()}


def _gemma3(text: Mapping[str, Any], kind: _Kind, max_pos: int | None) -> dict[str, dict[str, Any]]:
    """Gemma3TextConfig: full layers take rope_theta and any legacy scaling; sliding layers rope_local_base_freq."""
    given = text.get("rope_parameters")
    rp = {k: dict(v) for k, v in given.items() if isinstance(v, Mapping)} if isinstance(given, Mapping) else {}
    # a flat rope_parameters is not a per-layer dict: the class ignores it
    rp = {k: v for k, v in rp.items() if k in ("full_attention", "sliding_attention")}
    full = rp.get("full_attention") or {"rope_type": "default"}
    if text.get("rope_scaling"):
        full.update(text["rope_scaling"])
    full.setdefault("rope_theta", text.get("rope_theta", 1e6))
    sliding = rp.get("sliding_attention") or {"rope_type": "default"}
    sliding.setdefault("rope_theta", text.get("rope_local_base_freq", 10000.0))
    return {"full_attention": _nested_standardize(full, max_pos),
            "sliding_attention": _nested_standardize(sliding, max_pos)}


def _olmo3(text: Mapping[str, Any], kind: _Kind, max_pos: int | None) -> dict[str, dict[str, Any]]:
    """Olmo3Config: scaling on full layers; rope_theta is consumed there, so sliding layers keep 500000."""
    given = text.get("rope_parameters")
    rp = {k: dict(v) for k, v in given.items() if isinstance(v, Mapping)} if isinstance(given, Mapping) else {}
    full = rp.get("full_attention") or {"rope_type": "default"}
    if text.get("rope_scaling"):
        full.update(text["rope_scaling"])
    full.setdefault("rope_theta", text.get("rope_theta", kind.theta))
    sliding = rp.get("sliding_attention") or {"rope_type": "default"}
    sliding.setdefault("rope_theta", kind.theta)
    return {"full_attention": _nested_standardize(full, max_pos),
            "sliding_attention": _nested_standardize(sliding, max_pos)}


def _gemma4(text: Mapping[str, Any], kind: _Kind, max_pos: int | None) -> dict[str, dict[str, Any]]:
    """Gemma4TextConfig: a per-layer-type rope_parameters as given (all or nothing), no legacy keys."""
    given = text.get("rope_parameters")
    if not isinstance(given, Mapping) or not given:
        given = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                 "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                    "rope_theta": 1000000.0}}
    return {k: _nested_standardize(dict(v), max_pos) for k, v in given.items() if isinstance(v, Mapping)}


def _deepseek_v4(text: Mapping[str, Any], kind: _Kind, max_pos: int | None,
                 head_dim: int | None) -> dict[str, dict[str, Any]]:
    """DeepseekV4Config: "main" plain rope (rope_theta) and "compress" (the yarn block, compress_rope_theta)."""
    prf = text.get("partial_rotary_factor")
    if prf is None:
        legacy = text.get("qk_rope_head_dim")
        prf = legacy / (head_dim or 512) if legacy is not None else 64 / 512
    rp = _rope_dict(text)
    if isinstance(rp.get("main"), dict) and isinstance(rp.get("compress"), dict):
        return {"main": rp["main"], "compress": rp["compress"]}
    yarn = _nested_standardize({k: v for k, v in rp.items() if k not in ("main", "compress")}, max_pos)
    main = {"rope_type": "default", "rope_theta": float(text.get("rope_theta", 10000.0)),
            "partial_rotary_factor": prf}
    compress = {**yarn, "rope_theta": float(text.get("compress_rope_theta", 160000.0)), "partial_rotary_factor": prf}
    if compress["rope_type"] == "yarn":
        compress.setdefault("attention_factor", 1.0)  # V4 does not scale cos/sin with YaRN's mscale
    return {"main": main, "compress": compress}


def _layer_types(text: Mapping[str, Any], text_type: str, n: int | None) -> list[str] | None:
    """The per-layer attention types the config class builds (None when the config gives no layer count)."""
    given = text.get("layer_types")
    if isinstance(given, list) and all(isinstance(t, str) for t in given):
        return [_LEGACY_LAYER_TYPES.get(t) or t for t in given]
    blocks = text.get("block_configs")
    if isinstance(blocks, list) and all(isinstance(b, Mapping) for b in blocks):
        # DeciLM / Nemotron-NAS: a block whose attention is removed (no_op) or replaced by a linear layer
        def attends(block: Mapping[str, Any]) -> bool:
            attn = block.get("attention")
            return not (isinstance(attn, Mapping) and (attn.get("no_op") or attn.get("replace_with_linear")))

        return ["full_attention" if attends(b) else "no_attention" for b in blocks]
    if n is None:
        return None
    cycle = text.get("block_types")
    if text_type == "recurrent_gemma" and isinstance(cycle, list) and cycle and all(isinstance(b, str) for b in cycle):
        return [str(cycle[i % len(cycle)]) for i in range(n)]  # the class repeats its block pattern
    resolver = _kind(text_type).resolver
    if resolver in ("gemma3", "gemma4"):
        pattern = text.get("sliding_window_pattern", text.get("_sliding_window_pattern", 6))
        pattern = pattern if isinstance(pattern, int) and pattern > 0 else 6
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
        if resolver == "gemma4":
            types[-1] = "full_attention"
        return types
    if text_type == "olmo3":
        return ["sliding_attention" if (i + 1) % 4 else "full_attention" for i in range(n)]
    if text_type in ("cohere2", "cohere2_moe"):
        # Cohere2Config: a (legacy) sliding_window_pattern, default 4; Cohere2-MoE's first_k_dense_replace dense
        # prefix layers follow prefix_dense_sliding_window_pattern (default 1: all full attention)
        pattern, prefix = text.get("sliding_window_pattern", 4), text.get("prefix_dense_sliding_window_pattern", 1)
        k = int(text.get("first_k_dense_replace") or 0) if text_type == "cohere2_moe" else 0
        if not all(isinstance(v, int) and v > 0 for v in (pattern, prefix)):
            return None
        return (["sliding_attention" if (i + 1) % prefix else "full_attention" for i in range(min(k, n))]
                + ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n - min(k, n))])
    if text_type in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"):
        interval = text.get("full_attention_interval", 4)
        return ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(n)]
    if text_type == "exaone4":
        pattern = text.get("sliding_window_pattern", 4)
        if text.get("sliding_window") is None or not isinstance(pattern, int) or pattern <= 0:
            return ["full_attention"] * n
        return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    if text_type == "mllama_text_model":
        cross = set(text.get("cross_attention_layers") or [])
        return ["cross_attention" if i in cross else "full_attention" for i in range(n)]
    if text_type == "deepseek_v4":
        ratios = text.get("compress_ratios")
        if isinstance(ratios, list):
            names = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
            return [names.get(r, "compressed_sparse_attention") for r in ratios[:n]]
    return None


#: Model types whose config's ``no_rope_layers`` (1 = rotates; from ``no_rope_layer_interval``, default 4, when
#: absent) picks the layers without RoPE.
NO_ROPE_LAYERS_TYPES = frozenset({"llama4_text", "smollm3", "mistral_large4_text"})


def _no_rope_flags(text: Mapping[str, Any], text_type: str, n: int | None) -> list[int] | None:
    """Llama 4 / SmolLM3 / Mistral Large 4 ``no_rope_layers``: 1 where the layer rotates, 0 where it uses no
    positions; MUSE's
    ``layer_rope_theta``: 0 where the model passes the layer no position embeddings."""
    thetas = text.get("layer_rope_theta")
    if isinstance(thetas, list) and all(_is_number(t) for t in thetas) and n is not None:
        return [int(bool(t)) for t in thetas]
    if text_type not in NO_ROPE_LAYERS_TYPES or n is None:
        return None
    flags = text.get("no_rope_layers")
    # Llama 4 replaces an empty list by the interval's; SmolLM3 and Mistral Large 4 keep what is given
    if isinstance(flags, list) and (flags or text_type != "llama4_text"):
        return [int(bool(f)) for f in flags]
    interval = text.get("no_rope_layer_interval", 4)
    return [int((i + 1) % interval != 0) for i in range(n)]


def _no_rope_reason(text: Mapping[str, Any], text_type: str, layer_type: str) -> str | None:
    """Why layers of ``layer_type`` apply no RoPE in this model type, or None when they do."""
    if layer_type in _NO_ATTENTION_LAYER_TYPES:
        return _NO_ATTENTION_LAYER_TYPES[layer_type]
    if text_type in FULL_NOPE_TYPES and layer_type == "full_attention" and text.get("sliding_window") is not None:
        return (f"{text_type} full-attention layers skip RoPE when the model has a sliding window (NoPE), as "
                "EXAONE 4 does")
    if text_type in SLIDING_ONLY_TYPES and layer_type != "sliding_attention":
        return f"{text_type} applies RoPE on sliding-window layers only: its {layer_type} layers use no positions"
    given = text.get("rope_parameters")
    if isinstance(given, Mapping) and layer_type in given and given[layer_type] is None:
        return f"rope_parameters gives {layer_type} layers no rope dict (null): they use no positional encoding"
    if layer_type == "cross_attention":
        return "cross-attention to the image tokens: no RoPE"
    if layer_type == "no_attention":
        return "the attention block is removed (no_op) or replaced by a linear layer: no attention, no RoPE"
    return None


def _forced_rope(text: Mapping[str, Any], text_type: str, i: int) -> bool:
    """Cohere2-MoE's ``force_rope``: a dense (MLP) layer rotates whatever its attention type when
    ``prefix_dense_sliding_window_pattern`` is 1."""
    if text_type != "cohere2_moe" or text.get("prefix_dense_sliding_window_pattern", 1) != 1:
        return False
    mlp = text.get("mlp_layer_types")
    if isinstance(mlp, list):
        return i < len(mlp) and mlp[i] == "dense"
    return i < int(text.get("first_k_dense_replace") or 0)  # the class's mlp_layer_types: dense first, then sparse


def _rope_evidence(text: Mapping[str, Any]) -> list[str]:
    return [k for k in _ROPE_KEYS if k in text]


def _family_without_rope(cfg: Mapping[str, Any], text: Mapping[str, Any], text_type: str) -> str | None:
    attn = text.get("attn_config")
    if text.get("alibi") is True or text.get("position_embedding_type") == "alibi":
        return "alibi"
    # BERT-style classes (ESM) build a rotary embedding only when position_embedding_type says "rotary"
    if text.get("position_embedding_type") == "absolute":
        return "learned"
    if text.get("position_embedding_type") in ("relative_key", "relative_key_query"):
        return "relative_bias"
    if isinstance(attn, Mapping) and "alibi" in attn:
        return "alibi" if attn["alibi"] else None
    if text_type in ALIBI_TYPES:
        return "alibi"
    if text_type in NO_POSITION_TYPES:
        return "none"
    if text_type in POSITION_TYPE_GATED and text.get("position_embedding_type") != "rope":
        return "none"
    if text_type in SINUSOIDAL_TYPES:
        return "sinusoidal"
    if text_type in RELATIVE_BIAS_TYPES:
        return "relative_bias"
    if text_type in generated()["models"] or text_type in generated()["text"]:
        return None  # transformers builds a rotary embedding for this type
    if not _rope_evidence(text) and not _kind(text_type).known and text_type not in LLAMA_LIKE:
        if text_type in LEARNED_TYPES or text.get("position_embedding_type") == "absolute" or "n_positions" in text:
            return "learned"
        return "unknown"
    if generated()["without_rotary"].get(text_type) == NO_ROTARY and not _kind(text_type).known:
        return "unknown"  # a vision or audio encoder, or positions in code posenc has no rule for
    return None


def describe(cfg: Mapping[str, Any]) -> ModelPositions:
    """Classify a model config and resolve every rope group as transformers 5.x would build it (remote-code families
    and engine-only mechanisms: as the engine serving them reads them, see :mod:`posenc_cli.models.remote_code`)."""
    check_sizes(cfg)
    text, text_type, where = text_config(cfg)
    if where and not where.endswith(ABSENT):
        check_sizes(text, f"{where}.")
    reading = remote_code.read(cfg)
    if reading is not None:
        return _engine_read(reading)
    model_type = str(cfg.get("model_type", "")) or None
    kind = _text_kind(text, text_type)
    if kind.image:
        raise PosencError(f"{text_type} is a vision encoder whose rotary embedding turns with 2-D image-patch "
                          "coordinates; posenc reads the rotary embeddings of sequence models only")
    text = with_class_defaults(text, kind)
    max_pos = _int_or_none(text.get("max_position_embeddings", text.get("n_positions", text.get("max_seq_len"))))
    if max_pos is None:
        max_pos = kind.max_positions
    heads = _int_or_none(text.get("num_attention_heads", text.get("n_head", text.get("n_heads"))))
    n_layers = _int_or_none(text.get("num_hidden_layers", text.get("n_layer", text.get("num_layers"))))
    notes: list[str] = []
    if model_type is None and text_type:
        arch = (infer_model_type(cfg) or ("", "?"))[1]
        notes.append(f"no model_type in the config: read as {text_type} (from architectures {arch!r})")
    if where:
        notes.append(f"text model read from {where} (model_type {text_type})")
    base = ModelPositions("rope", model_type, max_pos, None, num_heads=heads, notes=notes,
                          text_model_type=text_type or None, text_source=where, num_layers=n_layers)
    family = _family_without_rope(cfg, text, text_type)
    if family is not None:
        base.family = family
        base.head_dim = _head_dim(text, kind, text_type)
        if family == "none":
            evidence = _rope_evidence(text)
            reason = f"{text_type} has no rotary embedding: its attention layers (if any) use no positional encoding"
            gate = ""
            if text_type in POSITION_TYPE_GATED:
                gate = f" with position_embedding_type {text.get('position_embedding_type')!r} (only 'rope' rotates)"
                reason = (f"{text_type}{gate} builds no rotary embedding: its attention layers use no positional "
                          "encoding (NoPE)")
            base.no_rope.append(NoRopeGroup("all layers", list(range(n_layers)) if n_layers else None, reason))
            if evidence:
                notes.append(f"the config sets {', '.join(evidence)}, but {text_type}{gate} never applies RoPE")
        elif family == "unknown" and generated()["without_rotary"].get(text_type) == NO_ROTARY:
            notes.append(f"transformers {generated()['transformers']} builds no rotary embedding for {text_type} from "
                         "its config (a vision or audio encoder, or positions its attention code computes): posenc "
                         "does not read it")
        elif family == "unknown":
            seen = [f"{k}={cfg[k]!r}" for k in ("architectures", "auto_map") if k in cfg]
            notes.append("no model_type posenc knows and no RoPE, ALiBi or position keys"
                         + (f" ({'; '.join(seen)})" if seen else ""))
        return base
    if not kind.known and text_type not in LLAMA_LIKE:
        keys = ", ".join(_rope_evidence(text))
        archs = cfg.get("architectures")
        notes.append(f"model_type {text_type or '(none)'!r} has no rule in posenc: read like Llama from {keys}"
                     + (f" (architectures {archs})" if archs else ""))
    head_dim = _head_dim(text, kind, text_type)
    base.head_dim = head_dim
    base.default_partial = kind.default_partial
    src = text
    # GPT-J / CodeGen rotate `rotary_dim` features in their attention code; a class transformers builds a rotary
    # embedding for reads only its rope dict (MiniMax-M3-VL's rotary_dim 64 of 128 is not applied)
    if (text.get("rotary_dim") and head_dim and "partial_rotary_factor" not in text and kind.neox is None
            and text_type not in generated()["text"]):
        src = {**text, "partial_rotary_factor": int(text["rotary_dim"]) / head_dim}  # GPT-J style
    layer_types = _layer_types(text, text_type, n_layers)
    per_type, nested = _resolve(src, text_type, kind, max_pos, head_dim)
    if nested and layer_types is None:
        layer_types = generated_layer_types(kind, n_layers)
    if nested and kind.resolver == "flat":
        # the per-layer dict as the class holds it, so that a layer type it gives no rope reads as such
        built = _class_rope_dict(src, kind)
        if any(v is None for v in built.values()):
            text = {**text, "rope_parameters": built}
    base.top_level = {} if nested else per_type[""]
    if not kind.scales and not nested and per_type[""].get("rope_type", "default") != "default":
        notes.append(f"{text_type}'s rotary embedding computes plain RoPE whatever the rope dict says: "
                     f"rope_type {per_type[''].get('rope_type')!r} is not applied")
        per_type = {"": {"rope_type": "default", "rope_theta": per_type[""]["rope_theta"]}}
    for name, params in per_type.items():  # every dict the file gives, also one no layer ends up using
        check_rope_params(params, name or "rope parameters")
    _assign_layers(base, per_type, text, text_type, layer_types, n_layers)
    used = {layer.rope_key for layer in base.layers}
    for name, params in per_type.items():
        if name not in used and base.layers:
            # transformers builds it (DeepSeek-V4-Pro's "main" when no layer is sliding-only): said, not reported
            notes.append(f"rope dict {name!r} ({params.get('rope_type', 'default')}, theta "
                         f"{float(params['rope_theta']):g}) is built by transformers but no layer uses it")
    if kind.mla:
        flat = base.layers[0].params if base.layers else {}
        if flat.get("rope_type", "default") != "default" and flat.get("mscale_all_dim"):
            if flat.get("factor") is None:  # the attention module reads rope_parameters["factor"]: a KeyError
                raise PosencError(f"{text_type} with rope_type {flat.get('rope_type')!r} and mscale_all_dim needs "
                                  "'factor': its attention module reads it for the softmax scale")
            m = yarn_mscale(float(flat["factor"]), float(flat["mscale_all_dim"]))
            base.softmax_scale = m * m
            base.softmax_scale_reason = (f"{text_type} attention multiplies its softmax scale by "
                                         f"mscale(factor {flat['factor']:g}, mscale_all_dim "
                                         f"{flat['mscale_all_dim']:g})^2")
    if kind.resolver == "gemma4":
        global_dim = text.get("global_head_dim", 512)
        per_layer = text.get("per_layer_config")
        if isinstance(per_layer, Mapping):  # a re-saved config keeps it per layer index
            dims = [v.get("head_dim") for v in per_layer.values() if isinstance(v, Mapping) and v.get("head_dim")]
            global_dim = dims[0] if dims else global_dim
        for layer in base.layers:
            if layer.name == "full_attention":
                layer.head_dim = int(global_dim)
    if text_type == "llama4_text" and base.no_rope and text.get("attn_temperature_tuning", True):
        notes.append("Llama 4 scales the queries of its layers without RoPE by log1p(floor((pos + 1) / "
                     f"{text.get('floor_scale', 8192)})) * {text.get('attn_scale', 0.1)} + 1 (temperature tuning)")
    beta = base.layers[0].params.get("llama_4_scaling_beta") if base.layers else None
    if text_type == "ministral3" and beta:
        notes.append(f"Ministral 3 scales queries by 1 + {beta} * ln(1 + floor(pos / original length)) "
                     "outside the rope")
    return base


def _engine_read(r: remote_code.EngineReading) -> ModelPositions:
    model = ModelPositions(r.position_family if r.served else "unknown", r.model_type, r.max_position, r.head_dim,
                           num_heads=r.num_heads, notes=list(r.notes), text_model_type=r.family,
                           text_source=r.text_source, num_layers=r.num_layers, engine=r)
    if model.family == "rope" and r.rope is not None:
        check_rope_params(r.rope, "rope parameters")
        model.layers.append(LayerRope("all layers", dict(r.rope), list(range(r.num_layers)) if r.num_layers else None))
        model.top_level = model.layers[0].params
    return model


def _class_rope_dict(text: Mapping[str, Any], kind: _Kind) -> dict[str, Any]:
    """The file's rope dict as the class nests it (generated ``conversions``): keys beside the layer-type dicts of a
    per-layer rope_parameters are dropped where the class ignores them (transformers nests only the keys that are
    layer types); a flat dict is copied to the layer types the class puts it on (Ergo: sliding layers, and full
    attention gets none). A null entry stays: that layer type gets no RoPE."""
    rp = _rope_dict(text)
    if not rp and kind.default_rope is not None:
        rp = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in kind.default_rope.items()}
    conv = kind.conversions
    if any(isinstance(v, Mapping) for v in rp.values()):
        strays = [k for k, v in rp.items() if not isinstance(v, Mapping) and v is not None]
        read = [k for k in strays if (conv.get("stray") or {}).get(k, "ignored") != "ignored"]
        if read:
            raise PosencError(f"rope_parameters mixes layer-type dicts with {', '.join(map(repr, read))}, which the "
                              "config class reads in a way posenc does not model; write one dict per layer type")
        return {k: v for k, v in rp.items() if k not in strays}
    fill = conv.get("fill")
    if rp and fill and kind.neox is None and _rope_dict(text):
        # the file's own flat dict: the class fills in its default_theta, not the theta of the dict it builds when
        # the file has none (Ministral 3: 10000 against its default YaRN dict's 1e6), and no fraction of its own
        if "rope_theta" not in rp and text.get("rope_theta") is None:
            rp["rope_theta"] = fill["rope_theta"]
        if "partial_rotary_factor" not in rp and text.get("partial_rotary_factor") is None and kind.partial:
            rp["partial_rotary_factor"] = fill.get("partial_rotary_factor") or 1.0
    flat = conv.get("flat")
    if rp and flat is not None and not flat.get("to") and kind.default_rope is not None:
        # the class puts a flat dict on no layer type and builds its own per-layer dicts (Gemma 3n, T5Gemma 2)
        return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in kind.default_rope.items()}
    if rp and flat and flat.get("to"):
        theta = text.get("rope_theta", flat.get("theta"))
        copied = {**rp, "rope_theta": rp.get("rope_theta", theta)} if theta is not None else dict(rp)
        return {**{g: dict(copied) for g in flat["to"]}, **dict.fromkeys(flat.get("none", ()))}
    return rp


def _converted(per_type: dict[str, dict[str, Any]], given: Mapping[str, Any], text: Mapping[str, Any], kind: _Kind,
               head_dim: int | None) -> dict[str, dict[str, Any]]:
    """The resolved dicts with the generated key conversions applied (MiniMax-M2's ``rotary_dim`` becomes
    ``partial_rotary_factor = rotary_dim / head_dim``; Dots3's ``swa_rope_theta`` the sliding layers' theta): a key
    the file sets gives its group's field, unless the file's own rope dict for that group sets the field, or the
    class lets the top-level field written beside it win. ``rope_theta`` / ``partial_rotary_factor`` of a flat dict
    are the rope standardization of :func:`_flat`; of a per-layer class, the groups the class puts them in (Gemma 3n:
    full attention only)."""
    for key, rules in (kind.conversions.get("keys") or {}).items():
        raw = text.get(key)
        if not isinstance(raw, (int, float)) or not _is_number(raw):
            continue
        value = float(raw)
        for rule in rules:
            group, fld = rule["group"], rule["field"]
            if fld == "head_dim" or (not group and key in ("rope_theta", "partial_rotary_factor")):
                continue  # read by _head_dim; a flat dict's by _flat
            own = given.get(group) if group else given
            if group not in per_type or (isinstance(own, Mapping) and fld in own):
                continue
            if key != fld and not rule.get("wins") and text.get(fld) is not None:
                continue
            if rule["transform"] == "per_head_dim":
                if not head_dim:
                    continue
                per_type[group][fld] = value / head_dim
            else:
                per_type[group][fld] = value
    return per_type


def generated_layer_types(kind: _Kind, n: int | None) -> list[str] | None:
    """The layer types the config class builds when the file names none and they depend on the layer index alone
    (generated ``layer_types``: MiMo-V2-Flash's full attention at layer 0 and every sixth)."""
    rule = kind.layer_rule
    if not rule or n is None:
        return None
    head, cycle = list(rule["head"]), list(rule["cycle"])
    return [head[i] if i < len(head) else cycle[(i - len(head)) % len(cycle)] for i in range(n)]


def _resolve(text: Mapping[str, Any], text_type: str, kind: _Kind, max_pos: int | None,
             head_dim: int | None) -> tuple[dict[str, dict[str, Any]], bool]:
    """The rope dict(s) as the config class builds them: ``({"": flat}, False)`` or ``({layer type: dict}, True)``."""
    if kind.resolver == "flat":
        rp = _class_rope_dict(text, kind)
        if not _rope_dict(text) and kind.conversions.get("ignored"):
            # the class's own rope dict holds these already: the top-level keys are not read (Moonshine Streaming)
            text = {k: v for k, v in text.items() if k not in kind.conversions["ignored"]}
        if any(isinstance(v, Mapping) for v in rp.values()):
            # per layer type (v5); a null entry gives that layer type no RoPE (Beam)
            per_type = {k: _flat(v, text, kind, text_type, max_pos) for k, v in rp.items() if isinstance(v, Mapping)}
            return _converted(per_type, _rope_dict(text), text, kind, head_dim), True
        flat = {"": _flat(rp, text, kind, text_type, max_pos)}
        return _converted(flat, _rope_dict(text), text, kind, head_dim), False
    if kind.resolver == "deepseek_v4":
        return _deepseek_v4(text, kind, max_pos, head_dim), True
    builders: dict[str, Callable[..., dict[str, dict[str, Any]]]] = {
        "gemma3": _gemma3, "olmo3": _olmo3, "gemma4": _gemma4}
    return builders[kind.resolver](text, kind, max_pos), True


def rope_dicts(cfg: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], bool]:
    """The text model's rope dict(s) as transformers 5 stores them in ``rope_parameters`` (what ``convert`` writes):
    ``({"": flat}, False)``, or ``({layer type: dict}, True)`` for classes that build one per layer type."""
    text, text_type, _ = text_config(cfg)
    kind = _text_kind(text, text_type)
    text = with_class_defaults(text, kind)
    max_pos = _int_or_none(text.get("max_position_embeddings")) or kind.max_positions
    return _resolve(text, text_type, kind, max_pos, _head_dim(text, kind, text_type))


def _assign_layers(model: ModelPositions, per_type: dict[str, dict[str, Any]], text: Mapping[str, Any],
                   text_type: str, layer_types: list[str] | None, n: int | None) -> None:
    """Split the layers into rope groups (one per rope dict) and groups without RoPE."""
    flags = _no_rope_flags(text, text_type, n)
    indices = list(range(len(layer_types))) if layer_types is not None else (list(range(n)) if n else None)

    def owner(i: int) -> str | None:
        """The rope dict layer i uses, or None when it has none."""
        lt = layer_types[i] if layer_types is not None and i < len(layer_types) else ""
        if flags is not None and i < len(flags) and not flags[i]:
            return None
        if lt and _no_rope_reason(text, text_type, lt) and not _forced_rope(text, text_type, i):
            return None
        if "" in per_type:
            return ""
        if text_type == "deepseek_v4":
            return "main" if lt == "sliding_attention" else "compress"
        return lt if lt in per_type else None

    if indices is None:  # no layer count: every rope dict, no layer lists
        for name, params in per_type.items():
            model.layers.append(LayerRope(name or "all layers", params, rope_key=name))
        return
    groups: dict[str, list[int]] = {}
    missing: dict[str, list[int]] = {}
    for i in indices:
        owned = owner(i)
        if owned is None:
            lt = layer_types[i] if layer_types is not None and i < len(layer_types) else ""
            flagged = flags is not None and i < len(flags) and not flags[i]
            missing.setdefault("no_rope" if flagged or not lt else lt, []).append(i)
        else:
            groups.setdefault(owned, []).append(i)
    everyone = len(groups) == 1 and not missing
    for name, params in per_type.items():
        if name in groups:
            label = "all layers" if everyone else (name or "rotary layers")
            model.layers.append(LayerRope(label, params, groups[name], rope_key=name))
    for lt, layers in missing.items():
        reason = _no_rope_reason(text, text_type, lt) or (
            "no_rope_layers marks these layers 0: they attend without positional encoding")
        model.no_rope.append(NoRopeGroup(lt if lt != "no_rope" else "no_rope_layers", layers, reason))


def window_of(model: ModelPositions, layer: LayerRope) -> Window | None:
    """The window ``layer`` serves in ``model`` (:func:`posenc_cli.rope.windows.window`); None without a
    ``max_position_embeddings``."""
    if model.max_position_embeddings is None:
        return None
    return window(layer.params, model.max_position_embeddings, model.text_model_type or model.model_type)


# the dtype names a config's `torch_dtype` / `dtype` uses, as posenc names them
_CONFIG_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32", "float64": "float64",
                  "bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32", "fp32": "float32"}


def declared_dtype(cfg: Mapping[str, Any]) -> tuple[str | None, str]:
    """(dtype the weights are published in, where it was read) from ``dtype`` / ``torch_dtype``.

    transformers 5 writes ``dtype``, 4 wrote ``torch_dtype``; multimodal configs may carry it only in
    ``text_config``. ``None`` when the config names no usable dtype (absent, ``"auto"``).
    """
    for where, source in (("", cfg), ("text_config.", cfg.get("text_config"))):
        if not isinstance(source, Mapping):
            continue
        for key in ("dtype", "torch_dtype"):
            value = source.get(key)
            if isinstance(value, str):
                name = _CONFIG_DTYPES.get(value.removeprefix("torch.").lower())
                if name is not None:
                    return name, f"{where}{key} in the config"
    return None, "the config names no dtype"


#: Keys each method reads from a model's own rope dict when the command line leaves them out (the same rope type:
#: gpt-oss keeps beta 32/1 and truncate false, DeepSeek keeps its mscale pair, llama3 its band factors).
INHERITED = {
    "yarn": ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate"),
    "llama3": ("low_freq_factor", "high_freq_factor"),
    "longrope": ("short_factor", "long_factor"),
}
# keys that belong to some rope type (or that a request always decides): never carried over as "extra"
_TYPED_KEYS = {"rope_type", "type", "rope_theta", "partial_rotary_factor", "factor", "original_max_position_embeddings",
               "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate",
               "low_freq_factor", "high_freq_factor", "short_factor", "long_factor", "short_mscale", "long_mscale"}


@dataclass(frozen=True)
class ModelFacts:
    """What a scaling request takes from a model: the rope group an extension changes (its theta, head dim, rotary
    fraction, own rope dict), the window the model serves and the length its scaling refers to, and how its file
    writes rope settings (so a patched file keeps its format and nesting)."""

    theta: float
    head_dim: int | None
    partial_rotary_factor: float | None
    scale_from: int | None  # the length a different method scales from: the original length, or the window
    params: dict[str, Any]
    notes: tuple[str, ...] = ()
    text_config: bool = False  # the rope settings live in text_config (multimodal)
    rope_parameters: bool = False  # the file writes transformers 5's rope_parameters (and no rope_scaling)
    groups: tuple[str, ...] = ()  # every rope group of the model, when there are several
    group: str = ""  # the rope group an extension changes (the scaled one, else full attention), when several
    native: int | None = None  # the window the model serves as shipped (dynamic: what its factor was set for)
    label: str = ""
    model_type: str = ""  # the text model's type (the config class that reads the rope settings)
    default_partial: bool = True  # the class applies partial_rotary_factor to plain RoPE (ModelPositions')
    original: int | None = None  # the length its scaling refers to (posenc_cli.rope.windows.Window.original)
    window_note: str | None = None  # why the window is not max_position_embeddings, when a documented fact says so

    def inherited(self, method: str) -> dict[str, Any]:
        """Parameters of the model's rope dict that ``method`` reads, when the model already uses that method."""
        if self.params.get("rope_type") != METHODS.get(method):
            return {}
        # a zero mscale means "not set" to transformers (it tests truthiness), not a value to pass on
        return {k: self.params[k] for k in INHERITED.get(method, ())
                if k in self.params and not (k.startswith("mscale") and not self.params[k])}

    @property
    def extra(self) -> dict[str, Any]:
        return {k: v for k, v in self.params.items() if k not in _TYPED_KEYS}

    @property
    def scaled(self) -> bool:
        return bool(self.params.get("rope_type", "default") != "default")


def extended_group(model: ModelPositions) -> LayerRope:
    """The rope group a context extension changes: the one already scaled, else full attention, else the first
    (Gemma 3 and OLMo 3 extend their full-attention layers and keep the sliding ones)."""
    return next((g for g in model.layers if g.params.get("rope_type", "default") != "default"),
                next((g for g in model.layers if g.name == "full_attention"), model.layers[0]))


def model_facts(model: ModelPositions, label: str, group: str | None = None,
                cfg: Mapping[str, Any] | None = None) -> ModelFacts:
    """The facts of a model a scaling request needs: the group named ``group``, else :func:`extended_group`.

    ``cfg`` (the config as written) tells whether the file uses transformers 5's ``rope_parameters``.
    """
    if model.family != "rope" or not model.layers:
        raise PosencError(f"{label} does not describe a RoPE model ({model.family}); there is nothing to scale")
    names = tuple(layer.name for layer in model.layers) if len(model.layers) > 1 else ()
    chosen = [layer for layer in model.layers if layer.name == group]
    if group is not None and not chosen:
        raise PosencError(f"{label} has no rope group {group!r}; it has: {', '.join(g.name for g in model.layers)}")
    layer = chosen[0] if chosen else extended_group(model)
    params = dict(layer.params)
    prf = params.get("partial_rotary_factor")
    served = window_of(model, layer)
    v5 = False
    if cfg is not None:
        text = text_config(cfg)[0]
        v5 = isinstance(text.get("rope_parameters"), Mapping) and not text.get("rope_scaling")
    notes: tuple[str, ...] = ()
    if model.engine is not None:  # remote code / engine-only mechanism: no transformers parity to claim
        refusal, note = remote_code.scaling_advice(model.engine)
        if refusal:
            raise PosencError(f"{label}: {refusal}")
        notes += (f"note: {note}",) if note else ()
    if names:
        notes += (f"note: {label} has per-layer rope ({', '.join(names)}); extending {layer.name}, the others keep "
                  "their settings",)
    return ModelFacts(float(params["rope_theta"]), layer.head_dim or model.head_dim,
                      float(prf) if prf is not None else None, served.scale_from if served else None, params, notes,
                      model.text_source == "text_config", v5, names, layer.name if names else "",
                      served.native if served else None, label,
                      model.text_model_type or model.model_type or "", model.default_partial,
                      served.original if served else None,
                      served.note(label, model.max_position_embeddings) if served and model.max_position_embeddings
                      else None)

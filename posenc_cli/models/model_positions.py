"""What a model's config says about positions: :class:`ModelPositions`, and :func:`describe`, which builds it the
way transformers 5.x builds the model (stdlib only).

:func:`describe` turns a config dict (from a config.json, a Hub id, a model folder or a GGUF file: see
:mod:`posenc_cli.models.sources`) into a :class:`ModelPositions`: per group of layers, whether they rotate, the rope
dict as transformers resolves it (:mod:`posenc_cli.models.rope_dicts`), the head dim its rope functions read, plus
the model's windows and any attention scaling applied outside the rope. The rules follow transformers 5.25's config
classes (:mod:`posenc_cli.models.model_types`) and rotary embeddings; this module holds the ones about layers and
families:

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

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from posenc_cli.errors import PosencError
from posenc_cli.models.config_keys import ABSENT, head_dim_of, infer_model_type, text_config, with_class_defaults
from posenc_cli.models.layer_types import (
    gemma4_global_head_dim,
    layer_types_of,
    no_rope_flags,
)
from posenc_cli.models.model_types import (
    ALIBI_TYPES,
    LLAMA_LIKE,
    NO_ROTARY,
    Kind,
    generated,
    generated_layer_types,
    kind_of,
    text_kind,
)
from posenc_cli.models.rope_dicts import class_rope_dict, resolve
from posenc_cli.models.value_checks import check_rope_params, check_sizes, int_or_none
from posenc_cli.rope.attention_factors import yarn_mscale

if TYPE_CHECKING:
    from posenc_cli.models import remote_code

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
    from_gguf: bool = False  # read from a GGUF's header (the file engines serve), not from a config.json


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


def _assign_layers(model: ModelPositions, per_type: dict[str, dict[str, Any]], text: Mapping[str, Any],
                   text_type: str, layer_types: list[str] | None, n: int | None) -> None:
    """Split the layers into rope groups (one per rope dict) and groups without RoPE."""
    flags = no_rope_flags(text, text_type, n)
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
    if not _rope_evidence(text) and not kind_of(text_type).known and text_type not in LLAMA_LIKE:
        if text_type in LEARNED_TYPES or text.get("position_embedding_type") == "absolute" or "n_positions" in text:
            return "learned"
        return "unknown"
    if generated()["without_rotary"].get(text_type) == NO_ROTARY and not kind_of(text_type).known:
        return "unknown"  # a vision or audio encoder, or positions in code posenc has no rule for
    return None


def describe(cfg: Mapping[str, Any]) -> ModelPositions:
    """Classify a model config and resolve every rope group as transformers 5.x would build it (remote-code families
    and engine-only mechanisms: as the engine serving them reads them, see :mod:`posenc_cli.models.remote_code`)."""
    check_sizes(cfg)
    text, text_type, where = text_config(cfg)
    if where and not where.endswith(ABSENT):
        check_sizes(text, f"{where}.")
    from posenc_cli.models import remote_code  # about 5 ms of tables: posenc memory reads layers, not engines

    reading = remote_code.read(cfg)
    if reading is not None:
        return _engine_read(reading)
    kind = text_kind(text, text_type)
    if kind.image:
        raise PosencError(f"{text_type} is a vision encoder whose rotary embedding turns with 2-D image-patch "
                          "coordinates; posenc reads the rotary embeddings of sequence models only")
    text = with_class_defaults(text, kind)
    base = _base(cfg, text, text_type, where, kind)
    family = _family_without_rope(cfg, text, text_type)
    if family is not None:
        return _without_rope(base, family, cfg, text, text_type, kind)
    if not kind.known and text_type not in LLAMA_LIKE:
        keys = ", ".join(_rope_evidence(text))
        archs = cfg.get("architectures")
        base.notes.append(f"model_type {text_type or '(none)'!r} has no rule in posenc: read like Llama from {keys}"
                          + (f" (architectures {archs})" if archs else ""))
    text = _rope_groups(base, text, text_type, kind)
    if kind.mla:
        _mla_softmax_scale(base, text_type)
    if kind.resolver == "gemma4":
        _gemma4_global_head_dim(base, text)
    base.notes += _query_scaling_notes(base, text, text_type)
    return base


def _base(cfg: Mapping[str, Any], text: Mapping[str, Any], text_type: str, where: str, kind: Kind) -> ModelPositions:
    """The model's sizes and where its text model was read, as a RoPE model with no groups yet."""
    model_type = str(cfg.get("model_type", "")) or None
    max_pos = int_or_none(text.get("max_position_embeddings", text.get("n_positions", text.get("max_seq_len"))))
    if max_pos is None:
        max_pos = kind.max_positions
    heads = int_or_none(text.get("num_attention_heads", text.get("n_head", text.get("n_heads"))))
    n_layers = int_or_none(text.get("num_hidden_layers", text.get("n_layer", text.get("num_layers"))))
    notes: list[str] = []
    if model_type is None and text_type:
        arch = (infer_model_type(cfg) or ("", "?"))[1]
        notes.append(f"no model_type in the config: read as {text_type} (from architectures {arch!r})")
    if where:
        notes.append(f"text model read from {where} (model_type {text_type})")
    return ModelPositions("rope", model_type, max_pos, None, num_heads=heads, notes=notes,
                          text_model_type=text_type or None, text_source=where, num_layers=n_layers)


def _without_rope(base: ModelPositions, family: str, cfg: Mapping[str, Any], text: Mapping[str, Any], text_type: str,
                  kind: Kind) -> ModelPositions:
    """``base`` as a model of ``family`` (no RoPE, or positions posenc does not read), with what is said about it."""
    base.family = family
    base.head_dim = head_dim_of(text, kind, text_type)
    if family == "none":
        evidence = _rope_evidence(text)
        reason = f"{text_type} has no rotary embedding: its attention layers (if any) use no positional encoding"
        gate = ""
        if text_type in POSITION_TYPE_GATED:
            gate = f" with position_embedding_type {text.get('position_embedding_type')!r} (only 'rope' rotates)"
            reason = (f"{text_type}{gate} builds no rotary embedding: its attention layers use no positional "
                      "encoding (NoPE)")
        n_layers = base.num_layers
        base.no_rope.append(NoRopeGroup("all layers", list(range(n_layers)) if n_layers else None, reason))
        if evidence:
            base.notes.append(f"the config sets {', '.join(evidence)}, but {text_type}{gate} never applies RoPE")
    elif family == "unknown" and generated()["without_rotary"].get(text_type) == NO_ROTARY:
        base.notes.append(f"transformers {generated()['transformers']} builds no rotary embedding for {text_type} "
                          "from its config (a vision or audio encoder, or positions its attention code computes): "
                          "posenc does not read it")
    elif family == "unknown":
        seen = [f"{k}={cfg[k]!r}" for k in ("architectures", "auto_map") if k in cfg]
        base.notes.append("no model_type posenc knows and no RoPE, ALiBi or position keys"
                          + (f" ({'; '.join(seen)})" if seen else ""))
    return base


def _rope_groups(base: ModelPositions, text: Mapping[str, Any], text_type: str, kind: Kind) -> Mapping[str, Any]:
    """Resolve the rope dict(s), check them and split the layers into ``base``'s rope groups and groups without
    RoPE; returns ``text`` as the class holds it (with the per-layer dict it built, when a layer type gets none)."""
    head_dim = head_dim_of(text, kind, text_type)
    base.head_dim = head_dim
    base.default_partial = kind.default_partial
    src = text
    # GPT-J / CodeGen rotate `rotary_dim` features in their attention code; a class transformers builds a rotary
    # embedding for reads only its rope dict (MiniMax-M3-VL's rotary_dim 64 of 128 is not applied)
    if (text.get("rotary_dim") and head_dim and "partial_rotary_factor" not in text and kind.neox is None
            and text_type not in generated()["text"]):
        src = {**text, "partial_rotary_factor": int(text["rotary_dim"]) / head_dim}  # GPT-J style
    n_layers = base.num_layers
    layer_types = layer_types_of(text, text_type, n_layers)
    per_type, nested = resolve(src, text_type, kind, base.max_position_embeddings, head_dim)
    if nested and layer_types is None:
        layer_types = generated_layer_types(kind, n_layers)
    if nested and kind.resolver == "flat":
        # the per-layer dict as the class holds it, so that a layer type it gives no rope reads as such
        built = class_rope_dict(src, kind)
        if any(v is None for v in built.values()):
            text = {**text, "rope_parameters": built}
    base.top_level = {} if nested else per_type[""]
    if not kind.scales and not nested and per_type[""].get("rope_type", "default") != "default":
        base.notes.append(f"{text_type}'s rotary embedding computes plain RoPE whatever the rope dict says: "
                          f"rope_type {per_type[''].get('rope_type')!r} is not applied")
        per_type = {"": {"rope_type": "default", "rope_theta": per_type[""]["rope_theta"]}}
    for name, params in per_type.items():  # every dict the file gives, also one no layer ends up using
        check_rope_params(params, name or "rope parameters")
    _assign_layers(base, per_type, text, text_type, layer_types, n_layers)
    used = {layer.rope_key for layer in base.layers}
    for name, params in per_type.items():
        if name not in used and base.layers:
            # transformers builds it (DeepSeek-V4-Pro's "main" when no layer is sliding-only): said, not reported
            base.notes.append(f"rope dict {name!r} ({params.get('rope_type', 'default')}, theta "
                              f"{float(params['rope_theta']):g}) is built by transformers but no layer uses it")
    return text


def _mla_softmax_scale(base: ModelPositions, text_type: str) -> None:
    """MLA attention (DeepSeek V2/V3, Kimi K2, MiniCPM3) multiplies its softmax scale by ``mscale**2`` when the rope
    is scaled and ``mscale_all_dim`` is set."""
    flat = base.layers[0].params if base.layers else {}
    if flat.get("rope_type", "default") == "default" or not flat.get("mscale_all_dim"):
        return
    if flat.get("factor") is None:  # the attention module reads rope_parameters["factor"]: a KeyError
        raise PosencError(f"{text_type} with rope_type {flat.get('rope_type')!r} and mscale_all_dim needs "
                          "'factor': its attention module reads it for the softmax scale")
    m = yarn_mscale(float(flat["factor"]), float(flat["mscale_all_dim"]))
    base.softmax_scale = m * m
    base.softmax_scale_reason = (f"{text_type} attention multiplies its softmax scale by "
                                 f"mscale(factor {flat['factor']:g}, mscale_all_dim {flat['mscale_all_dim']:g})^2")


def _gemma4_global_head_dim(base: ModelPositions, text: Mapping[str, Any]) -> None:
    """Gemma 4's full-attention layers rotate with :func:`gemma4_global_head_dim`."""
    for layer in base.layers:
        if layer.name == "full_attention":
            layer.head_dim = gemma4_global_head_dim(text)


def _query_scaling_notes(base: ModelPositions, text: Mapping[str, Any], text_type: str) -> list[str]:
    """What a model multiplies its queries by outside the rope (Llama 4's temperature tuning, Ministral 3's beta)."""
    notes = []
    if text_type == "llama4_text" and base.no_rope and text.get("attn_temperature_tuning", True):
        notes.append("Llama 4 scales the queries of its layers without RoPE by log1p(floor((pos + 1) / "
                     f"{text.get('floor_scale', 8192)})) * {text.get('attn_scale', 0.1)} + 1 (temperature tuning)")
    beta = base.layers[0].params.get("llama_4_scaling_beta") if base.layers else None
    if text_type == "ministral3" and beta:
        notes.append(f"Ministral 3 scales queries by 1 + {beta} * ln(1 + floor(pos / original length)) "
                     "outside the rope")
    return notes


def _engine_read(r: remote_code.EngineReading) -> ModelPositions:
    model = ModelPositions(r.position_family if r.served else "unknown", r.model_type, r.max_position, r.head_dim,
                           num_heads=r.num_heads, notes=list(r.notes), text_model_type=r.family,
                           text_source=r.text_source, num_layers=r.num_layers, engine=r)
    if model.family == "rope" and r.rope is not None:
        check_rope_params(r.rope, "rope parameters")
        model.layers.append(LayerRope("all layers", dict(r.rope), list(range(r.num_layers)) if r.num_layers else None))
        model.top_level = model.layers[0].params
    return model

"""Training-framework renderings of a scaling request: Megatron-LM flags, Megatron-Bridge provider fields, torchtitan
and torchtune RoPE fields, each from the request's one rope dict.

Each rendering either reproduces transformers' numbers (inv_freq and the cos/sin attention factor, as
:func:`posenc_cli.rope.frequencies.for_request` computes them) or refuses with a :class:`PosencError` that states the
measured difference and the nearest setting the framework can express. Where a framework computes something else
(Megatron-Core's and torchtune's llama3 with their fixed 1/4/8192 constants, Megatron's rounded base), the numbers
come from posenc's own rope functions with the framework's parameters: no second formula.
``tests/trainers/test_frameworks.py``
runs each framework's own RoPE code (pinned versions below) against transformers to prove both the renderings and
the refusals.

The same functions say what each framework computes when it trains a model as shipped (:func:`megatron_setup`,
:func:`bridge_import`, :func:`torchtitan_setup`, :func:`torchtune_setup`, each a :class:`Trained`: the rope dict
transformers would need to compute the framework's numbers); ``posenc check --trainers`` runs them
(:mod:`posenc_cli.trainers.runs`), ``posenc scale`` refuses where they differ from transformers.

Versions modelled: megatron-core 0.19.2 (it ships Megatron-LM's ``megatron/training`` CLI), megatron-bridge 0.6.2,
torchtitan 0.3.0, torchtune 0.6.1. MLA models (DeepSeek-V2/V3, Kimi K2) get Megatron's ``--multi-latent-attention``
flags or the MLA provider fields, proven against megatron-core's YaRN class as MLA builds it.

stdlib at import (``posenc scale`` loads this module only for these formats); numpy loads when a refusal measures.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from posenc_cli.engines.runs import CANNOT_EXPRESS, NOT_MODELLED
from posenc_cli.errors import PosencError
from posenc_cli.rope.attention_factors import yarn_attention_factor, yarn_mscale, yarn_mscale_for
from posenc_cli.rope.scaling import ScaleRequest, max_position_embeddings, rope_parameters

if TYPE_CHECKING:
    from posenc_cli.models.facts import ModelFacts
    from posenc_cli.rope.frequencies import Frequencies

VERSIONS = {"megatron": "0.19.2", "megatron-bridge": "0.6.2", "torchtitan": "0.3.0", "torchtune": "0.6.1"}
#: How a trainer's refusal starts (the verdict ``posenc check`` gives it): the framework has no setting for this
#: rope, it stops before training, or posenc does not model this case.
WILL_NOT_START = "will not start"
#: Megatron-LM 0.19.2's gpt_config_from_args never forwards --rope-scaling-factor (NVIDIA/Megatron-LM #6305): the
#: llama3 factor the model gets is RotaryEmbedding's default
MEGATRON_LM_LLAMA3_FACTOR = 8.0


class Refusal(PosencError):
    """A framework cannot train this rope: ``verdict`` is one of :data:`CANNOT_EXPRESS`, :data:`WILL_NOT_START`,
    :data:`NOT_MODELLED` (``posenc scale`` prints it as one error line, ``posenc check`` as the verdict)."""

    def __init__(self, verdict: str, message: str) -> None:
        super().__init__(message)
        self.verdict = verdict


@dataclass(frozen=True)
class Rope:
    """One rope group as transformers reads it (``params``: a flat ``rope_parameters`` dict, ``rope_theta``
    inside; ``max_pos``: the ``max_position_embeddings`` it is read with) and the length a framework trains it at
    (``target``); ``original_max``: the length a request scales from (quoted in messages)."""

    params: dict[str, Any]
    head_dim: int
    max_pos: int
    target: int
    default_partial: bool = True
    model_type: str = ""
    original_max: int = 0
    stage: bool = False  # ``target`` is one training run's length (a pick stage, scale --seq-len)

    @classmethod
    def of_request(cls, req: ScaleRequest, group: dict[str, Any], facts: ModelFacts | None) -> Rope:
        return cls(group, req.head_dim, max_position_embeddings(req), req.target, req.default_partial,
                   facts.model_type if facts is not None else "", req.original_max, req.stage)

    def freqs(self, params: Mapping[str, Any] | None = None, default_partial: bool | None = None,
              seq_len: int | None = None) -> Frequencies:
        """transformers' numbers for ``params`` (default: this group's) read like this group, at ``seq_len``
        (default: the training length)."""
        from posenc_cli.rope.frequencies import RopeSpec, compute

        spec = RopeSpec(dict(self.params if params is None else params), self.head_dim, self.max_pos,
                        default_partial=self.default_partial if default_partial is None else default_partial)
        return compute(spec, self.target if seq_len is None else seq_len)


@dataclass
class Trained:
    """What a framework computes for one rope group, as the rope dict that makes transformers compute the same
    inv_freq and cos/sin factor (an explicit ``attention_factor`` where the framework's differs), the multiplier it
    puts on the softmax scale (``own_attention``: the framework's attention module sets it whatever the model's
    does, as Megatron's MLA; else it multiplies the model's), and how it pairs dims (``rotate-half``: transformers'
    layout; ``interleaved``: adjacent pairs, which needs the q/k permutation on conversion)."""

    params: dict[str, Any]
    default_partial: bool = True
    softmax_scale: float = 1.0
    own_attention: bool = False
    layout: str = "rotate-half"
    notes: list[str] = field(default_factory=list)

    def freqs(self, rope: Rope, seq_len: int | None = None) -> Frequencies:
        return rope.freqs(self.params, self.default_partial, seq_len)

#: The llama3 constants Megatron-Core (``RotaryEmbedding._apply_scaling``), torchtune (``Llama3ScaledRoPE`` as its
#: builders call it) and Megatron-Bridge's Llama mapping cannot change: low_freq_factor, high_freq_factor, original.
FIXED_LLAMA3 = (1.0, 4.0, 8192)
#: Model types whose attention is MLA: Megatron builds them from MLATransformerConfig (--multi-latent-attention).
MLA_TYPES = frozenset({"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "kimi_linear"})
#: torchtitan models built with CosSinRoPE (models/qwen3, qwen3_5, gpt_oss); the others use ComplexRoPE
COSSIN_PREFIXES = ("qwen3", "gpt_oss")
#: Relative tolerance for "the same inv_freq" in the measurements a refusal quotes (float32 noise is ~1e-7).
RTOL = 1e-6
SAME = "inv_freq the same"

Renderer = Callable[[ScaleRequest, "dict[str, Any]", "ModelFacts | None"], "tuple[str, list[str]]"]


def _num(x: float) -> str:
    """A number as a config or flag value: integers without a point, others with repr precision."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


def fixed_llama3(group: Mapping[str, Any]) -> dict[str, Any]:
    """``group``'s llama3 dict with the constants Megatron-Core and torchtune cannot change (:data:`FIXED_LLAMA3`)."""
    low, high, original = FIXED_LLAMA3
    return {**group, "low_freq_factor": low, "high_freq_factor": high, "original_max_position_embeddings": original}


def measured(hf: Frequencies, other: Frequencies) -> str:
    """'N of M pairs differ (up to X x)', comparing inv_freq at rtol :data:`RTOL`."""
    import numpy as np

    a, b = hf.inv_freq.astype(np.float64), other.inv_freq.astype(np.float64)
    if a.shape != b.shape:
        return f"{b.size} frequencies instead of {a.size}"
    off = ~np.isclose(b, a, rtol=RTOL, atol=0.0)
    if not off.any():
        return SAME
    ratio = np.maximum(b / a, a / b)[off]
    pairs = np.flatnonzero(off)
    return (f"inv_freq differs in {int(off.sum())} of {a.size} pairs ({int(pairs[0])}-{int(pairs[-1])}), "
            f"up to {float(ratio.max()):.4g}x")


def _rope_type(group: Mapping[str, Any]) -> str:
    return str(group.get("rope_type", group.get("type", "default")))


def _rotary_fraction(rope: Rope, group: dict[str, Any]) -> float:
    from posenc_cli.rope.frequencies import RopeSpec

    spec = RopeSpec(group, rope.head_dim, rope.max_pos, default_partial=rope.default_partial)
    return spec.rotary_dim / rope.head_dim


def _yarn_factor(rope: Rope, group: Mapping[str, Any]) -> float:
    """YaRN's factor; a dict without one scales by max_position_embeddings / original, as transformers does."""
    factor = group.get("factor")
    return float(factor) if factor is not None else rope.max_pos / int(group["original_max_position_embeddings"])


def _plain_only(group: dict[str, Any], who: str) -> None:
    for key in ("mrope_section", "mrope_interleaved"):
        if key in group:
            raise Refusal(NOT_MODELLED, f"{who}: this model's rope has {key} (multimodal rope); posenc renders "
                          "text-model RoPE only for trainers")


def _llama3_fixed(rope: Rope, group: dict[str, Any], who: str) -> None:
    given = (float(group["low_freq_factor"]), float(group["high_freq_factor"]),
             int(group["original_max_position_embeddings"]))
    if given != FIXED_LLAMA3:
        raise Refusal(
            CANNOT_EXPRESS,
            f"{who} fixes llama3's low_freq_factor/high_freq_factor/original length at 1/4/8192; this request has "
            f"{given[0]:g}/{given[1]:g}/{given[2]}: with factor {float(group['factor']):g} that "
            f"{measured(rope.freqs(group), rope.freqs(fixed_llama3(group)))} from transformers; nearest it can "
            f"express: llama3 factor {float(group['factor']):g} at 1/4/8192 (those numbers), or yarn")


# ---------------------------------------------------------------------------------------------------------- Megatron

def _megatron_mscale(group: Mapping[str, Any], factor: float, mscale_all_dim: float, who: str,
                     caveats: list[str]) -> float:
    """Megatron-Core's ``mscale`` that gives transformers' YaRN attention factor with ``mscale_all_dim`` as given.

    Megatron has no attention_factor and always multiplies cos/sin by ``mscale(s, mscale) / mscale(s,
    mscale_all_dim)`` (``_yarn_get_concentration_factor``), even where transformers ignores mscale (mscale_all_dim
    unset) or takes an explicit attention_factor: then mscale is solved for (a caveat says so)."""
    attention = yarn_attention_factor(group, factor)
    mscale, given_all = group.get("mscale"), group.get("mscale_all_dim")
    if group.get("attention_factor") is None and mscale and given_all and float(given_all) == mscale_all_dim:
        return float(mscale)
    if group.get("attention_factor") is None and not mscale and not given_all and mscale_all_dim == 0.0:
        return 1.0  # Megatron's defaults: 0.1 ln s + 1, transformers' default
    naive = yarn_mscale(factor, float(mscale or 1.0)) / yarn_mscale(factor, float(given_all or 0.0))
    if factor <= 1 or not math.isfinite(attention):
        raise Refusal(CANNOT_EXPRESS, f"{who}: YaRN attention factor {attention:.6g} at factor {factor:g} cannot be "
                      f"expressed (Megatron gives {naive:.6g})")
    m = yarn_mscale_for(attention, factor, mscale_all_dim)
    if math.isclose(naive, attention, rel_tol=1e-12):
        return m
    caveats.append(f"Megatron-Core has no YaRN attention_factor and takes mscale/mscale_all_dim as a ratio even when "
                   f"one is unset: mapping this dict's fields one to one gives {naive:.6g} where transformers uses "
                   f"{attention:.6g}; mscale {m:.10g} with mscale_all_dim {mscale_all_dim:g} gives transformers' "
                   "factor")
    return m


def megatron_fields(rope: Rope, group: dict[str, Any], who: str = "Megatron-Core", *,
                    solve: bool = True) -> tuple[dict[str, Any], list[str]]:
    """Megatron-Core's GPTModel/TransformerConfig rope fields for ``group`` (MLATransformerConfig's for an MLA model,
    :data:`MLA_TYPES`), and caveats; refuses (:class:`Refusal`) what Megatron-Core 0.19.2 has no setting for.

    ``solve``: choose the fields that reproduce transformers (refusing what Megatron computes otherwise: llama3
    constants it cannot set, MLA's always-rounded YaRN; solving YaRN's mscale for transformers' attention factor);
    else map the dict one to one, as a user would."""
    _plain_only(group, who)
    if rope.model_type in MLA_TYPES:
        return _mla_fields(rope, group, who, solve=solve)
    rope_type = _rope_type(group)
    fraction = _rotary_fraction(rope, group)
    fields: dict[str, Any] = {"rotary_base": float(group["rope_theta"])}
    if fraction != 1.0:
        fields["rotary_percent"] = fraction
    caveats: list[str] = []
    if rope_type == "default":
        fields = {"position_embedding_type": "rope", **fields}
    elif rope_type == "linear":
        fields = {"position_embedding_type": "rope", **fields,
                  "seq_len_interpolation_factor": float(group["factor"])}
    elif rope_type == "llama3":
        if solve:
            _llama3_fixed(rope, group, who)
        fields = {"position_embedding_type": "rope", **fields, "rope_scaling": True,
                  "rope_scaling_factor": float(group["factor"])}
    elif rope_type == "yarn":
        if fraction != 1.0:
            whole = rope.freqs({k: v for k, v in group.items() if k != "partial_rotary_factor"})
            raise Refusal(CANNOT_EXPRESS,
                          f"{who}'s YaRN (Megatron-Core 0.19.2) ignores rotary_percent: it rotates all {rope.head_dim} "
                          f"dims of each head (open PR NVIDIA/Megatron-LM #7476), transformers "
                          f"{int(round(fraction * rope.head_dim))}: {whole.inv_freq.size} frequencies instead of "
                          f"{int(round(fraction * rope.head_dim)) // 2}; nearest it can express: YaRN on the whole "
                          "head, or linear")
        factor = _yarn_factor(rope, group)
        attention = yarn_attention_factor(group, factor)
        mscale, mscale_all_dim = group.get("mscale"), group.get("mscale_all_dim")
        if not solve:
            m, m_all = float(mscale or 1.0), float(mscale_all_dim or 0.0)  # Megatron's defaults where unset
        else:
            # GPT attention leaves its softmax scale alone: mscale_all_dim only divides, so 0 keeps the arithmetic
            # plain where mscale is solved for
            both = group.get("attention_factor") is None and mscale
            m_all = float(mscale_all_dim) if both and mscale_all_dim else 0.0
            m = _megatron_mscale(group, factor, m_all, who, caveats)
        fields = {"position_embedding_type": "yarn", **fields,
                  "yarn_rotary_scaling_factor": factor,
                  "yarn_original_max_position_embeddings": int(group["original_max_position_embeddings"]),
                  "yarn_beta_fast": float(group.get("beta_fast") or 32.0),
                  "yarn_beta_slow": float(group.get("beta_slow") or 1.0),
                  "yarn_mscale": m, "yarn_mscale_all_dim": m_all,
                  "yarn_correction_range_round_to_int": bool(group.get("truncate", True))}
        if attention != 1.0:
            caveats.append(f"Megatron-Core multiplies cos/sin by YaRN's attention factor ({attention:.6g}) on its "
                           "unfused RoPE path only: a TE fused RoPE falls back to it, fused_single_qkv_rope skips it")
    else:
        raise Refusal(CANNOT_EXPRESS, f"{who} has no {rope_type} RoPE (it has rope, linear, llama3 and yarn); "
                      "nearest it can express: posenc scale yarn or linear with the same factor")
    fields["max_position_embeddings"] = rope.target
    return fields, caveats


#: MLATransformerConfig's YaRN fields that Megatron-LM's CLI cannot set (its --yarn-* flags fill the GPT-only
#: yarn_* attributes, argument_utils.py _apply_yarn_config_from_args returns early for MLA): their class defaults
MLA_CLI_FIXED = {"original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0}


def _mla_fields(rope: Rope, group: dict[str, Any], who: str, *, solve: bool) -> tuple[dict[str, Any], list[str]]:
    """MLATransformerConfig's rope fields (Megatron-Core 0.19.2: multi_latent_attention.py builds RotaryEmbedding or
    YarnRotaryEmbedding over qk_pos_emb_head_dim and scales its softmax by mscale(rotary_scaling_factor,
    mscale_all_dim)**2), or a refusal with what Megatron would compute. ``solve`` as in :func:`megatron_fields`:
    one to one, mscale and mscale_all_dim are the dict's (the class defaults 1 and 0 where unset)."""
    rope_type = _rope_type(group)
    fraction = _rotary_fraction(rope, group)
    caveats = ["Megatron's MLA de-interleaves the rope half of q and k (apply_rotary_pos_emb with "
               "mla_rotary_interleaved=True), as transformers' DeepSeek-V3 with rope_interleave true: convert the "
               "weights with Megatron-Bridge's DeepSeek mapping"]
    fields: dict[str, Any] = {"position_embedding_type": "rope", "multi_latent_attention": True}
    if rope_type == "default":
        # Megatron's MLA softmax scale takes mscale(rotary_scaling_factor, mscale_all_dim) whatever the rope type:
        # factor 1 keeps it 1, as transformers' plain rope does
        fields |= {"rope_type": "rope", "rotary_base": float(group["rope_theta"]), "qk_pos_emb_head_dim": rope.head_dim}
        if fraction != 1.0:
            fields["rotary_percent"] = fraction
        fields |= {"rotary_scaling_factor": 1.0, "mscale": 1.0, "mscale_all_dim": 0.0}
    elif rope_type == "yarn":
        if fraction != 1.0:
            raise Refusal(CANNOT_EXPRESS, f"{who}'s MLA YaRN rotates all qk_pos_emb_head_dim ({rope.head_dim}) dims "
                          f"(it passes no rotary_percent); this model rotates {fraction:g} of them")
        factor = _yarn_factor(rope, group)
        if group.get("truncate", True) is False:
            rounded = f"{measured(rope.freqs(), rope.freqs({**group, 'truncate': True}))} from transformers'"
            if solve:
                raise Refusal(CANNOT_EXPRESS, f"{who}'s MLA YaRN always rounds the correction range "
                              f"(multi_latent_attention.py passes no correction_range_round_to_int): rounded, "
                              f"Megatron's {rounded} (truncate false); nearest it can express: the same YaRN with "
                              "truncate true (those numbers)")
            caveats.append(f"{who}'s MLA YaRN always rounds the correction range: Megatron's {rounded} "
                           "(truncate false)")
        # both MLA attentions multiply the softmax scale by mscale(factor, mscale_all_dim)^2 (transformers' only when
        # mscale_all_dim is set: 0 gives 1 in Megatron too), so mscale_all_dim is kept and mscale solved around it
        m_all = float(group.get("mscale_all_dim") or 0.0)
        softmax = yarn_mscale(factor, m_all) ** 2
        m = _megatron_mscale(group, factor, m_all, who, caveats) if solve else float(group.get("mscale") or 1.0)
        fields |= {"rope_type": "yarn", "rotary_base": float(group["rope_theta"]),
                   "qk_pos_emb_head_dim": rope.head_dim, "rotary_scaling_factor": factor,
                   "original_max_position_embeddings": int(group["original_max_position_embeddings"]),
                   "beta_fast": float(group.get("beta_fast") or 32.0),
                   "beta_slow": float(group.get("beta_slow") or 1.0), "mscale": m, "mscale_all_dim": m_all}
        if softmax != 1.0:
            caveats.append(f"Megatron's MLA and transformers both multiply the softmax scale by mscale({factor:g}, "
                           f"mscale_all_dim {m_all:g})^2 = {softmax:.6g}")
    else:
        raise Refusal(CANNOT_EXPRESS, f"{who}'s multi-latent attention has no {rope_type} RoPE "
                      "(MLATransformerConfig.rope_type is rope or yarn); nearest it can express: posenc scale yarn "
                      "with the same factor")
    fields["max_position_embeddings"] = rope.target
    return fields, caveats


def megatron_core(fields: Mapping[str, Any]) -> Trained:
    """What Megatron-Core 0.19.2's rotary classes compute from GPTModel's rope fields (gpt_model.py L166-209):
    ``RotaryEmbedding`` (plain, positions divided by ``seq_len_interpolation_factor``, llama3 with factor only) or
    ``YarnRotaryEmbedding`` (every dim of the head; cos/sin x ``mscale(s, mscale) / mscale(s, mscale_all_dim)``,
    ``0.1 ln s + 1`` when either is None; no rounding when ``correction_range_round_to_int`` is falsy); MLA fields
    (``multi_latent_attention``) go to :func:`_mla_core`."""
    if fields.get("multi_latent_attention"):
        return _mla_core(fields)
    base = float(fields["rotary_base"])
    notes: list[str] = []
    if fields["position_embedding_type"] == "yarn":
        beta_fast, beta_slow = fields.get("yarn_beta_fast"), fields.get("yarn_beta_slow")
        if beta_fast is None or beta_slow is None:
            raise Refusal(WILL_NOT_START, "Megatron-Core's YarnRotaryEmbedding raises TypeError with beta_fast/"
                          "beta_slow None (_yarn_find_correction_dim multiplies them)")
        factor = float(fields["yarn_rotary_scaling_factor"])
        mscale, mscale_all_dim = fields.get("yarn_mscale"), fields.get("yarn_mscale_all_dim")
        attention = yarn_mscale(factor) if mscale is None or mscale_all_dim is None else (
            yarn_mscale(factor, float(mscale)) / yarn_mscale(factor, float(mscale_all_dim)))
        if fields.get("rotary_percent", 1.0) != 1.0:
            notes.append("Megatron-Core's YaRN ignores rotary_percent (open PR NVIDIA/Megatron-LM #7476)")
        params = {"rope_type": "yarn", "rope_theta": base, "factor": factor,
                  "original_max_position_embeddings": int(fields["yarn_original_max_position_embeddings"]),
                  "beta_fast": float(beta_fast), "beta_slow": float(beta_slow),
                  "truncate": bool(fields.get("yarn_correction_range_round_to_int")), "attention_factor": attention}
        return Trained(params, notes=notes)
    params = {"rope_type": "default", "rope_theta": base}
    interpolation = fields.get("seq_len_interpolation_factor")
    if fields.get("rope_scaling"):
        if interpolation:
            raise Refusal(NOT_MODELLED, "Megatron-Core with both llama3 scaling and seq_len_interpolation_factor")
        params = fixed_llama3({"rope_type": "llama3", "rope_theta": base,
                               "factor": float(fields.get("rope_scaling_factor", 8.0))})
    elif interpolation:
        params = {"rope_type": "linear", "rope_theta": base, "factor": float(interpolation)}
    if fields.get("rotary_percent", 1.0) != 1.0:
        params["partial_rotary_factor"] = float(fields["rotary_percent"])
    return Trained(params, notes=notes)


def _mla_core(fields: Mapping[str, Any]) -> Trained:
    """What Megatron-Core 0.19.2's MLA computes from MLATransformerConfig's rope fields (multi_latent_attention.py
    L177-200): ``RotaryEmbedding(qk_pos_emb_head_dim, rotary_percent, rotary_base)`` for rope, ``YarnRotaryEmbedding``
    for yarn (always rounded; cos/sin x ``mscale(s, mscale) / mscale(s, mscale_all_dim)``), and whatever the rope
    type a softmax scale x ``mscale(rotary_scaling_factor, mscale_all_dim)**2`` (its attention's own, not on top of
    the model's)."""
    base, factor = float(fields["rotary_base"]), float(fields["rotary_scaling_factor"])
    mscale, mscale_all_dim = float(fields["mscale"]), float(fields["mscale_all_dim"])
    softmax = yarn_mscale(factor, mscale_all_dim) ** 2
    if fields["rope_type"] == "yarn":
        params = {"rope_type": "yarn", "rope_theta": base, "factor": factor,
                  "original_max_position_embeddings": int(fields["original_max_position_embeddings"]),
                  "beta_fast": float(fields["beta_fast"]), "beta_slow": float(fields["beta_slow"]), "truncate": True,
                  "attention_factor": yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)}
    elif fields["rope_type"] == "rope":
        params = {"rope_type": "default", "rope_theta": base}
        if fields.get("rotary_percent", 1.0) != 1.0:
            params["partial_rotary_factor"] = float(fields["rotary_percent"])
    else:
        raise Refusal(WILL_NOT_START, f"Megatron-Core's MLA raises ValueError for rope_type {fields['rope_type']!r} "
                      "(it has rope and yarn)")
    return Trained(params, softmax_scale=softmax, own_attention=True)


def megatron_lm(rope: Rope, fields: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The fields Megatron-LM's CLI gives GPTModel (or MLATransformerConfig) for flags carrying ``fields``, and
    caveats: ``--rotary-base`` and ``--rotary-seq-len-interpolation-factor`` are ``type=int`` (a base whose rounding
    keeps inv_freq is rounded, anything else does not parse), the llama3 factor is
    :data:`MEGATRON_LM_LLAMA3_FACTOR` whatever ``--rope-scaling-factor`` says, and MLA's YaRN keeps
    :data:`MLA_CLI_FIXED` whatever the model says."""
    who = "Megatron-LM"
    fields = dict(fields)
    caveats: list[str] = []
    theta = fields["rotary_base"]
    if not float(theta).is_integer():
        nearest = float(round(theta))
        difference = measured(megatron_core(fields).freqs(rope), megatron_core({**fields, "rotary_base": nearest})
                              .freqs(rope))
        if difference != SAME:
            raise Refusal(WILL_NOT_START, f"{who}'s --rotary-base takes an integer; with rope_theta {theta!r} "
                          f"rounded to {nearest:.0f}, {difference}; nearest it can express: --rotary-base "
                          f"{nearest:.0f}")
        caveats.append(f"{who}'s --rotary-base takes an integer: rope_theta {theta!r} rounded to {nearest:.0f} gives "
                       f"the same inv_freq (rtol {RTOL:g})")
        fields["rotary_base"] = nearest
    factor = fields.get("seq_len_interpolation_factor")
    if factor is not None and not float(factor).is_integer():
        lo, hi = math.floor(factor), math.ceil(factor)
        original = rope.original_max or int(rope.target / factor)
        raise Refusal(WILL_NOT_START, f"{who}'s --rotary-seq-len-interpolation-factor takes an integer, not "
                      f"{factor:g} (transformers' linear factor); nearest it can express: {lo} or {hi} "
                      f"({lo * original} or {hi * original} positions)")
    if fields.get("rope_scaling") and fields["rope_scaling_factor"] != MEGATRON_LM_LLAMA3_FACTOR:
        caveats.append(f"{who} up to 0.19.2 never forwards --rope-scaling-factor to the model (NVIDIA/Megatron-LM "
                       f"#6305, fixed by PR #6306): --use-rope-scaling trains with llama3 factor "
                       f"{MEGATRON_LM_LLAMA3_FACTOR:g}, not {fields['rope_scaling_factor']:g}")
        fields["rope_scaling_factor"] = MEGATRON_LM_LLAMA3_FACTOR
    if fields.get("multi_latent_attention") and fields["rope_type"] == "yarn":
        kept = {k: v for k, v in MLA_CLI_FIXED.items() if fields[k] != v}
        if kept:
            given = ", ".join(f"{k} {_num(fields[k])}" for k in kept)
            caveats.append(f"{who} has no flag for MLA's original_max_position_embeddings/beta_fast/beta_slow (its "
                           f"--yarn-* flags fill GPT's yarn_* fields only): MLATransformerConfig trains with "
                           f"{', '.join(f'{k} {_num(v)}' for k, v in kept.items())}, not this model's {given}")
            fields |= MLA_CLI_FIXED
        else:
            caveats.append(f"{who}'s --yarn-original-max-position-embeddings/--yarn-beta-* flags do not reach MLA: "
                           "MLATransformerConfig keeps original_max_position_embeddings 4096, beta_fast 32, "
                           "beta_slow 1, this model's values")
    return fields, caveats


def megatron_argv(fields: Mapping[str, Any], target: int, stage: bool = False) -> list[str]:
    """Megatron-LM's flags for ``fields`` (the CLI's own names); ``stage``: also the training length."""
    if fields.get("multi_latent_attention"):
        return _mla_argv(fields, target, stage)
    argv = ["--position-embedding-type", fields["position_embedding_type"], "--rotary-base",
            _num(fields["rotary_base"])]
    if "rotary_percent" in fields:
        argv += ["--rotary-percent", repr(fields["rotary_percent"])]
    if "seq_len_interpolation_factor" in fields:
        argv += ["--rotary-seq-len-interpolation-factor", _num(fields["seq_len_interpolation_factor"])]
    if fields.get("rope_scaling"):
        argv += ["--use-rope-scaling", "--rope-scaling-factor", _num(fields["rope_scaling_factor"])]
    if fields["position_embedding_type"] == "yarn":
        argv += ["--rotary-scaling-factor", _num(fields["yarn_rotary_scaling_factor"]),
                 "--yarn-original-max-position-embeddings", str(fields["yarn_original_max_position_embeddings"]),
                 "--yarn-beta-fast", _num(fields["yarn_beta_fast"]), "--yarn-beta-slow", _num(fields["yarn_beta_slow"]),
                 "--mscale", _num(fields["yarn_mscale"]), "--mscale-all-dim", _num(fields["yarn_mscale_all_dim"]),
                 "--yarn-correction-range-round-to-int" if fields["yarn_correction_range_round_to_int"]
                 else "--no-yarn-correction-range-round-to-int"]
    return [*argv, *_lengths(target, stage)]


def _lengths(target: int, stage: bool) -> list[str]:
    """The window flag, and for a training run at this length (scale --seq-len, a pick stage) Megatron's training
    length too."""
    return ["--max-position-embeddings", str(target), *(["--seq-length", str(target)] if stage else [])]


def _mla_argv(fields: Mapping[str, Any], target: int, stage: bool) -> list[str]:
    """Megatron-LM's ``--multi-latent-attention`` flags for MLA fields (no flag reaches :data:`MLA_CLI_FIXED`)."""
    argv = ["--position-embedding-type", "rope", "--multi-latent-attention", "--rope-type", fields["rope_type"],
            "--rotary-base", _num(fields["rotary_base"]), "--qk-pos-emb-head-dim", str(fields["qk_pos_emb_head_dim"])]
    if "rotary_percent" in fields:
        argv += ["--rotary-percent", repr(fields["rotary_percent"])]
    if fields["rope_type"] == "rope":
        argv.append("--no-rope-fusion")  # MLATransformerConfig refuses apply_rope_fusion (the CLI default) without yarn
    argv += ["--rotary-scaling-factor", _num(fields["rotary_scaling_factor"]), "--mscale", _num(fields["mscale"]),
             "--mscale-all-dim", _num(fields["mscale_all_dim"])]
    return [*argv, *_lengths(target, stage)]


def megatron_setup(rope: Rope, *, solve: bool = True) -> tuple[list[str], Trained, list[str]]:
    """Megatron-LM's flags for ``rope`` (:func:`megatron_fields`), what Megatron-Core trains with them (after the
    CLI's integer parsing, its unforwarded llama3 factor and MLA's unreachable YaRN fields), and caveats."""
    fields, caveats = megatron_fields(rope, rope.params, "Megatron-LM", solve=solve)
    argv = megatron_argv(fields, rope.target, rope.stage)
    trained_fields, cli = megatron_lm(rope, fields)
    trained = megatron_core(trained_fields)
    trained.notes[:0] = caveats + cli
    return argv, trained, caveats + cli


def _megatron_cli(req: ScaleRequest, group: dict[str, Any], facts: ModelFacts | None) -> tuple[str, list[str]]:
    who = "Megatron-LM"
    rope = Rope.of_request(req, group, facts)
    fields, caveats = megatron_fields(rope, group, who)
    trained_fields, cli = megatron_lm(rope, fields)
    if trained_fields.get("rope_scaling_factor") != fields.get("rope_scaling_factor"):
        factor = fields["rope_scaling_factor"]
        raise PosencError(
            f"{who} up to 0.19.2 never forwards --rope-scaling-factor to the model (NVIDIA/Megatron-LM #6305, "
            f"fixed by PR #6306): --use-rope-scaling trains with llama3 factor {MEGATRON_LM_LLAMA3_FACTOR:g}, whose "
            f"{measured(rope.freqs(), megatron_core(trained_fields).freqs(rope))} from factor {factor:g}'s; "
            f"workaround: build GPTModel(..., rope_scaling=True, rope_scaling_factor={factor:g}) in your model "
            "provider (or set config.rope_scaling_factor after gpt_config_from_args)")
    kept = [k for k in MLA_CLI_FIXED if k in fields and trained_fields[k] != fields[k]]
    if kept:
        given = ", ".join(f"{k} {_num(fields[k])}" for k in kept)
        defaults = ", ".join(f"{k} {_num(v)}" for k, v in MLA_CLI_FIXED.items())
        raise Refusal(
            CANNOT_EXPRESS,
            f"{who} has no flag for MLA's original_max_position_embeddings/beta_fast/beta_slow (its --yarn-* "
            f"flags fill GPT's yarn_* fields only), so MLATransformerConfig keeps {defaults}; this model has "
            f"{given}: Megatron's {measured(rope.freqs(), megatron_core(trained_fields).freqs(rope))} from "
            "transformers; nearest it can express: set them on the MLATransformerConfig in Python (posenc scale "
            "--format megatron-bridge prints the fields)")
    argv = megatron_argv(trained_fields, req.target, req.stage)
    caveats += cli
    if fields.get("multi_latent_attention"):
        caveats.append(f"{who}: set the other MLA sizes (--q-lora-rank, --kv-lora-rank, --qk-head-dim, --v-head-dim) "
                       "from the model; the softmax scale divides by sqrt(qk-head-dim + qk-pos-emb-head-dim)")
    caveats.append("Megatron-LM's --use-checkpoint-args restores rotary base/percent but none of the scaling flags: "
                   "pass these again when resuming")
    return shlex.join(argv), caveats


#: Megatron-Bridge 0.6.2's HF import (models/conversion/model_bridge.py ``YARN_ROPE_SCALING_MAPPING``, L485-492):
#: (HF rope key, provider field), each copied only when the HF dict has it
BRIDGE_YARN_MAPPING = (("factor", "yarn_rotary_scaling_factor"),
                       ("original_max_position_embeddings", "yarn_original_max_position_embeddings"),
                       ("beta_fast", "yarn_beta_fast"), ("beta_slow", "yarn_beta_slow"),
                       ("mscale", "yarn_mscale"), ("mscale_all_dim", "yarn_mscale_all_dim"))
#: text model types whose bridge posenc models: the generic import (model_bridge.py L529-630, L673-685), the Llama
#: bridge's llama3/linear (llama_bridge.py L74-83), gpt-oss's fixed YaRN (gpt_oss_bridge.py L93-100)
BRIDGE_GENERIC = frozenset({"qwen2", "qwen3", "qwen3_moe"})
BRIDGE_GPT_OSS = {"position_embedding_type": "yarn", "yarn_rotary_scaling_factor": 32.0,
                  "yarn_original_max_position_embeddings": 4096, "yarn_beta_fast": 32.0, "yarn_beta_slow": 1.0,
                  "yarn_correction_range_round_to_int": False, "yarn_mscale": None, "yarn_mscale_all_dim": None}


def bridge_import(rope: Rope) -> tuple[dict[str, Any], list[str]]:
    """The provider rope fields ``AutoBridge.from_hf_pretrained`` builds from the model's config (Megatron-Bridge
    0.6.2), and what it leaves out: ``yarn`` maps key by key (beta, mscale None when absent; rounding only from an
    explicit ``truncate``; ``attention_factor`` dropped); the Llama bridge keeps llama3's factor only and linear's
    factor; every other type becomes plain rope."""
    who = "Megatron-Bridge"
    group = rope.params
    _plain_only(group, who)
    model_type = rope.model_type
    if model_type not in BRIDGE_GENERIC | {"llama", "gpt_oss"}:
        raise Refusal(NOT_MODELLED, f"posenc models Megatron-Bridge's generic HF import and its Llama, Qwen2/Qwen3 "
                      f"and gpt-oss bridges; {model_type or 'this model'} has another bridge or none")
    if _rotary_fraction(rope, group) != 1.0:
        raise Refusal(NOT_MODELLED, f"{who}'s import of partial_rotary_factor depends on the bridge (transformers 5 "
                      "keeps it inside rope_parameters, where the generic mapping does not look)")
    rope_type = _rope_type(group)
    fields: dict[str, Any] = {"position_embedding_type": "rope", "rotary_base": float(group["rope_theta"])}
    notes: list[str] = []
    if model_type == "gpt_oss":
        notes.append(f"{who}'s gpt-oss bridge ignores the config's rope dict and sets YaRN x32 from 4096, beta 32/1, "
                     "no rounding, mscale unset")
        return {**fields, **BRIDGE_GPT_OSS}, notes
    if rope_type == "yarn":
        fields["position_embedding_type"] = "yarn"
        fields |= {field_: None for _, field_ in BRIDGE_YARN_MAPPING}
        fields["yarn_correction_range_round_to_int"] = None
        for key, field_ in BRIDGE_YARN_MAPPING:
            if group.get(key) is not None:
                fields[field_] = group[key]
        if "truncate" in group:
            fields["yarn_correction_range_round_to_int"] = group["truncate"]
        else:
            notes.append(f"{who} turns YaRN's floor/ceil rounding off when the dict has no truncate (transformers' "
                         "default is on)")
        if group.get("attention_factor") is not None:
            notes.append(f"{who} drops attention_factor {group['attention_factor']!r}")
    elif model_type == "llama" and rope_type == "llama3":
        fields |= {"rope_scaling": True, "rope_scaling_factor": float(group.get("factor", 8.0))}
        notes.append(f"{who}'s Llama bridge keeps llama3's factor only (low/high_freq_factor and the original length "
                     "are Megatron-Core's 1/4/8192)")
    elif model_type == "llama" and rope_type == "linear":
        fields["seq_len_interpolation_factor"] = float(group["factor"])
    elif rope_type != "default":
        notes.append(f"{who} imports {rope_type} as plain rope, without a warning")
    return fields, notes


def bridge_setup(rope: Rope) -> tuple[list[str], Trained, list[str]]:
    """What Megatron-Core trains after Megatron-Bridge imports the model's config (the provider fields, then
    :func:`megatron_core`)."""
    fields, notes = bridge_import(rope)
    trained = megatron_core(fields)
    trained.notes[:0] = notes
    return ["AutoBridge.from_hf_pretrained(MODEL)"], trained, notes


def _bridge(req: ScaleRequest, group: dict[str, Any], facts: ModelFacts | None) -> tuple[str, list[str]]:
    who = "Megatron-Bridge"
    fields, caveats = megatron_fields(Rope.of_request(req, group, facts), group, who)
    if fields.get("rope_scaling"):
        caveats.append(f"{who} maps llama3 from a Hugging Face config only in its Llama bridge, and keeps only its "
                       "factor: set rope_scaling and rope_scaling_factor on the provider as printed (default 1.0)")
    if "seq_len_interpolation_factor" in fields:
        caveats.append(f"{who} maps linear from a Hugging Face config only in its Llama bridge (0.6.2): set "
                       "seq_len_interpolation_factor on the provider as printed")
    if fields.get("rope_type") == "yarn":
        caveats.append(f"{who}'s MLA providers (DeepSeek, Kimi) take these unprefixed MLATransformerConfig fields; its "
                       "Hugging Face import copies only the keys the rope dict has: set every field as printed")
    if fields["position_embedding_type"] == "yarn":
        caveats.append(f"{who}'s Hugging Face import leaves beta_fast/beta_slow None (a TypeError in Megatron-Core) "
                       "and turns rounding off when the dict has no truncate: set every yarn_* field as printed")
    lines = [f"provider.{key} = {value!r}" for key, value in fields.items()]
    lines.append(f"provider.seq_length = {req.target}")
    caveats.append(f"{who}'s save_hf_pretrained writes the source config.json, not these settings: write the exported "
                   "config's rope with posenc scale --format hf-v5")
    return "\n".join(lines), caveats


# --------------------------------------------------------------------------------------------------------- torchtune

def torchtune_setup(rope: Rope) -> tuple[str, Trained, list[str]]:
    """torchtune 0.6.1's builder fields for ``rope`` and what its RoPE classes compute with them
    (``RotaryPositionalEmbeddings``; ``Llama3ScaledRoPE`` with 1/4/8192 whatever the model says), or a refusal."""
    who = "torchtune"
    group = rope.params
    _plain_only(group, who)
    rope_type = _rope_type(group)
    fraction = _rotary_fraction(rope, group)
    if fraction != 1.0:
        raise Refusal(CANNOT_EXPRESS, f"{who}'s model builders rotate the whole head; this model rotates "
                      f"{fraction:g} of it")
    theta = float(group["rope_theta"])
    lines = ["model:"]
    if rope_type == "default":
        lines += [f"  rope_base: {_num(theta)}"]
        params = {"rope_type": "default", "rope_theta": theta}
    elif rope_type == "llama3":
        lines += [f"  rope_base: {_num(theta)}", f"  scale_factor: {_num(float(group['factor']))}"]
        params = fixed_llama3({"rope_type": "llama3", "rope_theta": theta, "factor": float(group["factor"])})
    else:
        raise Refusal(CANNOT_EXPRESS, f"{who} has no {rope_type} RoPE (only plain RoPE and llama3 at 1/4/8192; RFC "
                      "meta-pytorch/torchtune #1183); nearest it can express: a larger rope_base "
                      "(posenc scale ntk)")
    lines.append(f"  max_seq_len: {rope.target}")
    if rope.stage:  # the training length: torchtune's tokenizer builders cut (and pack) sequences at max_seq_len
        lines += ["tokenizer:", f"  max_seq_len: {rope.target}"]
    caveats = [f"{who} computes its RoPE cache for max_seq_len positions only (longer inputs fail), and its "
               "checkpointer copies the source config.json on save: write the exported rope with posenc scale "
               "--format hf-v5"]
    caveats.append("these are arguments of torchtune's component builders (llama3_1 and llama3_2 take scale_factor; "
                   "the named builders such as llama3_1_8b fix them): pass them with the model's sizes")
    return "\n".join(lines), Trained(params, layout="interleaved"), caveats


def _torchtune(req: ScaleRequest, group: dict[str, Any], facts: ModelFacts | None) -> tuple[str, list[str]]:
    rope = Rope.of_request(req, group, facts)
    text, _, caveats = torchtune_setup(rope)
    if _rope_type(group) == "llama3":
        _llama3_fixed(rope, group, "torchtune")
    return text, caveats


# -------------------------------------------------------------------------------------------------------- torchtitan

def torchtitan_setup(rope: Rope) -> tuple[str, Trained, list[str]]:
    """torchtitan 0.3.0's ``RoPE.Config`` for ``rope`` and what it computes: its RoPE never multiplies cos/sin by
    YaRN's attention factor (its gpt-oss attention folds it into the softmax scale, which gives the same logits;
    its Llama 3 and Qwen3 decoders leave it out), or a refusal."""
    who = "torchtitan"
    group = rope.params
    _plain_only(group, who)
    rope_type = _rope_type(group)
    fraction = _rotary_fraction(rope, group)
    if fraction != 1.0:
        raise Refusal(CANNOT_EXPRESS, f"{who}'s RoPE rotates the whole head (dim); this model rotates {fraction:g} "
                      "of it")
    theta = float(group["rope_theta"])
    head = [f"dim={rope.head_dim}", f"max_seq_len={rope.target}", f"theta={theta!r}"]
    caveats: list[str] = []
    # torchtitan's Qwen3 and gpt-oss use CosSinRoPE (rotate-half, as transformers); Llama 3, DeepSeek-V3 and Kimi use
    # ComplexRoPE (adjacent pairs), the only one with llama scaling
    cls = "CosSinRoPE" if rope_type != "llama3" and rope.model_type.startswith(COSSIN_PREFIXES) else "ComplexRoPE"
    params: dict[str, Any] = {"rope_type": "default", "rope_theta": theta}
    if rope_type == "default":
        text = f"{cls}.Config({', '.join(head)})"
    elif rope_type == "llama3":
        params = {k: group[k] for k in ("factor", "low_freq_factor", "high_freq_factor",
                                        "original_max_position_embeddings")} | {"rope_type": "llama3",
                                                                                 "rope_theta": theta}
        text = (f"ComplexRoPE.Config({', '.join(head)}, scaling=\"llama\", scaling_factor={float(group['factor'])!r}, "
                f"low_freq_factor={float(group['low_freq_factor'])!r}, "
                f"high_freq_factor={float(group['high_freq_factor'])!r}, "
                f"original_max_position_embeddings={int(group['original_max_position_embeddings'])})")
    elif rope_type == "yarn":
        factor = _yarn_factor(rope, group)
        attention = yarn_attention_factor(group, factor)
        folds = rope.model_type == "gpt_oss" and attention == yarn_mscale(factor)
        params = {"rope_type": "yarn", "rope_theta": theta, "factor": factor,
                  "original_max_position_embeddings": int(group["original_max_position_embeddings"]),
                  "beta_fast": float(group.get("beta_fast") or 32.0), "beta_slow": float(group.get("beta_slow") or 1.0),
                  "truncate": bool(group.get("truncate", True)), "attention_factor": attention if folds else 1.0}
        if folds:
            caveats.append(f"{who}'s RoPE leaves out YaRN's attention factor; its gpt-oss attention folds it into "
                           f"the softmax scale (x{attention:.6g} squared, models/gpt_oss/model.py), as transformers' "
                           "cos/sin do")
        elif attention != 1.0:
            caveats.append(f"{who}'s RoPE never applies YaRN's attention factor, and its Llama3/Qwen3 decoders do not "
                           f"fold it into the softmax scale (only its gpt-oss, DeepSeek-V3 and Kimi models do): they "
                           f"train with cos/sin x1 where transformers uses x{attention:.6g} (logits "
                           f"x{attention ** 2:.4g})")
        text = (f"{cls}.Config({', '.join(head)}, scaling=\"yarn\", rope_factor={factor!r}, "
                f"beta_fast={float(group.get('beta_fast') or 32.0)!r}, "
                f"beta_slow={float(group.get('beta_slow') or 1.0)!r}, "
                f"original_seq_len={int(group['original_max_position_embeddings'])}, "
                f"truncate={bool(group.get('truncate', True))!r})")
    else:
        raise Refusal(CANNOT_EXPRESS, f"{who} has no {rope_type} RoPE (its RoPE.Config scaling is none, llama or "
                      "yarn); nearest it can express: posenc scale yarn, or a larger theta (posenc scale ntk)")
    if rope.stage:  # the training length (TrainingConfig.seq_len, which also sizes the RoPE cache it needs)
        text += f"\ntraining.seq_len = {rope.target}"
    caveats.append(f"{who} writes no config.json with a Hugging Face checkpoint: write its rope with posenc scale "
                   "--format hf-v5")
    layout = "rotate-half"
    if text.startswith("ComplexRoPE"):
        layout = "interleaved"
        caveats.append("ComplexRoPE pairs adjacent dims: convert Hugging Face q/k weights with torchtitan's "
                       "state-dict adapter for the model (it permutes them)")
    return text, Trained(params, layout=layout), caveats


def _torchtitan(req: ScaleRequest, group: dict[str, Any], facts: ModelFacts | None) -> tuple[str, list[str]]:
    rope = Rope.of_request(req, group, facts)
    text, trained, caveats = torchtitan_setup(rope)
    hf, titan = rope.freqs(), trained.freqs(rope)
    if not math.isclose(hf.attention_factor, titan.attention_factor, rel_tol=1e-9):
        attention = hf.attention_factor
        raise PosencError(
            f"torchtitan's RoPE never applies YaRN's attention factor, and its Llama3/Qwen3 decoders do not fold it "
            f"into the softmax scale (only its gpt-oss, DeepSeek-V3 and Kimi models do): they train with cos/sin "
            f"x{titan.attention_factor:g} where transformers uses x{attention:.6g} (logits x{attention ** 2:.4g}); "
            "nearest it can express: the same YaRN with mscale = mscale_all_dim (attention factor 1)")
    return text, caveats


#: ``--format`` name -> rendering of (request, rope dict of the extended group, model facts).
RENDERERS: dict[str, Renderer] = {
    "megatron": _megatron_cli,
    "megatron-bridge": _bridge,
    "torchtitan": _torchtitan,
    "torchtune": _torchtune,
}
FORMATS = tuple(RENDERERS)


def render(req: ScaleRequest, fmt: str, facts: ModelFacts | None = None,
           rope: dict[str, Any] | None = None) -> tuple[str, list[str]]:
    """What ``posenc scale --format fmt`` prints for a trainer: the settings and caveats, or a PosencError.

    ``rope``: the extended group's rope dict (default: the request's own)."""
    group = rope_parameters(req) if rope is None else rope
    if any(isinstance(v, dict) for v in group.values()):
        raise PosencError(f"{fmt}: one rope dict per layer type is not rendered for trainers")
    return RENDERERS[fmt](req, group, facts)

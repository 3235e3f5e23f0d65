"""Megatron-LM (its CLI, as megatron-core 0.19.2 ships it in ``megatron/training``) and Megatron-Core's rotary
classes: the flags posenc renders for a request (``posenc scale --engine megatron``), the fields Megatron-Core's
GPTModel and MLATransformerConfig take (which Megatron-Bridge's provider sets too, :mod:`.megatron_bridge`), what
Megatron-Core computes with them (:func:`megatron_core`), what Megatron-LM trains for a model as shipped
(``posenc check --trainer``), and how ``posenc audit`` reads Megatron-LM's arguments back.

Megatron's facts, each written once: its YaRN attention factor (:func:`yarn_attention`), its fixed llama3
constants (:data:`~posenc_cli.trainers.trained.FIXED_LLAMA3`, the CLI's unforwarded factor :data:`LLAMA3_FACTOR`),
MLA's YaRN fields no flag reaches (:data:`MLA_CLI_FIXED`). A rendering either reproduces transformers' numbers or
refuses with the measured difference (``tests/trainers/test_frameworks.py`` runs Megatron-Core's own classes). MLA
models (DeepSeek-V2/V3, Kimi K2) get ``--multi-latent-attention`` flags, proven against megatron-core's YaRN class as
MLA builds it.

stdlib at import (``posenc scale`` loads this module only for its format); numpy loads when a refusal measures.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from typing import Any

from posenc_cli.engines.runs import CANNOT_EXPRESS, NOT_MODELLED, SAME_RTOL, WILL_NOT_START
from posenc_cli.engines.target import Rendering, Target
from posenc_cli.errors import PosencError
from posenc_cli.rope.attention_factors import yarn_attention_factor, yarn_mscale, yarn_mscale_for
from posenc_cli.rope.rope_types import param
from posenc_cli.trainers.settings import ROPE_WORDS, Reader, TrainedWith
from posenc_cli.trainers.trained import (
    FIXED_LLAMA3,
    MLA_TYPES,
    SAME,
    Refusal,
    Rope,
    Trained,
    fixed_llama3,
    flag_number,
    llama3_fixed,
    measured,
    one_rotary_runner,
    plain_only,
    request_group,
    rope_type_of,
    rotary_fraction,
    yarn_factor,
)

NAME = "megatron"
VERSION = "0.19.2"
#: Megatron-LM 0.19.2's gpt_config_from_args never forwards --rope-scaling-factor (NVIDIA/Megatron-LM #6305): the
#: llama3 factor the model gets is RotaryEmbedding's default
LLAMA3_FACTOR = 8.0


def yarn_attention(factor: float, mscale: float | None, mscale_all_dim: float | None) -> float:
    """Megatron-Core's YaRN cos/sin magnitude (``_yarn_get_concentration_factor``): ``mscale(s, mscale) /
    mscale(s, mscale_all_dim)`` whatever the two are (even where transformers ignores them), ``0.1 ln s + 1`` when
    either is None."""
    if mscale is None or mscale_all_dim is None:
        return yarn_mscale(factor)
    return yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)


# --- the fields Megatron-Core takes, and what it computes with them -----------------------------------------------

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
    naive = yarn_attention(factor, float(mscale or 1.0), float(given_all or 0.0))
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
    plain_only(group, who)
    if rope.model_type in MLA_TYPES:
        return _mla_fields(rope, group, who, solve=solve)
    rope_type = rope_type_of(group)
    fraction = rotary_fraction(rope, group)
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
            llama3_fixed(rope, group, who)
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
        factor = yarn_factor(rope, group)
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
                  "yarn_beta_fast": float(param(group, "beta_fast", "yarn")),
                  "yarn_beta_slow": float(param(group, "beta_slow", "yarn")),
                  "yarn_mscale": m, "yarn_mscale_all_dim": m_all,
                  "yarn_correction_range_round_to_int": bool(param(group, "truncate", "yarn"))}
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
MLA_CLI_FIXED = {"original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0}  # framework fact: MLA


def _mla_fields(rope: Rope, group: dict[str, Any], who: str, *, solve: bool) -> tuple[dict[str, Any], list[str]]:
    """MLATransformerConfig's rope fields (Megatron-Core 0.19.2: multi_latent_attention.py builds RotaryEmbedding or
    YarnRotaryEmbedding over qk_pos_emb_head_dim and scales its softmax by mscale(rotary_scaling_factor,
    mscale_all_dim)**2), or a refusal with what Megatron would compute. ``solve`` as in :func:`megatron_fields`:
    one to one, mscale and mscale_all_dim are the dict's (the class defaults 1 and 0 where unset)."""
    rope_type = rope_type_of(group)
    fraction = rotary_fraction(rope, group)
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
        factor = yarn_factor(rope, group)
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
                   "beta_fast": float(param(group, "beta_fast", "yarn")),
                   "beta_slow": float(param(group, "beta_slow", "yarn")), "mscale": m, "mscale_all_dim": m_all}
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
        attention = yarn_attention(factor, None if mscale is None else float(mscale),
                                   None if mscale_all_dim is None else float(mscale_all_dim))
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
                               "factor": float(fields.get("rope_scaling_factor", LLAMA3_FACTOR))})
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
                  "attention_factor": yarn_attention(factor, mscale, mscale_all_dim)}
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
    :data:`LLAMA3_FACTOR` whatever ``--rope-scaling-factor`` says, and MLA's YaRN keeps
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
                       f"the same inv_freq (rtol {SAME_RTOL:g})")
        fields["rotary_base"] = nearest
    factor = fields.get("seq_len_interpolation_factor")
    if factor is not None and not float(factor).is_integer():
        lo, hi = math.floor(factor), math.ceil(factor)
        original = rope.original_max or int(rope.target / factor)
        raise Refusal(WILL_NOT_START, f"{who}'s --rotary-seq-len-interpolation-factor takes an integer, not "
                      f"{factor:g} (transformers' linear factor); nearest it can express: {lo} or {hi} "
                      f"({lo * original} or {hi * original} positions)")
    if fields.get("rope_scaling") and fields["rope_scaling_factor"] != LLAMA3_FACTOR:
        caveats.append(f"{who} up to 0.19.2 never forwards --rope-scaling-factor to the model (NVIDIA/Megatron-LM "
                       f"#6305, fixed by PR #6306): --use-rope-scaling trains with llama3 factor "
                       f"{LLAMA3_FACTOR:g}, not {fields['rope_scaling_factor']:g}")
        fields["rope_scaling_factor"] = LLAMA3_FACTOR
    if fields.get("multi_latent_attention") and fields["rope_type"] == "yarn":
        kept = {k: v for k, v in MLA_CLI_FIXED.items() if fields[k] != v}
        if kept:
            given = ", ".join(f"{k} {flag_number(fields[k])}" for k in kept)
            caveats.append(f"{who} has no flag for MLA's original_max_position_embeddings/beta_fast/beta_slow (its "
                           f"--yarn-* flags fill GPT's yarn_* fields only): MLATransformerConfig trains with "
                           f"{', '.join(f'{k} {flag_number(v)}' for k, v in kept.items())}, not this model's {given}")
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
            flag_number(fields["rotary_base"])]
    if "rotary_percent" in fields:
        argv += ["--rotary-percent", repr(fields["rotary_percent"])]
    if "seq_len_interpolation_factor" in fields:
        argv += ["--rotary-seq-len-interpolation-factor", flag_number(fields["seq_len_interpolation_factor"])]
    if fields.get("rope_scaling"):
        argv += ["--use-rope-scaling", "--rope-scaling-factor", flag_number(fields["rope_scaling_factor"])]
    if fields["position_embedding_type"] == "yarn":
        argv += ["--rotary-scaling-factor", flag_number(fields["yarn_rotary_scaling_factor"]),
                 "--yarn-original-max-position-embeddings", str(fields["yarn_original_max_position_embeddings"]),
                 "--yarn-beta-fast", flag_number(fields["yarn_beta_fast"]),
                 "--yarn-beta-slow", flag_number(fields["yarn_beta_slow"]),
                 "--mscale", flag_number(fields["yarn_mscale"]),
                 "--mscale-all-dim", flag_number(fields["yarn_mscale_all_dim"]),
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
            "--rotary-base", flag_number(fields["rotary_base"]),
            "--qk-pos-emb-head-dim", str(fields["qk_pos_emb_head_dim"])]
    if "rotary_percent" in fields:
        argv += ["--rotary-percent", repr(fields["rotary_percent"])]
    if fields["rope_type"] == "rope":
        argv.append("--no-rope-fusion")  # MLATransformerConfig refuses apply_rope_fusion (the CLI default) without yarn
    argv += ["--rotary-scaling-factor", flag_number(fields["rotary_scaling_factor"]),
             "--mscale", flag_number(fields["mscale"]), "--mscale-all-dim", flag_number(fields["mscale_all_dim"])]
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


def render(r: Rendering) -> tuple[str, list[str]]:
    """``--engine megatron``: Megatron-LM's flags for the request, or a refusal where Megatron-LM trains other
    numbers."""
    who = "Megatron-LM"
    req, group = r.req, request_group(r, r.fmt)
    rope = Rope.of_request(req, group, r.facts)
    fields, caveats = megatron_fields(rope, group, who)
    trained_fields, cli = megatron_lm(rope, fields)
    if trained_fields.get("rope_scaling_factor") != fields.get("rope_scaling_factor"):
        factor = fields["rope_scaling_factor"]
        raise PosencError(
            f"{who} up to 0.19.2 never forwards --rope-scaling-factor to the model (NVIDIA/Megatron-LM #6305, "
            f"fixed by PR #6306): --use-rope-scaling trains with llama3 factor {LLAMA3_FACTOR:g}, whose "
            f"{measured(rope.freqs(), megatron_core(trained_fields).freqs(rope))} from factor {factor:g}'s; "
            f"workaround: build GPTModel(..., rope_scaling=True, rope_scaling_factor={factor:g}) in your model "
            "provider (or set config.rope_scaling_factor after gpt_config_from_args)")
    kept = [k for k in MLA_CLI_FIXED if k in fields and trained_fields[k] != fields[k]]
    if kept:
        given = ", ".join(f"{k} {flag_number(fields[k])}" for k in kept)
        defaults = ", ".join(f"{k} {flag_number(v)}" for k, v in MLA_CLI_FIXED.items())
        raise Refusal(
            CANNOT_EXPRESS,
            f"{who} has no flag for MLA's original_max_position_embeddings/beta_fast/beta_slow (its --yarn-* "
            f"flags fill GPT's yarn_* fields only), so MLATransformerConfig keeps {defaults}; this model has "
            f"{given}: Megatron's {measured(rope.freqs(), megatron_core(trained_fields).freqs(rope))} from "
            "transformers; nearest it can express: set them on the MLATransformerConfig in Python (posenc scale "
            "--engine megatron-bridge prints the fields)")
    argv = megatron_argv(trained_fields, req.target, req.stage)
    caveats += cli
    if fields.get("multi_latent_attention"):
        caveats.append(f"{who}: set the other MLA sizes (--q-lora-rank, --kv-lora-rank, --qk-head-dim, --v-head-dim) "
                       "from the model; the softmax scale divides by sqrt(qk-head-dim + qk-pos-emb-head-dim)")
    caveats.append("Megatron-LM's --use-checkpoint-args restores rotary base/percent but none of the scaling flags: "
                   "pass these again when resuming")
    return shlex.join(argv), caveats


#: Megatron-Bridge 0.6.2's HF import (models/conversion/model_bridge.py ``YARN_ROPE_SCALING_MAPPING``, L485-492):

# --- what Megatron-LM trains for a model as shipped ---------------------------------------------------------------

def _setup_as_shipped(rope: Rope) -> tuple[list[str], Trained, list[str]]:
    """The flags posenc renders; where no flags reproduce transformers (llama3's constants, MLA's always-rounded
    YaRN), the one-to-one flags and what Megatron-Core trains with them (its fixed 1/4/8192, rounding); a refusal
    only where those cannot run either."""
    try:
        argv, trained, caveats = megatron_setup(rope)
    except Refusal as refusal:
        if refusal.verdict != CANNOT_EXPRESS:
            raise
        argv, trained, caveats = megatron_setup(rope, solve=False)
    return [shlex.join(argv)], trained, caveats


# --- posenc audit: Megatron-LM's arguments read back --------------------------------------------------------------

# Megatron-LM flags (megatron-core 0.19.2 megatron/training/arguments.py): name -> takes a value
_MEGATRON_FLAGS = {
    "--position-embedding-type": True, "--rotary-base": True, "--rotary-percent": True,
    "--rotary-seq-len-interpolation-factor": True, "--use-rope-scaling": False, "--rope-scaling-factor": True,
    "--rotary-interleaved": False, "--rotary-scaling-factor": True, "--mscale": True, "--mscale-all-dim": True,
    "--yarn-original-max-position-embeddings": True, "--yarn-beta-fast": True, "--yarn-beta-slow": True,
    "--yarn-correction-range-round-to-int": False, "--no-yarn-correction-range-round-to-int": False,
    "--rope-type": True, "--no-rope-fusion": False, "--max-position-embeddings": True, "--seq-length": True,
}


def _megatron_args(text: str, path: str) -> dict[str, str | bool]:
    try:
        words = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as exc:
        raise PosencError(f"{path}: cannot split the command line: {exc}") from None
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--"):
            continue
        name, eq, inline = word.partition("=")
        if name not in _MEGATRON_FLAGS:
            if any(w in name for w in ROPE_WORDS):
                raise PosencError(f"{path}: unknown Megatron-LM flag {name!r} (megatron-core 0.19.2 has "
                                  f"{', '.join(f for f in _MEGATRON_FLAGS if any(w in f for w in ROPE_WORDS))})")
            continue
        if not _MEGATRON_FLAGS[name]:
            out[name] = True
            continue
        if eq:
            out[name] = inline
        elif i < len(words) and not words[i].startswith("--"):
            out[name] = words[i]
            i += 1
        else:
            raise PosencError(f"{path}: {name} needs a value")
    return out


def _number(args: Mapping[str, str | bool], name: str, default: float | None, path: str,
            integer: bool = False) -> float | None:
    value = args.get(name)
    if value is None:
        return default
    try:
        number = int(str(value)) if integer else float(str(value))
    except ValueError:
        kind = "a whole number (Megatron-LM parses it with type=int)" if integer else "a number"
        raise PosencError(f"{path}: {name} {value!r} is not {kind}") from None
    if not math.isfinite(number) or number <= 0:
        raise PosencError(f"{path}: {name} must be a positive number, got {value!r}")
    return float(number)


def _read_flags(data: Any, path: str, exported: Mapping[str, Any] | None,
                base: Mapping[str, Any] | None) -> TrainedWith:
    """The rope and window Megatron-LM's arguments (a command line, ``data``) trained with."""
    args = _megatron_args(data if isinstance(data, str) else "", path)
    kind = str(args.get("--position-embedding-type", "learned_absolute"))
    if kind not in ("rope", "yarn"):
        raise PosencError(f"{path}: --position-embedding-type is {kind!r}"
                          + (" (Megatron-LM's default)" if "--position-embedding-type" not in args else "")
                          + ": the run trained no RoPE posenc can audit (rope or yarn)")
    # framework fact: this package's own default base (10000), read as it reads it
    theta = _number(args, "--rotary-base", 10000.0, path, integer=True)
    assert theta is not None
    notes: list[str] = []
    rope: dict[str, Any]
    if kind == "yarn":
        factor = _number(args, "--rotary-scaling-factor", 1.0, path) or 1.0
        if factor <= 1:
            raise PosencError(f"{path}: --position-embedding-type yarn with --rotary-scaling-factor {factor:g}: "
                              "no scaling")
        mscale = _number(args, "--mscale", 1.0, path) or 1.0
        all_dim = float(str(args.get("--mscale-all-dim", "0")))
        rope = {"rope_type": "yarn", "factor": factor,
                "original_max_position_embeddings": int(_number(
                    args, "--yarn-original-max-position-embeddings", 4096, path, integer=True) or 4096),
                "beta_fast": _number(args, "--yarn-beta-fast", 32.0, path),  # framework fact: Megatron's argparse
                "beta_slow": _number(args, "--yarn-beta-slow", 1.0, path),  # framework fact: defaults
                "truncate": "--no-yarn-correction-range-round-to-int" not in args}
        # Megatron's ratio even when one of them is 0 (HF then ignores both)
        attention = yarn_attention(factor, mscale, all_dim)
        if mscale and all_dim:
            rope |= {"mscale": mscale, "mscale_all_dim": all_dim}
        elif not math.isclose(attention, yarn_mscale(factor), rel_tol=1e-12):
            rope["attention_factor"] = attention
            notes.append(f"Megatron's YaRN attention factor with --mscale {mscale:g} --mscale-all-dim {all_dim:g} "
                         f"is {attention:.6g}; transformers needs it as attention_factor")
    elif "--use-rope-scaling" in args:
        asked = _number(args, "--rope-scaling-factor", LLAMA3_FACTOR, path)
        low, high, original = FIXED_LLAMA3
        rope = {"rope_type": "llama3", "factor": LLAMA3_FACTOR, "original_max_position_embeddings": original,
                "low_freq_factor": low, "high_freq_factor": high}
        if asked != LLAMA3_FACTOR:
            notes.append(f"Megatron-LM does not forward --rope-scaling-factor {asked:g} to the model "
                         "(argument_utils.py gpt_config_from_args, NVIDIA/Megatron-LM #6305): it trained with "
                         f"{LLAMA3_FACTOR:g}")
    elif "--rotary-seq-len-interpolation-factor" in args:
        rope = {"rope_type": "linear",
                "factor": _number(args, "--rotary-seq-len-interpolation-factor", None, path, integer=True)}
    else:
        rope = {"rope_type": "default"}
    rope["rope_theta"] = theta
    percent = _number(args, "--rotary-percent", 1.0, path)
    if percent is not None and percent != 1.0:
        if percent > 1:
            raise PosencError(f"{path}: --rotary-percent must be at most 1, got {percent:g}")
        rope["partial_rotary_factor"] = percent
        if kind == "yarn":
            notes.append("Megatron's YaRN rotates the whole head whatever --rotary-percent says (open PR "
                         "NVIDIA/Megatron-LM #7476); transformers will rotate only the given part")
    if "--rotary-interleaved" in args:
        notes.append("--rotary-interleaved: Megatron rotated adjacent pairs; transformers rotates halves, so the HF "
                     "export must permute the q/k weights (config.json cannot say which layout the weights have)")
    window = _number(args, "--max-position-embeddings", None, path, integer=True) or _number(
        args, "--seq-length", None, path, integer=True)
    return TrainedWith(NAME, f"Megatron-LM arguments {path}", rope, int(window) if window else None, notes)

TARGET = Target(
    NAME, "Megatron-LM", "megatron-core", VERSION, render,
    one_rotary_runner(NAME, VERSION, _setup_as_shipped, MLA_TYPES),
    targets="Megatron-LM CLI with megatron-core {version}", prints="flags",
    proven_by="its rotary classes, `tests/trainers/test_frameworks.py`",
    cannot_express="llama3 factors other than 8 through its CLI (`--rope-scaling-factor` is never forwarded, "
                   "NVIDIA/Megatron-LM #6305); llama3 band factors or original length other than 1/4/8192; a "
                   "fractional linear factor; YaRN with partial rotary (Megatron-Core's YaRN rotates the whole head); "
                   "on MLA models (DeepSeek, Kimi: `--multi-latent-attention` flags) an original length, beta_fast or "
                   "beta_slow other than 4096/32/1 (no flag reaches them), YaRN with `truncate false`, rope types "
                   "other than plain and YaRN; dynamic, longrope",
    reads_back=Reader(NAME, "Megatron-LM", "args", _read_flags))

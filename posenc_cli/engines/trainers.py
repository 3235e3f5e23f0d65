"""Training-framework renderings of a scaling request: Megatron-LM flags, Megatron-Bridge provider fields, torchtitan
and torchtune RoPE fields, each from the request's one rope dict.

Each rendering either reproduces transformers' numbers (inv_freq and the cos/sin attention factor, as
:func:`posenc_cli.frequencies.for_request` computes them) or refuses with a :class:`PosencError` that states the
measured difference and the nearest setting the framework can express. Where a framework computes something else
(Megatron-Core's and torchtune's llama3 with their fixed 1/4/8192 constants, Megatron's rounded base), the numbers
come from posenc's own rope functions with the framework's parameters: no second formula. ``tests/test_trainers.py``
runs each framework's own RoPE code (pinned versions below) against transformers to prove both the renderings and
the refusals.

Versions modelled: megatron-core 0.19.2 (it ships Megatron-LM's ``megatron/training`` CLI), megatron-bridge 0.6.2,
torchtitan 0.3.0, torchtune 0.6.1. MLA models (DeepSeek-V2/V3, Kimi K2) get Megatron's ``--multi-latent-attention``
flags or the MLA provider fields, proven against megatron-core's YaRN class as MLA builds it.

stdlib at import (``posenc scale`` loads this module only for these formats); numpy loads when a refusal measures.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from posenc_cli.attention_factors import yarn_attention_factor, yarn_mscale, yarn_mscale_for
from posenc_cli.errors import PosencError
from posenc_cli.scaling import ScaleRequest, max_position_embeddings, rope_parameters

if TYPE_CHECKING:
    from posenc_cli.frequencies import Frequencies
    from posenc_cli.models import ModelFacts

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


def _hf(req: ScaleRequest, group: dict[str, Any]) -> Frequencies:
    from posenc_cli.frequencies import RopeSpec, compute

    return compute(RopeSpec(group, req.head_dim, max_position_embeddings(req), default_partial=req.default_partial),
                   req.target)


def _with(req: ScaleRequest, group: dict[str, Any], **changes: Any) -> Frequencies:
    """transformers' numbers for the same request with some rope keys changed (what a framework computes)."""
    return _hf(req, {**group, **changes})


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


def _rotary_fraction(req: ScaleRequest, group: dict[str, Any]) -> float:
    from posenc_cli.frequencies import RopeSpec

    spec = RopeSpec(group, req.head_dim, max_position_embeddings(req), default_partial=req.default_partial)
    return spec.rotary_dim / req.head_dim


def _yarn_factor(req: ScaleRequest, group: Mapping[str, Any]) -> float:
    """YaRN's factor; a dict without one scales by max_position_embeddings / original, as transformers does."""
    factor = group.get("factor")
    return float(factor) if factor is not None else max_position_embeddings(req) / int(
        group["original_max_position_embeddings"])


def _plain_only(group: dict[str, Any], who: str) -> None:
    for key in ("mrope_section", "mrope_interleaved"):
        if key in group:
            raise PosencError(f"{who}: this model's rope has {key} (multimodal rope); posenc renders text-model "
                              "RoPE only for trainers")


def _llama3_fixed(req: ScaleRequest, group: dict[str, Any], who: str) -> None:
    low, high, original = FIXED_LLAMA3
    given = (float(group["low_freq_factor"]), float(group["high_freq_factor"]),
             int(group["original_max_position_embeddings"]))
    if given != FIXED_LLAMA3:
        fixed = _with(req, group, low_freq_factor=low, high_freq_factor=high, original_max_position_embeddings=original)
        raise PosencError(
            f"{who} fixes llama3's low_freq_factor/high_freq_factor/original length at 1/4/8192; this request has "
            f"{given[0]:g}/{given[1]:g}/{given[2]}: with factor {float(group['factor']):g} that "
            f"{measured(_hf(req, group), fixed)} from transformers; nearest it can express: "
            f"llama3 factor {float(group['factor']):g} at 1/4/8192 (those numbers), or yarn")


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
        raise PosencError(f"{who}: YaRN attention factor {attention:.6g} at factor {factor:g} cannot be "
                          f"expressed (Megatron gives {naive:.6g})")
    m = yarn_mscale_for(attention, factor, mscale_all_dim)
    if math.isclose(naive, attention, rel_tol=1e-12):
        return m
    caveats.append(f"Megatron-Core has no YaRN attention_factor and takes mscale/mscale_all_dim as a ratio even when "
                   f"one is unset: mapping this dict's fields one to one gives {naive:.6g} where transformers uses "
                   f"{attention:.6g}; mscale {m:.10g} with mscale_all_dim {mscale_all_dim:g} gives transformers' "
                   "factor")
    return m


def megatron_fields(req: ScaleRequest, group: dict[str, Any], facts: ModelFacts | None,
                    who: str = "Megatron-Core") -> tuple[dict[str, Any], list[str]]:
    """Megatron-Core's GPTModel/TransformerConfig rope fields (MLATransformerConfig's for an MLA model) that
    reproduce transformers for ``group``, and caveats; refuses (PosencError) what Megatron-Core 0.19.2 cannot
    compute."""
    _plain_only(group, who)
    if facts is not None and facts.model_type in MLA_TYPES:
        return _mla_fields(req, group, who)
    rope_type = _rope_type(group)
    fraction = _rotary_fraction(req, group)
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
        _llama3_fixed(req, group, who)
        fields = {"position_embedding_type": "rope", **fields, "rope_scaling": True,
                  "rope_scaling_factor": float(group["factor"])}
    elif rope_type == "yarn":
        if fraction != 1.0:
            whole = _with(req, {k: v for k, v in group.items() if k != "partial_rotary_factor"})
            raise PosencError(
                f"{who}'s YaRN (Megatron-Core 0.19.2) ignores rotary_percent: it rotates all {req.head_dim} dims "
                f"of each head (open PR NVIDIA/Megatron-LM #7476), transformers {int(round(fraction * req.head_dim))}"
                f": {whole.inv_freq.size} frequencies instead of {int(round(fraction * req.head_dim)) // 2}; nearest "
                "it can express: YaRN on the whole head, or linear")
        factor = _yarn_factor(req, group)
        attention = yarn_attention_factor(group, factor)
        # GPT attention leaves its softmax scale alone: mscale_all_dim only divides, so 0 keeps the arithmetic plain
        both = group.get("attention_factor") is None and group.get("mscale") and group.get("mscale_all_dim")
        m_all = float(group["mscale_all_dim"]) if both else 0.0
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
        raise PosencError(f"{who} has no {rope_type} RoPE (it has rope, linear, llama3 and yarn); nearest it can "
                          f"express: posenc scale yarn or linear with the same factor")
    fields["max_position_embeddings"] = req.target
    return fields, caveats


#: MLATransformerConfig's YaRN fields that Megatron-LM's CLI cannot set (its --yarn-* flags fill the GPT-only
#: yarn_* attributes, argument_utils.py _apply_yarn_config_from_args returns early for MLA): their class defaults
MLA_CLI_FIXED = {"original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0}


def _mla_fields(req: ScaleRequest, group: dict[str, Any], who: str) -> tuple[dict[str, Any], list[str]]:
    """MLATransformerConfig's rope fields (Megatron-Core 0.19.2: multi_latent_attention.py builds RotaryEmbedding or
    YarnRotaryEmbedding over qk_pos_emb_head_dim and scales its softmax by mscale(rotary_scaling_factor,
    mscale_all_dim)**2), or a refusal with what Megatron would compute."""
    rope_type = _rope_type(group)
    fraction = _rotary_fraction(req, group)
    caveats = ["Megatron's MLA de-interleaves the rope half of q and k (apply_rotary_pos_emb with "
               "mla_rotary_interleaved=True), as transformers' DeepSeek-V3 with rope_interleave true: convert the "
               "weights with Megatron-Bridge's DeepSeek mapping"]
    fields: dict[str, Any] = {"position_embedding_type": "rope", "multi_latent_attention": True}
    if rope_type == "default":
        # Megatron's MLA softmax scale takes mscale(rotary_scaling_factor, mscale_all_dim) whatever the rope type:
        # factor 1 keeps it 1, as transformers' plain rope does
        fields |= {"rope_type": "rope", "rotary_base": float(group["rope_theta"]), "qk_pos_emb_head_dim": req.head_dim}
        if fraction != 1.0:
            fields["rotary_percent"] = fraction
        fields |= {"rotary_scaling_factor": 1.0, "mscale": 1.0, "mscale_all_dim": 0.0}
    elif rope_type == "yarn":
        if fraction != 1.0:
            raise PosencError(f"{who}'s MLA YaRN rotates all qk_pos_emb_head_dim ({req.head_dim}) dims (it passes no "
                              f"rotary_percent); this model rotates {fraction:g} of them")
        factor = _yarn_factor(req, group)
        if group.get("truncate", True) is False:
            rounded = _with(req, group, truncate=True)
            raise PosencError(f"{who}'s MLA YaRN always rounds the correction range (multi_latent_attention.py passes "
                              f"no correction_range_round_to_int): rounded, Megatron's "
                              f"{measured(_hf(req, group), rounded)} from transformers' (truncate false); nearest it "
                              "can express: the same YaRN with truncate true (those numbers)")
        # both MLA attentions multiply the softmax scale by mscale(factor, mscale_all_dim)^2 (transformers' only when
        # mscale_all_dim is set: 0 gives 1 in Megatron too), so mscale_all_dim is kept and mscale solved around it
        m_all = float(group.get("mscale_all_dim") or 0.0)
        softmax = yarn_mscale(factor, m_all) ** 2
        m = _megatron_mscale(group, factor, m_all, who, caveats)
        fields |= {"rope_type": "yarn", "rotary_base": float(group["rope_theta"]),
                   "qk_pos_emb_head_dim": req.head_dim, "rotary_scaling_factor": factor,
                   "original_max_position_embeddings": int(group["original_max_position_embeddings"]),
                   "beta_fast": float(group.get("beta_fast") or 32.0),
                   "beta_slow": float(group.get("beta_slow") or 1.0), "mscale": m, "mscale_all_dim": m_all}
        if softmax != 1.0:
            caveats.append(f"Megatron's MLA and transformers both multiply the softmax scale by mscale({factor:g}, "
                           f"mscale_all_dim {m_all:g})^2 = {softmax:.6g}")
    else:
        raise PosencError(f"{who}'s multi-latent attention has no {rope_type} RoPE (MLATransformerConfig.rope_type is "
                          "rope or yarn); nearest it can express: posenc scale yarn with the same factor")
    fields["max_position_embeddings"] = req.target
    return fields, caveats


def _integer_base(req: ScaleRequest, group: dict[str, Any], theta: float, who: str, caveats: list[str]) -> float:
    """Megatron-LM's --rotary-base is ``type=int``: the rounded theta when that keeps inv_freq, else a refusal."""
    if float(theta).is_integer():
        return theta
    nearest = float(round(theta))
    difference = measured(_hf(req, group), _with(req, group, rope_theta=nearest))
    if difference != SAME:
        raise PosencError(f"{who}'s --rotary-base takes an integer; with rope_theta {theta!r} rounded to "
                          f"{nearest:.0f}, {difference}; nearest it can express: --rotary-base {nearest:.0f}")
    caveats.append(f"{who}'s --rotary-base takes an integer: rope_theta {theta!r} rounded to {nearest:.0f} gives "
                   f"the same inv_freq (rtol {RTOL:g})")
    return nearest


def _mla_cli(req: ScaleRequest, group: dict[str, Any], fields: dict[str, Any], caveats: list[str],
             who: str) -> list[str]:
    theta = _integer_base(req, group, fields["rotary_base"], who, caveats)
    argv = ["--position-embedding-type", "rope", "--multi-latent-attention", "--rope-type", fields["rope_type"],
            "--rotary-base", _num(theta), "--qk-pos-emb-head-dim", str(fields["qk_pos_emb_head_dim"])]
    if "rotary_percent" in fields:
        argv += ["--rotary-percent", repr(fields["rotary_percent"])]
    if fields["rope_type"] == "rope":
        argv.append("--no-rope-fusion")  # MLATransformerConfig refuses apply_rope_fusion (the CLI default) without yarn
    if fields["rope_type"] == "yarn":
        fixed = {k: v for k, v in MLA_CLI_FIXED.items() if fields[k] != v}
        if fixed:
            given = ", ".join(f"{k} {_num(fields[k])}" for k in fixed)
            defaults = ", ".join(f"{k} {_num(v)}" for k, v in MLA_CLI_FIXED.items())
            difference = measured(_hf(req, group), _with(req, group, **MLA_CLI_FIXED))
            raise PosencError(
                f"{who} has no flag for MLA's original_max_position_embeddings/beta_fast/beta_slow (its --yarn-* "
                f"flags fill GPT's yarn_* fields only), so MLATransformerConfig keeps {defaults}; this model has "
                f"{given}: Megatron's {difference} from transformers; nearest it can express: set them on the "
                "MLATransformerConfig in Python (posenc scale --format megatron-bridge prints the fields)")
        caveats.append(f"{who}'s --yarn-original-max-position-embeddings/--yarn-beta-* flags do not reach MLA: "
                       "MLATransformerConfig keeps original_max_position_embeddings 4096, beta_fast 32, beta_slow 1, "
                       "this model's values")
    argv += ["--rotary-scaling-factor", _num(fields["rotary_scaling_factor"]), "--mscale", _num(fields["mscale"]),
             "--mscale-all-dim", _num(fields["mscale_all_dim"]), "--max-position-embeddings", str(req.target)]
    caveats.append(f"{who}: set the other MLA sizes (--q-lora-rank, --kv-lora-rank, --qk-head-dim, --v-head-dim) from "
                   "the model; the softmax scale divides by sqrt(qk-head-dim + qk-pos-emb-head-dim)")
    return argv


def _megatron_cli(req: ScaleRequest, group: dict[str, Any], facts: ModelFacts | None) -> tuple[str, list[str]]:
    who = "Megatron-LM"
    fields, caveats = megatron_fields(req, group, facts, who)
    if fields.get("multi_latent_attention"):
        argv = _mla_cli(req, group, fields, caveats, who)
        caveats.append("Megatron-LM's --use-checkpoint-args restores rotary base/percent but none of the scaling "
                       "flags: pass these again when resuming")
        return shlex.join(argv), caveats
    theta = _integer_base(req, group, fields["rotary_base"], who, caveats)
    argv = ["--position-embedding-type", fields["position_embedding_type"], "--rotary-base", _num(theta)]
    if "rotary_percent" in fields:
        argv += ["--rotary-percent", repr(fields["rotary_percent"])]
    if "seq_len_interpolation_factor" in fields:
        factor = fields["seq_len_interpolation_factor"]
        if not float(factor).is_integer():
            lo, hi = math.floor(factor), math.ceil(factor)
            raise PosencError(f"{who}'s --rotary-seq-len-interpolation-factor takes an integer, not {factor:g} "
                              f"(transformers' linear factor); nearest it can express: {lo} or {hi} "
                              f"({lo * req.original_max} or {hi * req.original_max} positions)")
        argv += ["--rotary-seq-len-interpolation-factor", _num(factor)]
    if fields.get("rope_scaling"):
        factor = fields["rope_scaling_factor"]
        if factor != 8.0:
            eight = _with(req, group, factor=8.0)
            raise PosencError(
                f"{who} up to 0.19.2 never forwards --rope-scaling-factor to the model (NVIDIA/Megatron-LM #6305, "
                f"fixed by PR #6306): --use-rope-scaling trains with llama3 factor 8, whose "
                f"{measured(_hf(req, group), eight)} from factor {factor:g}'s; workaround: build GPTModel(..., "
                f"rope_scaling=True, rope_scaling_factor={factor:g}) in your model provider (or set "
                "config.rope_scaling_factor after gpt_config_from_args)")
        argv += ["--use-rope-scaling", "--rope-scaling-factor", _num(factor)]
    if fields["position_embedding_type"] == "yarn":
        argv += ["--rotary-scaling-factor", _num(fields["yarn_rotary_scaling_factor"]),
                 "--yarn-original-max-position-embeddings", str(fields["yarn_original_max_position_embeddings"]),
                 "--yarn-beta-fast", _num(fields["yarn_beta_fast"]), "--yarn-beta-slow", _num(fields["yarn_beta_slow"]),
                 "--mscale", _num(fields["yarn_mscale"]), "--mscale-all-dim", _num(fields["yarn_mscale_all_dim"]),
                 "--yarn-correction-range-round-to-int" if fields["yarn_correction_range_round_to_int"]
                 else "--no-yarn-correction-range-round-to-int"]
    argv += ["--max-position-embeddings", str(req.target)]
    if req.stage:  # a training run at this length (scale --seq-len, a pick stage): Megatron's training length
        argv += ["--seq-length", str(req.target)]
    caveats.append("Megatron-LM's --use-checkpoint-args restores rotary base/percent but none of the scaling flags: "
                   "pass these again when resuming")
    return shlex.join(argv), caveats


def _bridge(req: ScaleRequest, group: dict[str, Any], facts: ModelFacts | None) -> tuple[str, list[str]]:
    who = "Megatron-Bridge"
    fields, caveats = megatron_fields(req, group, facts, who)
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

def _torchtune(req: ScaleRequest, group: dict[str, Any], facts: ModelFacts | None) -> tuple[str, list[str]]:
    who = "torchtune"
    _plain_only(group, who)
    rope_type = _rope_type(group)
    fraction = _rotary_fraction(req, group)
    if fraction != 1.0:
        raise PosencError(f"{who}'s model builders rotate the whole head; this model rotates {fraction:g} of it")
    theta = float(group["rope_theta"])
    lines = ["model:"]
    if rope_type == "default":
        lines += [f"  rope_base: {_num(theta)}"]
    elif rope_type == "llama3":
        _llama3_fixed(req, group, who)
        lines += [f"  rope_base: {_num(theta)}", f"  scale_factor: {_num(float(group['factor']))}"]
    else:
        raise PosencError(f"{who} has no {rope_type} RoPE (only plain RoPE and llama3 at 1/4/8192; RFC "
                          "meta-pytorch/torchtune #1183); nearest it can express: a larger rope_base "
                          "(posenc scale ntk)")
    lines.append(f"  max_seq_len: {req.target}")
    if req.stage:  # the training length: torchtune's tokenizer builders cut (and pack) sequences at max_seq_len
        lines += ["tokenizer:", f"  max_seq_len: {req.target}"]
    caveats = [f"{who} computes its RoPE cache for max_seq_len positions only (longer inputs fail), and its "
               "checkpointer copies the source config.json on save: write the exported rope with posenc scale "
               "--format hf-v5"]
    caveats.append("these are arguments of torchtune's component builders (llama3_1 and llama3_2 take scale_factor; "
                   "the named builders such as llama3_1_8b fix them): pass them with the model's sizes")
    return "\n".join(lines), caveats


# -------------------------------------------------------------------------------------------------------- torchtitan

def _torchtitan(req: ScaleRequest, group: dict[str, Any], facts: ModelFacts | None) -> tuple[str, list[str]]:
    who = "torchtitan"
    _plain_only(group, who)
    rope_type = _rope_type(group)
    fraction = _rotary_fraction(req, group)
    if fraction != 1.0:
        raise PosencError(f"{who}'s RoPE rotates the whole head (dim); this model rotates {fraction:g} of it")
    theta = float(group["rope_theta"])
    head = [f"dim={req.head_dim}", f"max_seq_len={req.target}", f"theta={theta!r}"]
    caveats: list[str] = []
    model_type = facts.model_type if facts is not None else ""
    # torchtitan's Qwen3 and gpt-oss use CosSinRoPE (rotate-half, as transformers); Llama 3, DeepSeek-V3 and Kimi use
    # ComplexRoPE (adjacent pairs), the only one with llama scaling
    cls = "CosSinRoPE" if rope_type != "llama3" and model_type.startswith(COSSIN_PREFIXES) else "ComplexRoPE"
    if rope_type == "default":
        text = f"{cls}.Config({', '.join(head)})"
    elif rope_type == "llama3":
        text = (f"ComplexRoPE.Config({', '.join(head)}, scaling=\"llama\", scaling_factor={float(group['factor'])!r}, "
                f"low_freq_factor={float(group['low_freq_factor'])!r}, "
                f"high_freq_factor={float(group['high_freq_factor'])!r}, "
                f"original_max_position_embeddings={int(group['original_max_position_embeddings'])})")
    elif rope_type == "yarn":
        factor = _yarn_factor(req, group)
        attention = yarn_attention_factor(group, factor)
        folds = facts is not None and facts.model_type == "gpt_oss" and attention == yarn_mscale(factor)
        if folds:
            caveats.append(f"{who}'s RoPE leaves out YaRN's attention factor; its gpt-oss attention folds it into "
                           f"the softmax scale (x{attention:.6g} squared, models/gpt_oss/model.py), as transformers' "
                           "cos/sin do")
        elif attention != 1.0:
            raise PosencError(
                f"{who}'s RoPE never applies YaRN's attention factor, and its Llama3/Qwen3 decoders do not fold it "
                f"into the softmax scale (only its gpt-oss, DeepSeek-V3 and Kimi models do): they train with cos/sin "
                f"x1 where transformers uses x{attention:.6g} (logits x{attention ** 2:.4g}); nearest it can express: "
                "the same YaRN with mscale = mscale_all_dim (attention factor 1)")
        text = (f"{cls}.Config({', '.join(head)}, scaling=\"yarn\", rope_factor={factor!r}, "
                f"beta_fast={float(group.get('beta_fast') or 32.0)!r}, "
                f"beta_slow={float(group.get('beta_slow') or 1.0)!r}, "
                f"original_seq_len={int(group['original_max_position_embeddings'])}, "
                f"truncate={bool(group.get('truncate', True))!r})")
    else:
        raise PosencError(f"{who} has no {rope_type} RoPE (its RoPE.Config scaling is none, llama or yarn); nearest "
                          "it can express: posenc scale yarn, or a larger theta (posenc scale ntk)")
    if req.stage:  # the training length (TrainingConfig.seq_len, which also sizes the RoPE cache it needs)
        text += f"\ntraining.seq_len = {req.target}"
    caveats.append(f"{who} writes no config.json with a Hugging Face checkpoint: write its rope with posenc scale "
                   "--format hf-v5")
    if text.startswith("ComplexRoPE"):
        caveats.append("ComplexRoPE pairs adjacent dims: convert Hugging Face q/k weights with torchtitan's "
                       "state-dict adapter for the model (it permutes them)")
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

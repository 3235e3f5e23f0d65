"""Megatron-Bridge 0.6.2 (on megatron-core 0.19.2): the provider fields posenc renders for a request
(``posenc scale --engine megatron-bridge``; Megatron-Core's fields, :mod:`.megatron`), and what
``AutoBridge.from_hf_pretrained`` imports from a model's config, its lossy import, then trains with Megatron-Core
(``posenc check --trainer``).

stdlib at import (``posenc scale`` loads this module only for its format).
"""

from __future__ import annotations

from typing import Any

from posenc_cli.engines.runs import NOT_MODELLED
from posenc_cli.engines.target import Rendering, Target
from posenc_cli.trainers.megatron import VERSION as CORE_VERSION
from posenc_cli.trainers.megatron import megatron_core, megatron_fields
from posenc_cli.trainers.trained import (
    Refusal,
    Rope,
    Trained,
    one_rotary_runner,
    plain_only,
    request_group,
    rope_type_of,
    rotary_fraction,
)

NAME = "megatron-bridge"
VERSION = "0.6.2"

BRIDGE_YARN_MAPPING = (("factor", "yarn_rotary_scaling_factor"),
                       ("original_max_position_embeddings", "yarn_original_max_position_embeddings"),
                       ("beta_fast", "yarn_beta_fast"), ("beta_slow", "yarn_beta_slow"),
                       ("mscale", "yarn_mscale"), ("mscale_all_dim", "yarn_mscale_all_dim"))
#: text model types whose bridge posenc models: the generic import (model_bridge.py L529-630, L673-685), the Llama
#: bridge's llama3/linear (llama_bridge.py L74-83), gpt-oss's fixed YaRN (gpt_oss_bridge.py L93-100)
BRIDGE_GENERIC = frozenset({"qwen2", "qwen3", "qwen3_moe"})
# framework fact: gpt_oss_bridge.py's fixed YaRN
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
    plain_only(group, who)
    model_type = rope.model_type
    if model_type not in BRIDGE_GENERIC | {"llama", "gpt_oss"}:
        raise Refusal(NOT_MODELLED, f"posenc models Megatron-Bridge's generic HF import and its Llama, Qwen2/Qwen3 "
                      f"and gpt-oss bridges; {model_type or 'this model'} has another bridge or none")
    if rotary_fraction(rope, group) != 1.0:
        raise Refusal(NOT_MODELLED, f"{who}'s import of partial_rotary_factor depends on the bridge (transformers 5 "
                      "keeps it inside rope_parameters, where the generic mapping does not look)")
    rope_type = rope_type_of(group)
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


def render(r: Rendering) -> tuple[str, list[str]]:
    """``--engine megatron-bridge``: the provider fields for the request (Megatron-Core's, :mod:`.megatron`)."""
    who = "Megatron-Bridge"
    req, group = r.req, request_group(r, r.fmt)
    fields, caveats = megatron_fields(Rope.of_request(req, group, r.facts), group, who)
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
                   "config's rope with posenc scale --engine hf-v5")
    return "\n".join(lines), caveats



TARGET = Target(
    NAME, "Megatron-Bridge", "megatron-bridge", VERSION, render,
    # Bridge's Gemma 3/4 providers build local and global rope (rotary_base = (local, global))
    one_rotary_runner(NAME, VERSION, bridge_setup, several_groups=(
        "Megatron-Bridge builds per-layer rope in model-specific providers (Gemma 3/4: rotary_base (local, global)), "
        "which posenc does not model")),
    targets=f"Megatron-Bridge {{version}} (on megatron-core {CORE_VERSION})", prints="provider fields",
    proven_by="the same",
    cannot_express="llama3 band factors or original length other than 1/4/8192; YaRN with partial rotary; on MLA "
                   "models YaRN with `truncate false`; dynamic, longrope")

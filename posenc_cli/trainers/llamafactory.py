"""LLaMA-Factory 0.9.5 (``model/model_utils/rope.py`` ``configure_rope``): the YAML posenc renders for a request
(``posenc scale --engine llamafactory``), what it trains for a model as shipped (``posenc check --trainer``), and
how ``posenc audit`` reads its training YAML back, all from one statement of what ``configure_rope`` does:

YAML ``rope_scaling: linear|dynamic|yarn|llama3`` and ``cutoff_len``; the factor is ``ceil(cutoff_len / old)``
(:func:`scaling_factor`) with ``old`` the model's own ``rope_scaling.original_max_position_embeddings`` or else its
``max_position_embeddings``; it writes only ``{rope_type, factor}`` (plus ``original_max_position_embeddings`` for
dynamic and yarn, and 1.0/4.0 for llama3: :func:`llamafactory_rope`), replacing the model's own scaling, and sets
``max_position_embeddings = old * factor`` (a float). No beta, mscale, attention_factor, truncate, theta or longrope.
Dynamic therefore never scales in training (the base grows only past ``old * factor``). It runs only under
transformers 4.x: under 5.x the float length and the missing ``rope_theta`` raise. At inference and export a
``rope_scaling`` key resets the factor to 2.0. Checked against the package in ``tests/trainers/test_hf.py``.

stdlib at import (``posenc scale`` loads this module only for its format).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from posenc_cli.engines.runs import EngineRun
from posenc_cli.engines.target import Rendering, Target
from posenc_cli.errors import PosencError
from posenc_cli.rope.rope_types import rope_type_of
from posenc_cli.rope.scaling import rope_parameters
from posenc_cli.trainers.hf_based import (
    Difference,
    difference,
    dump_yaml,
    inv_freq_off,
    length_text,
    one_dict,
    own_rope,
    own_scaling,
    top_level_only,
    trainer_input,
    transformers_groups,
)
from posenc_cli.trainers.settings import Reader, TrainedWith, positive_int, reject_rope_keys
from posenc_cli.trainers.trained import rope_of

if TYPE_CHECKING:
    from posenc_cli.models.model_positions import ModelPositions

NAME = "llamafactory"
VERSION = "0.9.5"


def scaling_factor(cutoff_len: int, old: int) -> int:
    """LLaMA-Factory's factor for a ``cutoff_len`` past the model's own length ``old``: ``ceil(cutoff_len / old)``."""
    return math.ceil(cutoff_len / old)


LLAMAFACTORY_TYPES = ("linear", "dynamic", "yarn", "llama3")
#: model types whose transformers 4.57.6 config class has a ``rope_scaling`` attribute: for any other type
#: ``configure_rope`` warns "Current model does not support RoPE scaling" and changes nothing (tests check the list
#: against 4.57.6)
LLAMAFACTORY_SCALABLE = frozenset((
    "apertus", "arcee", "aria_text", "bamba", "blt", "chameleon", "code_llama", "cohere", "cohere2", "csm",
    "deepseek_v2", "deepseek_v3", "diffllama", "doge", "dots1", "efficientloftr", "ernie4_5", "ernie4_5_moe",
    "evolla", "exaone4", "falcon", "falcon_h1", "flex_olmo", "fuyu", "gemma3_text", "gemma3n_text", "glm4_moe",
    "glm4v_moe_text", "glm4v_text", "gpt_neox", "gpt_neox_japanese", "gpt_oss", "granite", "granitemoe",
    "granitemoehybrid", "granitemoeshared", "hunyuan_v1_dense", "hunyuan_v1_moe", "llama", "llama4_text",
    "longcat_flash", "moonshine", "olmo", "olmo2", "olmo3", "olmoe", "open-llama", "persimmon", "phi", "phi3",
    "phi4_multimodal", "phimoe", "qwen2", "qwen2_5_vl", "qwen2_5_vl_text", "qwen2_moe", "qwen2_vl", "qwen2_vl_text",
    "qwen3", "qwen3_moe", "qwen3_next", "qwen3_vl_moe_text", "qwen3_vl_text", "seed_oss", "smollm3", "stablelm",
    "starcoder2"))



def llamafactory_rope(rope_type: str, factor: float, old: int, theta: float,
                      partial: float | None = None) -> dict[str, Any]:
    """The rope dict LLaMA-Factory's ``configure_rope`` writes (with the model's theta and partial rotary factor,
    which it leaves as they are)."""
    p: dict[str, Any] = {"rope_type": rope_type, "factor": float(factor)}
    if rope_type in ("dynamic", "yarn"):
        p["original_max_position_embeddings"] = old
    elif rope_type == "llama3":
        p |= {"original_max_position_embeddings": old, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    p["rope_theta"] = theta
    if partial is not None:
        p["partial_rotary_factor"] = partial
    return p


def llamafactory_scales(config: Mapping[str, Any]) -> bool:
    """Whether LLaMA-Factory's ``configure_rope``, which it calls on the top-level config, reaches the rope the model
    is built with: only where transformers 4.57.6's class for the top-level ``model_type`` has ``rope_scaling``
    (Qwen2-VL and Qwen2.5-VL pass it on to their text config; a composite such as Llava, Llama 4 or Qwen3-VL has none,
    and Glm4v's top-level copy never reaches its text config)."""
    return str(config.get("model_type") or "") in LLAMAFACTORY_SCALABLE


def llamafactory_configure(own: dict[str, Any], max_pos: int, cutoff_len: int, rope_scaling: str,
                           config: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], int] | None:
    """What LLaMA-Factory 0.9.5's ``configure_rope`` sets for YAML ``rope_scaling`` and ``cutoff_len`` on a model
    with rope dict ``own`` and ``max_position_embeddings`` ``max_pos``: the new rope dict and length, or None when the
    model's rope stays as shipped (``cutoff_len`` within the old length, or ``config`` is one it cannot scale, see
    :func:`llamafactory_scales`).

    The old length is ``original_max_position_embeddings`` inside the config's ``rope_scaling`` as transformers 4.x
    keeps it, else ``max_pos``: with the config file ``config`` given, its text config's ``rope_scaling`` dict (Phi-3's
    top-level original length does not count); without it, ``own``'s."""
    if config:
        if not llamafactory_scales(config):
            return None
        from posenc_cli.models.config_keys import text_config

        shipped = text_config(config)[0].get("rope_scaling")
        scaling = shipped if isinstance(shipped, Mapping) else {}
    else:
        scaling = own
    old = int(scaling.get("original_max_position_embeddings") or max_pos)
    if cutoff_len <= old:
        return None
    factor = scaling_factor(cutoff_len, old)
    return (llamafactory_rope(rope_scaling, factor, old, float(own["rope_theta"]), own.get("partial_rotary_factor")),
            old * factor)


def render(r: Rendering) -> tuple[str, list[str]]:
    """``--engine llamafactory``: the YAML ``rope_scaling`` and ``cutoff_len`` that give the request, or a refusal
    with the nearest LLaMA-Factory can train."""
    t = trainer_input(r)
    req = t.req
    top_level_only("LLaMA-Factory", "rope_scaling", t)
    one_dict("LLaMA-Factory", t)
    caveats = [f"LLaMA-Factory {VERSION} sets rope scaling only under transformers 4.x (checked "
               "on 4.57.6): under 5.x configure_rope fails (a float max_position_embeddings, then rope_theta None)"]
    if req.unchanged:
        return dump_yaml({"cutoff_len": req.target}), caveats + [
            "no rope_scaling key: the model's own rope already serves this length"]
    if t.model_type and t.model_type not in LLAMAFACTORY_SCALABLE:
        raise PosencError(f"under transformers 4.x the {t.model_type} config has no rope_scaling, so LLaMA-Factory "
                          "leaves the rope as shipped (\"Current model does not support RoPE scaling\"), measured "
                          f"at {req.target} positions: {difference(*own_rope(t), t)}; nearest: none, use "
                          "--engine trl or axolotl")
    before = t.before if t.before is not None else {"max_position_embeddings": req.original_max}
    own = own_scaling(before)
    old = int(own.get("original_max_position_embeddings") or before.get("max_position_embeddings")
              or req.original_max)
    group = rope_parameters(req)
    rope_type = group.get("rope_type", "default")
    theta = float(req.theta)
    prf = group.get("partial_rotary_factor")
    factor = float(group.get("factor", req.factor))
    expressible = rope_type in LLAMAFACTORY_TYPES
    lf_type = rope_type if expressible else "yarn"
    # an integer factor is set exactly; any other is the ceil LLaMA-Factory would take (at least 2)
    lf_factor = int(factor) if factor.is_integer() and factor >= 2 else max(2, math.ceil(factor))
    cutoff = req.target if scaling_factor(req.target, old) == lf_factor else lf_factor * old
    lf = llamafactory_rope(lf_type, lf_factor, old, theta, prf)
    diff = difference(lf, old * lf_factor, t)
    dropped = sorted(set(req.extra) - set(lf))
    why = ""
    if not expressible:
        why = f"LLaMA-Factory has no {rope_type} rope scaling (only {', '.join(LLAMAFACTORY_TYPES)})"
    elif dropped:
        why = f"LLaMA-Factory replaces rope_scaling with its own dict and drops {', '.join(dropped)}"
    elif not diff.within():
        if not factor.is_integer() or factor < 2:
            why = f"LLaMA-Factory's factor is ceil(cutoff_len / {old}), a whole number of at least 2: x{factor:g} " \
                  "cannot be set"
        elif lf_type in ("yarn", "llama3") and int(group.get("original_max_position_embeddings", old)) != old:
            why = (f"LLaMA-Factory scales from the model's own length {old} (its max_position_embeddings or "
                   f"rope_scaling original), not from {group['original_max_position_embeddings']}")
        elif rope_type == "dynamic":
            why = (f"LLaMA-Factory's dynamic writes max_position_embeddings {old} x {lf_factor:g}, so transformers "
                   f"keeps the base unscaled up to {length_text(old * lf_factor)} and dynamic never scales in training")
        else:
            why = "LLaMA-Factory writes only rope_type, factor and original_max_position_embeddings " \
                  f"(original {old}; low/high_freq_factor fixed at 1/4; no beta, mscale, attention_factor, truncate)"
    if req.stage and not why and cutoff != req.target:
        # a training run at a set length (a pick stage): cutoff_len is both LLaMA-Factory's training length and its
        # factor, so this length trains with another factor than the plan's
        at = scaling_factor(req.target, old)
        theirs = (llamafactory_rope(lf_type, at, old, theta, prf), old * at) if at >= 2 else own_rope(t)
        raise PosencError(
            f"LLaMA-Factory's factor is ceil(cutoff_len / {old}): training at {req.target} (cutoff_len {req.target}) "
            + (f"gives {lf_type} factor {at}" if at >= 2 else "keeps the model's own rope")
            + f", not {factor:g}, measured at {req.target} positions: {difference(*theirs, t)}; nearest: rope_scaling "
            f"{lf_type} with cutoff_len {cutoff} (factor {lf_factor:g}, these numbers, training at "
            f"{length_text(cutoff)})")
    if dropped and diff.within():
        raise PosencError(f"{why}: its dict gives the same frequencies, but the model needs {', '.join(dropped)}; "
                          "nearest: none, use --engine hf and train from the patched config.json")
    if why:
        raise PosencError(f"{why}; nearest: rope_scaling {lf_type} with cutoff_len {cutoff} (factor {lf_factor:g} "
                          f"from original {old}), measured at {req.target} positions: {diff}")
    if own and rope_type_of(own, None) not in (None, "default"):
        caveats.append(f"LLaMA-Factory replaces the model's own {own.get('rope_type', own.get('type'))} scaling "
                       f"(factor {own.get('factor')}) with this one")
    if cutoff < req.target:
        caveats.append(f"cutoff_len {cutoff} is what gives factor {lf_factor:g} (ceil(cutoff_len / {old})): "
                       f"sequences are cut at {length_text(cutoff)}, and the saved config says max_position_embeddings "
                       f"{float(cutoff)}, not {t.max_pos}")
    else:
        caveats.append(f"the saved config says max_position_embeddings {float(old * lf_factor)} (a float, which "
                       "transformers 5 rejects): fix it with posenc scale --engine hf -o")
    caveats.append("leave rope_scaling out of the YAML for llamafactory-cli chat, api, eval and export: there "
                   "LLaMA-Factory resets the factor to 2.0 (the trained config already carries the scaling)")
    return dump_yaml({"rope_scaling": lf_type, "cutoff_len": cutoff}), caveats




# --- what LLaMA-Factory trains for a model as shipped -------------------------------------------------------------

def _note_on_rope_scaling(model: ModelPositions, cfg: dict[str, Any], max_model_len: int) -> str | None:
    """What a YAML ``rope_scaling`` of the model's own type would do (it replaces the model's scaling)."""
    own = model.layers[0].params
    rope_type = own.get("rope_type", "default")
    if rope_type in LLAMAFACTORY_TYPES and cfg and not llamafactory_scales(cfg):
        return (f"rope_scaling: {rope_type} in the YAML changes nothing here: LLaMA-Factory sets it on the top-level "
                f"config, and transformers 4.x's {cfg.get('model_type')} config has no rope_scaling that reaches the "
                "text model")
    if rope_type not in LLAMAFACTORY_TYPES or not model.max_position_embeddings:
        return None
    configured = llamafactory_configure(own, model.max_position_embeddings, max_model_len, rope_type, cfg or None)
    if configured is None:
        return None
    rope = rope_of(model, max_model_len)
    lf, window = configured  # LLaMA-Factory also sets max_position_embeddings, which dynamic reads
    theirs, ours = replace(rope, max_pos=window).freqs(lf), rope.freqs()
    off = Difference(inv_freq_off(theirs, ours), (theirs.attention_factor, ours.attention_factor))
    what = f"with rope_scaling: {rope_type} in the YAML, LLaMA-Factory replaces the model's scaling " \
           f"with factor {lf['factor']:g} from {lf.get('original_max_position_embeddings', '')} " \
           "(ceil(cutoff_len / original))"
    return f"{what}: {off}" if not off.within() else f"{what}: the same numbers"


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    """transformers' numbers for the model as shipped (no ``rope_scaling`` key in the YAML), with a note on what the
    key would do."""
    groups = transformers_groups(model, seq_len or max_model_len)
    notes = []
    if len(model.layers) == 1 and model.max_position_embeddings:
        note = _note_on_rope_scaling(model, cfg, max_model_len)
        if note is not None:
            notes.append(note)
    notes.append(f"LLaMA-Factory {VERSION} trains the model's own rope when the YAML has no rope_scaling key")
    return EngineRun(NAME, VERSION, max_model_len, groups, [f"cutoff_len: {max_model_len}"], warnings=notes,
                     layout="rotate-half")


# --- posenc audit: a LLaMA-Factory training YAML read back --------------------------------------------------------

def _model_rope(cfg: Mapping[str, Any]) -> tuple[dict[str, Any], int | None, Mapping[str, Any]]:
    """(the flat rope dict as transformers 5 reads it, the window, the raw rope dict as written) of a config."""
    from posenc_cli.models.config_keys import text_config
    from posenc_cli.models.model_positions import describe

    model = describe(cfg)
    if model.family != "rope" or not model.layers:
        raise PosencError(f"the config is not a RoPE model (posenc reads it as {model.family})")
    text = text_config(cfg)[0]
    raw = text.get("rope_scaling") or text.get("rope_parameters") or {}
    return dict(model.layers[0].params), model.max_position_embeddings, raw if isinstance(raw, Mapping) else {}


def _read_yaml(data: Any, path: str, exported: Mapping[str, Any] | None,
               base: Mapping[str, Any] | None) -> TrainedWith:
    """The rope and window a LLaMA-Factory training YAML trained with, scaling from the base model's config (else
    the checkpoint's)."""
    model_cfg = base if base is not None else exported
    reject_rope_keys(data, {"rope_scaling"}, path, "LLaMA-Factory's only RoPE setting is rope_scaling "
                      "(linear, dynamic, yarn or llama3; hparams/model_args.py)")
    kind = data.get("rope_scaling")
    if kind is not None and kind not in LLAMAFACTORY_TYPES:
        raise PosencError(f"{path}: rope_scaling {kind!r} is not one LLaMA-Factory takes; use one of: "
                          f"{', '.join(LLAMAFACTORY_TYPES)}")
    if "export_dir" in data and not data.get("do_train"):
        raise PosencError(f"{path} is a LLaMA-Factory export settings file (export_dir, no do_train); pass the "
                          "training YAML: it says what the model was trained with")
    cutoff = positive_int(data.get("cutoff_len", 2048), "cutoff_len", path)  # DataArguments' default
    label = f"LLaMA-Factory {path}"
    if kind is None:
        return TrainedWith(NAME, label, None, None, ["no rope_scaling: LLaMA-Factory left the rope as it was"])
    if model_cfg is None:
        raise PosencError(f"{path}: LLaMA-Factory scales from the model's own length and theta, and the checkpoint "
                          "has no config.json to read them from")
    params, window, raw = _model_rope(model_cfg)
    orig = raw.get("original_max_position_embeddings")
    note = ""
    if isinstance(orig, (int, float)) and not isinstance(orig, bool):
        old = int(orig)
    else:
        old = window or 0
        factor = raw.get("factor")
        if base_is_exported(model_cfg, raw) and isinstance(factor, (int, float)) and factor > 1:
            old = int(round(old / factor))  # the window LLaMA-Factory itself raised from old * factor
            note = (f"the model's length before training is taken as {old} (max_position_embeddings / factor of a "
                    "config LLaMA-Factory scaled); pass --base-model with the base model's config to be sure")
    if not old:
        raise PosencError("the config has no max_position_embeddings for LLaMA-Factory to scale from")
    notes: list[str] = [note] if note else []
    if cutoff <= old:
        notes.append(f"cutoff_len {cutoff} <= the model's length {old}: LLaMA-Factory disabled rope scaling")
        return TrainedWith(NAME, label, None, None, notes)
    factor = float(scaling_factor(cutoff, old))
    rope = llamafactory_rope(kind, factor, old, params["rope_theta"])
    if factor != cutoff / old:
        notes.append(f"LLaMA-Factory rounds the factor up: ceil({cutoff} / {old}) = {factor:g}")
    return TrainedWith(NAME, label, rope, int(old * factor), notes, source_window=old)


def base_is_exported(cfg: Mapping[str, Any], raw: Mapping[str, Any]) -> bool:
    """Whether a config read for LLaMA-Factory's original length already carries a scaling (then its window is
    ``old * factor``, as LLaMA-Factory writes it)."""
    return rope_type_of(raw, None) in LLAMAFACTORY_TYPES


TARGET = Target(
    NAME, "LLaMA-Factory", "llamafactory", VERSION, render, run,
    targets="LLaMA-Factory {version} (under transformers 4.57.6)", prints="YAML `rope_scaling` + `cutoff_len`",
    proven_by="`configure_rope`, `tests/trainers/test_hf.py`",
    cannot_express="a factor other than a whole `ceil(cutoff_len / L)` of at least 2, from an original length other "
                   "than the model's own; anything under transformers 5.x (its `configure_rope` fails there)",
    reads_back=Reader(NAME, "LLaMA-Factory", "yaml", _read_yaml,
                      frozenset({"model_name_or_path", "cutoff_len", "stage", "finetuning_type"}),
                      base_key="model_name_or_path"))

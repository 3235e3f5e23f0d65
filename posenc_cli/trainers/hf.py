"""Renderings for the Hugging Face-based trainers: LLaMA-Factory 0.9.5, axolotl 0.21.0, Unsloth 2026.10.9 and
TRL 1.16.0 (``posenc scale --format llamafactory|axolotl|unsloth|trl``).

All four build the model with transformers' own modeling, so the frequencies are transformers' for the config the
trainer ends up with; what differs is what each lets a user put into that config (checked against the packages'
own config handling in ``tests/trainers/test_hf.py``):

* LLaMA-Factory (``model/model_utils/rope.py`` ``configure_rope``): YAML ``rope_scaling: linear|dynamic|yarn|llama3``
  and ``cutoff_len``; the factor is ``ceil(cutoff_len / old)`` with ``old`` the model's own
  ``rope_scaling.original_max_position_embeddings`` or else its ``max_position_embeddings``; it writes only
  ``{rope_type, factor}`` (plus ``original_max_position_embeddings`` for dynamic and yarn, and 1.0/4.0 for llama3),
  replacing the model's own scaling, and sets ``max_position_embeddings = old * factor`` (a float). No beta,
  mscale, attention_factor, truncate, theta or longrope. Dynamic therefore never scales in training (the base grows
  only past ``old * factor``). It runs only under transformers 4.x: under 5.x the float length and the missing
  ``rope_theta`` raise. At inference and export a ``rope_scaling`` key resets the factor to 2.0.
* axolotl (``loaders/utils.py`` ``load_model_config``): ``model_config:`` is ``setattr`` on the built config, so only
  a complete ``rope_parameters`` dict (``rope_type`` and ``rope_theta`` inside) takes effect under transformers 5.
* TRL (``trainer/utils.py`` ``create_model_from_path``): ``model_init_kwargs`` go to ``from_pretrained``, which sets
  them on the loaded config: the same complete dict.
* Unsloth (``models/llama.py`` ``FastLanguageModel.from_pretrained``): a ``rope_scaling=`` of type linear, yarn or
  llama3 (not for gemma/gemma2) is kept, completed by ``_user_rope_scaling`` and set on the config; any other type
  is ignored with a warning, so the checkpoint's own rope is trained.

stdlib only at import (``posenc scale`` loads this module only for these formats); numpy loads for a refusal's
measured difference.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from posenc_cli.errors import PosencError
from posenc_cli.rope.scaling import ScaleRequest, max_position_embeddings, rope_parameters

if TYPE_CHECKING:
    from posenc_cli.rope.frequencies import Frequencies

VERSIONS = {"llamafactory": "0.9.5", "axolotl": "0.21.0", "unsloth": "2026.10.9", "trl": "1.16.0"}
#: inv_freq relative tolerance within which a trainer's config counts as transformers' (the parity tests' rtol);
#: the attention factor the same.
RTOL = 1e-6


@dataclass(frozen=True)
class TrainerInput:
    """What a trainer rendering reads: the request, the rope dict the model gets (whole, in ``rope_parameters``
    form, one dict per layer type for Gemma 3), its ``max_position_embeddings``, and the model before the request
    (its text config dict; None for a bare request)."""

    req: ScaleRequest
    rope: dict[str, Any]
    max_pos: int
    model: str = "MODEL"
    nested: str = ""  # where the model keeps its text config ("" top level)
    before: dict[str, Any] | None = None
    model_type: str | None = None


def _dump(data: dict[str, Any]) -> str:
    import yaml

    text: str = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=1000)
    return text.rstrip("\n")


def _length(n: float) -> str:
    from posenc_cli.units import format_length

    return format_length(int(n))


def _top_level_only(name: str, how: str, t: TrainerInput) -> None:
    if t.nested:
        raise PosencError(f"this model's transformers config keeps its text model in {t.nested}, and {name}'s "
                          f"{how} sets top-level config attributes only (a top-level rope_parameters leaves "
                          f"{t.nested}'s rope unchanged): use --format hf and train from the patched config.json")


def _one_dict(name: str, t: TrainerInput) -> None:
    if any(isinstance(v, dict) for v in t.rope.values()):
        raise PosencError(f"this model has one rope dict per layer type; {name} sets one rope_scaling dict for "
                          "every layer: use --format hf and train from the patched config.json")


@dataclass(frozen=True)
class Difference:
    """How far one rope dict's frequencies are from another's, as transformers computes both."""

    inv_freq: float  # max relative inv_freq difference
    attention: tuple[float, float]  # (theirs, posenc's)

    def within(self) -> bool:
        a, b = self.attention
        return self.inv_freq <= RTOL and math.isclose(a, b, rel_tol=RTOL)

    def __str__(self) -> str:
        a, b = self.attention
        text = f"inv_freq off by up to {self.inv_freq:.3g} relative"
        if not math.isclose(a, b, rel_tol=RTOL):
            text += f", attention factor {a:.6g} instead of {b:.6g}"
        return text


def difference(theirs: dict[str, Any], their_max_pos: int, t: TrainerInput, seq_len: int | None = None) -> Difference:
    """``theirs`` against the request's rope dict, both through :mod:`posenc_cli.rope.frequencies` at ``seq_len``
    (default the target: dynamic and longrope depend on it)."""

    from posenc_cli.rope.frequencies import RopeSpec, compute

    req = t.req
    n = req.target if seq_len is None else seq_len
    ours = compute(RopeSpec(rope_parameters(req), req.head_dim, max_position_embeddings(req),
                            default_partial=req.default_partial), n)
    other = compute(RopeSpec(theirs, req.head_dim, their_max_pos, default_partial=req.default_partial), n)
    return Difference(inv_freq_off(other, ours), (other.attention_factor, ours.attention_factor))


def inv_freq_off(theirs: Frequencies, ours: Frequencies) -> float:
    """The largest relative inv_freq difference (inf when the rotary dims differ)."""
    import numpy as np

    a, b = theirs.inv_freq.astype(np.float64), ours.inv_freq.astype(np.float64)
    return float(np.max(np.abs(a - b) / np.abs(b))) if a.shape == b.shape else math.inf


# --- LLaMA-Factory ----------------------------------------------------------------------------------------------

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


def _own_rope(t: TrainerInput) -> tuple[dict[str, Any], int]:
    """The model's rope as shipped (what a trainer that ignores the request trains) and its
    max_position_embeddings."""
    req = t.req
    before = t.before if t.before is not None else {}
    own = dict(_own_scaling(before)) or {"rope_type": "default"}
    own.setdefault("rope_type", own.get("type", "default"))
    own["rope_theta"] = float(before.get("rope_theta") or own.get("rope_theta") or req.theta)
    if before.get("original_max_position_embeddings") and own["rope_type"] not in ("default", "linear", "dynamic"):
        own.setdefault("original_max_position_embeddings", before["original_max_position_embeddings"])  # Phi-3
    if t.rope.get("partial_rotary_factor") is not None:
        own["partial_rotary_factor"] = t.rope["partial_rotary_factor"]
    return own, int(before.get("max_position_embeddings") or req.original_max)


def _own_scaling(before: dict[str, Any]) -> dict[str, Any]:
    for key in ("rope_scaling", "rope_parameters"):
        value = before.get(key)
        if isinstance(value, dict):
            return value
    return {}


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
    factor = math.ceil(cutoff_len / old)
    return (llamafactory_rope(rope_scaling, factor, old, float(own["rope_theta"]), own.get("partial_rotary_factor")),
            old * factor)


def llamafactory(t: TrainerInput) -> tuple[str, list[str]]:
    req = t.req
    _top_level_only("LLaMA-Factory", "rope_scaling", t)
    _one_dict("LLaMA-Factory", t)
    caveats = [f"LLaMA-Factory {VERSIONS['llamafactory']} sets rope scaling only under transformers 4.x (checked "
               "on 4.57.6): under 5.x configure_rope fails (a float max_position_embeddings, then rope_theta None)"]
    if req.unchanged:
        return _dump({"cutoff_len": req.target}), caveats + [
            "no rope_scaling key: the model's own rope already serves this length"]
    if t.model_type and t.model_type not in LLAMAFACTORY_SCALABLE:
        raise PosencError(f"under transformers 4.x the {t.model_type} config has no rope_scaling, so LLaMA-Factory "
                          "leaves the rope as shipped (\"Current model does not support RoPE scaling\"), measured "
                          f"at {req.target} positions: {difference(*_own_rope(t), t)}; nearest: none, use "
                          "--format trl or axolotl")
    before = t.before if t.before is not None else {"max_position_embeddings": req.original_max}
    own = _own_scaling(before)
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
    cutoff = req.target if math.ceil(req.target / old) == lf_factor else lf_factor * old
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
                   f"keeps the base unscaled up to {_length(old * lf_factor)} and dynamic never scales in training")
        else:
            why = "LLaMA-Factory writes only rope_type, factor and original_max_position_embeddings " \
                  f"(original {old}; low/high_freq_factor fixed at 1/4; no beta, mscale, attention_factor, truncate)"
    if req.stage and not why and cutoff != req.target:
        # a training run at a set length (a pick stage): cutoff_len is both LLaMA-Factory's training length and its
        # factor, so this length trains with another factor than the plan's
        at = math.ceil(req.target / old)
        theirs = (llamafactory_rope(lf_type, at, old, theta, prf), old * at) if at >= 2 else _own_rope(t)
        raise PosencError(
            f"LLaMA-Factory's factor is ceil(cutoff_len / {old}): training at {req.target} (cutoff_len {req.target}) "
            + (f"gives {lf_type} factor {at}" if at >= 2 else "keeps the model's own rope")
            + f", not {factor:g}, measured at {req.target} positions: {difference(*theirs, t)}; nearest: rope_scaling "
            f"{lf_type} with cutoff_len {cutoff} (factor {lf_factor:g}, these numbers, training at {_length(cutoff)})")
    if dropped and diff.within():
        raise PosencError(f"{why}: its dict gives the same frequencies, but the model needs {', '.join(dropped)}; "
                          "nearest: none, use --format hf and train from the patched config.json")
    if why:
        raise PosencError(f"{why}; nearest: rope_scaling {lf_type} with cutoff_len {cutoff} (factor {lf_factor:g} "
                          f"from original {old}), measured at {req.target} positions: {diff}")
    if own and own.get("rope_type", own.get("type")) not in (None, "default"):
        caveats.append(f"LLaMA-Factory replaces the model's own {own.get('rope_type', own.get('type'))} scaling "
                       f"(factor {own.get('factor')}) with this one")
    if cutoff < req.target:
        caveats.append(f"cutoff_len {cutoff} is what gives factor {lf_factor:g} (ceil(cutoff_len / {old})): "
                       f"sequences are cut at {_length(cutoff)}, and the saved config says max_position_embeddings "
                       f"{float(cutoff)}, not {t.max_pos}")
    else:
        caveats.append(f"the saved config says max_position_embeddings {float(old * lf_factor)} (a float, which "
                       "transformers 5 rejects): fix it with posenc scale --format hf -o")
    caveats.append("leave rope_scaling out of the YAML for llamafactory-cli chat, api, eval and export: there "
                   "LLaMA-Factory resets the factor to 2.0 (the trained config already carries the scaling)")
    return _dump({"rope_scaling": lf_type, "cutoff_len": cutoff}), caveats


# --- axolotl, TRL: a complete rope_parameters dict set on the loaded config -------------------------------------

def _complete(t: TrainerInput) -> dict[str, Any]:
    keys: dict[str, Any] = {"rope_parameters": t.rope, "max_position_embeddings": t.max_pos}
    return keys


def axolotl(t: TrainerInput) -> tuple[str, list[str]]:
    _top_level_only("axolotl", "model_config", t)
    caveats = ["axolotl sets model_config keys on the loaded config one by one: keep rope_parameters whole "
               "(a legacy `type` key or a bare rope_theta does not take effect under transformers 5)"]
    if t.req.method == "dynamic":
        caveats.append(f"a sequence_len over {t.max_pos} makes axolotl raise max_position_embeddings to it after "
                       "the model is built: training keeps transformers' dynamic base, but the saved config moves "
                       "the point where the base starts to grow")
    else:
        caveats.append(f"keep sequence_len at most {t.max_pos}: axolotl raises max_position_embeddings to a longer "
                       "one without changing the rope")
    if t.req.stage:  # a training run at this length (a pick stage): axolotl's training length
        return _dump({"sequence_len": t.req.target, "model_config": _complete(t)}), caveats
    return _dump({"model_config": _complete(t)}), caveats


def trl(t: TrainerInput) -> tuple[str, list[str]]:
    _top_level_only("TRL", "model_init_kwargs", t)
    # a training run at a set length (a pick stage): SFTConfig.max_length, where TRL cuts and packs sequences
    length = {"max_length": t.req.target} if t.req.stage else {}
    return _dump({**length, "model_init_kwargs": _complete(t)}), [
        "model_init_kwargs go to from_pretrained, which sets them on the loaded config: keep rope_parameters "
        "whole (rope_scaling without rope_theta fails under transformers 5)"]


# --- Unsloth ----------------------------------------------------------------------------------------------------

UNSLOTH_TYPES = ("linear", "yarn", "llama3")


def unsloth_rope(own: dict[str, Any], max_pos: int, max_seq_length: int, model_type: str | None = None,
                 asked: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The rope dict Unsloth 2026.10.9 trains (``FastLanguageModel.from_pretrained(max_seq_length=,
    rope_scaling=asked)``, models/llama.py) for a model with rope dict ``own``, and why:

    * a ``rope_scaling`` of type linear, yarn or llama3 (not for gemma/gemma2) replaces the model's; any other is
      ignored, and the model's own rope is trained;
    * without one, ``max_seq_length`` past ``max_position_embeddings`` sets linear scaling by their ratio, rope_theta
      kept (``_extended_rope_scaling``), except over a llama3 rope, which stays;
    * its rotary computes the dict once at init (``_compute_config_rope_inv_freq``), so dynamic NTK is plain RoPE at
      rope_theta whatever the length.
    """
    notes: list[str] = []
    rope = dict(own)
    if asked is not None:
        if model_type not in ("gemma", "gemma2") and asked.get("rope_type", asked.get("type")) in UNSLOTH_TYPES:
            rope = dict(asked)
        else:
            notes.append(f"Unsloth ignores rope_scaling of type {asked.get('rope_type', asked.get('type'))} for "
                         f"{model_type} and trains the checkpoint's own rope")
    elif max_seq_length > max_pos and own.get("rope_type", "default") != "llama3":
        factor = max_seq_length / max_pos
        rope = {"rope_type": "linear", "factor": factor, "rope_theta": float(own["rope_theta"])}
        notes.append(f"Unsloth replaces the model's {own.get('rope_type', 'default')} rope with linear x{factor:g} "
                     f"when max_seq_length {max_seq_length} passes max_position_embeddings {max_pos} "
                     "(_extended_rope_scaling)")
    if rope.get("rope_type") == "dynamic":
        rope = {k: v for k, v in rope.items() if k not in ("factor", "rope_type")} | {"rope_type": "default"}
        notes.append("Unsloth computes dynamic NTK once at init: plain RoPE at rope_theta at every length")
    return rope, notes


def unsloth(t: TrainerInput) -> tuple[str, list[str]]:
    req = t.req
    _top_level_only("Unsloth", "rope_scaling", t)
    _one_dict("Unsloth", t)
    call = f"FastLanguageModel.from_pretrained({t.model!r}, max_seq_length={req.target}"
    if req.unchanged:
        return f"from unsloth import FastLanguageModel\nmodel, tokenizer = {call})", []
    rope = dict(t.rope)
    rope_type = rope.get("rope_type", "default")
    gemma = t.model_type in ("gemma", "gemma2")
    if gemma or rope_type not in UNSLOTH_TYPES:
        own, own_max = _own_rope(t)
        trained, _ = unsloth_rope(own, own_max, req.target, t.model_type, asked=rope)  # the checkpoint's own rope
        diff = difference(trained, own_max, t)
        what = f"{t.model_type} models" if gemma else f"rope type {rope_type}"
        raise PosencError(f"Unsloth {VERSIONS['unsloth']} ignores rope_scaling for {what} (it takes "
                          f"{', '.join(UNSLOTH_TYPES)}) and trains the checkpoint's own rope, measured at "
                          f"{req.target} positions: {diff}; nearest: "
                          + ("none, use --format trl or axolotl" if gemma else "--format unsloth with yarn or linear"))
    body = ", ".join(f"{k!r}: {v!r}" for k, v in rope.items())
    return (f"from unsloth import FastLanguageModel\nmodel, tokenizer = {call}, rope_scaling={{{body}}})",
            ["Unsloth sets this dict on the config as it is (rope_theta inside, as transformers 5 needs)"])


#: format name -> rendering
RENDERERS: dict[str, Callable[[TrainerInput], tuple[str, list[str]]]] = {
    "llamafactory": llamafactory,
    "axolotl": axolotl,
    "unsloth": unsloth,
    "trl": trl,
}
FORMATS = tuple(RENDERERS)


def render(fmt: str, t: TrainerInput) -> tuple[str, list[str]]:
    """stdout text and stderr caveats of ``posenc scale --format fmt`` for one of :data:`FORMATS`."""
    return RENDERERS[fmt](t)

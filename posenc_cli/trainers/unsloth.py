"""Unsloth 2026.10.9 (``models/llama.py`` ``FastLanguageModel.from_pretrained``): the call posenc renders for a request
(``posenc scale --engine unsloth``) and what it trains (:func:`unsloth_rope`, for ``posenc check --trainer`` too):
a ``rope_scaling=`` of type linear, yarn or llama3 (not for gemma/gemma2) is kept, completed by
``_user_rope_scaling`` and set on the config; any other type is ignored with a warning, so the checkpoint's own rope
is trained.

stdlib at import (``posenc scale`` loads this module only for its format).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from posenc_cli.engines.runs import NOT_MODELLED, EngineRun, GroupRun
from posenc_cli.engines.target import Rendering, Target
from posenc_cli.errors import PosencError
from posenc_cli.rope.rope_types import rope_type_of
from posenc_cli.trainers.hf_based import difference, one_dict, own_rope, top_level_only, trainer_input
from posenc_cli.trainers.trained import refused, rope_of

if TYPE_CHECKING:
    from posenc_cli.models.model_positions import ModelPositions

NAME = "unsloth"
VERSION = "2026.10.9"


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
        if model_type not in ("gemma", "gemma2") and rope_type_of(asked, None) in UNSLOTH_TYPES:
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


def render(r: Rendering) -> tuple[str, list[str]]:
    """``--engine unsloth``: ``FastLanguageModel.from_pretrained`` with the request's rope dict, refused where Unsloth
    ignores it."""
    t = trainer_input(r)
    req = t.req
    top_level_only("Unsloth", "rope_scaling", t)
    one_dict("Unsloth", t)
    call = f"FastLanguageModel.from_pretrained({t.model!r}, max_seq_length={req.target}"
    if req.unchanged:
        return f"from unsloth import FastLanguageModel\nmodel, tokenizer = {call})", []
    rope = dict(t.rope)
    rope_type = rope.get("rope_type", "default")
    gemma = t.model_type in ("gemma", "gemma2")
    if gemma or rope_type not in UNSLOTH_TYPES:
        own, own_max = own_rope(t)
        trained, _ = unsloth_rope(own, own_max, req.target, t.model_type, asked=rope)  # the checkpoint's own rope
        diff = difference(trained, own_max, t)
        what = f"{t.model_type} models" if gemma else f"rope type {rope_type}"
        raise PosencError(f"Unsloth {VERSION} ignores rope_scaling for {what} (it takes "
                          f"{', '.join(UNSLOTH_TYPES)}) and trains the checkpoint's own rope, measured at "
                          f"{req.target} positions: {diff}; nearest: "
                          + ("none, use --engine trl or axolotl" if gemma else "--engine unsloth with yarn or linear"))
    body = ", ".join(f"{k!r}: {v!r}" for k, v in rope.items())
    return (f"from unsloth import FastLanguageModel\nmodel, tokenizer = {call}, rope_scaling={{{body}}})",
            ["Unsloth sets this dict on the config as it is (rope_theta inside, as transformers 5 needs)"])


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    """What Unsloth trains: ``FastLanguageModel.from_pretrained(max_seq_length=max_model_len)`` on the model as
    shipped (linear scaling past ``max_position_embeddings``, dynamic NTK static)."""
    name = NAME
    if len(model.layers) != 1:
        return refused(name, VERSION, max_model_len, NOT_MODELLED,
                        f"posenc models Unsloth's Llama rotary, one rope per model; this model has {len(model.layers)}"
                        " rope groups")
    rope = rope_of(model, max_model_len)
    own_type = rope.params.get("rope_type", "default")
    if own_type not in ("default", "linear", "dynamic", "yarn", "llama3"):
        return refused(name, VERSION, max_model_len, NOT_MODELLED,
                        f"Unsloth computes {own_type} with its own rotary class, which posenc does not model")
    if rope.freqs().inv_freq.size * 2 != rope.head_dim:
        return refused(name, VERSION, max_model_len, NOT_MODELLED,
                        "Unsloth's plain rotary ignores partial_rotary_factor; posenc does not model partial rotary "
                        "for it")
    trained, notes = unsloth_rope(rope.params, rope.max_pos, max_model_len, model.text_model_type)
    freqs = rope.freqs(trained, seq_len=seq_len or max_model_len)
    group = GroupRun(model.layers[0].name, freqs.inv_freq, freqs.attention_factor, model.softmax_scale)
    return EngineRun(name, VERSION, max_model_len, [group],
                     [f"FastLanguageModel.from_pretrained(MODEL, max_seq_length={max_model_len})"], warnings=notes,
                     layout="rotate-half")


TARGET = Target(
    NAME, "Unsloth", "unsloth", VERSION, render, run, targets="Unsloth {version}",
    prints="`FastLanguageModel.from_pretrained(rope_scaling=...)`", proven_by="`_user_rope_scaling`",
    cannot_express="rope types other than linear, yarn and llama3; any `rope_scaling` for Gemma and Gemma 2 (it trains "
                   "the checkpoint's own rope); per-layer-type dicts")

"""What the Hugging Face-based trainers (LLaMA-Factory, axolotl, Unsloth, TRL) share: each builds the model with
transformers' own modeling, so the frequencies are transformers' for the config the trainer ends up with; what
differs is what each lets a user put into that config. Here: what a rendering reads (:class:`TrainerInput`, built
from the request and the model by :func:`trainer_input`), the measured difference a refusal quotes
(:class:`Difference`), the model's own rope, and transformers' numbers for a model as shipped
(:func:`transformers_groups`).

stdlib at import (``posenc scale`` loads these modules only for their formats); yaml loads to write a YAML, numpy
for a refusal's measured difference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from posenc_cli.engines import hf
from posenc_cli.engines.runs import SAME_RTOL, GroupRun, relative_difference
from posenc_cli.engines.target import Rendering
from posenc_cli.errors import PosencError
from posenc_cli.models.model_types import generated
from posenc_cli.rope.rope_types import rope_type_of
from posenc_cli.rope.scaling import ScaleRequest, max_position_embeddings, rope_parameters
from posenc_cli.units import format_length

if TYPE_CHECKING:
    from posenc_cli.models.model_positions import ModelPositions
    from posenc_cli.rope.frequencies import Frequencies

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


def dump_yaml(data: dict[str, Any]) -> str:
    import yaml

    text: str = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=1000)
    return text.rstrip("\n")


def length_text(n: float) -> str:
    return format_length(int(n))


def top_level_only(name: str, how: str, t: TrainerInput) -> None:
    if t.nested:
        raise PosencError(f"this model's transformers config keeps its text model in {t.nested}, and {name}'s "
                          f"{how} sets top-level config attributes only (a top-level rope_parameters leaves "
                          f"{t.nested}'s rope unchanged): use --engine hf and train from the patched config.json")


def one_dict(name: str, t: TrainerInput) -> None:
    if any(isinstance(v, dict) for v in t.rope.values()):
        raise PosencError(f"this model has one rope dict per layer type; {name} sets one rope_scaling dict for "
                          "every layer: use --engine hf and train from the patched config.json")


@dataclass(frozen=True)
class Difference:
    """How far one rope dict's frequencies are from another's, as transformers computes both."""

    inv_freq: float  # max relative inv_freq difference
    attention: tuple[float, float]  # (theirs, posenc's)

    def within(self) -> bool:
        a, b = self.attention
        return self.inv_freq <= SAME_RTOL and math.isclose(a, b, rel_tol=SAME_RTOL)

    def __str__(self) -> str:
        a, b = self.attention
        text = f"inv_freq off by up to {self.inv_freq:.3g} relative"
        if not math.isclose(a, b, rel_tol=SAME_RTOL):
            text += f", attention factor {a:.6g} instead of {b:.6g}"
        return text


def difference(theirs: dict[str, Any], their_max_pos: int, t: TrainerInput, seq_len: int | None = None) -> Difference:
    """``theirs`` against the request's rope dict, both through :mod:`posenc_cli.rope.frequencies` at ``seq_len``
    (default the target: dynamic and longrope depend on it)."""
    from posenc_cli.rope.frequencies import RopeSpec, compute  # numpy: only when a difference is measured

    req = t.req
    n = req.target if seq_len is None else seq_len
    ours = compute(RopeSpec(rope_parameters(req), req.head_dim, max_position_embeddings(req),
                            default_partial=req.default_partial), n)
    other = compute(RopeSpec(theirs, req.head_dim, their_max_pos, default_partial=req.default_partial), n)
    return Difference(inv_freq_off(other, ours), (other.attention_factor, ours.attention_factor))


def inv_freq_off(theirs: Frequencies, ours: Frequencies) -> float:
    """The largest relative inv_freq difference from ours (inf when the rotary dims differ)."""
    if theirs.inv_freq.shape != ours.inv_freq.shape:
        return math.inf
    return float(relative_difference(ours.inv_freq, theirs.inv_freq).max())




def own_rope(t: TrainerInput) -> tuple[dict[str, Any], int]:
    """The model's rope as shipped (what a trainer that ignores the request trains) and its
    max_position_embeddings."""
    req = t.req
    before = t.before if t.before is not None else {}
    own = dict(own_scaling(before)) or {"rope_type": "default"}
    own["rope_type"] = rope_type_of(own)
    own["rope_theta"] = float(before.get("rope_theta") or own.get("rope_theta") or req.theta)
    if before.get("original_max_position_embeddings") and own["rope_type"] not in ("default", "linear", "dynamic"):
        own.setdefault("original_max_position_embeddings", before["original_max_position_embeddings"])  # Phi-3
    if t.rope.get("partial_rotary_factor") is not None:
        own["partial_rotary_factor"] = t.rope["partial_rotary_factor"]
    return own, int(before.get("max_position_embeddings") or req.original_max)


def own_scaling(before: dict[str, Any]) -> dict[str, Any]:
    for key in ("rope_scaling", "rope_parameters"):
        value = before.get(key)
        if isinstance(value, dict):
            return value
    return {}



def complete_keys(t: TrainerInput) -> dict[str, Any]:
    keys: dict[str, Any] = {"rope_parameters": t.rope, "max_position_embeddings": t.max_pos}
    return keys


def trainer_input(r: Rendering) -> TrainerInput:
    """What a rendering reads: for a bare request, a model whose max_position_embeddings is the original length;
    for a model, its text config patched by the request (transformers 5 keys), where it keeps it."""
    req = r.req
    if r.config is None or r.facts is None:
        return TrainerInput(req, rope_parameters(req), max_position_embeddings(req), r.model)
    from posenc_cli.models.config_keys import ABSENT, text_config

    config = r.config
    patched, _, at = text_config(hf.patch_config(config, req, "hf-v5", r.facts.group))
    # a composite config class keeps its text model in a sub-config even when the file is flat (Qwen2.5-VL)
    entry = generated()["models"].get(str(config.get("model_type") or ""))
    composite = ".".join(entry["path"]) if entry and entry.get("path") else ""
    return TrainerInput(req, dict(patched["rope_parameters"]),
                        int(patched.get("max_position_embeddings") or max_position_embeddings(req)), r.model,
                        nested=at.removesuffix(ABSENT) or composite, before=dict(text_config(config)[0]),
                        model_type=r.facts.model_type)


def transformers_groups(model: ModelPositions, seq_len: int) -> list[GroupRun]:
    """What transformers computes for the model as shipped, at ``seq_len``: what a trainer that leaves the rope
    alone trains."""
    from posenc_cli.engines.transformers import groups_at  # numpy: only when a model is run

    return groups_at(model, seq_len)

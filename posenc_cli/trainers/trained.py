"""What a training framework trains, in the terms every framework module shares: the rope group a framework is
given (:class:`Rope`), what it computes (:class:`Trained`, as the rope dict that makes transformers compute the
same), a refusal with its verdict (:class:`Refusal`), the llama3 constants several frameworks fix, the measured
difference a refusal quotes, and the runner ``posenc check --trainer`` uses for a framework with one rotary
embedding per model (:func:`one_rotary_runner`).

stdlib at import; numpy loads when a difference is measured or frequencies are computed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from posenc_cli.engines.runs import (
    CANNOT_EXPRESS,
    NOT_MODELLED,
    SAME_RTOL,
    EngineRun,
    GroupRun,
    relative_difference,
)
from posenc_cli.engines.target import Rendering, Runner
from posenc_cli.errors import PosencError
from posenc_cli.rope import rope_types
from posenc_cli.rope.scaling import ScaleRequest, max_position_embeddings, rope_parameters

if TYPE_CHECKING:
    from posenc_cli.models.facts import ModelFacts
    from posenc_cli.models.model_positions import ModelPositions
    from posenc_cli.rope.frequencies import Frequencies


class Refusal(PosencError):
    """A framework cannot train this rope: ``verdict`` is one of :mod:`posenc_cli.engines.runs`' ``CANNOT_EXPRESS``,
    ``WILL_NOT_START``, ``NOT_MODELLED`` (``posenc scale`` prints it as one error line, ``posenc check`` as the
    verdict)."""

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
FIXED_LLAMA3 = (1.0, 4.0, 8192)  # framework fact: fixed in Megatron-Core, torchtune and Megatron-Bridge
#: Model types whose attention is MLA (multi-latent attention): Megatron builds them from MLATransformerConfig
#: (--multi-latent-attention); the other frameworks build them in their own model code.
MLA_TYPES = frozenset({"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "kimi_linear"})
SAME = "inv_freq the same"


def flag_number(x: float) -> str:
    """A number as a config or flag value: integers without a point, others with repr precision."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


def fixed_llama3(group: Mapping[str, Any]) -> dict[str, Any]:
    """``group``'s llama3 dict with the constants Megatron-Core and torchtune cannot change (:data:`FIXED_LLAMA3`)."""
    low, high, original = FIXED_LLAMA3
    return {**group, "low_freq_factor": low, "high_freq_factor": high, "original_max_position_embeddings": original}


def measured(hf: Frequencies, other: Frequencies) -> str:
    """'N of M pairs differ (up to X x)', a pair differing past :data:`~posenc_cli.engines.runs.SAME_RTOL`."""
    import numpy as np

    a, b = hf.inv_freq.astype(np.float64), other.inv_freq.astype(np.float64)
    if a.shape != b.shape:
        return f"{b.size} frequencies instead of {a.size}"
    off = relative_difference(a, b) > SAME_RTOL
    if not off.any():
        return SAME
    ratio = np.maximum(b / a, a / b)[off]
    pairs = np.flatnonzero(off)
    return (f"inv_freq differs in {int(off.sum())} of {a.size} pairs ({int(pairs[0])}-{int(pairs[-1])}), "
            f"up to {float(ratio.max()):.4g}x")


def rope_type_of(group: Mapping[str, Any]) -> str:
    """The rope type ``group`` names, as a string (:func:`posenc_cli.rope.rope_types.rope_type_of`)."""
    return str(rope_types.rope_type_of(group))


def rotary_fraction(rope: Rope, group: dict[str, Any]) -> float:
    from posenc_cli.rope.frequencies import RopeSpec

    spec = RopeSpec(group, rope.head_dim, rope.max_pos, default_partial=rope.default_partial)
    return spec.rotary_dim / rope.head_dim


def yarn_factor(rope: Rope, group: Mapping[str, Any]) -> float:
    """YaRN's factor; a dict without one scales by max_position_embeddings / original, as transformers does."""
    factor = group.get("factor")
    return float(factor) if factor is not None else rope.max_pos / int(group["original_max_position_embeddings"])


def plain_only(group: dict[str, Any], who: str) -> None:
    for key in ("mrope_section", "mrope_interleaved"):
        if key in group:
            raise Refusal(NOT_MODELLED, f"{who}: this model's rope has {key} (multimodal rope); posenc renders "
                          "text-model RoPE only for trainers")


def llama3_fixed(rope: Rope, group: dict[str, Any], who: str) -> None:
    given = (float(group["low_freq_factor"]), float(group["high_freq_factor"]),
             int(group["original_max_position_embeddings"]))
    if given != FIXED_LLAMA3:
        raise Refusal(
            CANNOT_EXPRESS,
            f"{who} fixes llama3's low_freq_factor/high_freq_factor/original length at 1/4/8192; this request has "
            f"{given[0]:g}/{given[1]:g}/{given[2]}: with factor {float(group['factor']):g} that "
            f"{measured(rope.freqs(group), rope.freqs(fixed_llama3(group)))} from transformers; nearest it can "
            f"express: llama3 factor {float(group['factor']):g} at 1/4/8192 (those numbers), or yarn")


def request_group(r: Rendering, who: str) -> dict[str, Any]:
    """The request's one rope dict, which a framework rendering sets (one dict per layer type is not rendered)."""
    group = rope_parameters(r.req)
    if any(isinstance(v, dict) for v in group.values()):
        raise PosencError(f"{who}: one rope dict per layer type is not rendered for trainers")
    return group


# --- what a framework trains, for posenc check --trainer ---------------------------------------------------------

#: a framework's setup for one rope group: (its settings, one line each; what it trains; caveats), or a Refusal
Setup = Callable[[Rope], "tuple[list[str], Trained, list[str]]"]


def rope_of(model: ModelPositions, max_model_len: int) -> Rope:
    """The first rope group of ``model`` (its rope record: a framework builds one rotary embedding per model) as a
    framework is given it, trained at ``max_model_len``."""
    from posenc_cli.models.record import rope_groups  # numpy: only when a model is run

    g = rope_groups(model)[0]
    return Rope(g.params, g.spec.head_dim, g.spec.max_position_embeddings, max_model_len, g.spec.default_partial,
                model.text_model_type or model.model_type or "")


def refused(name: str, version: str, max_model_len: int, verdict: str, why: str) -> EngineRun:
    """A framework's run that cannot happen, with the verdict ``posenc check`` gives it."""
    return EngineRun(name, version, max_model_len, [], [], refusal=f"{verdict}: {why}")


def _unmodelled_attention(name: str, model: ModelPositions, rope: Rope, attention_types: frozenset[str]) -> str | None:
    """Why posenc does not model the framework's attention for this model (None: it does)."""
    if rope.model_type in MLA_TYPES and rope.model_type not in attention_types:
        # its rope and softmax scale come from the framework's own MLA model code (torchtitan's deepseek_v3 folds
        # YaRN's mscale into the softmax), not from the Llama-style rope posenc renders
        return (f"{rope.model_type} uses multi-latent attention, which {name} builds in its own model code; posenc "
                "does not model it")
    if model.softmax_scale != 1.0 and rope.model_type not in attention_types:
        return (f"this model's attention scales the softmax by x{model.softmax_scale:.6g} "
                f"({model.softmax_scale_reason or 'its attention module'}); posenc does not model {name}'s attention "
                "for it")
    return None


def one_rotary_runner(name: str, version: str, setup: Setup, attention_types: frozenset[str] = frozenset(),
                      several_groups: str | None = None) -> Runner:
    """A runner for a framework with one rotary embedding per model (Megatron-LM's CLI, Megatron-Bridge, torchtitan,
    torchtune); ``attention_types``: model types whose attention (softmax scale included) the framework builds itself
    and posenc models (Megatron's MLA); ``several_groups``: why a model with several rope groups is not modelled,
    where the framework has a model-specific way to build them (else it cannot express them)."""

    def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
        if len(model.layers) != 1:
            groups = f"this model has {len(model.layers)} rope groups ({', '.join(g.name for g in model.layers)})"
            if several_groups is not None:
                return refused(name, version, max_model_len, NOT_MODELLED, f"{several_groups}; {groups}")
            return refused(name, version, max_model_len, CANNOT_EXPRESS,
                           f"{name} builds one rotary embedding per model; {groups}")
        rope = rope_of(model, max_model_len)
        unmodelled = _unmodelled_attention(name, model, rope, attention_types)
        if unmodelled is not None:
            return refused(name, version, max_model_len, NOT_MODELLED, unmodelled)
        try:
            invocation, trained, _ = setup(rope)
        except Refusal as refusal:
            return refused(name, version, max_model_len, refusal.verdict, str(refusal))
        freqs = trained.freqs(rope, seq_len or max_model_len)
        softmax = trained.softmax_scale if trained.own_attention else model.softmax_scale * trained.softmax_scale
        group = GroupRun(model.layers[0].name, freqs.inv_freq, freqs.attention_factor, softmax)
        return EngineRun(name, version, max_model_len, [group], invocation,
                         warnings=list(dict.fromkeys(trained.notes)), layout=trained.layout)

    return run

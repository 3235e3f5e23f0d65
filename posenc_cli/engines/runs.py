"""What one engine computes for a model, and how far it is from transformers (the data every engine model returns).

:class:`EngineRun` holds, per rope group, the inverse frequencies, the cos/sin magnitude and the softmax scale an
engine uses, the longest context it accepts and the invocation; :func:`compare` measures every difference against
transformers' run. numpy loads only when a comparison or a table is computed.
"""


from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from posenc_cli.errors import PosencError

if TYPE_CHECKING:  # the reader loads only when an engine runs a model
    import numpy as np
    import numpy.typing as npt

    from posenc_cli.models.record import RopeGroup

#: float32 rounding of one inverse frequency computed in a different operation order (a few ulps): within it two
#: inverse frequencies (and two attention factors, for a trainer's settings) are the same.
SAME_RTOL = 1e-6
#: How a refusal starts when posenc has no model of the engine for this case (reported as not compared).
NOT_MODELLED = "not modelled"
#: How a trainer's refusal starts when the framework has no setting for the model's rope.
CANNOT_EXPRESS = "cannot express"
#: How a refusal starts when the engine or framework stops before serving or training.
WILL_NOT_START = "will not start"
#: How a refusal starts when the engine starts but serves fewer tokens than asked, silently (Ollama lowers num_ctx to
#: the GGUF's context_length and truncates a longer prompt): a failed check, like a run that will not start.
SERVES_LESS = "serves less"
#: Every verdict an engine can get, in report order.
VERDICTS = ("same", "differs", WILL_NOT_START, SERVES_LESS, NOT_MODELLED)
#: Every verdict a trainer can get, in report order.
TRAINER_VERDICTS = ("same", "differs", WILL_NOT_START, CANNOT_EXPRESS, NOT_MODELLED)


@dataclass
class GroupRun:
    """One rope group as an engine runs it."""

    name: str
    inv_freq: npt.NDArray[np.float32] | None  # None: the engine cannot run this group
    attention_factor: float  # multiplies cos and sin
    softmax_scale: float = 1.0  # multiplies the usual 1/sqrt(d) outside the rope
    notes: list[str] = field(default_factory=list)


@dataclass
class EngineRun:
    """What one engine does with a model at one serving length."""

    engine: str
    version: str
    max_model_len: int
    groups: list[GroupRun]
    invocation: list[str]  # argv (or for transformers, the config keys) that gives these numbers
    accepts: int | None = None  # the longest context the engine accepts with this invocation
    needs: list[str] = field(default_factory=list)  # env vars / flags needed to accept max_model_len
    refusal: str | None = None  # why the engine cannot serve this at all
    warnings: list[str] = field(default_factory=list)
    layout: str | None = None  # a trainer's pairing of dims: rotate-half (transformers') or interleaved
    # how these numbers were obtained: "modelled (proven against PACKAGE VERSION)" or "run (installed PACKAGE
    # VERSION)" (posenc check --installed); None: not said (a run outside posenc check)
    source: str | None = None
    # Ollama: the Modelfile that serves ``max_model_len`` (``FROM`` the model, ``PARAMETER num_ctx``); None: none
    modelfile: str | None = None


@dataclass
class GroupVerdict:
    name: str
    same: bool
    inv_freq_rel_diff: float
    worst_pair: int | None
    attention_factor: tuple[float, float]
    softmax_scale: tuple[float, float]
    cos_sin_diff: float  # max |cos/sin difference| at the last position, magnitudes included
    short_diff: float | None = None  # inv_freq difference at the short length (length-dependent rope)
    short_worst_pair: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.name, "same": self.same, "inv_freq_rel_diff": self.inv_freq_rel_diff,
                "worst_pair": self.worst_pair, "attention_factor": list(self.attention_factor),
                "softmax_scale": list(self.softmax_scale), "cos_sin_diff_at_max_len": self.cos_sin_diff,
                "inv_freq_rel_diff_at_short_len": self.short_diff, "worst_pair_at_short_len": self.short_worst_pair}


@dataclass
class EngineVerdict:
    run: EngineRun
    groups: list[GroupVerdict]

    @property
    def verdict(self) -> str:
        if self.run.refusal and self.run.refusal.startswith(NOT_MODELLED):
            return "not modelled"
        if self.run.refusal and self.run.refusal.startswith(CANNOT_EXPRESS):
            return CANNOT_EXPRESS
        if self.run.refusal and self.run.refusal.startswith(SERVES_LESS):
            return SERVES_LESS
        if self.run.refusal:
            return "will not start"
        if all(g.same for g in self.groups):
            return "same"
        return "differs"

    def as_dict(self) -> dict[str, Any]:
        r = self.run
        return {"engine": r.engine, "version": r.version, "verdict": self.verdict, "max_model_len": r.max_model_len,
                "accepts": r.accepts, "needs": r.needs, "refusal": r.refusal, "warnings": r.warnings,
                "invocation": r.invocation, "groups": [g.as_dict() for g in self.groups],
                **({"layout": r.layout} if r.layout is not None else {}),
                **({"source": r.source} if r.source is not None else {}),
                **({"modelfile": r.modelfile} if r.modelfile is not None else {})}


def relative_difference(reference: npt.NDArray[Any], other: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    """Per pair, how far ``other``'s inverse frequencies are from ``reference``'s, relative to the reference's
    (``|other - reference|`` where the reference is 0), in float64: every comparison of inverse frequencies
    (engines, trainers, audit) measures with this one, and counts a pair as the same within :data:`SAME_RTOL`.
    The two must have the same shape."""
    import numpy as np

    a, b = reference.astype(np.float64), other.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel: npt.NDArray[np.float64] = np.where(a > 0, np.abs(b - a) / a, np.abs(b - a))
    return rel


def group_verdict(ref: GroupRun, other: GroupRun, position: int) -> GroupVerdict:
    import numpy as np

    assert ref.inv_freq is not None
    if other.inv_freq is None:
        return GroupVerdict(ref.name, False, math.inf, None, (ref.attention_factor, other.attention_factor),
                            (ref.softmax_scale, other.softmax_scale), math.inf)
    a = ref.inv_freq.astype(np.float64)
    b = other.inv_freq.astype(np.float64)
    if a.shape != b.shape:
        raise PosencError(f"{ref.name}: engines disagree on the rotary dim ({a.size * 2} vs {b.size * 2})")
    rel = relative_difference(a, b)
    worst = int(rel.argmax()) if rel.size else None
    p = float(position)
    # angles in float64 here: the difference measured is the engine's, not this comparison's rounding
    ca, sa = np.cos(p * a) * ref.attention_factor, np.sin(p * a) * ref.attention_factor
    cb, sb = np.cos(p * b) * other.attention_factor, np.sin(p * b) * other.attention_factor
    cos_sin = float(max(np.abs(ca - cb).max(), np.abs(sa - sb).max())) if rel.size else 0.0
    same = (float(rel.max()) <= SAME_RTOL
            and math.isclose(ref.attention_factor, other.attention_factor, rel_tol=1e-9)
            and math.isclose(ref.softmax_scale, other.softmax_scale, rel_tol=1e-9))
    return GroupVerdict(ref.name, same, float(rel.max()) if rel.size else 0.0, worst,
                        (ref.attention_factor, other.attention_factor), (ref.softmax_scale, other.softmax_scale),
                        cos_sin)


def compare(reference: EngineRun, other: EngineRun) -> EngineVerdict:
    """Every group of ``other`` against transformers' (``reference``), at the last position of the window."""
    if other.refusal:
        return EngineVerdict(other, [])
    by_name = {g.name: g for g in other.groups}
    position = max(other.max_model_len - 1, 0)
    return EngineVerdict(other, [group_verdict(g, by_name[g.name], position) for g in reference.groups])


def static_longrope(g: RopeGroup, max_model_len: int) -> GroupRun:
    """LongRoPE chosen once per server (vLLM, SGLang, llama.cpp): the long factors for every sequence when the serving
    length passes the original length; the magnitude from ``max_position_embeddings / original`` (what vLLM computes
    and what llama.cpp's converter stores), or an explicit ``short_mscale``/``long_mscale``."""
    from posenc_cli.rope.frequencies import compute

    spec, p, max_position_embeddings = g.spec, g.spec.params, g.spec.max_position_embeddings
    original = int(p["original_max_position_embeddings"])
    long = max_model_len > original
    freqs = compute(spec, original + 1 if long else original)
    scale = max_position_embeddings / original
    key = "long_mscale" if long else "short_mscale"
    magnitude = float(p[key]) if key in p else (
        1.0 if scale <= 1 else math.sqrt(1 + math.log(scale) / math.log(original)))
    return GroupRun(g.name, freqs.inv_freq, magnitude)



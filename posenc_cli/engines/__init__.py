"""What each serving engine computes from a model's rope settings, next to what transformers computes.

One module per engine (:mod:`.transformers`, :mod:`.vllm`, :mod:`.sglang`, :mod:`.llamacpp`), each a *model* of that
engine's code at a pinned version: from a :class:`~posenc_cli.models.ModelPositions` and the serving length it
returns an :class:`EngineRun` with, per rope group, the inverse frequencies, the cos/sin magnitude and the softmax
scale the engine uses, the longest context it accepts (and what it needs to accept more), and the exact invocation.
The models are checked against each engine's own code by the tests (vLLM's rotary classes from its wheel,
llama.cpp through llama-cpp-python); :func:`compare` measures every difference against transformers.

The invocations (flags, overrides) are stdlib so ``posenc scale`` renders them without numpy; the numbers load
numpy when an engine is run. No CLI imports.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from posenc_cli.errors import PosencError
from posenc_cli.models import LayerRope, ModelPositions

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from posenc_cli.frequencies import RopeSpec

#: float32 rounding of one inverse frequency computed in a different operation order (a few ulps).
SAME_RTOL = 1e-6
#: How a refusal starts when posenc has no model of the engine for this case (reported, not counted as a failure).
NOT_MODELLED = "not modelled"


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
        if self.run.refusal:
            return "will not start"
        if all(g.same for g in self.groups):
            return "same"
        return "differs"

    @property
    def ok(self) -> bool:
        """Not a failure: the same numbers, or a case posenc says it does not model (never a silent pass)."""
        return self.verdict in ("same", "not modelled")

    def as_dict(self) -> dict[str, Any]:
        r = self.run
        return {"engine": r.engine, "version": r.version, "verdict": self.verdict, "max_model_len": r.max_model_len,
                "accepts": r.accepts, "needs": r.needs, "refusal": r.refusal, "warnings": r.warnings,
                "invocation": r.invocation, "groups": [g.as_dict() for g in self.groups]}


def _group_verdict(ref: GroupRun, other: GroupRun, position: int) -> GroupVerdict:
    import numpy as np

    assert ref.inv_freq is not None
    if other.inv_freq is None:
        return GroupVerdict(ref.name, False, math.inf, None, (ref.attention_factor, other.attention_factor),
                            (ref.softmax_scale, other.softmax_scale), math.inf)
    a = ref.inv_freq.astype(np.float64)
    b = other.inv_freq.astype(np.float64)
    if a.shape != b.shape:
        raise PosencError(f"{ref.name}: engines disagree on the rotary dim ({a.size * 2} vs {b.size * 2})")
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(a > 0, np.abs(b - a) / a, np.abs(b - a))
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
    return EngineVerdict(other, [_group_verdict(g, by_name[g.name], position) for g in reference.groups])


def static_longrope(spec: RopeSpec, layer: LayerRope, max_model_len: int, max_position_embeddings: int) -> GroupRun:
    """LongRoPE chosen once per server (vLLM, SGLang, llama.cpp): the long factors for every sequence when the serving
    length passes the original length; the magnitude from ``max_position_embeddings / original`` (what vLLM computes
    and what llama.cpp's converter stores), or an explicit ``short_mscale``/``long_mscale``."""
    from posenc_cli.frequencies import compute

    p = layer.params
    original = int(p["original_max_position_embeddings"])
    long = max_model_len > original
    freqs = compute(spec, original + 1 if long else original)
    scale = max_position_embeddings / original
    key = "long_mscale" if long else "short_mscale"
    magnitude = float(p[key]) if key in p else (
        1.0 if scale <= 1 else math.sqrt(1 + math.log(scale) / math.log(original)))
    return GroupRun(layer.name, freqs.inv_freq, magnitude)


Runner = Callable[[ModelPositions, dict[str, Any], int, "int | None"], EngineRun]


def registry() -> dict[str, Runner]:
    """Engine name -> runner ``(model, config, max_model_len, seq_len) -> EngineRun``, in report order: what the
    engine computes serving ``max_model_len`` for a sequence of ``seq_len`` tokens (None: ``max_model_len``)."""
    from posenc_cli.engines import llamacpp, sglang, transformers, vllm

    return {"hf": transformers.run, "vllm": vllm.run, "sglang": sglang.run, "llama.cpp": llamacpp.run}


ENGINE_NAMES = ("hf", "vllm", "sglang", "llama.cpp")


@dataclass
class CheckReport:
    """``posenc check``: transformers and each engine, per rope group."""

    model_type: str | None
    max_model_len: int
    reference: EngineRun
    verdicts: list[EngineVerdict]
    short_len: int | None = None  # where length-dependent rope was compared too

    @property
    def passed(self) -> bool:
        return all(v.ok for v in self.verdicts)

    def as_dict(self) -> dict[str, Any]:
        ref = self.reference
        return {"passed": self.passed, "model_type": self.model_type, "max_model_len": self.max_model_len,
                "short_len": self.short_len,
                "transformers": {"version": ref.version, "warnings": ref.warnings,
                                 "groups": [{"group": g.name, "attention_factor": g.attention_factor,
                                             "softmax_scale": g.softmax_scale,
                                             "inv_freq": [float(x) for x in (g.inv_freq if g.inv_freq is not None
                                                                             else [])]} for g in ref.groups]},
                "engines": [v.as_dict() for v in self.verdicts]}


def _length_dependent(model: ModelPositions) -> int | None:
    """The short length where dynamic NTK or LongRoPE behave differently from the serving length, if any."""
    for layer in model.layers:
        rope_type = layer.params.get("rope_type")
        if rope_type == "longrope":
            return int(layer.params["original_max_position_embeddings"])
        if rope_type == "dynamic" and model.max_position_embeddings:
            return model.max_position_embeddings
    return None


def ensure_rope(model: ModelPositions) -> None:
    """One clear error for a model whose positions no engine computes with RoPE."""
    if model.family != "rope" or not model.layers:
        raise PosencError(f"model_type {model.model_type!r} applies RoPE in no layer ({model.family}); there is "
                          "nothing for the engines to disagree on")


def check(model: ModelPositions, cfg: dict[str, Any], engines: list[str], max_model_len: int) -> CheckReport:
    """Run every engine in ``engines`` on ``model`` at ``max_model_len`` and compare each with transformers.

    Dynamic NTK and LongRoPE are also compared at the original length, where transformers changes its frequencies
    and a static engine does not.
    """
    from posenc_cli.engines import transformers

    ensure_rope(model)
    known = registry()
    unknown = [e for e in engines if e not in known]
    if unknown:
        raise PosencError(f"engine {unknown[0]!r} is not known; use some of: {', '.join(ENGINE_NAMES)}")
    reference = transformers.run(model, cfg, max_model_len)
    short = _length_dependent(model)
    short = short if short is not None and short < max_model_len else None
    verdicts = []
    for name in engines:
        if name == "hf":
            continue
        run = known[name](model, cfg, max_model_len, None)
        verdict = compare(reference, run)
        if short is not None and not run.refusal:
            # the same server, a sequence of `short` tokens: static engines keep their tables, per-batch ones switch
            served_short = known[name](model, cfg, max_model_len, short)
            at_short = compare(transformers.short_run(model, cfg, short),
                               EngineRun(run.engine, run.version, short, served_short.groups, run.invocation))
            for long_v, short_v in zip(verdict.groups, at_short.groups, strict=True):
                long_v.short_diff = short_v.inv_freq_rel_diff
                long_v.short_worst_pair = short_v.worst_pair
                long_v.same = long_v.same and short_v.same
        verdicts.append(verdict)
    return CheckReport(model.model_type, max_model_len, reference, verdicts, short)

"""RoPE inverse frequencies for every rope type, computed exactly as transformers 5.x computes them.

Each function takes a *resolved* rope description (:class:`RopeSpec`: the ``rope_parameters`` dict plus the model
facts transformers reads from the config) and returns a :class:`Frequencies`. The arithmetic follows
``transformers.modeling_rope_utils`` step by step in float32 (same operation order, same Python-float constants),
so results agree with ``ROPE_INIT_FUNCTIONS`` and the model classes' ``compute_default_rope_parameters`` to float32
precision; ``tests/rope/test_frequencies_parity.py`` proves it against the installed package.

The registry :data:`ROPE_FUNCTIONS` is keyed by ``rope_type``, each a type of :data:`posenc_cli.rope.rope_types.RECORDS`
(its keys and defaults, read through ``rope_types.param``); static NTK has no rope type of its own in transformers
and is expressed as ``default`` with a larger ``rope_theta`` (see ``scaling.ntk_theta``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from posenc_cli.errors import PosencError
from posenc_cli.rope.attention_factors import longrope_attention_factor, yarn_attention_factor
from posenc_cli.rope.encodings import float32_power, rope_inv_freq
from posenc_cli.rope.rope_types import RECORDS, param, rope_type_of, rotary_dim
from posenc_cli.rope.scaling import ScaleRequest, max_position_embeddings, ntk_theta, rope_parameters
from posenc_cli.rope.yarn_ramp import yarn_correction_range

F32 = np.float32
Array32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class RopeSpec:
    """Everything transformers reads to build one rotary embedding.

    ``params`` is the flat ``rope_parameters`` dict (``rope_type``, ``rope_theta``, ``factor``, ...);
    ``head_dim`` is ``config.head_dim`` or ``hidden_size // num_attention_heads``; ``max_position_embeddings``
    is the config's value (the original length for ``dynamic``, the extended one for the others).
    """

    params: Mapping[str, Any]
    head_dim: int
    max_position_embeddings: int
    default_partial: bool = True  # plain RoPE honours partial_rotary_factor (not every model class does)

    @property
    def rope_type(self) -> str:
        return str(rope_type_of(self.params))

    @property
    def theta(self) -> float:
        return float(self.params["rope_theta"])

    @property
    def partial_rotary_factor(self) -> float:
        return float(self.params.get("partial_rotary_factor", 1.0))

    @property
    def rotary_dim(self) -> int:
        """Features that turn (:func:`posenc_cli.rope.rope_types.rotary_dim`)."""
        return rotary_dim(self.head_dim, self.partial_rotary_factor, self.rope_type, self.default_partial)


@dataclass
class Frequencies:
    """Result of one rope type: float32 ``inv_freq`` of shape ``(rotary_dim // 2,)`` and the cos/sin multiplier.

    ``base_inv_freq`` is the unscaled ``rope_theta`` spectrum of the same rotary dim, for comparison.
    ``bands`` names what happened to each pair (``kept``, ``ramped``, ``interpolated``, ...).
    ``details`` holds method-specific numbers (YaRN's correction range, dynamic NTK's effective base, ...).
    """

    inv_freq: Array32
    attention_factor: float
    base_inv_freq: Array32
    bands: list[str]
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def wavelengths(self) -> npt.NDArray[np.float64]:
        """``2*pi / inv_freq`` of the pairs that turn (a zero frequency, proportional rope's pass-through pairs,
        has no wavelength)."""
        inv = self.inv_freq.astype(np.float64)
        return 2 * math.pi / inv[inv > 0]

    def pair_table(self) -> list[tuple[int, float, float, float, str]]:
        """Per pair: index, original wavelength, new wavelength, effective scale (old / new frequency), band."""
        old = self.base_inv_freq.astype(np.float64)
        new = self.inv_freq.astype(np.float64)
        return [(i, 2 * math.pi / o, 2 * math.pi / n, o / n, band)
                for i, (o, n, band) in enumerate(zip(old.tolist(), new.tolist(), self.bands, strict=True))]


def rdiv32(scalar: float, values: Array32) -> Array32:
    """``scalar / tensor`` as torch evaluates it (``tensor.reciprocal() * scalar``: two float32 roundings)."""
    out: Array32 = ((F32(1.0) / values).astype(F32) * F32(scalar)).astype(F32)
    return out


def default_inv_freq(base: float, dim: int) -> Array32:
    """``1 / base ** (arange(0, dim, 2) / dim)`` in float32, as transformers computes it (an odd ``dim`` too)."""
    try:
        return rope_inv_freq(dim, base, dtype=F32, odd=True).astype(F32)
    except PosencError as exc:
        raise PosencError(f"rope_theta {base!r} / rotary dim {dim!r}: {exc}") from None


def _default(spec: RopeSpec, seq_len: int | None) -> Frequencies:
    inv = default_inv_freq(spec.theta, spec.rotary_dim)
    return Frequencies(inv, 1.0, inv, ["kept"] * inv.size)


def _linear(spec: RopeSpec, seq_len: int | None) -> Frequencies:
    base = default_inv_freq(spec.theta, spec.rotary_dim)
    inv = (base / F32(spec.params["factor"])).astype(F32)
    return Frequencies(inv, 1.0, base, ["divided"] * inv.size)


def dynamic_base(theta: float, factor: float, seq_len: int, max_position_embeddings: int, dim: int) -> float:
    """Dynamic NTK's base at ``seq_len`` (unchanged up to ``max_position_embeddings``), in Python floats."""
    seq_len = max(seq_len, max_position_embeddings)
    return float(theta * ((factor * seq_len / max_position_embeddings) - (factor - 1)) ** (dim / (dim - 2)))


def _dynamic(spec: RopeSpec, seq_len: int | None) -> Frequencies:
    dim = spec.rotary_dim
    length = spec.max_position_embeddings if seq_len is None else seq_len
    base = dynamic_base(spec.theta, float(spec.params["factor"]), length, spec.max_position_embeddings, dim)
    inv = default_inv_freq(base, dim)
    original = default_inv_freq(spec.theta, dim)
    band = "kept" if base == spec.theta else "rebased"
    return Frequencies(inv, 1.0, original, [band] * inv.size,
                       {"effective_theta": base, "seq_len": max(length, spec.max_position_embeddings)})


def _ntk_alpha(spec: RopeSpec, seq_len: int | None) -> Frequencies:
    """NTK with a fixed ``alpha`` (HunYuan's "dynamic" with ``alpha``; transformers names it ``ntk_alpha``, vLLM's
    class is ``DynamicNTKAlphaRotaryEmbedding``): base ``rope_theta * alpha ** (d / (d - 2))``, static."""
    dim = spec.rotary_dim
    base = ntk_theta(spec.theta, float(spec.params["alpha"]), dim)
    inv = default_inv_freq(base, dim)
    return Frequencies(inv, 1.0, default_inv_freq(spec.theta, dim), ["rebased"] * inv.size, {"effective_theta": base})


def _original_and_factor(spec: RopeSpec) -> tuple[int, float]:
    """yarn / longrope: the trained length and the factor (absent: ``max_position_embeddings / original``)."""
    original = int(spec.params["original_max_position_embeddings"])
    factor = spec.params.get("factor")
    if factor is None:
        factor = spec.max_position_embeddings / original
    return original, float(factor)


def _yarn(spec: RopeSpec, seq_len: int | None, truncate_source: Mapping[str, Any] | None = None) -> Frequencies:
    p = spec.params
    dim, base = spec.rotary_dim, spec.theta
    original, factor = _original_and_factor(spec)
    attention = yarn_attention_factor(p, factor)
    beta_fast, beta_slow = param(p, "beta_fast", "yarn"), param(p, "beta_slow", "yarn")
    # transformers reads `truncate` from the top-level rope_parameters even for per-layer dicts
    truncate = bool(param(truncate_source if truncate_source is not None else p, "truncate", "yarn"))
    low, high = yarn_correction_range(beta_fast, beta_slow, dim, base, original, truncate)
    pos_freqs = float32_power(base, np.arange(0, dim, 2).astype(F32) / F32(dim))
    extrapolation = F32(1.0) / pos_freqs
    interpolation = F32(1.0) / (F32(factor) * pos_freqs)
    ramp_high = high + 0.001 if low == high else high
    ramp = np.clip((np.arange(dim // 2, dtype=F32) - F32(low)) / F32(ramp_high - low), 0, 1).astype(F32)
    extra = (F32(1) - ramp).astype(F32)
    inv = (interpolation * (F32(1) - extra) + extrapolation * extra).astype(F32)
    bands = ["kept" if e == 1 else "interpolated" if e == 0 else "ramped" for e in extra.tolist()]
    return Frequencies(inv, attention, default_inv_freq(base, dim), bands,
                       {"low": low, "high": high, "factor": factor, "truncate": truncate,
                        "beta_fast": beta_fast, "beta_slow": beta_slow})


def _longrope(spec: RopeSpec, seq_len: int | None) -> Frequencies:
    p = spec.params
    dim, base = spec.rotary_dim, spec.theta
    original, factor = _original_and_factor(spec)
    attention = longrope_attention_factor(p, factor, original)
    use_long = bool(seq_len and seq_len > original)
    ext = np.asarray(p["long_factor"] if use_long else p["short_factor"], dtype=F32)
    if ext.shape != ((dim + 1) // 2,):
        raise PosencError(f"longrope factor lists must have one entry per rotated pair, {(dim + 1) // 2}, "
                          f"got {ext.shape[0]}")
    shape = np.arange(0, dim, 2, dtype=np.int64).astype(F32) / F32(dim)
    inv = (F32(1.0) / (ext * float32_power(base, shape))).astype(F32)
    which = "long" if use_long else "short"
    return Frequencies(inv, attention, default_inv_freq(base, dim), [f"{which} factor"] * inv.size,
                       {"factors_used": which, "switch_above": original})


def _llama3(spec: RopeSpec, seq_len: int | None) -> Frequencies:
    p = spec.params
    inv = default_inv_freq(spec.theta, spec.rotary_dim)
    factor = p["factor"]
    low_ff, high_ff = p["low_freq_factor"], p["high_freq_factor"]
    original = p["original_max_position_embeddings"]
    low_wavelen = original / low_ff
    high_wavelen = original / high_ff
    wavelen = rdiv32(2 * math.pi, inv)
    divided = np.where(wavelen > low_wavelen, inv / F32(factor), inv).astype(F32)
    # low == high (Llama 4) divides by zero here; no pair is in the blended band then, so the values are unused
    with np.errstate(divide="ignore", invalid="ignore"):
        smooth = ((rdiv32(original, wavelen) - F32(low_ff)) / F32(high_ff - low_ff)).astype(F32)
        smoothed = ((F32(1) - smooth) * divided / F32(factor) + smooth * divided).astype(F32)
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    out = np.where(medium, smoothed, divided).astype(F32)
    bands = ["blended" if m else "divided" if w > low_wavelen else "kept"
             for m, w in zip(medium.tolist(), wavelen.tolist(), strict=True)]
    return Frequencies(out, 1.0, inv, bands, {"low_freq_wavelen": low_wavelen, "high_freq_wavelen": high_wavelen})


def _proportional(spec: RopeSpec, seq_len: int | None) -> Frequencies:
    """Gemma 4's full-attention rope: ``partial_rotary_factor`` of the pairs turn with exponents over the *whole*
    head dim; the remaining pairs get frequency 0 (cos 1, sin 0: they pass through). All divided by ``factor``."""
    head_dim, base = spec.head_dim, spec.theta
    angles = int(spec.partial_rotary_factor * head_dim // 2)
    exponent = np.arange(0, 2 * angles, 2).astype(F32) / F32(head_dim)
    rotated = (F32(1.0) / float32_power(base, exponent)).astype(F32)
    inv = np.concatenate([rotated, np.zeros(head_dim // 2 - angles, dtype=F32)])
    inv = (inv / F32(param(spec.params, "factor", "proportional"))).astype(F32)
    bands = ["kept"] * angles + ["not rotated"] * (head_dim // 2 - angles)
    return Frequencies(inv, 1.0, inv, bands, {"rotating_pairs": angles})


ROPE_FUNCTIONS: dict[str, Callable[[RopeSpec, int | None], Frequencies]] = {
    "default": _default,
    "linear": _linear,
    "dynamic": _dynamic,
    "yarn": _yarn,
    "longrope": _longrope,
    "llama3": _llama3,
    "proportional": _proportional,
    "ntk_alpha": _ntk_alpha,
}


assert set(ROPE_FUNCTIONS) <= set(RECORDS), "every rope function computes a type with a record (rope_types.py)"


def compute(spec: RopeSpec, seq_len: int | None = None, *, top_level: Mapping[str, Any] | None = None) -> Frequencies:
    """inv_freq and attention factor for ``spec`` at sequence length ``seq_len`` (None: as at model init).

    ``seq_len`` matters for ``dynamic`` (base grows past ``max_position_embeddings``) and ``longrope`` (long
    factors past ``original_max_position_embeddings``). ``top_level`` is the config's top-level rope dict for
    per-layer configs (transformers reads YaRN's ``truncate`` from there).
    """
    fn = ROPE_FUNCTIONS.get(spec.rope_type)
    if fn is None:
        raise PosencError(
            f"rope_type {spec.rope_type!r} is not supported; known types: {', '.join(ROPE_FUNCTIONS)}"
        )
    # transformers computes some types for an odd rotary dim (``ceil(dim / 2)`` frequencies, RopeType.odd_dim); its
    # yarn fails there (a ramp of ``dim // 2`` entries against ``ceil(dim / 2)`` frequencies)
    if spec.rotary_dim < 2 or (spec.rotary_dim % 2 and not RECORDS[spec.rope_type].odd_dim):
        raise PosencError(
            f"RoPE needs an even rotary dimension for rope_type {spec.rope_type!r}, got {spec.rotary_dim} "
            f"(head_dim {spec.head_dim} x partial_rotary_factor {spec.partial_rotary_factor:g})"
        )
    if spec.rope_type == "yarn" and top_level is not None:
        return _yarn(spec, seq_len, top_level)
    return fn(spec, seq_len)


def for_request(req: ScaleRequest, seq_len: int | None = None) -> Frequencies:
    """What a scaling request does at ``seq_len`` (default: its target length), as transformers computes it.

    Unlike :func:`compute`, ``base_inv_freq`` is always the model's unscaled spectrum (``req.theta``), also for
    static NTK, whose own rope dict is plain RoPE with a larger theta.
    """
    spec = RopeSpec(rope_parameters(req), req.head_dim, max_position_embeddings(req),
                    default_partial=req.default_partial)
    freqs = compute(spec, req.target if seq_len is None else seq_len)
    if req.method == "ntk":
        freqs.bands = ["rebased"] * freqs.inv_freq.size
    freqs.base_inv_freq = default_inv_freq(req.theta, req.rotary_dim)
    return freqs

"""Numeric checks of RoPE's relative-distance property and related invariants (pure numpy).

Every error is reported relative to a scale that cannot vanish: score errors are divided by
``|q| * |k|`` (the largest value the score can take), vector errors by ``|x|``. That keeps the
numbers meaningful when a score happens to be close to zero.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from posenc_cli.errors import PosencError
from posenc_cli.rope.encodings import (
    LAYOUTS,
    Layout,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    ensure_fits,
    rope_inv_freq,
    sinusoidal,
    to_half_layout,
)
from posenc_cli.rope.precision import (
    DTYPE_NAMES,
    HALF_DTYPES,
    LOSS_MODES,
    Column,
    Trace,
    advice,
    default_tolerance,
    measure,
    rounding_bound,
)
from posenc_cli.rope.rope_types import DEFAULT_THETA

# A shuffled input must change RoPE attention's output by more than this fraction of its largest value.
_MOVES = 1e-2
# Sizes of the auxiliary checks: small, because they test exact algebraic identities.
_SHIFT_COUNT = 64
_SEQ = 48
_ALIBI_HEADS = 12  # not a power of two on purpose: exercises the official slope recipe's second branch


@dataclass(frozen=True)
class VerifySettings:
    """What ``posenc verify`` checks and how hard."""

    head_dim: int = 128
    base: float = DEFAULT_THETA
    layouts: tuple[Layout, ...] = LAYOUTS
    trials: int = 16
    max_position: int = 1 << 20
    dtype: str = "float64"
    seed: int = 0
    tolerance: float | None = None  # None: precision.default_tolerance(dtype)

    @property
    def check_dtype(self) -> np.dtype[Any]:
        """The dtype the algebraic checks run in: ``dtype``, or float32 for half precision (half-precision models
        compute RoPE in float32; what half precision costs is measured by the precision columns)."""
        return np.dtype(np.float32) if self.dtype in HALF_DTYPES else np.dtype(self.dtype)

    @property
    def tol(self) -> float:
        return default_tolerance(self.dtype) if self.tolerance is None else self.tolerance

    def validate(self) -> None:
        if self.head_dim < 2 or self.head_dim % 2:
            raise PosencError(f"{{head_dim}} must be a positive even number, got {self.head_dim}", "head_dim")
        if not math.isfinite(self.base) or self.base <= 1:
            raise PosencError(f"{{base}} must be a finite number greater than 1, got {self.base}", "base")
        if self.trials < 1:
            raise PosencError(f"{{trials}} must be at least 1, got {self.trials}", "trials")
        if self.max_position < 2:
            raise PosencError(f"{{max_position}} must be at least 2, got {self.max_position}", "max_position")
        if self.dtype not in DTYPE_NAMES:
            raise PosencError(f"{{dtype}} {self.dtype!r} is not known; use one of: {', '.join(DTYPE_NAMES)}",
                              "dtype")
        if self.tolerance is not None and (not math.isfinite(self.tolerance) or self.tolerance <= 0):
            raise PosencError(f"{{tolerance}} must be a finite number greater than 0, got {self.tolerance}",
                              "tolerance")
        for layout in self.layouts:
            if layout not in LAYOUTS:
                raise PosencError(f"layout {layout!r} is not known; use one of: {', '.join(LAYOUTS)}")
        # the largest arrays, refused before anything is allocated: rotated q and k for every trial and shift,
        # and the permutation check's attention weights (3, head_dim, head_dim)
        ensure_fits((self.trials, _SHIFT_COUNT + 1, self.head_dim * 4), np.float64,
                    f"verify workspace for {{head_dim}} {self.head_dim} and {{trials}} {self.trials}", "head_dim",
                    "trials")
        ensure_fits((3, self.head_dim, self.head_dim), np.float64,
                    f"attention weights for {{head_dim}} {self.head_dim}", "head_dim")


@dataclass
class Check:
    """One row of the report."""

    name: str
    passed: bool
    max_abs_error: float
    max_rel_error: float
    detail: str
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(out.pop("extra"))
        return out


@dataclass
class Precision:
    """Relative-distance error per position for each way of handling positions (see :mod:`posenc_cli.rope.precision`).

    ``verdict`` is the column that decides pass/fail: how a model in the checked dtype really runs (angles in
    that dtype for float32/float64; float32 angles with a cos/sin table in the dtype for half precision).
    """

    positions: list[int]
    columns: list[Column]
    verdict: Column
    tolerance: float
    advice: list[str]

    @property
    def passed(self) -> bool:
        return self.verdict.exceeds_from is None

    def as_dict(self) -> dict[str, Any]:
        return {"positions": self.positions, "columns": [c.as_dict(self.positions) for c in self.columns],
                "verdict": self.verdict.key, "passed": self.passed, "advice": self.advice}


@dataclass
class VerifyReport:
    settings: VerifySettings
    checks: list[Check]
    precision: Precision

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks) and self.precision.passed

    @property
    def noise_floor(self) -> float:
        """Relative errors below this are the CPU's rounding (``head_dim * eps`` of the checks' dtype)."""
        return rounding_bound(self.settings.check_dtype.name, self.settings.head_dim)

    def as_dict(self) -> dict[str, Any]:
        settings = asdict(self.settings)
        settings["layouts"] = list(self.settings.layouts)
        settings["tolerance"] = self.settings.tol
        settings["check_dtype"] = self.settings.check_dtype.name
        return {
            "passed": self.passed,
            "settings": settings,
            "noise_floor": self.noise_floor,
            "checks": [c.as_dict() for c in self.checks],
            "precision": self.precision.as_dict(),
        }


def _seen(trace: Trace | None, label: str, values: npt.NDArray[Any]) -> None:
    if trace is not None:
        trace(label, values)


def _scores(q: npt.NDArray[Any], k: npt.NDArray[Any], pos_q: npt.NDArray[Any], pos_k: npt.NDArray[Any],
            layout: Layout, base: float, trace: Trace | None = None) -> npt.NDArray[Any]:
    """Scores of q rotated at pos_q with k rotated at pos_k; q, k are (trials, d), positions (trials, P).

    Everything runs in q's dtype."""
    shape = (q.shape[0], pos_q.shape[1], q.shape[1])
    qr = apply_rope(np.broadcast_to(q[:, None, :], shape), pos_q, base=base, layout=layout)
    kr = apply_rope(np.broadcast_to(k[:, None, :], shape), pos_k, base=base, layout=layout)
    scores: npt.NDArray[Any] = np.einsum("tpd,tpd->tp", qr, kr)
    _seen(trace, "rotated q", qr)
    _seen(trace, "rotated k", kr)
    _seen(trace, "scores", scores)
    return scores


def _shifts(max_shift: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """Shifts from 1 to max_shift: a geometric ladder (so every scale is seen) plus random ones."""
    ladder = np.unique(np.geomspace(1, max_shift, _SHIFT_COUNT // 2).astype(np.int64))
    random = rng.integers(1, max_shift + 1, size=_SHIFT_COUNT - ladder.size)
    return np.unique(np.concatenate([[0], ladder, random, [max_shift]]))


def check_relative_distance(s: VerifySettings, layout: Layout, rng: np.random.Generator,
                            trace: Trace | None = None) -> Check:
    """<R(m)q, R(n)k> == <R(m+s)q, R(n+s)k> for many shifts s up to max_position."""
    dt = s.check_dtype
    q = rng.standard_normal((s.trials, s.head_dim)).astype(dt)
    k = rng.standard_normal((s.trials, s.head_dim)).astype(dt)
    top = max(1, s.max_position // 1024)
    m = rng.integers(0, top, size=s.trials)
    n = rng.integers(0, top, size=s.trials)
    shifts = _shifts(s.max_position - top, rng)  # largest position reached: (top - 1) + shift = max_position - 1
    scores = _scores(q, k, m[:, None] + shifts, n[:, None] + shifts, layout, s.base, trace).astype(np.float64)
    err = np.abs(scores - scores[:, :1])
    scale = np.linalg.norm(q.astype(np.float64), axis=1) * np.linalg.norm(k.astype(np.float64), axis=1)
    rel = err / scale[:, None]
    worst = float(rel.max())
    return Check(
        name=f"relative distance ({layout})",
        passed=worst <= s.tol,
        max_abs_error=float(err.max()),
        max_rel_error=worst,
        detail=f"{s.trials} q,k x {shifts.size - 1} shifts up to {int(shifts[-1]):,}",
    )


def check_norms(s: VerifySettings, rng: np.random.Generator, trace: Trace | None = None) -> Check:
    """Rotation keeps every vector's length, at every position."""
    dt = s.check_dtype
    x = rng.standard_normal((s.trials, _SEQ, s.head_dim)).astype(dt)
    pos = rng.integers(0, s.max_position, size=_SEQ)
    worst_abs = worst_rel = 0.0
    before = np.linalg.norm(x.astype(np.float64), axis=-1)
    for layout in s.layouts:
        rotated = apply_rope(x, pos, base=s.base, layout=layout)
        _seen(trace, "rotated x", rotated)
        after = np.linalg.norm(rotated.astype(np.float64), axis=-1)
        worst_abs = max(worst_abs, float(np.abs(after - before).max()))
        worst_rel = max(worst_rel, float((np.abs(after - before) / before).max()))
    return Check("norm preserved", worst_rel <= s.tol, worst_abs, worst_rel,
                 f"{s.trials * _SEQ} vectors, positions < {s.max_position:,}")


def check_layouts_agree(s: VerifySettings, rng: np.random.Generator, trace: Trace | None = None) -> Check:
    """Interleaved RoPE then the permutation equals the permutation then rotate-half RoPE; scores agree."""
    dt = s.check_dtype
    q = rng.standard_normal((s.trials, _SEQ, s.head_dim)).astype(dt)
    k = rng.standard_normal((s.trials, _SEQ, s.head_dim)).astype(dt)
    pos = rng.integers(0, s.max_position, size=_SEQ)
    qi = apply_rope(q, pos, base=s.base, layout="interleaved")
    ki = apply_rope(k, pos[::-1].copy(), base=s.base, layout="interleaved")
    qh = apply_rope(to_half_layout(q), pos, base=s.base, layout="rotate-half")
    kh = apply_rope(to_half_layout(k), pos[::-1].copy(), base=s.base, layout="rotate-half")
    si = np.einsum("tpd,tpd->tp", qi, ki)
    sh = np.einsum("tpd,tpd->tp", qh, kh)
    for label, values in (("interleaved q", qi), ("rotate-half q", qh), ("interleaved scores", si),
                          ("rotate-half scores", sh)):
        _seen(trace, label, values)
    vec_err = float(np.abs(to_half_layout(qi).astype(np.float64) - qh).max())
    scale = np.linalg.norm(q.astype(np.float64), axis=-1) * np.linalg.norm(k.astype(np.float64), axis=-1)
    err = np.abs(si.astype(np.float64) - sh)
    rel = float((err / scale).max())
    return Check("layouts agree after permutation", rel <= s.tol and vec_err <= s.tol,
                 float(err.max()), rel, "vectors and scores, 48 positions")


def check_sinusoidal_shift(s: VerifySettings, rng: np.random.Generator, trace: Trace | None = None) -> Check:
    """PE[pos + k] = M_k PE[pos] with one fixed block-rotation M_k for every pos."""
    dt = s.check_dtype
    n = min(s.max_position, 4096)
    d = s.head_dim
    # the table itself in the checked dtype: its angles drift with position, as in a model of that dtype
    pe = sinusoidal(n + 256, d, s.base, dtype=dt)
    _seen(trace, "sinusoidal table", pe)
    inv = rope_inv_freq(d, s.base, dtype=np.float64)
    worst = 0.0
    for k in rng.integers(1, 256, size=8):
        # M_k: the exact rotation by k positions, rounded once to the checked dtype
        c, sn = np.cos(k * inv).astype(dt), np.sin(k * inv).astype(dt)
        sin_part, cos_part = pe[:n, 0::2], pe[:n, 1::2]
        # sin(a+b) = sin a cos b + cos a sin b ; cos(a+b) = cos a cos b - sin a sin b
        pred = np.empty((n, d), dtype=dt)
        pred[:, 0::2] = sin_part * c + cos_part * sn
        pred[:, 1::2] = cos_part * c - sin_part * sn
        _seen(trace, "shifted prediction", pred)
        worst = max(worst, float(np.abs(pred.astype(np.float64) - pe[k: k + n]).max()))
    return Check("sinusoidal shift is one rotation", worst <= s.tol, worst, worst,
                 f"{n:,} positions, 8 offsets k")


def check_alibi_relative(s: VerifySettings, trace: Trace | None = None) -> Check:
    """The causal ALiBi bias is -m*(i-j): constant along every diagonal, masked above it."""
    bias = alibi_bias(_ALIBI_HEADS, _SEQ, causal=True, dtype=s.check_dtype)
    _seen(trace, "ALiBi bias", bias)
    i, j = np.indices((_SEQ, _SEQ))
    expected = np.where(j <= i, -alibi_slopes(_ALIBI_HEADS)[:, None, None] * (i - j), -np.inf)
    visible = j <= i
    err = float(np.abs(bias[:, visible] - expected[:, visible]).max())
    same_diagonal = float(np.abs(bias[:, 1:, 1:][:, visible[1:, 1:]] - bias[:, :-1, :-1][:, visible[:-1, :-1]]).max())
    masked = bool(np.all(np.isneginf(bias[:, ~visible])))
    worst = max(err, same_diagonal)
    return Check("ALiBi bias depends only on i-j", masked and worst <= s.tol, worst, worst,
                 f"{_ALIBI_HEADS} heads x {_SEQ}, future masked: {masked}")


def _attention(x: npt.NDArray[Any], w: npt.NDArray[Any], rope: Layout | None, base: float,
               trace: Trace | None = None) -> npt.NDArray[Any]:
    """Single-head bidirectional softmax attention in x's dtype; RoPE on q and k when ``rope`` names a layout."""
    q, k, v = x @ w[0], x @ w[1], x @ w[2]
    if rope is not None:
        pos = np.arange(x.shape[0])
        q, k = apply_rope(q, pos, base=base, layout=rope), apply_rope(k, pos, base=base, layout=rope)
    # a Python float, not np.sqrt(d): a numpy float64 scalar would promote float32 logits to float64 (NEP 50)
    logits = q @ k.T / math.sqrt(q.shape[-1])
    logits = logits - logits.max(axis=-1, keepdims=True)
    p = np.exp(logits)
    out: npt.NDArray[Any] = (p / p.sum(axis=-1, keepdims=True)) @ v
    for label, values in (("attention q", q), ("attention logits", logits), ("attention weights", p),
                          ("attention output", out)):
        _seen(trace, label, values)
    return out


def check_permutation(s: VerifySettings, rng: np.random.Generator, trace: Trace | None = None) -> tuple[Check, Check]:
    """Without positions attention is permutation-equivariant; with RoPE it must not be."""
    dt = s.check_dtype
    d = s.head_dim
    x = rng.standard_normal((_SEQ, d)).astype(dt)
    w = (rng.standard_normal((3, d, d)) / math.sqrt(d)).astype(dt)
    perm = rng.permutation(_SEQ)
    base_out = _attention(x, w, None, s.base, trace)
    plain = np.abs(_attention(x[perm], w, None, s.base, trace).astype(np.float64) - base_out[perm])
    layout = s.layouts[0]
    rope = np.abs(_attention(x[perm], w, layout, s.base, trace).astype(np.float64)
                  - _attention(x, w, layout, s.base, trace)[perm])
    out_scale = float(np.abs(base_out.astype(np.float64)).max())
    nope_rel = float(plain.max()) / out_scale
    rope_rel = float(rope.max()) / out_scale
    return (
        Check("no positions: permutation-equivariant", nope_rel <= s.tol, float(plain.max()), nope_rel,
              f"{_SEQ} rows shuffled"),
        # RoPE must move the output by a visible fraction of its scale when rows move, whatever the tolerance
        Check("RoPE: not permutation-equivariant", rope_rel > _MOVES, float(rope.max()), rope_rel,
              f"must differ by > {_MOVES:.0e}"),
    )


def precision_modes(dtype: str) -> list[tuple[str, str]]:
    """The precision columns for a dtype: float32 vs float64 angles, or the three half-precision loss modes."""
    if dtype in HALF_DTYPES:
        return [(mode, dtype) for mode in LOSS_MODES]
    return [("angles", "float32"), ("angles", "float64")]


def precision_section(inv_freq: npt.NDArray[np.float32], dtype: str, *, max_position: int, tolerance: float,
                      trials: int, rng: np.random.Generator, attention_factor: float = 1.0,
                      trace: Trace | None = None) -> Precision:
    """Measure every precision column for ``dtype`` and pick the one that decides pass/fail."""
    positions, columns = measure(inv_freq, precision_modes(dtype), max_position=max_position, tolerance=tolerance,
                                 trials=trials, rng=rng, attention_factor=attention_factor, trace=trace)
    verdict_key = f"table_{dtype}" if dtype in HALF_DTYPES else f"angles_{dtype}"
    verdict = next(c for c in columns if c.key == verdict_key)
    # float64 runs still say where float32 would stop being enough
    about = "float32" if dtype == "float64" else dtype
    return Precision(positions, columns, verdict, tolerance, advice(columns, about, max_position))


def run(settings: VerifySettings, trace: Trace | None = None) -> VerifyReport:
    """Run every check and the precision section; deterministic for a given seed.

    ``trace(label, array)`` sees each intermediate result the checks report on (tests assert its dtype).
    """
    settings.validate()
    rng = np.random.default_rng(settings.seed)
    checks = [check_relative_distance(settings, layout, rng, trace) for layout in settings.layouts]
    checks += [
        check_norms(settings, rng, trace),
        check_layouts_agree(settings, rng, trace),
        check_sinusoidal_shift(settings, rng, trace),
        check_alibi_relative(settings, trace),
        *check_permutation(settings, rng, trace),
    ]
    inv = rope_inv_freq(settings.head_dim, settings.base, dtype=np.float32).astype(np.float32)
    precision = precision_section(inv, settings.dtype, max_position=settings.max_position, tolerance=settings.tol,
                                  trials=settings.trials, rng=rng, trace=trace)
    return VerifyReport(settings, checks, precision)

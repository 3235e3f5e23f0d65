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

from posenc_cli.encodings import (
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
from posenc_cli.errors import PosencError

DTYPES = {"float32": np.float32, "float64": np.float64}

# Sizes of the auxiliary checks: small, because they test exact algebraic identities.
_SHIFT_COUNT = 64
_SEQ = 48
_ALIBI_HEADS = 12  # not a power of two on purpose: exercises the official slope recipe's second branch


@dataclass(frozen=True)
class VerifySettings:
    """What ``posenc verify`` checks and how hard."""

    head_dim: int = 128
    base: float = 10000.0
    layouts: tuple[Layout, ...] = LAYOUTS
    trials: int = 16
    max_position: int = 1 << 20
    dtype: str = "float64"
    seed: int = 0
    tolerance: float = 1e-4

    def validate(self) -> None:
        if self.head_dim < 2 or self.head_dim % 2:
            raise PosencError(f"--head-dim must be a positive even number, got {self.head_dim}")
        if not math.isfinite(self.base) or self.base <= 1:
            raise PosencError(f"--base must be a finite number greater than 1, got {self.base}")
        if self.trials < 1:
            raise PosencError(f"--trials must be at least 1, got {self.trials}")
        if self.max_position < 2:
            raise PosencError(f"--max-position must be at least 2, got {self.max_position}")
        if self.dtype not in DTYPES:
            raise PosencError(f"--dtype {self.dtype!r} is not known; use one of: {', '.join(DTYPES)}")
        if not math.isfinite(self.tolerance) or self.tolerance <= 0:
            raise PosencError(f"--tolerance must be a finite number greater than 0, got {self.tolerance}")
        for layout in self.layouts:
            if layout not in LAYOUTS:
                raise PosencError(f"layout {layout!r} is not known; use one of: {', '.join(LAYOUTS)}")
        # the largest arrays, refused before anything is allocated: rotated q and k for every trial and shift,
        # and the permutation check's attention weights (3, head_dim, head_dim)
        ensure_fits((self.trials, _SHIFT_COUNT + 1, self.head_dim * 4), np.float64,
                    f"verify workspace for --head-dim {self.head_dim} and --trials {self.trials}")
        ensure_fits((3, self.head_dim, self.head_dim), np.float64,
                    f"attention weights for --head-dim {self.head_dim}")


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
class PrecisionRow:
    """Relative-distance error when both positions are shifted by about ``position``."""

    position: int
    float32_rel_error: float
    float64_rel_error: float


@dataclass
class VerifyReport:
    settings: VerifySettings
    checks: list[Check]
    precision: list[PrecisionRow]
    float32_exceeds_from: int | None

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        settings = asdict(self.settings)
        settings["layouts"] = list(self.settings.layouts)
        return {
            "passed": self.passed,
            "settings": settings,
            "checks": [c.as_dict() for c in self.checks],
            "precision": [asdict(r) for r in self.precision],
            "float32_exceeds_tolerance_from": self.float32_exceeds_from,
        }


def _scores(q: npt.NDArray[Any], k: npt.NDArray[Any], pos_q: npt.NDArray[Any], pos_k: npt.NDArray[Any],
            layout: Layout, base: float) -> npt.NDArray[Any]:
    """Scores of q rotated at pos_q with k rotated at pos_k; q, k are (trials, d), positions (trials, P)."""
    shape = (q.shape[0], pos_q.shape[1], q.shape[1])
    qr = apply_rope(np.broadcast_to(q[:, None, :], shape), pos_q, base=base, layout=layout)
    kr = apply_rope(np.broadcast_to(k[:, None, :], shape), pos_k, base=base, layout=layout)
    scores: npt.NDArray[Any] = np.einsum("tpd,tpd->tp", qr, kr)
    return scores


def _shifts(max_shift: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """Shifts from 1 to max_shift: a geometric ladder (so every scale is seen) plus random ones."""
    ladder = np.unique(np.geomspace(1, max_shift, _SHIFT_COUNT // 2).astype(np.int64))
    random = rng.integers(1, max_shift + 1, size=_SHIFT_COUNT - ladder.size)
    return np.unique(np.concatenate([[0], ladder, random, [max_shift]]))


def check_relative_distance(s: VerifySettings, layout: Layout, rng: np.random.Generator) -> Check:
    """<R(m)q, R(n)k> == <R(m+s)q, R(n+s)k> for many shifts s up to max_position."""
    dt = DTYPES[s.dtype]
    q = rng.standard_normal((s.trials, s.head_dim)).astype(dt)
    k = rng.standard_normal((s.trials, s.head_dim)).astype(dt)
    top = max(1, s.max_position // 1024)
    m = rng.integers(0, top, size=s.trials)
    n = rng.integers(0, top, size=s.trials)
    shifts = _shifts(s.max_position - top, rng)  # largest position reached: (top - 1) + shift = max_position - 1
    scores = _scores(q, k, m[:, None] + shifts, n[:, None] + shifts, layout, s.base).astype(np.float64)
    err = np.abs(scores - scores[:, :1])
    scale = np.linalg.norm(q.astype(np.float64), axis=1) * np.linalg.norm(k.astype(np.float64), axis=1)
    rel = err / scale[:, None]
    worst = float(rel.max())
    return Check(
        name=f"relative distance ({layout})",
        passed=worst <= s.tolerance,
        max_abs_error=float(err.max()),
        max_rel_error=worst,
        detail=f"{s.trials} q,k x {shifts.size - 1} shifts up to {int(shifts[-1]):,}",
    )


def check_norms(s: VerifySettings, rng: np.random.Generator) -> Check:
    """Rotation keeps every vector's length, at every position."""
    dt = DTYPES[s.dtype]
    x = rng.standard_normal((s.trials, _SEQ, s.head_dim)).astype(dt)
    pos = rng.integers(0, s.max_position, size=_SEQ)
    worst_abs = worst_rel = 0.0
    for layout in s.layouts:
        before = np.linalg.norm(x.astype(np.float64), axis=-1)
        after = np.linalg.norm(apply_rope(x, pos, base=s.base, layout=layout).astype(np.float64), axis=-1)
        worst_abs = max(worst_abs, float(np.abs(after - before).max()))
        worst_rel = max(worst_rel, float((np.abs(after - before) / before).max()))
    return Check("norm preserved", worst_rel <= s.tolerance, worst_abs, worst_rel,
                 f"{s.trials * _SEQ} vectors, positions < {s.max_position:,}")


def check_layouts_agree(s: VerifySettings, rng: np.random.Generator) -> Check:
    """Interleaved RoPE then the permutation equals the permutation then half-split RoPE; scores agree."""
    dt = DTYPES[s.dtype]
    q = rng.standard_normal((s.trials, _SEQ, s.head_dim)).astype(dt)
    k = rng.standard_normal((s.trials, _SEQ, s.head_dim)).astype(dt)
    pos = rng.integers(0, s.max_position, size=_SEQ)
    qi = apply_rope(q, pos, base=s.base, layout="interleaved")
    ki = apply_rope(k, pos[::-1].copy(), base=s.base, layout="interleaved")
    qh = apply_rope(to_half_layout(q), pos, base=s.base, layout="half")
    kh = apply_rope(to_half_layout(k), pos[::-1].copy(), base=s.base, layout="half")
    vec_err = float(np.abs(to_half_layout(qi) - qh).max())
    si = np.einsum("tpd,tpd->tp", qi, ki).astype(np.float64)
    sh = np.einsum("tpd,tpd->tp", qh, kh).astype(np.float64)
    scale = np.linalg.norm(q, axis=-1) * np.linalg.norm(k, axis=-1)
    err = np.abs(si - sh)
    rel = float((err / scale).max())
    return Check("layouts agree after permutation", rel <= s.tolerance and vec_err <= s.tolerance,
                 float(err.max()), rel, f"rotated vectors differ by {vec_err:.1e}")


def check_sinusoidal_shift(s: VerifySettings, rng: np.random.Generator) -> Check:
    """PE[pos + k] = M_k PE[pos] with one fixed block-rotation M_k for every pos."""
    dt = DTYPES[s.dtype]
    n = min(s.max_position, 4096)
    d = s.head_dim
    # the table itself in the checked dtype: float32 angles drift with position, as in a float32 model
    pe = sinusoidal(n + 256, d, s.base, dtype=dt)
    inv = rope_inv_freq(d, s.base, dtype=np.float64)
    worst = 0.0
    for k in rng.integers(1, 256, size=8):
        c, sn = np.cos(k * inv).astype(dt), np.sin(k * inv).astype(dt)
        sin_part, cos_part = pe[:n, 0::2], pe[:n, 1::2]
        # sin(a+b) = sin a cos b + cos a sin b ; cos(a+b) = cos a cos b - sin a sin b
        pred = np.empty((n, d), dtype=dt)
        pred[:, 0::2] = sin_part * c + cos_part * sn
        pred[:, 1::2] = cos_part * c - sin_part * sn
        worst = max(worst, float(np.abs(pred - pe[k: k + n]).max()))
    return Check("sinusoidal shift is one rotation", worst <= s.tolerance, worst, worst,
                 f"{n:,} positions, 8 offsets k")


def check_alibi_relative(s: VerifySettings) -> Check:
    """The causal ALiBi bias is -m*(i-j): constant along every diagonal, masked above it."""
    bias = alibi_bias(_ALIBI_HEADS, _SEQ, causal=True)
    i, j = np.indices((_SEQ, _SEQ))
    expected = np.where(j <= i, -alibi_slopes(_ALIBI_HEADS)[:, None, None] * (i - j), -np.inf)
    visible = j <= i
    err = float(np.abs(bias[:, visible] - expected[:, visible]).max())
    same_diagonal = float(np.abs(bias[:, 1:, 1:][:, visible[1:, 1:]] - bias[:, :-1, :-1][:, visible[:-1, :-1]]).max())
    masked = bool(np.all(np.isneginf(bias[:, ~visible])))
    worst = max(err, same_diagonal)
    return Check("ALiBi bias depends only on i-j", masked and worst <= s.tolerance, worst, worst,
                 f"{_ALIBI_HEADS} heads x {_SEQ}, future masked: {masked}")


def _attention(x: npt.NDArray[Any], w: npt.NDArray[Any], rope: Layout | None, base: float) -> npt.NDArray[Any]:
    """Single-head bidirectional softmax attention; RoPE on q and k when ``rope`` names a layout."""
    q, k, v = x @ w[0], x @ w[1], x @ w[2]
    if rope is not None:
        pos = np.arange(x.shape[0])
        q, k = apply_rope(q, pos, base=base, layout=rope), apply_rope(k, pos, base=base, layout=rope)
    logits = q @ k.T / np.sqrt(q.shape[-1])
    logits = logits - logits.max(axis=-1, keepdims=True)
    p = np.exp(logits)
    return (p / p.sum(axis=-1, keepdims=True)) @ v  # type: ignore[no-any-return]


def check_permutation(s: VerifySettings, rng: np.random.Generator) -> tuple[Check, Check]:
    """Without positions attention is permutation-equivariant; with RoPE it must not be."""
    dt = DTYPES[s.dtype]
    d = s.head_dim
    x = rng.standard_normal((_SEQ, d)).astype(dt)
    w = (rng.standard_normal((3, d, d)) / np.sqrt(d)).astype(dt)
    perm = rng.permutation(_SEQ)
    plain = np.abs(_attention(x[perm], w, None, s.base) - _attention(x, w, None, s.base)[perm])
    layout = s.layouts[0]
    rope = np.abs(_attention(x[perm], w, layout, s.base) - _attention(x, w, layout, s.base)[perm])
    out_scale = float(np.abs(_attention(x, w, None, s.base)).max())
    nope_rel = float(plain.max()) / out_scale
    rope_rel = float(rope.max()) / out_scale
    return (
        Check("no positions: permutation-equivariant", nope_rel <= s.tolerance, float(plain.max()), nope_rel,
              f"{_SEQ} rows shuffled"),
        # RoPE must change the output by far more than rounding noise when rows move
        Check("RoPE: not permutation-equivariant", rope_rel > 100 * s.tolerance, float(rope.max()), rope_rel,
              f"must differ by > {100 * s.tolerance:.0e}"),
    )


def precision_table(s: VerifySettings, rng: np.random.Generator) -> list[PrecisionRow]:
    """Relative-distance error per decade of absolute position, in float32 and float64.

    The exact reference is the float64 score at small positions (m, n); each row shifts both by ``position``.
    """
    positions = [10**e for e in range(2, 20) if 10**e < s.max_position] + [s.max_position]
    q = rng.standard_normal((s.trials, s.head_dim))
    k = rng.standard_normal((s.trials, s.head_dim))
    m = rng.integers(0, 64, size=s.trials)
    n = rng.integers(0, 64, size=s.trials)
    shifts = np.array([0] + [p - 64 for p in positions if p > 64] or [0])
    scale = np.linalg.norm(q, axis=1) * np.linalg.norm(k, axis=1)
    errors: dict[str, npt.NDArray[np.float64]] = {}
    for name, dt in DTYPES.items():
        sc = _scores(q.astype(dt), k.astype(dt), m[:, None] + shifts, n[:, None] + shifts, s.layouts[0], s.base)
        reference = _scores(q, k, m[:, None], n[:, None], s.layouts[0], s.base)
        errors[name] = (np.abs(sc.astype(np.float64) - reference) / scale[:, None]).max(axis=0)
    rows = [PrecisionRow(p, float(errors["float32"][i + 1]), float(errors["float64"][i + 1]))
            for i, p in enumerate(p for p in positions if p > 64)]
    return rows


def run(settings: VerifySettings) -> VerifyReport:
    """Run every check; deterministic for a given seed."""
    settings.validate()
    rng = np.random.default_rng(settings.seed)
    checks = [check_relative_distance(settings, layout, rng) for layout in settings.layouts]
    checks += [
        check_norms(settings, rng),
        check_layouts_agree(settings, rng),
        check_sinusoidal_shift(settings, rng),
        check_alibi_relative(settings),
        *check_permutation(settings, rng),
    ]
    table = precision_table(settings, rng)
    breaks = next((r.position for r in table if r.float32_rel_error > settings.tolerance), None)
    return VerifyReport(settings, checks, table, breaks)

"""Where reduced-precision position handling breaks RoPE (numpy; ``ml_dtypes`` for bfloat16).

Real models lose RoPE precision in three places, each modelled here as one *loss mode* of a dtype ``D``; every
other step runs in float32, as transformers runs it:

* ``positions``: the position ids are held in ``D`` (``torch.arange(n, dtype=bfloat16)``); bfloat16 holds
  integers exactly only up to 256 (257 rounds to 256), float16 up to 2048 and float32 up to 2**24.
* ``angles``: the angles ``position * inv_freq`` are formed in ``D`` (positions and ``inv_freq`` cast to ``D``,
  the product rounded to ``D``: what a model cast whole with ``.to(bfloat16)`` does to its ``inv_freq`` buffer).
* ``table``: angles formed in float32, cos/sin computed in float32 and cached in ``D``, then applied in float32
  (transformers' own path: ``emb.cos().to(x.dtype)``). The error is the table's rounding; it does not grow with
  position until float32 angles themselves run out of digits.

For float64 the only mode that makes sense is ``angles`` (everything in float64).

Errors are relative-distance errors: the score of q at ``m + s`` and k at ``n + s`` compared with the exact
(float64) score at ``(m, n)``, divided by ``attention_factor**2 * |q| |k|``. q and k are exact (float64) so the
number measures the position handling alone; the rotation and dot product run in float64.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from posenc_cli.errors import PosencError
from posenc_cli.rope.encodings import ensure_fits

#: dtype names posenc knows, widest first.
DTYPE_NAMES = ("float64", "float32", "bfloat16", "float16")
HALF_DTYPES = ("bfloat16", "float16")
LOSS_MODES = ("positions", "angles", "table")
MODE_LABELS = {"positions": "positions in {d}", "angles": "angles in {d}", "table": "cos/sin in {d}"}

#: Positions per octave of the grid on which "exceeds the tolerance from" is searched.
GRID_PER_OCTAVE = 8
# the reference positions m, n sit below this; each grid position p shifts both by p - _REF
_REF = 64
# positions are scanned for collisions in chunks of this many, so a 10M window never allocates 10M x pairs
_CHUNK = 1 << 16

Trace = Callable[[str, npt.NDArray[Any]], None]


def numpy_dtype(name: str) -> np.dtype[Any]:
    """The numpy dtype for ``name``; bfloat16 comes from ``ml_dtypes`` (imported only when asked for)."""
    if name not in DTYPE_NAMES:
        raise PosencError(f"dtype {name!r} is not known; use one of: {', '.join(DTYPE_NAMES)}")
    if name == "bfloat16":
        import ml_dtypes

        bf16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
        return bf16
    return np.dtype(name)


def eps(name: str) -> float:
    """Machine epsilon of ``name`` (the gap between 1 and the next value): 2**-7 for bfloat16, 2**-10 float16."""
    if name == "bfloat16":
        return 2.0**-7  # 8 significant bits
    return float(np.finfo(numpy_dtype(name)).eps)


def default_tolerance(name: str) -> float:
    """1e-4, or the dtype's epsilon when that is larger.

    Storing q and k in a dtype already moves a score by up to ``eps * |q||k|`` (each factor rounded by half an
    ulp); position handling that stays below that costs nothing the model does not already pay.
    """
    return max(1e-4, eps(name))


def rounding_bound(name: str, n: int) -> float:
    """The a-priori rounding bound ``n * eps`` of an n-term computation in ``name`` (Higham's dot-product bound).

    A measured error below it is rounding noise: its exact digits depend on the CPU's SIMD path, BLAS kernel and
    libm, so reports print the bound instead of the digits.
    """
    return n * eps(name)


def compute_dtype(name: str) -> np.dtype[Any]:
    """Where angles and cos/sin are computed: float64 for float64, float32 for everything narrower."""
    return np.dtype(np.float64) if name == "float64" else np.dtype(np.float32)


def _round(values: npt.NDArray[Any], dt: np.dtype[Any]) -> npt.NDArray[Any]:
    with np.errstate(over="ignore"):  # float16 overflows to inf past 65504; that is the finding, not an error
        return values.astype(dt)


def rotation(positions: npt.NDArray[np.int64], inv_freq: npt.NDArray[np.float32], mode: str, dtype: str,
             attention_factor: float = 1.0, trace: Trace | None = None) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """The cos and sin (times ``attention_factor``) a model applies under ``mode`` in ``dtype``.

    Shapes: ``positions`` ``(P,)`` integers, ``inv_freq`` ``(h,)``; returns two ``(P, h)`` arrays in ``dtype``
    (the values the model multiplies q and k by). ``trace(label, array)`` sees every intermediate in its dtype.
    """
    if mode not in LOSS_MODES:
        raise PosencError(f"precision mode {mode!r} is not known; use one of: {', '.join(LOSS_MODES)}")
    low = numpy_dtype(dtype)
    work = compute_dtype(dtype)
    inv = inv_freq.astype(work)
    if mode == "positions":
        pos = _round(positions, low)
        _seen(trace, f"positions in {dtype}", pos)
        angles = pos.astype(work)[:, None] * inv
    elif mode == "angles":
        pos, inv_low = _round(positions, low), inv_freq.astype(low)
        with np.errstate(over="ignore", invalid="ignore"):
            angles_low = pos[:, None] * inv_low
        _seen(trace, f"angles in {dtype}", angles_low)
        angles = angles_low.astype(work)
    else:
        angles = positions.astype(work)[:, None] * inv
    _seen(trace, f"angles computed in {work.name}", angles)
    factor = work.type(attention_factor)
    with np.errstate(invalid="ignore"):  # cos(inf) is nan: an overflowed angle, reported as an infinite error
        cos, sin = np.cos(angles) * factor, np.sin(angles) * factor
    _seen(trace, f"cos/sin computed in {work.name}", cos)
    cos, sin = _round(cos, low), _round(sin, low)
    _seen(trace, f"cos/sin in {dtype}", cos)
    return cos, sin


def _seen(trace: Trace | None, label: str, values: npt.NDArray[Any]) -> None:
    if trace is not None:
        trace(label, values)


def _pair_scores(q: npt.NDArray[np.float64], k: npt.NDArray[np.float64], cq: npt.NDArray[Any],
                 sq: npt.NDArray[Any], ck: npt.NDArray[Any], sk: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    """Scores of q, k ``(t, h, 2)`` rotated by per-position cos/sin ``(t, P, h)``: float64 ``(t, P)``.

    Pair ``i`` is ``(x[i, 0], x[i, 1])``; which features form a pair (interleaved or half layout) does not change a
    score, so one form serves both.
    """
    c1, s1, c2, s2 = (a.astype(np.float64) for a in (cq, sq, ck, sk))
    qa, qb = q[:, None, :, 0], q[:, None, :, 1]
    ka, kb = k[:, None, :, 0], k[:, None, :, 1]
    rqa, rqb = qa * c1 - qb * s1, qb * c1 + qa * s1
    rka, rkb = ka * c2 - kb * s2, kb * c2 + ka * s2
    scores: npt.NDArray[np.float64] = (rqa * rka + rqb * rkb).sum(axis=-1)
    return scores


def position_grid(max_position: int) -> list[int]:
    """Positions where the error is measured: powers of ten and GRID_PER_OCTAVE steps per octave, above _REF,
    up to and including ``max_position``."""
    top = max_position
    grid = {top}
    grid.update(10**e for e in range(2, 20) if _REF < 10**e < top)
    step = 2 ** (1 / GRID_PER_OCTAVE)
    p = float(_REF + 1)
    while p < top:
        grid.add(int(p))
        p *= step
    return sorted(g for g in grid if g > _REF)


@dataclass
class Column:
    """One loss mode in one dtype, measured over a window."""

    mode: str
    dtype: str
    errors: list[float]  # per grid position; inf where the rotation overflowed
    first_identical: int | None  # first p whose rotation equals p-1's in every pair
    exceeds_from: int | None  # first grid position whose error exceeds the tolerance
    noise_floor: float  # below this the digits are the CPU's rounding, not the mode's

    @property
    def label(self) -> str:
        return MODE_LABELS[self.mode].format(d=self.dtype)

    @property
    def key(self) -> str:
        return f"{self.mode}_{self.dtype}"

    def as_dict(self, positions: list[int]) -> dict[str, Any]:
        return {"mode": self.mode, "dtype": self.dtype, "label": self.label,
                "first_identical_position": self.first_identical,
                "exceeds_tolerance_from": self.exceeds_from, "noise_floor": self.noise_floor,
                "rel_errors": [e if math.isfinite(e) else None for e in self.errors],
                "positions": positions}


def first_identical(inv_freq: npt.NDArray[np.float32], mode: str, dtype: str, max_position: int,
                    attention_factor: float = 1.0) -> int | None:
    """The first position ``p < max_position`` whose cos and sin equal those of ``p - 1`` in every pair.

    From there on the model cannot tell neighbouring tokens apart. The pair turning fastest finds candidates
    (every pair identical implies it is); only candidates are checked on all pairs.
    """
    fastest = np.array([inv_freq.argmax()])
    for start in range(0, max_position, _CHUNK):
        pos = np.arange(start, min(start + _CHUNK + 1, max_position), dtype=np.int64)
        if pos.size < 2:
            break
        c, s = rotation(pos, inv_freq[fastest], mode, dtype, attention_factor)
        same = (c[1:, 0] == c[:-1, 0]) & (s[1:, 0] == s[:-1, 0])
        candidates = pos[1:][same]
        for i in range(0, candidates.size, 4096):
            batch = candidates[i: i + 4096]
            pairs = np.stack([batch - 1, batch], axis=1).reshape(-1)
            ca, sa = rotation(pairs, inv_freq, mode, dtype, attention_factor)
            ca, sa = ca.reshape(batch.size, 2, -1), sa.reshape(batch.size, 2, -1)
            equal = np.all((ca[:, 0] == ca[:, 1]) & (sa[:, 0] == sa[:, 1]), axis=1)
            if equal.any():
                return int(batch[int(equal.argmax())])
    return None


def measure(inv_freq: npt.NDArray[np.float32], modes: list[tuple[str, str]], *, max_position: int,
            tolerance: float, trials: int, rng: np.random.Generator, attention_factor: float = 1.0,
            trace: Trace | None = None) -> tuple[list[int], list[Column]]:
    """Relative-distance error per grid position for each ``(mode, dtype)``; returns (grid, columns).

    ``inv_freq`` is the model's float32 spectrum (any rope type: the caller computes it). Deterministic for a
    given ``rng`` state.
    """
    grid = position_grid(max_position)
    h = inv_freq.shape[0]
    # the largest arrays: float64 cos/sin and rotated pairs for every trial, grid position and pair
    ensure_fits((trials, len(grid), h, 8), np.float64, f"precision workspace for {trials} trials x {h} pairs")
    q = rng.standard_normal((trials, h, 2))
    k = rng.standard_normal((trials, h, 2))
    ref = min(_REF, max_position)
    m = rng.integers(0, ref, size=trials)
    n = rng.integers(0, ref, size=trials)
    shifts = np.array([g - _REF for g in grid], dtype=np.int64)
    inv64 = inv_freq.astype(np.float64)
    # exact: float64 angles of the model's own float32 spectrum, at the unshifted positions
    am, an = m[:, None] * inv64, n[:, None] * inv64
    exact = attention_factor**2 * _pair_scores(q, k, np.cos(am)[:, None], np.sin(am)[:, None],
                                               np.cos(an)[:, None], np.sin(an)[:, None])
    scale = attention_factor**2 * np.linalg.norm(q.reshape(trials, -1), axis=1) * np.linalg.norm(
        k.reshape(trials, -1), axis=1)
    columns = []
    for mode, dtype in modes:
        pm = (m[:, None] + shifts).reshape(-1)
        pn = (n[:, None] + shifts).reshape(-1)
        cq, sq = rotation(pm, inv_freq, mode, dtype, attention_factor, trace)
        ck, sk = rotation(pn, inv_freq, mode, dtype, attention_factor, trace)
        shape = (trials, shifts.size, h)
        with np.errstate(invalid="ignore"):
            scores = _pair_scores(q, k, cq.reshape(shape), sq.reshape(shape), ck.reshape(shape), sk.reshape(shape))
            err = np.abs(scores - exact) / scale[:, None]
        err = np.where(np.isfinite(err), err, np.inf).max(axis=0)
        errors = [float(e) for e in err.tolist()]
        exceeds = next((g for g, e in zip(grid, errors, strict=True) if not e <= tolerance), None)
        floor = rounding_bound("float64" if dtype == "float64" else "float32", 2 * h)
        columns.append(Column(mode, dtype, errors,
                              first_identical(inv_freq, mode, dtype, max_position, attention_factor),
                              exceeds, floor))
    return grid, columns


def advice(columns: list[Column], dtype: str, max_position: int) -> list[str]:
    """Plain sentences: which handling breaks where, and what to do instead."""
    by_mode = {c.mode: c for c in columns if c.dtype == dtype}
    out: list[str] = []
    pos, ang, tab = by_mode.get("positions"), by_mode.get("angles"), by_mode.get("table")
    if pos is not None and pos.first_identical is not None:
        out.append(f"position ids held in {dtype} merge from position {pos.first_identical:,} "
                   f"({pos.first_identical} and {pos.first_identical - 1} become one): keep them as integers.")
    if ang is not None and ang.exceeds_from is not None:
        if dtype in ("float32", "float64") or (tab is not None and tab.exceeds_from is not None
                                               and tab.exceeds_from <= ang.exceeds_from):
            fix = "form the angles position * inv_freq in float64 beyond it"
        else:
            fix = "form the angles position * inv_freq in float32 and cast cos/sin after"
        out.append(f"angles formed in {dtype} exceed the tolerance from position ~{ang.exceeds_from:,}: {fix}.")
    if tab is not None:
        if tab.exceeds_from is None:
            out.append(f"angles in float32 with cos/sin cached in {dtype} stay within the tolerance up to "
                       f"{max_position:,}.")
        else:
            out.append(f"even float32 angles exceed the tolerance from position ~{tab.exceeds_from:,}: "
                       "form the angles position * inv_freq in float64 beyond it.")
    return out

"""What ``posenc plot`` draws, computed (numpy only, no I/O): the heatmaps of the sinusoidal and RoPE encodings,
ALiBi's bias matrices, the wavelength chart of the scaling methods, RoFormer's long-term decay bound.

Every picture can be checked against posenc's numbers: scaled RoPE frequencies come from
``scaling.rope_parameters`` + ``frequencies.compute``, exactly as ``posenc scale --explain`` gets them; sinusoidal
and ALiBi values from ``encodings``. :mod:`posenc_cli.plots.figures` draws these with matplotlib,
:mod:`posenc_cli.plots.terminal` in the terminal.

Large heatmaps are never materialised: a ``(positions, features)`` matrix is reduced to the output's pixel grid by
exact block means. The mean of ``sin(p*w)`` (or ``cos``) over ``b`` consecutive positions starting at ``a`` has the
closed form ``sin(b*w/2) / (b*sin(w/2)) * sin((a + (b-1)/2) * w)``, so each block costs one evaluation, whatever
the sequence length; feature blocks are averaged in column chunks of bounded size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from posenc_cli.errors import PosencError
from posenc_cli.rope.encodings import (
    SINUSOIDAL_BASE,
    alibi_bias,
    alibi_slopes,
    rope_inv_freq,
    sinusoidal,
    sinusoidal_inv_freq,
)
from posenc_cli.rope.frequencies import Frequencies, default_inv_freq, for_request
from posenc_cli.rope.scaling import ScaleRequest, rope_parameters

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: Figure sizes in inches; the heatmap pixel grid (see :func:`pixel_grid`) follows from them and the dpi.
HEATMAP_SIZE = (8.0, 5.0)
SIDE_BY_SIDE_SIZE = (13.0, 5.5)
#: Fraction of the figure a heatmap's axes cover (width, height), matching the subplot margins used below.
_AXES_FRACTION = (0.72, 0.76)
#: Column chunk for block means: at most this many float64 values are alive at once (32 MiB).
_CHUNK_VALUES = 1 << 22


# ---------------------------------------------------------------- heatmap data


@dataclass(frozen=True)
class Heatmap:
    """A matrix to draw: ``values`` (rows x cols) standing for a ``full_shape`` matrix.

    When ``values.shape != full_shape`` every cell is the exact mean of its block of the full matrix (blocks from
    :func:`block_edges`). ``hlines`` are (row coordinate, label) marks such as the trained context length.
    """

    values: F64
    full_shape: tuple[int, int]
    title: str
    row_label: str
    col_label: str
    value_label: str
    vmin: float = -1.0
    vmax: float = 1.0
    hlines: tuple[tuple[float, str], ...] = ()

    @property
    def aggregated(self) -> bool:
        return tuple(self.values.shape) != self.full_shape

    @property
    def aggregation_note(self) -> str:
        """'' or 'aggregated to RxC (block means of the N x D matrix)' for titles."""
        if not self.aggregated:
            return ""
        r, c = self.values.shape
        n, d = self.full_shape
        return f"aggregated to {r}x{c} (block means of the {n:,} x {d:,} matrix)"


def pixel_grid(dpi: float, panels: int = 1) -> tuple[int, int]:
    """(rows, cols) of pixels one heatmap panel covers in a saved figure: the grid large inputs reduce to."""
    width, height = SIDE_BY_SIDE_SIZE if panels > 1 else HEATMAP_SIZE
    rows = int(height * dpi * _AXES_FRACTION[1])
    cols = int(width * dpi * _AXES_FRACTION[0] / panels)
    return max(rows, 1), max(cols, 1)


def block_edges(n: int, out: int) -> I64:
    """Edges of ``min(n, out)`` nearly equal blocks covering ``0..n`` (``edges[k]:edges[k+1]`` is block k)."""
    k = max(1, min(n, out))
    edges: I64 = (np.arange(k + 1, dtype=np.int64) * n) // k
    return edges


def trig_block_means(starts: I64, sizes: I64, freqs: F64, kind: str) -> F64:
    """``mean(f(p * w) for p in start .. start+size-1)`` for f = sin or cos, every block x every frequency.

    Closed form (Dirichlet kernel), shape ``(len(starts), len(freqs))``; exact ``f(start * w)`` for size 1.
    """
    trig = np.sin if kind == "sin" else np.cos
    a = starts.astype(np.float64)[:, None]
    w = np.asarray(freqs, dtype=np.float64)[None, :]
    half = w / 2
    sin_half = np.sin(half)
    # w a multiple of 2*pi (never for RoPE's w <= 1): every term equals the first one
    degenerate = np.abs(sin_half) < 1e-12
    # the Dirichlet factor depends on the block size only, and blocks come in one or two sizes
    unique, which = np.unique(sizes, return_inverse=True)
    b = unique.astype(np.float64)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(degenerate, 1.0, np.sin(b * half) / (b * sin_half))
    out: F64 = trig((a + (sizes.astype(np.float64)[:, None] - 1) / 2) * w)
    out *= factor[which.reshape(-1)]
    if degenerate.any():
        cols = np.flatnonzero(degenerate[0])
        out[:, cols] = trig(a * w[:, cols])
    return out


def _aggregate_columns(
    row_edges: I64, col_edges: I64, columns: Callable[[I64, I64, int, int], F64]
) -> F64:
    """Block means over columns, computed chunk by chunk.

    ``columns(starts, sizes, c0, c1)`` returns the row-block means of full columns ``c0 .. c1-1`` (shape
    ``(rows_out, c1 - c0)``); chunks hold whole column blocks and about :data:`_CHUNK_VALUES` values.
    """
    starts, sizes = row_edges[:-1], np.diff(row_edges)
    rows_out, blocks = starts.size, col_edges.size - 1
    out: F64 = np.empty((rows_out, blocks), dtype=np.float64)
    per_chunk = max(1, _CHUNK_VALUES // rows_out)
    first = 0
    while first < blocks:
        c0 = int(col_edges[first])
        last = int(np.searchsorted(col_edges, c0 + per_chunk, side="right")) - 1
        last = min(max(last, first + 1), blocks)
        c1 = int(col_edges[last])
        values = columns(starts, sizes, c0, c1)
        local = col_edges[first:last] - c0
        sums = np.add.reduceat(values, local, axis=1)
        out[:, first:last] = sums / np.diff(col_edges[first : last + 1])[None, :]
        first = last
    return out


def heatmap_data_sinusoidal(
    max_len: int, d_model: int, max_rows: int, max_cols: int, base: float = SINUSOIDAL_BASE
) -> Heatmap:
    """The sinusoidal encoding ``PE[pos, i]`` as a heatmap of at most ``max_rows x max_cols`` cells.

    Small inputs give exactly ``encodings.sinusoidal(max_len, d_model, base)``; larger ones its block means,
    computed without building the full matrix (memory ``O(max_rows * max_cols)``).
    """
    row_edges, col_edges = block_edges(max_len, max_rows), block_edges(d_model, max_cols)
    title = f"Sinusoidal positional encoding: {max_len:,} positions x {d_model:,} dims, base {base:g}"
    labels = ("position", "dimension i  (even: sin, odd: cos)", "PE[pos, i]")
    if row_edges.size - 1 == max_len and col_edges.size - 1 == d_model:
        exact: F64 = sinusoidal(max_len, d_model, base).astype(np.float64, copy=False)
        return Heatmap(exact, (max_len, d_model), title, *labels)
    freqs = sinusoidal_inv_freq(d_model, base)  # the frequencies encodings.sinusoidal uses

    def columns(starts: I64, sizes: I64, c0: int, c1: int) -> F64:
        dims = np.arange(c0, c1)
        out: F64 = np.empty((starts.size, dims.size), dtype=np.float64)
        even = dims % 2 == 0
        out[:, even] = trig_block_means(starts, sizes, freqs[dims[even] // 2], "sin")
        out[:, ~even] = trig_block_means(starts, sizes, freqs[dims[~even] // 2], "cos")
        return out

    values = _aggregate_columns(row_edges, col_edges, columns)
    return Heatmap(values, (max_len, d_model), title, *labels)


def cos_heatmap(max_len: int, inv_freq: npt.ArrayLike, max_rows: int, max_cols: int, title: str,
                hlines: tuple[tuple[float, str], ...] = ()) -> Heatmap:
    """``cos(pos * inv_freq[i])`` over positions x pairs (float64 angles), block-averaged past the grid."""
    freqs = np.asarray(inv_freq, dtype=np.float64)
    row_edges, col_edges = block_edges(max_len, max_rows), block_edges(freqs.size, max_cols)

    def columns(starts: I64, sizes: I64, c0: int, c1: int) -> F64:
        if row_edges.size - 1 == max_len:  # one position per row: the plain matrix
            direct: F64 = np.cos(starts.astype(np.float64)[:, None] * freqs[None, c0:c1])
            return direct
        return trig_block_means(starts, sizes, freqs[c0:c1], "cos")

    values = _aggregate_columns(row_edges, col_edges, columns)
    return Heatmap(values, (max_len, freqs.size), title, row_label="position",
                   col_label="pair i  (frequency theta_i)", value_label="cos(pos * theta_i)", hlines=hlines)


def scaled_frequencies(req: ScaleRequest) -> tuple[npt.NDArray[np.float32], Frequencies]:
    """(unscaled inv_freq, ``Frequencies``) for a scaling request, exactly as ``posenc scale --explain``."""
    freqs = for_request(req)
    return freqs.base_inv_freq, freqs


def rope_cos_data(
    max_len: int,
    head_dim: int,
    theta: float,
    max_rows: int,
    max_cols: int,
    *,
    partial_rotary_factor: float = 1.0,
    request: ScaleRequest | None = None,
) -> list[Heatmap]:
    """RoPE's ``cos(pos * theta_i)`` panels: the unscaled one, and with ``request`` the scaled one beside it.

    Unscaled frequencies are ``frequencies.default_inv_freq`` (transformers' float32 values); scaled ones come
    from :func:`scaled_frequencies`. With a request, ``theta``/``head_dim`` are the request's.
    """
    if request is None:
        rotary = int(head_dim * partial_rotary_factor)
        inv = default_inv_freq(theta, rotary)
        title = f"unscaled: theta {theta:g}, rotary dim {rotary}"
        return [cos_heatmap(max_len, inv, max_rows, max_cols, title)]
    original, freqs = scaled_frequencies(request)
    mark: tuple[tuple[float, str], ...] = ((float(request.original_max), f"original context {request.original_max:,}"),)
    if request.target != request.original_max and request.target < max_len:
        mark += ((float(request.target), f"target {request.target:,}"),)
    left = cos_heatmap(max_len, original, max_rows, max_cols,
                       f"unscaled: theta {request.theta:g}, rotary dim {request.rotary_dim}", mark)
    how = f"{request.method} x{request.factor:g}: {request.original_max:,} -> {request.target:,}"
    if request.method == "ntk":
        how += f" (theta {rope_parameters(request)['rope_theta']:,.1f})"
    if freqs.attention_factor != 1.0:
        how += f"; cos/sin x {freqs.attention_factor:.4f} in attention"
    right = cos_heatmap(max_len, freqs.inv_freq, max_rows, max_cols, how, mark)
    return [left, right]


# ---------------------------------------------------------------- ALiBi


@dataclass(frozen=True)
class AlibiData:
    """Causal ALiBi bias per head: ``bias[h]`` is a masked array (future keys masked), ``slopes[h]`` its slope."""

    bias: np.ma.MaskedArray[Any, np.dtype[np.float64]]
    slopes: F64
    slope_labels: list[str]

    @property
    def heads(self) -> int:
        return int(self.slopes.size)

    @property
    def seq_len(self) -> int:
        return int(self.bias.shape[-1])

    @property
    def vmin(self) -> float:
        """The most negative unmasked bias (colour scale bottom; the top is 0 on the diagonal)."""
        return float(self.bias.min())


def alibi_data(heads: int, seq_len: int) -> AlibiData:
    """``encodings.alibi_bias`` (causal) with the ``-inf`` cells masked, and the official slopes."""
    bias = alibi_bias(heads, seq_len, causal=True)
    slopes = alibi_slopes(heads)
    # every official slope is a power of two with an exponent that is a short binary fraction
    labels = [f"m = 2^{round(math.log2(m), 6):g} = {m:.4g}" for m in slopes.tolist()]
    return AlibiData(np.ma.masked_invalid(bias), slopes, labels)


# ---------------------------------------------------------------- frequencies


@dataclass(frozen=True)
class MethodCurve:
    """One method's frequencies: ``wavelengths = 2*pi / inv_freq`` (positions per turn) for every pair."""

    method: str
    inv_freq: npt.NDArray[np.float32]
    wavelengths: F64
    attention_factor: float
    rope_parameters: dict[str, Any]
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FrequencyChart:
    """Wavelength per pair for each method against the unscaled spectrum, plus the bands to shade."""

    unscaled: F64
    curves: list[MethodCurve]
    original_max: int
    target: int
    factor: float
    theta: float
    rotary_dim: int
    yarn_range: tuple[float, float] | None
    llama3_band: tuple[float, float] | None  # (high_freq_wavelen, low_freq_wavelen): the blended wavelengths

    @property
    def pairs(self) -> I64:
        return np.arange(self.unscaled.size, dtype=np.int64)


def frequency_chart_data(requests: Sequence[ScaleRequest]) -> FrequencyChart:
    """Per-method wavelengths from ``scaling`` + ``frequencies.compute`` (at the target length), one model/scale.

    ``requests`` come from ``scaling.make_request`` (one per method, same theta, head dim and lengths).
    """
    if not requests:
        raise PosencError("give at least one method")
    first = requests[0]
    curves: list[MethodCurve] = []
    yarn_range = llama3_band = None
    unscaled: F64 | None = None
    for req in requests:
        original, freqs = scaled_frequencies(req)
        if unscaled is None:
            unscaled = 2 * math.pi / original.astype(np.float64)
        curves.append(MethodCurve(req.method, freqs.inv_freq, freqs.wavelengths, freqs.attention_factor,
                                  rope_parameters(req), dict(freqs.details)))
        if req.method == "yarn":
            yarn_range = (float(freqs.details["low"]), float(freqs.details["high"]))
        elif req.method == "llama3":
            llama3_band = (float(freqs.details["high_freq_wavelen"]), float(freqs.details["low_freq_wavelen"]))
    assert unscaled is not None
    return FrequencyChart(unscaled, curves, first.original_max, first.target, first.factor, first.theta,
                          first.rotary_dim, yarn_range, llama3_band)


# ---------------------------------------------------------------- RoFormer long-term decay


@dataclass(frozen=True)
class DecayCurve:
    """RoFormer's relative upper bound ``B(r)`` for ``r = 0 .. max_distance`` at one base."""

    base: float
    head_dim: int
    distances: I64
    bound: F64


def decay_bound(head_dim: int, base: float, max_distance: int, chunk: int = 4096) -> DecayCurve:
    """RoFormer section 3.4.3: ``B(r) = (2/d) * sum_{j=1..d/2} |S_j(r)|``, ``S_j = sum_{i<j} exp(1j*r*theta_i)``.

    ``theta_i = base**(-2i/d)``, ``i = 0 .. d/2-1`` (``encodings.rope_inv_freq``), so ``S_j`` is the partial sum
    of the first ``j`` rotations and ``B(0) = (d/2 + 1) / 2``. Vectorised over distances in chunks.
    """
    theta = rope_inv_freq(head_dim, base)
    distances = np.arange(max_distance + 1, dtype=np.int64)
    bound: F64 = np.empty(distances.size, dtype=np.float64)
    for s in range(0, distances.size, chunk):
        r = distances[s : s + chunk].astype(np.float64)[:, None]
        partial = np.cumsum(np.exp(1j * r * theta[None, :]), axis=1)
        bound[s : s + chunk] = np.abs(partial).sum(axis=1) * (2.0 / head_dim)
    return DecayCurve(float(base), head_dim, distances, bound)

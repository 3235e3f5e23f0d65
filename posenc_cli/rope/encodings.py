"""Vectorized positional encodings: sinusoidal, RoPE (both memory layouts) and ALiBi.

Pure numpy. Conventions used throughout:

* Positions are integers ``0, 1, 2, ...``; arrays put positions on the second-to-last axis and
  features on the last (``(..., seq, d)``), as attention code does.
* RoPE frequencies are ``inv_freq[i] = base ** (-2i / rotary_dim)`` for pair ``i = 0 .. rotary_dim/2 - 1``.
  Pair ``i`` turns by ``position * inv_freq[i]`` radians, i.e. it has wavelength ``2*pi / inv_freq[i]``.
* Two memory layouts pair the features differently; the math is the same:

  - ``"interleaved"`` pairs features ``(2i, 2i+1)`` (RoFormer paper, GPT-J, Meta's original LLaMA code,
    llama.cpp ``NORM``).
  - ``"rotate-half"`` pairs features ``(i, i + rotary_dim/2)`` and rotates with ``rotate_half`` (Hugging Face Llama,
    GPT-NeoX, Qwen, Mistral, llama.cpp ``NEOX``).

  :func:`to_half_layout` / :func:`to_interleaved_layout` permute features between the two; RoPE in one layout
  followed by the permutation equals the permutation followed by RoPE in the other layout.
* Partial rotary: only the first ``rotary_dim`` features rotate; the rest pass through unchanged (GPT-NeoX, Phi).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from posenc_cli.errors import PosencError
from posenc_cli.rope.rope_types import DEFAULT_THETA
from posenc_cli.rope.slopes import alibi_slope_list

#: The sinusoidal encoding's base (Vaswani et al. 2017: wavelengths 2*pi to 10000*2*pi); RoPE's default base is
#: transformers' DEFAULT_THETA, the same number by RoFormer's choice, a separate setting.
SINUSOIDAL_BASE = 10000.0

Layout = Literal["interleaved", "rotate-half"]
LAYOUTS: tuple[Layout, ...] = ("interleaved", "rotate-half")
FloatArray = npt.NDArray[np.floating[Any]]

#: Refuse any single array larger than this, before allocating it.
MAX_BYTES = 1 << 30


def ensure_fits(shape: tuple[int, ...], dtype: npt.DTypeLike, what: str, *fields: str) -> None:
    """Raise PosencError when an array of ``shape`` would need more than :data:`MAX_BYTES`; ``what`` names the
    array, writing the inputs that size it as ``{field}`` (``fields``: see :class:`posenc_cli.errors.PosencError`)."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    if nbytes > MAX_BYTES:
        raise PosencError(
            f"{what} of shape {shape} would need {nbytes / 2**30:.1f} GiB; the limit is "
            f"{MAX_BYTES / 2**30:.0f} GiB, use smaller sizes", *fields
        )


def _float_dtype(dtype: npt.DTypeLike) -> np.dtype[Any]:
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise PosencError(f"dtype {dt} is not supported; use float32 or float64")
    return dt


def _positive_int(value: int, name: str) -> int:
    try:
        ok = not isinstance(value, bool) and int(value) == value and value >= 1
    except (TypeError, ValueError, OverflowError):  # NaN, infinities, non-numbers
        ok = False
    if not ok:
        raise PosencError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _check_base(base: float) -> float:
    if not math.isfinite(base) or base <= 1.0:
        raise PosencError(f"base must be a finite number greater than 1, got {base!r}")
    return float(base)


def sinusoidal_inv_freq(d_model: int, base: float = SINUSOIDAL_BASE) -> npt.NDArray[np.float64]:
    """Frequencies ``base ** (-2i / d_model)`` of the sinusoidal encoding's ``ceil(d_model / 2)`` pairs (float64)."""
    d = _positive_int(d_model, "d_model")
    n_pairs = (d + 1) // 2
    inv: npt.NDArray[np.float64] = np.power(_check_base(base), -np.arange(0, 2 * n_pairs, 2, dtype=np.float64) / d)
    return inv


def sinusoidal(
    n_positions: int, d_model: int, base: float = SINUSOIDAL_BASE, dtype: npt.DTypeLike = np.float64
) -> FloatArray:
    """Sinusoidal absolute encoding (Vaswani et al. 2017), shape ``(n_positions, d_model)``.

    ``PE[pos, 2i] = sin(pos / base**(2i/d_model))`` and ``PE[pos, 2i+1] = cos(pos / base**(2i/d_model))``.

    An odd ``d_model`` follows the same formula literally: the last feature (index ``d_model-1``, even) is the
    sine of pair ``(d_model-1)/2`` and has no cosine partner, so it is not part of any rotation pair.
    Angles are computed in ``dtype``; float32 therefore loses angle precision at large positions exactly as a
    float32 model would.
    """
    n = _positive_int(n_positions, "n_positions")
    d = _positive_int(d_model, "d_model")
    base = _check_base(base)
    dt = _float_dtype(dtype)
    ensure_fits((n, d), dt, "sinusoidal encoding")
    inv = sinusoidal_inv_freq(d, base).astype(dt)
    angles = np.arange(n, dtype=dt)[:, None] * inv[None, :]
    pe = np.empty((n, d), dtype=dt)
    np.sin(angles, out=pe[:, 0::2])
    np.cos(angles[:, : d // 2], out=pe[:, 1::2])
    return pe


def float32_power(base: float, exponent: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """``base ** exponent`` for a float32 exponent, rounded once, as torch computes a Python float to a float32
    tensor's power.

    torch casts ``base`` to float32 and returns the (almost always) correctly rounded power; numpy's float32
    ``power`` is one ulp off for about a fifth of the entries, so the power is taken in float64 and rounded once.
    """
    out: npt.NDArray[np.float32] = (np.float64(np.float32(base)) ** exponent.astype(np.float64)).astype(np.float32)
    return out


def rope_inv_freq(rotary_dim: int, base: float = DEFAULT_THETA, dtype: npt.DTypeLike = np.float64, *,
                  odd: bool = False) -> FloatArray:
    """RoPE inverse frequencies ``base ** (-2i / rotary_dim)``, shape ``(rotary_dim // 2,)``.

    ``odd=True`` takes an odd ``rotary_dim`` as transformers does when ``int(head_dim * partial_rotary_factor)`` is
    odd (GLM-4.5's class defaults): ``ceil(rotary_dim / 2)`` frequencies, still divided by ``rotary_dim``.

    With ``dtype=np.float32`` the arithmetic follows transformers step by step (exponent in float32, the power
    rounded once to float32, then ``1 / x``), so the result matches ``compute_default_rope_parameters`` to float32
    precision; float64 is the exact formula.
    """
    d = _positive_int(rotary_dim, "rotary_dim")
    if d % 2 and not odd:
        raise PosencError(f"rotary_dim must be even (features rotate in pairs), got {d}")
    base = _check_base(base)
    dt = _float_dtype(dtype)
    exponent = np.arange(0, d, 2, dtype=np.int64).astype(dt) / dt.type(d)
    power = float32_power(base, exponent) if dt == np.float32 else base**exponent
    inv: FloatArray = (dt.type(1.0) / power).astype(dt)
    return inv


def half_layout_permutation(d: int, rotary_dim: int | None = None) -> npt.NDArray[np.intp]:
    """Feature permutation ``perm`` with ``x_half = x_interleaved[..., perm]``.

    For the rotary part, ``perm = [0, 2, 4, ..., r-2, 1, 3, ..., r-1]`` (even features first, then odd): the
    interleaved pair ``(2i, 2i+1)`` lands on the rotate-half pair ``(i, i + r/2)``. This is the row permutation
    Hugging Face's ``convert_llama_weights_to_hf.py`` applies per head to ``wq`` and ``wk``. Features past
    ``rotary_dim`` keep their place.
    """
    r = d if rotary_dim is None else rotary_dim
    if r % 2 or r > d or r < 2:
        raise PosencError(f"rotary_dim must be even and between 2 and {d}, got {r}")
    return np.concatenate([np.arange(0, r, 2), np.arange(1, r, 2), np.arange(r, d)])


def to_half_layout(x: FloatArray, rotary_dim: int | None = None) -> FloatArray:
    """Reorder the last axis from the interleaved layout to the rotate-half layout (a copy)."""
    return x[..., half_layout_permutation(x.shape[-1], rotary_dim)]


def to_interleaved_layout(x: FloatArray, rotary_dim: int | None = None) -> FloatArray:
    """Reorder the last axis from the rotate-half layout back to the interleaved layout (a copy)."""
    return x[..., np.argsort(half_layout_permutation(x.shape[-1], rotary_dim))]


def apply_rope(
    x: FloatArray,
    positions: npt.ArrayLike,
    *,
    base: float = DEFAULT_THETA,
    inv_freq: npt.ArrayLike | None = None,
    layout: Layout = "interleaved",
    attention_factor: float = 1.0,
    rotary_dim: int | None = None,
) -> FloatArray:
    """Rotate ``x`` by RoPE at integer ``positions``; returns a new array of ``x``'s shape and dtype.

    Shapes: ``x`` is ``(..., seq, d)``; ``positions`` is ``(seq,)`` or any shape that broadcasts against
    ``x.shape[:-1]`` (for instance ``(batch, seq)``).

    Frequencies: ``inv_freq`` (shape ``(rotary_dim/2,)``, e.g. from a scaling method) or, when it is None,
    ``rope_inv_freq(rotary_dim, base)``. ``rotary_dim`` defaults to ``2 * len(inv_freq)`` or to ``d``; features
    past it pass through. ``attention_factor`` multiplies cos and sin (so q.k scores scale by its square),
    as transformers does for YaRN and LongRoPE.

    Angles ``position * inv_freq`` are formed in ``x``'s dtype, as a model running in that dtype would.
    """
    if layout not in LAYOUTS:
        raise PosencError(f"layout {layout!r} is not known; use one of: {', '.join(LAYOUTS)}")
    arr = np.asarray(x)
    dt = _float_dtype(arr.dtype)
    if arr.ndim < 2:
        raise PosencError(f"x must have shape (..., seq, d), got {arr.shape}")
    d = arr.shape[-1]
    pos = np.asarray(positions)
    if not np.issubdtype(pos.dtype, np.integer):
        raise PosencError(f"positions must be integers, got dtype {pos.dtype}")
    if inv_freq is None:
        r = d if rotary_dim is None else rotary_dim
        freqs = rope_inv_freq(r, base, dtype=dt)
    else:
        freqs = np.asarray(inv_freq, dtype=dt)
        if freqs.ndim != 1:
            raise PosencError(f"inv_freq must be one-dimensional, got shape {freqs.shape}")
        r = 2 * freqs.shape[0] if rotary_dim is None else rotary_dim
        if 2 * freqs.shape[0] != r:
            raise PosencError(f"inv_freq must have shape ({r // 2},), got {freqs.shape}")
    if r % 2 or r > d or r < 2:
        raise PosencError(f"rotary_dim must be even and between 2 and {d}, got {r}")
    out_shape = np.broadcast_shapes(arr.shape, pos.shape + (d,))
    out = np.empty(out_shape, dtype=dt)
    if layout == "interleaved" and arr.strides[-1] == dt.itemsize:
        # pairs (2i, 2i+1) are complex numbers x_2i + i*x_2i+1, and RoPE multiplies them by exp(i*angle):
        # one complex multiply instead of six real passes
        ctype = np.complex64 if dt == np.float32 else np.complex128
        out_c = out[..., :r].view(ctype)
        # when the output has no extra batch axes, build exp(i*angle) inside it and save an allocation
        rot = out_c if out_c.shape == pos.shape + (r // 2,) else np.empty(pos.shape + (r // 2,), dtype=ctype)
        if dt == np.float32:
            # float32 sin/cos are vectorised only on contiguous arrays
            angles = pos.astype(dt)[..., None] * freqs
            rot.real = np.cos(angles)
            rot.imag = np.sin(angles, out=angles)
        else:
            np.multiply(pos.astype(dt)[..., None], freqs, out=rot.imag)  # the angle, parked in the imaginary part
            np.cos(rot.imag, out=rot.real)
            np.sin(rot.imag, out=rot.imag)
        if attention_factor != 1.0:
            rot *= dt.type(attention_factor)
        np.multiply(arr[..., :r].view(ctype), rot, out=out_c)
    else:
        angles = pos.astype(dt)[..., None] * freqs
        cos = np.cos(angles)
        sin = np.sin(angles, out=angles)
        if attention_factor != 1.0:
            cos *= dt.type(attention_factor)
            sin *= dt.type(attention_factor)
        if layout == "interleaved":  # a strided input: plain real arithmetic
            a, b, lo, hi = arr[..., 0:r:2], arr[..., 1:r:2], out[..., 0:r:2], out[..., 1:r:2]
        else:
            h = r // 2
            a, b, lo, hi = arr[..., :h], arr[..., h:r], out[..., :h], out[..., h:r]
        np.subtract(a * cos, b * sin, out=lo)
        np.add(b * cos, a * sin, out=hi)
    if r < d:
        out[..., r:] = arr[..., r:]
    return out


def alibi_slopes(n_heads: int) -> npt.NDArray[np.float64]:
    """ALiBi head slopes by the official recipe (Press et al. 2022, ``get_slopes``), shape ``(n_heads,)``.

    For ``c = 2**floor(log2(n_heads))`` the first ``c`` slopes are ``2**(-8h/c)``, ``h = 1..c``. Any heads beyond
    a power of two take the odd-numbered slopes of the ``2c`` list, ``2**(-4(2j-1)/c)``, ``j = 1..n_heads-c``.
    The list is not sorted; BLOOM and MPT use the same values in the same order. (``2**(-8h/n_heads)`` for all
    heads is only right when ``n_heads`` is a power of two.)
    """
    return np.asarray(alibi_slope_list(n_heads), dtype=np.float64)


def alibi_bias(
    n_heads: int, seq_len: int, causal: bool = True, dtype: npt.DTypeLike = np.float64
) -> FloatArray:
    """ALiBi attention bias, shape ``(n_heads, seq_len, seq_len)``, indexed ``[head, query i, key j]``.

    ``causal=True`` is the paper's form: ``-m_h * (i - j)`` for ``j <= i`` and ``-inf`` above the diagonal (future
    keys are masked). It is added to ``q.k / sqrt(d)``; the bias itself is not divided by ``sqrt(d)``.

    ``causal=False`` gives ``-m_h * |i - j|``. That symmetric form is an extension for bidirectional encoders,
    not part of the ALiBi paper.
    """
    h = _positive_int(n_heads, "n_heads")
    n = _positive_int(seq_len, "seq_len")
    dt = _float_dtype(dtype)
    ensure_fits((h, n, n), dt, "ALiBi bias")
    slopes = alibi_slopes(h).astype(dt)
    idx = np.arange(n)
    # key minus query: <= 0 on and below the diagonal, so the product is -m*(i-j) without a -0.0 diagonal
    offset = (idx[None, :] - idx[:, None]).astype(dt)
    if causal:
        bias: FloatArray = slopes[:, None, None] * offset
        bias[:, offset > 0] = -np.inf
        return bias
    symmetric: FloatArray = slopes[:, None, None] * (0.0 - np.abs(offset))
    return symmetric

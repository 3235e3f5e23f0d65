"""Slow, obviously-correct reference implementations: plain Python lists, ``math`` and loops.

Nothing here imports numpy or posenc. The vectorized code in ``posenc_cli.rope.encodings`` is tested against these
functions, and ``benchmarks/bench_encodings.py`` times them as the "pure Python" baseline.
"""

from __future__ import annotations

import math

Vector = list[float]


def frequency(pair: int, width: int, base: float) -> float:
    """Angular speed of pair ``pair`` in a ``width``-feature encoding: ``base ** (-2 * pair / width)``."""
    return 1.0 / (base ** (2 * pair / width))


def sinusoidal_table(n_positions: int, d_model: int, base: float = 10000.0) -> list[Vector]:
    """Sinusoidal table, row per position: feature ``2i`` holds a sine, feature ``2i+1`` the matching cosine.

    With an odd ``d_model`` the last feature is a sine whose cosine partner would fall outside the row.
    """
    return [sinusoidal_row(pos, d_model, base) for pos in range(n_positions)]


def sinusoidal_row(pos: int, d_model: int, base: float = 10000.0) -> Vector:
    """One row of :func:`sinusoidal_table`."""
    row = [0.0] * d_model
    for feature in range(d_model):
        angle = pos * frequency(feature // 2, d_model, base)
        row[feature] = math.sin(angle) if feature % 2 == 0 else math.cos(angle)
    return row


def _rotate(a: float, b: float, angle: float) -> tuple[float, float]:
    """Turn the 2-D point ``(a, b)`` counter-clockwise by ``angle`` radians."""
    c, s = math.cos(angle), math.sin(angle)
    return a * c - b * s, a * s + b * c


def rope_vector(
    x: Vector,
    position: int,
    base: float = 10000.0,
    layout: str = "interleaved",
    rotary_dim: int | None = None,
    scale: float = 1.0,
) -> Vector:
    """RoPE on one vector at one position.

    Only the first ``rotary_dim`` features (default: all) take part. Inside them, pair ``i`` turns by
    ``position * base ** (-2i / rotary_dim)``. The ``"interleaved"`` layout pairs features ``(2i, 2i + 1)``;
    ``"rotate-half"`` pairs ``(i, i + rotary_dim / 2)``, which is what ``x * cos + rotate_half(x) * sin`` does.
    ``scale`` multiplies the rotated features (cos and sin both), like an attention factor.
    """
    width = len(x) if rotary_dim is None else rotary_dim
    if width % 2 or width < 2 or width > len(x):
        raise ValueError(f"bad rotary_dim {width} for a vector of {len(x)} features")
    if layout not in ("interleaved", "rotate-half"):
        raise ValueError(f"unknown layout {layout!r}")
    out = list(x)
    half = width // 2
    for pair in range(half):
        first, second = (2 * pair, 2 * pair + 1) if layout == "interleaved" else (pair, pair + half)
        a, b = _rotate(x[first], x[second], position * frequency(pair, width, base))
        out[first], out[second] = a * scale, b * scale
    return out


def rotate_half(x: Vector) -> Vector:
    """Hugging Face's helper, spelled out: ``[-x2, x1]`` for ``x = [x1, x2]`` split in the middle."""
    mid = len(x) // 2
    return [-v for v in x[mid:]] + list(x[:mid])


def rope_vector_hf_style(x: Vector, position: int, base: float = 10000.0) -> Vector:
    """The half layout written the way modeling_llama writes it: ``x * cos + rotate_half(x) * sin``.

    ``cos`` and ``sin`` are built from the frequencies repeated twice (``emb = cat(freqs, freqs)``).
    """
    d = len(x)
    freqs = [position * frequency(i, d, base) for i in range(d // 2)]
    emb = freqs + freqs
    turned = rotate_half(x)
    return [x[f] * math.cos(emb[f]) + turned[f] * math.sin(emb[f]) for f in range(d)]


def dot(a: Vector, b: Vector) -> float:
    total = 0.0
    for u, v in zip(a, b, strict=True):
        total += u * v
    return total


def alibi_slopes_official(n_heads: int) -> Vector:
    """ALiBi slopes following the recursive ``get_slopes`` recipe of the ALiBi authors.

    For a power of two ``n``: a geometric sequence whose first term and ratio are both
    ``2 ** (-(2 ** -(log2(n) - 3)))``. Otherwise: the slopes of the nearest smaller power of two ``c``, then the
    first ``n - c`` entries of every other slope (starting at the first) of the ``2c`` list.
    """

    def power_of_two(n: int) -> Vector:
        first = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [first * first**k for k in range(n)]

    if math.log2(n_heads).is_integer():
        return power_of_two(n_heads)
    lower = 2 ** math.floor(math.log2(n_heads))
    return power_of_two(lower) + alibi_slopes_official(2 * lower)[0::2][: n_heads - lower]


def alibi_bias_reference(n_heads: int, seq_len: int, causal: bool = True) -> list[list[Vector]]:
    """``bias[h][i][j]``: ``-m_h * (i - j)`` for keys at or before the query, ``-inf`` after it when causal,
    ``-m_h * |i - j|`` everywhere when not causal."""
    out = []
    for m in alibi_slopes_official(n_heads):
        rows = []
        for i in range(seq_len):
            row = []
            for j in range(seq_len):
                if causal and j > i:
                    row.append(-math.inf)
                else:
                    row.append(-m * abs(i - j))
            rows.append(row)
        out.append(rows)
    return out


# --- the lesson's two pure-Python functions, as benchmark baselines (same behaviour, own wording) ---


def sinusoidal_pe(n: int, d: int, base: float = 10000.0) -> list[Vector]:
    """The lesson-style table: one Python float at a time (even ``d``)."""
    return sinusoidal_table(n, d, base)


def apply_rope(x: Vector, pos: int, base: float = 10000.0) -> Vector:
    """The lesson-style rotation of one vector at one position, interleaved pairs."""
    return rope_vector(x, pos, base, layout="interleaved")

"""posenc_cli.rope.encodings against the plain-loop references in tests/harness/reference.py, the lesson's printed
numbers,
algebraic properties (hypothesis) and input validation."""

from __future__ import annotations

import math
import random
import tracemalloc

import numpy as np
import pytest
import reference as ref
from hypothesis import given, settings
from hypothesis import strategies as st

import posenc_cli
from posenc_cli.errors import PosencError
from posenc_cli.rope import encodings as enc
from posenc_cli.rope.encodings import (
    alibi_bias,
    alibi_slopes,
    apply_rope,
    ensure_fits,
    half_layout_permutation,
    rope_inv_freq,
    sinusoidal,
    to_half_layout,
    to_interleaved_layout,
)

pytestmark = pytest.mark.numeric

DTYPES = [np.float64, np.float32]
BASES = [100.0, 1e4, 5e5]
LAYOUTS = ["interleaved", "rotate-half"]
# positions below 2048, including the edges and a few ragged values
POSITIONS = [0, 1, 2, 3, 5, 64, 333, 1000, 2047]


def angle_bound(dtype: type[np.floating], angles: np.ndarray) -> np.ndarray:
    """Largest error allowed per element: a few ulps of the angle itself (its rounding dominates) plus a few
    ulps of 1 (sin/cos and the multiply-adds). For float64 at positions < 2048 this is ~2e-12; for float32 at
    position 2047 it is ~1e-3 (observed: ~1.2e-4), at position 100 ~5e-5."""
    eps = float(np.finfo(dtype).eps)
    return 4 * eps * (np.abs(angles) + 1)


def unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# ------------------------------------------------------------------------------------------------ sinusoidal


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("d", [2, 4, 7, 8, 9, 16, 64, 128])
def test_sinusoidal_matches_reference(d: int, base: float, dtype: type[np.floating]) -> None:
    n = 2048
    pe = sinusoidal(n, d, base, dtype=dtype)
    assert pe.shape == (n, d)
    assert pe.dtype == np.dtype(dtype)
    want = np.array([ref.sinusoidal_row(p, d, base) for p in POSITIONS])
    angles = np.array([[p * ref.frequency(f // 2, d, base) for f in range(d)] for p in POSITIONS])
    err = np.abs(pe[POSITIONS].astype(np.float64) - want)
    bound = angle_bound(dtype, angles)
    assert np.all(err <= bound), f"worst error {err.max():.3e} at {np.unravel_index((err / bound).argmax(), err.shape)}"


def test_sinusoidal_float64_is_tight_at_small_positions() -> None:
    # the ~1e-12 relative promise for float64: at positions < 2048 every element is within 1e-12 of the reference
    pe = sinusoidal(2048, 64)
    want = np.array([ref.sinusoidal_row(p, 64) for p in range(0, 2048, 7)])
    np.testing.assert_allclose(pe[0:2048:7], want, rtol=1e-12, atol=1e-12)


def test_sinusoidal_odd_width_last_feature_is_a_lone_sine() -> None:
    d = 7
    pe = sinusoidal(50, d)
    pos = np.arange(50)
    np.testing.assert_allclose(pe[:, d - 1], np.sin(pos * 10000.0 ** (-(d - 1) / d)), rtol=0, atol=1e-13)
    # the other features still come in (sin, cos) pairs of one angle
    np.testing.assert_allclose(pe[:, 0 : d - 1 : 2] ** 2 + pe[:, 1:d:2] ** 2, 1.0, rtol=0, atol=1e-14)


def test_sinusoidal_lesson_oracle() -> None:
    # printed by the lesson's main.py for n=8, d=8 (first 4 positions, first 4 features, 3 decimals)
    lesson = [
        [+0.000, +1.000, +0.000, +1.000],
        [+0.841, +0.540, +0.100, +0.995],
        [+0.909, -0.416, +0.199, +0.980],
        [+0.141, -0.990, +0.296, +0.955],
    ]
    for dtype in DTYPES:
        pe = sinusoidal(8, 8, dtype=dtype)
        assert np.round(pe[:4, :4].astype(np.float64), 3).tolist() == lesson


def test_sinusoidal_lesson_function_equivalent() -> None:
    # the benchmark baseline (lesson-style loops) is the same table
    np.testing.assert_allclose(sinusoidal(64, 16), np.array(ref.sinusoidal_pe(64, 16)), rtol=0, atol=1e-13)


# ------------------------------------------------------------------------------------------------ RoPE


def _rotary_dims(d: int) -> list[int | None]:
    dims: list[int | None] = [None]
    for r in (d // 2, 2):
        if r >= 2 and r % 2 == 0 and r < d and r not in dims:
            dims.append(r)
    return dims


ROPE_CASES = [(d, r) for d in (2, 4, 8, 16, 64, 128) for r in _rotary_dims(d)]


def _feature_angles(d: int, r: int, layout: str, pos: int, base: float) -> list[float]:
    """Angle each feature is turned by (0 for pass-through features)."""
    angles = [0.0] * d
    for i in range(r // 2):
        a = pos * ref.frequency(i, r, base)
        pair = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + r // 2)
        for f in pair:
            angles[f] = a
    return angles


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize(("d", "rotary_dim"), ROPE_CASES)
def test_rope_matches_reference(d: int, rotary_dim: int | None, base: float, layout: str,
                                dtype: type[np.floating]) -> None:
    rng = np.random.default_rng(d * 1000 + (rotary_dim or 0))
    x64 = unit_rows(rng, len(POSITIONS), d)
    x = x64.astype(dtype)
    out = apply_rope(x, np.array(POSITIONS), base=base, layout=layout, rotary_dim=rotary_dim)  # type: ignore[arg-type]
    assert out.shape == x.shape
    assert out.dtype == np.dtype(dtype)
    r = d if rotary_dim is None else rotary_dim
    # the reference rotates the same (already rounded) input, in float64
    want = np.array([ref.rope_vector(row.tolist(), p, base, layout, rotary_dim)
                     for row, p in zip(x.astype(np.float64), POSITIONS, strict=True)])
    angles = np.array([_feature_angles(d, r, layout, p, base) for p in POSITIONS])
    err = np.abs(out.astype(np.float64) - want)
    bound = angle_bound(dtype, angles)
    assert np.all(err <= bound), f"worst error {err.max():.3e}"
    # features past rotary_dim are copied bit for bit
    np.testing.assert_array_equal(out[:, r:], x[:, r:])


def test_rope_half_layout_is_hf_rotate_half() -> None:
    rng = random.Random(7)
    x = [rng.gauss(0, 1) for _ in range(32)]
    for pos in (0, 1, 9, 500, 4096):
        got = apply_rope(np.array([x]), np.array([pos]), layout="rotate-half")[0]
        np.testing.assert_allclose(got, ref.rope_vector_hf_style(x, pos), rtol=0, atol=1e-11)


def test_rope_position_zero_is_identity_and_input_not_modified() -> None:
    rng = np.random.default_rng(3)
    for dtype in DTYPES:
        x = rng.standard_normal((4, 16)).astype(dtype)
        keep = x.copy()
        for layout in LAYOUTS:
            out = apply_rope(x, np.zeros(4, dtype=np.int64), layout=layout)  # type: ignore[arg-type]
            np.testing.assert_array_equal(out, x)
            assert out is not x and not np.shares_memory(out, x)
        np.testing.assert_array_equal(x, keep)


def test_rope_broadcasts_over_heads_and_batched_positions() -> None:
    rng = np.random.default_rng(11)
    heads, seq, d = 3, 5, 8
    x = rng.standard_normal((heads, seq, d))
    pos = np.array([4, 0, 9, 2, 2047])
    out = apply_rope(x, pos, rotary_dim=4)
    for h in range(heads):
        for s in range(seq):
            np.testing.assert_allclose(out[h, s], ref.rope_vector(x[h, s].tolist(), int(pos[s]), rotary_dim=4),
                                       rtol=0, atol=1e-12)
    # (batch, seq) positions against one shared (seq, d) input: each batch row gets its own positions
    batch_pos = np.array([[0, 1, 2, 3, 4], [100, 7, 7, 0, 3]])
    out2 = apply_rope(x[0], batch_pos, layout="rotate-half")
    assert out2.shape == (2, seq, d)
    for b in range(2):
        for s in range(seq):
            np.testing.assert_allclose(out2[b, s], ref.rope_vector(x[0, s].tolist(), int(batch_pos[b, s]),
                                                                   layout="rotate-half"), rtol=0, atol=1e-12)


def test_rope_explicit_inv_freq_equals_base() -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 16))
    pos = np.arange(6) * 300
    inv = [ref.frequency(i, 16, 5e5) for i in range(8)]
    np.testing.assert_allclose(apply_rope(x, pos, inv_freq=inv), apply_rope(x, pos, base=5e5), rtol=0, atol=1e-12)
    # a shorter inv_freq means partial rotary; the rest passes through
    out = apply_rope(x, pos, inv_freq=[ref.frequency(i, 4, 5e5) for i in range(2)])
    np.testing.assert_array_equal(out[:, 4:], x[:, 4:])
    want = [ref.rope_vector(row.tolist(), int(p), 5e5, rotary_dim=4) for row, p in zip(x, pos, strict=True)]
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-11)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_inv_freq_values(dtype: type[np.floating]) -> None:
    for d in (2, 8, 64, 128):
        for base in BASES:
            inv = rope_inv_freq(d, base, dtype=dtype)
            assert inv.shape == (d // 2,)
            assert inv.dtype == np.dtype(dtype)
            rtol = 1e-15 if dtype is np.float64 else 4e-7
            np.testing.assert_allclose(inv, [ref.frequency(i, d, base) for i in range(d // 2)], rtol=rtol, atol=0)


def test_rope_lesson_relative_distance_oracle() -> None:
    rng = random.Random(0)
    q = [rng.gauss(0, 1) for _ in range(16)]
    k = [rng.gauss(0, 1) for _ in range(16)]
    qa, ka = np.array([q]), np.array([k])
    for pq, pk in [(3, 5), (7, 9), (100, 102), (1024, 1026)]:
        score = float(apply_rope(qa, [pq])[0] @ apply_rope(ka, [pk])[0])
        assert round(score, 6) == -6.530165
        # the same vectors stored in the half layout give the same score
        half = float(apply_rope(to_half_layout(qa), [pq], layout="rotate-half")[0]
                     @ apply_rope(to_half_layout(ka), [pk], layout="rotate-half")[0])
        assert half == pytest.approx(score, rel=1e-12)


def test_rope_lesson_base_scaling_oracle() -> None:
    rng = random.Random(1)
    q = np.array([[rng.gauss(0, 1) for _ in range(8)]])
    k = np.array([[rng.gauss(0, 1) for _ in range(8)]])
    expected = {1e4: 1.331200, 1e5: 1.368584, 1e6: 1.388781}
    for base, score in expected.items():
        got = float(apply_rope(q, [4096], base=base)[0] @ apply_rope(k, [4098], base=base)[0])
        assert round(got, 6) == score


def test_lesson_apply_rope_equivalent_matches_vectorized() -> None:
    rng = random.Random(2)
    x = [rng.gauss(0, 1) for _ in range(64)]
    for pos in (0, 5, 2047):
        np.testing.assert_allclose(apply_rope(np.array([x]), [pos])[0], ref.apply_rope(x, pos), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_factor_scales_scores_by_its_square(dtype: type[np.floating]) -> None:
    rng = np.random.default_rng(13)
    q = rng.standard_normal((10, 32)).astype(dtype)
    k = rng.standard_normal((10, 32)).astype(dtype)
    pq, pk = rng.integers(0, 4096, 10), rng.integers(0, 4096, 10)
    rtol = 1e-12 if dtype is np.float64 else 1e-5
    for layout in LAYOUTS:
        plain = np.einsum("sd,sd->s", apply_rope(q, pq, layout=layout), apply_rope(k, pk, layout=layout))  # type: ignore[arg-type]
        for factor in (0.5, 1.3, 1.0 + 0.1 * math.log(8)):
            scaled = np.einsum("sd,sd->s", apply_rope(q, pq, layout=layout, attention_factor=factor),  # type: ignore[arg-type]
                               apply_rope(k, pk, layout=layout, attention_factor=factor))  # type: ignore[arg-type]
            np.testing.assert_allclose(scaled, plain * factor**2, rtol=rtol, atol=rtol * 32)
    # with partial rotary only the rotated features are scaled (as transformers does)
    x = rng.standard_normal((3, 8))
    out = apply_rope(x, [1, 2, 3], attention_factor=2.0, rotary_dim=4)
    want = [ref.rope_vector(row.tolist(), p, rotary_dim=4, scale=2.0) for row, p in zip(x, [1, 2, 3], strict=True)]
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------------ layouts


@pytest.mark.parametrize(("d", "rotary_dim"), [(2, None), (8, None), (8, 4), (10, 6), (128, None), (128, 64)])
def test_layout_permutation_pairs_and_round_trip(d: int, rotary_dim: int | None) -> None:
    r = d if rotary_dim is None else rotary_dim
    perm = half_layout_permutation(d, rotary_dim)
    assert sorted(perm.tolist()) == list(range(d))
    x = np.random.default_rng(d).standard_normal((3, d))
    xh = to_half_layout(x, rotary_dim)
    for i in range(r // 2):  # interleaved pair (2i, 2i+1) lands on half pair (i, i + r/2)
        np.testing.assert_array_equal(xh[:, i], x[:, 2 * i])
        np.testing.assert_array_equal(xh[:, i + r // 2], x[:, 2 * i + 1])
    np.testing.assert_array_equal(xh[:, r:], x[:, r:])
    np.testing.assert_array_equal(to_interleaved_layout(xh, rotary_dim), x)
    np.testing.assert_array_equal(to_half_layout(to_interleaved_layout(x, rotary_dim), rotary_dim), x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("d", "rotary_dim"), [(2, None), (16, None), (16, 8), (64, 2), (128, None)])
def test_rope_commutes_with_layout_permutation(d: int, rotary_dim: int | None, dtype: type[np.floating]) -> None:
    rng = np.random.default_rng(d)
    x = rng.standard_normal((2, 40, d)).astype(dtype)
    pos = rng.integers(0, 1 << 20, 40)
    a = apply_rope(to_half_layout(x, rotary_dim), pos, layout="rotate-half", rotary_dim=rotary_dim)
    b = to_half_layout(apply_rope(x, pos, layout="interleaved", rotary_dim=rotary_dim), rotary_dim)
    # the same products of the same numbers, only stored elsewhere; the interleaved path multiplies them as
    # complex numbers, which may fuse a multiply-add, so allow a couple of ulps of the operands' scale
    np.testing.assert_allclose(a, b, rtol=0, atol=4 * np.finfo(dtype).eps * float(np.abs(x).max()))


# ------------------------------------------------------------------------------------------------ properties

even_dims = st.integers(1, 64).map(lambda h: 2 * h)
positions = st.integers(0, 200_000)
bases = st.floats(2.0, 1e7, allow_nan=False, allow_infinity=False)
layouts = st.sampled_from(LAYOUTS)


@settings(max_examples=150, deadline=None)
@given(d=even_dims, m=positions, n=positions, s=positions, base=bases, layout=layouts, seed=st.integers(0, 2**32 - 1))
def test_score_depends_only_on_relative_distance(d: int, m: int, n: int, s: int, base: float, layout: str,
                                                 seed: int) -> None:
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((1, d)), rng.standard_normal((1, d))

    def score(pq: int, pk: int) -> float:
        return float(apply_rope(q, [pq], base=base, layout=layout)[0]  # type: ignore[arg-type]
                     @ apply_rope(k, [pk], base=base, layout=layout)[0])  # type: ignore[arg-type]

    scale = float(np.linalg.norm(q) * np.linalg.norm(k))
    # error grows with the angle (~position) through its rounding; allow a few ulps of the largest position
    tol = 16 * np.finfo(np.float64).eps * (max(m, n) + s + 1) * scale
    assert abs(score(m, n) - score(m + s, n + s)) <= tol
    # and the score is the one of the reference implementation
    want = ref.dot(ref.rope_vector(q[0].tolist(), m, base, layout), ref.rope_vector(k[0].tolist(), n, base, layout))
    assert abs(score(m, n) - want) <= tol


@settings(max_examples=150, deadline=None)
@given(d=even_dims, base=bases, layout=layouts, seed=st.integers(0, 2**32 - 1),
       pos=st.lists(st.integers(0, 1 << 40), min_size=1, max_size=8))
def test_rope_preserves_norms(d: int, base: float, layout: str, seed: int, pos: list[int]) -> None:
    x = np.random.default_rng(seed).standard_normal((len(pos), d)) * 10.0
    out = apply_rope(x, np.array(pos, dtype=np.int64), base=base, layout=layout)  # type: ignore[arg-type]
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), np.linalg.norm(x, axis=1), rtol=1e-13, atol=0)


@settings(max_examples=60, deadline=None)
@given(d=even_dims, seed=st.integers(0, 2**32 - 1), data=st.data())
def test_partial_rotary_property(d: int, seed: int, data: st.DataObject) -> None:
    r = 2 * data.draw(st.integers(1, d // 2))
    x = np.random.default_rng(seed).standard_normal((4, d))
    pos = np.array(data.draw(st.lists(st.integers(0, 10**6), min_size=4, max_size=4)))
    layout = data.draw(layouts)
    out = apply_rope(x, pos, rotary_dim=r, layout=layout)  # type: ignore[arg-type]
    np.testing.assert_array_equal(out[:, r:], x[:, r:])
    # the rotated part is exactly RoPE of width r on the first r features
    np.testing.assert_array_equal(out[:, :r], apply_rope(x[:, :r], pos, layout=layout))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ ALiBi


@pytest.mark.parametrize("n_heads", range(1, 65))
def test_alibi_slopes_follow_official_recipe(n_heads: int) -> None:
    got = alibi_slopes(n_heads)
    assert got.shape == (n_heads,)
    np.testing.assert_allclose(got, ref.alibi_slopes_official(n_heads), rtol=1e-12, atol=0)


def test_alibi_slopes_known_lists() -> None:
    assert alibi_slopes(6).tolist() == [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]
    # lesson, 4 heads (power of two: the naive formula happens to be right)
    assert alibi_slopes(4).tolist() == [0.25, 0.0625, 0.015625, 0.00390625]
    # 12 heads: 1/2 .. 1/256, then the odd entries of the 16-head list
    np.testing.assert_allclose(alibi_slopes(12)[8:], [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5], rtol=1e-15)


@pytest.mark.parametrize(("n_heads", "seq"), [(1, 1), (4, 6), (6, 9), (12, 17)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_alibi_bias_against_reference(n_heads: int, seq: int, dtype: type[np.floating]) -> None:
    slopes = np.array(ref.alibi_slopes_official(n_heads))
    i, j = np.indices((seq, seq))
    causal = alibi_bias(n_heads, seq, causal=True, dtype=dtype)
    assert causal.shape == (n_heads, seq, seq)
    assert causal.dtype == np.dtype(dtype)
    below = j <= i
    np.testing.assert_allclose(causal[:, below], (-slopes[:, None, None] * (i - j))[:, below], rtol=1e-6, atol=0)
    assert np.all(np.isneginf(causal[:, ~below]))
    symmetric = alibi_bias(n_heads, seq, causal=False, dtype=dtype)
    np.testing.assert_allclose(symmetric, -slopes[:, None, None] * np.abs(i - j), rtol=1e-6, atol=0)
    # and the loop reference, element by element (float64 exact up to one rounding)
    if dtype is np.float64:
        np.testing.assert_allclose(causal, ref.alibi_bias_reference(n_heads, seq, causal=True), rtol=1e-15)
        np.testing.assert_allclose(symmetric, ref.alibi_bias_reference(n_heads, seq, causal=False), rtol=1e-15)
    # the diagonal is +0.0, never -0.0
    assert not np.any(np.signbit(causal[:, np.arange(seq), np.arange(seq)]))
    assert not np.any(np.signbit(symmetric[:, np.arange(seq), np.arange(seq)]))


def test_alibi_lesson_symmetric_row() -> None:
    row = alibi_bias(4, 6, causal=False)[0, 0]
    assert np.round(row, 2).tolist() == [0.0, -0.25, -0.5, -0.75, -1.0, -1.25]


def test_alibi_causal_rows_differ_from_paper_offset_form_by_a_constant() -> None:
    # the official code adds +m*j instead of -m*(i-j); per query row these differ by the constant m*i,
    # so softmax over the visible keys is the same
    n_heads, seq = 6, 10
    bias = alibi_bias(n_heads, seq)
    slopes = alibi_slopes(n_heads)
    for h in range(n_heads):
        for i in range(seq):
            visible = bias[h, i, : i + 1]
            official = slopes[h] * np.arange(i + 1)
            np.testing.assert_allclose(visible - official, -slopes[h] * i, rtol=1e-12, atol=1e-15)


# ------------------------------------------------------------------------------------------------ dtypes


@pytest.mark.parametrize("dtype", DTYPES)
def test_dtype_in_equals_dtype_out(dtype: type[np.floating]) -> None:
    x = np.ones((3, 8), dtype=dtype)
    assert apply_rope(x, [0, 1, 2]).dtype == np.dtype(dtype)
    assert apply_rope(x, [0, 1, 2], inv_freq=np.ones(4, dtype=np.float64)).dtype == np.dtype(dtype)
    assert apply_rope(x, [0, 1, 2], layout="rotate-half", rotary_dim=4, attention_factor=0.7).dtype == np.dtype(dtype)
    assert sinusoidal(4, 6, dtype=dtype).dtype == np.dtype(dtype)
    assert rope_inv_freq(8, dtype=dtype).dtype == np.dtype(dtype)
    assert alibi_bias(3, 4, dtype=dtype).dtype == np.dtype(dtype)


# ------------------------------------------------------------------------------------------------ bad input


X8 = np.ones((2, 8))

BAD_CALLS = {
    "odd rotary_dim": lambda: apply_rope(X8, [0, 1], rotary_dim=3),
    "odd rope_inv_freq width": lambda: rope_inv_freq(5),
    "rotary_dim wider than x": lambda: apply_rope(X8, [0, 1], rotary_dim=10),
    "rotary_dim zero": lambda: apply_rope(X8, [0, 1], rotary_dim=0),
    "rotary_dim negative": lambda: apply_rope(X8, [0, 1], rotary_dim=-2),
    "odd d, full rotary": lambda: apply_rope(np.ones((2, 7)), [0, 1]),
    "permutation odd rotary": lambda: half_layout_permutation(8, 3),
    "permutation too wide": lambda: half_layout_permutation(8, 10),
    "sinusoidal zero positions": lambda: sinusoidal(0, 8),
    "sinusoidal zero width": lambda: sinusoidal(8, 0),
    "sinusoidal negative positions": lambda: sinusoidal(-4, 8),
    "sinusoidal negative width": lambda: sinusoidal(4, -8),
    "sinusoidal fractional size": lambda: sinusoidal(2.5, 8),  # type: ignore[arg-type]
    "sinusoidal nan size": lambda: sinusoidal(float("nan"), 8),  # type: ignore[arg-type]
    "sinusoidal inf size": lambda: sinusoidal(8, float("inf")),  # type: ignore[arg-type]
    "sinusoidal bool size": lambda: sinusoidal(True, 8),
    "rope_inv_freq zero": lambda: rope_inv_freq(0),
    "alibi zero heads": lambda: alibi_slopes(0),
    "alibi negative heads": lambda: alibi_bias(-3, 4),
    "alibi zero seq": lambda: alibi_bias(4, 0),
    "nan base sinusoidal": lambda: sinusoidal(4, 4, base=float("nan")),
    "nan base rope": lambda: apply_rope(X8, [0, 1], base=float("nan")),
    "nan base inv_freq": lambda: rope_inv_freq(8, float("nan")),
    "inf base": lambda: apply_rope(X8, [0, 1], base=float("inf")),
    "base one": lambda: rope_inv_freq(8, 1.0),
    "negative base": lambda: sinusoidal(4, 4, base=-10.0),
    "unknown layout": lambda: apply_rope(X8, [0, 1], layout="diagonal"),  # type: ignore[arg-type]
    "float positions": lambda: apply_rope(X8, np.array([0.0, 1.0])),
    "fractional positions": lambda: apply_rope(X8, [0.5, 1.5]),
    "bool positions": lambda: apply_rope(X8, np.array([True, False])),
    "float16 x": lambda: apply_rope(X8.astype(np.float16), [0, 1]),
    "integer x": lambda: apply_rope(np.ones((2, 8), dtype=np.int64), [0, 1]),
    "float16 sinusoidal": lambda: sinusoidal(4, 4, dtype=np.float16),
    "float16 alibi": lambda: alibi_bias(2, 4, dtype=np.float16),
    "float16 inv_freq": lambda: rope_inv_freq(8, dtype=np.float16),
    "1-d x": lambda: apply_rope(np.ones(8), [0]),
    "inv_freq wrong length": lambda: apply_rope(X8, [0, 1], inv_freq=np.ones(3), rotary_dim=8),
    "inv_freq 2-d": lambda: apply_rope(X8, [0, 1], inv_freq=np.ones((2, 2))),
    "inv_freq scalar": lambda: apply_rope(X8, [0, 1], inv_freq=0.5),
    "sinusoidal > 1 GiB": lambda: sinusoidal(1 << 20, 1 << 12),
    "alibi > 1 GiB": lambda: alibi_bias(64, 1 << 14),
}


@pytest.mark.parametrize("call", BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_input_raises_posenc_error(call: object) -> None:
    with pytest.raises(PosencError):
        call()  # type: ignore[operator]


def test_posenc_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="layout"):
        apply_rope(X8, [0, 1], layout="diagonal")  # type: ignore[arg-type]


def test_oversized_arrays_are_refused_before_allocating() -> None:
    tracemalloc.start()
    try:
        # control: numpy allocations are visible to tracemalloc, so the assertion below is not vacuous
        tracemalloc.reset_peak()
        np.ones(1 << 20)
        assert tracemalloc.get_traced_memory()[1] >= 8 << 20
        for make in (lambda: sinusoidal(1 << 20, 1 << 12), lambda: alibi_bias(64, 1 << 14),
                     lambda: sinusoidal(1 << 16, 1 << 14, dtype=np.float32)):
            tracemalloc.reset_peak()
            with pytest.raises(PosencError, match="GiB"):
                make()
            assert tracemalloc.get_traced_memory()[1] < 1 << 20
    finally:
        tracemalloc.stop()


def test_ensure_fits_limit_is_inclusive() -> None:
    ensure_fits((1 << 27,), np.float64, "exactly 1 GiB")
    with pytest.raises(PosencError, match="1 GiB"):
        ensure_fits(((1 << 27) + 1,), np.float64, "one element more")
    # a float32 table of the same element count is half the bytes
    ensure_fits(((1 << 28),), np.float32, "float32")
    assert enc.MAX_BYTES == 1 << 30


# ------------------------------------------------------------------------------------------------ package


def test_lazy_exports() -> None:
    assert posenc_cli.apply_rope is apply_rope
    assert posenc_cli.sinusoidal is sinusoidal
    assert posenc_cli.PosencError is PosencError
    for name in posenc_cli.__all__:
        assert getattr(posenc_cli, name) is not None
    with pytest.raises(AttributeError):
        posenc_cli.no_such_thing  # noqa: B018

"""Golden RoPE frequencies and invariants, checked without transformers installed.

The arrays are the test vectors printed from transformers 5.23 (float32, ``%.9g``) in
``hf-rope-scaling.md`` section 8 (d = 16 unless noted) and section 4 (Llama 3.1 8B); the lengths and constants come
from the same document and from ``papers.md``. Input sanity checks sit next to each vector: if an input changes,
the expected output changes with it. ``tests/rope/test_frequencies_parity.py`` repeats the comparison live against the
installed
package.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from posenc_cli.rope.frequencies import RopeSpec, compute, default_inv_freq, dynamic_base
from posenc_cli.rope.scaling import ntk_theta

pytestmark = pytest.mark.numeric

RTOL = 1e-6

# (name, rope_parameters, head_dim, max_position_embeddings, seq_len, inv_freq, attention_factor)
GOLDEN: list[tuple[str, dict[str, Any], int, int, int | None, list[float], float]] = [
    ("default", {"rope_type": "default", "rope_theta": 1e4}, 16, 2048, None,
     [1.0, 0.316227764, 0.100000001, 0.0316227786, 0.00999999978, 0.00316227786, 0.00100000005, 0.000316227786],
     1.0),
    ("linear s=4", {"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0}, 16, 8192, None,
     [0.25, 0.079056941, 0.0250000004, 0.00790569466, 0.00249999994, 0.000790569466, 0.000250000012,
      7.90569466e-05],
     1.0),
    ("dynamic s=2 Lmax=2048 seq_len=4096", {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}, 16, 2048, 4096,
     [1.0, 0.270296127, 0.0730599985, 0.0197478328, 0.00533776265, 0.00144277664, 0.000389976922, 0.000105409257],
     1.0),
    ("yarn s=4 L0=2048", {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                          "original_max_position_embeddings": 2048}, 16, 8192, None,
     [1.0, 0.316227764, 0.100000001, 0.025693506, 0.00624999963, 0.00138349656, 0.000250000012, 7.90569466e-05],
     1.138629436111989),
    ("yarn s=4 L0=2048 truncate=False", {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                                         "original_max_position_embeddings": 2048, "truncate": False}, 16, 8192, None,
     [1.0, 0.316227764, 0.100000001, 0.0238701962, 0.00505697168, 0.000811290462, 0.000250000012, 7.90569466e-05],
     1.138629436111989),
    ("yarn s=40 mscale=0.707 mscale_all_dim=1", {"rope_type": "yarn", "rope_theta": 1e4, "factor": 40.0,
                                                 "original_max_position_embeddings": 2048, "mscale": 0.707,
                                                 "mscale_all_dim": 1.0}, 16, 81920, None,
     [1.0, 0.316227764, 0.100000001, 0.0239147246, 0.00512499968, 0.000849862176, 2.49999994e-05, 7.90569447e-06],
     0.9210423553163399),
    ("llama3 b=5e5 s=8 L0=64", {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}, 16, 512, None,
     [1.0, 0.079403013, 0.00470075384, 0.000911583134, 0.000176776681, 3.42810235e-05, 6.64786967e-06,
      1.28917316e-06],
     1.0),
    ("longrope seq_len=None", {"rope_type": "longrope", "rope_theta": 1e4, "original_max_position_embeddings": 64,
                               "short_factor": [1, 1, 1.5, 2, 2, 3, 4, 4],
                               "long_factor": [1, 2, 4, 8, 16, 32, 64, 64]}, 16, 256, None,
     [1.0, 0.316227764, 0.0666666701, 0.0158113893, 0.00499999989, 0.00105409266, 0.000250000012, 7.90569466e-05],
     1.1547005383792517),
    ("longrope seq_len=65", {"rope_type": "longrope", "rope_theta": 1e4, "original_max_position_embeddings": 64,
                             "short_factor": [1, 1, 1.5, 2, 2, 3, 4, 4],
                             "long_factor": [1, 2, 4, 8, 16, 32, 64, 64]}, 16, 256, 65,
     [1.0, 0.158113882, 0.0250000004, 0.00395284733, 0.000624999986, 9.88211832e-05, 1.56250007e-05,
      4.94105916e-06],
     1.1547005383792517),
]


@pytest.mark.parametrize(("name", "params", "head_dim", "max_pos", "seq_len", "expected", "attention"), GOLDEN,
                         ids=[case[0] for case in GOLDEN])
def test_golden_vectors(name: str, params: dict[str, Any], head_dim: int, max_pos: int, seq_len: int | None,
                        expected: list[float], attention: float) -> None:
    assert len(expected) == head_dim // 2  # input sanity check
    freqs = compute(RopeSpec(params, head_dim, max_pos), seq_len)
    assert freqs.inv_freq.dtype == np.float32
    np.testing.assert_allclose(freqs.inv_freq, np.asarray(expected, dtype=np.float32), rtol=RTOL, atol=0)
    assert freqs.attention_factor == pytest.approx(attention, rel=1e-12, abs=0)


def test_golden_yarn_correction_range_d16() -> None:
    params = GOLDEN[3][1]
    assert params["factor"] == 4.0 and params["original_max_position_embeddings"] == 2048  # input sanity check
    details = compute(RopeSpec(params, 16, 8192)).details
    assert (details["low"], details["high"]) == (2, 6)


LLAMA31 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def test_golden_llama_3_1_8b() -> None:
    """Section 4: d=128; pairs 0..28 unscaled, 29..34 smoothed, 35..63 divided by 8."""
    freqs = compute(RopeSpec(LLAMA31, 128, 131072))
    picked = freqs.inv_freq[[0, 20, 30, 31, 40, 46, 63]]
    expected = [1.0, 0.016560440883040428, 0.0013718936825171113, 0.0008567514596506953, 3.428102354519069e-05,
                1.0017868589784484e-05, 3.068925877869333e-07]
    np.testing.assert_allclose(picked, np.asarray(expected, dtype=np.float32), rtol=RTOL, atol=0)
    assert freqs.attention_factor == 1.0


def test_llama3_band_counts() -> None:
    """papers.md: d=128, theta 5e5, factor 8, low 1, high 4, L 8192 -> 29 kept, 6 blended (29-34), 29 divided."""
    freqs = compute(RopeSpec(LLAMA31, 128, 131072))
    assert [freqs.bands.count(b) for b in ("kept", "blended", "divided")] == [29, 6, 29]
    assert [i for i, b in enumerate(freqs.bands) if b == "blended"] == list(range(29, 35))
    base = default_inv_freq(5e5, 128)
    np.testing.assert_array_equal(freqs.inv_freq[:29], base[:29])
    np.testing.assert_allclose(freqs.inv_freq[35:], base[35:] / 8, rtol=RTOL, atol=0)
    blended = freqs.inv_freq[29:35]
    assert np.all(blended < base[29:35]) and np.all(blended > base[29:35] / 8)


@pytest.mark.parametrize(("head_dim", "theta", "original", "truncate", "expected"), [
    (128, 1e6, 32768, True, (23, 40)),  # Qwen2.5-7B + YaRN x4 (hf-rope-scaling.md section 4)
    (64, 1e4, 4096, True, (10, 23)),  # DeepSeek-V3
    (64, 150000.0, 4096, False, (8.092779115512402, 17.39802450158856)),  # gpt-oss (no rounding)
    (128, 1e4, 4096, True, (20, 46)),  # papers.md, YaRN
    (128, 1e4, 2048, True, (16, 41)),
    (128, 5e5, 8192, True, (18, 35)),
])
def test_yarn_correction_ranges(head_dim: int, theta: float, original: int, truncate: bool,
                                expected: tuple[float, float]) -> None:
    params = {"rope_type": "yarn", "rope_theta": theta, "factor": 4.0, "original_max_position_embeddings": original,
              "truncate": truncate}
    details = compute(RopeSpec(params, head_dim, 4 * original)).details
    assert details["low"] == pytest.approx(expected[0], rel=1e-12)
    assert details["high"] == pytest.approx(expected[1], rel=1e-12)


@pytest.mark.parametrize(("factor", "expected"), [(4.0, 1.138629436111989), (8.0, 1.2079441541679836),
                                                  (32.0, 1.3465735902799727), (40.0, 1.3688879454113936)])
def test_yarn_attention_factor_constants(factor: float, expected: float) -> None:
    params = {"rope_type": "yarn", "rope_theta": 1e4, "factor": factor, "original_max_position_embeddings": 4096}
    assert compute(RopeSpec(params, 128, int(4096 * factor))).attention_factor == pytest.approx(expected, rel=1e-15)


def test_yarn_deepseek_mscale_pair_cancels() -> None:
    params = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 40, "original_max_position_embeddings": 4096,
              "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}
    assert compute(RopeSpec(params, 64, 163840)).attention_factor == 1.0


def test_longrope_phi3_attention_factor() -> None:
    params = {"rope_type": "longrope", "rope_theta": 1e4, "original_max_position_embeddings": 4096,
              "short_factor": [1.0] * 48, "long_factor": [2.0] * 48}
    freqs = compute(RopeSpec(params, 96, 131072))  # no factor: 131072 / 4096 = 32
    assert freqs.attention_factor == pytest.approx(1.1902380714238083, rel=1e-15)


@pytest.mark.parametrize(("factor", "printed", "digits"), [(2, 20221.26, 2), (4, 40889.94, 2), (8, 82684.62, 2),
                                                           (16, 167198.7, 1)])
def test_ntk_theta_papers(factor: float, printed: float, digits: int) -> None:
    assert round(ntk_theta(1e4, factor, 128), digits) == printed


def test_ntk_theta_d64() -> None:
    assert round(ntk_theta(1e4, 4, 64), 2) == 41829.37


@pytest.mark.parametrize(("seq_len", "printed"), [(8192, 30527.7), (16384, 72195.9)])
def test_dynamic_base_papers(seq_len: int, printed: float) -> None:
    """papers.md: d=128, base 1e4, s=2, L=4096."""
    assert round(dynamic_base(1e4, 2.0, seq_len, 4096, 128), 1) == printed


# ---------------------------------------------------------------------------------------------------------------
# invariants over a grid

HEAD_DIMS = [16, 64, 80, 96, 128, 256]
THETAS = [1e4, 5e5, 1e6]
FACTORS = [1.0, 2.0, 3.0, 4.0, 8.0, 32.0, 40.0]


@pytest.mark.parametrize("theta", THETAS)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_linear_times_factor_is_default(head_dim: int, theta: float) -> None:
    base = compute(RopeSpec({"rope_type": "default", "rope_theta": theta}, head_dim, 4096)).inv_freq
    for factor in FACTORS:
        freqs = compute(RopeSpec({"rope_type": "linear", "rope_theta": theta, "factor": factor}, head_dim, 4096))
        np.testing.assert_allclose(freqs.inv_freq * np.float32(factor), base, rtol=RTOL, atol=0)
        assert freqs.attention_factor == 1.0


@pytest.mark.parametrize("truncate", [True, False])
@pytest.mark.parametrize("original", [2048, 4096, 32768])
@pytest.mark.parametrize("theta", THETAS)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_yarn_keeps_fast_pairs_and_divides_slow_ones(head_dim: int, theta: float, original: int,
                                                      truncate: bool) -> None:
    base = default_inv_freq(theta, head_dim)
    pairs = np.arange(head_dim // 2)
    for factor in FACTORS:
        params = {"rope_type": "yarn", "rope_theta": theta, "factor": factor,
                  "original_max_position_embeddings": original, "truncate": truncate}
        freqs = compute(RopeSpec(params, head_dim, int(original * factor)))
        low, high = freqs.details["low"], freqs.details["high"]
        kept, divided = pairs <= low, pairs >= high
        np.testing.assert_array_equal(freqs.inv_freq[kept], base[kept])
        np.testing.assert_allclose(freqs.inv_freq[divided], base[divided] / factor, rtol=RTOL, atol=0)
        tol = 1 + 4e-7
        assert np.all(freqs.inv_freq <= base * tol) and np.all(freqs.inv_freq * tol >= base / factor)
        assert freqs.attention_factor == pytest.approx(0.1 * math.log(factor) + 1, rel=1e-15)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_dynamic_is_default_up_to_max_position_embeddings(head_dim: int) -> None:
    max_pos = 4096
    for theta in THETAS:
        base = default_inv_freq(theta, head_dim)
        for factor in FACTORS:
            params = {"rope_type": "dynamic", "rope_theta": theta, "factor": factor}
            for seq_len in (None, 1, 100, max_pos - 1, max_pos):
                np.testing.assert_array_equal(compute(RopeSpec(params, head_dim, max_pos), seq_len).inv_freq, base)
            if factor > 1:
                longer = compute(RopeSpec(params, head_dim, max_pos), max_pos + 1024).inv_freq
                assert longer[0] == base[0] and np.all(longer[1:] < base[1:])


@pytest.mark.parametrize("head_dim", [16, 64, 96, 128])
def test_longrope_switches_exactly_past_original(head_dim: int) -> None:
    half = head_dim // 2
    short, long = [1.0 + i / half for i in range(half)], [2.0 + 3 * i for i in range(half)]
    original = 4096
    params = {"rope_type": "longrope", "rope_theta": 1e4, "original_max_position_embeddings": original,
              "short_factor": short, "long_factor": long}
    shape = np.arange(0, head_dim, 2) / head_dim
    expected = {"short": 1 / (np.asarray(short) * 1e4**shape), "long": 1 / (np.asarray(long) * 1e4**shape)}
    for seq_len, which in [(None, "short"), (0, "short"), (1, "short"), (original - 1, "short"), (original, "short"),
                           (original + 1, "long"), (32 * original, "long")]:
        freqs = compute(RopeSpec(params, head_dim, 32 * original), seq_len)
        np.testing.assert_allclose(freqs.inv_freq, expected[which], rtol=RTOL, atol=0, err_msg=str(seq_len))
        assert freqs.details["factors_used"] == which
        assert freqs.attention_factor == pytest.approx(math.sqrt(1 + math.log(32) / math.log(original)), rel=1e-15)


# ---------------------------------------------------------------------------------------------------------------
# the float64 reference of hf-rope-scaling.md section 8, over a grid


def ref_default(b: float, d: int) -> list[float]:
    return [b ** (-2 * i / d) for i in range(d // 2)]


def ref_yarn(b: float, d: int, s: float, original: int, beta_fast: float = 32, beta_slow: float = 1,
             truncate: bool = True) -> list[float]:
    def cd(r: float) -> float:
        return d * math.log(original / (r * 2 * math.pi)) / (2 * math.log(b))

    lo, hi = cd(beta_fast), cd(beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    if lo == hi:
        hi += 0.001
    out = []
    for i, f in enumerate(ref_default(b, d)):
        e = 1 - min(max((i - lo) / (hi - lo), 0), 1)
        out.append(f / s * (1 - e) + f * e)
    return out


# YaRN's ramp blend runs in float32 (as in transformers): up to ~2.4e-6 from exact arithmetic on this grid
RTOL_RAMP = 3e-6


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_against_float64_reference(head_dim: int) -> None:
    for theta in THETAS:
        spec = RopeSpec({"rope_type": "default", "rope_theta": theta}, head_dim, 4096)
        np.testing.assert_allclose(compute(spec).inv_freq, ref_default(theta, head_dim), rtol=RTOL)
        for factor in FACTORS:
            length = 4096
            params = {"rope_type": "dynamic", "rope_theta": theta, "factor": factor}
            b = theta * ((factor * 3 * length / length) - (factor - 1)) ** (head_dim / (head_dim - 2))
            np.testing.assert_allclose(compute(RopeSpec(params, head_dim, length), 3 * length).inv_freq,
                                       ref_default(b, head_dim), rtol=RTOL)
            for truncate, (beta_fast, beta_slow) in [(True, (32, 1)), (False, (32, 1)), (True, (16, 2))]:
                params = {"rope_type": "yarn", "rope_theta": theta, "factor": factor, "beta_fast": beta_fast,
                          "beta_slow": beta_slow, "original_max_position_embeddings": length, "truncate": truncate}
                np.testing.assert_allclose(compute(RopeSpec(params, head_dim, int(length * factor))).inv_freq,
                                           ref_yarn(theta, head_dim, factor, length, beta_fast, beta_slow, truncate),
                                           rtol=RTOL_RAMP)

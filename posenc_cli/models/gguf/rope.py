"""What llama.cpp's rope factor tensors mean, in transformers' terms (numpy; loaded only for a GGUF that has one).

``convert_hf_to_gguf.py`` writes a Llama 3.x model's ``llama3`` rope scaling as a ``rope_freqs`` tensor: one factor
per pair, computed from (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings), by which
llama.cpp divides that pair's frequency. The GGUF keeps the factors, not the four numbers. :func:`llama3_params`
recovers four numbers that give those factors: ``factor`` is the largest one; in the blended band the factor is
``1 / ((1 - s) / factor + s)`` with ``s = L / wavelength * a - b`` linear in ``1 / wavelength``
(``a = 1 / (high - low)``, ``b = low / (high - low)``, ``L`` the original length), so two blended pairs fix
``L a`` and ``b``; only those products matter, and ``low_freq_factor`` is taken as 1. The numbers are accepted only
when :mod:`posenc_cli.rope.frequencies`' llama3 (transformers' arithmetic) reproduces every factor of the tensor to
float32 rounding; otherwise the caller reports the tensor as not understood (llama.cpp still applies it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from posenc_cli.rope.frequencies import RopeSpec, compute, default_inv_freq

__all__ = ["llama3_factors", "llama3_params", "FIT_RTOL"]

FIT_RTOL = 2e-6  # relative: the tensor is float32 (written from float64), transformers' llama3 is float32 arithmetic


def _nice(value: float) -> float:
    """``value`` rounded to 6 significant digits: what a config would have said (8192, not 8191.99997)."""
    return float(f"{value:.6g}") if value and math.isfinite(value) else value


def _fits(params: dict[str, Any], theta: float, rotary_dim: int, wanted: np.ndarray) -> bool:
    spec = RopeSpec({"rope_type": "llama3", "rope_theta": theta, **params}, rotary_dim, 0)
    try:
        got = compute(spec).inv_freq.astype(np.float64)
    except (ArithmeticError, ValueError):
        return False
    return bool(np.allclose(got, wanted, rtol=FIT_RTOL, atol=0.0))


def llama3_params(factors: Sequence[float], theta: float, rotary_dim: int) -> dict[str, Any] | None:
    """llama3 rope parameters (without ``rope_theta``) whose per-pair factors are ``factors``, or None when no such
    parameters reproduce them (the tensor was not written by the llama3 formula, or its length is not
    ``rotary_dim / 2``). All factors 1 is not llama3 either (None)."""
    r = np.asarray(factors, dtype=np.float64)
    if r.shape != (rotary_dim // 2,) or not np.all(np.isfinite(r)) or np.any(r <= 0):
        return None
    inv = default_inv_freq(theta, rotary_dim).astype(np.float64)
    wanted = inv / r  # what llama.cpp computes: each pair's frequency divided by its factor
    factor = float(r.max())
    if factor <= 1.0:
        return None
    wavelength = 2 * math.pi / inv
    blended = (r > 1.0 + 1e-6) & (r < factor * (1 - 1e-6))
    candidates: list[dict[str, Any]] = []
    if int(blended.sum()) >= 2:
        s = (1.0 / r[blended] - 1.0 / factor) / (1.0 - 1.0 / factor)
        design = np.stack([1.0 / wavelength[blended], -np.ones(int(blended.sum()))], axis=1)
        (la, b), *_ = np.linalg.lstsq(design, s, rcond=None)
        if b > 0 and la > 0:
            high = 1.0 + 1.0 / b  # low_freq_factor 1: high - low = 1 / b
            original = la / b
            candidates.append({"factor": _nice(factor), "low_freq_factor": 1.0, "high_freq_factor": _nice(high),
                               "original_max_position_embeddings": round(original)
                               if abs(original - round(original)) < 1e-3 * original else original})
    # too few blended pairs to solve for: the converter's own defaults, if they give the same factors, and Llama 4's
    # equal frequency factors (no blended band; the tensor then fixes the original length only within a range, and
    # the converter's default 8192 is Llama 4's)
    for high in (4.0, 1.0):
        candidates.append({"factor": _nice(factor), "low_freq_factor": 1.0, "high_freq_factor": high,
                           "original_max_position_embeddings": 8192})
    return next((c for c in candidates if _fits(c, theta, rotary_dim, wanted)), None)


def llama3_factors(params: dict[str, Any], theta: float, rotary_dim: int) -> list[float]:
    """The ``rope_freqs`` tensor for llama3 ``params`` (factor, low/high_freq_factor, original length): each pair's
    default frequency over its llama3 frequency, both as :mod:`posenc_cli.rope.frequencies` computes them
    (transformers' float32 arithmetic); ``rotary_dim / 2`` values. convert_hf_to_gguf.py writes the same quotients
    from its own float32 loop (equal to float32 rounding)."""
    spec = RopeSpec({"rope_type": "llama3", "rope_theta": theta, **params}, rotary_dim, 0)
    scaled = compute(spec).inv_freq.astype(np.float64)
    default = default_inv_freq(theta, rotary_dim).astype(np.float64)
    return [float(v) for v in default / scaled]

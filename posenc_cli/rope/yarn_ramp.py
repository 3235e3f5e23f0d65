"""YaRN's correction range in Python floats (stdlib: the engines that mirror it need no numpy to say where its ramp
runs).

``beta_fast`` and ``beta_slow`` are rotations over the original length: a pair that turns more than ``beta_fast``
times there keeps its frequency, one that turns fewer than ``beta_slow`` times is interpolated, the pairs between
ramp. Pair indices count from 0 (the fastest pair); ``dim`` is the rotary dim.
"""

from __future__ import annotations

import math


def yarn_correction_dim(rotations: float, dim: int, base: float, original: int) -> float:
    """The (fractional) pair index that turns ``rotations`` times over ``original`` positions."""
    return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))


def yarn_correction_range(
    beta_fast: float, beta_slow: float, dim: int, base: float, original: int, truncate: bool
) -> tuple[float, float]:
    """Pair indices where YaRN's ramp starts and ends (``beta_fast`` -> low, ``beta_slow`` -> high), floored and
    ceiled when ``truncate``, clipped to ``[0, dim - 1]``; transformers' ``find_correction_range``."""
    low = yarn_correction_dim(beta_fast, dim, base, original)
    high = yarn_correction_dim(beta_slow, dim, base, original)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)

"""95% intervals for eval scores: Wilson's score interval for one run's mean, Newcombe's for two runs' difference.

A prompt's score lies in [0, 1]: a needle passes or not, RULER's ``string_match_all`` gives the share of the values
found. Among variables in [0, 1] with mean p, the Bernoulli has the largest variance, p(1 - p); so Wilson's interval
computed with the summed score as the count of successes is the binomial score interval for pass/fail scores and at
least as wide as needed for partial ones. An average over tasks with equal prompt counts pools their prompts the
same way: the mean of the tasks' p_i(1 - p_i) is at most p(1 - p) of their mean p (the function is concave), so the
pooled interval is conservative too.

Two runs are told apart when Newcombe's hybrid score interval for the difference of their means (Newcombe 1998,
method 10; built from the two Wilson intervals) excludes 0. The runs are treated as independent samples; eval sends
the same seeded prompts to both, so a paired analysis could be narrower, and this one never claims more than the
data holds.
"""

from __future__ import annotations

import math
from statistics import NormalDist

LEVEL = 0.95
Z = NormalDist().inv_cdf(0.5 + LEVEL / 2)  # 1.959964...


def wilson(total: float, n: int, z: float = Z) -> tuple[float, float]:
    """Wilson's score interval for a mean score ``total / n`` (scores in [0, 1]); ``(low, high)`` within [0, 1]."""
    if n <= 0:
        raise ValueError(f"an interval needs at least one prompt, got n = {n}")
    # a sum of partial scores rounds, but reaches n only when every score is exactly 1.0, so it never passes n
    if not 0.0 <= total <= n:
        raise ValueError(f"a summed score of {total} is outside 0 .. {n} for {n} prompts in [0, 1]")
    p = total / n
    z2 = z * z
    denominator = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n)) / denominator
    # at a score of 0 (or all) the bound is 0 (or 1) exactly; the formula's rounding would leave 1e-18
    low = 0.0 if total == 0 else max(0.0, centre - half)
    high = 1.0 if total == n else min(1.0, centre + half)
    return low, high


def difference(total_a: float, n_a: int, total_b: float, n_b: int, z: float = Z) -> tuple[float, float, float]:
    """``(d, low, high)``: d = mean of b - mean of a, and Newcombe's hybrid score interval around it."""
    p_a, p_b = total_a / n_a, total_b / n_b
    low_a, high_a = wilson(total_a, n_a, z)
    low_b, high_b = wilson(total_b, n_b, z)
    d = p_b - p_a
    low = d - math.sqrt((p_b - low_b) ** 2 + (high_a - p_a) ** 2)
    high = d + math.sqrt((high_b - p_b) ** 2 + (p_a - low_a) ** 2)
    return d, max(-1.0, low), min(1.0, high)

"""The cos/sin magnitudes of scaled RoPE (stdlib: ``scale`` and ``pick`` quote them without numpy).

transformers multiplies both cos and sin by the attention factor, so q.k logits scale by its square.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature term ``0.1 * mscale * ln(scale) + 1`` (1 for scale <= 1)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_mscale_for(attention: float, scale: float, mscale_all_dim: float = 0.0) -> float:
    """The ``mscale`` whose ratio ``yarn_mscale(scale, mscale) / yarn_mscale(scale, mscale_all_dim)`` is
    ``attention``: how a framework that always takes that ratio (Megatron-Core) expresses another attention factor
    with ``mscale_all_dim`` kept. Needs ``scale > 1`` (below it both terms are 1 whatever mscale is)."""
    if scale <= 1:
        raise ValueError(f"YaRN's mscale has no effect at scale {scale:g} <= 1")
    return (attention * yarn_mscale(scale, mscale_all_dim) - 1.0) / (0.1 * math.log(scale))


def yarn_attention_factor(params: Mapping[str, Any], factor: float) -> float:
    """The cos/sin multiplier transformers uses for YaRN (explicit value, mscale ratio, or 0.1 ln s + 1)."""
    explicit = params.get("attention_factor")
    if explicit is not None:
        return float(explicit)
    mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return float(yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim))
    return yarn_mscale(factor)


def longrope_attention_factor(params: Mapping[str, Any], factor: float, original: int) -> float:
    """LongRoPE's magnitude: explicit value, else ``sqrt(1 + ln(factor) / ln(original))`` (1 for factor <= 1)."""
    explicit = params.get("attention_factor")
    if explicit is not None:
        return float(explicit)
    return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))

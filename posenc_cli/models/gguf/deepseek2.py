"""llama.cpp's deepseek2 rope magnitude and softmax scale, and the two GGUF keys that set them (stdlib).

llama.cpp (llama-cpp-python 0.3.36: ``llama-context.cpp``, ``models/deepseek2.cpp``) ties DeepSeek V2/V3's cos/sin
magnitude and softmax multiplier to two keys, ``rope.scaling.attn_factor`` (1 when absent) and
``rope.scaling.yarn_log_multiplier`` (``0.1 m_all``; convert_hf_to_gguf.py writes it from the config's
``mscale_all_dim``), whatever the rope type for the softmax. transformers (deepseek_v3) sets them apart: the
magnitude is YaRN's attention factor, the softmax is multiplied by ``mscale(s, mscale_all_dim)^2``.
:func:`deepseek2_keys` gives the key values that make the two agree for a rope dict, as ``--override-kv`` flags
(:mod:`posenc_cli.engines.llamacpp`) and as the keys of a written GGUF (:mod:`posenc_cli.models.gguf.scaled`): one
computation for both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from posenc_cli.models.gguf.header import shortest_float32
from posenc_cli.rope.attention_factors import yarn_attention_factor, yarn_mscale

__all__ = ["Deepseek2Keys", "deepseek2_keys", "deepseek2_yarn"]


def deepseek2_yarn(factor: float, attn_factor: float, mscale_all_dim: float | None) -> tuple[float, float]:
    """(cos/sin magnitude, softmax multiplier) llama.cpp's deepseek2 computes in YaRN mode.

    ``attn_factor``: the GGUF's ``rope.scaling.attn_factor`` (1 when absent); ``mscale_all_dim``: its
    ``yarn_log_multiplier`` / 0.1 (None or 0 when absent). llama-context.cpp sets ``yarn_attn_factor`` to
    ``mscale(s, m) / mscale(s, m_all) / (1 + 0.1 ln s) * attn_factor`` with ``m = m_all`` unless ``m_all`` is 1
    (then 1), or to ``attn_factor`` with no multiplier; ggml's rope multiplies by ``1 + 0.1 ln s`` again; and
    deepseek2.cpp scales the softmax by ``(yarn_attn_factor (1 + 0.1 ln s) (1 + 0.1 m_all ln s))^2``.
    """
    grow = yarn_mscale(factor)
    if mscale_all_dim:
        m = mscale_all_dim if mscale_all_dim != 1.0 else 1.0
        cparams = yarn_mscale(factor, m) / yarn_mscale(factor, mscale_all_dim) / grow * attn_factor
    else:
        cparams = attn_factor
    magnitude = cparams * grow
    softmax = (magnitude * yarn_mscale(factor, mscale_all_dim or 0.0)) ** 2
    return magnitude, softmax


@dataclass(frozen=True)
class Deepseek2Keys:
    """The deepseek2 keys for one rope dict, and what llama.cpp computes with them."""

    log_multiplier: float  # rope.scaling.yarn_log_multiplier (0.1 m_all), its shortest float32 spelling
    attn_factor: float | None  # rope.scaling.attn_factor; None: llama.cpp's 1 (the key absent)
    magnitude: float  # the cos/sin magnitude llama.cpp then computes
    softmax: float  # the softmax multiplier llama.cpp then computes
    exact: bool  # both equal transformers' (False: llama.cpp's tie cannot give them; the caller says so)


def deepseek2_keys(params: Mapping[str, Any]) -> Deepseek2Keys:
    """The keys for a ``linear`` or ``yarn`` rope dict with ``factor`` > 1 (transformers 5 form).

    linear: no YaRN, so the magnitude is 1 (``attn_factor`` absent) and the softmax multiplier
    ``((1 + 0.1 ln s)(1 + 0.1 m_all ln s))^2``; transformers' is ``mscale(s, mscale_all_dim)^2`` (1 without
    mscale_all_dim), so ``m_all`` is solved for (negative: it cancels the ``1 + 0.1 ln s``). Measured, without it
    a converted DeepSeek V3 twin's logits moved by 1.35 relative.

    yarn: with a ``yarn_log_multiplier`` the magnitude is ``attn_factor`` and ``mscale(s, m_all)`` is
    sqrt(softmax) / magnitude; without one (``m_all`` 0) the magnitude is ``attn_factor (1 + 0.1 ln s)``.
    ``m_all`` is the config's ``mscale_all_dim`` whenever that gives transformers' numbers (DeepSeek V2/V3 as
    shipped and for a new factor: the converter's own key, and no ``attn_factor``).
    """
    factor = float(params["factor"])
    m_all = params.get("mscale_all_dim")
    wanted_softmax = yarn_mscale(factor, float(m_all)) ** 2 if m_all else 1.0
    grow = yarn_mscale(factor)
    if params.get("rope_type") == "linear":
        m = (math.sqrt(wanted_softmax) / grow - 1.0) / (0.1 * math.log(factor))
        softmax = (grow * (1.0 + 0.1 * m * math.log(factor))) ** 2  # llama.cpp: float32 of the same
        return Deepseek2Keys(shortest_float32(0.1 * m), None, 1.0, softmax, True)
    wanted = yarn_attention_factor(params, factor)
    needed = math.sqrt(wanted_softmax) / wanted
    m_needed = (needed - 1.0) / (0.1 * math.log(factor)) if factor > 1 else math.nan
    m_used = m_needed if math.isfinite(m_needed) and m_needed > 1e-12 else 0.0
    if m_all and math.isclose(m_used, float(m_all), rel_tol=1e-9):
        m_used = float(m_all)  # the config's value, as the converter writes it (not a rounding of it)
    raf = wanted if m_used else wanted / grow
    magnitude, softmax = deepseek2_yarn(factor, raf, m_used)
    exact = math.isclose(magnitude, wanted, rel_tol=1e-9) and math.isclose(softmax, wanted_softmax, rel_tol=1e-9)
    return Deepseek2Keys(shortest_float32(0.1 * m_used), None if math.isclose(raf, 1.0, rel_tol=1e-12) else raf,
                         magnitude, softmax, exact)

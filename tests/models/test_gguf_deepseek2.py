"""deepseek2's two GGUF keys (posenc_cli.models.gguf.deepseek2): what llama.cpp computes from the keys chosen is
transformers' magnitude and softmax scale, and for DeepSeek's own mscale pair the keys are the converter's. The
proofs in the real llama.cpp are tests/models/test_gguf_scaled.py (written GGUFs) and
tests/engines/test_llamacpp_converted.py (the same keys as --override-kv flags).

Tolerances: relative 1e-9 where float64 arithmetic only reorders the same operations; 1e-6 where the key goes through
its float32 spelling (the GGUF stores float32: a relative rounding of 6e-8, amplified by the ln s terms)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from posenc_cli.models.gguf.deepseek2 import deepseek2_keys, deepseek2_yarn
from posenc_cli.models.gguf.header import shortest_float32
from posenc_cli.rope.attention_factors import yarn_attention_factor, yarn_mscale

V3 = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "mscale": 1.0,
      "mscale_all_dim": 1.0}
V2_LITE = {**V3, "mscale": 0.707, "mscale_all_dim": 0.707}


def _transformers(params: dict[str, Any]) -> tuple[float, float]:
    """(magnitude, softmax multiplier) of transformers' deepseek_v3: YaRN's attention factor (1 for linear), and
    mscale(s, mscale_all_dim)^2 when the dict names mscale_all_dim."""
    factor = float(params["factor"])
    magnitude = 1.0 if params["rope_type"] == "linear" else yarn_attention_factor(params, factor)
    m_all = params.get("mscale_all_dim")
    return magnitude, (yarn_mscale(factor, float(m_all)) ** 2 if m_all else 1.0)


@pytest.mark.parametrize("params", [V3, V2_LITE, {**V3, "factor": 80.0}, {**V2_LITE, "factor": 80.0}],
                         ids=["v3", "v2-lite", "v3-x80", "v2-lite-x80"])
def test_deepseeks_own_mscale_pair_gives_the_converters_keys(params: dict[str, Any]) -> None:
    keys = deepseek2_keys(params)
    assert keys.log_multiplier == shortest_float32(0.1 * params["mscale_all_dim"]) and keys.attn_factor is None
    assert keys.exact
    magnitude, softmax = deepseek2_yarn(params["factor"], 1.0, keys.log_multiplier / 0.1)
    want = _transformers(params)
    assert magnitude == pytest.approx(want[0], rel=1e-9) and softmax == pytest.approx(want[1], rel=1e-9)


@pytest.mark.parametrize("params", [
    {**V2_LITE, "factor": 80.0, "attention_factor": 1.1},
    {"rope_type": "linear", "factor": 80.0},
    {"rope_type": "linear", "factor": 80.0, "mscale_all_dim": 1.0},
], ids=["attention-factor", "linear", "linear-mscale-all-dim"])
def test_another_rope_gets_the_keys_that_give_transformers_numbers(params: dict[str, Any]) -> None:
    keys = deepseek2_keys(params)
    assert keys.exact
    want = _transformers(params)
    assert keys.magnitude == pytest.approx(want[0], rel=1e-9) and keys.softmax == pytest.approx(want[1], rel=1e-9)
    if params["rope_type"] == "yarn":  # llama.cpp's own formula on the keys gives the same
        magnitude, softmax = deepseek2_yarn(params["factor"], keys.attn_factor or 1.0, keys.log_multiplier / 0.1)
        assert magnitude == pytest.approx(want[0], rel=1e-6) and softmax == pytest.approx(want[1], rel=1e-6)


def test_a_magnitude_without_its_softmax_cannot_be_given() -> None:
    """No mscale_all_dim (softmax x1) with a magnitude above 1: llama.cpp's softmax follows the magnitude."""
    keys = deepseek2_keys({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096,
                           "attention_factor": 1.2})
    assert not keys.exact
    assert math.isclose(keys.magnitude, 1.2, rel_tol=1e-9) and not math.isclose(keys.softmax, 1.0, rel_tol=1e-3)

"""posenc_cli.models.rope_dicts: the rope dict(s) a config class builds, by the precedence its module docstring
states (transformers 5's standardization)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posenc_cli.errors import PosencError
from posenc_cli.models.rope_dicts import rope_dicts

BASE = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 8192}
thetas = st.floats(min_value=1.0, max_value=1e9)


def flat(cfg: dict[str, Any]) -> dict[str, Any]:
    dicts, nested = rope_dicts(cfg)
    assert not nested and list(dicts) == [""]
    return dicts[""]


@given(inside=st.none() | thetas, top=st.none() | thetas)
def test_theta_inside_the_dict_wins_over_the_top_level_key_which_wins_over_the_class_default(
        inside: float | None, top: float | None) -> None:
    rope: dict[str, Any] = {"rope_type": "linear", "factor": 2.0}
    if inside is not None:
        rope["rope_theta"] = inside
    cfg = {**BASE, "rope_scaling": rope, **({"rope_theta": top} if top is not None else {})}
    expected = inside if inside is not None else top if top is not None else 10000.0  # LlamaConfig's default
    assert flat(cfg)["rope_theta"] == expected


def test_legacy_rope_scaling_wins_over_rope_parameters() -> None:
    cfg = {**BASE, "rope_scaling": {"rope_type": "linear", "factor": 2.0},
           "rope_parameters": {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 1.0}}
    assert flat(cfg) == {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}


@pytest.mark.parametrize(("written", "read"), [("linear", "linear"), ("su", "longrope"), ("mrope", "default")])
def test_type_stands_in_for_rope_type_and_legacy_names_are_renamed(written: str, read: str) -> None:
    params = flat({**BASE, "rope_scaling": {"type": written, "factor": 2.0, "short_factor": [1.0],
                                            "long_factor": [1.0]}})
    assert params["rope_type"] == read
    assert "type" not in params


def test_a_rope_type_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(PosencError, match="rope_type = 3 is not allowed; use a rope type name"):
        rope_dicts({**BASE, "rope_scaling": {"rope_type": 3}})


@pytest.mark.parametrize("rope_type", ["yarn", "llama3", "longrope"])
@given(in_dict=st.none() | st.integers(1, 1 << 20), top=st.none() | st.integers(1, 1 << 20),
       max_pos=st.integers(1, 1 << 20))
def test_the_original_length_top_level_then_dict_then_max_position_embeddings(
        rope_type: str, in_dict: int | None, top: int | None, max_pos: int) -> None:
    rope: dict[str, Any] = {"rope_type": rope_type, "factor": 4.0}
    if in_dict is not None:
        rope["original_max_position_embeddings"] = in_dict
    cfg = {**BASE, "max_position_embeddings": max_pos, "rope_scaling": rope}
    if top is not None:
        cfg["original_max_position_embeddings"] = top
    expected = top if top is not None else in_dict if in_dict is not None else max_pos
    assert flat(cfg)["original_max_position_embeddings"] == expected


def test_plain_and_linear_rope_name_no_original_length() -> None:
    assert "original_max_position_embeddings" not in flat({**BASE, "rope_scaling": {"rope_type": "linear",
                                                                                     "factor": 2.0}})


def test_phi3_reads_yarn_as_longrope_from_its_own_original_4096() -> None:
    cfg = {"model_type": "phi3", "hidden_size": 3072, "num_attention_heads": 32, "max_position_embeddings": 131072,
           "rope_scaling": {"type": "yarn", "factor": 32.0, "original_max_position_embeddings": 8192,
                            "short_factor": [1.0] * 48, "long_factor": [2.0] * 48}}
    params = flat(cfg)
    assert (params["rope_type"], params["original_max_position_embeddings"]) == ("longrope", 4096)


def test_gemma3_scales_full_attention_only_and_turns_sliding_layers_with_the_local_base() -> None:
    cfg = {"model_type": "gemma3_text", "rope_theta": 1e6, "rope_local_base_freq": 1e4,
           "max_position_embeddings": 131072, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    dicts, nested = rope_dicts(cfg)
    assert nested
    assert dicts["full_attention"] == {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}
    assert dicts["sliding_attention"] == {"rope_type": "default", "rope_theta": 1e4}


def test_olmo3_sliding_layers_keep_the_class_theta() -> None:
    cfg = {"model_type": "olmo3", "rope_theta": 1e6, "max_position_embeddings": 65536,
           "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192}}
    dicts, _ = rope_dicts(cfg)
    assert dicts["full_attention"]["rope_theta"] == 1e6
    assert dicts["sliding_attention"] == {"rope_type": "default", "rope_theta": 500000.0}


def test_deepseek_v4_compresses_with_yarn_and_no_attention_factor() -> None:
    cfg = {"model_type": "deepseek_v4", "rope_theta": 1e4, "compress_rope_theta": 160000.0, "head_dim": 512,
           "qk_rope_head_dim": 64, "max_position_embeddings": 1048576,
           "rope_scaling": {"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536}}
    dicts, nested = rope_dicts(cfg)
    assert nested and set(dicts) == {"main", "compress"}
    assert dicts["main"] == {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 64 / 512}
    assert dicts["compress"]["rope_type"] == "yarn"
    assert dicts["compress"]["rope_theta"] == 160000.0
    assert dicts["compress"]["attention_factor"] == 1.0

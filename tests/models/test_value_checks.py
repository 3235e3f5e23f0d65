"""posenc_cli.models.value_checks: which sizes, lengths and rope values a config may hold, and the one error each
refusal is."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posenc_cli.errors import PosencError
from posenc_cli.models.value_checks import (
    FLOAT32_MAX,
    FLOAT32_TINY,
    SIZE_KEYS,
    bad_sizes,
    check_rope_params,
    check_sizes,
    int_or_none,
    is_number,
    shown,
)

#: (key, least, most) for every size key
SIZES = [(key, least, most) for keys, least, most in SIZE_KEYS for key in keys]
#: a rope dict of each type with every key its frequency functions need
COMPLETE = {
    "default": {"rope_type": "default", "rope_theta": 10000.0},
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
    "yarn": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "original_max_position_embeddings": 32768},
    "longrope": {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0, 1.0], "long_factor": [2.0, 4.0],
                 "original_max_position_embeddings": 4096},
    "llama3": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "proportional": {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.25},
}


def refusal(params: dict[str, Any]) -> str:
    with pytest.raises(PosencError) as err:
        check_rope_params(params, "rope parameters")
    return str(err.value)


# --- small helpers ---------------------------------------------------------------------------------------------


@given(st.one_of(st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.text(), st.none()))
def test_a_number_is_a_finite_int_or_float_and_never_a_bool(value: Any) -> None:
    expected = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value))
    assert is_number(value) is expected


def test_int_or_none_truncates_numbers_and_refuses_the_rest() -> None:
    assert int_or_none(4096) == 4096
    assert int_or_none(4096.7) == 4096
    assert int_or_none(True) is None
    assert int_or_none("4096") is None
    assert int_or_none(None) is None


@given(st.text(max_size=200))
def test_a_shown_value_is_at_most_40_characters(text: str) -> None:
    out = shown(text)
    assert len(out) <= 40
    assert out == repr(text) or out.endswith("...")


# --- sizes -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "least", "most"), SIZES)
def test_each_size_key_allows_exactly_its_range(key: str, least: int, most: int) -> None:
    for value in (least, most, (least + most) // 2, float(least)):
        assert bad_sizes({key: value}) == [], value
    for bad in (least - 1, most + 1, least + 0.5, float("inf"), True, "4096"):
        found = bad_sizes({key: bad}, "text_config.")
        assert {(k, v) for k, v, _ in found} == {(f"text_config.{key}", bad)}, bad  # once, or with _POSITIVE
        assert f"from {least:,} to {most:,}" in found[0][2]


@given(st.sampled_from(SIZES), st.integers(min_value=-(1 << 40), max_value=1 << 40))
def test_a_whole_number_is_bad_exactly_when_it_is_out_of_range(size: tuple[str, int, int], value: int) -> None:
    key, least, most = size
    assert bool(bad_sizes({key: value})) is not (least <= value <= most)


@pytest.mark.parametrize("key", ["num_attention_heads", "hidden_size", "num_hidden_layers"])
def test_per_stage_sizes_are_not_read_and_not_refused(key: str) -> None:
    assert bad_sizes({key: [1, 2, 5, 8]}) == []  # SegFormer's heads per stage
    assert bad_sizes({key: {"encoder": 6}}) == []


def test_a_list_is_not_a_length() -> None:
    assert [k for k, _, _ in bad_sizes({"max_position_embeddings": [4096]})] == ["max_position_embeddings"]


@pytest.mark.parametrize("key", ["rope_theta", "factor", "rope_local_base_freq", "rotary_emb_base"])
@pytest.mark.parametrize("value", [0, -1.0, float("nan"), "1e6", False])
def test_thetas_and_factors_must_be_positive_numbers(key: str, value: Any) -> None:
    assert [(k, why) for k, _, why in bad_sizes({key: value})] == [(key, "a finite number greater than 0")]


def test_every_problem_is_listed_and_check_sizes_refuses_the_first() -> None:
    text = {"num_hidden_layers": -1, "hidden_size": 0, "rope_theta": 0}
    assert [k for k, _, _ in bad_sizes(text)] == ["num_hidden_layers", "hidden_size", "rope_theta"]
    with pytest.raises(PosencError, match=r"^num_hidden_layers = -1 is not allowed; use a whole number from 0 to "):
        check_sizes(text)


@pytest.mark.parametrize(("text", "message"), [
    ({"rope_scaling": [1, 2]}, "rope_scaling = [1, 2] is not allowed; use a JSON object (or null)"),
    ({"rope_parameters": "yarn"}, "rope_parameters = 'yarn' is not allowed; use a JSON object (or null)"),
    ({"layer_types": "full_attention"}, "layer_types = 'full_attention' is not allowed; use a list with one entry"),
    ({"no_rope_layers": [[1]]}, "no_rope_layers = [[1]] is not allowed"),
    ({"architectures": "LlamaForCausalLM"}, "architectures = 'LlamaForCausalLM' is not allowed; use a list"),
])
def test_check_sizes_refuses_shapes_no_reader_can_take(text: dict[str, Any], message: str) -> None:
    with pytest.raises(PosencError) as err:
        check_sizes(text)
    assert message in str(err.value)


def test_check_sizes_takes_what_transformers_reads_as_none() -> None:
    check_sizes({"rope_scaling": None, "rope_parameters": {}, "layer_types": None, "architectures": None})
    check_sizes({"rope_scaling": 0, "layer_types": ["full_attention", "sliding_attention"], "no_rope_layers": [1, 0]})


# --- rope dicts ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rope_type", sorted(COMPLETE))
def test_a_complete_dict_of_each_type_passes(rope_type: str) -> None:
    check_rope_params(COMPLETE[rope_type], "rope parameters")


#: the keys transformers' frequency function of each type reads unconditionally (a missing one is a KeyError there);
#: yarn's factor is not one (it falls back to max_position_embeddings / original)
NEEDED = {"linear": ("factor",), "dynamic": ("factor",), "yarn": ("original_max_position_embeddings",),
          "longrope": ("short_factor", "long_factor", "original_max_position_embeddings"),
          "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
          "proportional": ("rope_theta",)}


@pytest.mark.parametrize(("rope_type", "key"),
                         [(t, k) for t, keys in NEEDED.items() for k in keys if k != "rope_theta"])
def test_each_key_a_type_needs_is_named_when_missing(rope_type: str, key: str) -> None:
    params = {k: v for k, v in COMPLETE[rope_type].items() if k != key}
    assert refusal(params) == (f"rope parameters: rope_type {rope_type!r} needs {key!r}, which the config does "
                               "not set")


def test_a_missing_theta_is_refused_with_the_usual_base() -> None:
    assert "rope_theta = None is not allowed" in refusal({"rope_type": "default"})
    assert "rope_type 'proportional' needs 'rope_theta'" in refusal({"rope_type": "proportional"})


def test_yarn_without_a_factor_passes() -> None:
    check_rope_params({k: v for k, v in COMPLETE["yarn"].items() if k != "factor"}, "rope parameters")


@given(st.floats(min_value=1.0, max_value=1e6))
def test_any_factor_from_1_is_allowed(factor: float) -> None:
    check_rope_params({**COMPLETE["linear"], "factor": factor}, "rope parameters")


@given(st.floats(min_value=FLOAT32_TINY, max_value=1.0, exclude_max=True))
def test_a_factor_below_1_is_refused(factor: float) -> None:
    assert "use a number of at least 1 (1: no scaling)" in refusal({**COMPLETE["linear"], "factor": factor})


@given(st.floats(min_value=0.0, max_value=2.0))
def test_partial_rotary_factor_is_a_fraction_of_the_head(prf: float) -> None:
    params = {**COMPLETE["default"], "partial_rotary_factor": prf}
    if FLOAT32_TINY <= prf <= 1:  # below the smallest float32: 0 in every engine
        check_rope_params(params, "rope parameters")
    else:
        with pytest.raises(PosencError, match="partial_rotary_factor"):
            check_rope_params(params, "rope parameters")


@pytest.mark.parametrize("value", [FLOAT32_MAX * 2, FLOAT32_TINY / 2, -FLOAT32_MAX * 2])
def test_values_past_float32_are_refused(value: float) -> None:
    assert "every engine computes RoPE in float32" in refusal({**COMPLETE["yarn"], "beta_fast": value})


def test_zero_is_allowed_where_it_means_not_set_and_negatives_are_not() -> None:
    check_rope_params({**COMPLETE["yarn"], "mscale": 0, "mscale_all_dim": 0, "attention_factor": 0}, "p")
    for key in ("attention_factor", "mscale", "mscale_all_dim"):
        assert "use a finite number of at least 0" in refusal({**COMPLETE["yarn"], key: -1.0})


@pytest.mark.parametrize("key", ["rope_theta", "original_max_position_embeddings", "beta_fast", "beta_slow"])
def test_ratios_must_be_greater_than_0(key: str) -> None:
    assert f"{key} = -2.0 is not allowed; use a finite number greater than 0" in refusal(
        {**COMPLETE["yarn"], key: -2.0})


def test_the_original_length_is_a_whole_number() -> None:
    assert "use a whole number from 1" in refusal({**COMPLETE["yarn"], "original_max_position_embeddings": 4096.5})
    assert "use a whole number from 1" in refusal({**COMPLETE["yarn"], "original_max_position_embeddings": 1 << 32})


@pytest.mark.parametrize("table", [[1.0, 0.0], [1.0, -2.0], "1.0", [1.0, float("inf")], [1.0, True]])
def test_longrope_tables_hold_positive_numbers(table: Any) -> None:
    assert "must be a list of numbers greater than 0" in refusal({**COMPLETE["longrope"], "long_factor": table})


@pytest.mark.parametrize("value", ["4.0", float("nan"), [4.0], True])
def test_a_setting_that_is_not_a_number_is_named(value: Any) -> None:
    assert f"factor = {shown(value)} is not a finite number" in refusal({**COMPLETE["linear"], "factor": value})

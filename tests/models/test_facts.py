"""posenc_cli.models.facts: the window each rope group serves (window_of) and what a scaling request takes from a
model (model_facts, extended_group, ModelFacts)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posenc_cli.errors import PosencError
from posenc_cli.models.facts import ModelFacts, extended_group, model_facts, window_of
from posenc_cli.models.model_positions import LayerRope, ModelPositions, describe


def llama(**extra: Any) -> dict[str, Any]:
    """A Llama config with the sizes of Llama 3 8B; ``extra`` keys replace or add."""
    return {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 4,
            "max_position_embeddings": 8192, "rope_theta": 500000.0, **extra}


def gemma3(**extra: Any) -> dict[str, Any]:
    return {"model_type": "gemma3_text", "hidden_size": 1152, "num_attention_heads": 4, "head_dim": 256,
            "num_hidden_layers": 6, "max_position_embeddings": 32768, "rope_theta": 1e6,
            "rope_local_base_freq": 10000.0, **extra}


def hand_model(*groups: tuple[str, dict[str, Any]], max_pos: int | None = 4096) -> ModelPositions:
    return ModelPositions("rope", "llama", max_pos, 128,
                          layers=[LayerRope(name, params, [i]) for i, (name, params) in enumerate(groups)],
                          text_model_type="llama")


# --- window_of -------------------------------------------------------------------------------------------------


def test_no_window_without_max_position_embeddings() -> None:
    model = hand_model(("all layers", {"rope_type": "default", "rope_theta": 1e4}), max_pos=None)
    assert window_of(model, model.layers[0]) is None
    facts = model_facts(model, "m")
    assert (facts.native, facts.scale_from, facts.original, facts.window_note) == (None, None, None, None)


@given(st.integers(min_value=1, max_value=1 << 20), st.floats(min_value=1e2, max_value=1e9))
def test_an_unscaled_model_serves_its_max_position_embeddings(max_pos: int, theta: float) -> None:
    model = describe(llama(max_position_embeddings=max_pos, rope_theta=theta))
    served = window_of(model, model.layers[0])
    assert served is not None
    assert (served.native, served.original, served.scale_from) == (max_pos, None, max_pos)


@given(st.integers(min_value=1, max_value=1 << 16), st.floats(min_value=1.0, max_value=64.0),
       st.integers(min_value=1, max_value=1 << 21))
def test_yarn_serves_original_times_factor_or_the_longer_max(original: int, factor: float, max_pos: int) -> None:
    rope = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": original}
    model = describe(llama(max_position_embeddings=max_pos, rope_scaling=rope))
    served = window_of(model, model.layers[0])
    assert served is not None
    assert served.native == max(round(original * factor), max_pos)
    assert served.original == original == served.scale_from


def test_the_window_reads_the_text_model_type() -> None:
    """Qwen3's trained 32k (its card) is a fact of the text model type: a Qwen3 config serves 32,768, not 40,960."""
    cfg = {"model_type": "qwen3", "hidden_size": 4096, "num_attention_heads": 32, "head_dim": 128,
           "max_position_embeddings": 40960, "rope_theta": 1e6}
    model = describe(cfg)
    served = window_of(model, model.layers[0])
    assert served is not None and served.native == 32768
    facts = model_facts(model, "Qwen3")
    assert facts.native == 32768
    assert facts.window_note is not None and facts.window_note.startswith("note: Qwen3 was trained at 32k")


# --- model_facts -----------------------------------------------------------------------------------------------


@given(st.floats(min_value=1e2, max_value=1e9), st.sampled_from([8, 16, 32, 64]), st.sampled_from([64, 128, 256]))
def test_the_facts_are_the_models_own_values(theta: float, heads: int, head_dim: int) -> None:
    model = describe(llama(rope_theta=theta, num_attention_heads=heads, hidden_size=heads * head_dim))
    facts = model_facts(model, "m")
    assert facts.theta == theta
    assert facts.head_dim == head_dim
    assert facts.partial_rotary_factor is None
    assert facts.params == model.layers[0].params and facts.params is not model.layers[0].params
    assert (facts.scaled, facts.groups, facts.group, facts.model_type) == (False, (), "", "llama")


def test_a_head_dim_of_its_own_group_wins() -> None:
    model = hand_model(("all layers", {"rope_type": "default", "rope_theta": 1e4}))
    model.layers[0].head_dim = 512
    assert model_facts(model, "m").head_dim == 512


def test_how_the_file_writes_rope_settings_is_kept() -> None:
    v4 = llama(rope_scaling={"rope_type": "linear", "factor": 2.0})
    v5 = llama(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5})
    assert not model_facts(describe(v4), "m", cfg=v4).rope_parameters
    assert model_facts(describe(v5), "m", cfg=v5).rope_parameters
    assert not model_facts(describe(v5), "m").rope_parameters  # no cfg: not known, not claimed
    both = {**v5, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
    assert not model_facts(describe(both), "m", cfg=both).rope_parameters  # rope_scaling wins in transformers


def test_a_multimodal_model_keeps_its_rope_in_text_config() -> None:
    cfg = {"model_type": "llava", "text_config": llama()}
    facts = model_facts(describe(cfg), "llava", cfg=cfg)
    assert facts.text_config
    assert facts.theta == 500000.0


def test_per_layer_rope_extends_full_attention_and_says_so() -> None:
    model = describe(gemma3())
    facts = model_facts(model, "g")
    assert set(facts.groups) == {"full_attention", "sliding_attention"}
    assert facts.group == "full_attention"
    assert facts.theta == 1e6
    assert any("extending full_attention, the others keep their settings" in n for n in facts.notes)
    sliding = model_facts(model, "g", group="sliding_attention")
    assert (sliding.group, sliding.theta) == ("sliding_attention", 10000.0)


def test_an_unknown_group_is_refused_with_the_groups_there_are() -> None:
    with pytest.raises(PosencError, match=r"g has no rope group 'global'; it has: full_attention, sliding_attention"):
        model_facts(describe(gemma3()), "g", group="global")


@pytest.mark.parametrize("cfg", [{"model_type": "bloom", "n_head": 8, "hidden_size": 512},
                                 {"model_type": "gpt2", "n_positions": 1024}])
def test_a_model_without_rope_has_nothing_to_scale(cfg: dict[str, Any]) -> None:
    with pytest.raises(PosencError, match="does not describe a RoPE model"):
        model_facts(describe(cfg), "m")


# --- extended_group --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("groups", "expected"), [
    ((("sliding_attention", {"rope_type": "default"}), ("full_attention", {"rope_type": "default"})), "full_attention"),
    ((("sliding_attention", {"rope_type": "linear"}), ("full_attention", {"rope_type": "default"})),
     "sliding_attention"),
    ((("main", {"rope_type": "default"}), ("compress", {"rope_type": "default"})), "main"),
    ((("main", {"rope_type": "default"}), ("compress", {"rope_type": "yarn"})), "compress"),
])
def test_the_extended_group_is_the_scaled_one_else_full_attention_else_the_first(
        groups: tuple[tuple[str, dict[str, Any]], ...], expected: str) -> None:
    assert extended_group(hand_model(*groups)).name == expected


# --- ModelFacts ------------------------------------------------------------------------------------------------


def facts_of(params: dict[str, Any]) -> ModelFacts:
    return ModelFacts(1e4, 128, None, 4096, params)


def test_a_method_inherits_the_models_own_parameters_only_from_its_own_type() -> None:
    own = {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0, "mscale_all_dim": 1.0,
           "truncate": False, "original_max_position_embeddings": 4096}
    assert facts_of(own).inherited("yarn") == {"beta_fast": 32.0, "beta_slow": 1.0, "mscale_all_dim": 1.0,
                                               "truncate": False}  # mscale 0 means "not set" to transformers
    assert facts_of(own).inherited("llama3") == {}
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    assert facts_of(llama3).inherited("llama3") == {"low_freq_factor": 1.0, "high_freq_factor": 4.0}


def test_extra_keys_are_the_ones_no_rope_type_owns() -> None:
    params = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24], "factor": 1.0}
    assert facts_of(params).extra == {"mrope_section": [16, 24, 24]}


@pytest.mark.parametrize(("params", "scaled"), [({}, False), ({"rope_type": "default"}, False),
                                                ({"rope_type": "linear"}, True), ({"rope_type": "proportional"}, True)])
def test_scaled_is_any_rope_type_but_default(params: dict[str, Any], scaled: bool) -> None:
    assert facts_of(params).scaled is scaled


# --- the trained length and posenc's record -------------------------------------------------------------------------

QWEN_CARD = {"model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4,
             "num_hidden_layers": 2, "max_position_embeddings": 32768, "rope_theta": 1e6, "vocab_size": 1024,
             "intermediate_size": 64,
             "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}


def _facts_of(cfg: dict[str, Any]) -> ModelFacts:
    return model_facts(describe(cfg), "m", cfg=cfg)


def test_the_card_pattern_is_trained_at_the_original_length_and_says_so() -> None:
    facts = _facts_of(QWEN_CARD)
    assert (facts.native, facts.trained, facts.training_free) == (131072, 32768, True)
    assert facts.serving == "serves 128k with yarn x4 (training-free)"
    assert facts.window_note is not None and "was trained at 32k and reaches 128k training-free" in facts.window_note


def test_posenc_record_sets_the_trained_length_only_while_it_describes_the_file() -> None:
    multiplied = QWEN_CARD | {"max_position_embeddings": 131072,
                              "rope_scaling": {"rope_type": "linear", "factor": 4.0}}
    assert _facts_of(multiplied).training_free is False  # a linear block alone reads as trained at its window
    record = {"trained_ctx": 32768, "window": 131072, "training_free": True, "rope_theta": 1e6}
    marked = _facts_of(multiplied | {"posenc": record})
    assert (marked.trained, marked.scale_from) == (32768, 32768)
    tuned = _facts_of(multiplied | {"posenc": record | {"training_free": False}})
    assert tuned.trained == 131072
    stale = _facts_of(multiplied | {"posenc": record | {"window": 65536}})
    assert stale.trained == 131072 and stale.window_note is not None and "is ignored" in stale.window_note
    for bad in ({"trained_ctx": "32k", "window": 131072, "training_free": True}, {"trained_ctx": 32768}, [], 7):
        assert _facts_of(multiplied | {"posenc": bad}).trained == 131072


def test_transformers_loads_and_saves_posencs_record() -> None:
    """transformers keeps the ``posenc`` key as an unused attribute and writes it back (the record survives a
    save_pretrained; the model's numbers are read as without it)."""
    import tempfile

    transformers = pytest.importorskip("transformers")
    record = {"trained_ctx": 32768, "window": 131072, "training_free": True, "rope_theta": 1e6}
    with tempfile.TemporaryDirectory() as folder:
        with open(f"{folder}/config.json", "w") as f:
            json.dump(QWEN_CARD | {"max_position_embeddings": 131072, "posenc": record}, f)
        config = transformers.AutoConfig.from_pretrained(folder)
        assert config.posenc == record
        assert config.rope_parameters["factor"] == 4.0 and config.max_position_embeddings == 131072
        config.save_pretrained(f"{folder}/again")
        with open(f"{folder}/again/config.json") as f:
            assert json.load(f)["posenc"] == record

"""posenc_cli.models.config_keys: the text model of a config, its keys as the class holds them, its head dim and
its dtype."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posenc_cli.errors import PosencError
from posenc_cli.models.config_keys import (
    ABSENT,
    declared_dtype,
    head_dim_of,
    infer_model_type,
    text_config,
    with_class_defaults,
    with_text,
)
from posenc_cli.models.model_types import kind_of

TEXT = {"hidden_size": 2048, "num_attention_heads": 16, "rope_theta": 1e6}
#: composites and where their text model sits (generated from transformers' classes)
NESTED = [("llava", "text_config", "llama"), ("gemma3", "text_config", "gemma3_text"),
          ("qwen2_5_omni", "thinker_config.text_config", "qwen2_5_omni_text")]


def nest(path: str, text: dict[str, Any], **top: Any) -> dict[str, Any]:
    node: dict[str, Any] = dict(text)
    for key in reversed(path.split(".")):
        node = {key: node}
    return {**node, **top}


# --- text_config and with_text ---------------------------------------------------------------------------------


def test_a_flat_config_is_its_own_text_model() -> None:
    cfg = {"model_type": "llama", **TEXT}
    text, text_type, where = text_config(cfg)
    assert (text, text_type, where) == (cfg, "llama", "")


@pytest.mark.parametrize(("model_type", "path", "text_type"), NESTED)
def test_the_text_model_is_found_where_the_class_looks(model_type: str, path: str, text_type: str) -> None:
    cfg = nest(path, TEXT, model_type=model_type)
    text, found_type, where = text_config(cfg)
    assert (text, found_type, where) == (TEXT, text_type, path)


@pytest.mark.parametrize(("model_type", "path", "text_type"), NESTED)
@given(theta=st.floats(min_value=1.0, max_value=1e9), heads=st.integers(min_value=1, max_value=128))
def test_with_text_writes_back_where_text_config_reads(model_type: str, path: str, text_type: str, theta: float,
                                                       heads: int) -> None:
    cfg = nest(path, TEXT, model_type=model_type, vision_config={"hidden_size": 1024})
    new = {**TEXT, "rope_theta": theta, "num_attention_heads": heads}
    written = with_text(cfg, text_config(cfg)[2], new)
    assert text_config(written)[0] == new
    assert written["vision_config"] == cfg["vision_config"]  # the rest of the file is kept
    assert text_config(cfg)[0] == TEXT  # and the original is not changed


def test_a_missing_sub_config_is_the_class_defaults_and_is_written_where_it_belongs() -> None:
    cfg = {"model_type": "mistral3"}
    text, text_type, where = text_config(cfg)
    assert where == f"text_config{ABSENT}"
    assert text_type == "mistral"
    assert text["rope_parameters"]["rope_theta"] == 1e9  # Mistral3Config's default text config
    assert with_text(cfg, where, {"rope_theta": 1.0}) == {"model_type": "mistral3", "text_config": {"rope_theta": 1.0}}


def test_a_sub_config_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(PosencError, match="text_config must be a JSON object, got list"):
        text_config({"model_type": "llava", "text_config": [1]})


def test_remote_code_composites_keep_their_language_model_in_their_own_key() -> None:
    cfg = {"model_type": "internvl_chat", "llm_config": {"model_type": "qwen2", **TEXT}}
    text, text_type, where = text_config(cfg)
    assert (where, text_type) == ("llm_config", "qwen2")


def test_an_encoder_decoder_is_read_as_its_decoder() -> None:
    """Moonshine's get_text_config(decoder=True): decoder_layers, decoder_attention_heads and decoder_X become the
    text model's num_hidden_layers, num_attention_heads and X."""
    cfg = {"model_type": "moonshine", "encoder_num_hidden_layers": 4, "decoder_layers": 6,
           "decoder_attention_heads": 8, "decoder_rope_theta": 5e4}
    text, text_type, where = text_config(cfg)
    assert (text_type, where) == ("moonshine", "")
    assert (text["num_hidden_layers"], text["num_attention_heads"], text["rope_theta"]) == (6, 8, 5e4)
    assert text["encoder_num_hidden_layers"] == 4  # the rest stays


# --- infer_model_type ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("arch", "expected"), [("LlamaForCausalLM", "llama"), ("MiniCPM3ForCausalLM", "minicpm3"),
                                                ("Qwen2Model", "qwen2"), ("GPTNeoXForCausalLM", "gpt_neox")])
def test_a_config_without_model_type_is_read_as_its_architecture(arch: str, expected: str) -> None:
    assert infer_model_type({"architectures": [arch]}) == (expected, arch)
    assert text_config({"architectures": [arch], **TEXT})[1] == expected


@pytest.mark.parametrize("archs", [None, [], ["NoSuchModelForCausalLM"], [3, None], "LlamaForCausalLM"])
def test_no_type_is_inferred_from_nothing_known(archs: Any) -> None:
    assert infer_model_type({"architectures": archs}) is None


# --- class defaults --------------------------------------------------------------------------------------------


@given(st.dictionaries(st.sampled_from(["hidden_size", "num_attention_heads", "max_position_embeddings",
                                        "num_hidden_layers"]), st.integers(min_value=1, max_value=1 << 16)))
def test_class_defaults_fill_only_what_the_file_leaves_out(given_keys: dict[str, int]) -> None:
    kind = kind_of("llama")
    out = with_class_defaults(given_keys, kind)
    for key, default in kind.defaults.items():
        assert out[key] == given_keys.get(key, default)


@pytest.mark.parametrize("written", ["max_position_embeddings", "model_max_length"])
def test_attribute_map_aliases_resolve_both_ways(written: str) -> None:
    """Bailing-hybrid's attribute_map: max_position_embeddings is model_max_length, whichever the file writes."""
    kind = kind_of("bailing_hybrid")
    assert kind.aliases["max_position_embeddings"] == "model_max_length"
    out = with_class_defaults({written: 12345}, kind)
    assert out["max_position_embeddings"] == out["model_max_length"] == 12345


# --- head_dim_of -----------------------------------------------------------------------------------------------


@given(st.integers(min_value=1, max_value=128), st.integers(min_value=1, max_value=512))
def test_the_head_dim_splits_the_hidden_size_over_the_heads(heads: int, per_head: int) -> None:
    text = {"hidden_size": heads * per_head, "num_attention_heads": heads}
    assert head_dim_of(text, kind_of("llama"), "llama") == per_head
    assert head_dim_of({**text, "head_dim": 96}, kind_of("llama"), "llama") == 96  # a written head_dim wins


def test_mla_rotates_qk_rope_head_dim() -> None:
    text = {"hidden_size": 7168, "num_attention_heads": 128, "head_dim": 192, "qk_rope_head_dim": 64}
    assert head_dim_of(text, kind_of("deepseek_v3"), "deepseek_v3") == 64


def test_a_head_dim_past_the_limit_is_refused() -> None:
    with pytest.raises(PosencError, match="posenc reads head dims up to 4096"):
        head_dim_of({"hidden_size": 1 << 20, "num_attention_heads": 2}, kind_of("llama"), "llama")
    with pytest.raises(PosencError, match="head_dim = 64.5 is not a whole number"):
        head_dim_of({"head_dim": 64.5}, kind_of("llama"), "llama")


# --- declared_dtype --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("cfg", "expected"), [
    ({"torch_dtype": "bfloat16"}, ("bfloat16", "torch_dtype in the config")),
    ({"dtype": "torch.float16", "torch_dtype": "float32"}, ("float16", "dtype in the config")),
    ({"torch_dtype": "BF16"}, ("bfloat16", "torch_dtype in the config")),
    ({"text_config": {"dtype": "fp32"}}, ("float32", "text_config.dtype in the config")),
    ({"torch_dtype": "auto"}, (None, "the config names no dtype")),
    ({}, (None, "the config names no dtype")),
])
def test_the_declared_dtype_and_where_it_was_read(cfg: dict[str, Any], expected: tuple[str | None, str]) -> None:
    assert declared_dtype(cfg) == expected

"""The rope-type records (``posenc_cli.rope.rope_types``): held to transformers' own per-type validation, their
defaults read as transformers reads them (an explicit null included), and a toy type added by one record seen by
every consumer: validated, linted, inspected and scaled.

The sweeps against transformers skip without it (and the null probe without torch), as the parity tests do.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clihelpers import ok, run, write_json

from posenc_cli.errors import PosencError
from posenc_cli.models.lint import lint_config
from posenc_cli.models.model_positions import describe
from posenc_cli.models.value_checks import check_rope_params
from posenc_cli.rope import frequencies, rope_types
from posenc_cli.rope.rope_types import ABSENT, FALSY, METHODS, RECORDS, RopeType, param, rope_type_of, rotary_dim

# ---------------------------------------------------------------------------------------------------------------
# against transformers' validation


def _validated_types() -> dict[str, tuple[set[str], set[str]]]:
    """rope type -> (required, optional) keys, as ``RotaryEmbeddingConfigMixin._validate_<type>_rope_parameters``
    hands them to ``_check_received_keys`` (without rope_type and partial_rotary_factor, which every type takes)."""
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import RotaryEmbeddingConfigMixin

    class Probed(Exception):
        pass

    seen: dict[str, tuple[set[str], set[str]]] = {}

    def probe(rope_type: str, received_keys: set[str], required_keys: set[str],
              optional_keys: set[str] | None = None, ignore_keys: set[str] | None = None) -> None:
        seen[rope_type] = (set(required_keys) - {"rope_type"}, set(optional_keys or ()) - {"partial_rotary_factor"})
        raise Probed

    config = LlamaConfig()
    names = [n for n in dir(RotaryEmbeddingConfigMixin)
             if n.startswith("_validate_") and n.endswith("_rope_parameters")]
    assert len(names) >= 7, names  # the sweep found transformers' table
    original = RotaryEmbeddingConfigMixin.__dict__["_check_received_keys"]
    try:
        RotaryEmbeddingConfigMixin._check_received_keys = staticmethod(probe)  # type: ignore[method-assign,assignment]
        for name in names:
            rope_type = name[len("_validate_"):-len("_rope_parameters")]
            with pytest.raises(Probed):
                getattr(config, name)({"rope_type": rope_type})
    finally:
        RotaryEmbeddingConfigMixin._check_received_keys = original  # type: ignore[method-assign]
    return seen


@pytest.fixture(scope="module")
def validated() -> dict[str, tuple[set[str], set[str]]]:
    return _validated_types()


def test_every_type_transformers_validates_has_a_record(validated: dict[str, tuple[set[str], set[str]]]) -> None:
    assert set(validated) == {name for name, r in RECORDS.items() if r.validated}


@pytest.mark.parametrize("name", [n for n, r in RECORDS.items() if r.validated])
def test_a_record_has_transformers_required_and_optional_keys(
        validated: dict[str, tuple[set[str], set[str]]], name: str) -> None:
    required, optional = validated[name]
    record = RECORDS[name]
    assert set(record.required) == required
    assert set(record.optional) == optional
    assert not set(record.also_read) & (required | optional)  # what transformers validates is not "also read"


def test_the_types_posenc_computes_are_the_types_transformers_computes() -> None:
    pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    # transformers computes default in each model class; posenc adds the model classes' own ntk_alpha
    assert set(frequencies.ROPE_FUNCTIONS) == set(ROPE_INIT_FUNCTIONS) | {"default", "ntk_alpha"}
    assert set(frequencies.ROPE_FUNCTIONS) <= set(RECORDS)


def test_the_types_that_read_the_original_length_are_those_standardization_fills() -> None:
    pytest.importorskip("transformers")
    from transformers import LlamaConfig

    filled = set()
    for name, record in RECORDS.items():
        if not record.validated:
            continue
        config = LlamaConfig(max_position_embeddings=4096)
        config.rope_parameters = {"rope_type": name, "rope_theta": 1e4}
        config.standardize_rope_params()
        if "original_max_position_embeddings" in config.rope_parameters:
            filled.add(name)
    assert filled == {n for n, r in RECORDS.items() if r.validated and r.reads_original}


def _hf_yarn(params: dict[str, Any]) -> tuple[list[float], float]:
    pytest.importorskip("torch")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(hidden_size=512, num_attention_heads=8, max_position_embeddings=16384)
    config.rope_parameters = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                              "original_max_position_embeddings": 4096, **params}
    inv, attention = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    return [float(x) for x in inv], float(attention)


@pytest.mark.parametrize("key", ["beta_fast", "beta_slow", "truncate"])
@pytest.mark.parametrize("written", [None, 0, "absent"])
def test_an_explicit_null_reads_as_transformers_reads_it(key: str, written: Any) -> None:
    """transformers' yarn with ``key`` null (or 0, or absent) computes what it computes with ``param``'s value."""
    pytest.importorskip("transformers")
    given = {} if written == "absent" else {key: written}
    read = param({"rope_type": "yarn", **given}, key)
    assert _hf_yarn(given) == _hf_yarn({key: read})
    # and the value is the record's default exactly where the record says transformers applies it
    default = RECORDS["yarn"].defaults[key]
    applies = written == "absent" or (default.read == FALSY and not written)
    assert read == (default.value if applies else written)


def test_param_reads_each_default_kind() -> None:
    assert param({"rope_type": "yarn", "beta_fast": None}, "beta_fast") == 32  # FALSY
    assert param({"rope_type": "yarn", "beta_fast": 0}, "beta_fast") == 32
    assert param({"rope_type": "yarn", "beta_fast": 24.0}, "beta_fast") == 24.0
    assert param({"rope_type": "yarn"}, "truncate") is True  # ABSENT
    assert param({"rope_type": "yarn", "truncate": None}, "truncate") is None
    assert param({"rope_type": "llama3"}, "low_freq_factor") is None  # a request default, not transformers'
    assert param({"type": "yarn"}, "beta_slow") == 1  # the legacy key names the type
    assert param({}, "beta_fast", "yarn") == 32
    assert RECORDS["yarn"].defaults["truncate"].read == ABSENT


def test_the_type_a_dict_names() -> None:
    assert rope_type_of({"rope_type": "yarn", "type": "linear"}) == "yarn"
    assert rope_type_of({"type": "linear"}) == "linear"
    assert rope_type_of({}) == "default"
    assert rope_type_of({}, None) is None


def test_one_rotary_dim_rule() -> None:
    assert rotary_dim(128, 0.5, "yarn") == 64
    assert rotary_dim(128, None, "yarn") == 128
    assert rotary_dim(512, 0.25, "proportional") == 512  # the whole head: its unrotated pairs have frequency 0
    assert rotary_dim(128, 0.5, "default", default_partial=False) == 128
    assert rotary_dim(128, 0.5, "default") == 64
    spec = frequencies.RopeSpec({"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}, 128, 4096,
                                default_partial=False)
    assert spec.rotary_dim == 128


# ---------------------------------------------------------------------------------------------------------------
# a toy rope type: one record (and its compute function), seen by every consumer

TOY = RopeType("toy", ("factor", "rope_theta"), ("factor",), method="toyscale", odd_dim=True)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> Iterator[RopeType]:
    monkeypatch.setitem(RECORDS, TOY.name, TOY)
    monkeypatch.setitem(METHODS, "toyscale", TOY.name)
    monkeypatch.setitem(frequencies.ROPE_FUNCTIONS, TOY.name, frequencies.ROPE_FUNCTIONS["linear"])
    yield TOY


def _toy_config(**rope: Any) -> dict[str, Any]:
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 1024,
            "num_attention_heads": 8, "num_hidden_layers": 2, "max_position_embeddings": 8192, "rope_theta": 1e4,
            "rope_scaling": {"rope_type": "toy", **rope}}


def test_a_toy_type_is_validated(toy: RopeType) -> None:
    with pytest.raises(PosencError, match="rope_type 'toy' needs 'factor'"):
        check_rope_params({"rope_type": "toy", "rope_theta": 1e4}, "rope_scaling")
    check_rope_params({"rope_type": "toy", "rope_theta": 1e4, "factor": 2.0}, "rope_scaling")


def test_a_toy_type_is_linted(toy: RopeType) -> None:
    cfg = _toy_config(factor=2.0, beta_fast=32)
    problems = [p for p in lint_config(cfg, None) if p.code == "unknown-rope-key"]
    assert [p.problem for p in problems] == ["rope_scaling.beta_fast is not read by rope_type 'toy'"]
    assert not [p for p in lint_config(_toy_config(factor=2.0), None) if p.code == "unknown-rope-key"]


def test_a_toy_type_is_inspected(toy: RopeType, tmp_path: Path) -> None:
    model = describe(_toy_config(factor=2.0))
    assert model.layers[0].params["rope_type"] == "toy"
    report = json.loads(ok(run("inspect", write_json(tmp_path, _toy_config(factor=2.0)), "--json")).stdout)
    assert "toy" in json.dumps(report)


def test_a_toy_type_is_scaled(toy: RopeType) -> None:
    out = json.loads(ok(run("scale", "toyscale", "--original-max", "4k", "--target", "16k", "--head-dim", "64",
                            "--engine", "hf-v5")).stdout)
    rope = out["rope_parameters"]
    assert rope["rope_type"] == "toy" and rope["factor"] == 4.0
    freqs = frequencies.compute(frequencies.RopeSpec(rope, 64, 16384))
    linear = frequencies.compute(frequencies.RopeSpec({**rope, "rope_type": "linear"}, 64, 16384))
    assert freqs.inv_freq.tolist() == linear.inv_freq.tolist()


def test_without_the_record_the_toy_type_is_unknown() -> None:
    assert "toy" not in RECORDS and "toyscale" not in METHODS
    assert rope_types.known_keys("toy") is None
    check_rope_params({"rope_type": "toy", "rope_theta": 1e4}, "rope_scaling")  # no record: nothing it needs

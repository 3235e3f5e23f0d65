"""posenc_cli.models.verification: ``verify --config``'s check of a real model, per rope group, up to its window."""

from __future__ import annotations

import re
from typing import Any

import pytest

from posenc_cli.cli.app import option_name
from posenc_cli.errors import PosencError
from posenc_cli.models.facts import window_of
from posenc_cli.models.model_positions import describe
from posenc_cli.models.record import spec_for
from posenc_cli.models.verification import run_model
from posenc_cli.rope.frequencies import compute

SMALL = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2,
         "max_position_embeddings": 512, "rope_theta": 10000.0}
GEMMA3 = {"model_type": "gemma3_text", "hidden_size": 256, "num_attention_heads": 4, "head_dim": 64,
          "num_hidden_layers": 6, "max_position_embeddings": 1024, "rope_theta": 1e6, "rope_local_base_freq": 1e4,
          "rope_scaling": {"rope_type": "linear", "factor": 8.0}}


def run(cfg: dict[str, Any], **kwargs: Any) -> Any:
    return run_model(describe(cfg), **{"dtype": "float32", "dtype_source": "test", "trials": 2, **kwargs})


def test_each_group_is_checked_with_the_numbers_inspect_reports() -> None:
    model = describe(GEMMA3)
    report = run(GEMMA3)
    assert [g.layer for g in report.groups] == [layer.name for layer in model.layers]
    for group, layer in zip(report.groups, model.layers, strict=True):
        spec = spec_for(model, layer)
        served = window_of(model, layer)
        assert served is not None
        assert (group.rope_type, group.theta, group.rotary_dim, group.head_dim) == (
            spec.rope_type, spec.theta, spec.rotary_dim, spec.head_dim)
        assert group.max_position == served.native
        assert group.attention_factor == compute(spec, served.native, top_level=model.top_level).attention_factor
    full = next(g for g in report.groups if g.layer == "full_attention")
    assert (full.rope_type, full.theta) == ("linear", 1e6)


def test_the_report_says_what_was_checked_and_passes_when_every_group_does() -> None:
    report = run(SMALL, dtype="float64", dtype_source="--dtype")
    assert (report.model_type, report.dtype, report.dtype_source) == ("llama", "float64", "--dtype")
    assert report.passed is all(g.precision.passed for g in report.groups)
    out = report.as_dict()
    assert out["groups"][0]["layer"] == "all layers"
    assert out["groups"][0]["precision"]["verdict"] == report.groups[0].precision.verdict.key
    assert out["passed"] == report.passed


def test_max_position_and_tolerance_replace_the_window_and_the_default() -> None:
    report = run(SMALL, max_position=64, tolerance=0.5)
    assert report.groups[0].max_position == 64
    assert report.tolerance == 0.5
    assert report.groups[0].precision.tolerance == 0.5


@pytest.mark.parametrize(("cfg", "message"), [
    ({"model_type": "bloom", "n_head": 4, "hidden_size": 256}, "uses ALiBi (a bias on attention scores, no rotation)"),
    ({"model_type": "gpt2", "n_positions": 1024}, "uses learned absolute position embeddings"),
    ({"model_type": "jamba", "num_hidden_layers": 2}, "uses no positional encoding, not RoPE"),
])
def test_a_model_without_rope_is_refused(cfg: dict[str, Any], message: str) -> None:
    with pytest.raises(PosencError, match=re.escape(message)):
        run(cfg)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"dtype": "float8"}, "dtype 'float8' is not known"),
    ({"max_position": 1}, "max_position must be at least 2"),
    ({"trials": 0}, "trials must be at least 1"),
    ({"tolerance": 0.0}, "tolerance must be a finite number greater than 0"),
    ({"tolerance": float("nan")}, "tolerance must be a finite number greater than 0"),
])
def test_settings_out_of_range_are_refused(kwargs: dict[str, Any], message: str) -> None:
    """The library names the argument; the command line renders it as its option (``--max-position``)."""
    with pytest.raises(PosencError) as info:
        run(SMALL, **kwargs)
    assert str(info.value).startswith(message)
    field = next(iter(kwargs))
    assert info.value.fields == (field,)
    assert info.value.render(option_name).startswith(message.replace(field, "--" + field.replace("_", "-"), 1))

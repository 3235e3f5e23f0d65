"""Core errors of a scaling request carry the fields they are about: the library reads the argument's name, the
command line the option it came from (``posenc_cli.cli.app.option_name``), so the printed message is unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from posenc_cli.cli.app import option_name
from posenc_cli.errors import PosencError
from posenc_cli.rope.scaling import check_head_dim, check_theta, make_request


def _error(**kwargs: Any) -> PosencError:
    with pytest.raises(PosencError) as info:
        make_request(**{"method": "yarn", "original_max": 4096, **kwargs})
    return info.value


@pytest.mark.parametrize(("kwargs", "library", "cli"), [
    ({"factor": 0.5}, "factor must be at least 1", "--factor must be at least 1"),
    ({}, "give the scale: factor S, or target LENGTH", "give the scale: --factor S, or --target LENGTH"),
    ({"factor": 2.0, "target": 4096}, "factor 2 disagrees with target 4096", "--factor 2 disagrees with --target 4096"),
    ({"factor": 2.0, "beta_fast": 1.0, "beta_slow": 2.0}, "beta_fast (1) must not be smaller than beta_slow (2)",
     "--beta-fast (1) must not be smaller than --beta-slow (2)"),
    ({"factor": 2.0, "beta_slow": 64.0}, "beta_fast (32) must not be smaller than beta_slow (64)",
     "--beta-fast (32) must not be smaller than --beta-slow (64)"),
    ({"factor": 2.0, "partial_rotary_factor": 2.0}, "partial_rotary_factor must be in (0, 1]",
     "--partial-rotary-factor must be in (0, 1]"),
])
def test_a_core_error_names_the_argument_and_renders_the_option(kwargs: dict[str, Any], library: str,
                                                                 cli: str) -> None:
    error = _error(**kwargs)
    assert str(error).startswith(library)
    assert error.render(option_name).startswith(cli)


def test_longrope_names_its_lists() -> None:
    error = _error(method="longrope", factor=2.0)
    assert str(error) == "longrope needs short_factor: a JSON list of 64 numbers or @file"
    assert error.render(option_name) == "longrope needs --short-factor: a JSON list of 64 numbers or @file"


def test_a_name_spelled_as_an_option_stays_as_it_is() -> None:
    with pytest.raises(PosencError) as info:
        check_theta(1.0, "--base")
    assert str(info.value).startswith("--base must be") and info.value.fields == ()
    with pytest.raises(PosencError) as info:
        check_head_dim(7)
    assert str(info.value).startswith("head_dim must be even") and info.value.fields == ("head_dim",)

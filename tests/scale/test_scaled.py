"""posenc scale's core (posenc_cli.scale.scaled): the request rendered, the verdict and the notes, without the CLI
(tests/cli/test_scale.py has the command)."""

from __future__ import annotations

import json

import pytest

from posenc_cli.errors import PosencError
from posenc_cli.scale.options import ScaleOptions
from posenc_cli.scale.scaled import ScaleAsk, scale


def test_a_bare_request_renders_with_its_notes_in_order() -> None:
    scaled = scale("yarn", ScaleOptions(original_max="32k", target="128k"), ScaleAsk(engine="vllm"), theta=1e6)
    assert scaled.text.startswith("vllm serve MODEL --hf-overrides ")
    assert scaled.destination is None
    assert scaled.notes == ["note: --head-dim not given; using 128"]
    assert scaled.request.factor == 4.0 and scaled.request.theta == 1e6


def test_the_default_format_is_hf_and_seq_len_needs_a_training_format() -> None:
    scaled = scale("linear", ScaleOptions(original_max="4k", factor=2), ScaleAsk(), theta=1e4, head_dim=64)
    assert json.loads(scaled.text)["rope_scaling"]["factor"] == 2.0
    with pytest.raises(PosencError, match="seq_len sets the length"):
        scale("linear", ScaleOptions(original_max="4k", factor=2), ScaleAsk(engine="vllm", seq_len="6k"))


@pytest.mark.parametrize(("ask", "needle"), [
    (ScaleAsk(engine="nope"), "engine 'nope' is not known"),
    (ScaleAsk(output="x.json"), "pass config FILE"),
    (ScaleAsk(config="c.json", output="x.json", in_place=True), "not both"),
])
def test_a_bad_ask_fails_before_anything_is_read(ask: ScaleAsk, needle: str) -> None:
    with pytest.raises(PosencError, match=needle):
        scale("yarn", ScaleOptions(original_max="4k", factor=2), ask)

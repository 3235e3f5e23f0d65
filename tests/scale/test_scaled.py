"""posenc scale's core (posenc_cli.scale.scaled): the request rendered, the verdict and the notes, without the CLI
(tests/cli/test_scale.py has the command)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from trained_variants import CORPUS, card_patched, trained_length, unscaled_models, written_on_the_way

from posenc_cli.errors import PosencError
from posenc_cli.rope import scaling
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


# --- the jump a warning measures runs from the trained length ------------------------------------------------------

_METHODS = ("yarn", "linear", "llama3", "dynamic", "ntk")


def _scaled_on(path: Path, method: str, target: int) -> tuple[Any, list[str]] | str:
    """(the final rope and window, the warning lines) of ``posenc scale METHOD --target TARGET --config PATH``, or
    the error (its text without the file's name)."""
    try:
        got = scale(method, ScaleOptions(target=str(target)), ScaleAsk(config=str(path)))
    except PosencError as exc:
        return str(exc).replace(str(path), "FILE")
    rope = scaling.rope_parameters(got.request)
    return (rope, scaling.max_position_embeddings(got.request)), [n for n in got.notes if n.startswith("warning:")]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(unscaled_models()), st.sampled_from((2, 4)), st.sampled_from(_METHODS),
       st.sampled_from(_METHODS), st.sampled_from((1.5, 2, 4, 8, 16)))
def test_a_file_patched_on_the_way_scales_and_warns_as_the_file_it_came_from(
        tmp_path: Path, name: str, reach: int, way: str, method: str, past: float) -> None:
    """The unpatched corpus file, its card-patched twin (a yarn block, max_position_embeddings as shipped) and the
    file ``posenc scale WAY --target W -o`` wrote (W = reach x the trained length) give the same final rope and the
    same ``warning:`` lines for one target past W (or the same refusal)."""
    trained = trained_length(name)
    window, target = trained * reach, int(trained * reach * past)
    assume(target <= 1 << 24)
    direct = _scaled_on(CORPUS / name, method, target)
    assume(not isinstance(direct, str))  # the model's class rejects the method: nothing to compare
    try:
        on_the_way = written_on_the_way(name, way, window, tmp_path)
    except PosencError:
        assume(False)  # the model's class rejects the way there
        raise
    for variant in (card_patched(name, reach, tmp_path), on_the_way):
        assert _scaled_on(variant, method, target) == direct, variant.name


def test_a_gguf_posenc_wrote_carries_its_record_and_warns_from_the_trained_length(tmp_path: Path) -> None:
    """``-o NEW.gguf`` writes ``posenc.*`` keys (outside llama's namespace); read back, the new GGUF is trained at
    the twin's 128k (Llama 3.1's llama3 x8 is trained), so a further x2 warns as x8 from 128k would."""
    from posenc_cli.models.gguf.metadata import read_gguf

    twin = CORPUS.parents[1] / "docs" / "examples" / "llama-3.1-twin.gguf"
    first = tmp_path / "x4.gguf"
    scale("yarn", ScaleOptions(target="512k"), ScaleAsk(config=str(twin), output=str(first)))
    keys = read_gguf(first).keys
    assert (keys["posenc.trained_ctx"], keys["posenc.window"], keys["posenc.training_free"]) == (131072, 524288, True)
    again = scale("yarn", ScaleOptions(target="1M"), ScaleAsk(config=str(first)))
    assert [n for n in again.notes if n.startswith("warning:")] == [
        "warning: 128k -> 1M: a x8 jump is past the x4 that shipped models serve without training (Qwen2.5/Qwen3 "
        "YaRN); expect weaker long-range retrieval, or add a fine-tuning stage at the target length (pass "
        "--fine-tuned if the model is fine-tuned at this scale)"]

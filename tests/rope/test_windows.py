"""The window rule (posenc_cli/rope/windows.py): its invariants, and that what ``scale`` writes serves what was asked.

The round trip is the rule's point: a config ``scale --target T`` writes must read back, through the same window
function every command uses, as serving exactly ``T``; asking it for ``T`` again changes nothing.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from clihelpers import ok, run
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc_cli.rope.windows import TRAINED_LENGTHS, TRAINED_SCALING, Window, window

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
MODELS = ["qwen2.5-7b-instruct.json", "qwen3-8b.json", "llama-3.1-8b-instruct.json", "gpt-oss-20b.json",
          "mistral-7b-v0.1.json", "gemma-3-4b-it.json", "deepseek-v3.json"]

lengths = st.integers(min_value=1, max_value=2**24)
factors = st.floats(min_value=1.0, max_value=64.0, allow_nan=False)


@given(max_pos=lengths, original=lengths, factor=factors)
def test_yarn_serves_the_longer_of_its_reach_and_max_position_embeddings(max_pos: int, original: int,
                                                                         factor: float) -> None:
    w = window({"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": original}, max_pos)
    assert w.native == max(max_pos, round(original * factor))
    assert w.original == original and w.scale_from == original and not w.unbounded


@given(max_pos=lengths, factor=factors, rope_type=st.sampled_from(["llama3", "longrope", "linear"]), original=lengths)
def test_llama3_longrope_and_linear_serve_max_position_embeddings(max_pos: int, factor: float, rope_type: str,
                                                                  original: int) -> None:
    params: dict[str, object] = {"rope_type": rope_type, "factor": factor}
    if rope_type != "linear":
        params["original_max_position_embeddings"] = original
    w = window(params, max_pos, "gemma3_text")
    assert (w.native, w.original) == (max_pos, original if rope_type != "linear" else None)


@given(max_pos=st.one_of(lengths, st.just(40960)), model_type=st.sampled_from(["qwen3", "qwen3_moe", "qwen2", "llama"]),
       theta=st.sampled_from([1e6, 1e4, 5e6]))
def test_a_trained_length_applies_only_to_its_family_and_shipped_window(max_pos: int, model_type: str,
                                                                        theta: float) -> None:
    w = window({"rope_type": "default", "rope_theta": theta}, max_pos, model_type)
    trained = TRAINED_LENGTHS.get((model_type, max_pos, theta))
    assert w.native == (trained[0] if trained else max_pos)
    assert bool(w.fact) == (trained is not None)
    scaled = window({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 40960, model_type)
    assert not scaled.fact and scaled.native == 131072


def test_the_qwen3_row_is_read_off_the_shipped_configs() -> None:
    for name in ("qwen3-8b.json", "qwen3-235b-a22b.json"):
        cfg = json.loads((CORPUS / name).read_text(encoding="utf-8"))
        assert (cfg["model_type"], cfg["max_position_embeddings"], cfg["rope_theta"]) in TRAINED_LENGTHS
        assert cfg["rope_scaling"] is None


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(MODELS), method=st.sampled_from(["yarn", "linear", "dynamic", "ntk", "llama3"]),
       jump=st.sampled_from([1, 2, 3, 4, 8]))
def test_what_scale_writes_serves_the_target_and_asking_again_changes_nothing(name: str, method: str,
                                                                             jump: int) -> None:
    source = str(CORPUS / name)
    native = json.loads(ok(run("inspect", source, "--json")).stdout)
    groups = [g for g in native["layers"] if g["rope_type"] != "default"] or native["layers"]
    start = groups[0]["native_window"] or native["max_position_embeddings"]
    target = start * jump
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "config.json")
        result = run("scale", method, "--config", source, "--target", str(target), "-o", path)
        if result.exit_code == 2:  # a method the model's class rejects, or one that would replace Gemma 3's linear
            assert result.stderr.startswith("error: ") and result.stdout == ""
            return
        ok(result)
        back = json.loads(ok(run("inspect", path, "--json")).stdout)
        scaled = [g for g in back["layers"] if g["rope_type"] != "default"] or back["layers"]
        served = scaled[0]["native_window"]
        if scaled[0]["rope_type"] == "dynamic":
            assert served is None  # transformers computes dynamic NTK for any length
        else:
            assert served == target, (name, method, jump, scaled[0]["parameters"])
        again = ok(run("scale", method, "--config", path, "--target", str(target)))
        assert "already serves" in again.stderr or scaled[0]["rope_type"] == "dynamic", again.stderr


# --- the trained length ----------------------------------------------------------------------------------------------


def _corpus_windows() -> dict[str, tuple[Window, dict[str, Any]]]:
    """The window of every corpus model's extended rope group, with its rope dict."""
    from posenc_cli.models.facts import extended_group, window_of
    from posenc_cli.models.sources import describe_source, read_source

    out = {}
    for path in sorted(CORPUS.glob("*.json")):
        if path.name == "SOURCES.json":
            continue
        model = describe_source(read_source(str(path)))
        if model.family != "rope" or not model.layers:
            continue
        layer = extended_group(model)
        served = window_of(model, layer)
        if served is not None:
            out[path.name] = (served, dict(layer.params))
    return out


def test_every_trained_scaling_entry_is_a_shipped_corpus_config_and_each_is_read_as_trained() -> None:
    """Each TRAINED_SCALING row matches a verbatim corpus config (tests/corpus/SOURCES.json names its origin), and a
    matched config is trained at its window."""
    windows = _corpus_windows()
    matched = {name: w for name, (w, _) in windows.items() if w.source}
    sources = json.loads((CORPUS / "SOURCES.json").read_text())
    assert all(name in sources for name in matched)
    assert {w.source for w in matched.values()} == set(TRAINED_SCALING.values())
    for name, w in matched.items():
        assert (w.trained_length, w.training_free) == (w.native, False), name


def test_a_multiplied_out_yarn_block_nobody_vouches_for_is_training_free_from_its_original_length() -> None:
    """Every corpus yarn block with the window multiplied out is in TRAINED_SCALING; the same block on another model
    type (a community copy, or posenc's own output without its record) is read as trained at the original length."""
    for name, (w, params) in _corpus_windows().items():
        if params.get("rope_type") == "yarn" and w.original is not None and w.native > w.original:
            assert w.source, f"{name}: a shipped yarn config missing from TRAINED_SCALING"
    rope = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096, "rope_theta": 150000.0}
    assert window(rope, 131072, "gpt_oss").training_free is False
    other = window(rope, 131072, "llama")
    assert (other.native, other.trained_length, other.training_free) == (131072, 4096, True)
    assert "no shipped config known to be trained at 128k" in other.assumed


@given(original=lengths, factor=factors)
def test_the_cards_pattern_is_trained_at_the_original_length(original: int, factor: float) -> None:
    rope = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": original}
    w = window(rope, original)
    assert w.trained_length == original
    assert w.training_free == (w.native > original)


@given(max_pos=lengths, factor=st.floats(min_value=1.01, max_value=64.0))
def test_dynamic_is_trained_at_max_position_embeddings(max_pos: int, factor: float) -> None:
    w = window({"rope_type": "dynamic", "factor": factor}, max_pos)
    assert w.trained_length == max_pos
    assert w.training_free == (w.native > max_pos)

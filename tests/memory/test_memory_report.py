"""``posenc memory``'s core on the toy engine (tests/harness/toy_memory.py): rows, budgets, exit codes, notes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from toy_memory import MEMORY as TOY

from posenc_cli.errors import ExitCode, PosencError
from posenc_cli.memory.report import Budget, memory_report
from posenc_cli.models.cache_layout import cache_layout

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
GEMMA = str(CORPUS / "gemma-3-27b-it.json")


def test_rows_are_the_engines_cost_with_every_setting_listed(toy: str) -> None:
    result, code = memory_report(GEMMA, 32768, [toy], extra=["--kv", "q8"])
    assert code == ExitCode.OK
    (row,) = result["engines"]
    layout = cache_layout(json.loads(Path(GEMMA).read_text()))
    expected = TOY.cost(layout, 32768, TOY.settings_for({"kv": "q8"}))
    assert row["cache_bytes"] == expected.cache_bytes == sum(g["bytes"] for g in row["groups"])
    assert [(s["flag"], s["value"], s["given"]) for s in row["settings"]] == [
        ("--block", 16, False), ("--kv", "q8", True), ("--slots", 1, False), ("--swa-full", False, False)]
    assert {g["kind"] for g in row["groups"]} == {"full", "sliding"}
    json.dumps(result, allow_nan=False)


def test_a_budget_gives_fits_the_longest_and_each_lever(toy: str) -> None:
    result, code = memory_report(GEMMA, 131072, [toy], extra=["--slots", "2"], budget=Budget(fit=8 * 1024**3))
    (row,) = result["engines"]
    assert code == ExitCode.CHECK_FAILED and not row["fits"] and row["needs"] == row["cache_bytes"] > 8 * 1024**3
    longest = row["fit"]["longest"]
    layout = cache_layout(json.loads(Path(GEMMA).read_text()))
    values = TOY.settings_for({"slots": "2"})
    assert TOY.cost(layout, longest, values).cache_bytes <= 8 * 1024**3 < TOY.cost(layout, longest + 1,
                                                                                    values).cache_bytes
    assert [lever["label"] for lever in row["levers"]] == ["--kv q8", "--slots 1"]
    assert all(lever["longest"] > longest for lever in row["levers"])


def test_memory_subtracts_known_weights_and_falls_back_to_fit_when_unknown(toy: str) -> None:
    result, _ = memory_report(GEMMA, 4096, [toy], budget=Budget(memory=24 * 1024**3))
    assert result["weights"]["bytes"] is None  # a config.json alone names no weight sizes
    assert result["budget"]["for_caches"] == 24 * 1024**3 and not result["budget"]["extras_counted"]
    assert any("--memory read as --fit" in n for n in result["notes"])


def test_past_the_window_is_computed_and_noted(toy: str) -> None:
    result, code = memory_report(GEMMA, 1 << 20, [toy])
    assert code == ExitCode.OK and result["ctx"] == 1 << 20
    assert any("past the 131,072 the model serves" in n for n in result["notes"])
    default, _ = memory_report(GEMMA, None, [toy])
    assert default["ctx"] == 131072 and any("--ctx not given" in n for n in default["notes"])


def test_an_engine_that_cannot_run_the_model_is_exit_3(toy: str, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "mamba", "num_hidden_layers": 2, "hidden_size": 64,
                                  "state_size": 16, "conv_kernel": 4, "expand": 2, "intermediate_size": 128,
                                  "max_position_embeddings": 2048}))
    result, code = memory_report(str(config), 1024, [toy])
    assert code == ExitCode.COULD_NOT_RUN
    assert result["engines"][0] == {**result["engines"][0], "runs": False,
                                    "why": "the toy engine runs no state-space model"}


def test_unknown_engines_and_bad_settings_are_errors_before_the_model_is_read(toy: str) -> None:
    with pytest.raises(PosencError, match=r"engine 'nope' has no memory model; use one of: .*toy"):
        memory_report("does-not-exist.json", 1, ["nope"])
    with pytest.raises(PosencError, match=r"--kv 'q2' is not allowed"):
        memory_report("does-not-exist.json", 1, [toy], extra=["--kv", "q2"])


def test_a_state_only_group_does_not_grow(toy: str) -> None:
    path = str(CORPUS / "qwen3.5-35b-a3b.json")
    short, _ = memory_report(path, 1024, [toy])
    long, _ = memory_report(path, 262144, [toy])
    state = [[g for g in r["engines"][0]["groups"] if g["kind"] == "state"][0] for r in (short, long)]
    assert state[0]["state_bytes"] == state[1]["state_bytes"] > 0 and state[0]["cells"] == 0
    full = [[g for g in r["engines"][0]["groups"] if g["kind"] == "full"][0] for r in (short, long)]
    assert math.isclose(full[1]["k_bytes"] / full[0]["k_bytes"], 256)


def test_a_card_patched_config_serves_its_yarn_window(toy: str) -> None:
    """Qwen2.5 patched as its card says (yarn x4, max_position_embeddings left at 32,768) serves 131,072: that is
    the default length and no note calls 128k past the window; the unpatched file's window is 32,768."""
    patched = str(CORPUS.parent.parent / "docs" / "examples" / "qwen2.5-7b-instruct-card-yarn.json")
    result, _ = memory_report(patched, None, [toy])
    assert result["ctx"] == 131072 and any("yarn x4 (training-free)" in n for n in result["notes"])
    at_128k, _ = memory_report(patched, 131072, [toy])
    assert not any("past the" in n for n in at_128k["notes"])
    plain, _ = memory_report(str(CORPUS / "qwen2.5-7b-instruct.json"), 131072, [toy])
    assert any("past the 32,768 the model serves" in n for n in plain["notes"])

"""``posenc inspect --lint``: each check fires on the config it is about, stays quiet on a clean one, and the exit
code says whether anything was found."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clihelpers import ok, run, write_json

from posenc_cli.errors import PosencError
from posenc_cli.models.lint import lint_config, oldest_reader
from posenc_cli.models.model_positions import describe

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 2,
         "max_position_embeddings": 131072, "rope_theta": 500000.0}


def described(cfg: dict[str, Any]) -> Any:
    try:
        return describe(cfg)
    except PosencError:
        return None


def codes(cfg: dict[str, Any]) -> list[str]:
    return [p.code for p in lint_config(cfg, described(cfg))]


CASES = [
    ("legacy-type-key", {**LLAMA, "rope_scaling": {"type": "linear", "factor": 2.0}}),
    ("unknown-rope-key", {**LLAMA, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "attn_factor": 1.2,
                                                    "original_max_position_embeddings": 32768}}),
    ("remapped-rope-type", {**LLAMA, "model_type": "phi3", "rope_scaling": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}),
    ("flat-rope-parameters-ignored", {**LLAMA, "model_type": "gemma3_text", "rope_parameters": {
        "rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}),
    ("v5-dict-without-theta", {**LLAMA, "rope_parameters": {"rope_type": "linear", "factor": 2.0}}),
    ("llama3-no-blend-band", {**LLAMA, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                        "high_freq_factor": 1.0,
                                                        "original_max_position_embeddings": 8192}}),
    ("engine-double-scaling", {**LLAMA, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}),
    ("window-factor-mismatch", {**LLAMA, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                          "original_max_position_embeddings": 8192}}),
    ("two-rope-dicts", {**LLAMA, "rope_scaling": {"rope_type": "linear", "factor": 2.0},
                        "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}),
    ("rope-keys-unused", {"model_type": "nemotron_h", "num_hidden_layers": 4, "rope_theta": 10000}),
]


@pytest.mark.parametrize(("code", "cfg"), CASES, ids=[c for c, _ in CASES])
def test_each_check_fires(code: str, cfg: dict[str, Any]) -> None:
    found = lint_config(cfg, described(cfg))
    assert code in [p.code for p in found]
    problem = next(p for p in found if p.code == code)
    assert problem.problem and problem.why and problem.fix


def test_misspelled_key_gets_a_suggestion() -> None:
    cfg = CASES[1][1]
    problem = next(p for p in lint_config(cfg, describe(cfg)) if p.code == "unknown-rope-key")
    assert "attn_factor" in problem.problem and "'attention_factor'" in problem.fix


CLEAN = ["llama-3.1-8b-instruct.json", "qwen2.5-7b-instruct.json", "gpt-oss-20b.json", "gemma-3-1b-it.json",
         "olmo-3.1-32b-instruct.json", "qwen3-next-80b-a3b-thinking.json"]


@pytest.mark.parametrize("name", CLEAN)
def test_clean_shipped_configs_have_no_problems(name: str) -> None:
    result = ok(run("inspect", str(CORPUS / name), "--lint"))
    assert "lint: no problems found" in result.stdout
    assert "oldest transformers that reads it:" in result.stdout


def test_problems_exit_1_with_why_and_fix(tmp_path: Path) -> None:
    result = run("inspect", write_json(tmp_path, CASES[0][1]), "--lint")
    assert result.exit_code == 1
    assert "- legacy-type-key:" in result.stdout and "  why: " in result.stdout and "  fix: " in result.stdout
    as_json = run("inspect", write_json(tmp_path, CASES[0][1]), "--lint", "--json")
    assert as_json.exit_code == 1
    assert [p["code"] for p in json.loads(as_json.stdout)["lint"]] == ["legacy-type-key", "engine-double-scaling"]


def test_an_unreadable_config_is_a_lint_finding_not_a_usage_error(tmp_path: Path) -> None:
    phi3_yarn = CASES[2][1]  # Phi3Config turns yarn into longrope, which then has no factor lists
    path = write_json(tmp_path, phi3_yarn)
    assert run("inspect", path).exit_code == 2
    result = run("inspect", path, "--lint")
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert "- remapped-rope-type:" in result.stdout and "- unreadable-rope-settings:" in result.stdout


def test_llama31_double_scaling_is_not_flagged() -> None:
    """llama3's factor divides low frequencies; 8192 x 8 != 131072 is how Llama 3.1 ships, not a mismatch."""
    cfg = json.loads((CORPUS / "llama-3.1-8b-instruct.json").read_text())
    assert codes(cfg) == []


def test_oldest_reader_takes_the_newest_requirement() -> None:
    assert oldest_reader(json.loads((CORPUS / "llama-3.1-8b-instruct.json").read_text()))[0] == "4.43.1"
    assert oldest_reader(json.loads((CORPUS / "gemma-4-26b-a4b.json").read_text()))[0] == "5.5.0"
    v5 = {**LLAMA, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}
    assert oldest_reader(v5) == ("5.0.0", "the rope_parameters key")


def test_dynamic_at_its_trained_window_is_not_double_scaling(tmp_path: Path) -> None:
    """transformers' dynamic NTK reads max_position_embeddings as the trained length; vLLM's window x factor is
    the length the factor was set for, so the file posenc scale writes is clean (its old fix discarded the
    extension)."""
    written = write_json(tmp_path, {**LLAMA, "max_position_embeddings": 8192})
    dest = tmp_path / "dynamic.json"
    ok(run("scale", "dynamic", "--config", written, "--target", "32k", "-o", str(dest)))
    result = ok(run("inspect", str(dest), "--lint"))
    assert "lint: no problems found" in result.stdout


def test_linear_double_scaling_is_a_warning_with_exit_0(tmp_path: Path) -> None:
    cfg = {**LLAMA, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    result = run("inspect", write_json(tmp_path, cfg), "--lint")
    assert result.exit_code == 0, result.stdout
    assert "lint: 1 warning" in result.stdout and "- engine-double-scaling (warning):" in result.stdout
    as_json = json.loads(run("inspect", write_json(tmp_path, cfg), "--lint", "--json").stdout)
    assert [(p["code"], p["severity"]) for p in as_json["lint"]] == [("engine-double-scaling", "warning")]

"""``posenc check``: each engine's model against transformers, with the numbers an audit of the engines' own code
measured (gpt-oss in llama.cpp, Phi-3 LongRoPE in vLLM), exit codes and one-line errors. The engine models
themselves are proven against the real packages in test_engine_harness.py and test_llamacpp_harness.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clihelpers import assert_usage_error, run, write_json

pytestmark = pytest.mark.numeric

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus"


def check(path: str, *args: str) -> tuple[int, dict[str, Any]]:
    result = run("check", path, "--json", *args)
    assert result.stderr == "", result.stderr
    return result.exit_code, json.loads(result.stdout)


def engine(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(e for e in report["engines"] if e["engine"] == name)


def test_gpt_oss_truncate_false_differs_in_llama_cpp_only() -> None:
    code, r = check(str(CORPUS / "gpt-oss-20b.json"))
    assert code == 1 and r["max_model_len"] == 131072
    assert engine(r, "vllm")["verdict"] == "same" and engine(r, "sglang")["verdict"] == "same"
    cpp = engine(r, "llama.cpp")
    assert cpp["verdict"] == "differs"
    (g,) = cpp["groups"]
    # llama.cpp rounds the correction range to (8, 18) instead of (8.09, 17.40): pair 17 is 76% off and cos/sin at
    # the last position move by up to 2.48 (magnitude 1.3466 included)
    assert g["worst_pair"] == 17 and g["inv_freq_rel_diff"] == pytest.approx(0.763, abs=5e-4)
    assert g["cos_sin_diff_at_max_len"] == pytest.approx(2.48, abs=5e-3)
    assert "--yarn-beta-fast" in cpp["invocation"] and "--yarn-beta-slow" in cpp["invocation"]


def test_deepseek_v3_is_the_same_everywhere_with_its_softmax_scale() -> None:
    # the engines that run DeepSeek V3 (TurboMind and ExLlamaV3's modelled architectures do not: not modelled)
    code, r = check(str(CORPUS / "deepseek-v3.json"), "--engines", "vllm,sglang,llama.cpp")
    assert code == 0 and r["passed"]
    for e in r["engines"]:
        assert e["verdict"] == "same"
        assert e["groups"][0]["softmax_scale"] == pytest.approx([1.8738542, 1.8738542], rel=1e-6)
    # llama.cpp's deepseek2 rebuilds DeepSeek's mscale pair from yarn_log_multiplier (0.1 mscale_all_dim, given
    # explicitly so the flags are right on any GGUF of the model): no attention-factor override
    argv = engine(r, "llama.cpp")["invocation"]
    overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "--override-kv"]
    assert overrides == ["deepseek2.rope.scaling.yarn_log_multiplier=float:0.1"]


def test_qwen_yarn_config_is_the_same_everywhere() -> None:
    code, r = check(str(ROOT / "docs" / "examples" / "qwen2.5-7b-instruct-yarn.json"))
    assert code == 0 and len(r["engines"]) >= 3 and all(e["verdict"] == "same" for e in r["engines"])
    assert engine(r, "vllm")["invocation"][-2:] == ["--max-model-len", "131072"]


def test_phi3_longrope_is_static_in_the_engines() -> None:
    code, r = check(str(ROOT / "tests" / "fixtures" / "phi-3-mini-128k.json"))
    assert code == 1 and r["short_len"] == 4096
    g = engine(r, "vllm")["groups"][0]
    assert g["inv_freq_rel_diff"] == 0  # at 128k both use the long factors
    # at 4k transformers uses the short factors; the engines keep the long ones (up to 29.8x apart)
    assert g["inv_freq_rel_diff_at_short_len"] == pytest.approx(1 - 1 / 29.8, abs=2e-3)


def test_dynamic_ntk_gets_the_vllm_override_and_still_differs_below_the_serving_length(tmp_path: Path) -> None:
    cfg = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 8192,
           "rope_theta": 10000.0, "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}}
    code, r = check(write_json(tmp_path, cfg))
    assert code == 1 and r["max_model_len"] == 32768
    vllm = engine(r, "vllm")
    over = json.loads(vllm["invocation"][vllm["invocation"].index("--hf-overrides") + 1])
    assert over["rope_parameters"]["max_trained_positions"] == 8192 and over["max_position_embeddings"] == 32768
    assert vllm["groups"][0]["inv_freq_rel_diff"] <= 1e-6  # equal to transformers at the serving length
    assert vllm["groups"][0]["inv_freq_rel_diff_at_short_len"] > 0.5
    assert engine(r, "llama.cpp")["verdict"] == "differs"  # no dynamic NTK at all


def test_llama31_is_the_same_and_llama_cpp_needs_no_rope_flag() -> None:
    code, r = check(str(CORPUS / "llama-3.1-8b-instruct.json"))
    assert code == 0
    cpp = engine(r, "llama.cpp")
    assert cpp["verdict"] == "same" and "--rope-scaling" not in cpp["invocation"]


def test_per_layer_models_other_than_gemma3_are_reported_as_not_modelled_for_llama_cpp() -> None:
    code, r = check(str(CORPUS / "olmo-3.1-32b-instruct.json"), "--engines", "hf,vllm,llama.cpp")
    assert [e["engine"] for e in r["engines"]] == ["vllm", "llama.cpp"]
    # not compared is never a pass: the exit code and the summary count it
    assert engine(r, "llama.cpp")["verdict"] == "not modelled" and code == 3
    assert r["verdicts"]["not modelled"] == ["llama.cpp"] and "not modelled: llama.cpp" in r["summary"]
    # Gemma 3's sliding layers are modelled (proven on converted twins, tests/engines/test_llamacpp_converted.py)
    code, r = check(str(CORPUS / "gemma-3-4b-it.json"), "--engines", "hf,vllm,llama.cpp")
    llama = engine(r, "llama.cpp")
    assert code == 0 and llama["verdict"] == "same"
    assert [g["group"] for g in llama["groups"]] == ["full_attention", "sliding_attention"]


def test_long_max_model_len_needs_the_vllm_variable() -> None:
    code, r = check(str(CORPUS / "qwen2.5-7b-instruct.json"), "--max-model-len", "64k")
    vllm = engine(r, "vllm")
    assert vllm["needs"] == ["VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"] and vllm["invocation"][0] == "env"


def test_text_output_names_engines_and_invocations() -> None:
    result = run("check", str(CORPUS / "gpt-oss-20b.json"))
    assert result.exit_code == 1
    assert "llama.cpp  differs  0.763 (pair 17)" in result.stdout
    assert "run: vllm serve MODEL --max-model-len 131072" in result.stdout


BAD = [
    (["--engines", "tgi"], "tgi"),
    (["--engines", ","], "--engines"),
    (["--max-model-len", "lots"], "lots"),
]


@pytest.mark.parametrize(("args", "needle"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_options(args: list[str], needle: str) -> None:
    assert_usage_error(run("check", str(CORPUS / "qwen3-8b.json"), *args), needle)


def test_a_model_without_rope_is_a_result_not_bad_input() -> None:
    code, r = check(str(CORPUS / "nemotron-h-56b-base-8k.json"))
    assert code == 0 and r["no_rope"] == "none" and r["engines"] == [] and r["passed"]
    text = run("check", str(CORPUS / "nemotron-h-56b-base-8k.json"))
    assert text.exit_code == 0 and "no RoPE" in text.stdout


# ------------------------------------------------------------------ the option words and their old names


def test_engine_is_repeatable_and_takes_comma_lists_as_engines_did() -> None:
    qwen = str(CORPUS / "qwen2.5-7b-instruct.json")
    _, old = check(qwen, "--engines", "vllm,llama.cpp", "--max-model-len", "64k")
    _, repeated = check(qwen, "--engine", "vllm", "--engine", "llama.cpp", "--ctx", "64k")
    _, listed = check(qwen, "--engine", "vllm,llama.cpp", "--ctx", "64k")
    assert [e["engine"] for e in repeated["engines"]] == ["vllm", "llama.cpp"]
    assert old == repeated == listed and listed["max_model_len"] == 65536


def test_trainer_is_repeatable_and_trainers_stays_its_old_name() -> None:
    llama = str(CORPUS / "llama-3.2-1b-instruct.json")
    _, old = check(llama, "--trainers", "megatron,torchtune", "--engine", "hf")
    _, new = check(llama, "--trainer", "megatron", "--trainer", "torchtune", "--engine", "hf")
    assert [t["engine"] for t in new["trainers"]] == ["megatron", "torchtune"] and old == new


ALIASED = [
    (["--engine", "hf", "--engines", "vllm"], "--engines is the old name of --engine"),
    (["--ctx", "4k", "--max-model-len", "8k"], "--max-model-len is the old name of --ctx"),
    (["--engine", ","], "--engine is empty"),
    (["--trainer", "all,megatron"], "--trainer 'all,megatron': all stands alone"),
    (["--ctx", "lots"], "--ctx"),
    (["--max-model-len", "lots"], "--max-model-len"),
]


@pytest.mark.parametrize(("args", "needle"), ALIASED, ids=[" ".join(a) for a, _ in ALIASED])
def test_an_error_names_the_option_as_typed(args: list[str], needle: str) -> None:
    assert_usage_error(run("check", str(CORPUS / "qwen3-8b.json"), *args), needle)


def test_the_help_lists_the_new_names_only() -> None:
    text = run("check", "--help").stdout
    assert "--engine " in text and "--ctx" in text and "--trainer " in text
    assert "--engines" not in text and "--max-model-len" not in text and "--trainers" not in text

"""``posenc memory``, ``posenc plot memory``, ``check --memory`` and ``pick --memory`` through the CLI: the JSON
answer, exit codes, engine settings under their own names, one-line errors, the figure written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clihelpers import assert_usage_error, ok, run, write_json

from posenc_cli.frameworks import registry
from posenc_cli.frameworks.registry import Entry

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
LLAMA = str(CORPUS / "llama-3.1-8b-instruct.json")
GEMMA = str(CORPUS / "gemma-3-27b-it.json")
GIB = 1024**3


@pytest.fixture(autouse=True)
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "ENTRIES", (*registry.ENTRIES, Entry("toy", "toy_engine", ("toy",),
                                                                       memory="toy_memory")))


def memory(*args: str) -> tuple[int, dict[str, Any]]:
    result = run("memory", *args, "--json")
    assert "Traceback" not in result.stderr
    return result.exit_code, json.loads(result.stdout)


def test_transformers_at_128k_is_its_cache_tensors_bytes() -> None:
    """Llama 3.1 8B in bfloat16: 32 layers x 8 KV heads x 128 dims x 2 (K and V) x 2 bytes x 131072 tokens."""
    code, r = memory(LLAMA, "--ctx", "128k", "--engine", "transformers")
    assert code == 0
    (row,) = r["engines"]
    assert row["cache_bytes"] == 32 * 8 * 128 * 2 * 2 * 131072 == 16 * GIB
    assert r["weights"]["bytes"] is None and r["model"]["window"] == 131072


def test_engine_settings_under_the_engines_own_names() -> None:
    code, r = memory(GEMMA, "--ctx", "32k", "--engine", "toy", "--kv", "q8", "--block=32", "--swa-full")
    assert code == 0
    assert {s["flag"]: s["value"] for s in r["engines"][0]["settings"]} == {
        "--block": 32, "--kv": "q8", "--slots": 1, "--swa-full": True}
    code, r = memory(GEMMA, "--ctx", "32k", "--engine", "toy,transformers", "--set", "toy:--kv=q8")
    assert code == 0 and [e["engine"] for e in r["engines"]] == ["toy", "transformers"]  # the order asked


def test_fit_exit_1_when_the_context_does_not_fit_and_0_when_it_does() -> None:
    code, r = memory(LLAMA, "--ctx", "128k", "--engine", "transformers", "--fit", "15GiB")
    assert code == 1 and r["engines"][0]["fits"] is False
    assert r["engines"][0]["fit"]["longest"] == 15 * GIB // (32 * 8 * 128 * 2 * 2)
    code, r = memory(LLAMA, "--ctx", "128k", "--engine", "transformers", "--fit", "16GiB")
    assert code == 0 and r["engines"][0]["fits"] is True
    assert memory(LLAMA, "--ctx", "128k", "--engine", "transformers", "--fit", "17179869184")[0] == 0  # bytes
    assert memory(LLAMA, "--ctx", "128k", "--engine", "transformers", "--fit", "17.1GB")[0] == 1  # < 16 GiB


def test_no_engine_can_run_the_model_is_exit_3(tmp_path: Path) -> None:
    config = write_json(tmp_path, {"model_type": "mamba", "num_hidden_layers": 2, "hidden_size": 64,
                                   "state_size": 16, "conv_kernel": 4, "expand": 2, "intermediate_size": 128,
                                   "max_position_embeddings": 2048})
    code, r = memory(config, "--engine", "toy")
    assert code == 3 and r["engines"][0]["runs"] is False


@pytest.mark.parametrize(("args", "needles"), [
    (["--fit", "24G"], ["--fit '24G' is not a memory size", "GiB", "GB"]),
    (["--memory", "0"], ["--memory '0' is out of range"]),
    (["--engine", "nope"], ["--engine 'nope' has no memory model"]),
    (["--engine", "toy", "--kv", "q3"], ["--kv 'q3' is not allowed; use one of: f16, q8"]),
    (["--engine", "toy", "--cache-type-k", "q8_0"], ["toy has no memory setting '--cache-type-k'"]),
    (["--engine", "toy,transformers", "--kv", "q8"], ["with several engines"]),
    (["--ctx", "0"], ["--ctx '0' must be at least 1"]),
    (["--png", "-"], ["--png would write the figure where the answer goes (stdout)"]),
])
def test_bad_input_is_one_line(args: list[str], needles: list[str]) -> None:
    assert_usage_error(run("memory", LLAMA, *args), *needles)


def test_a_damaged_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 20)
    assert_usage_error(run("memory", str(bad)))
    assert_usage_error(run("memory", str(tmp_path / "missing.json")), "no such file")


def test_png_and_plot_memory_draw_the_same_curves(tmp_path: Path) -> None:
    ok(run("memory", GEMMA, "--ctx", "64k", "--engine", "toy", "--fit", "8GiB", "--png", str(tmp_path / "a.png")))
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = ok(run("plot", "memory", GEMMA, "--ctx", "64k", "--engine", "toy", "--fit", "8GiB", "-o",
                    str(tmp_path / "b.png"), "--json"))
    drawn = json.loads(result.stdout)
    assert drawn["curves"] == ["toy", "toy: --kv q8"] and drawn["budget"] == 8 * GIB and drawn["ctx"] == 65536


def test_check_memory_fails_the_engine_that_does_not_fit() -> None:
    result = run("check", LLAMA, "--ctx", "128k", "--engine", "hf", "--memory", "8GiB", "--json")
    assert result.exit_code == 1
    fits = json.loads(result.stdout)["memory"]
    (row,) = fits["engines"]
    assert row["engine"] == "transformers" and not row["fits"]
    assert row["line"].startswith("does not fit: needs 16.00 GiB, has 8.00 GiB (longest that fits 65,536")
    assert run("check", LLAMA, "--ctx", "128k", "--engine", "hf", "--memory", "24GiB").exit_code == 0


def test_pick_memory_needs_a_model_and_says_whether_the_target_fits() -> None:
    assert_usage_error(run("pick", "--ctx", "128k", "--memory", "24GiB"), "--memory sizes a model's caches",
                       "--config")
    result = ok(run("pick", "--ctx", "128k", "--config", LLAMA, "--memory", "12GiB", "--engine", "hf", "--json"))
    section = json.loads(result.stdout)["memory"]
    (row,) = section["engines"]
    assert section["ctx"] == 131072 and not row["fits"] and row["longest"] == 12 * GIB // (32 * 8 * 128 * 4)


def test_every_ollama_answer_on_a_model_gives_num_ctx_with_its_memory() -> None:
    """scale --engine ollama (a note), check's Ollama row (a note under its run line, and in its JSON warnings) and
    pick --engine ollama (the answer's memory): Ollama's caches at num_ctx on its defaults, one slot of f16."""
    size = 32 * 8 * 128 * 2 * 2 * 65536 / GIB  # Llama 3.1 8B's K and V at 65,536 tokens
    line = f"num_ctx 65536: its caches take {size:.2f} GiB (OLLAMA_NUM_PARALLEL 1, OLLAMA_KV_CACHE_TYPE f16"
    scaled = ok(run("scale", "yarn", "--config", LLAMA, "--target", "64k", "--engine", "ollama"))
    assert line in scaled.stderr
    checked = json.loads(run("check", LLAMA, "--engine", "ollama", "--ctx", "64k", "--json").stdout)
    (row,) = [e for e in checked["engines"] if e["engine"] == "ollama"]
    assert any(w.startswith(line) for w in row["warnings"])
    picked = json.loads(ok(run("pick", "--ctx", "64k", "--config", LLAMA, "--engine", "ollama", "--json")).stdout)
    assert picked["engines"][0]["memory"].startswith(line)


def test_vllm_serves_the_requests_its_log_printed() -> None:
    """vllm#10517: Llama 3.1 8B, blocks of 16, 1952 GPU blocks, 'Maximum concurrency for 20000 tokens per request:
    1.56x'. The same pool (1952 blocks of 16 tokens at 128 KiB a token) as --fit gives vLLM's figure."""
    pool = 1952 * 16 * 32 * 8 * 128 * 2 * 2
    code, r = memory(LLAMA, "--ctx", "20000", "--engine", "vllm", "--block-size", "16", "--fit", str(pool))
    (row,) = r["engines"]
    assert code == 0 and row["requests_at_once"] == 1.56

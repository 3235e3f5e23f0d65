"""Start-up cost guards (fresh interpreters, so nothing a test imported earlier leaks in)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from startup import HEAVY, OPTIONAL, PROBE, loaded_modules, posenc_modules, run_cli_body

from posenc_cli.cli import app

ROOT = Path(__file__).resolve().parent.parent
def test_importing_the_cli_is_light() -> None:
    loaded = loaded_modules("import posenc_cli.cli")
    assert loaded == dict.fromkeys(HEAVY + OPTIONAL, False)


def test_importing_the_package_is_light() -> None:
    loaded = loaded_modules("import posenc_cli\nfrom posenc_cli import PosencError, parse_length")
    assert loaded == dict.fromkeys(HEAVY + OPTIONAL, False)


SCALE = ["scale", "yarn", "--original-max", "32k", "--target", "128k", "--head-dim", "128"]


@pytest.mark.parametrize(
    "extra", [[], ["--engine", "hf"], ["--engine", "hf-v5"], ["--theta", "1e6"]],
    ids=["bare", "hf", "hf-v5", "theta"],
)
def test_scale_needs_neither_numpy_nor_matplotlib(extra: list[str]) -> None:
    loaded = loaded_modules(run_cli_body([*SCALE, *extra]))
    assert loaded == dict.fromkeys(HEAVY + OPTIONAL, False)


@pytest.mark.parametrize("fmt", ["vllm", "sglang", "llama.cpp", "llama-cpp-python", "megatron"])
def test_scale_for_an_engine_loads_numpy_for_its_verdict(fmt: str) -> None:
    """``--engine ENGINE`` prints the engine's verdict (``posenc check``'s, for the request): that compares inverse
    frequencies, with numpy; nothing else heavy loads."""
    loaded = loaded_modules(run_cli_body([*SCALE, "--engine", fmt]))
    assert loaded == {**dict.fromkeys(HEAVY + OPTIONAL, False), "numpy": True}


ENGINE_MODULES = {"vllm": "posenc_cli.engines.vllm", "sglang": "posenc_cli.engines.sglang",
                  "llama.cpp": "posenc_cli.engines.llamacpp", "axolotl": "posenc_cli.trainers.axolotl"}


@pytest.mark.parametrize("fmt", ["hf", "vllm", "sglang", "llama.cpp", "axolotl"])
def test_a_bare_scale_loads_one_engine_and_no_model_reader(fmt: str) -> None:
    """Start-up grows with what is asked: no --config, no file reader; one --engine, one engine module."""
    loaded = posenc_modules([*SCALE, "--engine", fmt])
    reader = loaded & {"posenc_cli.models.model_positions", "posenc_cli.models.sources", "posenc_cli.models.convert"}
    # an engine's verdict describes the request's config (model_positions); the sources and converters never load
    assert reader == (set() if fmt == "hf" else {"posenc_cli.models.model_positions"}), reader
    engines = {m for m in ENGINE_MODULES.values() if m in loaded}
    expected = {ENGINE_MODULES[fmt]} if fmt in ENGINE_MODULES else set()
    if fmt == "sglang":  # SGLang's rotary classes are a fork of vLLM's, and so is posenc's model of them
        expected.add(ENGINE_MODULES["vllm"])
    assert engines == expected, engines


def test_scale_from_config_needs_neither_numpy_nor_matplotlib(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28,
                               "max_position_embeddings": 32768, "rope_theta": 1e6, "rope_scaling": None}))
    body = run_cli_body(["scale", "yarn", "--config", str(cfg), "--target", "128k"])
    assert loaded_modules(body) == dict.fromkeys(HEAVY + OPTIONAL, False)


def test_scale_output_loads_numpy_to_read_its_file_back(tmp_path: Path) -> None:
    """``-o`` writes only what ``posenc inspect`` reads back, and inspect computes the frequencies with numpy (the
    read-back caught files the reader alone passes: a rotary dim of 1, a factor list of the wrong length)."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28,
                               "max_position_embeddings": 32768, "rope_theta": 1e6, "rope_scaling": None}))
    body = run_cli_body(["scale", "yarn", "--config", str(cfg), "--target", "128k", "-o", str(tmp_path / "o.json")])
    assert loaded_modules(body) == {**dict.fromkeys(HEAVY + OPTIONAL, False), "numpy": True}
    assert json.loads((tmp_path / "o.json").read_text())["rope_scaling"]["factor"] == 4.0


def test_scale_explain_uses_numpy_but_not_matplotlib() -> None:
    loaded = loaded_modules(run_cli_body([*SCALE, "--explain"]))
    assert loaded["numpy"] is True  # the per-pair table computes the frequencies
    assert loaded["matplotlib"] is False
    assert loaded["torch"] is False and loaded["transformers"] is False


def test_inspect_does_not_import_matplotlib(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({
        "model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 131072,
        "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                                 "original_max_position_embeddings": 8192, "rope_type": "llama3"}}))
    for extra in ([], ["--json"]):
        loaded = loaded_modules(run_cli_body(["inspect", str(cfg), *extra]))
        assert loaded["matplotlib"] is False
        assert loaded["torch"] is False and loaded["transformers"] is False
        # a local config.json needs neither the Hub client nor the GGUF reader
        assert loaded["huggingface_hub"] is False and loaded["gguf"] is False and loaded["ml_dtypes"] is False


def test_pick_from_a_config_needs_no_numpy(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text((ROOT / "tests" / "corpus" / "qwen2.5-7b-instruct.json").read_text())
    loaded = loaded_modules(run_cli_body(["pick", "--ctx", "128k", "--config", str(cfg)]))
    assert loaded == dict.fromkeys(HEAVY + OPTIONAL, False)


GGUFS = ["docs/examples/llama-3.1-8b.gguf", "tests/fixtures/passkey/passkey.gguf"]


@pytest.mark.parametrize("name", GGUFS)
def test_reading_a_gguf_loads_neither_gguf_nor_numpy(name: str) -> None:
    """posenc's own header reader (stdlib) reads the metadata: no gguf package, and so no numpy; except that a
    rope_freqs tensor (the docs' Llama 3.1 GGUF has one) is matched against transformers' llama3 arithmetic, which
    is numpy's."""
    body = ("from posenc_cli.models.sources import read_source\n"
            f"assert read_source({str(ROOT / name)!r}).gguf is not None\n")
    rope_freqs = name.endswith("llama-3.1-8b.gguf")
    assert loaded_modules(body) == {**dict.fromkeys(HEAVY + OPTIONAL, False), "numpy": rope_freqs}


@pytest.mark.parametrize("name", GGUFS)
@pytest.mark.parametrize("extra", [[], ["--json"]], ids=["text", "json"])
def test_inspect_gguf_loads_what_inspect_of_a_config_does(tmp_path: Path, name: str, extra: list[str]) -> None:
    """No gguf, no Hub client; numpy only because inspect's report computes with it, as for a config.json."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
                               "max_position_embeddings": 131072, "rope_theta": 500000.0}))
    from_gguf = loaded_modules(run_cli_body(["inspect", str(ROOT / name), *extra]))
    assert from_gguf["gguf"] is False and from_gguf["huggingface_hub"] is False
    assert from_gguf == loaded_modules(run_cli_body(["inspect", str(cfg), *extra]))


def test_verify_bfloat16_is_the_only_path_that_loads_ml_dtypes() -> None:
    assert loaded_modules(run_cli_body(["verify", "--max-position", "4k"]))["ml_dtypes"] is False
    assert loaded_modules(run_cli_body(["verify", "--dtype", "bfloat16", "--max-position", "4k"]))["ml_dtypes"]


def test_eval_loads_no_numpy_and_matplotlib_only_for_a_png(tmp_path: Path) -> None:
    """eval talks HTTP with the standard library; only a PNG report loads matplotlib (and with it numpy)."""
    from fake_server import FakeServer, Script

    with FakeServer(Script()) as server:
        probe = loaded_modules(run_cli_body(["eval", "probe", server.url]))
        run = loaded_modules(run_cli_body(["eval", "run", server.url, "--lengths", "64", "--trials", "1",
                                           "--pass-rate", "0", "--out", str(tmp_path / "run")]))
    report = loaded_modules(run_cli_body(["eval", "report", str(tmp_path / "run")]))
    assert probe == run == report == dict.fromkeys(HEAVY + OPTIONAL, False)
    png = loaded_modules(run_cli_body(["eval", "report", str(tmp_path / "run"), "--png", str(tmp_path / "p.png")]))
    assert png["matplotlib"] is True and png["torch"] is False and png["transformers"] is False
    assert (tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")


def test_console_script_main_matches_app() -> None:
    """`posenc` (the console script) runs the same app: python -m posenc_cli scale ... prints the JSON."""
    proc = subprocess.run([sys.executable, "-m", "posenc_cli", *SCALE, "--theta", "1e6"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rope_scaling"]["factor"] == 4.0


# ---------------------------------------------------------------- --version and docs: pointers, cheap

@pytest.mark.parametrize("argv", [["--version"], ["docs"]], ids=["version", "docs"])
def test_version_and_docs_load_nothing_heavy(argv: list[str]) -> None:
    assert loaded_modules(run_cli_body(argv), cwd=ROOT) == dict.fromkeys(HEAVY + OPTIONAL, False)


def test_app_has_the_issue_commands() -> None:
    root = typer.main.get_command(app)
    names = root.list_commands(typer.Context(root))  # type: ignore[attr-defined]
    assert {"scale", "inspect", "verify", "docs"} <= set(names)


@pytest.mark.parametrize("argv", [["inspect"], ["inspect", "--json"], ["check", "--engines", "hf"]],
                         ids=["inspect", "inspect-json", "check"])
def test_the_newer_transformers_check_adds_no_import(tmp_path: Path, argv: list[str]) -> None:
    """inspect and check compare the installed transformers with the data's by a scan of sys.path: neither
    transformers nor importlib.metadata (10 ms of inspect's 130) is imported for it."""
    cfg = tmp_path / "config.json"
    cfg.write_text((ROOT / "tests" / "corpus" / "qwen2.5-7b-instruct.json").read_text())
    body = run_cli_body([argv[0], str(cfg), *argv[1:]]) + (
        "\nsys.__stderr__.write('METADATA ' + json.dumps('importlib.metadata' in sys.modules) + '\\n')\n")
    code = PROBE.format(body=body, heavy=HEAVY, optional=OPTIONAL)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    line = next(x for x in proc.stderr.splitlines() if x.startswith("METADATA "))
    assert json.loads(line[len("METADATA "):]) is False
    modules = json.loads(next(x for x in proc.stderr.splitlines() if x.startswith("MODULES "))[len("MODULES "):])
    assert modules["transformers"] is False and modules["torch"] is False


@pytest.mark.parametrize("extra", [[], ["--json"], ["--fit", "80GiB"]], ids=["text", "json", "fit"])
def test_memory_on_a_config_loads_nothing_heavy_and_no_engine(extra: list[str]) -> None:
    """``posenc memory`` reads the config and runs stdlib memory models: no numpy, no rich, no engine package."""
    argv = ["memory", str(ROOT / "tests" / "corpus" / "gemma-3-27b-it.json"), "--ctx", "128k", *extra]
    loaded = loaded_modules(run_cli_body(argv) + "\nimport sys\nassert not any(m.split('.')[0] in ("
                            "'vllm', 'llama_cpp', 'mlx', 'mlx_lm', 'sglang', 'lmdeploy', 'exllamav3', 'torch') "
                            "for m in sys.modules)")
    assert loaded == dict.fromkeys(HEAVY + OPTIONAL, False)


def test_pick_loads_no_memory_model_unless_asked() -> None:
    body = run_cli_body(["pick", "--ctx", "128k"]) + (
        "\nimport sys\nassert not [m for m in sys.modules if m.startswith(('posenc_cli.memory', "
        "'posenc_cli.engines.caches'))], 'memory code loaded'")
    assert loaded_modules(body) == dict.fromkeys(HEAVY + OPTIONAL, False)


def test_memory_on_a_gguf_loads_no_numpy() -> None:
    """A GGUF's caches and weights come from its header: its rope (matched with numpy where a rope_freqs tensor is,
    as the docs' Llama 3.1 twin has) is not read."""
    argv = ["memory", str(ROOT / "docs" / "examples" / "llama-3.1-twin.gguf"), "--ctx", "32k", "--json"]
    assert loaded_modules(run_cli_body(argv)) == dict.fromkeys(HEAVY + OPTIONAL, False)

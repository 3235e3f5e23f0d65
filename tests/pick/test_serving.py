"""``posenc pick --engine`` (posenc_cli.pick.serving): each engine's serving answer for the plan is exactly what the
plan's ``posenc scale ... --engine E`` prints, with its verdict; inside the window, the model as it is."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from clihelpers import assert_usage_error, ok, run

from posenc_cli.pick.picker import PickInputs, pick
from posenc_cli.pick.serving import engine_answers

ROOT = Path(__file__).parents[2]
LLAMA = ROOT / "tests" / "corpus" / "llama-3.1-8b-instruct.json"
GGUF = ROOT / "docs" / "examples" / "llama-3.1-twin.gguf"


def _scale_output(command: str) -> tuple[str, str]:
    """(stdout, the verdict line) of the command the plan lists, run for real."""
    argv = shlex.split(command)
    assert argv[:2] == ["posenc", "scale"]
    out = ok(run(*argv[1:]))
    verdict = next(line for line in out.stderr.splitlines() if line.startswith("verdict: "))
    return out.stdout.rstrip("\n"), verdict.removeprefix("verdict: ")


@pytest.mark.parametrize(("ctx", "engines"), [(65536, ["ollama", "vllm", "llama.cpp", "lmstudio"]),
                                               (262144, ["vllm", "sglang", "mlx-lm"])])
def test_each_engine_answer_is_what_its_command_prints(ctx: int, engines: list[str]) -> None:
    """64k on Llama 3.1 (no extension: served as it is) and 256k (its llama3 scaling extended)."""
    result = pick(PickInputs(ctx=ctx, config=str(LLAMA)))
    assert (result.answer["extension"] is None) == (ctx == 65536)
    for answer in engine_answers(result, engines):
        assert answer["refusal"] is None, answer
        assert answer["command"].endswith(f"--engine {answer['engine']}")
        assert _scale_output(answer["command"]) == (answer["text"], answer["verdict"])


def test_the_ollama_journey_gets_a_modelfile_with_num_ctx() -> None:
    """A Llama 3.1 user at 8k who wants 64k: pick's plan changes no rope, and --engine ollama gives the Modelfile."""
    out = json.loads(ok(run("pick", "--ctx", "64k", "--config", str(LLAMA), "--engine", "ollama", "--json")).stdout)
    (answer,) = out["engines"]
    assert "PARAMETER num_ctx 65536" in answer["text"].splitlines() and "FROM NAME" in answer["text"].splitlines()
    assert "same as transformers at 65,536 tokens" in answer["verdict"]
    text = ok(run("pick", "--ctx", "64k", "--config", str(LLAMA), "--engine", "ollama,vllm")).stdout
    assert "Serving with ollama:" in text and "   vllm serve MODEL --max-model-len 65536" in text.splitlines()
    assert "engines" not in json.loads(ok(run("pick", "--ctx", "64k", "--config", str(LLAMA), "--json")).stdout)


def test_on_a_gguf_only_engines_serving_a_gguf_keep_o_and_nothing_is_written(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    answers = {a["engine"]: a for a in engine_answers(pick(PickInputs(ctx=262144, config=str(GGUF))),
                                                      ["ollama", "vllm", "llama.cpp"])}
    assert answers["ollama"]["command"].endswith("-o NEW.gguf --engine ollama")
    assert "FROM ./NEW.gguf" in answers["ollama"]["text"]
    assert "-o" not in shlex.split(answers["vllm"]["command"])
    assert answers["llama.cpp"]["refusal"] is None and answers["llama.cpp"]["text"] is None
    assert not list(tmp_path.iterdir())


def test_an_unknown_engine_is_one_usage_error() -> None:
    assert_usage_error(run("pick", "--ctx", "64k", "--engine", "nope"), "--engine 'nope' is not known")


def test_a_config_on_stdin_is_refused_with_engine() -> None:
    """The engine answers run scale's command, which reads the model again: stdin is read once."""
    result = run("pick", "--ctx", "64k", "--config", "-", "--engine", "vllm", input=LLAMA.read_text())
    assert_usage_error(result, "give the config as a file, not - (stdin)")

"""``posenc scale --engine llamafactory|axolotl|unsloth|trl`` through the CLI, without the trainers installed: the
outputs parse (YAML, Python), carry the same rope dict as ``--engine hf-v5``, and what a trainer cannot express is one
``error:`` line with exit 2 (tests/trainers/test_hf.py runs the outputs through the trainers themselves)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import yaml
from clihelpers import assert_usage_error, ok, run

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
BARE = ["scale", "yarn", "--original-max", "32k", "--target", "128k", "--theta", "1e6", "--head-dim", "128"]


@pytest.mark.parametrize("fmt", ["axolotl", "trl"])
def test_yaml_carries_hf_v5s_dict(fmt: str) -> None:
    for args in (BARE, ["scale", "llama3", "--config", str(CORPUS / "llama-3.1-8b-instruct.json"), "--target",
                        "256k"]):
        v5 = json.loads(ok(run(*args, "--engine", "hf-v5")).stdout)
        plan = yaml.safe_load(ok(run(*args, "--engine", fmt)).stdout)
        keys = plan["model_config" if fmt == "axolotl" else "model_init_kwargs"]
        assert keys == v5


def test_unsloth_is_python_with_hf_v5s_dict() -> None:
    v5 = json.loads(ok(run(*BARE, "--engine", "hf-v5")).stdout)
    text = ok(run(*BARE, "--engine", "unsloth", "--model", "Qwen/Qwen2.5-7B-Instruct")).stdout
    call = ast.parse(text).body[-1]
    assert isinstance(call, ast.Assign) and isinstance(call.value, ast.Call)
    kwargs = {k.arg: ast.literal_eval(k.value) for k in call.value.keywords}
    assert kwargs == {"max_seq_length": 131072, "rope_scaling": v5["rope_parameters"]}
    assert ast.literal_eval(call.value.args[0]) == "Qwen/Qwen2.5-7B-Instruct"


def test_llamafactory_yaml_and_caveats() -> None:
    result = ok(run(*BARE, "--engine", "llamafactory"))
    assert yaml.safe_load(result.stdout) == {"rope_scaling": "yarn", "cutoff_len": 131072}
    assert "transformers 4.x" in result.stderr and "factor to 2.0" in result.stderr


@pytest.mark.parametrize(("args", "fmt", "needles"), [
    (["yarn", "--original-max", "32k", "--target", "80k"], "llamafactory", ("ceil(cutoff_len / 32768)",
                                                                             "cutoff_len 81920")),
    (["dynamic", "--original-max", "32k", "--factor", "4"], "llamafactory", ("never scales in training",)),
    (["ntk", "--original-max", "32k", "--factor", "4"], "llamafactory", ("no default rope scaling",)),
    (["dynamic", "--original-max", "32k", "--factor", "4"], "unsloth", ("ignores rope_scaling",)),
    (["yarn", "--config", str(CORPUS / "qwen2.5-vl-7b-instruct.json"), "--factor", "2"], "axolotl",
     ("text_config",)),
    (["linear", "--config", str(CORPUS / "gemma-3-4b-it.json"), "--target", "256k"], "trl", ("text_config",)),
    (["yarn", "--config", str(CORPUS / "mistral-7b-v0.1.json"), "--factor", "4"], "llamafactory",
     ("mistral config has no rope_scaling",)),
    (["linear", "--config", str(CORPUS / "gemma-2-9b-it.json"), "--factor", "2"], "unsloth", ("gemma2 models",)),
])
def test_refusals_are_one_line(args: list[str], fmt: str, needles: tuple[str, ...]) -> None:
    assert_usage_error(run("scale", *args, "--theta", "1e6", "--head-dim", "128", "--engine", fmt)
                       if "--config" not in args else run("scale", *args, "--engine", fmt), *needles)

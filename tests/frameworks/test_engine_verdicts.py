"""One verdict per engine: ``posenc scale --engine ENGINE`` prints the line ``posenc check`` prints for that engine,
on the config the request makes, from the same function (``frameworks.check.judge`` and ``verdict_line``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clihelpers import ok, run

from posenc_cli.engines import vllm
from posenc_cli.frameworks.check import check, judge
from posenc_cli.models.model_positions import describe
from posenc_cli.rope.scaling import ScaleRequest
from posenc_cli.scale.scaled import request_config

pytestmark = pytest.mark.numeric

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus"
GPT_OSS = str(CORPUS / "gpt-oss-20b.json")
PHI3 = str(CORPUS / "phi-3-mini-128k-instruct.json")
QWEN = str(CORPUS / "qwen2.5-7b-instruct.json")


def verdict_of(stderr: str) -> str:
    """The verdict line's words after what it was judged on ("on the patched config, ...")."""
    (line,) = [line for line in stderr.splitlines() if line.startswith("verdict: ")]
    line = line.removeprefix("verdict: ")
    return line.split(", ", 1)[1] if line.startswith("on ") else line


def check_line(config: Path, engine: str, length: int) -> str:
    """The verdict line ``posenc check`` prints for ``engine`` on ``config`` at ``length``."""
    out = run("check", str(config), "--engines", engine, "--max-model-len", str(length)).stdout
    (line,) = [line for line in out.splitlines() if line.startswith(f"{engine} ")]
    return line.split("; accepts ")[0]


@pytest.mark.parametrize(("request_args", "fmt", "length"), [
    (("yarn", "--config", GPT_OSS, "--target", "256k"), "llama.cpp", 262144),
    (("yarn", "--config", GPT_OSS, "--target", "256k"), "vllm", 262144),
    (("longrope", "--config", PHI3, "--target", "128k"), "vllm", 131072),
    (("yarn", "--config", QWEN, "--target", "128k", "--attention-factor", "1.0"), "sglang", 131072),
    (("dynamic", "--config", QWEN, "--target", "128k"), "llama.cpp", 131072),
    (("yarn", "--config", QWEN, "--target", "128k"), "torchtune", 131072),
], ids=["gpt-oss-llama.cpp", "gpt-oss-vllm", "phi3-vllm", "qwen-sglang-attention", "qwen-dynamic-llama.cpp",
        "qwen-torchtune"])
def test_scale_prints_the_verdict_check_prints_on_the_patched_config(tmp_path: Path, request_args: tuple[str, ...],
                                                                     fmt: str, length: int) -> None:
    scaled = run("scale", *request_args, "--engine", fmt)
    patched = tmp_path / "config.json"
    ok(run("scale", *request_args, "-o", str(patched)))
    engine = "llama.cpp" if fmt == "llama.cpp" else fmt
    if scaled.exit_code == 0:
        assert verdict_of(scaled.stderr) == check_line(patched, engine, length)
    else:  # the format itself refuses (llama.cpp has no dynamic NTK flag): the error, no verdict
        assert "verdict:" not in scaled.stderr and scaled.stderr.startswith("error: ")


def test_the_issues_numbers() -> None:
    """gpt-oss YaRN x2 in llama.cpp: the rounded correction range moves inv_freq by 0.976 (issue 27); Phi-3 LongRoPE
    in vLLM: the long factors at 4,096 tokens, 0.967 off (Phi-3.5's 0.968 in the issue: the same factors' rule)."""
    llama = verdict_of(ok(run("scale", "yarn", "--config", GPT_OSS, "--target", "256k",
                              "--engine", "llama.cpp")).stderr)
    assert "differs from transformers: inv_freq off by 0.976 relative (pair 17) at 262,144" in llama
    served = verdict_of(ok(run("scale", "longrope", "--config", PHI3, "--target", "128k", "--engine", "vllm")).stderr)
    assert "inv_freq the same at 131,072, off by 0.967 relative (pair 32) at 4,096" in served


def test_a_bare_request_is_judged_on_the_config_it_describes() -> None:
    argv = ["scale", "yarn", "--original-max", "32k", "--target", "128k", "--theta", "1e6", "--head-dim", "128"]
    assert verdict_of(ok(run(*argv, "--engine", "vllm")).stderr) == (f"vllm {vllm.VERSION}: same as transformers at "
                                                                     "131,072 tokens")
    assert "reference" in verdict_of(ok(run(*argv, "--engine", "hf")).stderr)
    req = ScaleRequest("yarn", 32768, 131072, 4.0, theta=1e6, head_dim=128, truncate=False)
    cfg = request_config(req)
    model = describe(cfg)
    assert model.layers[0].params["rope_type"] == "yarn" and model.layers[0].params["truncate"] is False
    got = judge(model, cfg, "llama.cpp", 131072)
    assert got.verdict is not None and got.verdict.verdict == "differs"
    # the one function: check's row for the same engine has the same numbers
    (row,) = check(model, cfg, ["llama.cpp"], 131072).verdicts
    assert got.verdict.as_dict() == row.as_dict()
    written = ok(run("scale", "yarn", "--config", QWEN, "--target", "128k", "--engine", "vllm"))
    assert "verdict: " in written.stderr
    written = ok(run("scale", "yarn", "--config", QWEN, "--target", "128k", "--engine", "hf-v5", "-o", "-"))
    assert "verdict" not in written.stderr  # a patched config written: no rendering, no verdict


def test_transformers_has_no_verdict_against_itself() -> None:
    cfg = json.loads(Path(QWEN).read_text())
    with pytest.raises(Exception, match="reference"):
        judge(describe(cfg), cfg, "hf", 32768)

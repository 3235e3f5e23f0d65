"""posenc's llama.cpp output, run through the real llama.cpp (llama-cpp-python), against transformers run with posenc's
transformers output, on the same tiny random llama (see llamacpp_harness.py and test_llamacpp_harness.py, which
prove the harness and state the tolerance: ``TOL`` = 0.1 logits, 6x the largest float32 disagreement measured).

The flags posenc prints are handed to llama.cpp the way llama-server's argument parser hands them to the context
(``common/arg.cpp``): ``--rope-scale S`` is a frequency scale of 1/S, ``--override-kv K=float:V`` a metadata
override; nothing about RoPE is computed here.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clihelpers import ok, run, write_json

pytestmark = pytest.mark.numeric

pytest.importorskip("llama_cpp")
pytest.importorskip("transformers")
pytest.importorskip("torch")

from llamacpp_harness import (  # noqa: E402
    hf_logits,
    llamacpp_logits,
    server_flags_as_kwargs,
    write_tiny_llama_gguf,
)

TOL = 0.1  # logits; justified in test_llamacpp_harness.py
MISMATCH = 5.0  # a wrong setting moves the logits by 9.9 or more there
CTX_TRAIN, N_TOKENS, HEAD_DIM = 256, 1024, 16
TINY = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "max_position_embeddings": CTX_TRAIN, "rope_theta": 10000.0}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray], np.ndarray]:
    path = tmp_path_factory.mktemp("llama") / "tiny.gguf"
    weights = write_tiny_llama_gguf(path, ctx_train=CTX_TRAIN, seed=0)
    tokens = np.random.default_rng(1).integers(0, 128, size=N_TOKENS)
    return path, weights, tokens


def llama_kwargs(argv: list[str]) -> dict[str, Any]:
    """llama-server's flags as llama.cpp context parameters (the harness's one parser)."""
    return server_flags_as_kwargs(argv)


def scale_outputs(*args: str) -> tuple[dict[str, Any], list[str]]:
    """posenc scale's transformers dict (hf-v5) and its llama.cpp flags for one request."""
    base = ["scale", *args, "--theta", "10000", "--head-dim", str(HEAD_DIM)]
    hf = json.loads(ok(run(*base, "--engine", "hf-v5")).stdout)
    flags = shlex.split(ok(run(*base, "--engine", "llama.cpp")).stdout)
    return hf, flags


def compare(model: Any, hf_overrides: dict[str, Any], argv: list[str]) -> float:
    path, weights, tokens = model
    kwargs = llama_kwargs(argv)
    n_ctx = kwargs.pop("n_ctx")
    ours = llamacpp_logits(path, tokens, n_ctx=n_ctx, **kwargs)
    theirs = hf_logits(weights, tokens, hf_config_overrides=hf_overrides)
    return float(np.abs(ours - theirs).max())


@pytest.mark.parametrize("request_args", [
    ("linear", "--original-max", "256", "--factor", "4"),
    ("ntk", "--original-max", "256", "--factor", "4"),
    ("yarn", "--original-max", "256", "--factor", "4"),
    ("yarn", "--original-max", "256", "--factor", "4", "--beta-fast", "8", "--beta-slow", "2"),
    ("yarn", "--original-max", "256", "--factor", "4", "--attention-factor", "1.0"),
], ids=["linear", "ntk", "yarn", "yarn-betas", "yarn-attention-factor"])
def test_scale_flags_make_llama_cpp_compute_what_transformers_does(model: Any, request_args: tuple[str, ...]) -> None:
    hf, flags = scale_outputs(*request_args)
    assert compare(model, hf, flags) <= TOL


def test_check_says_llama_cpp_differs_for_truncate_false_and_it_does(model: Any, tmp_path: Path) -> None:
    cfg = {**TINY, "max_position_embeddings": 4 * CTX_TRAIN,
           "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": CTX_TRAIN,
                            "truncate": False}}
    result = run("check", write_json(tmp_path, cfg), "--engines", "llama.cpp", "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    (cpp,) = report["engines"]
    assert cpp["verdict"] == "differs" and cpp["groups"][0]["inv_freq_rel_diff"] > 1e-3
    v5 = {"rope_parameters": {**cfg["rope_scaling"], "rope_theta": 10000.0},
          "max_position_embeddings": cfg["max_position_embeddings"]}
    # the real llama.cpp differs from transformers by far more than rounding ...
    assert compare(model, v5, cpp["invocation"]) > MISMATCH
    # ... and computes exactly what posenc's model of it says: transformers with the range rounded
    rounded = {**v5, "rope_parameters": {**v5["rope_parameters"], "truncate": True}}
    assert compare(model, rounded, cpp["invocation"]) <= TOL


def test_check_invocation_for_a_converted_yarn_model_matches(model: Any, tmp_path: Path) -> None:
    """A YaRN model with its own attention factor: check's invocation carries the override that llama.cpp needs."""
    cfg = {**TINY, "max_position_embeddings": 4 * CTX_TRAIN,
           "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": CTX_TRAIN,
                            "attention_factor": 1.0}}
    result = run("check", write_json(tmp_path, cfg), "--engines", "llama.cpp", "--json")
    (cpp,) = json.loads(result.stdout)["engines"]
    assert cpp["verdict"] == "same" and "--override-kv" in cpp["invocation"]
    v5 = {"rope_parameters": {**cfg["rope_scaling"], "rope_theta": 10000.0}, "max_position_embeddings": 1024}
    assert compare(model, v5, cpp["invocation"]) <= TOL
    without = [a for a in cpp["invocation"] if not a.startswith(("--override-kv", "llama.rope", "ARCH.rope"))]
    assert compare(model, v5, without) > MISMATCH  # the override is what makes it the same

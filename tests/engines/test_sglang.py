"""posenc's model of SGLang 0.5.23 against SGLang's own rotary classes (tests/harness/vllm_harness.py runs them in a
subprocess; they need triton and IPython, which CI does not install, so these skip there and were run locally with
``POSENC_SGLANG_PYTHONPATH``). Tolerance: inverse frequencies rtol 1e-6 (float32 both sides)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from posenc_cli.engines import sglang
from posenc_cli.models.model_positions import describe
from posenc_cli.models.record import spec_for

pytestmark = pytest.mark.numeric

vh = pytest.importorskip("vllm_harness")
if not vh.sglang_available():
    pytest.skip("sglang, or the triton/IPython its import chain needs, is not available", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
DYNAMIC = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
           "num_attention_heads": 32, "max_position_embeddings": 4096, "rope_theta": 10000.0,
           "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}}
CASES: dict[str, dict[str, Any]] = {
    "dynamic": DYNAMIC,
    "qwen2.5 + yarn": json.loads((ROOT / "docs/examples/qwen2.5-7b-instruct-yarn.json").read_text()),
    "llama 3.1": json.loads((ROOT / "tests/corpus/llama-3.1-8b-instruct.json").read_text()),
}


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, Any]]:
    specs = []
    for cfg in CASES.values():
        model = describe(cfg)
        layer = model.layers[0]
        spec = spec_for(model, layer)
        specs.append({"rope_parameters": dict(layer.params), "head_dim": spec.head_dim, "rotary_dim": spec.rotary_dim,
                      "max_position": model.max_position_embeddings, "model_arch": cfg["architectures"][0]})
    return dict(zip(CASES, vh.sglang_rope_many(specs), strict=True))


@pytest.mark.parametrize("name", list(CASES))
def test_sglang_builds_what_posenc_says(results: dict[str, dict[str, Any]], name: str) -> None:
    cfg = CASES[name]
    model = describe(cfg)
    (group,) = sglang.run(model, cfg, model.max_position_embeddings or 0).groups
    got = np.asarray(results[name]["inv_freq"], dtype=np.float64)
    np.testing.assert_allclose(got, group.inv_freq.astype(np.float64), rtol=1e-6, atol=0)
    assert float(results[name]["mscale"]) == pytest.approx(group.attention_factor, rel=1e-6)


def test_sglang_format_for_dynamic_builds_transformers_base_at_the_serving_length() -> None:
    """posenc scale dynamic --engine sglang keeps max_position_embeddings at the trained length: SGLang's one base is
    then transformers' for the serving length."""
    import shlex

    from clihelpers import ok, run

    from posenc_cli.rope.frequencies import RopeSpec, compute

    argv = shlex.split(ok(run("scale", "dynamic", "--original-max", "4k", "--target", "16k", "--theta", "10000",
                              "--head-dim", "128", "--engine", "sglang")).stdout)
    over = json.loads(argv[argv.index("--json-model-override-args") + 1])
    rope, window = over["rope_scaling"], over["max_position_embeddings"]
    (result,) = vh.sglang_rope_many([{"rope_parameters": rope, "head_dim": 128, "rotary_dim": 128,
                                      "max_position": window, "model_arch": "LlamaForCausalLM"}])
    hf = compute(RopeSpec(rope, 128, window), 16384)
    np.testing.assert_allclose(np.asarray(result["inv_freq"], dtype=np.float64), hf.inv_freq.astype(np.float64),
                               rtol=1e-6)

"""posenc's model of vLLM (posenc_cli/engines/vllm.py VERSION, 0.34.0) against vLLM's own code
(tests/harness/vllm_harness.py: its ModelConfig, hf-overrides merge, length check and rotary classes, on CPU): for each
config, the overrides posenc prints go through vLLM's config path, and the rotary table vLLM builds must be the one
posenc says it builds.

Tolerances: inverse frequencies rtol 1e-6 (both sides float32; the table's read-back is exact to 1.1e-7); the cos/sin
magnitude rel 1e-6 (vLLM folds it into a float32 table).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from posenc_cli.engines import vllm as vllm_model
from posenc_cli.frameworks.check import check
from posenc_cli.models.model_positions import describe

pytestmark = pytest.mark.numeric

vh = pytest.importorskip("vllm_harness")
if not vh.vllm_available():
    pytest.skip(f"vLLM {vllm_model.VERSION} does not import on this machine (see tests/harness/vllm_harness.py)",
                allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus"
DYNAMIC = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
           "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 2, "intermediate_size": 11008,
           "vocab_size": 32000, "max_position_embeddings": 8192, "rope_theta": 10000.0,
           "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}}


def load(name: str) -> dict[str, Any]:
    path = ROOT / name
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def card_patched(name: str, rope: dict[str, Any]) -> dict[str, Any]:
    """A corpus config with the rope dict its model card tells users to add (max_position_embeddings as shipped)."""
    cfg = load(name)
    cfg["rope_scaling"] = rope
    return cfg


QWEN_CARD = card_patched("tests/corpus/qwen2.5-7b-instruct.json",
                         {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"})

CASES = [
    ("qwen2.5 + yarn x4", load("docs/examples/qwen2.5-7b-instruct-yarn.json"), 131072),
    # the card's patch serves 128k (posenc_cli.rope.windows), but vLLM admits only max_position_embeddings for yarn
    ("qwen2.5 card-patched yarn x4", QWEN_CARD, 131072),
    ("llama 3.1", load("tests/corpus/llama-3.1-8b-instruct.json"), 131072),
    ("gpt-oss truncate=false", load("tests/corpus/gpt-oss-20b.json"), 131072),
    ("deepseek-v3", load("tests/corpus/deepseek-v3.json"), 163840),
    ("phi-3 longrope at 128k", load("tests/fixtures/phi-3-mini-128k.json"), 131072),
    ("phi-3 longrope at 4k", load("tests/fixtures/phi-3-mini-128k.json"), 4096),
    ("dynamic x4 with posenc's override", DYNAMIC, 32768),
    ("dynamic as shipped, within its window", DYNAMIC, 8192),
]


def overrides_of(invocation: list[str]) -> dict[str, Any] | None:
    if "--hf-overrides" not in invocation:
        return None
    over: dict[str, Any] = json.loads(invocation[invocation.index("--hf-overrides") + 1])
    return over


@pytest.mark.parametrize(("name", "cfg", "max_model_len"), CASES, ids=[c[0] for c in CASES])
def test_vllm_builds_what_posenc_says(name: str, cfg: dict[str, Any], max_model_len: int) -> None:
    model = describe(cfg)
    run = vllm_model.run(model, cfg, max_model_len)
    (group,) = run.groups
    over = overrides_of(run.invocation)
    # vLLM validates a quantization config against the float32 table dtype; it does not touch the rope
    served = {k: v for k, v in cfg.items() if k != "quantization_config"}
    cos, sin, extra = vh.vllm_rope_from_hf_config(served, over, max_model_len,
                                                  allow_long_max_model_len=bool(run.needs))
    assert extra["max_model_len"] == max_model_len
    vllm_inv = extra["inv_freq"].double().numpy()
    np.testing.assert_allclose(vllm_inv, group.inv_freq.astype(np.float64), rtol=1e-6, atol=0)
    assert float(extra["mscale"]) == pytest.approx(group.attention_factor, rel=1e-6)
    assert extra.get("softmax_scale_multiplier", 1.0) == pytest.approx(group.softmax_scale, rel=1e-9)
    # the table covers every position served (vLLM's dynamic table, unfixed, does not)
    assert extra["cache_len"] >= max_model_len


@pytest.mark.parametrize(("name", "cfg", "max_model_len"), CASES, ids=[c[0] for c in CASES])
def test_vllm_accepts_what_posenc_says(name: str, cfg: dict[str, Any], max_model_len: int) -> None:
    run = vllm_model.run(describe(cfg), cfg, max_model_len)
    _, settled = vh.vllm_config_after_overrides(cfg, overrides_of(run.invocation), max_model_len)
    if run.needs:
        assert isinstance(settled, str) and "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in settled
    else:
        assert settled == max_model_len


def text_only(name: str) -> dict[str, Any]:
    """A multimodal corpus config's text_config served alone (vLLM's multimodal Gemma 3 class needs torchvision,
    which does not install beside the CPU torch here; the length check reads the same text config)."""
    cfg = load(name)
    text: dict[str, Any] = cfg["text_config"]
    return {**text, "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"]}


ADMITS = {
    "gemma 3 27b text (linear x8)": text_only("tests/corpus/gemma-3-27b-it.json"),
    "gemma 3 1b": load("tests/corpus/gemma-3-1b-it.json"),
    "qwen2.5 card-patched yarn": QWEN_CARD,
    **{name: load(f"tests/corpus/{name}") for name in (
        "qwen2.5-7b-instruct.json", "llama-3.1-8b-instruct.json", "gpt-oss-20b.json", "deepseek-v3.json",
        "phi-3-mini-128k-instruct.json", "olmo-3.1-32b-instruct.json")},
    "dynamic x4": DYNAMIC,
}


@pytest.mark.parametrize("name", list(ADMITS))
def test_the_longest_length_vllm_admits_is_posencs(name: str) -> None:
    """vLLM's own length check at posenc's derived length and one past it: Gemma 3's linear x8 is not multiplied
    (vLLM skips the factor for every gemma3 model type), the other types as :mod:`posenc_cli.engines.vllm` says."""
    cfg = ADMITS[name]
    accepts = vllm_model.derived_max_len(describe(cfg))
    assert vh.vllm_config_after_overrides(cfg, None, accepts)[1] == accepts
    _, past = vh.vllm_config_after_overrides(cfg, None, accepts + 1)
    assert isinstance(past, str) and "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in past


def test_a_card_patched_qwen_needs_the_variable_at_the_window_it_serves() -> None:
    model = describe(QWEN_CARD)
    assert model.layers[0].params["factor"] == 4.0
    run = vllm_model.run(model, QWEN_CARD, 131072)
    assert run.accepts == 32768 and run.needs == [vllm_model.ENV_LONG]


def test_a_window_past_the_derived_length_needs_the_variable() -> None:
    cfg = load("tests/corpus/qwen2.5-7b-instruct.json")
    run = vllm_model.run(describe(cfg), cfg, 65536)
    assert run.needs == [vllm_model.ENV_LONG] and run.accepts == 32768
    _, settled = vh.vllm_config_after_overrides(cfg, None, 65536)
    assert isinstance(settled, str) and "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in settled


def test_dynamic_as_shipped_is_plain_rope_with_a_short_table() -> None:
    """What the issue found: vLLM's dynamic NTK keeps theta and a max_position_embeddings-row table, while its length
    check accepts 4x more. posenc's override fixes both."""
    cos, sin, extra = vh.vllm_rope_from_hf_config(DYNAMIC, None, 8192)
    plain = describe({**DYNAMIC, "rope_scaling": None})
    theta_inv = check(plain, DYNAMIC, ["vllm"], 8192).reference.groups[0].inv_freq
    np.testing.assert_allclose(extra["inv_freq"].double().numpy(), theta_inv, rtol=1e-6)
    assert extra["cache_len"] == 8192
    _, settled = vh.vllm_config_after_overrides(DYNAMIC, None, 32768)
    assert settled == 32768  # accepted, past the end of its own table


def test_a_rope_override_without_theta_loses_the_models_theta() -> None:
    """Why posenc's override always carries rope_theta: vLLM replaces the dict whole."""
    cfg = load("tests/corpus/qwen2.5-7b-instruct.json")
    rope, _ = vh.vllm_config_after_overrides(
        cfg, {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
              "max_position_embeddings": 131072}, 131072)
    assert rope.get("rope_theta") != 1e6
    ours = vllm_model.rope_overrides(describe(cfg).layers[0].params | {"rope_type": "yarn", "factor": 4.0,
                                                                         "original_max_position_embeddings": 32768},
                                     serve_len=131072, trained_len=32768, text_config=False)
    rope, settled = vh.vllm_config_after_overrides(cfg, ours, 131072)
    assert rope["rope_theta"] == 1e6 and settled == 131072


# --- posenc scale --engine vllm, end to end: vLLM's table equals transformers' with posenc's hf-v5 output

def _scale(*args: str) -> tuple[dict[str, Any], dict[str, Any]]:
    from clihelpers import ok, run

    hf = json.loads(ok(run("scale", *args, "--engine", "hf-v5")).stdout)
    argv = ok(run("scale", *args, "--engine", "vllm")).stdout.split(" --hf-overrides ")[1]
    over = json.loads(argv.split(" --max-model-len ")[0].strip("'"))
    return hf, over


@pytest.mark.parametrize("args", [
    ("yarn", "--config", "tests/corpus/qwen2.5-7b-instruct.json", "--factor", "4"),
    ("dynamic", "--config", "tests/corpus/qwen2.5-7b-instruct.json", "--factor", "4"),
    ("yarn", "--config", "tests/corpus/gpt-oss-20b.json", "--target", "256k", "--fine-tuned"),
    # the model's own llama3 x8 times the jump: x16 from the same 8k for 128k -> 256k
    ("llama3", "--config", "tests/corpus/llama-3.1-8b-instruct.json", "--target", "256k"),
], ids=["qwen-yarn", "qwen-dynamic", "gpt-oss-yarn-256k", "llama31-own-llama3-256k"])
def test_scale_vllm_output_builds_transformers_table(args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from test_engine_harness import hf_config, hf_cos_sin

    monkeypatch.chdir(ROOT)
    hf, over = _scale(*args)
    cfg = load(args[2])
    served = {k: v for k, v in cfg.items() if k not in ("quantization_config", "rope_scaling", "rope_theta")}
    target = hf["max_position_embeddings"] if args[0] != "dynamic" else over["max_position_embeddings"]
    cos, sin, extra = vh.vllm_rope_from_hf_config(served, over, target)
    assert extra["cache_len"] >= target
    hf_cfg = hf_config({**served, **hf, "max_position_embeddings": hf["max_position_embeddings"]})
    # past the original length, up to the last position served (transformers at the full serving length)
    positions = torch.arange(target)
    hcos, hsin, _ = hf_cos_sin(hf_cfg, positions)
    original = int(over["rope_parameters"].get("original_max_position_embeddings", 32768))
    tail = slice(original, target)
    # both tables are torch's float32 cos/sin of the same float32 angles (measured: bit-identical here); a CPU whose
    # kernels take another path for one tensor length may move a value by a few ulps (< 1e-6 for |values| <= 1.35)
    assert float((cos[tail] - hcos[tail]).abs().max()) <= 1e-6
    assert float((sin[tail] - hsin[tail]).abs().max()) <= 1e-6


def test_a_per_layer_model_keeps_its_other_group_through_the_override(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemma 3 1B (per-layer rope) to 64k: vLLM's own config path ends with the full-attention group at linear x2 and
    the sliding group exactly as shipped, and accepts the new window (the override carries the whole per-layer
    dict). The text-only model: vLLM's multimodal Gemma 3 class does not inspect on a CPU-only install."""
    from clihelpers import ok, run

    monkeypatch.chdir(ROOT)
    line = ok(run("scale", "linear", "--config", "tests/corpus/gemma-3-1b-it.json", "--target", "64k",
                  "--engine", "vllm")).stdout
    over = json.loads(line.split(" --hf-overrides ")[1].split(" --max-model-len ")[0].strip("'"))
    rope, settled = vh.vllm_config_after_overrides(load("tests/corpus/gemma-3-1b-it.json"), over, 65536)
    assert settled == 65536
    assert rope["full_attention"]["rope_type"] == "linear" and rope["full_attention"]["factor"] == 2.0
    assert rope["full_attention"]["rope_theta"] == 1e6
    assert rope["sliding_attention"]["rope_type"] == "default" and rope["sliding_attention"]["rope_theta"] == 1e4


def test_vllm_reads_the_omni_thinkers_text_config_as_posenc_does() -> None:
    """Qwen2.5-Omni keeps its language model in thinker_config.text_config. vLLM takes the text config with
    get_hf_text_config (transformers' get_text_config); its rope dict, window and head geometry are the ones posenc
    reads, so check's vLLM verdict compares the same model. (vLLM's own model inspection of this architecture needs
    torchvision, which cannot be installed beside the CPU torch here: the rope class is not built for it.)"""
    import warnings

    from transformers import AutoConfig
    from vllm.transformers_utils.config import get_hf_text_config

    cfg = {k: v for k, v in load("tests/corpus/qwen2.5-omni-7b-awq.json").items() if k != "quantization_config"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = get_hf_text_config(AutoConfig.for_model(**cfg))
    model = describe(cfg)
    (layer,) = model.layers
    theirs = {k: v for k, v in text.rope_parameters.items() if k != "type"}
    assert theirs == layer.params
    assert text.max_position_embeddings == model.max_position_embeddings
    assert text.hidden_size // text.num_attention_heads == model.head_dim

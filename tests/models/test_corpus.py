"""The real-config corpus: every shipped model's config.json, read by posenc and by transformers' own config class
and rotary embedding, must agree per layer group on inv_freq, attention factor, rotary dim and which layers rotate
(measured: a tiny random model of the file's config runs one forward pass, :func:`hf_rotating`).

Tolerance: inv_freq rtol 1e-6. Both sides compute in float32 with the same operation order; the one difference is
the power (torch's float32 pow against posenc's float64 pow rounded once), at most an ulp or two of float32
(1.2e-7 relative each). Attention factors are Python floats on both sides (rel 1e-9).
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from posenc_cli.models.config_keys import infer_model_type
from posenc_cli.models.model_positions import describe
from posenc_cli.models.record import spec_for
from posenc_cli.rope.frequencies import compute

pytestmark = pytest.mark.numeric

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
SOURCES = json.loads((CORPUS / "SOURCES.json").read_text(encoding="utf-8"))
FILES = sorted(p for p in CORPUS.glob("*.json") if p.name != "SOURCES.json")
INV_RTOL = 1e-6


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def test_corpus_is_real_and_sourced() -> None:
    assert len(FILES) >= 30
    for path in FILES:
        entry = SOURCES.get(path.name)
        assert entry, f"{path.name} has no entry in SOURCES.json"
        assert entry["repo"] and entry["path"] and entry["url"].startswith("https://"), path.name
    assert not set(SOURCES) - {p.name for p in FILES} - {"_not_found"}, "SOURCES.json lists a file that is gone"


def test_corpus_covers_every_case_the_reader_handles() -> None:
    seen: set[str] = set()
    for path in FILES:
        model = describe(load(path))
        if model.text_source == "text_config":
            seen.add("text_config")
        if len(model.layers) > 1:
            seen.add("per-layer-type rope")
        if model.no_rope and model.layers:
            seen.add("layers without rope")
        if model.family == "none":
            seen.add("no rope at all")
        if model.softmax_scale != 1.0:
            seen.add("softmax mscale")
        types = {layer.params["rope_type"] for layer in model.layers}
        seen |= {f"rope_type {t}" for t in types}
        if any(layer.head_dim for layer in model.layers):
            seen.add("per-group head dim")
    assert seen >= {"text_config", "per-layer-type rope", "layers without rope", "no rope at all", "softmax mscale",
                    "rope_type default", "rope_type linear", "rope_type yarn", "rope_type longrope",
                    "rope_type llama3", "rope_type proportional", "per-group head dim"}, seen


# --- parity with transformers ---------------------------------------------------------------------------------

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
import generate_layer_rotation as gen  # noqa: E402
from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: E402

# remote-code model types that transformers reads with one of its own classes (as Kimi K2.5's config does)
ALIASES = {"kimi_k2": "deepseek_v3"}
NO_ROPE_TYPES = {"nemotron_h", "jamba", "kimi_linear"}


def hf_config(cfg: dict[str, Any]) -> Any:
    d = copy.deepcopy(cfg)  # config classes mutate nested dicts
    model_type = d.get("model_type") or (infer_model_type(d) or ("",))[0]
    model_type = ALIASES.get(model_type, model_type)
    if model_type not in CONFIG_MAPPING:
        pytest.skip(f"transformers {transformers.__version__} has no config class for model_type {model_type!r}")
    if not CONFIG_MAPPING[model_type].__module__.startswith("transformers."):
        # another package registered it (vLLM adds its own ChatGLMConfig when imported): remote code, not transformers;
        # posenc reads it as that engine does, proven in test_remote_code.py
        pytest.skip(f"model_type {model_type!r} is registered by {CONFIG_MAPPING[model_type].__module__}, "
                    "not transformers")
    d["model_type"] = model_type
    if isinstance(d.get("text_config"), dict) and d["text_config"].get("model_type") in ALIASES:
        d["text_config"]["model_type"] = ALIASES[d["text_config"]["model_type"]]
    return CONFIG_MAPPING[model_type].from_dict(d)


def hf_rotary(text: Any) -> Any:
    """The text model's own rotary embedding class, built from the config alone (no weights)."""
    module_name = type(text).__module__.replace(".configuration_", ".modeling_")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:  # a config class without model code (EXAONE 3.5 runs as remote code)
        pytest.skip(f"transformers {transformers.__version__} has no model code for {text.model_type!r}")
    candidates = [obj for name, obj in vars(module).items()
                  if inspect.isclass(obj) and name.endswith("RotaryEmbedding") and obj.__module__ == module_name
                  and not any(w in name for w in ("Vision", "Audio", "Encoder", "Patch"))]
    text_first = sorted(candidates, key=lambda c: ("Text" not in c.__name__, c.__name__))
    for cls in text_first:
        try:
            return cls(text)
        except (TypeError, AttributeError, KeyError):
            continue
    pytest.fail(f"no rotary class in {module_name} builds from {type(text).__name__}")


#: Corpus files whose tiny random model does not build or run on CPU, and why: their per-layer check is only that
#: posenc accounts for every layer. Each is checked to still fail, so the list cannot go stale.
UNMEASURED = {
    "deepseek-v4-flash.json": "over 200M parameters even shrunk (its compressor and indexer keep their sizes)",
    "nemotron-3-nano-30b-a3b-bf16.json": "over 200M parameters even shrunk (52 Mamba layers)",
    "nemotron-h-56b-base-8k.json": "over 200M parameters even shrunk (118 Mamba layers)",
    "gemma-4-26b-a4b.json": "its MoE router's top-k exceeds the shrunk expert count",
    "glm-4.1v-9b-thinking.json": "its 3-D rope sections do not fit the shrunk rotary width",
}


def hf_rotating(text: Any) -> list[int] | None:
    """The layers whose attention applies RoPE in transformers' own forward pass: a tiny random model of this config
    with every layer kept (``tests/harness/generate_layer_rotation.py``), or None when it does not build on CPU."""
    d = gen.shrink(json.loads(json.dumps(text.to_dict(), default=str)), int(text.num_hidden_layers))
    with gen.quiet():
        try:
            build = gen.measure(type(text), d)
        except Exception:  # noqa: BLE001 - listed in UNMEASURED, checked below
            return None
    return [i for i, x in enumerate(build["layers"]) if x is not None]


def hf_groups(text: Any) -> dict[str, tuple[np.ndarray, float]]:
    rot = hf_rotary(text)
    if isinstance(rot.rope_type, dict):
        return {lt: (getattr(rot, f"{lt}_inv_freq").numpy(), float(getattr(rot, f"{lt}_attention_scaling")))
                for lt in rot.rope_type}
    return {"": (rot.inv_freq.numpy(), float(rot.attention_scaling))}


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_reader_matches_transformers(path: Path) -> None:
    cfg = load(path)
    hf = hf_config(cfg)
    text = hf.get_text_config(decoder=True)
    model = describe(cfg)
    if text.model_type in NO_ROPE_TYPES:
        assert not model.layers and model.family == "none", "transformers builds no rotary embedding here"
        return
    groups = hf_groups(text)
    assert model.family == "rope"
    if "" in groups:
        assert len(model.layers) == 1, [layer.name for layer in model.layers]
        pairs = [(model.layers[0], groups[""])]
    else:
        by_name = {layer.name: layer for layer in model.layers}
        assert set(by_name) == set(groups), (set(by_name), set(groups))
        pairs = [(by_name[name], groups[name]) for name in groups]
    for layer, (hf_inv, hf_attention) in pairs:
        freqs = compute(spec_for(model, layer), None, top_level=model.top_level)
        np.testing.assert_allclose(freqs.inv_freq, hf_inv, rtol=INV_RTOL, atol=0, err_msg=layer.name)
        assert freqs.attention_factor == pytest.approx(hf_attention, rel=1e-9), layer.name
        assert spec_for(model, layer).rotary_dim == 2 * hf_inv.shape[0], layer.name
    n = text.num_hidden_layers
    ours = sorted(i for layer in model.layers for i in (layer.layers or []))
    still = sorted(i for g in model.no_rope for i in (g.layers or []))
    measured = hf_rotating(text)
    assert (measured is None) == (path.name in UNMEASURED), UNMEASURED.get(path.name, "the model did not build")
    if measured is None:
        assert sorted(ours + still) == list(range(n))
    else:
        assert ours == measured
        assert still == sorted(set(range(n)) - set(measured))
    if "" not in groups:  # per-layer-type rope: each layer is in the group of its type
        for layer in model.layers:
            for i in layer.layers or []:
                lt = text.layer_types[i]
                expected = ("main" if lt == "sliding_attention" else "compress") if text.model_type == "deepseek_v4" \
                    else lt
                assert layer.name == expected, (i, lt, layer.name)


MLA = [p for p in FILES if describe(load(p)).softmax_scale != 1.0 or p.name.startswith(("deepseek-v3", "minicpm3"))]


@pytest.mark.parametrize("path", MLA, ids=[p.name for p in MLA])
def test_softmax_scale_matches_the_attention_module(path: Path) -> None:
    """DeepSeek-style attention multiplies its softmax scale by mscale(factor, mscale_all_dim)^2."""
    cfg = load(path)
    text = hf_config(cfg).get_text_config(decoder=True)
    module = importlib.import_module(type(text).__module__.replace(".configuration_", ".modeling_"))
    attention = next(obj for name, obj in vars(module).items()
                     if name.endswith("Attention") and inspect.isclass(obj) and "Flash" not in name
                     and obj.__module__ == module.__name__ and "layer_idx" in inspect.signature(obj).parameters)
    with torch.device("meta"):  # the scale is a Python float set in __init__; no weights are allocated
        attn = attention(text, layer_idx=0)
    plain = text.qk_head_dim ** -0.5 if hasattr(text, "qk_head_dim") else text.head_dim ** -0.5
    assert describe(cfg).softmax_scale == pytest.approx(attn.scaling / plain, rel=1e-12)
    assert math.isfinite(attn.scaling)


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_converted_configs_build_the_same_rotary_embedding_in_transformers(path: Path) -> None:
    """``posenc convert --to v5`` output, loaded by transformers' own config class, gives the same frequencies."""
    from posenc_cli.errors import PosencError
    from posenc_cli.models.convert import convert

    cfg = load(path)
    original = hf_config(cfg).get_text_config(decoder=True)
    if original.model_type in NO_ROPE_TYPES:
        pytest.skip("no rotary embedding")
    try:
        v5 = convert(cfg, "v5")
    except PosencError as exc:
        pytest.skip(str(exc))
    before, after = hf_groups(original), hf_groups(hf_config(v5).get_text_config(decoder=True))
    assert set(before) == set(after)
    for name in before:
        np.testing.assert_array_equal(after[name][0], before[name][0], err_msg=name)
        assert after[name][1] == before[name][1]

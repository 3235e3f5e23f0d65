"""``posenc audit`` for axolotl 0.21 runs that train with dynamic NTK, and for models with per-layer rope (Gemma 3:
one rope dict per layer type): every group is compared and each finding names its group.

Hand-made checkpoints write what an export can hold; the last tests build the export with axolotl's own code
(tests/harness/axolotl_export.py) and transformers' save_pretrained on CPU, and run transformers' rotary classes to
show what
training computed.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import trainers_harness as th
import yaml
from clihelpers import assert_usage_error, ok, run, write_json

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
LLAMA2 = {"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 16, "num_hidden_layers": 2,
          "max_position_embeddings": 4096, "rope_theta": 10000.0}
DYNAMIC = {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0}
DYNAMIC_YAML = {"base_model": "meta-llama/Llama-2-7b-hf", "sequence_len": 16384,
                "model_config": {"rope_parameters": DYNAMIC}}
GEMMA3 = json.loads((CORPUS / "gemma-3-1b-it.json").read_text())  # v4 file: rope_theta + rope_local_base_freq
GEMMA3_ROPE = {"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000000.0},
               "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
GEMMA3_YAML = {"base_model": "google/gemma-3-1b-it", "sequence_len": 131072,
               "model_config": {"rope_parameters": GEMMA3_ROPE}}

needs_axolotl = pytest.mark.skipif(th.installed("axolotl") is None or importlib.util.find_spec("addict") is None,
                                   reason="axolotl 0.21.0 (with addict) is not installed")


def checkpoint(folder: Path, cfg: dict[str, Any], name: str) -> str:
    out = folder / name
    out.mkdir()
    write_json(out, cfg)
    return str(out)


def settings(folder: Path, data: dict[str, Any], name: str = "train.yml") -> str:
    path = folder / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def audit_json(ckpt: str, train: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    result = run("audit", ckpt, "--trained-with", train, "--json", *extra)
    assert "Traceback" not in result.stderr
    return result.exit_code, json.loads(result.stdout), result.stderr


def v5_gemma3(rope: dict[str, Any], window: int = 131072) -> dict[str, Any]:
    cfg = {k: v for k, v in GEMMA3.items() if k not in ("rope_theta", "rope_local_base_freq", "rope_scaling")}
    return {**cfg, "max_position_embeddings": window, "rope_parameters": rope}


# ------------------------------------------------------------------ dynamic NTK


def test_dynamic_live_config_passes(tmp_path: Path) -> None:
    # axolotl saves the live config: the dict it set, max_position_embeddings raised to sequence_len
    good = checkpoint(tmp_path, {**LLAMA2, "max_position_embeddings": 16384, "rope_parameters": DYNAMIC}, "good")
    result = ok(run("audit", good, "--trained-with", settings(tmp_path, DYNAMIC_YAML)))
    assert "trained plain RoPE up to 16384" in result.stderr  # the note: what the export must carry


def test_dynamic_window_finding(tmp_path: Path) -> None:
    # the dynamic dict with the base model's window: served dynamic scales from 4096, training from 16384
    bad = checkpoint(tmp_path, {**LLAMA2, "rope_parameters": DYNAMIC}, "bad")
    train = settings(tmp_path, DYNAMIC_YAML)
    dest = tmp_path / "fixed.json"
    code, out, _ = audit_json(bad, train, "--write", str(dest))
    assert code == 1
    assert [(f["kind"], f["group"]) for f in out["findings"]] == [("dynamic-window", None)]
    assert out["trained"]["max_position_embeddings"] == 16384
    assert out["numbers"]["pairs_differing"] > 0
    again = checkpoint(tmp_path, json.loads(dest.read_text()), "again")
    ok(run("audit", again, "--trained-with", train))


def test_dynamic_source_copy_is_dropped_keys(tmp_path: Path) -> None:
    code, out, _ = audit_json(checkpoint(tmp_path, LLAMA2, "src"), settings(tmp_path, DYNAMIC_YAML))
    assert code == 1
    assert [f["kind"] for f in out["findings"]] == ["dropped-keys", "dynamic-window"]


def test_transformers_dynamic_trains_plain_rope_after_the_raise() -> None:
    """What the dynamic note says, from transformers' own rotary class: built at 4096, config raised to 16384 (what
    axolotl's _adjust_model_config does), a 16k forward computes plain RoPE; the exported config (16384) serves
    the same, and the base window (4096) would serve another spectrum."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    def config(window: int, rope: dict[str, Any]) -> Any:
        return transformers.LlamaConfig(**{**LLAMA2, "max_position_embeddings": window, "rope_parameters": rope})

    live = config(4096, DYNAMIC)
    module = LlamaRotaryEmbedding(live)
    live.max_position_embeddings = 16384
    x = torch.zeros(1, 1, 128)
    module(x, torch.arange(16384)[None])
    plain = LlamaRotaryEmbedding(config(16384, {"rope_type": "default", "rope_theta": 10000.0})).inv_freq
    assert torch.equal(module.inv_freq, plain)
    served = LlamaRotaryEmbedding(config(16384, DYNAMIC))
    served(x, torch.arange(16384)[None])
    assert torch.equal(served.inv_freq, plain)
    stale = LlamaRotaryEmbedding(config(4096, DYNAMIC))
    stale(x, torch.arange(16384)[None])
    assert not torch.equal(stale.inv_freq, plain)


# ------------------------------------------------------------------ per-layer rope (Gemma 3)


def test_per_layer_right_export_passes(tmp_path: Path) -> None:
    ok(run("audit", checkpoint(tmp_path, v5_gemma3(GEMMA3_ROPE), "good"), "--trained-with",
           settings(tmp_path, GEMMA3_YAML)))


@pytest.mark.parametrize(("name", "cfg", "found"), [
    # the sliding group's theta replaced by the full group's (one rope_theta for both): its group is named
    ("sliding-theta", v5_gemma3({**GEMMA3_ROPE, "sliding_attention": {"rope_type": "default", "rope_theta": 1e6}}),
     [("theta-lost-v5", "sliding_attention")]),
    # the full group's factor changed, the sliding group right
    ("full-factor", v5_gemma3({**GEMMA3_ROPE, "full_attention": {**GEMMA3_ROPE["full_attention"], "factor": 8.0}}),
     [("factor", "full_attention")]),
    # both groups wrong at once: one finding each, each named
    ("both", v5_gemma3({"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                        "sliding_attention": {"rope_type": "default", "rope_theta": 1e6}}),
     [("dropped-keys", "full_attention"), ("theta-lost-v5", "sliding_attention")]),
    # the base model's v4 file: the full group lost its scaling, and the window
    ("source", GEMMA3, [("dropped-keys", "full_attention"), ("window", None)]),
])
def test_per_layer_findings_name_their_group(tmp_path: Path, name: str, cfg: dict[str, Any],
                                             found: list[tuple[str, str | None]]) -> None:
    train = settings(tmp_path, GEMMA3_YAML)
    dest = tmp_path / "fixed.json"
    code, out, _ = audit_json(checkpoint(tmp_path, cfg, name), train, "--write", str(dest))
    assert code == 1
    assert [(f["kind"], f["group"]) for f in out["findings"]] == found
    for finding in out["findings"]:
        assert finding["group"] is None or finding["message"].startswith(f"{finding['group']}: ")
    again = checkpoint(tmp_path, json.loads(dest.read_text()), "again")
    ok(run("audit", again, "--trained-with", train))
    text = run("audit", checkpoint(tmp_path, cfg, "text"), "--trained-with", train)
    assert all(f"{kind} ({group})" in text.stdout for kind, group in found if group)


def test_flat_dict_on_a_per_layer_model_is_an_error(tmp_path: Path) -> None:
    """axolotl's setattr of one flat dict on Gemma 3: transformers 5's rotary class looks it up per layer type."""
    train = settings(tmp_path, {**GEMMA3_YAML, "model_config": {"rope_parameters": GEMMA3_ROPE["full_attention"]}})
    assert_usage_error(run("audit", checkpoint(tmp_path, v5_gemma3(GEMMA3_ROPE), "c"), "--trained-with", train),
                       "one dict per layer type", "KeyError")
    transformers = pytest.importorskip("transformers")
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

    config = transformers.AutoConfig.for_model(**GEMMA3)
    config.rope_parameters = dict(GEMMA3_ROPE["full_attention"])
    with pytest.raises(KeyError, match="full_attention"):
        Gemma3RotaryEmbedding(config)


@pytest.mark.parametrize(("rope", "needle"), [
    ({"full_attention": GEMMA3_ROPE["full_attention"]}, "has rope groups"),
    ({**GEMMA3_ROPE, "local": {"rope_type": "default", "rope_theta": 1.0}}, "has rope groups"),
    ({**GEMMA3_ROPE, "sliding_attention": {"rope_type": "default"}}, "sliding_attention has no rope_theta"),
    ({**GEMMA3_ROPE, "factor": 2.0}, "mixes per-layer-type dicts"),
])
def test_bad_per_layer_settings(tmp_path: Path, rope: dict[str, Any], needle: str) -> None:
    train = settings(tmp_path, {**GEMMA3_YAML, "model_config": {"rope_parameters": rope}})
    assert_usage_error(run("audit", checkpoint(tmp_path, v5_gemma3(GEMMA3_ROPE), "c"), "--trained-with", train),
                       needle)


# ------------------------------------------------------------------ axolotl's own export


@needs_axolotl
def test_axolotl_export_of_gemma3_per_layer(tmp_path: Path) -> None:
    from axolotl_export import export

    folder = export(GEMMA3, GEMMA3_YAML, tmp_path)
    saved = json.loads((folder / "config.json").read_text())
    assert saved["max_position_embeddings"] == 131072  # _adjust_model_config's raise
    train = settings(tmp_path, GEMMA3_YAML)
    ok(run("audit", str(folder), "--trained-with", train))
    # the same run exported as the base model's file (a source copy): the full group is named
    code, out, _ = audit_json(checkpoint(tmp_path, GEMMA3, "copy"), train)
    assert code == 1 and ("dropped-keys", "full_attention") in [(f["kind"], f["group"]) for f in out["findings"]]


@needs_axolotl
def test_axolotl_export_of_dynamic(tmp_path: Path) -> None:
    from axolotl_export import export

    base = {**LLAMA2, "architectures": ["LlamaForCausalLM"]}
    folder = export(base, DYNAMIC_YAML, tmp_path)
    saved = json.loads((folder / "config.json").read_text())
    assert saved["max_position_embeddings"] == 16384 and saved["rope_parameters"]["rope_type"] == "dynamic"
    ok(run("audit", str(folder), "--trained-with", settings(tmp_path, DYNAMIC_YAML)))
    # the dict written into the base model's file without the raise: dynamic-window
    stale = checkpoint(tmp_path, {**saved, "max_position_embeddings": 4096}, "stale")
    code, out, _ = audit_json(stale, settings(tmp_path, DYNAMIC_YAML, "again.yml"))
    assert code == 1 and [f["kind"] for f in out["findings"]] == ["dynamic-window"]

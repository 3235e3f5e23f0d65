"""``posenc scale --engine llamafactory|axolotl|unsloth|trl`` against the trainers' own config handling
(tests/harness/trainers_harness.py says what runs and how): for each trainer, rope type and shipped config, what
posenc prints
goes through the trainer's code, and the frequencies transformers' rotary class computes from the config the trainer
builds must be those of posenc's ``--engine hf-v5`` config under transformers 5 (inv_freq rtol 1e-6, attention factor
rel 1e-6: both sides are float32 from transformers' own functions; LLaMA-Factory's side runs under transformers
4.57.6, whose rope functions give the same float32 values). A refusal must be one ``error:`` line whose measured
difference is what the trainer's nearest setting really computes (printed to 3 significant digits: rel 1%).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from clihelpers import assert_usage_error, ok, run

th = pytest.importorskip("trainers_harness")
pytest.importorskip("transformers")

pytestmark = pytest.mark.numeric

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus"
MODELS = ("llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "qwen3-8b", "mistral-7b-v0.1", "gemma-2-9b-it",
          "phi-3-mini-128k-instruct")
METHODS: dict[str, list[str]] = {
    "linear": ["--factor", "4"],
    "linear-2.5": ["--factor", "2.5"],
    "dynamic": ["--factor", "4"],
    "yarn": ["--factor", "4"],
    "yarn-beta": ["--factor", "4", "--beta-fast", "16"],
    "yarn-32k": ["--original-max", "32k", "--target", "128k"],  # Qwen's documented YaRN for Qwen3
    "llama3": ["--factor", "2"],
    "longrope": ["--factor", "4", "--short-factor", json.dumps([1.0] * 64), "--long-factor",
                 json.dumps([4.0] * 64)],
    # Phi-3's own longrope (head dim 96: 48 pairs), to 256k with new lists
    "longrope-48": ["--target", "256k", "--short-factor", json.dumps([1.0] * 48), "--long-factor",
                    json.dumps([8.0] * 48)],
}
CASES = [(m, k) for m in MODELS for k in METHODS]
RTOL = 1e-6


def method_of(key: str) -> str:
    return key.split("-")[0]


def corpus(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CORPUS / f"{name}.json").read_text(encoding="utf-8"))
    return data


def argv(model: str, key: str, fmt: str) -> list[str]:
    return ["scale", method_of(key), *METHODS[key], "--config", str(CORPUS / f"{model}.json"), "--engine", fmt]


def quiet_config(data: dict[str, Any]) -> Any:
    import transformers

    transformers.logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.AutoConfig.for_model(**data)


_REFS: dict[tuple[str, str], tuple[np.ndarray, float, int, dict[str, Any]] | None] = {}


def reference(model: str, key: str, tmp_path: Path) -> tuple[np.ndarray, float, int, dict[str, Any]] | None:
    """transformers 5's numbers for posenc's own config (``--engine hf-v5 -o``): inv_freq and attention at the
    target (dynamic grows there), the target, and the patched config; None when posenc refuses the request."""
    if (model, key) not in _REFS:
        out = tmp_path / "posenc.json"
        result = run(*argv(model, key, "hf-v5"), "-o", str(out))
        if result.exit_code != 0:
            _REFS[model, key] = None
        else:
            patched = json.loads(out.read_text())
            target = int(patched["max_position_embeddings"])
            params = patched.get("rope_parameters") or {}
            if params.get("rope_type") == "dynamic":
                target = int(params["factor"] * target)
            inv, att = th.rotary(quiet_config(patched), target)
            _REFS[model, key] = (np.array(inv, dtype=np.float32), att, target, patched)
    return _REFS[model, key]


def assert_same(inv: list[float], att: float, ref: tuple[np.ndarray, float, int, dict[str, Any]], ctx: str) -> None:
    np.testing.assert_allclose(np.array(inv, dtype=np.float32), ref[0], rtol=RTOL, atol=0, err_msg=ctx)
    assert math.isclose(att, ref[1], rel_tol=RTOL), (ctx, att, ref[1])


def measured(line: str) -> float:
    found = re.search(r"inv_freq off by up to ([0-9.e+-]+) relative", line)
    assert found, line
    return float(found.group(1))


def rel_diff(inv: list[float], ref: np.ndarray) -> float:
    a, b = np.array(inv, dtype=np.float64), ref.astype(np.float64)
    return float(np.max(np.abs(a - b) / np.abs(b)))


# --- LLaMA-Factory ------------------------------------------------------------------------------------------------

needs_lf = pytest.mark.skipif(th.installed("llamafactory") is None, reason="llamafactory 0.9.5 is not installed")
TF4 = os.environ.get("POSENC_TRANSFORMERS4")


@needs_lf
@pytest.mark.skipif(not TF4, reason="POSENC_TRANSFORMERS4 (a --target dir with transformers 4.57.6) is not set")
def test_llamafactory_on_transformers4(tmp_path: Path) -> None:
    """Every case in one subprocess (transformers 4.57.6 there): what posenc prints, or the nearest setting its
    refusal names, through LLaMA-Factory's configure_rope."""
    cases: list[dict[str, Any]] = []
    expect: list[tuple[str, str, str | None, tuple[np.ndarray, float, int, dict[str, Any]]]] = []
    for model, key in CASES:
        ref = reference(model, key, tmp_path)
        result = run(*argv(model, key, "llamafactory"))
        if ref is None:  # posenc refuses the request itself (every format does)
            assert result.exit_code == 2
            continue
        if result.exit_code == 0:
            ok(result)
            plan = yaml.safe_load(result.stdout)
            refused = None
        elif "has no rope_scaling" in result.stderr:  # the config class cannot take it: the shipped rope stays
            refused = assert_usage_error(result, "nearest: none")
            plan = {"rope_scaling": "linear", "cutoff_len": ref[2]}
        else:
            refused = assert_usage_error(result, "nearest: rope_scaling")
            found = re.search(r"nearest: rope_scaling (\w+) with cutoff_len (\d+)", refused)
            assert found, refused
            plan = {"rope_scaling": found.group(1), "cutoff_len": int(found.group(2))}
        cases.append({"config": corpus(model), "rope_scaling": plan["rope_scaling"],
                      "cutoff_len": plan["cutoff_len"], "seq_len": ref[2]})
        expect.append((model, key, refused, ref))
    results = th.run_llamafactory(cases, TF4)
    summary = []
    for (model, key, refused, ref), got in zip(expect, results, strict=True):
        ctx = f"{model} {key}: {got}"
        if refused and "has no rope_scaling" in refused:
            assert got.get("error") == "unchanged", ctx
            own = th.rotary(quiet_config(corpus(model)), ref[2])
            assert math.isclose(measured(refused), rel_diff(own[0], ref[0]), rel_tol=1e-2), (refused, own)
            summary.append((model, key, "refused"))
            continue
        assert "error" not in got, ctx
        assert got["transformers"] == th.VERSIONS["transformers4"]
        if refused is None:
            assert_same(got["inv_freq"], got["attention"], ref, ctx)
            # the caveat: the config LLaMA-Factory saves has a float max_position_embeddings, which 5.x rejects
            assert isinstance(got["max_position_embeddings"], float), ctx
            saved = corpus(model) | {"max_position_embeddings": got["max_position_embeddings"],
                                     "rope_scaling": got["rope_scaling"]}
            with pytest.raises(Exception, match="max_position_embeddings"):
                quiet_config(saved)
        else:
            diff = rel_diff(got["inv_freq"], ref[0])
            assert diff > RTOL or not math.isclose(got["attention"], ref[1], rel_tol=RTOL), ctx
            assert math.isclose(measured(refused), diff, rel_tol=1e-2), (refused, diff)
        summary.append((model, key, "refused" if refused else "same"))
    # the facts the rendering stands on: each type reproduced on a model it applies to, and refusals where measured
    # Qwen3 is scaled from its trained 32k (posenc_cli.rope.windows); LLaMA-Factory scales from its 40,960: refused
    assert ("qwen3-8b", "yarn", "refused") in summary
    assert ("llama-3.1-8b-instruct", "llama3", "same") in summary
    assert ("qwen2.5-7b-instruct", "linear", "same") in summary
    assert ("qwen2.5-7b-instruct", "dynamic", "refused") in summary
    assert ("qwen2.5-7b-instruct", "linear-2.5", "refused") in summary
    assert ("qwen2.5-7b-instruct", "yarn-beta", "refused") in summary
    assert ("mistral-7b-v0.1", "yarn", "refused") in summary
    assert ("qwen3-8b", "yarn-32k", "refused") in summary


@needs_lf
@pytest.mark.skipif(not TF4, reason="POSENC_TRANSFORMERS4 (a --target dir with transformers 4.57.6) is not set")
def test_llamafactory_scalable_types_are_transformers4s() -> None:
    """posenc's list of model types LLaMA-Factory can scale is transformers 4.57.6's configs with rope_scaling: every
    listed type has it, and of the corpus models' text types exactly the listed ones do."""
    import subprocess
    import sys

    from posenc_cli.models.config_keys import text_config
    from posenc_cli.trainers.llamafactory import LLAMAFACTORY_SCALABLE

    corpus_types = {text_config(corpus(p.stem))[1] for p in CORPUS.glob("*.json") if p.stem != "SOURCES"}
    asked = sorted((corpus_types | LLAMAFACTORY_SCALABLE) - {""})
    code = ("import json, sys, warnings; warnings.simplefilter('ignore')\n"
            "import transformers; transformers.logging.set_verbosity_error()\n"
            "from transformers.models.auto.configuration_auto import CONFIG_MAPPING\n"
            "out = {}\n"
            "for k in json.loads(sys.argv[1]):\n"
            "    if k in CONFIG_MAPPING: out[k] = hasattr(CONFIG_MAPPING[k](), 'rope_scaling')\n"
            "print(json.dumps([transformers.__version__, out]))\n")
    env = dict(os.environ, PYTHONPATH=TF4 or "")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(asked)], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    version, has = json.loads(proc.stdout.strip().splitlines()[-1])
    assert version == th.VERSIONS["transformers4"]
    assert {k for k, v in has.items() if v} == LLAMAFACTORY_SCALABLE


def _lf_sweep() -> list[tuple[str, dict[str, Any], int, str, int]]:
    """(corpus config, its one rope dict, max_position_embeddings, YAML rope_scaling, cutoff_len) for every corpus
    config with one rope group whose text type LLaMA-Factory can scale (the ones ``check --trainers`` notes on), each
    of its types, and cutoff lengths around both lengths it could scale from (the rope dict's original, the
    config's): half, equal, one past, four times, and two and a half times plus 7 (not a multiple)."""
    from posenc_cli.models.model_positions import describe
    from posenc_cli.trainers.llamafactory import LLAMAFACTORY_SCALABLE, LLAMAFACTORY_TYPES

    out = []
    for path in sorted(CORPUS.glob("*.json")):
        if path.stem == "SOURCES":
            continue
        model = describe(corpus(path.stem))
        if (model.family != "rope" or len(model.layers) != 1 or not model.max_position_embeddings
                or (model.text_model_type or model.model_type) not in LLAMAFACTORY_SCALABLE):
            continue
        own, max_pos = model.layers[0].params, model.max_position_embeddings
        olds = {int(own.get("original_max_position_embeddings") or max_pos), max_pos}
        cutoffs = sorted({c for old in olds for c in (old // 2, old, old + 1, 4 * old, 5 * old // 2 + 7)})
        out += [(path.stem, own, max_pos, t, c) for t in LLAMAFACTORY_TYPES for c in cutoffs]
    return out


@needs_lf
@pytest.mark.skipif(not TF4, reason="POSENC_TRANSFORMERS4 (a --target dir with transformers 4.57.6) is not set")
def test_llamafactory_configure_is_configure_rope() -> None:
    """``llamafactory_configure`` (what ``check --trainers`` says LLaMA-Factory does with a YAML rope_scaling) against
    the real configure_rope under transformers 4.57.6, all cases in one subprocess (~10 s): where it says the rope
    stays, the text config is unchanged; else the text config's rope_scaling is its dict (rope_theta and
    partial_rotary_factor, which configure_rope leaves alone, aside), its max_position_embeddings the length (a
    float) and its rope_theta the dict's. A config type transformers 4.57.6 has no class for cannot be loaded by
    LLaMA-Factory either (without remote code) and is left out."""
    from posenc_cli.trainers.llamafactory import llamafactory_configure

    sweep = _lf_sweep()
    results = th.run_llamafactory([{"config": corpus(name), "rope_scaling": rope_scaling, "cutoff_len": cutoff,
                                    "rotary": False} for name, _, _, rope_scaling, cutoff in sweep], TF4)
    outcomes: dict[str, set[str]] = {}
    for (name, own, max_pos, rope_scaling, cutoff), got in zip(sweep, results, strict=True):
        ctx = f"{name} rope_scaling {rope_scaling} cutoff_len {cutoff}: {got}"
        if "error" in got:
            assert got["error"].startswith("ValueError: Unrecognized model identifier"), ctx
            outcomes.setdefault(name, set()).add("no class")
            continue
        assert got["transformers"] == th.VERSIONS["transformers4"]
        expected = llamafactory_configure(own, max_pos, cutoff, rope_scaling, corpus(name))
        if expected is None:
            assert not got["changed"], ctx
            outcomes.setdefault(name, set()).add("kept")
            continue
        rope, length = expected
        assert got["changed"], ctx
        assert got["rope_scaling"] == {k: v for k, v in rope.items()
                                       if k not in ("rope_theta", "partial_rotary_factor")}, ctx
        assert isinstance(got["max_position_embeddings"], float) and got["max_position_embeddings"] == length, ctx
        assert got["rope_theta"] in (None, rope["rope_theta"]), ctx
        outcomes.setdefault(name, set()).add("scaled")
    # the sweep reaches each kind of case: scaled within a model's own scaling, from the config's length, and models
    # whose rope configure_rope never reaches
    assert outcomes["llama-3.1-8b-instruct"] == {"kept", "scaled"}  # from rope_scaling's original 8192
    assert outcomes["phi-3-mini-128k-instruct"] == {"kept", "scaled"}  # from 131072: the top-level 4096 is not read
    assert outcomes["qwen2.5-vl-7b-instruct"] == {"kept", "scaled"}  # passed on to the text config
    assert outcomes["llava-1.5-7b-hf"] == outcomes["llama-4-scout-17b-16e-instruct"] == {"kept"}
    assert outcomes["glm-4.1v-9b-thinking"] == {"kept"}
    assert sum("scaled" in v for v in outcomes.values()) >= 20, outcomes


@needs_lf
def test_llamafactory_fails_under_transformers5() -> None:
    """The caveat posenc prints: LLaMA-Factory 0.9.5's configure_rope on transformers 5 (the installed one) fails."""
    import transformers

    got = th.run_llamafactory([{"config": corpus("qwen3-8b"), "rope_scaling": "yarn", "cutoff_len": 163840}], None)
    assert transformers.__version__.startswith("5.")
    assert "error" in got[0] and "max_position_embeddings" in got[0]["error"], got


def test_llamafactory_refuses_nested_and_longrope() -> None:
    line = assert_usage_error(run(*argv("qwen2.5-7b-instruct", "longrope", "llamafactory")),
                              "no longrope", "nearest: rope_scaling yarn")
    assert measured(line) > 0.01


# --- axolotl ------------------------------------------------------------------------------------------------------

needs_axolotl = pytest.mark.skipif(th.installed("axolotl") is None or importlib.util.find_spec("addict") is None,
                                   reason="axolotl 0.21.0 (with addict) is not installed")


def model_dir(tmp_path: Path, model: str) -> str:
    folder = tmp_path / model
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(corpus(model)))
    return str(folder)


@needs_axolotl
@pytest.mark.parametrize(("model", "key"), CASES)
def test_axolotl(tmp_path: Path, model: str, key: str) -> None:
    ref = reference(model, key, tmp_path)
    result = run(*argv(model, key, "axolotl"))
    if ref is None:
        assert result.exit_code == 2
        return
    plan = yaml.safe_load(ok(result).stdout)
    config = th.axolotl_config(model_dir(tmp_path, model), plan["model_config"])
    inv, att = th.rotary(config, ref[2])
    assert_same(inv, att, ref, f"{model} {key}")
    assert config.max_position_embeddings == ref[3]["max_position_embeddings"]


@needs_axolotl
def test_axolotl_legacy_keys_do_not_work(tmp_path: Path) -> None:
    """Why posenc writes a whole rope_parameters: a legacy `type` dict fails, a bare rope_theta is ignored."""
    folder = model_dir(tmp_path, "llama-3.1-8b-instruct")
    config = th.axolotl_config(folder, {"rope_scaling": {"type": "yarn", "factor": 4.0,
                                                         "original_max_position_embeddings": 8192}})
    with pytest.raises((KeyError, TypeError)):
        th.rotary(config)
    config = th.axolotl_config(folder, {"rope_theta": 2000000.0})
    plain = th.rotary(quiet_config(corpus("llama-3.1-8b-instruct")))
    assert th.rotary(config) == plain


@needs_axolotl
def test_axolotl_top_level_rope_misses_a_composite_config(tmp_path: Path) -> None:
    """Why posenc refuses models whose transformers class keeps the text model in text_config (Qwen2.5-VL, even
    from its flat file): a top-level rope_parameters leaves the text model's rope as it was."""
    folder = model_dir(tmp_path, "qwen2.5-vl-7b-instruct")
    rope = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 128000, "rope_theta": 1e6,
            "mrope_section": [16, 24, 24]}
    config = th.axolotl_config(folder, {"rope_parameters": rope, "max_position_embeddings": 256000})
    assert config.get_text_config().rope_parameters.get("rope_type") == "default"
    assert config.get_text_config().max_position_embeddings == 128000
    assert_usage_error(run("scale", "yarn", "--config", str(CORPUS / "qwen2.5-vl-7b-instruct.json"), "--factor",
                           "2", "--engine", "axolotl"), "text_config")


# --- TRL ----------------------------------------------------------------------------------------------------------

needs_trl = pytest.mark.skipif(th.installed("trl") is None, reason="trl 1.16.0 is not installed")


def tiny_checkpoint(tmp_path: Path, model: str) -> str:
    """The corpus model with one layer, one head and a 32-token vocabulary, its rope keys and head dim unchanged."""
    import torch
    import transformers

    data = corpus(model)
    head_dim = data.get("head_dim") or data["hidden_size"] // data["num_attention_heads"]
    data |= {"num_hidden_layers": 1, "num_attention_heads": 1, "num_key_value_heads": 1, "hidden_size": head_dim,
             "head_dim": head_dim, "intermediate_size": 8, "vocab_size": 32, "max_window_layers": 1,
             "pad_token_id": None, "bos_token_id": 1, "eos_token_id": 2}
    data.pop("layer_types", None)
    torch.manual_seed(0)
    folder = tmp_path / f"tiny-{model}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.AutoModelForCausalLM.from_config(quiet_config(data)).save_pretrained(folder)
    return str(folder)


@needs_trl
@pytest.mark.parametrize(("model", "key"), CASES)
def test_trl(tmp_path: Path, model: str, key: str) -> None:
    ref = reference(model, key, tmp_path)
    result = run(*argv(model, key, "trl"))
    if ref is None:
        assert result.exit_code == 2
        return
    plan = yaml.safe_load(ok(result).stdout)
    kwargs = dict(plan["model_init_kwargs"])
    kwargs.setdefault("trust_remote_code", False)  # what SFTTrainer adds (sft_trainer.py L694)
    create = th.trl_create_model_from_path()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = create(tiny_checkpoint(tmp_path, model), **kwargs)
    if method_of(key) in ("dynamic", "longrope"):
        inv, att = th.rotary(loaded.config, ref[2])
    else:
        emb = next(m for n, m in loaded.named_modules() if n.endswith("rotary_emb"))
        inv, att = [float(x) for x in emb.inv_freq], float(emb.attention_scaling)
    assert_same(inv, att, ref, f"{model} {key}")


# --- Unsloth ------------------------------------------------------------------------------------------------------

needs_unsloth = pytest.mark.skipif(th.installed("unsloth") is None, reason="unsloth 2026.10.9 is not installed")


@needs_unsloth
@pytest.mark.parametrize(("model", "key"), CASES)
def test_unsloth(tmp_path: Path, model: str, key: str) -> None:
    ref = reference(model, key, tmp_path)
    result = run(*argv(model, key, "unsloth"))
    if ref is None:
        assert result.exit_code == 2
        return
    user_rope_scaling, accepted = th.unsloth_functions()
    config = quiet_config(corpus(model))
    seq = ref[2]
    if result.exit_code == 2:
        line = assert_usage_error(result, "ignores rope_scaling")
        rope_type = ref[3]["rope_parameters"]["rope_type"]
        assert rope_type not in accepted or config.model_type in ("gemma", "gemma2"), line
        # Unsloth trains the checkpoint's own rope: the measured difference is that one's
        own = th.rotary(config, seq)
        assert math.isclose(measured(line), rel_diff(own[0], ref[0]), rel_tol=1e-2), line
        return
    text = ok(result).stdout
    found = re.search(r"max_seq_length=(\d+), rope_scaling=(\{.*\})\)", text)
    assert found, text
    scaling = eval(found.group(2), {})  # noqa: S307 - the Python literal posenc printed
    assert scaling["rope_type"] in accepted
    config.rope_scaling = user_rope_scaling(config, scaling)  # as FastLanguageModel.from_pretrained does
    inv, att = th.rotary(config, seq)
    assert_same(inv, att, ref, f"{model} {key}")
    assert int(found.group(1)) == ref[2]


@pytest.mark.skipif(importlib.util.find_spec("axolotl") is None, reason="axolotl is not installed")
def test_a_stage_sets_axolotls_sequence_len() -> None:
    """``scale --seq-len`` for axolotl writes ``sequence_len``, a field of axolotl 0.21.0's own config schema."""
    from axolotl.utils.schemas.config import AxolotlInputConfig

    text = ok(run("scale", "yarn", "--original-max", "32k", "--target", "128k", "--theta", "1e6", "--head-dim", "128",
                  "--seq-len", "64k", "--engine", "axolotl")).stdout
    settings = yaml.safe_load(text)
    assert settings["sequence_len"] == 65536 and "sequence_len" in AxolotlInputConfig.model_fields

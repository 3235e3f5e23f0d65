"""``posenc check --trainers``: each trainer runner's numbers against the framework's own code, over every corpus
config (and a Qwen3 config under every rope type the frameworks are asked about), plus the CLI's exit codes and
output.

What runs (the harnesses say how): Megatron-Core 0.19.2's ``RotaryEmbedding``/``YarnRotaryEmbedding`` fed by
Megatron-LM's own argument definitions and ``_apply_yarn_config_from_args`` (megatron) or by Megatron-Bridge's own
``YARN_ROPE_SCALING_MAPPING`` (megatron-bridge); torchtitan 0.3.0's ``RoPE`` classes built from the printed config;
torchtune 0.6.1's RoPE classes built from the printed builder fields; Unsloth's ``_extended_rope_scaling`` and
``_compute_config_rope_inv_freq`` as shipped; axolotl's ``load_model_config``. Each must give the runner's inv_freq
(rtol 1e-6: float32 in another operation order) and attention factor (rel 1e-9 for the frameworks' float64
arithmetic; 1e-6 where transformers' float32 path gives it). A refusal must name a case the framework cannot run.
"""

from __future__ import annotations

import ast
import functools
import json
import math
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clihelpers import assert_usage_error, run, write_json

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import core_trainers_harness as th  # noqa: E402
import test_frameworks as tt  # noqa: E402

from posenc_cli.engines.runs import EngineRun  # noqa: E402
from posenc_cli.frameworks import registry  # noqa: E402
from posenc_cli.models.facts import window_of  # noqa: E402
from posenc_cli.models.model_positions import describe  # noqa: E402
from posenc_cli.trainers import megatron_bridge, trained  # noqa: E402

pytestmark = pytest.mark.numeric

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus"
RTOL = 1e-6


def _qwen3(rope: dict[str, Any], max_pos: int = 131072) -> dict[str, Any]:
    cfg: dict[str, Any] = json.loads((CORPUS / "qwen3-8b.json").read_text())
    cfg.pop("rope_theta", None)
    cfg.pop("rope_scaling", None)
    return cfg | {"rope_parameters": {"rope_theta": 1e6, **rope}, "max_position_embeddings": max_pos}


def _deepseek(drop: tuple[str, ...] = (), **changes: Any) -> dict[str, Any]:
    """DeepSeek-V3 (MLA) with rope_scaling keys dropped or changed."""
    cfg: dict[str, Any] = json.loads((CORPUS / "deepseek-v3.json").read_text())
    scaling = {k: v for k, v in cfg["rope_scaling"].items() if k not in drop}
    return cfg | {"rope_scaling": scaling | changes}


YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
VARIANTS = {
    "linear-x4": _qwen3({"rope_type": "linear", "factor": 4.0}),
    "linear-x2.5": _qwen3({"rope_type": "linear", "factor": 2.5}, 102400),
    "dynamic-x4": _qwen3({"rope_type": "dynamic", "factor": 4.0}, 32768),
    "yarn-x4": _qwen3(YARN),
    "yarn-full": _qwen3(YARN | {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": True}),
    "yarn-no-truncate": _qwen3(YARN | {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}),
    "yarn-mscale": _qwen3(YARN | {"mscale": 0.707, "beta_fast": 32.0, "beta_slow": 1.0}),
    "yarn-mscale-both": _qwen3(YARN | {"mscale": 1.0, "mscale_all_dim": 1.0}),
    "yarn-attention": _qwen3(YARN | {"attention_factor": 1.0}),
    "yarn-partial": _qwen3(YARN | {"partial_rotary_factor": 0.5}),
    "llama3-4k": _qwen3({"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 4096}, 16384),
    "llama3-8k-x4": _qwen3({"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192}, 32768),
    "default-fractional-theta": _qwen3({"rope_type": "default", "rope_theta": 40889.94}, 32768),
    # MLA: Megatron builds these from MLATransformerConfig (its own softmax scale)
    "deepseek-v3-no-truncate": _deepseek(truncate=False),  # MLA always rounds: the one-to-one flags differ
    "deepseek-v3-no-mscale-all-dim": _deepseek(("mscale_all_dim",)),  # transformers: 0.1 ln s + 1, softmax x1
    "deepseek-v3-attention": _deepseek(attention_factor=1.0),  # mscale solved around mscale_all_dim
    "deepseek-v3-beta-fast-16": _deepseek(beta_fast=16.0),  # no Megatron-LM flag reaches MLA's betas
    "deepseek-v3-fractional-theta": _deepseek() | {"rope_theta": 10000.4},  # --rotary-base is an int
    "deepseek-v3-linear": _deepseek(("beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                                     "original_max_position_embeddings"), type="linear"),  # MLA: rope or yarn
}
CONFIGS: dict[str, dict[str, Any]] = {
    **{p.stem: json.loads(p.read_text()) for p in sorted(CORPUS.glob("*.json")) if p.stem != "SOURCES"},
    **VARIANTS,
}


def _cases() -> list[tuple[str, Any, int]]:
    """(name, model, training length: the window posenc check uses by default) for every config with RoPE."""
    out = []
    for name, cfg in CONFIGS.items():
        try:
            model = describe(cfg)
        except Exception:  # noqa: BLE001 - a config posenc refuses to read is not a trainer case
            continue
        if model.family != "rope" or not model.layers or not model.max_position_embeddings or (
                model.engine is not None and model.engine.remote_code):
            continue
        served = window_of(model, model.layers[0])
        out.append((name, model, (served.served if served else None) or model.max_position_embeddings))
    return out


CASES = _cases()
IDS = [c[0] for c in CASES]


def trainer(name: str, model: Any, length: int, cfg: dict[str, Any] | None = None) -> EngineRun:
    return registry.load(name).run(model, cfg or {}, length, None)


def assert_numbers(got: EngineRun, inv: np.ndarray, attention: float, rel: float = 1e-9) -> None:
    (group,) = got.groups
    assert group.inv_freq is not None
    np.testing.assert_allclose(inv, group.inv_freq, rtol=RTOL, atol=0)
    assert attention == pytest.approx(group.attention_factor, rel=rel)


def refusal_verdict(got: EngineRun) -> str:
    assert got.refusal is not None and not got.groups
    return got.refusal.split(":")[0]


def rope_of(model: Any, length: int) -> trained.Rope:
    return trained.rope_of(model, length)


# ------------------------------------------------------------------------------------------------------- Megatron

@tt.needs_megatron
@pytest.mark.parametrize(("name", "model", "length"), CASES, ids=IDS)
def test_megatron(name: str, model: Any, length: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The printed flags through Megatron-LM's own parser and config code, then Megatron-Core's classes."""
    got = trainer("megatron", model, length)
    if got.refusal:
        verdict = refusal_verdict(got)
        if verdict == "will not start":  # a flag Megatron-LM's argparse rejects
            assert "takes an integer" in got.refusal
            theta, factor = model.layers[0].params["rope_theta"], model.layers[0].params.get("factor")
            bad = f"--rotary-base {theta!r}" if "--rotary-base" in got.refusal else \
                f"--rotary-seq-len-interpolation-factor {factor!r}"
            with pytest.raises(Exception, match="invalid int value"):
                tt.megatron_args(bad)
        else:
            assert verdict in ("cannot express", "not modelled"), got.refusal
        return
    (line,) = got.invocation
    if rope_of(model, length).model_type in trained.MLA_TYPES:  # MLATransformerConfig and the rotary MLA builds
        config = tt.mla_cli_config(line)
        inv, attention, softmax = tt.mla_megatron_numbers(config, monkeypatch)
        assert_numbers(got, inv, attention)
        assert got.groups[0].softmax_scale == pytest.approx(softmax, rel=1e-9)
        return
    fields = tt.cli_fields(tt.megatron_args(line))
    inv, attention = tt.megatron_numbers(fields, rope_of(model, length).head_dim, monkeypatch)
    assert_numbers(got, inv, attention)


@tt.needs_megatron
@pytest.mark.skipif(th.installed("megatron-bridge") != th.BRIDGE_VERSION, reason="megatron-bridge 0.6.2 not installed")
@pytest.mark.parametrize(("name", "model", "length"), CASES, ids=IDS)
def test_megatron_bridge(name: str, model: Any, length: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """posenc's model of Bridge's HF import uses Bridge's own YaRN mapping; its fields through Megatron-Core's
    classes give the runner's numbers (or the TypeError the runner says stops it)."""
    assert megatron_bridge.BRIDGE_YARN_MAPPING == tuple(th.bridge_constant("YARN_ROPE_SCALING_MAPPING"))
    got = trainer("megatron-bridge", model, length)
    rope = rope_of(model, length)
    try:
        fields, _ = megatron_bridge.bridge_import(rope)
    except trained.Refusal as refusal:
        assert refusal.verdict == "not modelled"
        assert refusal_verdict(got) in ("not modelled", "cannot express")  # also one rope per model
        return
    provider = types.SimpleNamespace(**({"seq_len_interpolation_factor": None, "rope_scaling": False,
                                         "rope_scaling_factor": 1.0} | fields))
    if got.refusal:
        assert refusal_verdict(got) == "will not start"
        with pytest.raises(TypeError):
            tt.megatron_numbers(provider, rope.head_dim, monkeypatch)
        return
    inv, attention = tt.megatron_numbers(provider, rope.head_dim, monkeypatch)
    assert_numbers(got, inv, attention)


# ----------------------------------------------------------------------------------------------- torchtitan, tune

@tt.needs_titan
@pytest.mark.parametrize(("name", "model", "length"), CASES, ids=IDS)
def test_torchtitan(name: str, model: Any, length: int) -> None:
    got = trainer("torchtitan", model, length)
    if got.refusal:
        assert refusal_verdict(got) in ("cannot express", "not modelled"), got.refusal
        return
    (text,) = got.invocation
    inv = tt.titan_numbers(text)
    rope = th.titan_rope()
    config = eval(text, {"ComplexRoPE": rope.ComplexRoPE, "CosSinRoPE": rope.CosSinRoPE})  # noqa: S307
    config.max_seq_len = 2
    built = getattr(rope, type(config).__qualname__.split(".")[0])(config)
    magnitude = float(abs(built.cache[0, 0])) if built.cache.is_complex() else float(built.cache[0, 0])
    assert magnitude == 1.0  # torchtitan's RoPE never scales cos/sin
    (group,) = got.groups
    np.testing.assert_allclose(inv, group.inv_freq, rtol=RTOL, atol=0)
    if group.attention_factor != 1.0:  # only gpt-oss, whose attention folds it into the softmax scale
        assert model.text_model_type == "gpt_oss"
        assert group.attention_factor == pytest.approx(0.1 * math.log(config.rope_factor) + 1.0, rel=1e-12)


@tt.needs_tune
@pytest.mark.parametrize(("name", "model", "length"), CASES, ids=IDS)
def test_torchtune(name: str, model: Any, length: int) -> None:
    got = trainer("torchtune", model, length)
    if got.refusal:
        assert refusal_verdict(got) in ("cannot express", "not modelled"), got.refusal
        return
    inv = tt.tune_numbers("\n".join(got.invocation), rope_of(model, length).head_dim)
    assert_numbers(got, inv, 1.0)


# ------------------------------------------------------------------------------------------ Hugging Face-based

hf = pytest.importorskip("trainers_harness")


@pytest.mark.skipif(hf.installed("unsloth") is None, reason="unsloth 2026.10.9 is not installed")
@pytest.mark.parametrize(("name", "model", "length"), CASES, ids=IDS)
def test_unsloth(name: str, model: Any, length: int) -> None:
    """Unsloth's own _extended_rope_scaling and _compute_config_rope_inv_freq on the config as shipped, trained at
    the window (max_seq_length)."""
    import logging

    got = trainer("unsloth", model, length)
    if got.refusal:
        assert refusal_verdict(got) == "not modelled"
        return
    path = hf._site_file("unsloth", "models/llama.py")
    helpers = hf.shipped_functions(path, ("_get_rope_theta", "_rope_scaling_as_dict"), {})
    env = {"torch": torch, "contextlib": __import__("contextlib"), "logger": logging.getLogger("unsloth-test"),
           **helpers}
    fns = hf.shipped_functions(path, ("_extended_rope_scaling", "_vanilla_inv_freq_from_config",
                                      "_llama3_inv_freq_from_config", "_compute_config_rope_inv_freq"), env)
    fns["_compute_config_rope_inv_freq"].__globals__.update(fns)
    try:
        config = tt.quiet_config(__import__("transformers").AutoConfig.for_model, **CONFIGS[name])
    except ValueError as e:
        pytest.skip(f"transformers has no config class for it: {str(e)[:80]}")
    config = config.get_text_config()
    if length > config.max_position_embeddings:  # FastLanguageModel.from_pretrained, no rope_scaling given
        scaling, _ = fns["_extended_rope_scaling"](config, length / config.max_position_embeddings)
        if scaling is not None:
            config.rope_scaling = scaling
    inv, attention = fns["_compute_config_rope_inv_freq"](config, config.rope_scaling)
    assert inv is not None
    assert_numbers(got, inv.numpy(), attention, rel=RTOL)


@pytest.mark.skipif(hf.installed("axolotl") is None, reason="axolotl 0.21.0 is not installed")
@pytest.mark.parametrize(("name", "model", "length"), CASES, ids=IDS)
def test_axolotl(name: str, model: Any, length: int, tmp_path: Path) -> None:
    """axolotl's load_model_config on the config as shipped: transformers' rotary gives the runner's numbers
    (every config: ~5 s for all)."""
    folder = tmp_path / name
    folder.mkdir()
    write_json(folder, CONFIGS[name])
    try:
        config = hf.axolotl_config(str(folder), {})
        inv, attention = hf.rotary(config.get_text_config(), length)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"transformers cannot build this model's rotary here: {e}")
    got = trainer("axolotl", model, length)
    if len(got.groups) != 1:
        return
    assert_numbers(got, np.array(inv, dtype=np.float32), attention, rel=RTOL)


class _ConfigBuilt(Exception):  # noqa: N818 - a stop signal carrying the config, not an error
    def __init__(self, config: Any) -> None:
        super().__init__("config built")
        self.config = config


@functools.cache
def _trl_create() -> Any:
    return hf.trl_create_model_from_path()


def trl_config(folder: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, type]:
    """The config TRL 1.16.0's ``create_model_from_path`` (as shipped) builds its model from, and the model class,
    for a checkpoint folder and SFTTrainer's model_init_kwargs when the user sets none (``trust_remote_code=False``,
    sft_trainer.py): its architecture lookup, then transformers' own ``from_pretrained`` up to the config, stopped at
    ``get_hf_quantizer``, the first step after the config is loaded and adjusted and before any weight is read."""
    import sys

    import transformers.modeling_utils as modeling_utils

    def built(config: Any, *args: Any, **kwargs: Any) -> Any:
        raise _ConfigBuilt((config, sys._getframe(1).f_locals["cls"]))  # from_pretrained's frame

    monkeypatch.setattr(modeling_utils, "get_hf_quantizer", built)
    try:
        _trl_create()(folder, trust_remote_code=False)
    except _ConfigBuilt as stop:
        got: tuple[Any, type] = stop.config
        return got
    raise AssertionError("from_pretrained went past get_hf_quantizer")


def _rotary_module(model_class: type, text: Any) -> Any:
    """The modeling module whose rotary class builds the text model: the text config's, else (a config class with no
    modeling module: transformers builds EXAONE 3.5's config with LlamaForCausalLM) the model class's."""
    import importlib

    for name in (type(text).__module__.replace(".configuration_", ".modeling_"), model_class.__module__):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        if any(n.endswith("RotaryEmbedding") and getattr(getattr(module, n), "__module__", "") == name
               for n in dir(module)):
            return module
    raise AssertionError(f"no rotary class for {model_class.__name__}")


def hf_numbers(config: Any, model_class: type, names: list[str], length: int) -> dict[str, tuple[np.ndarray, float]]:
    """inv_freq and attention factor per rope group (posenc's group names) of transformers' rotary class for the text
    config: one group through the harness's ``rotary`` (at ``length`` for dynamic and longrope), several through the
    class's per-layer-type buffers (``{layer_type}_inv_freq``, Gemma 3 style)."""
    text = config.get_text_config()
    module = _rotary_module(model_class, text)
    if len(names) == 1:
        inv, attention = hf.rotary(text, length, module)
        return {names[0]: (np.array(inv, dtype=np.float32), attention)}
    cls = next(getattr(module, n) for n in dir(module) if n.endswith("RotaryEmbedding")
               and getattr(getattr(module, n), "__module__", "") == module.__name__)
    emb = cls(text)
    return {n: (getattr(emb, f"{n}_inv_freq").numpy(), float(getattr(emb, f"{n}_attention_scaling"))) for n in names}


@pytest.mark.skipif(hf.installed("trl") is None, reason="trl 1.16.0 is not installed")
def test_trl_every_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TRL trains the config as it is: for every config the runner covers, the config TRL's own loading builds gives,
    through transformers' rotary class, the runner's numbers for each rope group (inv_freq rtol 1e-6, attention
    factor rel 1e-6: transformers' float32 path). One test over the whole sweep (config loading only, no weights: a
    few seconds), so that the counts can be checked: 82 of 94 compared when written. Not compared, as TRL's loading
    stops before a model exists: a model_type transformers does not recognize (DeepSeek-VL2, Janus); one only the
    checkpoint's auto_map code defines (nine, e.g. Kimi K2, MiniCPM3: TRL needs ``trust_remote_code=True`` and runs
    that code): the runner says will not start and not modelled for these; an architecture transformers lacks
    without an auto_map (LLaVA's own repo: TRL 1.16.0 reads ``config.auto_map``, an AttributeError), which the
    runner refuses too. Where the architecture is no transformers class but TRL's Auto-class fallback loads a local
    class (EXAONE 3.5), the runner says not modelled rather than follow the fallback."""
    compared, no_class, remote, fails, unfollowed = [], [], [], [], []
    for name, model, length in CASES:
        cfg = CONFIGS[name]
        folder = tmp_path / name
        folder.mkdir()
        write_json(folder, cfg)
        got = trainer("trl", model, length, cfg)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                config, model_class = trl_config(str(folder), monkeypatch)
            except ValueError as e:
                if "does not recognize this architecture" in str(e):  # transformers has no class: nor can TRL
                    assert got.refusal is not None and got.refusal.startswith("will not start"), name
                    no_class.append(name)
                    continue
                # a model_type only the checkpoint's auto_map code defines (Kimi K2)
                assert "trust_remote_code=True" in str(e) and "auto_map" in cfg, (name, e)
                assert got.refusal is not None and got.refusal.startswith("not modelled"), name
                remote.append(name)
                continue
            except AttributeError as e:  # an architecture not in transformers and no auto_map (LLaVA's own repo)
                assert "'auto_map'" in str(e) and "auto_map" not in cfg, (name, e)
                assert got.refusal is not None, name
                fails.append(name)
                continue
        if got.refusal is not None:  # TRL built it through an Auto-class fallback posenc does not follow (EXAONE)
            assert got.refusal.startswith("not modelled"), (name, got.refusal)
            unfollowed.append(name)
            continue
        assert got.invocation == [f"max_length={length}"], name
        theirs = hf_numbers(config, model_class, [g.name for g in got.groups], length)
        for group in got.groups:
            inv, attention = theirs[group.name]
            np.testing.assert_allclose(inv, group.inv_freq, rtol=RTOL, atol=0, err_msg=f"{name} {group.name}")
            assert attention == pytest.approx(group.attention_factor, rel=RTOL), (name, group.name)
        compared.append(name)
    assert len(compared) >= 0.8 * len(CASES), (no_class, remote, fails, unfollowed, len(CASES))
    assert {"gemma-3-4b-it", "llama-3.1-8b-instruct", "deepseek-v3", "qwen2.5-vl-7b-instruct"} <= set(compared)


# ------------------------------------------------------------------------------------------------------------ CLI

def check(path: str, *args: str) -> tuple[int, dict[str, Any]]:
    result = run("check", path, "--json", *args)
    assert result.stderr == "", result.stderr
    return result.exit_code, json.loads(result.stdout)


def by_name(items: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(e for e in items if e["engine"] == name)


def test_without_trainers_the_report_has_none() -> None:
    code, r = check(str(CORPUS / "llama-3.1-8b-instruct.json"))
    assert code == 0 and "trainers" not in r and "pairs" not in r


def test_llama31_every_trainer_is_the_same() -> None:
    code, r = check(str(CORPUS / "llama-3.1-8b-instruct.json"), "--trainers", "all")
    assert code == 0 and r["passed"]
    assert [t["engine"] for t in r["trainers"]] == list(registry.names(registry.TRAINER))
    assert r["trainer_verdicts"]["same"] == list(registry.names(registry.TRAINER))
    assert len(r["pairs"]) == 8 * len(registry.names(registry.ENGINE))
    assert all(p["verdict"] == "same" for p in r["pairs"])
    assert by_name(r["trainers"], "torchtune")["layout"] == "interleaved"


def test_llama32_megatron_lm_trains_factor_8() -> None:
    """Llama 3.2's llama3 x32 through Megatron-LM's flags trains with factor 8 (#6305): exit 1, and the pair with
    vLLM says where."""
    code, r = check(str(CORPUS / "llama-3.2-1b-instruct.json"), "--trainers", "megatron,megatron-bridge",
                    "--engines", "hf,vllm")
    assert code == 1
    assert r["trainer_verdicts"]["differs"] == ["megatron"] and r["trainer_verdicts"]["same"] == ["megatron-bridge"]
    pair = next(p for p in r["pairs"] if p["trainer"] == "megatron" and p["engine"] == "vllm")
    assert pair["verdict"] == "differs" and pair["groups"][0]["inv_freq_rel_diff"] > 0.5


def test_qwen3_yarn_verdicts(tmp_path: Path) -> None:
    code, r = check(write_json(tmp_path, VARIANTS["yarn-x4"]), "--trainers", "all", "--engines", "hf,vllm")
    assert code == 1
    verdicts = r["trainer_verdicts"]
    assert verdicts["will not start"] == ["megatron-bridge"]  # beta None -> TypeError
    assert verdicts["cannot express"] == ["torchtune"]
    assert verdicts["differs"] == ["torchtitan"]
    titan = by_name(r["trainers"], "torchtitan")["groups"][0]
    assert titan["inv_freq_rel_diff"] == 0 and titan["attention_factor"] == pytest.approx([1.1386294, 1.0])


def test_mla_megatron(tmp_path: Path) -> None:
    """DeepSeek-V3 through Megatron's MLA: the same numbers as transformers, its softmax scale included; Kimi K2's
    beta_fast 1 has no Megatron-LM flag (MLA keeps 32): differs, and the note says why. The other frameworks are
    not modelled for an attention that scales its softmax."""
    code, r = check(str(CORPUS / "deepseek-v3.json"), "--trainers", "megatron,torchtune", "--engines", "hf")
    megatron = by_name(r["trainers"], "megatron")
    assert megatron["verdict"] == "same" and "--multi-latent-attention" in megatron["invocation"][0]
    assert megatron["groups"][0]["softmax_scale"] == pytest.approx([1.8738542, 1.8738542])
    assert r["trainer_verdicts"]["not modelled"] == ["torchtune"] and code == 3
    code, r = check(str(CORPUS / "kimi-k2.json"), "--trainers", "megatron", "--engines", "hf")
    megatron = by_name(r["trainers"], "megatron")
    assert code == 1 and megatron["verdict"] == "differs"
    assert any("trains with beta_fast 32, not this model's beta_fast 1" in w for w in megatron["warnings"])
    code, r = check(write_json(tmp_path, VARIANTS["deepseek-v3-linear"]), "--trainers", "megatron", "--engines", "hf")
    assert r["trainer_verdicts"]["cannot express"] == ["megatron"]


def test_dynamic_unsloth_is_static_and_matches_vllm_at_no_length(tmp_path: Path) -> None:
    """Unsloth past max_position_embeddings trains linear scaling: differs from transformers' dynamic NTK."""
    code, r = check(write_json(tmp_path, VARIANTS["dynamic-x4"]), "--trainers", "unsloth,trl", "--engines", "hf")
    assert code == 1 and r["short_len"] == 32768
    assert r["trainer_verdicts"]["differs"] == ["unsloth"] and r["trainer_verdicts"]["same"] == ["trl"]


def test_llamafactory_notes_say_what_rope_scaling_would_do() -> None:
    """The note on a YAML rope_scaling (llamafactory_configure, checked against configure_rope in
    test_trainers_hf.py): Llama 3.1 at its window is rescaled from rope_scaling's original 8192; Llama 4's composite
    config gives LLaMA-Factory no rope_scaling to set, so the key changes nothing."""
    _, r = check(str(CORPUS / "llama-3.1-8b-instruct.json"), "--trainers", "llamafactory", "--engines", "hf")
    (note, _) = by_name(r["trainers"], "llamafactory")["warnings"]
    assert "with factor 16 from 8192" in note and "inv_freq off by up to 0.5 relative" in note
    assert "attention factor" not in note  # llama3 scaling keeps it at 1 on both sides
    _, r = check(str(CORPUS / "llama-4-scout-17b-16e-instruct.json"), "--trainers", "llamafactory", "--engines", "hf")
    (note, _) = by_name(r["trainers"], "llamafactory")["warnings"]
    assert "changes nothing here" in note and "llama4 config" in note


def test_not_modelled_is_exit_3() -> None:
    code, r = check(str(CORPUS / "phi-3-mini-128k-instruct.json"), "--trainers", "unsloth", "--engines", "hf")
    assert r["trainer_verdicts"]["not modelled"] == ["unsloth"] and code == 3


def test_text_output_has_the_trainer_table_and_pairs(tmp_path: Path) -> None:
    result = run("check", write_json(tmp_path, VARIANTS["llama3-4k"]), "--trainers", "megatron,torchtitan",
                 "--engines", "hf,vllm")
    assert result.exit_code == 1
    assert "trained with X, served with Y:" in result.stdout
    assert "  torchtitan -> hf, vllm: same" in result.stdout
    assert "  megatron -> vllm: differs: inv_freq" in result.stdout
    assert "never forwards --rope-scaling-factor" in result.stdout


@pytest.mark.parametrize(("args", "needle"), [(["--trainers", "deepspeed"], "deepspeed"),
                                              (["--trainers", ","], "--trainers"), (["--trainers", ""], "--trainers"),
                                              (["--trainers", "all,megatron"], "all stands alone")])
def test_bad_trainers(args: list[str], needle: str) -> None:
    assert_usage_error(run("check", str(CORPUS / "qwen3-8b.json"), *args), needle)


def test_a_model_without_rope_with_trainers() -> None:
    code, r = check(str(CORPUS / "nemotron-h-56b-base-8k.json"), "--trainers", "all")
    assert code == 0 and r["trainers"] == [] and r["pairs"] == []


@pytest.mark.skipif(th.installed("megatron-bridge") != th.BRIDGE_VERSION, reason="megatron-bridge 0.6.2 not installed")
def test_per_layer_rope_is_not_modelled_for_bridge_and_cannot_be_expressed_by_megatron_lm() -> None:
    """Gemma 3's two rope groups: Megatron-Bridge's Gemma3 provider holds both bases (``rotary_base = (local,
    global)``), so posenc says not modelled rather than cannot express; Megatron-LM's CLI has one ``--rotary-base``."""
    root = th.megatron_root()
    assert root is not None
    provider = th._tree(root / "bridge" / "models" / "gemma" / "gemma3_provider.py")
    assert any(isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.target.id == "rotary_base"
               and isinstance(n.value, ast.Tuple) for n in ast.walk(provider))
    assert sum("'--rotary-base'" in line for line in (root / "training" / "arguments.py").read_text().splitlines()) == 1
    code, r = check(str(CORPUS / "gemma-3-4b-it.json"), "--trainers", "megatron,megatron-bridge", "--engines", "hf")
    assert r["trainer_verdicts"]["not modelled"] == ["megatron-bridge"]
    assert r["trainer_verdicts"]["cannot express"] == ["megatron"] and code == 1


def test_mla_models_are_not_modelled_outside_megatron(tmp_path: Path) -> None:
    """DeepSeek-V3 without mscale_all_dim has softmax scale 1, yet torchtitan and torchtune would train it with
    their own MLA model code (torchtitan's deepseek_v3 folds YaRN's mscale into the softmax): not modelled, never a
    verdict from the Llama-style rope."""
    cfg = json.loads((CORPUS / "deepseek-v3.json").read_text(encoding="utf-8"))
    cfg["rope_scaling"] = {k: v for k, v in cfg["rope_scaling"].items() if k != "mscale_all_dim"}
    path = write_json(tmp_path, cfg)
    assert describe(cfg).softmax_scale == 1.0
    code, r = check(str(path), "--trainers", "torchtitan,torchtune,megatron-bridge", "--engines", "hf")
    assert sorted(r["trainer_verdicts"]["not modelled"]) == ["megatron-bridge", "torchtitan", "torchtune"]
    assert code == 3

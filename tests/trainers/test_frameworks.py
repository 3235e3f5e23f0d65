"""``posenc scale --engine megatron|megatron-bridge|torchtitan|torchtune`` against the frameworks' own RoPE code.

For every trainer x rope type x corpus config it applies to, the CLI either prints settings that, fed to the real
framework class (tests/harness/core_trainers_harness.py: megatron-core 0.19.2, torchtitan 0.3.0, torchtune 0.6.1), give
transformers' inv_freq (rtol 1e-6, as tests/rope/test_frequencies_parity.py) and attention factor; or it refuses with
one ``error:``
line whose measured difference is what the framework really computes.

transformers' numbers come from transformers itself (the patched config that ``--engine hf-v5 -o -`` writes, through
the model's rotary class), never from posenc.

Tolerances: inv_freq rtol 1e-6: float32 rounding (the frameworks compute in float32 in another operation order;
torchtitan's are read back as the angle of its position-1 cache entry, one more rounding). Attention factors rel
1e-9: float64 arithmetic in both.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import importlib.util
import json
import math
import re
import shlex
import tempfile
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import core_trainers_harness as th  # noqa: E402
from clihelpers import assert_usage_error, ok, run  # noqa: E402
from hf_rope import hf_frequencies, quiet_config  # noqa: E402
from transformers import AutoConfig  # noqa: E402

pytestmark = pytest.mark.numeric

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
RTOL = 1e-6

needs_megatron = pytest.mark.skipif(th.installed("megatron-core") != th.VERSIONS["megatron-core"],
                                    reason="megatron-core 0.19.2 not installed (.ci/run installs it)")
needs_titan = pytest.mark.skipif(th.installed("torchtitan") != th.VERSIONS["torchtitan"] or
                                 th.installed("spmd_types") is None,
                                 reason="torchtitan 0.3.0 (+spmd_types, tyro) not installed (.ci/run installs it)")
needs_tune = pytest.mark.skipif(th.installed("torchtune") != th.VERSIONS["torchtune"],
                                reason="torchtune 0.6.1 not installed (.ci/run installs it)")

# (corpus config, posenc scale arguments): every rope type the trainers are asked for, on real shipped configs
CASES = [
    ("llama-3.1-8b-instruct", ["llama3", "--target", "128k"]),  # its own llama3 x8, unchanged
    ("llama-3.1-8b-instruct", ["llama3", "--target", "256k"]),  # x16
    ("llama-3.1-8b-instruct", ["yarn", "--factor", "2", "--fine-tuned"]),
    ("llama-3.1-8b-instruct", ["linear", "--factor", "2", "--fine-tuned"]),
    ("llama-3.1-8b-instruct", ["ntk", "--factor", "2", "--fine-tuned"]),
    ("llama-3.2-1b-instruct", ["llama3", "--target", "128k"]),  # its own llama3 x32
    ("llama-3.2-1b-instruct", ["llama3", "--target", "256k"]),
    ("qwen2.5-7b-instruct", ["yarn", "--factor", "4"]),
    ("qwen2.5-7b-instruct", ["linear", "--factor", "4"]),
    ("qwen2.5-7b-instruct", ["linear", "--target", "80k"]),  # factor 2.5
    ("qwen2.5-7b-instruct", ["llama3", "--factor", "4"]),  # original 32768: not 8192
    ("qwen2.5-7b-instruct", ["ntk", "--factor", "4"]),
    ("qwen2.5-7b-instruct", ["dynamic", "--factor", "4"]),
    ("qwen3-8b", ["yarn", "--factor", "4"]),
    ("qwen3-8b", ["yarn", "--factor", "4", "--mscale", "1", "--mscale-all-dim", "1"]),
    ("qwen3-8b", ["yarn", "--factor", "4", "--mscale", "0.707"]),
    ("qwen3-8b", ["yarn", "--factor", "4", "--attention-factor", "1"]),
    ("qwen3-8b", ["yarn", "--factor", "4", "--no-truncate"]),
    ("qwen3-8b", ["yarn", "--factor", "4", "--partial-rotary-factor", "0.5"]),
    ("deepseek-v3", ["yarn", "--target", "160k"]),  # its own YaRN x40 (mscale = mscale_all_dim = 1)
    ("phi-3-mini-128k-instruct", ["longrope", "--target", "128k"]),  # its own longrope
    ("gpt-oss-20b", ["yarn", "--target", "256k", "--fine-tuned"]),  # YaRN x64, truncate false
]
IDS = [f"{name}:{'_'.join(a for a in args if not a.startswith('--f'))}" for name, args in CASES]
#: the GPT-attention cases (the MLA ones, deepseek-v3, are test_megatron_mla's)
GPT_CASES = [(name, args) for name, args in CASES if not name.startswith("deepseek")]
GPT_IDS = [i for i, (name, _) in zip(IDS, CASES, strict=True) if not name.startswith("deepseek")]


def scale(name: str, args: list[str], fmt: str) -> Any:
    return run("scale", *args, "--config", str(CORPUS / f"{name}.json"), "--engine", fmt)


def transformers_numbers(name: str, args: list[str]) -> tuple[np.ndarray, float, Any]:
    """inv_freq, attention factor and config transformers builds from the config posenc writes for the request."""
    patched = json.loads(ok(run("scale", *args, "--config", str(CORPUS / f"{name}.json"), "--engine", "hf-v5",
                                "-o", "-")).stdout)
    cfg = quiet_config(AutoConfig.for_model, **patched)
    inv, attention = hf_frequencies(getattr(cfg, "text_config", None) or cfg)
    return inv, attention, cfg


def head_dim(cfg: Any) -> int:
    return int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)


def difference(message: str) -> tuple[int, int, float] | None:
    """(pairs that differ, pairs, largest ratio) as an error line states them."""
    found = re.search(r"differs in (\d+) of (\d+) pairs \(\d+-\d+\), up to ([\d.]+)x", message)
    return None if found is None else (int(found[1]), int(found[2]), float(found[3]))


def assert_measured(message: str, hf_inv: np.ndarray, framework_inv: np.ndarray) -> None:
    """The error line's measured difference is what the framework's own code computes (4 significant digits)."""
    stated = difference(message)
    assert stated is not None, message
    hf64, fw64 = hf_inv.astype(np.float64), framework_inv.astype(np.float64)
    off = ~np.isclose(fw64, hf64, rtol=RTOL, atol=0)
    assert (int(off.sum()), hf64.size) == stated[:2], (message, int(off.sum()))
    assert float(np.maximum(fw64 / hf64, hf64 / fw64)[off].max()) == pytest.approx(stated[2], rel=1e-3)


# ----------------------------------------------------------------------------------------------------- Megatron-Core

def megatron_args(text: str) -> argparse.Namespace:
    """The printed flags through Megatron-LM's own argument definitions."""
    return th.megatron_parser().parse_args(shlex.split(text))


def megatron_llama3_factor_forwarded() -> bool:
    """Whether Megatron-LM's gpt_config_from_args names rope_scaling_factor at all (0.19.2: no, NVIDIA #6305)."""
    tree = th.megatron_function("gpt_config_from_args")
    return any(isinstance(n, (ast.Name, ast.Attribute, ast.Constant)) and "rope_scaling_factor" in ast.dump(n)
               for n in ast.walk(tree))


def megatron_numbers(fields: Any, dim: int, monkeypatch: pytest.MonkeyPatch) -> tuple[np.ndarray, float]:
    """inv_freq and cos/sin factor of the rotary module GPTModel builds from these fields (gpt_model.py L166-209)."""
    rotary, yarn = th.megatron_rope()
    percent = getattr(fields, "rotary_percent", 1.0)
    if fields.position_embedding_type == "rope":
        module = rotary.RotaryEmbedding(
            kv_channels=dim, rotary_percent=percent, seq_len_interpolation_factor=fields.seq_len_interpolation_factor,
            rotary_base=fields.rotary_base, rope_scaling=fields.rope_scaling,
            rope_scaling_factor=fields.rope_scaling_factor, use_cpu_initialization=True)
        # the angles of position 1 (Megatron divides positions by the linear factor; transformers divides inv_freq)
        return module.get_freqs_non_repeated(2)[1].numpy(), 1.0
    assert fields.position_embedding_type == "yarn"
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")  # YarnRotaryEmbedding builds cos/sin in init
    module = yarn.YarnRotaryEmbedding(
        kv_channels=dim, rotary_percent=percent, rotary_base=fields.rotary_base,
        scaling_factor=fields.yarn_rotary_scaling_factor,
        original_max_position_embeddings=fields.yarn_original_max_position_embeddings,
        beta_fast=fields.yarn_beta_fast, beta_slow=fields.yarn_beta_slow, mscale=fields.yarn_mscale,
        mscale_all_dim=fields.yarn_mscale_all_dim,
        correction_range_round_to_int=fields.yarn_correction_range_round_to_int, use_cpu_initialization=True)
    emb, mscale = module.get_emb(2)
    return emb[1, 0, 0, : emb.shape[-1] // 2].numpy(), float(mscale)


def cli_fields(args: argparse.Namespace) -> types.SimpleNamespace:
    """What Megatron-LM makes of the parsed flags: gpt_config_from_args (rope_scaling_factor as it forwards it) and
    _apply_yarn_config_from_args, run unchanged."""
    config = types.SimpleNamespace(
        position_embedding_type=args.position_embedding_type, rotary_base=args.rotary_base,
        rotary_percent=args.rotary_percent, seq_len_interpolation_factor=args.rotary_seq_len_interpolation_factor,
        rope_scaling=args.use_rope_scaling,
        rope_scaling_factor=args.rope_scaling_factor if megatron_llama3_factor_forwarded() else 8.0)
    assert not args.multi_latent_attention  # Megatron-LM's own flag: GPT attention here
    th.apply_yarn_config(config, args)
    return config


@needs_megatron
@pytest.mark.parametrize(("name", "args"), GPT_CASES, ids=GPT_IDS)
def test_megatron_cli(name: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    hf_inv, hf_attention, cfg = transformers_numbers(name, args)
    result = scale(name, args, "megatron")
    if result.exit_code == 0:
        fields = cli_fields(megatron_args(result.stdout))
        inv, attention = megatron_numbers(fields, head_dim(cfg), monkeypatch)
        np.testing.assert_allclose(inv, hf_inv, rtol=RTOL, atol=0)
        assert attention == pytest.approx(hf_attention, rel=1e-9)
        return
    line = assert_usage_error(result, "Megatron")
    check_megatron_refusal(line, name, args, cfg, hf_inv, hf_attention, monkeypatch)


def check_megatron_refusal(line: str, name: str, args: list[str], cfg: Any, hf_inv: np.ndarray, hf_attention: float,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Each refusal states what Megatron-Core's own classes compute for the plain mapping of the request."""
    rope = dict((getattr(cfg, "text_config", None) or cfg).rope_parameters)
    kind = rope["rope_type"]
    dim = head_dim(cfg)
    base = types.SimpleNamespace(position_embedding_type="rope", rotary_base=rope["rope_theta"],
                                 seq_len_interpolation_factor=None, rope_scaling=False, rope_scaling_factor=8.0)
    if "never forwards --rope-scaling-factor" in line:
        assert not megatron_llama3_factor_forwarded()
        base.rope_scaling = True  # the factor that reaches the model: RotaryEmbedding's default 8
        assert_measured(line, hf_inv, megatron_numbers(base, dim, monkeypatch)[0])
    elif "fixes llama3" in line:
        base.rope_scaling, base.rope_scaling_factor = True, rope["factor"]
        assert_measured(line, hf_inv, megatron_numbers(base, dim, monkeypatch)[0])
    elif "ignores rotary_percent" in line:
        assert kind == "yarn"
        monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
        _, yarn = th.megatron_rope()
        module = yarn.YarnRotaryEmbedding(kv_channels=dim, rotary_percent=rope["partial_rotary_factor"],
                                          rotary_base=rope["rope_theta"], scaling_factor=rope["factor"],
                                          original_max_position_embeddings=rope["original_max_position_embeddings"],
                                          use_cpu_initialization=True)
        emb, _ = module.get_emb(2)
        assert emb.shape[-1] // 2 == dim // 2 != hf_inv.size
        assert f"{dim // 2} frequencies instead of {hf_inv.size}" in line
    elif "takes an integer, not" in line:
        assert kind == "linear" and not float(rope["factor"]).is_integer()
        with pytest.raises(argparse.ArgumentError):
            megatron_args(f"--rotary-seq-len-interpolation-factor {rope['factor']}")
    elif "--rotary-base takes an integer" in line:
        with pytest.raises(argparse.ArgumentError):
            megatron_args(f"--rotary-base {rope['rope_theta']!r}")
        nearest = float(round(rope["rope_theta"]))
        base.rotary_base = int(nearest)
        assert_measured(line, hf_inv, megatron_numbers(base, dim, monkeypatch)[0])
    else:
        assert f"has no {kind} RoPE" in line, line
        assert kind in ("dynamic", "longrope")


@needs_megatron
def test_megatron_yarn_mscale_only_is_solved(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers ignores mscale without mscale_all_dim; Megatron takes the ratio with get_mscale(s, 0) = 1: the
    caveat quotes Megatron's own value for the one-to-one mapping, and the printed flags give transformers' factor."""
    _, yarn = th.megatron_rope()
    args = ["yarn", "--factor", "40", "--original-max", "4k", "--theta", "10000", "--head-dim", "64",
            "--mscale", "0.707", "--fine-tuned"]
    result = ok(run("scale", *args, "--engine", "megatron"))
    naive = yarn._yarn_get_concentration_factor(40.0, 0.707, 0.0)
    hf = quiet_config(AutoConfig.for_model, model_type="llama", head_dim=64, hidden_size=64 * 8,
                      num_attention_heads=8, max_position_embeddings=40 * 4096,
                      rope_parameters={"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                                       "mscale": 0.707, "rope_theta": 10000.0})
    hf_inv, hf_attention = hf_frequencies(hf)
    assert f"gives {naive:.6g} where transformers uses {hf_attention:.6g}" in result.stderr
    assert round(naive, 4) == 1.2608 and round(hf_attention, 4) == 1.3689  # the reference's measurement
    inv, attention = megatron_numbers(cli_fields(megatron_args(result.stdout)), 64, monkeypatch)
    np.testing.assert_allclose(inv, hf_inv, rtol=RTOL, atol=0)
    assert attention == pytest.approx(hf_attention, rel=1e-9)


# -------------------------------------------------------------------------------------------------- Megatron-Bridge

def bridge_fields(text: str) -> types.SimpleNamespace:
    """The printed ``provider.X = value`` lines as a provider (literals only)."""
    provider = types.SimpleNamespace(rotary_percent=1.0, seq_len_interpolation_factor=None, rope_scaling=False,
                                     rope_scaling_factor=1.0)  # GPTModelProvider's defaults (gpt_provider.py)
    for key, value in printed_provider(text).items():
        setattr(provider, key, value)
    return provider


def printed_provider(text: str) -> dict[str, Any]:
    """The printed ``provider.X = value`` lines (literals only)."""
    out = {}
    for line in text.splitlines():
        target, value = line.split(" = ", 1)
        assert target.startswith("provider.")
        out[target.removeprefix("provider.")] = ast.literal_eval(value)
    return out


@needs_megatron
@pytest.mark.parametrize(("name", "args"), GPT_CASES, ids=GPT_IDS)
def test_megatron_bridge(name: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Bridge's provider fields through Megatron-Core's classes as GPTModel builds them (Megatron-Bridge itself
    imports transformer_engine, so its provider is not built here)."""
    hf_inv, hf_attention, cfg = transformers_numbers(name, args)
    result = scale(name, args, "megatron-bridge")
    if result.exit_code == 0:
        inv, attention = megatron_numbers(bridge_fields(result.stdout), head_dim(cfg), monkeypatch)
        np.testing.assert_allclose(inv, hf_inv, rtol=RTOL, atol=0)
        assert attention == pytest.approx(hf_attention, rel=1e-9)
        return
    line = assert_usage_error(result, "Megatron-Bridge")
    if "never forwards" in line:
        pytest.fail("the CLI bug is Megatron-LM's, not Bridge's")
    check_megatron_refusal(line, name, args, cfg, hf_inv, hf_attention, monkeypatch)


@needs_megatron
@pytest.mark.skipif(th.installed("megatron-bridge") != th.BRIDGE_VERSION, reason="megatron-bridge 0.6.2 not installed")
def test_bridge_hf_import_of_the_same_yarn_fails_where_the_printed_fields_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Why every yarn_* field is printed: Bridge's own HF mapping (YARN_ROPE_SCALING_MAPPING, copied only when the
    key is present, model_bridge.py L582-602) of Qwen3's YaRN x4 dict leaves beta_fast/beta_slow None and the rounding
    off; Megatron-Core then raises TypeError, and with the betas given, rounding off moves inv_freq."""
    hf_inv, _, cfg = transformers_numbers("qwen3-8b", ["yarn", "--factor", "4"])
    rope = dict(cfg.rope_parameters)
    mapped = {"yarn_beta_fast": None, "yarn_beta_slow": None, "yarn_mscale": None, "yarn_mscale_all_dim": None,
              "yarn_correction_range_round_to_int": None}  # GPTModelProvider's defaults (gpt_provider.py)
    for hf_key, megatron_key in th.bridge_constant("YARN_ROPE_SCALING_MAPPING"):
        if rope.get(hf_key) is not None:
            mapped[megatron_key] = rope[hf_key]
    if "truncate" in rope:
        mapped["yarn_correction_range_round_to_int"] = rope["truncate"]
    fields = types.SimpleNamespace(position_embedding_type="yarn", rotary_base=rope["rope_theta"], **mapped)
    with pytest.raises(TypeError):
        megatron_numbers(fields, head_dim(cfg), monkeypatch)
    fields.yarn_beta_fast, fields.yarn_beta_slow = 32.0, 1.0
    inv, _ = megatron_numbers(fields, head_dim(cfg), monkeypatch)
    assert not np.allclose(inv, hf_inv, rtol=RTOL, atol=0)  # truncate missing -> no floor/ceil
    printed = bridge_fields(ok(scale("qwen3-8b", ["yarn", "--factor", "4"], "megatron-bridge")).stdout)
    np.testing.assert_allclose(megatron_numbers(printed, head_dim(cfg), monkeypatch)[0], hf_inv, rtol=RTOL, atol=0)


# -------------------------------------------------------------------------------------------------------- torchtune

def tune_numbers(text: str, dim: int) -> np.ndarray:
    """The printed builder fields through the classes torchtune's builders construct (llama3_1 L85, qwen2 L84);
    max_seq_len only sizes the cache, so a short one keeps the test small."""
    import yaml

    fields = yaml.safe_load(text)["model"]
    if "scale_factor" in fields:
        rope = th.tune_module("models/llama3_1/_position_embeddings.py").Llama3ScaledRoPE(
            dim=dim, max_seq_len=4, base=fields["rope_base"], scale_factor=fields["scale_factor"])
    else:
        rope = th.tune_module("modules/position_embeddings.py").RotaryPositionalEmbeddings(
            dim=dim, max_seq_len=4, base=fields["rope_base"])
    return rope.theta.numpy()


@needs_tune
@pytest.mark.parametrize(("name", "args"), CASES, ids=IDS)
def test_torchtune(name: str, args: list[str]) -> None:
    hf_inv, hf_attention, cfg = transformers_numbers(name, args)
    result = scale(name, args, "torchtune")
    rope = dict((getattr(cfg, "text_config", None) or cfg).rope_parameters)
    if result.exit_code == 0:
        np.testing.assert_allclose(tune_numbers(result.stdout, head_dim(cfg)), hf_inv, rtol=RTOL, atol=0)
        assert hf_attention == 1.0
        return
    line = assert_usage_error(result, "torchtune")
    if "fixes llama3" in line:
        theta = th.tune_module("models/llama3_1/_position_embeddings.py").Llama3ScaledRoPE(
            dim=head_dim(cfg), max_seq_len=4, base=rope["rope_theta"], scale_factor=rope["factor"]).theta.numpy()
        assert_measured(line, hf_inv, theta)
    elif "rotate the whole head" in line:
        assert rope.get("partial_rotary_factor", 1.0) < 1.0
    else:
        assert f"has no {rope['rope_type']} RoPE" in line
        assert rope["rope_type"] not in ("default", "llama3")


# ------------------------------------------------------------------------------------------------------- torchtitan

def titan_numbers(text: str) -> np.ndarray:
    """The printed RoPE config built by torchtitan, its inv_freq read back as the angle of position 1."""
    rope = th.titan_rope()
    config = eval(text, {"ComplexRoPE": rope.ComplexRoPE, "CosSinRoPE": rope.CosSinRoPE})  # noqa: S307
    config.max_seq_len = 4  # only sizes the cache
    module = type(config).__qualname__.split(".")[0]
    built = getattr(rope, module)(config)
    if module == "ComplexRoPE":
        return torch.angle(built.cache[1]).numpy()
    half = config.dim // 2
    cos, sin = built.cache[1, :half], built.cache[1, 2 * half: 3 * half]
    return torch.atan2(sin, cos).numpy()


@needs_titan
@pytest.mark.parametrize(("name", "args"), CASES, ids=IDS)
def test_torchtitan(name: str, args: list[str]) -> None:
    hf_inv, hf_attention, cfg = transformers_numbers(name, args)
    result = scale(name, args, "torchtitan")
    rope = dict((getattr(cfg, "text_config", None) or cfg).rope_parameters)
    if result.exit_code == 0:
        np.testing.assert_allclose(titan_numbers(result.stdout), hf_inv, rtol=RTOL, atol=0)
        if hf_attention != 1.0:  # torchtitan's rope never scales cos/sin: only its gpt-oss attention folds it in
            assert cfg.model_type == "gpt_oss"
            source = (th.titan_root() / "models" / "gpt_oss" / "model.py").read_text(encoding="utf-8")
            assert "mscale = 0.1 * math.log(config.rope.rope_factor) + 1.0" in source
            assert "self.softmax_scale *= mscale * mscale" in source
            assert 0.1 * math.log(rope["factor"]) + 1.0 == pytest.approx(hf_attention, rel=1e-12)
        return
    line = assert_usage_error(result, "torchtitan")
    if "never applies YaRN's attention factor" in line:
        titan = th.titan_rope()
        built = titan.CosSinRoPE(titan.CosSinRoPE.Config(
            dim=head_dim(cfg), max_seq_len=2, theta=rope["rope_theta"], scaling="yarn", rope_factor=rope["factor"],
            original_seq_len=rope["original_max_position_embeddings"], truncate=rope.get("truncate", True)))
        cos0 = float(built.cache[0, 0])  # cos at position 0: the cos/sin magnitude
        assert cos0 == 1.0 != hf_attention
        assert f"where transformers uses x{hf_attention:.6g}" in line
    elif "rotates the whole head" in line:
        assert rope.get("partial_rotary_factor", 1.0) < 1.0
    else:
        assert f"has no {rope['rope_type']} RoPE" in line
        assert rope["rope_type"] in ("linear", "dynamic", "longrope")


# ------------------------------------------------------------------------------------------------------------ shared

def test_a_refusal_names_nothing_on_stdout() -> None:
    """A trainer that cannot express the request: one error line, exit 2 (no flags a user could paste)."""
    assert_usage_error(run("scale", "dynamic", "--factor", "2", "--original-max", "4k", "--engine", "torchtune"),
                       "torchtune has no dynamic RoPE")


@needs_megatron
def test_megatron_refuses_a_fractional_base(monkeypatch: pytest.MonkeyPatch) -> None:
    """Megatron-LM's --rotary-base is an int: a static-NTK base whose rounding moves inv_freq is refused with what
    Megatron-Core computes at the rounded base."""
    line = assert_usage_error(run("scale", "ntk", "--factor", "2", "--original-max", "4k", "--theta", "3",
                                  "--engine", "megatron"), "--rotary-base takes an integer")
    patched = json.loads(ok(run("scale", "ntk", "--factor", "2", "--original-max", "4k", "--theta", "3",
                                "--engine", "hf-v5")).stdout)
    theta = patched["rope_parameters"]["rope_theta"]
    cfg = quiet_config(AutoConfig.for_model, model_type="llama", head_dim=128, hidden_size=1024,
                       num_attention_heads=8, **patched)
    hf_inv, _ = hf_frequencies(cfg)
    with pytest.raises(argparse.ArgumentError):
        megatron_args(f"--rotary-base {theta!r}")
    nearest = int(re.search(r"--rotary-base (\d+)$", line)[1])  # type: ignore[index]
    assert nearest == round(theta)
    fields = types.SimpleNamespace(position_embedding_type="rope", rotary_base=nearest,
                                   seq_len_interpolation_factor=None, rope_scaling=False, rope_scaling_factor=8.0)
    assert_measured(line, hf_inv, megatron_numbers(fields, 128, monkeypatch)[0])


@pytest.mark.parametrize("fmt", ["hf", "vllm", "megatron"])
def test_only_a_trainer_format_loads_the_trainer_module(fmt: str) -> None:
    """``posenc scale`` without a trainer format never imports a trainer module; with one, only its own, and no
    framework (nor torch) is imported either."""
    import subprocess
    import sys

    code = ("import sys\nfrom posenc_cli.cli import app\n"
            f"code = app(['scale', 'yarn', '--original-max', '32k', '--target', '128k', '--engine', {fmt!r}], "
            "standalone_mode=False)\nassert code in (0, None), code\n"
            "sys.__stderr__.write('LOADED ' + ' '.join(sorted(sys.modules)) + '\\n')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    line = next(x for x in proc.stderr.splitlines() if x.startswith("LOADED "))
    loaded = set(line.split()[1:])
    from posenc_cli.frameworks.registry import TRAINER, entries

    frameworks = {e.module for e in entries(TRAINER)}
    assert loaded & frameworks == ({"posenc_cli.trainers.megatron"} if fmt == "megatron" else set())
    assert not loaded & {"torch", "megatron", "torchtitan", "torchtune", "transformers"}


# ------------------------------------------------------------------------------------------- Megatron-Core MLA

#: every MLA config of the corpus transformers has a class for (kimi_k2 is read as deepseek_v3, posenc's alias;
#: deepseek-vl2-tiny's language model is remote code with MLA off), with its own YaRN (the window it ships) and
#: larger factors on top
MLA_CORPUS = {"deepseek-v3": "160k", "deepseek-r1": "160k", "deepseek-v3.1": "160k", "deepseek-v3.2": "160k",
              "kimi-k2": "128k", "kimi-k2.5": "256k"}
MLA_CASES = [(name, args) for name, window in MLA_CORPUS.items()
             for args in (["yarn", "--target", window], ["yarn", "--factor", "2", "--fine-tuned"],
                          ["yarn", "--factor", "3.5", "--fine-tuned"], ["yarn", "--factor", "8", "--fine-tuned"])]
MLA_CASES += [("deepseek-v3", args) for args in (
    ["yarn", "--factor", "2", "--fine-tuned", "--mscale", "0.707"],  # mscale/mscale_all_dim 0.707/1: a ratio
    ["yarn", "--factor", "2", "--fine-tuned", "--attention-factor", "1"],  # explicit: mscale solved
    ["yarn", "--factor", "2", "--fine-tuned", "--beta-fast", "16"],  # the CLI cannot, Bridge can
    ["yarn", "--factor", "2", "--fine-tuned", "--no-truncate"],  # MLA always rounds
    ["linear", "--factor", "2", "--fine-tuned"], ["ntk", "--factor", "2", "--fine-tuned"],
)]
#: DeepSeek-V3 with one of its mscale keys gone (what `posenc scale` cannot write: its mscale options are > 0):
#: transformers then takes 0.1 ln s + 1 for cos/sin, and the softmax multiplier only with mscale_all_dim
MLA_VARIANTS = {"deepseek-v3~no-mscale-all-dim": "mscale_all_dim", "deepseek-v3~no-mscale": "mscale"}
MLA_CASES += [(name, args) for name in MLA_VARIANTS
              for args in (["yarn", "--target", "160k"], ["yarn", "--factor", "2", "--fine-tuned"])]
MLA_IDS = [f"{name}:{'_'.join(a.lstrip('-') for a in args if a not in ('--fine-tuned', 'yarn'))}"
           for name, args in MLA_CASES]


@functools.cache
def mla_source(name: str) -> str:
    """A corpus config, or a :data:`MLA_VARIANTS` one written to a temporary folder."""
    if name not in MLA_VARIANTS:
        return str(CORPUS / f"{name}.json")
    base, _ = name.split("~")
    cfg = json.loads((CORPUS / f"{base}.json").read_text())
    cfg["rope_scaling"] = {k: v for k, v in cfg["rope_scaling"].items() if k != MLA_VARIANTS[name]}
    path = Path(tempfile.mkdtemp()) / f"{name}.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def mla_scale(name: str, args: list[str], fmt: str) -> Any:
    return run("scale", *args, "--config", mla_source(name), "--engine", fmt)


def mla_transformers_numbers(name: str, args: list[str]) -> tuple[np.ndarray, float, float, Any]:
    """inv_freq, cos/sin factor and softmax multiplier (``yarn_apply_mscale`` of 1) transformers' DeepSeek classes
    build from the config posenc writes for the request."""
    patched = json.loads(ok(mla_scale(name, [*args, "-o", "-"], "hf-v5")).stdout)
    text = patched.get("text_config", patched)
    if text["model_type"] == "kimi_k2":  # no transformers class: DeepSeek-V3's (posenc's alias, vLLM's mapping)
        text = {**text, "model_type": "deepseek_v3"}
    text.pop("auto_map", None)
    cfg = quiet_config(AutoConfig.for_model, **text)
    inv, attention = hf_frequencies(cfg)
    modeling = __import__(type(cfg).__module__.replace(".configuration_", ".modeling_"), fromlist=["_"])
    return inv, attention, float(modeling.yarn_apply_mscale(cfg.rope_parameters, 1.0)), cfg


def mla_megatron_numbers(config: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[np.ndarray, float, float]:
    """inv_freq, cos/sin factor and softmax multiplier of the rotary module MLA builds from an MLATransformerConfig
    (multi_latent_attention.py L177-199, constructed as there; use_cpu_initialization only picks the device)."""
    rotary, yarn = th.megatron_rope()
    source = (th.megatron_root() / "core" / "transformer" / "multi_latent_attention.py").read_text()
    assert "mscale = _yarn_get_mscale(self.config.rotary_scaling_factor, self.config.mscale_all_dim)" in source
    assert "self.softmax_scale = mscale * mscale / math.sqrt(self.q_head_dim)" in source
    multiplier = yarn._yarn_get_mscale(config.rotary_scaling_factor, config.mscale_all_dim) ** 2
    if config.rope_type == "rope":
        module = rotary.RotaryEmbedding(config.qk_pos_emb_head_dim, rotary_percent=config.rotary_percent,
                                        rotary_base=config.rotary_base, use_cpu_initialization=True)
        return module.get_freqs_non_repeated(2)[1].numpy(), 1.0, multiplier
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    module = yarn.YarnRotaryEmbedding(
        config.qk_pos_emb_head_dim, rotary_base=config.rotary_base, scaling_factor=config.rotary_scaling_factor,
        original_max_position_embeddings=config.original_max_position_embeddings, beta_fast=config.beta_fast,
        beta_slow=config.beta_slow, mscale=config.mscale, mscale_all_dim=config.mscale_all_dim,
        use_cpu_initialization=True)
    emb, mscale = module.get_emb(2)
    return emb[1, 0, 0, : emb.shape[-1] // 2].numpy(), float(mscale), multiplier


def mla_config(values: dict[str, Any]) -> Any:
    """An MLATransformerConfig (megatron-core's own class, its defaults for everything not given) with ``values``
    for its fields; other names must be GPTModel's."""
    config = th.megatron_config_module()
    names = {f.name for f in dataclasses.fields(config.MLATransformerConfig)}
    assert set(values) - names <= {"position_embedding_type", "max_position_embeddings", "seq_length"}
    given = {k: v for k, v in values.items() if k in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return config.MLATransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=1, **given)


def mla_cli_config(text: str) -> Any:
    """The printed flags through Megatron-LM's own definitions, then as transformer_config_from_args copies them:
    every MLATransformerConfig field the parsed arguments name (argument_utils.py L300-303)."""
    args = megatron_args(text)
    assert args.multi_latent_attention and args.position_embedding_type == "rope"
    return mla_config({k: v for k, v in vars(args).items() if k in {
        f.name for f in dataclasses.fields(th.megatron_config_module().MLATransformerConfig)}})


def assert_mla_same(megatron: tuple[np.ndarray, float, float], hf: tuple[np.ndarray, float, float]) -> None:
    np.testing.assert_allclose(megatron[0], hf[0], rtol=RTOL, atol=0)
    assert megatron[1] == pytest.approx(hf[1], rel=1e-9)
    assert megatron[2] == pytest.approx(hf[2], rel=1e-9)


def check_mla_refusal(line: str, rope: dict[str, Any], hf_inv: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each MLA refusal states what Megatron-Core's MLA rotary class computes for the plain mapping."""
    kind = rope["rope_type"]
    if kind != "yarn":
        assert f"multi-latent attention has no {kind} RoPE" in line
        return
    plain = {"rope_type": "yarn", "rotary_base": rope["rope_theta"], "qk_pos_emb_head_dim": hf_inv.size * 2,
             "rotary_scaling_factor": rope["factor"],
             "original_max_position_embeddings": rope["original_max_position_embeddings"],
             "beta_fast": rope.get("beta_fast") or 32.0, "beta_slow": rope.get("beta_slow") or 1.0}
    if "no flag for MLA's" in line:
        for key in th.megatron_config_module().MLATransformerConfig.__dataclass_fields__:
            if key in ("original_max_position_embeddings", "beta_fast", "beta_slow"):
                plain.pop(key)  # what the CLI leaves at the class default
    else:
        assert "always rounds the correction range" in line and rope["truncate"] is False
    inv, _, _ = mla_megatron_numbers(mla_config(plain), monkeypatch)
    assert_measured(line, hf_inv, inv)


@needs_megatron
@pytest.mark.parametrize("fmt", ["megatron", "megatron-bridge"])
@pytest.mark.parametrize(("name", "args"), MLA_CASES, ids=MLA_IDS)
def test_megatron_mla(name: str, args: list[str], fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """MLA flags/fields through MLATransformerConfig and the rotary module MLA builds: transformers' inv_freq,
    cos/sin factor and softmax multiplier, or a refusal with Megatron's measured difference."""
    hf_inv, hf_attention, hf_softmax, cfg = mla_transformers_numbers(name, args)
    result = mla_scale(name, args, fmt)
    if result.exit_code == 0:
        config = mla_cli_config(result.stdout) if fmt == "megatron" else mla_config(
            printed_provider(result.stdout))
        assert config.qk_pos_emb_head_dim == cfg.qk_rope_head_dim
        assert_mla_same(mla_megatron_numbers(config, monkeypatch), (hf_inv, hf_attention, hf_softmax))
        return
    line = assert_usage_error(result, "Megatron")
    if fmt == "megatron-bridge":
        assert "no flag" not in line  # the CLI's gap, not Bridge's
    check_mla_refusal(line, dict(cfg.rope_parameters), hf_inv, monkeypatch)


@needs_megatron
def test_megatron_mla_plain_rope(monkeypatch: pytest.MonkeyPatch) -> None:
    """An MLA model with plain RoPE: rope_type rope, no softmax multiplier (rotary_scaling_factor 1), and the
    --no-rope-fusion MLATransformerConfig needs for it (its __post_init__ refuses the CLI's default fusion)."""
    cfg = json.loads((CORPUS / "deepseek-v3.json").read_text())
    cfg = {k: v for k, v in cfg.items() if k != "rope_scaling"} | {"max_position_embeddings": 4096}
    from posenc_cli.engines.target import Rendering
    from posenc_cli.models.facts import model_facts
    from posenc_cli.models.model_positions import describe
    from posenc_cli.rope.scaling import ScaleRequest
    from posenc_cli.trainers import megatron

    facts = model_facts(describe(cfg), "plain")
    # plain RoPE as posenc requests it (pick's plain_request: ntk x1 is rope_theta and no scaling)
    req = ScaleRequest("ntk", 4096, 4096, 1.0, theta=facts.theta, head_dim=64)
    assert facts.theta == 10000.0
    text, _ = megatron.render(Rendering(req, "megatron", facts=facts))
    assert "--no-rope-fusion" in text
    config = mla_cli_config(text)
    with pytest.raises(ValueError, match="apply_rope_fusion"):
        mla_cli_config(text.replace(" --no-rope-fusion", ""))
    hf = quiet_config(AutoConfig.for_model, **cfg)
    hf_inv, hf_attention = hf_frequencies(hf)
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import yarn_apply_mscale

    assert_mla_same(mla_megatron_numbers(config, monkeypatch),
                    (hf_inv, hf_attention, yarn_apply_mscale(hf.rope_parameters, 1.0)))


@needs_megatron
@needs_titan
@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="trl is not installed")
def test_a_stage_sets_each_trainers_own_training_length() -> None:
    """``scale --seq-len`` (a pick stage): the length flags and fields exist in the frameworks' own code and carry
    the stage's length, while the rope flags stay the target's."""
    bare = ["scale", "yarn", "--original-max", "32k", "--target", "128k", "--theta", "1e6", "--head-dim", "128",
            "--seq-len", "64k"]
    args = megatron_args(ok(run(*bare, "--engine", "megatron")).stdout)
    assert (args.seq_length, args.max_position_embeddings, args.rotary_scaling_factor) == (65536, 65536, 4.0)
    # pick's --train-samples for a stage's tokens: Megatron-LM makes its flags from TrainingConfig's fields
    fields = {n.target.id for n in ast.walk(th._tree(th.megatron_root() / "training" / "config" / "training_config.py"))
              if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    assert "train_samples" in fields
    from torchtitan.config.configs import TrainingConfig

    text = ok(run("scale", "ntk", "--original-max", "32k", "--factor", "1", "--theta", "1e6", "--head-dim", "128",
                  "--seq-len", "16k", "--engine", "torchtitan")).stdout
    field, value = text.splitlines()[-1].split(" = ")
    assert field == "training.seq_len" and TrainingConfig(seq_len=int(value)).seq_len == 16384
    import dataclasses

    from trl import SFTConfig

    assert "max_length" in {f.name for f in dataclasses.fields(SFTConfig)}


@needs_tune
def test_a_stage_sets_torchtunes_tokenizer_length() -> None:
    """``scale --seq-len`` for torchtune writes ``tokenizer: max_seq_len``: every tokenizer builder torchtune 0.6.1
    ships (read from source: the package imports torchao) takes that argument, where it cuts and packs sequences."""
    root = th._root("torchtune")
    assert root is not None
    builders = [n for path in sorted((root / "models").glob("*/_model_builders.py"))
                for n in ast.walk(th._tree(path)) if isinstance(n, ast.FunctionDef) and n.name.endswith("_tokenizer")]
    assert len(builders) >= 5
    assert all("max_seq_len" in [a.arg for a in [*n.args.args, *n.args.kwonlyargs]] for n in builders)
    text = ok(run("scale", "ntk", "--original-max", "32k", "--factor", "1", "--theta", "1e6", "--head-dim", "128",
                  "--seq-len", "16k", "--engine", "torchtune")).stdout
    assert text.splitlines()[-2:] == ["tokenizer:", "  max_seq_len: 16384"]

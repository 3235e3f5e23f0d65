"""posenc's RoPE numbers against the installed transformers 5.x, the oracle it promises to match.

Three layers:

* a grid over every rope type, head dim, theta, factor, length and option: the same rope dict is built as a
  transformers config and as a posenc :class:`RopeSpec`, and ``inv_freq`` / ``attention_factor`` must agree;
* every config ``posenc scale`` prints in formats ``hf`` and ``hf-v5`` loads into transformers with no warning and
  no error, and the model-side frequencies equal what posenc computes for it;
* real model configs (``tests/fixtures``): ``posenc inspect --json`` reports what transformers computes.

Skipped as a whole without the ``parity`` extra (transformers + torch).
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from clihelpers import ok, run  # noqa: E402
from hf_rope import hf_frequencies, hf_messages, load_clean, quiet_config, quiet_frequencies  # noqa: E402
from transformers import AutoConfig, GPTNeoXConfig, LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402

from posenc_cli.engines import hf  # noqa: E402
from posenc_cli.models.model_positions import describe  # noqa: E402
from posenc_cli.rope import scaling  # noqa: E402
from posenc_cli.rope.frequencies import Frequencies, RopeSpec, compute  # noqa: E402

pytestmark = pytest.mark.numeric

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RTOL = 1e-6  # float32 has ~1.2e-7 relative spacing: a few ulps of slack for a different operation order


# ---------------------------------------------------------------------------------------------------------------
# helpers


def assert_same(ours: Frequencies, hf_inv: np.ndarray, hf_attention: float, context: str = "") -> None:
    assert ours.inv_freq.dtype == np.float32
    assert hf_inv.dtype == np.float32
    assert ours.inv_freq.shape == hf_inv.shape, context
    np.testing.assert_allclose(ours.inv_freq, hf_inv, rtol=RTOL, atol=0, err_msg=context)
    assert ours.attention_factor == pytest.approx(hf_attention, rel=1e-12, abs=0), context


def factor_list(n: int, seed: int) -> list[float]:
    """A LongRoPE-like list: ``n`` non-decreasing factors in [1, 64]."""
    values = np.sort(np.random.default_rng(seed).uniform(1.0, 64.0, n))
    return [round(float(v), 6) for v in values]


# ---------------------------------------------------------------------------------------------------------------
# a. the grid: one rope dict, two implementations

HEAD_DIMS = [16, 64, 80, 128, 256]
THETAS = [1e4, 5e5, 1e6]
FACTORS = [1.0, 2.0, 4.0, 8.0, 32.0, 40.0]
HEADS = 4


def llama(head_dim: int, max_pos: int, params: dict[str, Any]) -> Any:
    return quiet_config(LlamaConfig, hidden_size=head_dim * HEADS, num_attention_heads=HEADS,
                        num_key_value_heads=HEADS, head_dim=head_dim, intermediate_size=32, num_hidden_layers=1,
                        vocab_size=32, max_position_embeddings=max_pos, rope_parameters=params)


def neox(head_dim: int, max_pos: int, params: dict[str, Any]) -> Any:
    return quiet_config(GPTNeoXConfig, hidden_size=head_dim * HEADS, num_attention_heads=HEADS,
                        intermediate_size=32, num_hidden_layers=1, vocab_size=32, max_position_embeddings=max_pos,
                        rope_parameters=params)


def check_grid_case(params: dict[str, Any], head_dim: int, max_pos: int, seq_len: int | None,
                    partial: bool = False) -> None:
    """Build ``params`` in both libraries (GPT-NeoX when partial: Llama's default ignores the factor)."""
    config = (neox if partial else llama)(head_dim, max_pos, params)
    rope_type = params["rope_type"]
    if rope_type == "default":
        cls = GPTNeoXRotaryEmbedding if partial else LlamaRotaryEmbedding
        inv, attention = cls.compute_default_rope_parameters(config)
    else:
        with hf_messages():
            inv, attention = ROPE_INIT_FUNCTIONS[rope_type](config, seq_len=seq_len)
    ours = compute(RopeSpec(copy.deepcopy(params), head_dim, max_pos), seq_len)
    context = f"{params} head_dim={head_dim} max_position_embeddings={max_pos} seq_len={seq_len}"
    assert_same(ours, inv.numpy(), float(attention), context)


@pytest.mark.parametrize("theta", THETAS)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_default(head_dim: int, theta: float) -> None:
    check_grid_case({"rope_type": "default", "rope_theta": theta}, head_dim, 4096, None)


# odd rotary dims (64 x 0.4 = 25) are left out: transformers computes them, posenc refuses (test_odd_rotary_dim)
PARTIAL_DIMS = [(d, p) for d in HEAD_DIMS for p in (0.25, 0.4, 0.5) if int(d * p) % 2 == 0]


@pytest.mark.parametrize("theta", THETAS)
@pytest.mark.parametrize(("head_dim", "partial"), PARTIAL_DIMS)
def test_default_partial_rotary(head_dim: int, partial: float, theta: float) -> None:
    params = {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": partial}
    check_grid_case(params, head_dim, 2048, None, partial=True)


@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize("theta", THETAS)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_linear(head_dim: int, theta: float, factor: float) -> None:
    params = {"rope_type": "linear", "rope_theta": theta, "factor": factor}
    check_grid_case(params, head_dim, int(4096 * factor), None)


DYNAMIC_LENGTHS = [None, 1, 2048, 4095, 4096, 4097, 3 * 4096, 40 * 4096 + 7]


@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize("theta", THETAS)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_dynamic(head_dim: int, theta: float, factor: float) -> None:
    params = {"rope_type": "dynamic", "rope_theta": theta, "factor": factor}
    for seq_len in DYNAMIC_LENGTHS:
        check_grid_case(params, head_dim, 4096, seq_len)


YARN_OPTIONS: list[tuple[int, dict[str, Any]]] = [
    (4096, {}),
    (4096, {"truncate": False}),
    (2048, {"truncate": True}),
    (32768, {}),
    (8192, {"beta_fast": 16.0, "beta_slow": 2.0}),
    (4096, {"beta_fast": 64.0, "beta_slow": 0.5, "truncate": False}),
    (4096, {"beta_fast": 0.0, "beta_slow": None}),  # falsy -> 32 / 1 in both
    (4096, {"beta_fast": 4.0, "beta_slow": 4.0}),  # low == high after rounding: the 0.001 guard
    (2048, {"mscale": 0.707, "mscale_all_dim": 0.707}),
    (2048, {"mscale": 0.707, "mscale_all_dim": 1.0}),
    (4096, {"mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}),  # DeepSeek-V3 shape
    (4096, {"mscale": 1.0, "mscale_all_dim": 0.0}),  # mscale_all_dim falsy -> plain 0.1 ln s + 1
    (4096, {"mscale": 1.0}),
    (4096, {"attention_factor": 1.0}),
    (4096, {"attention_factor": 0.8, "truncate": False, "mscale": 1.0, "mscale_all_dim": 0.5}),
]


@pytest.mark.parametrize(("original", "options"), YARN_OPTIONS, ids=[json.dumps(o) for _, o in YARN_OPTIONS])
@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_yarn(head_dim: int, factor: float, original: int, options: dict[str, Any]) -> None:
    for theta in THETAS:
        params = {"rope_type": "yarn", "rope_theta": theta, "factor": factor,
                  "original_max_position_embeddings": original, **options}
        check_grid_case(params, head_dim, int(original * factor), None)


@pytest.mark.parametrize(("max_pos", "original"), [(131072, 4096), (8192, 4096), (4096, 4096)])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_yarn_factor_null_uses_length_ratio(head_dim: int, max_pos: int, original: int) -> None:
    params = {"rope_type": "yarn", "rope_theta": 1e4, "factor": None, "original_max_position_embeddings": original}
    check_grid_case(params, head_dim, max_pos, None)


@pytest.mark.parametrize("options", [{}, {"truncate": False}, {"beta_fast": 8.0, "beta_slow": 2.0}])
@pytest.mark.parametrize("partial", [0.25, 0.5])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_yarn_partial_rotary(head_dim: int, partial: float, options: dict[str, Any]) -> None:
    params = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 8.0, "original_max_position_embeddings": 4096,
              "partial_rotary_factor": partial, **options}
    check_grid_case(params, head_dim, 8 * 4096, None, partial=True)


LONGROPE_VARIANTS: list[tuple[int, dict[str, Any]]] = [
    (32, {}),  # no factor: max_position_embeddings / original (Phi-3)
    (8, {"factor": 8.0}),
    (1, {"factor": 1.0}),  # attention factor 1
    (16, {"factor": 16.0, "attention_factor": 1.5}),
    (4, {"attention_factor": 1}),
]
ORIGINAL = 4096
LONGROPE_LENGTHS = [None, 1, ORIGINAL - 1, ORIGINAL, ORIGINAL + 1, 4 * ORIGINAL]


@pytest.mark.parametrize(("scale", "options"), LONGROPE_VARIANTS, ids=[json.dumps(o) for _, o in LONGROPE_VARIANTS])
@pytest.mark.parametrize("theta", THETAS)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_longrope(head_dim: int, theta: float, scale: int, options: dict[str, Any]) -> None:
    params = {"rope_type": "longrope", "rope_theta": theta, "original_max_position_embeddings": ORIGINAL,
              "short_factor": factor_list(head_dim // 2, 1), "long_factor": factor_list(head_dim // 2, 2), **options}
    for seq_len in LONGROPE_LENGTHS:
        check_grid_case(params, head_dim, scale * ORIGINAL, seq_len)


@pytest.mark.parametrize("seq_len", [None, ORIGINAL, ORIGINAL + 1])
@pytest.mark.parametrize("partial", [0.25, 0.5])
@pytest.mark.parametrize("head_dim", [64, 96, 128])
def test_longrope_partial_rotary(head_dim: int, partial: float, seq_len: int | None) -> None:
    dim = int(head_dim * partial)
    params = {"rope_type": "longrope", "rope_theta": 1e4, "original_max_position_embeddings": ORIGINAL,
              "short_factor": factor_list(dim // 2, 3), "long_factor": factor_list(dim // 2, 4),
              "partial_rotary_factor": partial}
    check_grid_case(params, head_dim, 32 * ORIGINAL, seq_len, partial=True)


LLAMA3_BANDS = [(1.0, 4.0, 8192), (2.0, 8.0, 8192), (1.0, 4.0, 2048), (2.0, 8.0, 256), (1.0, 32.0, 65536)]


@pytest.mark.parametrize(("low", "high", "original"), LLAMA3_BANDS)
@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_llama3(head_dim: int, factor: float, low: float, high: float, original: int) -> None:
    for theta in THETAS:
        params = {"rope_type": "llama3", "rope_theta": theta, "factor": factor, "low_freq_factor": low,
                  "high_freq_factor": high, "original_max_position_embeddings": original}
        check_grid_case(params, head_dim, int(original * max(factor, 2)), None)


@pytest.mark.parametrize("rope_type", ["linear", "dynamic", "llama3"])
@pytest.mark.parametrize("partial", [0.25, 0.5])
def test_other_types_partial_rotary(rope_type: str, partial: float) -> None:
    params: dict[str, Any] = {"rope_type": rope_type, "rope_theta": 5e5, "factor": 8.0,
                              "partial_rotary_factor": partial}
    if rope_type == "llama3":
        params |= {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    max_pos = 8192 if rope_type == "dynamic" else 65536
    for seq_len in ([None, 8192, 3 * 8192] if rope_type == "dynamic" else [None]):
        check_grid_case(params, 128, max_pos, seq_len, partial=True)


def test_odd_rotary_dim() -> None:
    """transformers builds ceil(d/2) frequencies over an odd rotary dim (GLM-4.5's class defaults); so does posenc.
    Its yarn fails there (a ramp of d // 2 entries), so posenc refuses yarn for an odd dim."""
    from posenc_cli.errors import PosencError

    params = {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.4}
    config = neox(64, 2048, params)
    inv, _ = GPTNeoXRotaryEmbedding.compute_default_rope_parameters(config)
    assert inv.shape == (13,)  # int(64 * 0.4) = 25
    np.testing.assert_allclose(compute(RopeSpec(params, 64, 2048)).inv_freq, inv.numpy(), rtol=RTOL, atol=0)
    yarn = {**params, "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
    with pytest.raises(RuntimeError):
        hf_frequencies(neox(64, 8192, yarn))
    with pytest.raises(PosencError, match="even rotary dimension"):
        compute(RopeSpec(yarn, 64, 8192))


def test_llama_default_ignores_partial_rotary() -> None:
    """Deliberate difference: Llama's default function uses the whole head_dim even with a partial factor.

    posenc honours ``partial_rotary_factor`` for every type, as GPT-NeoX, Phi, Phi-3 and all of transformers'
    scaled rope functions do; a Llama model with a partial factor cannot run anyway (cos/sin would not fit q).
    """
    params = {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}
    inv, _ = LlamaRotaryEmbedding.compute_default_rope_parameters(llama(128, 4096, params))
    assert inv.shape == (64,)
    assert compute(RopeSpec(params, 128, 4096)).inv_freq.shape == (32,)


# ---------------------------------------------------------------------------------------------------------------
# b. `posenc scale` output loads cleanly and means the same thing


def llama_base(head_dim: int) -> dict[str, Any]:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": head_dim * 8,
            "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": head_dim, "intermediate_size": 64,
            "num_hidden_layers": 2, "vocab_size": 256, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}


def phi_base(head_dim: int) -> dict[str, Any]:
    """Phi (phi-2 family): partial rotary; its config reads top-level rope_theta and partial_rotary_factor."""
    return {"architectures": ["PhiForCausalLM"], "model_type": "phi", "hidden_size": head_dim * 8,
            "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 64, "num_hidden_layers": 2,
            "vocab_size": 256, "layer_norm_eps": 1e-5, "partial_rotary_factor": 0.4, "rope_theta": 10000.0}


def neox_base(head_dim: int) -> dict[str, Any]:
    return {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "hidden_size": head_dim * 8,
            "num_attention_heads": 8, "intermediate_size": 64, "num_hidden_layers": 2, "vocab_size": 256,
            "rotary_emb_base": 10000, "rotary_pct": 0.25}


LISTS_32 = (factor_list(32, 5), factor_list(32, 6))
LISTS_64 = (factor_list(64, 7), factor_list(64, 8))
LISTS_16 = (factor_list(16, 9), factor_list(16, 10))

SCALE_CASES: list[tuple[str, dict[str, Any]]] = [
    ("linear", {"factor": 2.0, "original_max": 4096}),
    ("linear", {"factor": 8.0, "original_max": 2048, "theta": 5e5, "head_dim": 64}),
    ("linear", {"target": 100000, "original_max": 4096, "head_dim": 80}),
    ("ntk", {"factor": 4.0, "original_max": 4096}),
    ("ntk", {"factor": 16.0, "original_max": 8192, "theta": 1e6, "head_dim": 64}),
    ("dynamic", {"factor": 2.0, "original_max": 4096}),
    ("dynamic", {"factor": 8.0, "original_max": 32768, "theta": 1e6, "head_dim": 256}),
    ("yarn", {"factor": 4.0, "original_max": 32768, "theta": 1e6}),
    ("yarn", {"factor": 32.0, "original_max": 4096, "theta": 150000.0, "head_dim": 64, "truncate": False,
              "beta_fast": 32.0, "beta_slow": 1.0}),
    ("yarn", {"factor": 40.0, "original_max": 4096, "head_dim": 64, "mscale": 1.0, "mscale_all_dim": 1.0,
              "beta_fast": 32.0, "beta_slow": 1.0}),
    ("yarn", {"factor": 16.0, "original_max": 2048, "mscale": 0.707, "mscale_all_dim": 1.0, "truncate": True}),
    ("yarn", {"factor": 8.0, "original_max": 4096, "attention_factor": 1.0, "beta_fast": 16.0, "beta_slow": 2.0}),
    ("yarn", {"target": 100000, "original_max": 8192, "head_dim": 80}),
    ("longrope", {"factor": 32.0, "original_max": 4096, "head_dim": 64, "short_factor": LISTS_32[0],
                  "long_factor": LISTS_32[1]}),
    ("longrope", {"factor": 16.0, "original_max": 8192, "short_factor": LISTS_64[0], "long_factor": LISTS_64[1],
                  "attention_factor": 1.2}),
    ("llama3", {"factor": 8.0, "original_max": 8192, "theta": 5e5}),
    ("llama3", {"factor": 32.0, "original_max": 8192, "theta": 5e5, "head_dim": 64}),
    ("llama3", {"factor": 4.0, "original_max": 2048, "low_freq_factor": 2.0, "high_freq_factor": 8.0}),
]
PARTIAL_CASES: list[tuple[str, dict[str, Any]]] = [
    ("linear", {"factor": 4.0, "original_max": 2048, "head_dim": 80, "partial_rotary_factor": 0.4}),
    ("ntk", {"factor": 4.0, "original_max": 2048, "head_dim": 80, "partial_rotary_factor": 0.4}),
    ("dynamic", {"factor": 4.0, "original_max": 2048, "head_dim": 80, "partial_rotary_factor": 0.4}),
    ("yarn", {"factor": 8.0, "original_max": 2048, "head_dim": 80, "partial_rotary_factor": 0.4}),
    ("yarn", {"factor": 8.0, "original_max": 2048, "head_dim": 128, "partial_rotary_factor": 0.5,
              "truncate": False}),
    ("longrope", {"factor": 16.0, "original_max": 2048, "head_dim": 80, "partial_rotary_factor": 0.4,
                  "short_factor": LISTS_16[0], "long_factor": LISTS_16[1]}),
    ("llama3", {"factor": 8.0, "original_max": 2048, "head_dim": 128, "partial_rotary_factor": 0.25,
                "theta": 5e5}),
]


def _id(case: tuple[str, dict[str, Any]]) -> str:
    method, kwargs = case
    shown = {k: v for k, v in kwargs.items() if k not in ("short_factor", "long_factor")}
    return f"{method}-" + ",".join(f"{k}={v}" for k, v in shown.items())


def check_scaled(config_dict: dict[str, Any], req: scaling.ScaleRequest) -> None:
    """Load cleanly, then the model's frequencies (at init and at the target length) equal posenc's."""
    config = load_clean(config_dict)
    params = scaling.rope_parameters(req)
    assert config.rope_parameters["rope_type"] == params["rope_type"]
    assert config.rope_parameters["rope_theta"] == params["rope_theta"]
    spec = RopeSpec(params, req.head_dim, scaling.max_position_embeddings(req))
    lengths: list[int | None] = [None]
    if req.method in ("dynamic", "longrope"):
        lengths += [req.original_max, req.original_max + 1, req.target]
    for seq_len in lengths:
        with hf_messages() as (records, caught):
            inv, attention = hf_frequencies(config, seq_len)
        assert [r.getMessage() for r in records] == [] and caught == []
        assert_same(compute(spec, seq_len), inv, attention, f"{params} seq_len={seq_len}")


def test_capture_sees_transformers_messages() -> None:
    """Control for the no-warning checks: an unknown key and a factor mismatch (a warning_once) are both seen,
    the second one twice in a row."""
    odd = {**llama_base(64), "max_position_embeddings": 8192,
           "rope_scaling": {"rope_type": "linear", "factor": 2.0, "original_max_position_embeddings": 4096}}
    with hf_messages() as (records, _):
        AutoConfig.for_model(**copy.deepcopy(odd))
    assert any("Unrecognized keys" in r.getMessage() for r in records)
    mismatch = {**llama_base(64), "max_position_embeddings": 8192,
                "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}}
    for _ in range(2):
        with hf_messages() as (records, _):
            AutoConfig.for_model(**copy.deepcopy(mismatch))
        assert any("does not match the ratio" in r.getMessage() for r in records)
    with pytest.raises(AssertionError):
        load_clean(mismatch)


@pytest.mark.parametrize("fmt", ["hf", "hf-v5"])
@pytest.mark.parametrize("case", SCALE_CASES, ids=_id)
def test_scale_output_loads_cleanly_llama(case: tuple[str, dict[str, Any]], fmt: str) -> None:
    method, kwargs = case
    req = scaling.make_request(method, **kwargs)
    rendered = hf.format_hf(req) if fmt == "hf" else hf.format_hf_v5(req)
    check_scaled({**llama_base(req.head_dim), **json.loads(json.dumps(rendered))}, req)


@pytest.mark.parametrize("fmt", ["hf", "hf-v5"])
@pytest.mark.parametrize("case", PARTIAL_CASES, ids=_id)
def test_scale_output_loads_cleanly_partial_rotary_phi(case: tuple[str, dict[str, Any]], fmt: str) -> None:
    method, kwargs = case
    req = scaling.make_request(method, **kwargs)
    rendered = hf.format_hf(req) if fmt == "hf" else hf.format_hf_v5(req)
    # with hf-v5 the base's own top-level rope_theta / partial_rotary_factor stay: the values inside win
    check_scaled({**phi_base(req.head_dim), **json.loads(json.dumps(rendered))}, req)


@pytest.mark.parametrize("case", PARTIAL_CASES, ids=_id)
def test_scale_output_hf_v5_gpt_neox(case: tuple[str, dict[str, Any]]) -> None:
    method, kwargs = case
    req = scaling.make_request(method, **kwargs)
    check_scaled({**neox_base(req.head_dim), **hf.format_hf_v5(req)}, req)


def test_scale_patch_hf_gpt_neox_updates_rotary_emb_base() -> None:
    # GPTNeoXConfig reads only rotary_emb_base / rotary_pct, so patch_config must write those names too

    req = scaling.make_request("ntk", factor=4.0, original_max=2048, head_dim=96, partial_rotary_factor=0.5)
    base = json.loads((FIXTURES / "gpt-neox-20b.json").read_text())
    config = load_clean(hf.patch_config(base, req, "hf"))
    assert config.rope_parameters["rope_theta"] == scaling.rope_parameters(req)["rope_theta"]
    assert config.rope_parameters["partial_rotary_factor"] == 0.5


CLI_CASES = [
    ["yarn", "--original-max", "32k", "--target", "128k", "--theta", "1e6"],
    ["yarn", "--original-max", "4k", "--factor", "32", "--theta", "150000", "--head-dim", "64", "--no-truncate",
     "--fine-tuned"],
    ["yarn", "--original-max", "4096", "--factor", "40", "--head-dim", "64", "--mscale", "1", "--mscale-all-dim", "1",
     "--fine-tuned"],
    ["llama3", "--original-max", "8k", "--target", "128k", "--theta", "500000"],
    ["linear", "--original-max", "2k", "--factor", "4"],
    ["ntk", "--original-max", "4k", "--factor", "8", "--head-dim", "64"],
    ["dynamic", "--original-max", "4k", "--factor", "2"],
    ["longrope", "--original-max", "4k", "--factor", "32", "--head-dim", "64", "--fine-tuned",
     "--short-factor", json.dumps(LISTS_32[0]), "--long-factor", json.dumps(LISTS_32[1])],
]


def _request_from_argv(argv: list[str]) -> scaling.ScaleRequest:
    """The request the CLI builds for ``argv`` (posenc's own parser, so the oracle check stays on the numbers)."""
    from posenc_cli.units import parse_length

    method, rest = argv[0], argv[1:]
    kwargs: dict[str, Any] = {}
    i = 0
    while i < len(rest):
        flag = rest[i]
        if flag == "--no-truncate":
            kwargs["truncate"] = False
        elif flag == "--fine-tuned":
            kwargs["fine_tuned"] = True
        else:
            name, value = flag[2:].replace("-", "_"), rest[i + 1]
            i += 1
            if name in ("original_max", "target"):
                kwargs[name] = parse_length(value, name=flag)
            elif name == "head_dim":
                kwargs[name] = int(value)
            elif name in ("short_factor", "long_factor"):
                kwargs[name] = json.loads(value)
            else:
                kwargs[name] = float(value)
        i += 1
    return scaling.make_request(method, **kwargs)


@pytest.mark.parametrize("fmt", ["hf", "hf-v5"])
@pytest.mark.parametrize("argv", CLI_CASES, ids=lambda a: " ".join(a[:5]))
def test_scale_cli_output_loads_cleanly(argv: list[str], fmt: str, tmp_path: Path) -> None:
    """The real command's stdout, merged into a Llama config.json and read with from_pretrained."""
    result = ok(run("scale", *argv, "--engine", fmt))
    printed = json.loads(result.stdout)
    req = _request_from_argv(argv)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**llama_base(req.head_dim), **printed}))
    with hf_messages() as (records, caught):
        config = AutoConfig.from_pretrained(folder)
    assert [r.getMessage() for r in records] == []
    assert [str(w.message) for w in caught] == []
    check_scaled({**llama_base(req.head_dim), **printed}, req)
    assert config.rope_parameters == load_clean({**llama_base(req.head_dim), **printed}).rope_parameters


@pytest.mark.parametrize("fmt", ["hf", "hf-v5"])
def test_scale_cli_patched_fixture_loads_cleanly(fmt: str, tmp_path: Path) -> None:
    """`posenc scale --config llama-3.1-8b.json -o ...`: the patched real config loads and means what posenc says."""
    out = tmp_path / "config.json"
    ok(run("scale", "yarn", "--config", str(FIXTURES / "llama-3.1-8b.json"), "--factor", "4", "--engine", fmt,
           "-o", str(out)))
    patched = json.loads(out.read_text())
    config = load_clean(patched)
    model = describe(patched)
    spec = RopeSpec(model.layers[0].params, model.head_dim, model.max_position_embeddings)
    inv, attention = quiet_frequencies(config)
    assert_same(compute(spec), inv, attention)
    assert config.rope_parameters["original_max_position_embeddings"] == 8192


# ---------------------------------------------------------------------------------------------------------------
# c. real model configs: `posenc inspect --json` says what transformers computes

ROPE_FIXTURES = ["llama-3.1-8b", "qwen2.5-7b-yarn", "deepseek-v3", "gpt-oss-20b", "phi-3-mini-128k", "gpt-neox-20b",
                 "phi-2"]
EXPECTED_TYPES = {"llama-3.1-8b": "llama3", "qwen2.5-7b-yarn": "yarn", "deepseek-v3": "yarn", "gpt-oss-20b": "yarn",
                  "phi-3-mini-128k": "longrope", "gpt-neox-20b": "default", "phi-2": "default"}
INSPECT_LENGTHS: dict[str, list[str]] = {"phi-3-mini-128k": ["4096", "4097", "5k", "128k"]}


def _fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def _inspect(name: str, *extra: str) -> dict[str, Any]:
    result = ok(run("inspect", str(FIXTURES / f"{name}.json"), "--json", *extra))
    data: dict[str, Any] = json.loads(result.stdout)
    return data


@pytest.mark.parametrize("name", ROPE_FIXTURES)
def test_fixture_loads_in_transformers(name: str) -> None:
    config = AutoConfig.for_model(**_fixture(name))
    assert config.rope_parameters["rope_type"] == EXPECTED_TYPES[name]


@pytest.mark.parametrize(("name", "seq_len"), [(n, None) for n in ROPE_FIXTURES]
                         + [(n, s) for n, lengths in INSPECT_LENGTHS.items() for s in lengths])
def test_inspect_matches_transformers(name: str, seq_len: str | None) -> None:
    report = _inspect(name) if seq_len is None else _inspect(name, "--seq-len", seq_len)
    config = AutoConfig.for_model(**_fixture(name))
    hf_params = config.rope_parameters
    assert report["family"] == "rope"
    assert report["model_type"] == config.model_type
    assert report["rope_type"] == hf_params["rope_type"]
    assert report["rope_theta"] == float(hf_params["rope_theta"])
    length = None
    if seq_len is not None:
        from posenc_cli.units import parse_length

        length = parse_length(seq_len, name="--seq-len")
    inv, attention = quiet_frequencies(config, length)
    ours = np.asarray(report["inv_freq"], dtype=np.float32)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    assert report["rotary_dim"] == int(head_dim * hf_params.get("partial_rotary_factor", 1.0)) == 2 * inv.shape[0]
    assert report["partial_rotary_factor"] == hf_params.get("partial_rotary_factor", 1.0)
    np.testing.assert_allclose(ours, inv, rtol=RTOL, atol=0)
    assert report["attention_factor"] == pytest.approx(attention, rel=1e-12, abs=0)
    if hf_params["rope_type"] in ("yarn", "llama3", "longrope"):
        assert report["original_length"] == hf_params["original_max_position_embeddings"]
    assert [layer["inv_freq"] for layer in report["layers"]] == [report["inv_freq"]]


def test_inspect_phi3_switches_to_long_factors_past_original() -> None:
    short, at_original, long = (_inspect("phi-3-mini-128k", *args)
                                for args in ([], ["--seq-len", "4096"], ["--seq-len", "4097"]))
    assert short["inv_freq"] == at_original["inv_freq"] != long["inv_freq"]
    lists = _fixture("phi-3-mini-128k")["rope_scaling"]
    base = 10000.0 ** (-np.arange(0, 96, 2) / 96)
    np.testing.assert_allclose(long["inv_freq"], base / np.asarray(lists["long_factor"]), rtol=RTOL)
    assert long["attention_factor"] == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)), rel=1e-12)


def test_inspect_deepseek_v3_uses_rope_head_dim() -> None:
    config = AutoConfig.for_model(**_fixture("deepseek-v3"))
    assert config.head_dim == 64
    report = _inspect("deepseek-v3")
    assert report["head_dim"] == 64 and report["attention_factor"] == 1.0
    assert (report["details"]["low"], report["details"]["high"]) == (10, 23)


@pytest.mark.parametrize(("name", "family"), [("bloom-7b1", "alibi"), ("gpt2", "learned")])
def test_inspect_non_rope_models(name: str, family: str) -> None:
    config = AutoConfig.for_model(**_fixture(name))
    report = _inspect(name)
    assert report["family"] == family
    assert "inv_freq" not in report
    if family == "alibi":
        from transformers.models.bloom.modeling_bloom import build_alibi_tensor

        heads = config.n_head
        slopes = build_alibi_tensor(torch.ones(1, 2), heads, torch.float32)[:, 0, 1].numpy()
        assert report["num_heads"] == heads == 32
        np.testing.assert_allclose(report["alibi_slopes"], slopes, rtol=RTOL, atol=0)
    else:
        assert report["max_position_embeddings"] == config.max_position_embeddings == 1024


# ---------------------------------------------------------------------------------------------------------------
# config resolution: describe() against the config classes on awkward but valid files

RESOLUTION_CASES: list[tuple[str, dict[str, Any]]] = [
    ("llama, no theta", {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 4}),
    ("mixtral, no theta", {"model_type": "mixtral", "hidden_size": 512, "num_attention_heads": 4}),
    ("llama, both rope_scaling and rope_parameters", {
        "model_type": "llama", "hidden_size": 512, "num_attention_heads": 4, "max_position_embeddings": 8192,
        "rope_theta": 5e5, "rope_scaling": {"rope_type": "linear", "factor": 2.0},
        "rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e4}}),
    ("llama, theta inside rope_parameters wins", {
        "model_type": "llama", "hidden_size": 512, "num_attention_heads": 4, "rope_theta": 5e5,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}),
    ("llama, yarn without original", {
        "model_type": "llama", "hidden_size": 512, "num_attention_heads": 4, "max_position_embeddings": 16384,
        "rope_scaling": {"type": "yarn", "factor": 4.0}}),
    ("llama, top-level original wins", {
        "model_type": "llama", "hidden_size": 512, "num_attention_heads": 4, "max_position_embeddings": 16384,
        "original_max_position_embeddings": 2048,
        "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096}}),
    ("llama, top-level partial factor", {
        "model_type": "llama", "hidden_size": 512, "num_attention_heads": 4, "partial_rotary_factor": 0.5,
        "rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
    ("phi3, legacy yarn is longrope", {
        "model_type": "phi3", "hidden_size": 512, "num_attention_heads": 4, "max_position_embeddings": 16384,
        "original_max_position_embeddings": 4096,
        "rope_scaling": {"type": "yarn", "short_factor": [1.0] * 64, "long_factor": [2.0] * 64}}),
    ("phi, no partial factor", {"model_type": "phi", "hidden_size": 512, "num_attention_heads": 4}),
    ("stablelm, no partial factor", {"model_type": "stablelm", "hidden_size": 512, "num_attention_heads": 4}),
    ("gpt_neox, no rotary_pct", {"model_type": "gpt_neox", "hidden_size": 512, "num_attention_heads": 4,
                                 "rotary_emb_base": 20000}),
    ("gpt_neox, top-level names are ignored", {
        "model_type": "gpt_neox", "hidden_size": 512, "num_attention_heads": 4, "rope_theta": 5e5,
        "partial_rotary_factor": 0.5, "rotary_pct": 1.0}),
    ("gpt_neox, rope_parameters wins", {
        "model_type": "gpt_neox", "hidden_size": 512, "num_attention_heads": 4, "rotary_emb_base": 20000,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5}}),
    ("qwen2, legacy type key", {
        "model_type": "qwen2", "hidden_size": 512, "num_attention_heads": 4, "rope_theta": 1e6,
        "max_position_embeddings": 32768,
        "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}),
]


@pytest.mark.parametrize(("label", "cfg"), RESOLUTION_CASES, ids=[label for label, _ in RESOLUTION_CASES])
def test_describe_resolves_like_transformers(label: str, cfg: dict[str, Any]) -> None:
    with hf_messages():
        config = AutoConfig.for_model(**copy.deepcopy(cfg))
    model = describe(copy.deepcopy(cfg))
    assert model.family == "rope"
    # the rope functions re-standardize first (a top-level original_max_position_embeddings only wins then),
    # so compare with the dict as the model uses it
    inv, attention = quiet_frequencies(config)
    ours = model.layers[0].params
    hf = dict(config.rope_parameters)
    hf.pop("type", None)
    assert {k: v for k, v in ours.items() if k != "partial_rotary_factor"} == {
        k: v for k, v in hf.items() if k != "partial_rotary_factor"}
    assert ours.get("partial_rotary_factor", 1.0) == hf.get("partial_rotary_factor", 1.0)
    spec = RopeSpec(ours, model.head_dim, model.max_position_embeddings)
    assert_same(compute(spec), inv, attention)


def test_grid_is_meaningful() -> None:
    """Guard: the grid above keeps covering every rope type transformers computes for text models."""
    covered = {"default", "linear", "dynamic", "yarn", "longrope", "llama3"}
    assert covered <= set(ROPE_INIT_FUNCTIONS) | {"default"}
    assert set(ROPE_INIT_FUNCTIONS) - covered == {"proportional"}  # Gemma 4's; posenc has no such type

"""The real vLLM (posenc_cli/engines/vllm.py VERSION, 0.34.0) (and SGLang) rotary-embedding code, run
on CPU through ``vllm_harness``, against transformers 5.

Each case is a transformers config (built with transformers' config classes; real ones from ``tests/fixtures``
where there is one). transformers' own ``*RotaryEmbedding`` forward gives cos/sin (already multiplied by its
``attention_scaling``); vLLM's ``get_rope``, called with the arguments vLLM's model class passes, gives its
``cos_sin_cache`` (already multiplied by its mscale). They are compared at every position from 0 to 2048 past the
original length, then at 257 positions out to the end of the engine's cache.

Where the engines differ from transformers on purpose or by design, the tests pin what they do:

* dynamic NTK: vLLM computes one static base from ``max_position`` / ``max_trained_positions`` (equal by default,
  so the base is unchanged) and caches only ``max_position_embeddings`` rows, while its max-len check allows
  ``factor`` times that; SGLang caches ``factor`` times as many rows with the base transformers uses at that length.
* longrope: vLLM uses the long factors for every position when ``max_model_len`` exceeds the original length;
  SGLang switches per batch, when a position is greater than (not equal to) the original length.
* yarn ``truncate: false`` (gpt-oss): honoured by both.
* DeepSeek yarn: renamed ``deepseek_yarn``, interleaved (GPT-J) rotation, ``mscale_all_dim**2`` on the softmax scale.
* ``--hf-overrides``: dict values replace whole attributes after vLLM's rope patching, so a ``rope_parameters``
  override without ``rope_theta`` falls back to 10000, and a flat ``rope_theta`` override never reaches the rope.

Skipped without vllm (``pip install --no-deps vllm==VERSION`` plus ``vllm_harness.VLLM_EXTRA_DEPS`` and
``VLLM_EXTRA_DEPS_NO_DEPS``); the SGLang tests also need sglang and ``POSENC_SGLANG_PYTHONPATH`` (see
``vllm_harness``).
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if importlib.util.find_spec("vllm") is None:
    pytest.skip("vllm is not installed", allow_module_level=True)

import vllm_harness as H  # noqa: E402
from transformers import AutoConfig  # noqa: E402
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (  # noqa: E402
    DeepseekV3RotaryEmbedding,
    apply_rotary_pos_emb_interleave,
    yarn_apply_mscale,
)
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRotaryEmbedding  # noqa: E402
from transformers.models.gpt_oss.modeling_gpt_oss import apply_rotary_pos_emb as gpt_oss_apply  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb  # noqa: E402
from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding  # noqa: E402
from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding  # noqa: E402

pytestmark = pytest.mark.numeric

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
#: float32 cos/sin of the same angle; measured difference is exactly 0, this leaves a few ulps for another SIMD path
ATOL = 2e-6
PAST_ORIGINAL = 2048


def _fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


LLAMA2 = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
          "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128, "intermediate_size": 11008,
          "num_hidden_layers": 32, "vocab_size": 32000, "max_position_embeddings": 4096, "rope_theta": 10000.0}

CASES: dict[str, dict[str, Any]] = {
    "default": LLAMA2,
    "linear": {**LLAMA2, "rope_scaling": {"rope_type": "linear", "factor": 4.0}},
    "dynamic": {**LLAMA2, "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}},
    "yarn-qwen2.5": _fixture("qwen2.5-7b-yarn"),  # factor 4, original 32768, theta 1e6, head_dim 128
    "llama3": _fixture("llama-3.1-8b"),
    "longrope": _fixture("phi-3-mini-128k"),  # short/long factors of 48 entries (head_dim 96)
    "yarn-gpt-oss": _fixture("gpt-oss-20b"),  # theta 150000, head_dim 64, factor 32, original 4096, truncate false
    "deepseek-yarn": _fixture("deepseek-v3"),  # factor 40, mscale 1, mscale_all_dim 1, original 4096, rope dim 64
}

ROTARY = {"llama": LlamaRotaryEmbedding, "qwen2": Qwen2RotaryEmbedding, "phi3": Phi3RotaryEmbedding,
          "gpt_oss": GptOssRotaryEmbedding, "deepseek_v3": DeepseekV3RotaryEmbedding}


# ---------------------------------------------------------------------------------------------------------------
# transformers side


def hf_config(config: dict[str, Any]) -> Any:
    kwargs = {k: copy.deepcopy(v) for k, v in config.items() if k not in ("architectures", "model_type")}
    return AutoConfig.for_model(config["model_type"], **kwargs)


def geometry(cfg: Any) -> tuple[int, int, int]:
    """(head_dim, rotary_dim, max_position_embeddings) of a transformers config."""
    if cfg.model_type == "deepseek_v3":
        return cfg.qk_rope_head_dim, cfg.qk_rope_head_dim, cfg.max_position_embeddings
    head = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    rotary = int(head * cfg.rope_parameters.get("partial_rotary_factor", 1.0))
    return head, rotary, cfg.max_position_embeddings


def original_length(cfg: Any) -> int:
    return int(cfg.rope_parameters.get("original_max_position_embeddings", cfg.max_position_embeddings))


def hf_cos_sin(cfg: Any, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """transformers' cos/sin for one sequence holding ``positions`` (dynamic and longrope pick their frequencies
    from the largest position), cut to the ``rotary_dim // 2`` distinct angles vLLM caches."""
    rotary = ROTARY[cfg.model_type](cfg)
    with torch.no_grad():
        cos, sin = rotary(torch.zeros(1), positions[None])
    half = geometry(cfg)[1] // 2
    return cos[0, :, :half], sin[0, :, :half], rotary


def hf_rotate(cfg: Any, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """transformers' rotation of ``(tokens, heads, dim)`` q/k; DeepSeek's comes back de-interleaved."""
    rotary = ROTARY[cfg.model_type](cfg)
    with torch.no_grad():
        cos, sin = rotary(torch.zeros(1), positions[None])
        qh, kh = q.transpose(0, 1)[None], k.transpose(0, 1)[None]
        if cfg.model_type == "deepseek_v3":
            qo, ko = apply_rotary_pos_emb_interleave(qh, kh, cos, sin)
        elif cfg.model_type == "gpt_oss":
            qo, ko = gpt_oss_apply(qh, kh, cos, sin)
        else:
            qo, ko = apply_rotary_pos_emb(qh, kh, cos, sin)
    return qo[0].transpose(0, 1), ko[0].transpose(0, 1)


def deinterleave(x: torch.Tensor) -> torch.Tensor:
    """GPT-J layout (pairs x[2i], x[2i+1]) to the halves layout transformers' DeepSeek returns."""
    return torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1)


def compared_positions(cache_len: int, original: int) -> torch.Tensor:
    head = torch.arange(0, min(cache_len, original + PAST_ORIGINAL))
    if cache_len <= original + PAST_ORIGINAL:
        return head
    tail = torch.linspace(original + PAST_ORIGINAL, cache_len - 1, 257).long()
    return torch.cat((head, tail)).unique()


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def qk(tokens: int, heads: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(tokens, heads, dim, generator=gen), torch.randn(tokens, heads, dim, generator=gen)


# ---------------------------------------------------------------------------------------------------------------
# vLLM side


@pytest.fixture(scope="module", autouse=True)
def _vllm_imports() -> None:
    if not H.vllm_available():
        pytest.skip("vllm does not import on CPU here (see vllm_harness.VLLM_EXTRA_DEPS*)")


@functools.cache
def vllm_case(name: str, max_model_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    cfg = hf_config(CASES[name])
    head, rotary, max_position = geometry(cfg)
    if max_model_len is None and cfg.rope_parameters["rope_type"] == "longrope":
        max_model_len = max_position
    return H.vllm_rope(copy.deepcopy(cfg.rope_parameters), head_dim=head, rotary_dim=rotary,
                       max_position=max_position, model_arch=CASES[name]["architectures"][0],
                       max_model_len=max_model_len)


@pytest.mark.parametrize("name", list(CASES))
def test_vllm_cos_sin_cache_matches_transformers(name: str) -> None:
    cfg = hf_config(CASES[name])
    cos, sin, extra = vllm_case(name)
    positions = compared_positions(extra["cache_len"], original_length(cfg))
    hcos, hsin, rotary = hf_cos_sin(cfg, positions)
    assert extra["forward"] in ("forward_native", "forward")  # CPU + custom ops off: the pure-torch path
    assert max_diff(cos[positions], hcos) <= ATOL
    assert max_diff(sin[positions], hsin) <= ATOL
    inv_freq = rotary.inv_freq.double()
    assert float(((extra["inv_freq"] - inv_freq).abs() / inv_freq).max()) <= 1e-6
    assert extra["mscale"] == pytest.approx(rotary.attention_scaling, rel=1e-12)


EXPECTED_CACHE = {"default": 4096, "linear": 16384, "dynamic": 4096, "yarn-qwen2.5": 131072, "llama3": 131072,
                  "longrope": 131072, "yarn-gpt-oss": 131072, "deepseek-yarn": 163840}
EXPECTED_CLASS = {"default": "RotaryEmbedding", "linear": "LinearScalingRotaryEmbedding",
                  "dynamic": "DynamicNTKScalingRotaryEmbedding", "yarn-qwen2.5": "YaRNScalingRotaryEmbedding",
                  "llama3": "Llama3RotaryEmbedding", "longrope": "Phi3LongRoPEScaledRotaryEmbedding",
                  "yarn-gpt-oss": "YaRNScalingRotaryEmbedding", "deepseek-yarn": "DeepseekScalingRotaryEmbedding"}


@pytest.mark.parametrize("name", list(CASES))
def test_vllm_module_and_cache_length(name: str) -> None:
    _, _, extra = vllm_case(name)
    assert extra["cls"] == EXPECTED_CLASS[name]
    assert extra["cache_len"] == EXPECTED_CACHE[name]


@pytest.mark.parametrize("name", list(CASES))
def test_vllm_forward_native_rotates_qk_like_transformers(name: str) -> None:
    cfg = hf_config(CASES[name])
    _, _, extra = vllm_case(name)
    head = geometry(cfg)[0]
    original = original_length(cfg)
    gen = torch.Generator().manual_seed(0)
    picks = torch.randint(0, extra["cache_len"], (48,), generator=gen)
    around = torch.arange(max(0, original - 4), min(extra["cache_len"], original + 4))
    positions = torch.cat((torch.arange(8), around, picks)).unique()
    q, k = qk(len(positions), 2, head, seed=1)
    vq, vk = H.vllm_apply_rope(extra, positions, q, k)
    hq, hk = hf_rotate(cfg, positions, q, k)
    if name == "deepseek-yarn":  # vLLM rotates interleaved pairs in place; transformers returns them as halves
        assert extra["is_neox_style"] is False
        vq, vk = deinterleave(vq), deinterleave(vk)
    assert max_diff(vq, hq) <= 1e-5
    assert max_diff(vk, hk) <= 1e-5


def test_vllm_dynamic_is_a_static_base_with_a_short_cache() -> None:
    """vLLM's dynamic NTK: ``max_trained_positions`` defaults to ``max_position``, so its static base formula
    leaves theta unchanged; the cache has ``max_position_embeddings`` rows while the max-len check allows
    ``factor`` times that, and forward_native cannot index past the cache."""
    cfg = hf_config(CASES["dynamic"])
    cos, sin, extra = vllm_case("dynamic")
    default_cos, _, _ = vllm_case("default")
    assert torch.equal(cos, default_cos)
    assert extra["module"].max_trained_positions == extra["module"].max_position_embeddings == 4096
    _, length = H.vllm_config_after_overrides(CASES["dynamic"], None, None)
    assert length == 16384 > extra["cache_len"] == 4096
    q, k = qk(1, 32, 128, seed=2)
    with pytest.raises(IndexError):
        H.vllm_apply_rope(extra, torch.tensor([4096]), q, k)
    # transformers grows the base once a sequence passes 4096: at 8192 tokens every position moves
    hcos, _, _ = hf_cos_sin(cfg, torch.arange(8192))
    assert max_diff(cos[:4096], hcos[:4096]) > 0.5


def test_vllm_longrope_uses_long_factors_for_every_position_past_the_original_length() -> None:
    cfg = hf_config(CASES["longrope"])
    cos, _, extra = vllm_case("longrope")  # max_model_len 131072 > 4096
    assert extra["use_long_rope"] is True
    short_prompt = torch.arange(1024)
    hcos, _, _ = hf_cos_sin(cfg, short_prompt)  # transformers: 1024 tokens -> short factors
    assert max_diff(cos[short_prompt], hcos) > 0.1
    assert extra["mscale"] == pytest.approx(1.1902380714238083)
    # with max_model_len at most the original length vLLM keeps the short factors, as transformers does
    cos4k, _, extra4k = vllm_case("longrope", 4096)
    assert extra4k["use_long_rope"] is False
    assert max_diff(cos4k[short_prompt], hcos) <= ATOL
    assert torch.equal(extra4k["short_cos"], extra["short_cos"])


def test_vllm_yarn_truncate_false_is_honoured() -> None:
    cfg = hf_config(CASES["yarn-gpt-oss"])
    cos, _, extra = vllm_case("yarn-gpt-oss")
    assert extra["rope_parameters"]["truncate"] is False
    assert extra["module"].truncate is False
    truncated = copy.deepcopy(CASES["yarn-gpt-oss"])
    truncated["rope_scaling"]["truncate"] = True
    positions = torch.arange(0, 131072, 97)
    hcos_truncated, _, _ = hf_cos_sin(hf_config(truncated), positions)
    hcos, _, _ = hf_cos_sin(cfg, positions)
    assert max_diff(cos[positions], hcos) <= ATOL
    assert max_diff(cos[positions], hcos_truncated) > 0.1  # the flag changes the table, and vLLM follows it


def test_vllm_deepseek_yarn() -> None:
    cfg = hf_config(CASES["deepseek-yarn"])
    _, _, extra = vllm_case("deepseek-yarn")
    assert extra["rope_parameters"]["rope_type"] == "deepseek_yarn"
    assert extra["is_neox_style"] is False
    assert extra["mscale"] == 1.0  # mscale / mscale_all_dim: both 1, so nothing folded into the cache
    hf_multiplier = yarn_apply_mscale(cfg.rope_parameters, 1.0)
    assert extra["softmax_scale_multiplier"] == pytest.approx(hf_multiplier, rel=1e-12)
    assert extra["softmax_scale_multiplier"] == pytest.approx(1.8738, abs=1e-4)


# ---------------------------------------------------------------------------------------------------------------
# vLLM's config path: --hf-overrides merge and _get_and_verify_max_len, all in vllm.config.ModelConfig

QWEN_BASE = {k: v for k, v in CASES["yarn-qwen2.5"].items() if k != "rope_scaling"}
YARN4 = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
TOO_LONG = "greater than the derived max_model_len"

CONFIG_CASES = [
    # (id, config.json, hf_overrides, --max-model-len, expected length or error fragment, expected rope_theta)
    ("qwen2.5-yarn", CASES["yarn-qwen2.5"], None, None, 32768, 1e6),  # yarn's factor is not applied
    ("qwen2.5-yarn-128k", CASES["yarn-qwen2.5"], None, 131072, TOO_LONG, 1e6),
    ("qwen2.5-yarn-128k-max-pos", CASES["yarn-qwen2.5"], {"max_position_embeddings": 131072}, 131072, 131072, 1e6),
    ("qwen2.5-override-rope", QWEN_BASE, {"rope_parameters": {**YARN4, "rope_theta": 1e6}}, None, 32768, 1e6),
    ("qwen2.5-override-rope-no-theta", QWEN_BASE, {"rope_parameters": YARN4}, None, 32768, None),
    ("llama-flat-theta", LLAMA2, {"rope_theta": 50000.0}, None, 4096, 10000.0),  # the flat override is lost
    ("llama-linear", LLAMA2, {"rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e4}}, None,
     16384, 1e4),
    ("llama-dynamic", LLAMA2, {"rope_parameters": {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 1e4}}, None,
     16384, 1e4),
    ("llama-yarn-16k", LLAMA2, {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4,
                                                    "original_max_position_embeddings": 4096}}, 16384, TOO_LONG, 1e4),
    ("llama3.1", CASES["llama3"], None, None, 131072, 500000.0),
    ("phi3-longrope", CASES["longrope"], None, None, 4096, 10000.0),  # longrope defaults to the original length
    ("phi3-longrope-128k", CASES["longrope"], None, 131072, 131072, 10000.0),
]


@pytest.mark.parametrize(("config", "overrides", "max_len", "expected", "theta"),
                         [c[1:] for c in CONFIG_CASES], ids=[c[0] for c in CONFIG_CASES])
def test_vllm_config_after_overrides(config: dict[str, Any], overrides: dict[str, Any] | None, max_len: int | None,
                                     expected: int | str, theta: float | None) -> None:
    rope, length = H.vllm_config_after_overrides(config, overrides, max_len)
    if isinstance(expected, str):
        assert isinstance(length, str)
        assert expected in length
    else:
        assert length == expected
    assert rope.get("rope_theta") == theta


def test_vllm_rope_parameters_override_without_theta_falls_back_to_10000() -> None:
    """Dict-valued overrides are set after vLLM's rope patching (ModelConfig._apply_dict_overrides), so the
    model's rope_theta 1e6 is not merged in and get_rope's default base 10000 is used."""
    _, _, extra = H.vllm_rope_from_hf_config(QWEN_BASE, {"rope_parameters": YARN4})
    assert extra["module"].base == 10000
    _, _, extra = H.vllm_rope_from_hf_config(QWEN_BASE, {"rope_parameters": {**YARN4, "rope_theta": 1e6}})
    assert extra["module"].base == 1e6


def test_vllm_rope_scaling_override_loses_theta() -> None:
    """A legacy ``rope_scaling`` override replaces rope_parameters without rope_theta: transformers 5.25 leaves
    ``rope_theta: None`` (get_rope then fails on ``None ** tensor``), 5.20 leaves no key (base 10000)."""
    rope, _ = H.vllm_config_after_overrides(QWEN_BASE, {"rope_scaling": YARN4}, None)
    assert rope.get("rope_theta") is None


def test_vllm_end_to_end_longrope_follows_max_model_len() -> None:
    _, _, extra = H.vllm_rope_from_hf_config(CASES["longrope"])
    assert (extra["max_model_len"], extra["use_long_rope"]) == (4096, False)
    cos, _, extra = H.vllm_rope_from_hf_config(CASES["longrope"], max_model_len=131072)
    assert (extra["max_model_len"], extra["use_long_rope"]) == (131072, True)
    long_cos, _, _ = vllm_case("longrope")
    assert torch.equal(cos, long_cos)


# ---------------------------------------------------------------------------------------------------------------
# SGLang (one subprocess for all of it)


LONGROPE_EDGE = 4096  # Phi-3's original length


@pytest.fixture(scope="module")
def sglang_results() -> dict[str, dict[str, Any]]:
    if not H.sglang_available():
        pytest.skip("sglang, or the triton/IPython its import chain needs, is not available "
                    "(set POSENC_SGLANG_PYTHONPATH; see vllm_harness)")
    specs: list[dict[str, Any]] = []
    names: list[str] = []
    for name, config in CASES.items():
        cfg = hf_config(config)
        head, rotary, max_position = geometry(cfg)
        spec = {"rope_parameters": copy.deepcopy(cfg.rope_parameters), "head_dim": head, "rotary_dim": rotary,
                "max_position": max_position, "model_arch": config["architectures"][0]}
        specs.append(spec)
        names.append(name)
        if name == "longrope":  # SGLang picks long or short per batch: ask at both sides of its threshold
            for last in (LONGROPE_EDGE, LONGROPE_EDGE + 1):
                positions = torch.arange(last + 1)
                q, k = qk(len(positions), 1, head, seed=3)
                specs.append({**spec, "positions": positions, "q": q, "k": k})
                names.append(f"longrope-apply-{last}")
    return dict(zip(names, H.sglang_rope_many(specs), strict=True))


SGLANG_MATCH = ["default", "linear", "yarn-qwen2.5", "llama3", "longrope", "yarn-gpt-oss", "deepseek-yarn"]


@pytest.mark.parametrize("name", SGLANG_MATCH)
def test_sglang_cos_sin_cache_matches_transformers(sglang_results: dict[str, dict[str, Any]], name: str) -> None:
    cfg = hf_config(CASES[name])
    result = sglang_results[name]
    assert result["is_cpu"] is True  # SGLANG_USE_CPU_ENGINE: no fallback to vLLM's compiled op
    positions = compared_positions(result["cache_len"], original_length(cfg))
    hcos, hsin, rotary = hf_cos_sin(cfg, positions)  # longrope: the long table (positions past 4096)
    assert max_diff(result["cos"][positions], hcos) <= ATOL
    assert max_diff(result["sin"][positions], hsin) <= ATOL
    assert result["mscale"] == pytest.approx(rotary.attention_scaling, rel=1e-12)
    if name == "deepseek-yarn":
        assert result["is_neox_style"] is False
        assert result["softmax_scale_multiplier"] == pytest.approx(yarn_apply_mscale(cfg.rope_parameters, 1.0))


def test_sglang_dynamic_uses_the_base_of_the_longest_sequence(sglang_results: dict[str, dict[str, Any]]) -> None:
    """SGLang caches max_position * factor rows with the base transformers uses for a sequence of that length,
    for every position, so a sequence shorter than 16384 tokens sees other frequencies than in transformers."""
    cfg = hf_config(CASES["dynamic"])
    result = sglang_results["dynamic"]
    assert result["cache_len"] == 16384
    hcos_long, _, _ = hf_cos_sin(cfg, torch.arange(16384))
    assert max_diff(result["cos"], hcos_long) <= ATOL
    hcos_short, _, _ = hf_cos_sin(cfg, torch.arange(4096))
    assert max_diff(result["cos"][:4096], hcos_short) > 0.5


def test_sglang_longrope_switches_one_position_later(sglang_results: dict[str, dict[str, Any]]) -> None:
    """SGLang uses the long factors when a position is greater than 4096; transformers when the sequence is longer
    than 4096 tokens, i.e. from position 4096. A 4097-token sequence: long in transformers, short in SGLang."""
    cfg = hf_config(CASES["longrope"])
    for last, same in ((LONGROPE_EDGE, False), (LONGROPE_EDGE + 1, True)):
        result = sglang_results[f"longrope-apply-{last}"]
        positions = torch.arange(last + 1)
        q, k = qk(len(positions), 1, geometry(cfg)[0], seed=3)
        hq, _ = hf_rotate(cfg, positions, q, k)
        assert (max_diff(result["q"], hq) <= 1e-5) is same

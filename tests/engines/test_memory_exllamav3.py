"""posenc's ExLlamaV3 1.6.5 memory model (posenc_cli/engines/caches/exllamav3.py) against ExLlamaV3's own code.

What runs (tests/harness/exllamav3_memory.py, the installed source, torch's meta device): the cache classes'
``__init__`` shapes and ``storage_size()`` (``CacheLayer_fp16``, ``CacheLayer_quant``, ``CacheLayer_MLA_fp16``,
``CacheLayer_MLA_quant``, ``SWALayerState``, ``GDNLayerState`` with ``set_state_dtype`` as ``Cache`` calls it), for
every layer of the corpus models posenc models, with stand-in modules carrying the sizes the architecture passes
(state layers: read from the config with the keys ``architecture/qwen3_5.py``, ``qwen3_next.py`` and
``nemotronh.py`` read, independently of posenc's layout). Compared exactly, across ``--cache_quant``, slots,
``--swa_full``, ``--recurrent_state_fp32`` and context lengths.

What is read from source, not run (building an ExLlamaV3 model needs its CUDA extension): which module each
architecture builds per layer (SlidingAttention only in the ring architectures), ``SlidingAttention``'s
``kv_state_size`` expression and overprovision default, gpt-oss's ``sliding_window - 1``, and ``model_init`` passing
``--autosplit_max_batch_size`` as the cache's ``max_batch_size``: the tests below check those source lines.
"""

from __future__ import annotations

import ast
import json
import random
import types
from pathlib import Path
from typing import Any

import pytest

from posenc_cli.engines.caches import exllamav3 as memory
from posenc_cli.engines.caches.model import Unsupported
from posenc_cli.errors import PosencError
from posenc_cli.models.cache_layout import cache_layout

xm = pytest.importorskip("exllamav3_memory")
if not xm.available():
    pytest.skip("exllamav3 1.6.5 is not installed (pip install --no-deps exllamav3==1.6.5)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
CORPUS = {p.stem: json.loads(p.read_text(encoding="utf-8"))
          for p in sorted((ROOT / "tests" / "corpus").glob("*.json")) if p.name != "SOURCES.json"}
ARCHS = xm.arch_strings()


def _layout(name: str) -> Any:
    try:
        return cache_layout(CORPUS[name])
    except PosencError:
        return None


def _modelled(name: str) -> bool:
    layout = _layout(name)
    if layout is None:
        return False
    try:
        memory.cost(layout, 256, memory.MEMORY.settings_for())
    except Unsupported:
        return False
    return True


MODELLED = [n for n in CORPUS if _modelled(n)]


def test_the_sweep_covers_the_architectures_asked() -> None:
    for name in ("llama-3.1-8b-instruct", "qwen3-235b-a22b", "gemma-3-27b-it", "gpt-oss-120b", "deepseek-v3",
                 "qwen3.5-9b", "qwen3-next-80b-a3b-thinking", "nemotron-h-56b-base-8k"):
        assert name in MODELLED, name


def _text(cfg: dict[str, Any]) -> dict[str, Any]:
    text = cfg.get("text_config")
    return {**cfg, **text} if isinstance(text, dict) else cfg


def _state_module(cfg: dict[str, Any]) -> types.SimpleNamespace:
    """The GatedDeltaNet / Mamba2 sizes the architecture passes, from the config keys it reads."""
    t = _text(cfg)
    if "mamba_num_heads" in t:  # nemotronh.py -> Mamba2(num_heads, head_dim, num_groups, state_size, conv_kernel)
        nv, dv, ng, ds = t["mamba_num_heads"], t["mamba_head_dim"], t["n_groups"], t["ssm_state_size"]
        return types.SimpleNamespace(num_v_heads=nv, k_head_dim=ds, v_head_dim=dv, fdim_qkv=nv * dv + 2 * ng * ds,
                                     conv_kernel_size=t.get("conv_kernel", 4), mamba2=True)
    nk, nv = t["linear_num_key_heads"], t["linear_num_value_heads"]
    dk, dv = t["linear_key_head_dim"], t["linear_value_head_dim"]
    return types.SimpleNamespace(num_v_heads=nv, k_head_dim=dk, v_head_dim=dv, fdim_qkv=2 * nk * dk + nv * dv,
                                 conv_kernel_size=t["linear_conv_kernel_dim"])


def _kv_state_size(window: int) -> int:
    """SlidingAttention.kv_state_size for gpt-oss: its expression (checked against the source below) on the window
    gpt_oss.py passes, sliding_window - 1, and the default overprovision 2 * PAGE_SIZE."""
    page = xm.namespace()["PAGE_SIZE"]
    sliding_window, sliding_window_overp = window - 1, 2 * page
    return -(-(sliding_window + sliding_window_overp) // page) * page


def _theirs(name: str, ctx: int, bits: tuple[int, int] | None, slots: int, swa_full: bool, fp32: bool) -> int:
    layout = cache_layout(CORPUS[name])
    page = xm.namespace()["PAGE_SIZE"]
    tokens = -(-ctx // page) * page
    ring = (layout.model_type or layout.text_type) in memory.RING_TYPES and not swa_full
    total = 0
    for x in layout.layers:
        if x.kind == "mla":
            assert x.mla is not None
            total += xm.layer_bytes("mla", xm.mla_attention(x.mla.kv_lora_rank, x.mla.rope_dim), tokens, bits)
        elif x.kind == "sliding" and ring:
            assert x.window is not None
            total += xm.ring_bytes(x.kv_heads, x.k_head_dim, _kv_state_size(x.window), slots)
        elif x.kind in ("full", "sliding", "chunked"):
            total += xm.layer_bytes("kv", xm.attention(x.kv_heads, x.k_head_dim), tokens, bits)
        elif x.kind == "state":
            total += xm.state_bytes(_state_module(CORPUS[name]), slots, fp32)
    return total


def _ours(name: str, ctx: int, quant: str, slots: int, swa_full: bool, fp32: bool) -> int:
    settings = memory.MEMORY.settings_for({"cache_quant": quant, "max_batch_size": slots, "swa_full": swa_full,
                                           "recurrent_state_fp32": fp32})
    return memory.cost(cache_layout(CORPUS[name]), ctx, settings).cache_bytes


CORNERS = [(1, "", 1, False, False), (256, "", 1, False, False), (257, "8", 1, False, False),
           (32768, "4,6", 2, False, True), (131072, "", 1, True, False), (131072, "2,8", 3, False, False),
           (100_000, "8,8", 1, True, True)]


@pytest.mark.parametrize("name", MODELLED)
def test_bytes_equal_exllamav3s(name: str) -> None:
    """Corner cases (one token, a page boundary, 32k/128k, quantized K/V at 2..8 bits, several slots, full sliding
    caches, float32 states) on every corpus model posenc models: equal to the byte."""
    for ctx, quant, slots, swa_full, fp32 in CORNERS:
        bits = memory.cache_bits(quant)
        assert _ours(name, ctx, quant, slots, swa_full, fp32) == _theirs(name, ctx, bits, slots, swa_full, fp32), \
            (name, ctx, quant, slots, swa_full, fp32)


@pytest.mark.parametrize("seed", range(3))
def test_sampled_combinations(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(10):
        name = rng.choice(MODELLED)
        k, v = rng.randint(2, 8), rng.randint(2, 8)
        quant = rng.choice(["", f"{k},{v}", str(k)])
        ctx, slots = rng.randint(1, 400_000), rng.randint(1, 8)
        swa_full, fp32 = rng.random() < 0.5, rng.random() < 0.5
        assert _ours(name, ctx, quant, slots, swa_full, fp32) == _theirs(
            name, ctx, memory.cache_bits(quant), slots, swa_full, fp32), (name, ctx, quant, slots)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_which_models_exllamav3_runs(name: str) -> None:
    """posenc's model-type tables against the installed architecture strings on every corpus config: a config whose
    architecture ExLlamaV3 lacks is Unsupported ("has no architecture"), one it runs is costed or "not modelled"."""
    layout = _layout(name)
    if layout is None:
        pytest.skip("posenc reads no cache layout from this config")
    arch = (CORPUS[name].get("architectures") or [""])[0]
    try:
        memory.cost(layout, 4096, memory.MEMORY.settings_for())
    except Unsupported as exc:
        if "not modelled" not in str(exc):
            assert arch not in ARCHS, (arch, str(exc))
        return
    assert arch in ARCHS or name in ARCH_DIFFERS, arch


#: corpus configs posenc costs by model type whose architecture string ExLlamaV3 lacks (it dispatches on the string,
#: posenc's layout carries the model type only)
ARCH_DIFFERS = {"e5-mistral-7b-instruct"}  # MistralModel, an embedding model's head


def test_ring_architectures_are_the_sliding_attention_ones() -> None:
    """Exactly the architecture files that build SlidingAttention get rings: gpt-oss (modelled) and the ones posenc
    leaves "not modelled"; Gemma 2/3, Cohere 2, EXAONE 4 build modules.Attention for their sliding layers."""
    ring_files = {stem for stem in set(ARCHS.values()) if xm.constructs(stem, "SlidingAttention")}
    assert "gpt_oss" in ring_files
    for stem in ("gemma2", "gemma3", "cohere2", "exaone4", "mistral", "llama", "qwen3"):
        assert not xm.constructs(stem, "SlidingAttention"), stem
    assert ring_files <= {"gpt_oss", "gemma4", "laguna", "mimo_v2", "step3_5", "step3_7", "dflash", "dflash2",
                          "dflash_laguna"}


def _source(relative: str) -> str:
    return (xm.root() / relative).read_text(encoding="utf-8")


def test_source_lines_the_model_reads() -> None:
    """The lines posenc's ring and slot rules come from, as the installed source has them."""
    sliding = _source("modules/sliding_attn.py")
    assert "self.kv_state_size = -(-(sliding_window + sliding_window_overp) // PAGE_SIZE) * PAGE_SIZE" in sliding
    assert "sliding_window_overp: int = 2 * PAGE_SIZE" in sliding
    assert "sliding_window = config.sliding_window - 1" in _source("architecture/gpt_oss.py")
    init = _source("model_init.py")
    assert init.count("max_batch_size = args.autosplit_max_batch_size") >= 2
    assert "default_autosplit_max_batch_size: int = 1" in init
    assert xm.namespace()["PAGE_SIZE"] == memory.PAGE_SIZE
    tree = ast.parse(_source("cache/cache.py"))
    cache = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Cache")
    assert "layer_type(self.config, attn, id(self), self.max_num_tokens" in ast.unparse(cache)


def test_bad_cache_quant_names_what_is_allowed() -> None:
    for bad in ("9", "1,4", "q4", "4,4,4"):
        with pytest.raises(PosencError, match="2 to 8"):
            memory.cost(cache_layout(CORPUS["llama-3.1-8b-instruct"]), 100,
                        memory.MEMORY.settings_for({"cache_quant": bad}))

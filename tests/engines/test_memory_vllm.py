"""posenc's model of vLLM 0.34.0's KV cache (posenc_cli/engines/caches/vllm.py) against vLLM's own code on CPU
(tests/harness/vllm_memory.py): the layers' own ``get_kv_cache_spec``, ``Platform._align_hybrid_block_size``, and
``vllm/v1/core/kv_cache_planning.py``'s grouping, per-request bytes, longest model length for a budget and admission
check, with ``get_max_concurrency_for_kv_cache_config``.

Models: Llama 3.1 8B (full attention, GQA), Qwen3-235B-A22B (MoE), Gemma 3 27B (sliding 5:1, padding layers),
gpt-oss-120b (sliding 1:1, sinks), Mistral 7B v0.1 (every layer sliding), DeepSeek-V3 (MLA), Llama 4 Scout
(chunked local attention), Qwen3-Next-80B and Qwen3.5-9B (gated delta net hybrids), Nemotron-H 56B (Mamba2 hybrid,
padding layers). Settings: fixed corners (block sizes, every modelled --kv-cache-dtype, tensor parallelism, batch
sizes, no async scheduling, no prefix caching, the hybrid manager off) and a seeded sample of combinations. Exact to
the byte: no tolerance.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from posenc_cli.engines import vllm as vllm_engine
from posenc_cli.engines.caches import vllm as model
from posenc_cli.models.cache_layout import cache_layout

pytestmark = pytest.mark.numeric

vh = pytest.importorskip("vllm_harness")
if not vh.vllm_available():
    pytest.skip(f"vLLM {model.VERSION} does not import on this machine (see tests/harness/vllm_harness.py)",
                allow_module_level=True)
vm = pytest.importorskip("vllm_memory")

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
FULL = ("llama-3.1-8b-instruct", "qwen3-235b-a22b")
LOCAL = ("gemma-3-27b-it", "gpt-oss-120b", "llama-4-scout-17b-16e-instruct", "mistral-7b-v0.1")
MLA = ("deepseek-v3",)
HYBRID = ("qwen3-next-80b-a3b-thinking", "qwen3.5-9b", "nemotron-h-56b-base-8k")
MODELS = FULL + LOCAL + MLA + HYBRID
S = vm.Settings


def cfg(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CORPUS / f"{name}.json").read_text(encoding="utf-8"))
    return data


def posenc_cost(name: str, s: Any, ctx: int) -> Any:
    return model.MEMORY.cost(cache_layout(cfg(name)), ctx, model.MEMORY.settings_for(s.posenc()))


def allowed(name: str, s: Any) -> bool:
    """Settings vLLM runs the model with on the card assumed."""
    if name in MLA and s.kv_cache_dtype not in model.MLA_DTYPES:
        return False  # no MLA backend takes it: posenc refuses (tests/engines/caches/test_vllm.py)
    if s.kv_cache_dtype == "fp8_e5m2" and (name not in FULL or s.block_size > 64):
        return False  # FlashInfer's class does not import here (tests/harness/vllm_memory.py)
    if name in HYBRID and s.disable_hybrid_kv_cache_manager:
        return False  # vLLM needs the hybrid manager for state layers: posenc says Unsupported
    return True


CORNERS = [S(), S(block_size=16), S(block_size=128), S(block_size=256), S(kv_cache_dtype="fp8"),
           S(kv_cache_dtype="fp8_e5m2"), S(kv_cache_dtype="int8_per_token_head"),
           S(kv_cache_dtype="fp8_per_token_head"), S(kv_cache_dtype="int4_per_token_head"),
           S(tensor_parallel_size=2), S(tensor_parallel_size=8), S(max_num_batched_tokens=2048),
           S(async_scheduling=False), S(enable_prefix_caching=False), S(disable_hybrid_kv_cache_manager=True),
           S(mamba_ssm_cache_dtype="float32"), S(mamba_ssm_cache_dtype="bfloat16")]


def sampled(n: int) -> list[Any]:
    """A seeded sample of combinations of every setting."""
    rng = random.Random(36)
    return [S(block_size=rng.choice([16, 32, 64, 96, 128, 256]),
              kv_cache_dtype=rng.choice(["auto", "fp8", "fp8_e4m3", "bfloat16", "int8_per_token_head",
                                         "int4_per_token_head"]),
              tensor_parallel_size=rng.choice([1, 2, 4]), max_num_batched_tokens=rng.choice([512, 2048, 8192, 16384]),
              async_scheduling=rng.random() < 0.7, enable_prefix_caching=rng.random() < 0.7,
              disable_hybrid_kv_cache_manager=rng.random() < 0.2) for _ in range(n)]


CASES = [(name, s) for name in MODELS for s in CORNERS + sampled(4) if allowed(name, s)]
CONTEXTS = (1, 700, 8193, 32768, 131072 + 17)


def test_version_is_the_engines() -> None:
    assert model.VERSION == vllm_engine.VERSION == vh.vllm_version()


@pytest.mark.parametrize(("name", "s"), CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_request_bytes_and_block(name: str, s: Any) -> None:
    """One request's bytes (``_max_memory_usage_bytes_from_groups``), the bytes per block, the block size after
    the hybrid alignment and the group count, at contexts from one token to past 128k."""
    for ctx in CONTEXTS:
        p = vm.vllm_plan(cfg(name), s, ctx)
        c = posenc_cost(name, s, ctx)
        null = next(e.bytes for e in c.extras if e.name == "null block")
        assert (c.cache_bytes, null, c.settings["block_size"]) == (p.request_bytes, p.block_bytes, p.block_size), \
            (name, s, ctx, p.groups)
        mine = model.plan(cache_layout(cfg(name)), model.MEMORY.settings_for(s.posenc()))
        assert len(mine.groups) == len(p.groups)
        # a state group's block is ctx without prefix caching (MambaModelConfig): only its page counts
        assert sorted((len(g.layers), g.spec.page, 0 if g.spec.kind == "mamba" else g.spec.block)
                      for g in mine.groups) == \
            sorted((n, page, 0 if kind == "MambaSpec" else block) for kind, n, block, page in p.groups)


def posenc_longest(name: str, s: Any, memory: int, limit: int) -> int:
    """The longest context whose caches and null block fit ``memory`` (posenc's cost, searched as vLLM does)."""
    layout, settings = cache_layout(cfg(name)), model.MEMORY.settings_for(s.posenc())

    def fits(ctx: int) -> bool:
        c = model.MEMORY.cost(layout, ctx, settings)
        return c.cache_bytes + c.extra_bytes <= memory

    if not fits(1):
        return 0
    lo, hi = 1, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


BUDGET_CASES = [(name, s) for name in MODELS for s in (S(), S(kv_cache_dtype="fp8"), S(tensor_parallel_size=4))
                if allowed(name, s)]


@pytest.mark.parametrize(("name", "s"), BUDGET_CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(BUDGET_CASES)])
def test_longest_context_and_admission(name: str, s: Any) -> None:
    """For a pool of 1, 4 and 20 GiB: vLLM's ``--max-model-len auto`` length equals posenc's longest fitting context
    (limit 1M tokens); ``get_kv_cache_configs`` admits exactly the memory posenc says is needed (the null block
    included) and not one byte less; its blocks and logged concurrency equal posenc's."""
    limit = 1 << 20
    for gib in (1, 4, 20):
        memory = gib << 30
        p = vm.vllm_plan(cfg(name), s, 32768)
        assert vm.vllm_longest(p, memory, limit) == posenc_longest(name, s, memory, limit), (name, s, gib)
    for ctx in (4096, 65536):
        c = posenc_cost(name, s, ctx)
        need = c.cache_bytes + c.extra_bytes
        p = vm.vllm_plan(cfg(name), s, ctx)
        ok, blocks, concurrency = vm.vllm_serves(p, need, ctx)
        assert ok and blocks == need // p.block_bytes
        layout, settings = cache_layout(cfg(name)), model.MEMORY.settings_for(s.posenc())
        assert concurrency == model.max_concurrency(layout, ctx, settings, need)
        assert not vm.vllm_serves(p, need - 1, ctx)[0]
        big = 40 << 30
        assert vm.vllm_serves(p, big, ctx)[2] == model.max_concurrency(layout, ctx, settings, big)

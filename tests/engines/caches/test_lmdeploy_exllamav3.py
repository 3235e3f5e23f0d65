"""Properties of posenc's LMDeploy and ExLlamaV3 memory models on real corpus configs (no engine installed needed):
monotone in the context, quantized caches smaller than float16, sliding rings that stop growing, tensor
parallelism dividing the bytes, levers that are valid settings and buy context, and the registry entries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc_cli.engines.caches import exllamav3, lmdeploy
from posenc_cli.engines.caches.model import EngineMemory, Unsupported
from posenc_cli.frameworks.registry import load_memory
from posenc_cli.models.cache_layout import cache_layout

ROOT = Path(__file__).resolve().parents[3]
MODELS = ("llama-3.1-8b-instruct", "qwen3-235b-a22b", "gemma-3-27b-it", "gpt-oss-120b", "deepseek-v3",
          "qwen3.5-9b", "qwen3-next-80b-a3b-thinking")
LAYOUTS = {n: cache_layout(json.loads((ROOT / "tests" / "corpus" / f"{n}.json").read_text(encoding="utf-8")))
           for n in MODELS}
ENGINES: dict[str, EngineMemory] = {"lmdeploy": lmdeploy.MEMORY, "exllamav3": exllamav3.MEMORY}
BACKENDS = ({"backend": "turbomind"}, {"backend": "pytorch"})


def _cost(engine: str, name: str, ctx: int, given_: dict[str, Any] | None = None) -> int:
    memory = ENGINES[engine]
    return memory.cost(LAYOUTS[name], ctx, memory.settings_for(given_ or {})).cache_bytes


def test_registered() -> None:
    assert load_memory("lmdeploy") is lmdeploy.MEMORY
    assert load_memory("exllamav3") is exllamav3.MEMORY


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(MODELS), st.integers(1, 600_000), st.integers(1, 600_000), st.sampled_from(BACKENDS))
def test_lmdeploy_monotone(name: str, a: int, b: int, backend: dict[str, Any]) -> None:
    lo, hi = sorted((a, b))
    assert _cost("lmdeploy", name, lo, backend) <= _cost("lmdeploy", name, hi, backend)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(MODELS), st.integers(1, 600_000), st.integers(1, 600_000),
       st.sampled_from(["", "8", "4,6"]), st.booleans())
def test_exllamav3_monotone(name: str, a: int, b: int, quant: str, swa_full: bool) -> None:
    lo, hi = sorted((a, b))
    given_ = {"cache_quant": quant, "swa_full": swa_full}
    assert _cost("exllamav3", name, lo, given_) <= _cost("exllamav3", name, hi, given_)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_lmdeploy_quantized_smaller(name: str, backend: dict[str, Any]) -> None:
    f16 = _cost("lmdeploy", name, 65536, backend)
    int8 = _cost("lmdeploy", name, 65536, {**backend, "quant_policy": 8})
    int4 = _cost("lmdeploy", name, 65536, {**backend, "quant_policy": 4})
    assert int4 < int8 < f16


@pytest.mark.parametrize("name", MODELS)
def test_exllamav3_quantized_smaller(name: str) -> None:
    assert _cost("exllamav3", name, 65536, {"cache_quant": "4"}) < _cost("exllamav3", name, 65536,
                                                                          {"cache_quant": "8"}) < \
        _cost("exllamav3", name, 65536)


def test_exllamav3_rings_stop_growing() -> None:
    """gpt-oss's sliding layers are rings of window - 1 + 512 tokens rounded to a page: constant past the window;
    with --swa_full they grow as the full layers do."""
    memory = exllamav3.MEMORY
    layout = LAYOUTS["gpt-oss-120b"]
    rings = [next(g for g in memory.cost(layout, ctx, memory.settings_for()).groups if g.kind == "sliding")
             for ctx in (1, 4096, 131072)]
    assert len({g.bytes for g in rings}) == 1 and rings[0].cells == 768
    full = memory.cost(layout, 131072, memory.settings_for({"swa_full": True}))
    assert next(g for g in full.groups if g.kind == "sliding").cells == 131072


def test_lmdeploy_tp_divides() -> None:
    for backend in BACKENDS:
        one = _cost("lmdeploy", "llama-3.1-8b-instruct", 131072, {**backend, "tp": 1})
        two = _cost("lmdeploy", "llama-3.1-8b-instruct", 131072, {**backend, "tp": 2})
        assert two * 2 == one


def test_lmdeploy_falls_back_and_refuses() -> None:
    """DeepSeek-V3 and Gemma 3 run on the PyTorch engine only (the note says so); Gemma 3n shares caches: no
    lmdeploy architecture."""
    memory = lmdeploy.MEMORY
    c = memory.cost(LAYOUTS["deepseek-v3"], 1000, memory.settings_for())
    assert c.settings["backend"] == "pytorch" and any("TurboMind lacks" in n for n in c.notes)
    gemma4 = cache_layout(json.loads((ROOT / "tests" / "corpus" / "gemma-4-26b-a4b.json").read_text("utf-8")))
    with pytest.raises(Unsupported):
        memory.cost(gemma4, 1000, memory.settings_for())


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_levers_are_settings_that_buy_context(engine: str) -> None:
    memory = ENGINES[engine]
    for name in MODELS:
        base = memory.settings_for({"backend": "pytorch"} if engine == "lmdeploy" else {})
        before = memory.cost(LAYOUTS[name], 131072, base).cache_bytes
        for label, change in memory.levers(base):
            assert label
            after = memory.cost(LAYOUTS[name], 131072, memory.settings_for({**base, **change})).cache_bytes
            assert after <= before, (engine, name, label)

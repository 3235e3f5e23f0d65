"""posenc's LMDeploy 0.18.0 memory model (posenc_cli/engines/caches/lmdeploy.py) against lmdeploy's own code.

What runs (tests/harness/lmdeploy_memory.py, the installed wheel, torch's meta device): the PyTorch engine's config
builders, ``_adjust_block_size``, ``build_block_cache_plan(...).logical_block_nbytes``, ``_get_state_cache_mem``,
``Engine._get_max_session_len`` and ``_get_runtime_size``, on every corpus config whose architecture the PyTorch
engine runs, across ``--tp``, ``--quant-policy``, ``--cache-block-seq-len`` and context lengths. Compared exactly:
the bytes of the blocks a session of N tokens needs and of the state slots. Also run: which architectures each
engine takes (``SUPPORTED_ARCHS``, ``MODULE_MAP``) against posenc's model-type tables, on the corpus.

What is modelled (no test can run it here): TurboMind's C++ allocator (source at commit 1263d5cd, cited in the
module); its tests below check the per-block formula on hand-worked cases quoted from that source.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from posenc_cli.engines.caches import lmdeploy as memory
from posenc_cli.engines.caches.model import Unsupported
from posenc_cli.errors import PosencError
from posenc_cli.models.cache_layout import cache_layout

lm = pytest.importorskip("lmdeploy_memory")
if not lm.available():
    pytest.skip("lmdeploy 0.18.0 is not installed (pip install --no-deps lmdeploy==0.18.0)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]


def _load(path: Path) -> dict[str, Any]:
    cfg: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return cfg


def _corpus() -> dict[str, dict[str, Any]]:
    return {p.stem: _load(p) for p in sorted((ROOT / "tests" / "corpus").glob("*.json")) if p.name != "SOURCES.json"}


CORPUS = _corpus()
MODULE_MAP = lm.module_map()
TURBOMIND = set(lm.turbomind_archs())


def _arch(cfg: dict[str, Any]) -> str:
    return (cfg.get("architectures") or [""])[0]


def _modelled(name: str) -> bool:
    cfg = CORPUS[name]
    if _arch(cfg) not in MODULE_MAP:
        return False
    try:
        lm.hf_config(cfg)
    except (ValueError, TypeError):  # no transformers class (remote code, no model_type): not lmdeploy-run here
        return False
    try:
        memory.cost(cache_layout(cfg), 4096, memory.MEMORY.settings_for({"backend": "pytorch"}))
    except (Unsupported, PosencError):  # an architecture posenc or lmdeploy does not model, or no layout
        return False
    return True


PYTORCH = [n for n in CORPUS if _modelled(n)]
#: corpus configs whose architecture lmdeploy does not dispatch although posenc's model-type table takes the type
#: (lmdeploy picks by architecture, posenc's layout carries the model type only)
ARCH_DIFFERS = {"e5-mistral-7b-instruct": "MistralModel, an embedding model's head",
                "llava-v1.5-7b": "LlavaLlamaForCausalLM, the original LLaVA repository's class"}


def test_the_sweep_covers_the_architectures_asked() -> None:
    """Full attention + GQA (Llama 3.1), MoE (Qwen3), sliding windows (Gemma 3, gpt-oss, Mistral v0.1), MLA
    (DeepSeek-V3), hybrid linear attention (Qwen3.5, Qwen3-Next)."""
    for name in ("llama-3.1-8b-instruct", "qwen3-235b-a22b", "gemma-3-27b-it", "gpt-oss-120b", "mistral-7b-v0.1",
                 "deepseek-v3", "qwen3.5-9b", "qwen3-next-80b-a3b-thinking"):
        assert name in PYTORCH, name


def _theirs(cfg: dict[str, Any], ctx: int, tp: int, policy: int, block: int) -> tuple[int, int, int]:
    """(KV bytes of the smallest pool that serves a session of ctx tokens, state bytes, block size) by lmdeploy."""
    run = lm.pytorch_cache(cfg, tp=tp, quant_policy=policy, block_size=block)
    blocks = max(lm.runtime_min_blocks(), ctx // run.block_size - 2)  # no pool smaller than this serves ctx
    while lm.max_session_len(blocks, run.block_size) < ctx:
        blocks += 1
    return blocks * run.block_nbytes, run.state_nbytes, run.block_size


CORNERS = [(1, 1, 0, 64), (64, 1, 0, 64), (65, 1, 0, 64), (4096, 1, 0, 64), (32768, 1, 8, 64), (131072, 1, 4, 64),
           (131072, 2, 0, 64), (100_000, 8, 8, 128), (5000, 4, 16, 32), (70_000, 1, 42, 64), (1000, 16, 0, 16)]


def _tp_runs(cfg: dict[str, Any], tp: int) -> bool:
    """Whether lmdeploy takes --tp tp for cfg: KV heads and tp divide one another, and tp divides the query heads
    (ModelConfig.from_hf_config asserts it; posenc's layout has no query heads, so the sweep keeps to those)."""
    layout = cache_layout(cfg)
    kv = next(x.kv_heads for x in layout.layers if x.kind in ("full", "sliding", "mla", "chunked"))
    text = cfg.get("text_config") or cfg.get("llm_config") or cfg
    heads = text.get("num_attention_heads") or cfg.get("num_attention_heads") or 1
    return (kv % tp == 0 or tp % kv == 0) and heads % tp == 0


@pytest.mark.parametrize("name", PYTORCH)
def test_pytorch_bytes_equal_lmdeploys(name: str) -> None:
    """Corner cases (one token, a block boundary, 32k/128k, int4/int8/fp8/turbo-quant, tp 2..16 with replicated KV
    heads, 16..128-token blocks) on every corpus model the PyTorch engine runs: bytes equal to the byte."""
    cfg = CORPUS[name]
    for ctx, tp, policy, block in CORNERS:
        if not _tp_runs(cfg, tp):
            continue
        theirs = _theirs(cfg, ctx, tp, policy, block)
        settings = memory.MEMORY.settings_for({"backend": "pytorch", "tp": tp, "quant_policy": policy,
                                               "cache_block_seq_len": block})
        c = memory.cost(cache_layout(cfg), ctx, settings)
        ours_kv = sum(g.k_bytes + g.v_bytes for g in c.groups)
        ours_state = sum(g.state_bytes for g in c.groups)
        assert (ours_kv, ours_state) == theirs[:2], (name, ctx, tp, policy, block)
        assert c.allocated % theirs[2] == 0


@pytest.mark.parametrize("seed", range(3))
def test_pytorch_sampled_combinations(seed: int) -> None:
    """Sampled (model, context, tp, policy, block) combinations: equal to the byte."""
    import random

    rng = random.Random(seed)
    for _ in range(12):
        name = rng.choice(PYTORCH)
        cfg = CORPUS[name]
        tp = rng.choice([t for t in (1, 2, 4, 8) if _tp_runs(cfg, t)])
        policy, block = rng.choice(memory.QUANT_POLICIES), rng.choice((16, 32, 64, 128, 256))
        ctx = rng.randint(1, 300_000)
        settings = memory.MEMORY.settings_for({"backend": "pytorch", "tp": tp, "quant_policy": policy,
                                               "cache_block_seq_len": block})
        c = memory.cost(cache_layout(cfg), ctx, settings)
        ours = (sum(g.k_bytes + g.v_bytes for g in c.groups), sum(g.state_bytes for g in c.groups))
        assert ours == _theirs(cfg, ctx, tp, policy, block)[:2], (name, ctx, tp, policy, block)


def test_state_slots_follow_max_batch_size() -> None:
    """--max-batch-size B reserves B + 2 state slots: lmdeploy's _get_state_cache_mem."""
    cfg = CORPUS["qwen3.5-9b"]
    for batch in (1, 7, 128):
        run = lm.pytorch_cache(cfg, max_batch_size=batch)
        c = memory.cost(cache_layout(cfg), 1000, memory.MEMORY.settings_for(
            {"backend": "pytorch", "max_batch_size": batch}))
        assert sum(g.state_bytes for g in c.groups) == run.state_nbytes
        assert run.num_state_slots == batch + 2


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_which_engine_runs_a_model(name: str) -> None:
    """posenc's model-type tables against the installed SUPPORTED_ARCHS and MODULE_MAP, on every corpus config: a
    model TurboMind runs is costed on TurboMind by default, one only the PyTorch engine runs falls back to it, and
    one neither runs is Unsupported (a model type posenc does not model is Unsupported with "not modelled")."""
    cfg = CORPUS[name]
    try:
        layout = cache_layout(cfg)
    except PosencError:  # a config posenc cannot read has no memory row at all
        pytest.skip("posenc reads no cache layout from this config")
    arch = _arch(cfg)
    try:
        c = memory.cost(layout, 8192, memory.MEMORY.settings_for())
    except Unsupported as exc:
        if "not modelled" not in str(exc):
            assert arch not in MODULE_MAP and arch not in TURBOMIND, (arch, str(exc))
        return
    if name in ARCH_DIFFERS:
        assert arch not in MODULE_MAP and arch not in TURBOMIND
        return
    assert c.settings["backend"] == ("turbomind" if arch in TURBOMIND else "pytorch"), arch
    assert arch in MODULE_MAP or arch in TURBOMIND


def test_qwen3_next_needs_the_interval_attribute() -> None:
    """lmdeploy 0.18.0's Qwen3-Next builder reads ``full_attention_interval``, which transformers 5 drops: under
    transformers 5.x lmdeploy's own builder raises (the harness sets it back, as transformers 4.57 keeps it)."""
    from lmdeploy.pytorch.config import ModelConfig

    hf = lm.hf_config(CORPUS["qwen3-next-80b-a3b-thinking"])
    import transformers

    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("transformers 4 keeps the attribute")
    with pytest.raises(AttributeError, match="full_attention_interval"):
        ModelConfig.from_hf_config(hf)


def test_gemma_3_4b_layout_matches_transformers() -> None:
    """Gemma 3 4B's text_config leaves num_key_value_heads out: the class default (4), not the 8 query heads (the
    generated class defaults carry the cache keys since this test found it)."""
    hf = lm.hf_config(CORPUS["gemma-3-4b-it"])
    layout = cache_layout(CORPUS["gemma-3-4b-it"])
    assert layout.layers[0].kv_heads == hf.text_config.num_key_value_heads


def _tm(name: str, ctx: int, **given: Any) -> Any:
    return memory.cost(cache_layout(CORPUS[name]), ctx, memory.MEMORY.settings_for(given))


def test_turbomind_llama_block_by_hand() -> None:
    """Llama 3.1 8B (32 layers, 8 KV heads of 128), TurboMind, 64-token blocks: layer_size = 8 x 2 x 64 x (16 x 128
    / 8) = 262144 bytes a block (block.h Layout::layer_size); int8 adds 8 x 2 x 64 x 4 of scales/zeros and halves
    the data; int4 quarters it. 1000 tokens = 16 blocks."""
    f16 = _tm("llama-3.1-8b-instruct", 1000)
    assert f16.settings["backend"] == "turbomind" and f16.allocated == 1024
    assert f16.cache_bytes == 32 * 16 * 262144
    int8 = _tm("llama-3.1-8b-instruct", 1000, quant_policy=8)
    assert int8.cache_bytes == 32 * 16 * (8 * 2 * 64 * 128 + 8 * 2 * 64 * 4)
    int4 = _tm("llama-3.1-8b-instruct", 1000, quant_policy=4)
    assert int4.cache_bytes == 32 * 16 * (8 * 2 * 64 * 64 + 8 * 2 * 64 * 4)
    tp2 = _tm("llama-3.1-8b-instruct", 1000, tp=2)
    assert tp2.cache_bytes * 2 == f16.cache_bytes


def test_turbomind_gpt_oss_sliding_layers_hold_every_token() -> None:
    """gpt-oss: TurboMind's window is a mask, sliding layers cost what full ones do."""
    c = _tm("gpt-oss-120b", 131072)
    per_layer = {g.kind: g.bytes // g.layers for g in c.groups}
    assert per_layer["sliding"] == per_layer["full"]


def test_turbomind_qwen35_states_by_hand() -> None:
    """Qwen3.5-9B on TurboMind: per sequence, every gated-delta-net layer's recurrent state (value heads x 128 x
    128) and conv state ((2 x key_dim + value_dim) x kernel), in the 2-byte compute dtype (GatedDeltaNetLayer.cc)."""
    cfg = CORPUS["qwen3.5-9b"]
    text = cfg.get("text_config", cfg)
    c = _tm("qwen3.5-9b", 4096)
    assert c.settings["backend"] == "turbomind"
    state = next(g for g in c.groups if g.kind == "state")
    nk, nv = text["linear_num_key_heads"], text["linear_num_value_heads"]
    dk, dv, kernel = text["linear_key_head_dim"], text["linear_value_head_dim"], text["linear_conv_kernel_dim"]
    assert state.state_bytes == state.layers * (nv * dk * dv * 2 + (2 * nk * dk + nv * dv) * kernel * 2)


def test_turbomind_refuses_fp8() -> None:
    from posenc_cli.errors import PosencError

    with pytest.raises(PosencError, match="TurboMind"):
        _tm("llama-3.1-8b-instruct", 1000, quant_policy=16)
    assert _tm("llama-3.1-8b-instruct", 1000, quant_policy=16, backend="pytorch").cache_bytes > 0

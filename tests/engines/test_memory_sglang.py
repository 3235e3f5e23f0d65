"""posenc's model of SGLang 0.5.23's KV pools (posenc_cli/engines/caches/sglang.py, "modelled from source") against
SGLang's own pool-sizing functions, cut from the installed package's source and run on CPU
(tests/harness/sglang_source.py: SGLang does not import without its GPU stack).

For each model, settings and context: the budget posenc says SGLang needs is given to SGLang's own sizing
(``DefaultPoolConfigurator``, ``HybridSWAPoolConfigurator`` made by its ``__init__``, ``_handle_max_mamba_cache`` then
the token pool and ``resolve_max_num_reqs``), with the cell sizes from ``_compute_cell_size`` and the state slot from
``Mamba2StateShape.create`` / ``mamba_cache_per_req``: the pools admit the context (a token pool of at least
``ctx`` tokens, so ``max_req_len = ctx - 1``), and one byte less does not (token and sliding pools; the state split saws
by one slot, so there every larger budget is checked to fit instead). The layer facts come from the config as
SGLang's ModelConfig reads them (cited per line), not from posenc's reader. Exact: no tolerance.
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from posenc_cli.engines import sglang as sglang_engine
from posenc_cli.engines.caches import sglang as model
from posenc_cli.models.cache_layout import cache_layout

ss = pytest.importorskip("sglang_source")
if ss.sglang_root() is None:
    pytest.skip(f"SGLang {model.VERSION} is not installed (pip install --no-deps sglang=={model.VERSION})",
                allow_module_level=True)

NS = types.SimpleNamespace
CORPUS = Path(__file__).resolve().parents[1] / "corpus"
MODELS = ("llama-3.1-8b-instruct", "qwen3-235b-a22b", "gemma-3-27b-it", "gpt-oss-120b", "deepseek-v3",
          "llama-4-scout-17b-16e-instruct", "qwen3-next-80b-a3b-thinking", "qwen3.5-9b", "nemotron-h-56b-base-8k",
          "deepseek-v3.2", "glm-5")
KV_DTYPES = {"auto": None, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2, "bf16": torch.bfloat16}
# DeepSeek Sparse Attention's auto cache below SM100 (arg_groups/overrides.py _dsa_kv_cache_dtype_default): bfloat16
GIB = 1 << 30


def cfg(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CORPUS / f"{name}.json").read_text(encoding="utf-8"))
    return data


def text_of(c: dict[str, Any]) -> dict[str, Any]:
    return {**c, **c["text_config"]} if isinstance(c.get("text_config"), dict) else c


def model_config(c: dict[str, Any]) -> Any:
    """The ModelConfig fields the sizing reads, as ``configs/model_config.py`` sets them: head_dim from the config
    (else hidden / heads), v_head_dim and the SWA head sizes default to it (lines 1341-1364), MLA's latent dims, the
    dtype by ``_get_and_verify_dtype``, KV heads per rank by the real ``get_num_kv_heads``."""
    mc = ss.model_config()
    t = text_of(c)
    head = t.get("head_dim") or t["hidden_size"] // t["num_attention_heads"]
    text = NS(**t)
    out = NS(hf_config=NS(**c), hf_text_config=text, head_dim=head, v_head_dim=t.get("v_head_dim") or head,
             swa_head_dim=head, swa_v_head_dim=head, kv_lora_rank=t.get("kv_lora_rank"),
             qk_rope_head_dim=t.get("qk_rope_head_dim"), is_draft_model=False, context_len=1 << 20,
             attention_arch="MLA" if t.get("kv_lora_rank") else "MHA",
             get_total_num_kv_heads=lambda: t.get("num_key_value_heads", t["num_attention_heads"]),
             dtype=mc.get_and_verify_dtype(t, "auto"))
    ss.bind(out, get_num_kv_heads=mc.get_num_kv_heads)
    out.get_swa_num_kv_heads = lambda tp: out.get_num_kv_heads(tp)  # no swa_num_key_value_heads in these configs
    return out


def state_params(c: dict[str, Any], tp: int) -> tuple[list[int], list[int], Any] | None:
    """(attention layers, state layers, Mamba2CacheParams) as ``configs/qwen3_next.py`` and ``configs/nemotron_h.py``
    ``mamba2_cache_params`` build them (None for a model without state layers)."""
    m, t = ss.mamba_utils(), text_of(c)
    if "hybrid_override_pattern" in t:  # nemotron_h.py:425
        kinds = list(t["hybrid_override_pattern"])
        full, states = [i for i, k in enumerate(kinds) if k == "*"], [i for i, k in enumerate(kinds) if k == "M"]
        shape = m.Mamba2StateShape.create(
            tp_world_size=tp, intermediate_size=t["mamba_num_heads"] * t["mamba_head_dim"], n_groups=t["n_groups"],
            num_heads=t["mamba_num_heads"], head_dim=t["mamba_head_dim"], state_size=t["ssm_state_size"],
            conv_kernel=t["conv_kernel"])
    elif "linear_num_value_heads" in t:  # qwen3_next.py:260 layers_block_type, :288 mamba2_cache_params
        types_ = ["full_attention" if (i + 1) % t["full_attention_interval"] == 0 else "linear_attention"
                  for i in range(t["num_hidden_layers"])]
        full = [i for i, k in enumerate(types_) if k == "full_attention"]
        states = [i for i, k in enumerate(types_) if k != "full_attention"]
        shape = m.Mamba2StateShape.create(
            tp_world_size=tp, intermediate_size=t["linear_value_head_dim"] * t["linear_num_value_heads"],
            n_groups=t["linear_num_key_heads"], num_heads=t["linear_num_value_heads"],
            head_dim=t["linear_value_head_dim"], state_size=t["linear_key_head_dim"],
            conv_kernel=t["linear_conv_kernel_dim"])
    else:
        return None
    config = NS(**{**c, **({"text_config": NS(**c["text_config"])} if "text_config" in c else {})})
    return full, states, m.Mamba2CacheParams(shape=shape, layers=states, dtype=m.mamba2_state_dtype(config))


def kv_configurator(c: dict[str, Any], s: dict[str, Any]) -> Any:
    """The ``KVCacheConfigurator`` fields the pool configurators read, for one model and settings."""
    mc = model_config(c)
    dtype = KV_DTYPES[str(s["kv_cache_dtype"])] or (torch.bfloat16 if c.get("index_topk") else mc.dtype)
    archs = c["architectures"]
    hybrid = ss.model_config().is_hybrid_swa_model(archs, mc.hf_text_config)
    swa_ids, full_ids = ss.model_config().get_hybrid_layer_ids(archs, mc.hf_text_config) if hybrid else (None, None)
    t = text_of(c)
    # gpt_oss.py get_attention_sliding_window_size: window - 1; else the chunk (load_model_utils.py:144)
    window = (t["sliding_window"] - 1 if archs[0] == "GptOssForCausalLM" else t.get("attention_chunk_size"))
    return NS(model_config=mc, kv_cache_dtype=dtype, kv_cache_dtype_str=str(s["kv_cache_dtype"]),
              server_args=NS(enable_hisparse=False), use_mla_backend=mc.attention_arch == "MLA",
              is_draft_worker=False, page_size=int(s["page_size"]), sliding_window_size=window,
              layer_info=NS(full_attention_layer_ids=full_ids, swa_attention_layer_ids=swa_ids, start_layer=0,
                            end_layer=t["num_hidden_layers"]), mambaish_config=None,
              spec_algorithm=NS(is_eagle=lambda: False, is_standalone=lambda: False, is_none=lambda: True,
                                is_dflash_family=lambda: False),
              fused_entry_bytes=lambda _name: None, pp_size=1, attn_dp_size=1, hybrid_gdn_config=None,
              hybrid_kda_config=None, extra_mamba_cache_bytes_per_req=0, num_layers=t["num_hidden_layers"])


def settings(**given: Any) -> dict[str, Any]:
    return model.MEMORY.settings_for(given)


def sglang_admits(name: str, s: dict[str, Any], budget: int, ctx: int) -> bool:
    """Whether SGLang's sizing, given ``budget`` bytes, admits a request of ``ctx - 1`` tokens (``max_req_len``)."""
    c, tp, page = cfg(name), int(s["tp_size"]), int(s["page_size"])
    kvc = kv_configurator(c, s)
    states = state_params(c, tp)
    extra = not bool(s["disable_radix_cache"]) and states is not None
    rt = ss.runtime(tp, page, float(s["swa_full_tokens_ratio"]), float(s["mamba_full_memory_ratio"]),
                    radix=not bool(s["disable_radix_cache"]), extra_buffer=extra)
    if kvc.layer_info.swa_attention_layer_ids is not None:
        try:
            tokens = ss.swa_pool(kvc, rt).calculate_pool_sizes(budget, page).full_max_total_num_tokens
        except (ValueError, RuntimeError):  # validate_swa_pool_size, MemoryPoolConfig's "Not enough memory"
            return False
    elif states is not None:
        full, _, params = states
        kvc.mambaish_config = NS(mamba2_cache_params=params)
        conf = ss.mamba_configurator(kvc, rt)
        try:
            rest = conf._handle_max_mamba_cache(budget / GIB)
            cell = ss.cell_size(kvc, len(full), rt)
            tokens = ss.default_pool(cell, rt).calculate_pool_sizes(int(rest * GIB), page).max_total_num_tokens
            conf.resolve_max_num_reqs(tokens)
        except RuntimeError:
            return False
    else:
        cell = ss.cell_size(kvc, kvc.num_layers, rt)
        try:
            tokens = ss.default_pool(cell, rt).calculate_pool_sizes(budget, page).max_total_num_tokens
        except RuntimeError:
            return False
    return min(ctx - 1, tokens - 1) == ctx - 1  # TpModelWorker: max_req_len = min(context_len - 1, pool - 1)


def test_version_is_the_engines() -> None:
    assert model.VERSION == sglang_engine.VERSION == ss.VERSION


S = settings
CORNERS = [S(), S(page_size=16), S(page_size=64), S(kv_cache_dtype="fp8_e4m3"), S(kv_cache_dtype="fp8_e5m2"),
           S(kv_cache_dtype="bf16"), S(tp_size=2), S(tp_size=8), S(swa_full_tokens_ratio="0.5"),
           S(swa_full_tokens_ratio="0.1"), S(mamba_full_memory_ratio="0.5"), S(mamba_full_memory_ratio="2"),
           S(disable_radix_cache=True), S(page_size=64, kv_cache_dtype="fp8_e4m3", tp_size=4)]
CASES = [(name, s) for name in MODELS for s in CORNERS]
CONTEXTS = (1, 1000, 4097, 32768, 131073)


@pytest.mark.parametrize(("name", "s"), CASES, ids=[f"{n}-{i % len(CORNERS)}" for i, (n, _) in enumerate(CASES)])
def test_budget_admits_the_context(name: str, s: dict[str, Any]) -> None:
    """SGLang's own sizing admits the context at the budget posenc gives, and (token and sliding pools) not one byte
    below; with a state pool, every larger budget fits and one slot's share below does not."""
    layout = cache_layout(cfg(name))
    p = model.pools(layout, s)
    for ctx in CONTEXTS:
        budget = model.MEMORY.cost(layout, ctx, s).cache_bytes
        assert sglang_admits(name, s, budget, ctx), (name, s, ctx, budget)
        if not p.states:
            assert not sglang_admits(name, s, budget - 1, ctx), (name, s, ctx, budget)
            continue
        ratio = float(str(s["mamba_full_memory_ratio"]))
        for more in (1, p.state_slot, 7 * p.state_slot + 3):
            assert sglang_admits(name, s, budget + more, ctx), (name, s, ctx, budget, more)
        if budget > int((p.slots + 2) * p.state_slot * (1 + ratio) / ratio):  # the token pool binds, not the slots
            assert not sglang_admits(name, s, budget - int(p.state_slot * (1 + ratio)) - 2, ctx)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_cells_and_state_slots(name: str, tp: int) -> None:
    """posenc's token-pool cell (and sliding cell) are ``_compute_cell_size``'s / ``HybridSWAPoolConfigurator``'s,
    its state slot ``mamba_cache_per_req``, and the pool kinds are SGLang's (``is_hybrid_swa_model``)."""
    c = cfg(name)
    for kv in KV_DTYPES:
        s = settings(tp_size=tp, kv_cache_dtype=kv)
        p, kvc = model.pools(cache_layout(c), s), kv_configurator(c, s)
        rt = ss.runtime(tp, 1)
        states = state_params(c, tp)
        if kvc.layer_info.swa_attention_layer_ids is not None:
            pool = ss.swa_pool(kvc, rt)
            assert (p.full_cell, p.swa_cell) == (pool._full_cell_bytes(), pool._swa_cell_bytes())
            assert p.window == kvc.sliding_window_size
        elif states is not None:
            full, _, params = states
            assert (p.full_cell, p.state_slot) == (ss.cell_size(kvc, len(full), rt), params.mamba_cache_per_req)
        else:
            assert (p.full_cell, p.swa_cell) == (ss.cell_size(kvc, kvc.num_layers, rt), 0)


def test_state_slots_per_request() -> None:
    """A request's state slots: 3, +2 with the extra buffer (Qwen3-Next, Nemotron-H), 1 without the radix cache
    (``_calculate_mamba_ratio`` run on each)."""
    for name in ("qwen3-next-80b-a3b-thinking", "nemotron-h-56b-base-8k"):
        for radix in (True, False):
            s = settings(disable_radix_cache=not radix)
            kvc = kv_configurator(cfg(name), s)
            conf = ss.mamba_configurator(kvc, ss.runtime(1, 1, radix=radix, extra_buffer=radix))
            assert model.pools(cache_layout(cfg(name)), s).slots == conf._calculate_mamba_ratio()

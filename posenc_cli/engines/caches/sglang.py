"""SGLang 0.5.23's KV pools: the memory its pool sizing needs, per GPU, for its pools to admit one request of ``ctx``
tokens (stdlib only; modelled from source at SGLang 0.5.23, never imported).

SGLang sizes its pools from the memory left after the weights and the ``--mem-fraction-static`` reserve
(``KVCacheConfigurator._profile_available_bytes``: free memory - card x (1 - mem_fraction_static)); a request of up
to ``context_length - 1`` tokens needs a token pool of at least ``context_length`` tokens (``TpModelWorker``:
``max_req_len = min(context_len - 1, pool - 1)``). Conventions: bytes; ``kv_cache_bytes`` is that budget (the
smallest from which every larger budget admits ``ctx``); a *cell* is one token in every layer of a pool. The source
files named below are in ``python/sglang/srt/``.

* Token pool (``model_executor/pool_configurator.py`` ``DefaultPoolConfigurator``): ``max_total_num_tokens =
  budget // cell``, floored to ``--page-size``; ``cell = kv_heads_per_rank x (head_dim + v_head_dim) x layers x
  bytes`` (``_compute_cell_size``; ``get_num_kv_heads``: ``max(1, kv_heads // tp)``), MLA ``(kv_lora_rank +
  qk_rope_head_dim) x layers x bytes`` (``calculate_mla_kv_cache_dim``). Every attention layer is in it, sliding and
  chunked ones too, unless the architecture is one of SGLang's hybrid-SWA ones. DeepSeek Sparse Attention (DeepSeek
  V3.2, GLM-5) adds each indexing layer's fp8 index keys with a 4-byte scale per 128 (``_compute_dsa_indexer_cell_
  size``, ``index_kpool`` 1); its cache is bfloat16 by default below SM100 (``_dsa_kv_cache_dtype_default``), and
  an fp8_e4m3 latent row is 512 + 16 scale bytes + the rope dims in bfloat16.
* Hybrid SWA (gpt-oss, Llama 4: ``configs/model_config.py`` ``is_hybrid_swa_model``; ``HybridSWAPoolConfigurator``):
  a full pool of T tokens and a sliding pool of ``floor(T x --swa-full-tokens-ratio)`` tokens, from ``cell =
  full_cell + ratio x swa_cell``; the sliding pool must exceed the window + one page (``validate_swa_pool_size``;
  the window is gpt-oss's ``sliding_window - 1``, Llama 4's chunk).
* Hybrid state models (gated delta net, Mamba2: ``KVCacheConfigurator._handle_max_mamba_cache``): the state pool takes
  ``ratio / (1 + ratio)`` of the budget (``--mamba-full-memory-ratio``), ``K + 1`` slots of every state layer's conv
  (``conv_kernel - 1`` columns) and recurrent state (``configs/mamba_utils.py`` ``Mamba2StateShape.create``; conv in
  bfloat16, ``SGLANG_MAMBA_CONV_DTYPE``; recurrent in ``--mamba-ssm-dtype``, else the config's ``mamba_ssm_dtype``,
  else float32); the token pool holds the attention layers only; ``K`` must give one request its slots (3 per
  request, ``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO``, +2 with the extra buffer the radix cache keeps for models
  that support it, 1 with ``--disable-radix-cache``: ``_calculate_mamba_ratio``).

Defaults are SGLang's own on an H100 (SM90): FA3 attention, ``--page-size 1`` (``_page_size_default``).
``tests/engines/test_memory_sglang.py`` runs these functions' own source (read from the installed package) on the
budgets this module gives.

Not modelled: ``--mem-fraction-static`` auto (derived from the card, the chunked-prefill size and CUDA graphs:
:func:`kv_budget` takes a given fraction), speculative decoding and draft pools, unified memory, FP4/mxfp8 caches
(Blackwell), compressed-SWA and per-layer-head pools (Gemma 4, MiMo-V2, Step 3.5, DeepSeek V4: refused), state
mixers other than gated delta nets and Mamba2 (refused), a config's ``mamba_ssm_dtype`` other than float32 (give
``--mamba-ssm-dtype``), pipeline parallelism.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from posenc_cli.engines.caches.model import (
    CacheGroup,
    Cost,
    EngineMemory,
    Extra,
    Lever,
    Setting,
    SettingValue,
    Unsupported,
)
from posenc_cli.errors import PosencError

if TYPE_CHECKING:
    from posenc_cli.models.cache_layout import CacheLayout, LayerCache

VERSION = "0.5.23"
ENGINE = "sglang"

# framework fact: --swa-full-tokens-ratio and --mamba-full-memory-ratio fallbacks (arg_groups/fields/schedule.py)
SWA_FULL_TOKENS_RATIO, MAMBA_FULL_MEMORY_RATIO = "0.8", "0.9"
# framework fact: MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO (mem_cache/kv_cache_configurator.py); get_mamba_tracking_
# slots (mem_cache/allocation_sizing.py): 2 more with the extra buffer and the overlap schedule
MAMBA_SLOTS, EXTRA_BUFFER_SLOTS = 3, 2
#: model types whose architecture is hybrid SWA in SGLang (is_hybrid_swa_model) and that posenc models
HYBRID_SWA = frozenset({"gpt_oss", "llama4"})
#: hybrid-SWA architectures with pools posenc does not model (compressed SWA, per-layer head sizes)
HYBRID_SWA_UNMODELLED = frozenset({"gemma4", "gemma4_text", "mimo_v2_flash", "step3p5", "deepseek_v4"})
#: model types whose hybrid-mamba radix cache keeps the extra buffer (_MAMBA_EXTRA_BUFFER_ARCHS)
EXTRA_BUFFER = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text", "nemotron_h",
                          "falcon_h1", "granitemoehybrid"})
KV_DTYPE_BYTES = {"fp8_e4m3": 1, "fp8_e5m2": 1, "bf16": 2, "bfloat16": 2}
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# framework fact: DSATokenToKVPool.quant_block_size (mem_cache/memory_pool.py)
DSA_QUANT_BLOCK = 128
_GIB = 1 << 30

SETTINGS = (
    Setting("kv_cache_dtype", "--kv-cache-dtype", "auto", "str", ("auto", *KV_DTYPE_BYTES),
            help="the KV pool's type (auto: the model dtype)"),
    Setting("dtype", "--dtype", "auto", "str", ("auto", "bfloat16", "float16", "float32"),
            help="the model dtype (auto: the config's; float32 or none: float16, Gemma bfloat16)"),
    Setting("page_size", "--page-size", 1, help="tokens per page (1 with FA3 on an H100)"),
    Setting("tp_size", "--tp-size", 1, help="GPUs the KV heads and states are split over"),
    Setting("swa_full_tokens_ratio", "--swa-full-tokens-ratio", SWA_FULL_TOKENS_RATIO, "str",
            help="sliding-pool tokens per full-pool token (gpt-oss, Llama 4)"),
    Setting("mamba_full_memory_ratio", "--mamba-full-memory-ratio", MAMBA_FULL_MEMORY_RATIO, "str",
            help="state-pool memory per token-pool memory (hybrid state models)"),
    Setting("mamba_ssm_dtype", "--mamba-ssm-dtype", "auto", "str", ("auto", "float32", "bfloat16", "float16"),
            help="the recurrent state's type (auto: the config's mamba_ssm_dtype, else float32)"),
    Setting("disable_radix_cache", "--disable-radix-cache", False, "bool",
            help="one state slot per request instead of 3 to 5"),
    Setting("mem_fraction_static", "--mem-fraction-static", "auto", "str",
            help="weights + pools as a fraction of the card (auto: derived from the card; --memory use)"),
)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _ratio(settings: Mapping[str, SettingValue], key: str, flag: str, most: float | None) -> float:
    """A fraction setting: above 0, at most ``most`` (None: no bound)."""
    try:
        value = float(str(settings[key]))
    except ValueError:
        raise PosencError(f"{flag} {settings[key]!r} is not a number") from None
    if value <= 0 or (most is not None and value > most):
        raise PosencError(f"{flag} {value:g}: must be above 0" + (f" and at most {most:g}" if most else ""))
    return value


class Pools(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """SGLang's pools for one model and settings: per-token bytes of the token pool (full layers), of the sliding
    pool, a state slot's bytes, and what sizes them."""

    full_cell: int
    swa_cell: int
    state_slot: int
    window: int | None
    slots: int
    attention: tuple[tuple[LayerCache, int, int, int], ...]  # (layer, count, K bytes/token, V bytes/token)
    states: tuple[tuple[LayerCache, int, int], ...]  # (layer, count, bytes per slot)
    dtype: str


def model_dtype(layout: CacheLayout, chosen: str) -> str:
    """``--dtype``: auto is the config's dtype; float32 or none becomes float16 (bfloat16 for Gemma:
    ``configs/model_config.py`` ``_get_and_verify_dtype``)."""
    if chosen != "auto":
        return chosen
    if layout.dtype in ("bfloat16", "float16"):
        return layout.dtype
    return "bfloat16" if layout.text_type.startswith("gemma") else "float16"


def _slot_bytes(layer: LayerCache, tp: int, ssm_bytes: int, text_type: str) -> int:
    """One request slot of one state layer: ``Mamba2StateShape.create``'s conv ``(conv_dim / tp, kernel - 1)`` in
    bfloat16 and recurrent ``(heads / tp, head_dim, state)`` (``Mamba2CacheParams.mamba_cache_per_req``)."""
    shapes = {s.name: s.shape for s in layer.states}
    conv, rec = shapes.get("conv_states.0"), shapes.get("recurrent_states.0")
    if conv is None or rec is None or not (layer.mixer == "gated_delta_net" or layer.mixer.endswith("mamba2")):
        raise Unsupported(f"posenc does not model SGLang {VERSION}'s state pool for {layer.mixer} layers")
    if layer.mixer == "gated_delta_net":  # qwen3_next.py: n_groups = key heads, state = key head dim
        heads, state, head_dim = rec
    else:
        heads, head_dim, state = rec
    inner = heads * head_dim
    groups = (conv[0] - inner) // (2 * state)
    groups += 0 if groups % tp == 0 else tp - groups  # extra_groups_for_head_shards
    conv_dim = inner + 2 * groups * state
    if conv_dim % tp or heads % tp:
        raise PosencError(f"--tp-size {tp}: {text_type}'s state heads ({heads}) do not split over it")
    return (conv_dim // tp) * (conv[1] - 1) * 2 + (heads // tp) * head_dim * state * ssm_bytes


def pools(layout: CacheLayout, settings: Mapping[str, SettingValue]) -> Pools:
    """SGLang's pools for the model at these settings (every setting given: :meth:`EngineMemory.settings_for`)."""
    tp, kv_dtype = int(settings["tp_size"]), str(settings["kv_cache_dtype"])
    dtype = model_dtype(layout, str(settings["dtype"]))
    elem = _DTYPE_BYTES[dtype] if kv_dtype == "auto" else KV_DTYPE_BYTES[kv_dtype]
    kinds = {x.kind for x in layout.layers}
    if layout.model_type in HYBRID_SWA_UNMODELLED or layout.text_type in HYBRID_SWA_UNMODELLED:
        raise Unsupported(f"SGLang {VERSION} sizes {layout.model_type}'s sliding pools in ways posenc does not model")
    dsa = any(x.indexer_dim for x in layout.layers)
    if dsa and kv_dtype == "auto":  # overrides.py _dsa_kv_cache_dtype_default: bfloat16 below SM100
        elem = 2
    if not kinds & {"full", "sliding", "chunked", "mla"}:
        raise Unsupported(f"posenc does not model SGLang {VERSION}'s pools for a model without attention")
    hybrid_swa = layout.model_type in HYBRID_SWA and not any(x.states for x in layout.layers)
    attention: dict[tuple[LayerCache, bool], int] = {}
    for x in layout.layers:
        if x.kind in ("full", "sliding", "chunked", "mla"):
            key = (x, hybrid_swa and x.kind in ("sliding", "chunked"))
            attention[key] = attention.get(key, 0) + 1
    rows, full, swa = [], 0, 0
    window = None
    for (x, sliding), n in attention.items():
        mla = x.kind == "mla" or x.mla is not None
        heads = 1 if mla else max(1, x.kv_heads // tp)
        k, v = heads * x.k_head_dim * elem, (0 if mla else heads * x.v_head_dim * elem)
        if dsa and x.mla is not None and kv_dtype == "fp8_e4m3":  # calculate_mla_kv_cache_dim: scaled fp8 rows
            rank = x.mla.kv_lora_rank
            k = rank + rank // DSA_QUANT_BLOCK * 4 + x.mla.rope_dim * 2
        if x.indexer_dim:  # _compute_dsa_indexer_cell_size: fp8 index keys + a scale per block, uint8
            k += x.indexer_dim + x.indexer_dim // DSA_QUANT_BLOCK * 4
        rows.append((x, n, k, v))
        if sliding:
            swa += n * (k + v)
            assert x.window is not None
            window = x.window - 1 if layout.model_type == "gpt_oss" else x.window  # gpt_oss.py, load_model_utils.py
        else:
            full += n * (k + v)
    ssm = str(settings["mamba_ssm_dtype"])
    ssm_bytes = _DTYPE_BYTES["float32" if ssm == "auto" else ssm]
    states: dict[LayerCache, int] = {}
    for x in layout.layers:
        if x.states:
            states[x] = states.get(x, 0) + 1
    state_rows = tuple((x, n, _slot_bytes(x, tp, ssm_bytes, layout.text_type)) for x, n in states.items())
    slots = 1 if bool(settings["disable_radix_cache"]) else MAMBA_SLOTS + (
        EXTRA_BUFFER_SLOTS if layout.model_type in EXTRA_BUFFER or layout.text_type in EXTRA_BUFFER else 0)
    return Pools(full, swa, sum(n * b for _, n, b in state_rows), window, slots, tuple(rows), state_rows, dtype)


def swa_budget(p: Pools, tokens: int, page: int, ratio: float) -> tuple[int, int, int]:
    """(budget, full tokens, sliding tokens) of a hybrid-SWA model whose full pool must hold ``tokens``:
    ``HybridSWAPoolConfigurator``: ``int(budget // (full_cell + ratio x swa_cell))`` floored to the page; the
    sliding pool ``int(full x ratio)`` floored, above the window + one page."""
    assert p.window is not None
    floor = _cdiv(int((p.window + page) / ratio), page) * page - page  # near the validate_swa_pool_size floor
    tokens = max(tokens, floor)
    while int(tokens * ratio) // page * page <= p.window + page:  # validate_swa_pool_size
        tokens += page
    cell = p.full_cell + ratio * p.swa_cell
    budget = int(tokens * cell)
    while int(budget // cell) // page * page < tokens:
        budget += 1
    while budget > 0 and int((budget - 1) // cell) // page * page >= tokens:
        budget -= 1
    return budget, tokens, int(tokens * ratio) // page * page


def mamba_split(budget: int, slot: int, ratio: float) -> tuple[int, int]:
    """(state slots K, bytes left for the token pool) of a budget: ``_handle_max_mamba_cache`` (the pool holds K + 1
    slots, K = the state share less one slot, over a slot; GB floats as SGLang computes them)."""
    rest = budget / _GIB
    share = rest * ratio / (1 + ratio) * _GIB
    k = int((share - slot) // slot)
    rest -= (k + 1) * slot / _GIB
    return k, int(rest * _GIB)


def mamba_budget(p: Pools, tokens: int, page: int, ratio: float) -> tuple[int, int]:
    """(budget, state slots) of a hybrid state model: the smallest budget from which every larger one leaves the
    token pool ``tokens`` and the state pool one request's slots (the split saws by one slot; its floor is
    budget / (1 + ratio))."""
    need = tokens * p.full_cell
    budget = max(_cdiv(int(need * (1 + ratio) * 1_000_000), 1_000_000),
                 _cdiv(int((p.slots + 1) * p.state_slot * (1 + ratio) * 1_000_000), int(ratio * 1_000_000)))

    def fits(b: int) -> bool:
        k, left = mamba_split(b, p.state_slot, ratio)
        return k // p.slots >= 1 and left // p.full_cell // page * page >= tokens

    while not fits(budget):
        budget += 1
    return budget, mamba_split(budget, p.state_slot, ratio)[0]


def _rows(p: Pools, full_tokens: int, swa_tokens: int, swa: bool, kv: str) -> list[CacheGroup]:
    out = []
    for x, n, k, v in p.attention:
        sliding = swa and x.kind in ("sliding", "chunked")
        cells = swa_tokens if sliding else full_tokens
        out.append(CacheGroup(x.kind, n, cells, n * cells * k, n * cells * v, 0, kv, kv if v else "",
                              "sliding pool" if sliding else "token pool"))
    return out


def cost(layout: CacheLayout, ctx: int, settings: Mapping[str, SettingValue]) -> Cost:
    """The budget SGLang's pool sizing needs to admit one request of ``ctx`` tokens, and its pools at that budget."""
    p = pools(layout, settings)
    page = int(settings["page_size"])
    tokens = _cdiv(ctx, page) * page
    kv = p.dtype if str(settings["kv_cache_dtype"]) == "auto" else str(settings["kv_cache_dtype"])
    notes = []
    if p.swa_cell:
        ratio = _ratio(settings, "swa_full_tokens_ratio", "--swa-full-tokens-ratio", 1.0)
        budget, full, swa = swa_budget(p, tokens, page, ratio)
        groups = _rows(p, full, swa, True, kv)
        notes.append(f"sliding pool: {swa} tokens (--swa-full-tokens-ratio {ratio:g} of {full})")
    elif p.states:
        ratio = _ratio(settings, "mamba_full_memory_ratio", "--mamba-full-memory-ratio", None)
        budget, k = mamba_budget(p, tokens, page, ratio)
        groups = _rows(p, tokens, 0, False, "")
        for x, n, b in p.states:
            groups.append(CacheGroup("state", n, 0, 0, 0, (k + 1) * n * b, note=f"{x.mixer}: {k + 1} state slots"))
        notes.append(f"state pool: {k + 1} slots ({p.slots} per request) from --mamba-full-memory-ratio {ratio:g}")
    else:
        budget = tokens * p.full_cell
        groups = _rows(p, tokens, 0, False, kv)
    rest = budget - sum(g.bytes for g in groups)
    if rest:
        groups.append(CacheGroup("padding", 0, 0, 0, 0, rest, note="the pool sizing's remainder at this budget"))
    extras = (Extra("padding slot", page * (p.full_cell + p.swa_cell),
                    "each KV pool allocates one page more than its sizing counts (memory_pool.py: size + page_size)"),
              Extra("--mem-fraction-static reserve", None,
                    "SGLang keeps the card x (1 - mem_fraction_static) for activations and CUDA graphs: the budget is "
                    "card x mem_fraction_static - weights (KVCacheConfigurator._profile_available_bytes)"))
    used = dict(settings, dtype=p.dtype)
    return Cost(ENGINE, ctx, tokens, 1, used, tuple(groups), extras, (*notes, "card assumed: H100 (FA3, page 1)"))


def kv_budget(card: int, weights: int, settings: Mapping[str, SettingValue]) -> int | None:
    """The budget SGLang sizes its pools from on a card of ``card`` bytes holding ``weights`` bytes:
    ``card x mem_fraction_static - weights`` (None for auto: SGLang derives the fraction from the card,
    ``arg_groups/memory_hook.py`` ``handle_gpu_memory_settings``)."""
    if str(settings["mem_fraction_static"]) == "auto":
        return None
    fraction = _ratio(settings, "mem_fraction_static", "--mem-fraction-static", 1.0)
    return int(card * fraction) - weights


def levers(settings: Mapping[str, SettingValue]) -> list[Lever]:
    """What buys more context: an fp8 pool, smaller sliding or state pools, more tensor-parallel GPUs."""
    out: list[Lever] = []
    if str(settings["kv_cache_dtype"]) in ("auto", "bf16", "bfloat16"):
        out.append(("--kv-cache-dtype fp8_e4m3", {"kv_cache_dtype": "fp8_e4m3"}))
    if float(str(settings["swa_full_tokens_ratio"])) > 0.5:
        out.append(("--swa-full-tokens-ratio 0.5 (gpt-oss, Llama 4)", {"swa_full_tokens_ratio": "0.5"}))
    if float(str(settings["mamba_full_memory_ratio"])) > 0.5:
        out.append(("--mamba-full-memory-ratio 0.5 (hybrid state models)", {"mamba_full_memory_ratio": "0.5"}))
    tp = int(settings["tp_size"])
    out.extend((f"--tp-size {n}", {"tp_size": n}) for n in (2 * tp, 4 * tp, 8 * tp) if n <= 8)
    return out


MEMORY = EngineMemory(
    ENGINE, VERSION, f"modelled from source at SGLang {VERSION}", SETTINGS, cost, levers,
    notes=("kv_cache_bytes is the memory SGLang's pool sizing must be left (after the weights and the "
           "--mem-fraction-static reserve) to admit one request of the context, per GPU",))

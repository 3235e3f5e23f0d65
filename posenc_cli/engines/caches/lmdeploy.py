"""LMDeploy 0.18.0's caches: what one request of N tokens needs in its cache pool, on each of its two engines
(``--backend turbomind``, its default, or ``--backend pytorch``), stdlib only.

Both engines size a pool from the card (``--cache-max-entry-count``, default 0.8, of the free memory after the
weights) and cut it into blocks of ``--cache-block-seq-len`` tokens (default 64; ``lmdeploy serve api_server``
passes it to both engines: ``cli/serve.py`` gives it to ``PytorchEngineConfig.block_size``). A request holds the
blocks of its tokens; posenc reports the blocks one request of N tokens needs, per device under ``--tp``, and the
state memory outside the blocks. Units: bytes; cells: token slots of the allocated blocks.

**PyTorch engine (proven).** ``tests/engines/test_memory_lmdeploy.py`` runs lmdeploy's own code from the installed
wheel on this CPU (torch on the ``meta`` device, no CUDA): ``configurations/*`` ``AutoModelConfigBuilder`` on the
corpus configs, ``ExecutorBase._adjust_block_size``, ``engine/cache_engine/plan.py`` ``build_block_cache_plan``
(``.logical_block_nbytes``: the bytes of one logical block, every layer, the K/V payloads and the int4/int8 scales
each rounded up to 256 bytes, ``schema.py`` ``CacheDesc``), ``StateCacheEngine.get_state_slot_nbytes`` and
``ExecutorBase._get_num_gpu_blocks``, and compares bytes exactly. Rules, from that code:

* one uniform layout for every attention layer (``ModelConfig``: ``num_key_value_heads``, ``k_head_dim``,
  ``v_head_dim``; MLA: one 576-wide latent, V empty), ``num_layers`` the attention layers only (Qwen3.5 /
  Qwen3-Next: their full-attention layers); KV heads per device ``max(1, kv // tp)`` (replicated when ``tp > kv``,
  ``builder.py`` ``update_num_kv_heads``);
* ``--quant-policy`` 4 / 8: uint8 K/V (int4 packs two per byte) with a scale and a zero per token and head in the
  model dtype; 16 / 17: fp8 without scales; 42 (TurboQuant): K at 4 bits, V at 2, scales K 2 and V 1;
* blocks: a session of N tokens needs ``cdiv(N, block) + 2`` (one block reserved for dummy inputs,
  ``config_builder.py`` ``num_reserved_gpu_blocks=1``, and ``Engine._get_max_session_len`` keeps one block of
  headroom), and the pool at least 16 (``ExecutorBase._get_runtime_size``);
* a head size of 512 or more (MLA's 576) forces 32-token blocks (``_adjust_block_size``; 64 with FlashMLA on a
  Hopper card, which posenc does not assume);
* linear-attention states (Qwen3.5, Qwen3-Next): ``--max-batch-size`` + 2 slots reserved at start
  (``ExecutorBase._get_state_cache_mem``), conv and recurrent states in bfloat16;
* sliding windows: the engine keeps one window for the whole model, and none for Gemma 3 / gpt-oss (their builders
  set ``sliding_window = -1``: every layer holds every token). A model whose every layer slides (Mistral 7B v0.1)
  is reported holding the whole prompt, the peak while it is prefilled (lmdeploy frees the blocks outside the
  window as the history grows).

**TurboMind (modelled from source).** Its allocator is C++/CUDA, absent from the 0.18.0 wheel; the rules follow the
lmdeploy repository at commit 1263d5cd (2026-08-21, the newest source available to posenc, before the 0.18.0 tag;
its ``EngineConfig`` fields match 0.18.0's ``turbomind.py``):

* ``src/turbomind/models/llama/unified_attention_layer.cc`` (constructor, ``get_block_config``) with
  ``src/turbomind/kernels/attention/block.h`` (``Layout::layer_size``): per block and attention layer
  ``heads x kv x block x head_dim x bits / 8`` (``kv`` 2, 1 for the 576-wide MLA latent, ``bits`` 16 or the quant
  policy's 4 / 8) plus, quantized, ``heads x kv x block x 4`` bytes of scales and zeros; KV heads padded to a
  multiple of ``--tp`` (``builders/attention.py`` ``repeat_kv_for_tp``) then split;
* a sliding layer (gpt-oss) holds every token: the window is a mask (``window_size`` in the attention params);
* ``src/turbomind/models/llama/GatedDeltaNetLayer.cc``: per live sequence one checkpoint object with the
  recurrent states (``linear_v_heads x 128 x 128``) and the conv states (``(2 x k_dim + v_dim) x d_conv``) of every
  linear-attention layer, in the model dtype (float32 with ``LMDEPLOY_FP32_MAMBA_SSM_DTYPE=1``, not modelled);
* objects are carved from 32 MiB pages in slabs (``src/turbomind/memory/object.cc``): that rounding is not modelled.

TurboMind runs only the architectures of ``lmdeploy/turbomind/supported_models.py``; for the others lmdeploy falls
back to the PyTorch engine (``archs.py`` ``autoget_backend``), and so does posenc, with a note.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

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

VERSION = "0.18.0"
TURBOMIND_SOURCE = "1263d5cd"

#: model types of the architectures in lmdeploy/turbomind/supported_models.py SUPPORTED_ARCHS (0.18.0)
TURBOMIND_TYPES = frozenset({
    "qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl", "qwen3", "qwen3_moe", "qwen3_5", "qwen3_5_moe",
    "intern_s2_preview", "internvl_chat", "internvl", "interns1", "llama", "internlm2", "internlm3", "glm4_moe_lite",
    "gpt_oss", "mixtral"})
#: model types of the architectures in lmdeploy/pytorch/models/module_map.py MODULE_MAP (0.18.0) whose caches the
#: PyTorch engine sizes as posenc models it (checked against its own config builders on the corpus)
PYTORCH_TYPES = frozenset({
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_vl", "qwen2_5_vl", "qwen3_vl",
    "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "qwen3_next", "gemma", "gemma2", "gemma3", "gemma3_text", "gpt_oss",
    "deepseek_v2", "deepseek_v3", "kimi_k2", "phi3", "phimoe", "internlm2", "internlm3", "glm4", "glm4_moe",
    "glm4_moe_lite", "starcoder2", "llava", "llava_next", "internvl_chat", "internvl", "interns1"})
#: model types MODULE_MAP runs whose caches posenc does not model (an operator-requested DSA indexer cache, a
#: compressed or cross-attention cache, or a config builder posenc has not checked)
PYTORCH_NOT_MODELLED = frozenset({
    "deepseek_v32", "glm_moe_dsa", "deepseek_v4", "kimi_k25", "llama4", "mllama", "chatglm", "cogvlm", "glm4v",
    "deepseek_vl_v2", "hy_v3", "minicpm3", "minicpmv", "phi3_v", "qwen3_omni_moe", "sdar", "sdar_moe", "meta_moe",
    "interns2_mobius", "interns1_pro", "baichuan", "qwen", "internlm"})

#: --quant-policy values (lmdeploy/messages.py QuantPolicy): TurboMind takes 0, 4 and 8
QUANT_POLICIES = (0, 4, 8, 16, 17, 42)
_TURBOMIND_POLICIES = (0, 4, 8)

SETTINGS = (
    Setting("backend", "--backend", "turbomind", "str", ("turbomind", "pytorch"),
            help="the engine (turbomind falls back to pytorch for an architecture TurboMind lacks)"),
    Setting("quant_policy", "--quant-policy", 0, "int", QUANT_POLICIES, minimum=0,
            help="KV cache quantization: 0 none, 4 int4, 8 int8; PyTorch also 16 fp8_e4m3, 17 fp8_e5m2, "
                 "42 turbo_quant"),
    Setting("cache_block_seq_len", "--cache-block-seq-len", 64, minimum=16,
            help="tokens per cache block (both engines)"),
    Setting("tp", "--tp", 1, help="tensor-parallel devices (the bytes are per device)"),
    Setting("max_batch_size", "--max-batch-size", 128,
            help="PyTorch: linear-attention state slots reserved (+2); default 128 on cards other than "
                 "A100/A800 (384) and H100/H800/H200/L20Y (1024)"),
    Setting("session_len", "--session-len", 0, minimum=0,
            help="longest session (0: unset: TurboMind the config's window, PyTorch what the pool holds)"),
    Setting("cache_max_entry_count", "--cache-max-entry-count", "0.8", "str",
            help="the fraction of free memory (after the weights) the cache pool takes"),
)

#: bytes per element of the KV payload, K and V head-size divisors and scale/zero elements per token and head, per
#: --quant-policy on the PyTorch engine (lmdeploy/pytorch/engine/cache_engine/schema.py)
_PT_QUANT = {0: (2, 1, 1, 0, 0), 4: (1, 2, 2, 2, 2), 8: (1, 1, 1, 2, 2), 16: (1, 1, 1, 0, 0), 17: (1, 1, 1, 0, 0),
             42: (1, 2, 4, 2, 1)}
_ALIGN = 256  # framework fact: CacheDesc alignment (schema.py)
_MIN_BLOCKS = 16  # framework fact: ExecutorBase._get_runtime_size keeps at least 16 blocks
_RESERVED_BLOCKS = 1  # framework fact: ConfigBuilder.build_cache_config num_reserved_gpu_blocks
_DTYPE_BYTES = 2  # framework fact: both engines compute in float16 or bfloat16 (dtype auto: a float32 model too)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _align(n: int) -> int:
    return _cdiv(n, _ALIGN) * _ALIGN


def _attention_layers(layout: CacheLayout) -> list[LayerCache]:
    return [x for x in layout.layers if x.kind in ("full", "sliding", "chunked", "mla")]


def _types(layout: CacheLayout) -> set[str]:
    """The model type lmdeploy dispatches on: the config's own (a wrapper's, not its text model's: lmdeploy picks
    the engine and the model class by the top-level architecture)."""
    return {layout.model_type or layout.text_type}


def _backend(layout: CacheLayout, asked: str) -> tuple[str, list[str]]:
    """The engine lmdeploy runs ``layout`` on for ``--backend asked``, and a note when it falls back."""
    kinds = {x.kind for x in layout.layers}
    if "shared" in kinds:
        raise Unsupported("lmdeploy 0.18.0 has no architecture whose layers share another's cache (Gemma 3n/4)")
    types = _types(layout)
    if asked == "turbomind":
        if types & TURBOMIND_TYPES:
            return "turbomind", []
        asked = "pytorch"
        fallback = [f"TurboMind lacks {layout.model_type or layout.text_type}: lmdeploy serves it with its PyTorch "
                    "engine (archs.autoget_backend)"]
    else:
        fallback = []
    if types & PYTORCH_NOT_MODELLED:
        raise Unsupported(f"not modelled: lmdeploy's PyTorch engine runs {layout.model_type}, with caches "
                          "posenc does not model (a DSA indexer, compressed or cross-attention caches, or a config "
                          "builder posenc has not checked)")
    if not types & PYTORCH_TYPES:
        raise Unsupported(f"lmdeploy {VERSION} runs no architecture of model type "
                          f"{layout.model_type or layout.text_type} (turbomind/supported_models.py, "
                          "pytorch/models/module_map.py)")
    return "pytorch", fallback


def _uniform(layers: list[LayerCache], engine: str) -> LayerCache:
    """The one attention layout an engine gives every layer (Unsupported when the layers differ)."""
    first = layers[0]
    for x in layers[1:]:
        if (x.kv_heads, x.k_head_dim, x.mla) != (first.kv_heads, first.k_head_dim, first.mla):
            raise Unsupported(f"not modelled: attention layers of different sizes on lmdeploy's {engine} engine")
    return first


def _kv_heads_per_device(kv: int, tp: int, engine: str) -> int:
    """KV heads per device: TurboMind repeats them up to a multiple of ``tp`` (repeat_kv_for_tp), the PyTorch
    engine replicates them when ``tp > kv`` (update_num_kv_heads); both refuse a ``tp`` that does not divide."""
    if kv % tp == 0:
        return kv // tp
    if tp > kv and tp % kv == 0:
        return 1
    if engine == "turbomind" and kv < tp and _cdiv(kv, tp) * tp % kv == 0:
        return _cdiv(kv, tp)
    raise PosencError(f"--tp {tp}: lmdeploy's {engine} engine needs it to divide the {kv} KV heads, or the "
                      f"reverse; use one of: {', '.join(str(t) for t in (1, 2, 4, 8) if kv % t == 0 or t % kv == 0)}")


def _state_dims(layout: CacheLayout) -> tuple[int, int, int, int, int]:
    """(linear-attention layers, conv channels, conv kernel, value heads, key x value head elements) of a gated
    delta net model (its layout's transformers state shapes: conv (channels, kernel), recurrent (nv, dk, dv))."""
    states = [x for x in layout.layers if x.kind == "state"]
    first = states[0]
    if first.mixer != "gated_delta_net":
        raise Unsupported(f"not modelled: lmdeploy's states of {first.mixer} layers")
    shapes = {s.name: s.shape for s in first.states}
    channels, kernel = shapes["conv_states.0"]
    nv, dk, dv = shapes["recurrent_states.0"]
    return len(states), channels, kernel, nv, dk * dv


def _pytorch(layout: CacheLayout, ctx: int, s: Mapping[str, SettingValue]) -> tuple[list[CacheGroup], int, list[str]]:
    """The PyTorch engine's blocks for one session of ``ctx`` tokens and its state slots (see the module doc)."""
    tp, policy, block = int(s["tp"]), int(s["quant_policy"]), int(s["cache_block_seq_len"])
    notes = []
    attention = _attention_layers(layout)
    layer = _uniform(attention, "pytorch")
    kv = _kv_heads_per_device(layer.kv_heads, tp, "pytorch")
    k_dim, v_dim = layer.k_head_dim, (0 if layer.kind == "mla" else layer.k_head_dim)
    if k_dim >= 512 and block > 32:  # framework fact: ExecutorBase._adjust_block_size
        block = 32
        notes.append(f"head size {k_dim}: lmdeploy uses 32-token blocks (64 with FlashMLA on a Hopper card)")
    elem, k_div, v_div, k_scales, v_scales = _PT_QUANT[policy]
    k_block = _align(block * kv * (k_dim // k_div) * elem) + (_align(block * kv * k_scales * _DTYPE_BYTES)
                                                            if k_scales else 0)
    v_block = _align(block * kv * (v_dim // v_div) * elem) + (_align(block * kv * v_scales * _DTYPE_BYTES)
                                                            if v_scales else 0)
    blocks = max(_MIN_BLOCKS, _cdiv(ctx, block) + 1 + _RESERVED_BLOCKS)
    kinds = {x.kind for x in attention}
    if kinds == {"sliding"}:
        notes.append("every layer slides: lmdeploy frees the blocks outside the window as the history grows; "
                     "posenc reports the whole prompt, the peak while it is prefilled (modelled, not run)")
    elif any(x.window for x in attention):
        notes.append("lmdeploy's PyTorch engine keeps every token of the sliding layers of this model")
    groups = []
    for kind in sorted(kinds, key=["full", "mla", "sliding", "chunked"].index):
        n = sum(1 for x in attention if x.kind == kind)
        groups.append(CacheGroup(kind, n, blocks * block, n * blocks * k_block, n * blocks * v_block,
                                 k_type=_type_name(policy), v_type=_type_name(policy)))
    if any(x.kind == "state" for x in layout.layers):
        layers, channels, kernel, nv, cell = _state_dims(layout)
        per_slot = _align(layers * channels // tp * kernel * 2) + _align(layers * nv // tp * cell * 2)
        slots = int(s["max_batch_size"]) + 2  # framework fact: ExecutorBase._get_state_cache_mem
        groups.append(CacheGroup("state", layers, 0, 0, 0, slots * per_slot, note=f"{slots} state slots"))
        notes.append(f"linear-attention states: {slots} slots (--max-batch-size + 2) reserved at start, whatever "
                     "the requests")
    notes.append(f"pool of {blocks} blocks of {block} tokens: cdiv(N, {block}) + 2 (one reserved, one of "
                 "headroom), at least 16")
    return groups, blocks * block, notes


def _type_name(policy: int) -> str:
    return {0: "f16/bf16", 4: "int4", 8: "int8", 16: "fp8_e4m3", 17: "fp8_e5m2", 42: "turbo_quant"}[policy]


def _turbomind(layout: CacheLayout, ctx: int, s: Mapping[str, SettingValue]) -> tuple[list[CacheGroup], int, list[str]]:
    """TurboMind's blocks for one request of ``ctx`` tokens and its recurrent checkpoint object (module doc)."""
    tp, policy, block = int(s["tp"]), int(s["quant_policy"]), int(s["cache_block_seq_len"])
    if policy not in _TURBOMIND_POLICIES:
        raise PosencError(f"--quant-policy {policy} is not one TurboMind allows; use one of: 0, 4, 8 (or "
                          "--backend pytorch)")
    if block % 32:
        raise PosencError(f"--cache-block-seq-len {block}: TurboMind needs a multiple of 32 (64 before sm80)")
    blocks = _cdiv(ctx, block)
    q_bits = policy or 16
    t_bits = 16 if policy else 0  # framework fact: scales and zeros in the 16-bit compute dtype
    attention = _attention_layers(layout)
    groups: dict[tuple[str, int], list[int]] = {}
    for x in attention:
        head_dim = x.k_head_dim
        kv_num = 1 if head_dim == 576 else 2  # framework fact: get_block_config share_kv (MLA's latent)
        heads = _kv_heads_per_device(x.kv_heads, tp, "turbomind")
        data = heads * block * (q_bits * head_dim // 8)
        params = heads * block * (t_bits * 2 // 8)
        entry = groups.setdefault((x.kind, kv_num), [0, 0, 0])
        entry[0] += 1
        entry[1] += blocks * (data + params)
        entry[2] += blocks * (data + params) * (kv_num - 1)
    out = [CacheGroup(kind, n, blocks * block, k, v, k_type=_tm_type(policy), v_type=_tm_type(policy) if v else "")
           for (kind, _), (n, k, v) in groups.items()]
    notes = []
    if any(x.kind == "sliding" for x in attention):
        notes.append("TurboMind's sliding layers hold every token (the window is a mask)")
    if any(x.kind == "state" for x in layout.layers):
        layers, channels, kernel, nv, cell = _state_dims(layout)
        if cell != 128 * 128:
            raise Unsupported("TurboMind's gated delta net takes 128-wide key and value heads only")
        state = layers * (nv // tp * cell * _DTYPE_BYTES + channels // tp * kernel * _DTYPE_BYTES)
        out.append(CacheGroup("state", layers, 0, 0, 0, state, note="one checkpoint object per live sequence"))
    return out, blocks * block, notes


def _tm_type(policy: int) -> str:
    return {0: "f16/bf16", 4: "int4", 8: "int8"}[policy]


def cost(layout: CacheLayout, ctx: int, settings: Mapping[str, SettingValue]) -> Cost:
    """The bytes one request of ``ctx`` tokens needs in lmdeploy's cache pool, per device, on the engine
    ``--backend`` picks (see the module docstring)."""
    backend, notes = _backend(layout, str(settings["backend"]))
    if not _attention_layers(layout):
        raise Unsupported("lmdeploy 0.18.0 has no architecture without attention layers")
    run = _turbomind if backend == "turbomind" else _pytorch
    groups, allocated, more = run(layout, ctx, settings)
    notes += more
    session = int(settings["session_len"])
    if not session and backend == "turbomind":
        notes.append("TurboMind's --session-len defaults to the config's max_position_embeddings: set it to serve "
                     "a longer context")
    if session and session < ctx:
        notes.append(f"--session-len {session} refuses a request of {ctx} tokens: serve with --session-len {ctx}")
    basis = (f"modelled from TurboMind's C++ source at commit {TURBOMIND_SOURCE}" if backend == "turbomind"
             else f"proven against lmdeploy {VERSION}'s PyTorch engine code")
    extras = (
        Extra("cache pool", None, f"the pool takes --cache-max-entry-count {settings['cache_max_entry_count']} of "
                                  "the free memory after the weights: the rest is not for the cache"),
        Extra("runtime buffers", None, "the PyTorch engine reserves (max_prefill_token_num + 2 x --max-batch-size) "
                                       "x vocab x 2 bytes first; TurboMind's workspaces: not computed"),
    )
    return Cost("lmdeploy", ctx, allocated, 1, dict(settings, backend=backend), tuple(groups), extras,
                (basis, *notes))


def levers(settings: Mapping[str, SettingValue]) -> list[Lever]:
    """Quantized caches (int8, then int4), fewer state slots, then more tensor-parallel devices."""
    out: list[Lever] = []
    for policy, label in ((8, "int8 KV cache"), (4, "int4 KV cache")):
        if int(settings["quant_policy"]) not in (policy, 4):
            out.append((f"--quant-policy {policy} ({label})", {"quant_policy": policy}))
    if settings["backend"] == "pytorch" and int(settings["max_batch_size"]) > 1:
        out.append(("--max-batch-size 1 (fewer linear-attention state slots)", {"max_batch_size": 1}))
    tp = int(settings["tp"])
    for more in (2, 4, 8):
        if more > tp:
            out.append((f"--tp {more} (bytes per device)", {"tp": more}))
    return out


MEMORY = EngineMemory(
    "lmdeploy", VERSION,
    f"PyTorch engine proven against lmdeploy {VERSION}'s own cache-plan code (run on the meta device); TurboMind "
    f"modelled from its C++ source at commit {TURBOMIND_SOURCE}",
    SETTINGS, cost, levers)

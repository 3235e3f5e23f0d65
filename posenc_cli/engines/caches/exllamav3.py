"""ExLlamaV3 1.6.5's caches: what ``Cache(model, max_num_tokens=N)`` allocates for a context of N tokens, as
``model_init`` builds it (``exllamav3/model_init.py``: ``--cache_size``, ``--cache_quant``,
``--autosplit_max_batch_size``, ``--swa_full``, ``--recurrent_state_fp32``), stdlib only.

Units: bytes; cells: token slots per layer. The cache is one pool of ``max_num_tokens`` tokens shared by every
sequence, in pages of 256 tokens (``constants.py`` ``PAGE_SIZE``; ``CacheLayer_fp16`` asserts a multiple), so a
context of N tokens needs ``--cache_size`` N rounded up to a page. Per layer, from the installed source:

* attention layers (``cache/fp16.py`` ``CacheLayer_fp16``): K and V each ``(pages, 256, kv_heads, head_dim)`` in
  float16 whatever the model's dtype. Sliding layers of every architecture built on ``modules.Attention`` (Gemma 2
  and 3, Cohere 2, EXAONE 4, ...) hold every token: the window is a mask;
* ``--cache_quant K,V`` (or one number for both, 2..8 bits; ``cache/quant.py`` ``CacheLayer_quant``): per token
  ``kv_heads x head_dim / 32 x bits`` int32 words for K and for V, and a float16 scale per 32 elements for each;
* MLA (DeepSeek-V3, Kimi K2, GLM-4.7-Flash; ``cache/mla.py``): the latent ``(pages, 256, 1, kv_lora_rank)`` and the
  rope key ``(pages, 256, 1, rope_dim)`` in float16; quantized, the latent packs ``kv_lora_rank / 32 x K bits``
  int32 words plus a float16 scale per 32, the rope key stays float16 (V bits unused);
* sliding layers of architectures built on ``modules.SlidingAttention`` (gpt-oss) without ``--swa_full``: a ring
  per batch slot (``modules/sliding_attn.py`` ``SWALayerState``): K and V ``(slots, kv_state_size, kv_heads,
  head_dim)`` float16, ``kv_state_size`` = the window (gpt-oss: ``sliding_window - 1``) plus 512 tokens, rounded up
  to a page, whatever the context; never quantized. With ``--swa_full`` they are ordinary attention layers;
* gated delta net (Qwen3.5, Qwen3-Next) and Mamba2 (Nemotron-H) layers (``modules/gated_delta_net.py``
  ``GDNLayerState``, also Mamba2's): per slot a conv ring ``(fdim, kernel)`` in bfloat16, two recurrent-state rows
  ``(value_heads, key_dim, value_dim)`` in float16 (float32 with ``--recurrent_state_fp32``; Mamba2 always
  float32), and staging rows (``fdim`` bfloat16, value heads bfloat16 and float32).

The bytes are for the layer split ``model_init`` does by default (every layer's cache on the device holding the
layer); its tensor-parallel mode (``-tp``, KV heads split across devices) is not modelled. Slots are
``--autosplit_max_batch_size`` (``model_init`` passes it as the Cache's ``max_batch_size``; default 1).
Checkpoints of rings and states live in host memory (``cache/recurrent.py`` ``HostPool``): not counted.

Proof: ``tests/engines/test_memory_exllamav3.py`` runs the installed cache classes' own shape and ``storage_size``
code (``CacheLayer_fp16``, ``CacheLayer_quant``, ``CacheLayer_MLA_fp16``, ``CacheLayer_MLA_quant``,
``SWALayerState``, ``GDNLayerState``) on the CPU with torch's meta device, for stand-in attention modules with the
sizes the architectures give them; which module each architecture builds per layer, and the ring's
``kv_state_size``, are read from the installed ``architecture/*.py`` and ``modules/sliding_attn.py`` (checked by the
tests against the source, not run: building a model needs the CUDA extension).
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

VERSION = "1.6.5"
PAGE_SIZE = 256  # framework fact: exllamav3/constants.py
SWA_OVERPROVISION = 2 * PAGE_SIZE  # framework fact: SlidingAttention(sliding_window_overp=2 * PAGE_SIZE)

#: model types whose every attention layer is a modules.Attention (a sliding one holds every token)
FULL_CACHE_TYPES = frozenset({
    "llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral", "phi3", "gemma2", "gemma3", "gemma3_text",
    "cohere", "cohere2", "exaone4", "olmo3", "smollm3", "ministral3", "mistral3", "glm4", "glm4_moe", "seed_oss",
    "ernie4_5", "ernie4_5_moe", "minimax_m2", "apertus", "arcee", "dots1", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe",
    "glm4v", "glm4v_moe", "solar_open", "afmoe", "iquestcoder", "hyperclovax"})
#: model types built on MLAttention (a latent cache)
MLA_TYPES = frozenset({"deepseek_v3", "kimi_k2", "glm4_moe_lite"})
#: model types whose sliding layers are SlidingAttention rings (see the module docstring), with the window
#: offset their architecture passes (gpt_oss.py: sliding_window - 1)
RING_TYPES = {"gpt_oss": -1}
#: model types with gated-delta-net or Mamba2 state layers beside modules.Attention layers
STATE_TYPES = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_moe", "nemotron_h"})
#: model types ExLlamaV3 1.6.5 has an architecture for whose caches posenc does not model (shared KV layers,
#: DSA / compressed caches, KDA or short-convolution states, heterogeneous layers, other sliding rings)
NOT_MODELLED_TYPES = frozenset({
    "gemma4", "gemma4_text", "laguna", "mimo_v2_flash", "step3p5", "step3p7", "deepseek_v4", "glm_moe_dsa",
    "glm5_next", "kimi_linear", "lfm2", "lfm2_moe", "lfm2_vl", "bailing_hybrid", "olmo_hybrid", "deci",
    "nemotron-nas", "mistral4", "qwen4_exp", "hy_v3", "mimo", "muse_glimmer", "spark2_5", "hcxvision_v2"})

SETTINGS = (
    Setting("cache_quant", "--cache_quant", "", "str",
            help="quantized cache: K,V bits (2..8) or one number for both; empty: float16"),
    Setting("max_batch_size", "--autosplit_max_batch_size", 1,
            help="batch slots for sliding rings and recurrent states (the Cache's max_batch_size)"),
    Setting("swa_full", "--swa_full", False, "bool", help="full-size cache for sliding layers instead of rings"),
    Setting("recurrent_state_fp32", "--recurrent_state_fp32", False, "bool",
            help="gated-delta-net recurrent states in float32 instead of float16"),
)


def cache_bits(text: str | SettingValue) -> tuple[int, int] | None:
    """``--cache_quant`` as (K bits, V bits), None for float16; a PosencError naming what is allowed."""
    value = str(text).strip().lower()
    if value in ("", "fp16", "none"):
        return None
    try:
        bits = [int(b) for b in value.split(",")]
    except ValueError:
        bits = []
    if len(bits) == 1:
        bits = bits * 2
    if len(bits) != 2 or not all(2 <= b <= 8 for b in bits):
        raise PosencError(f"--cache_quant {text!r}: give K,V bits from 2 to 8 (such as 8,8 or 4,6) or one number "
                          "for both")
    return bits[0], bits[1]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _kind(layout: CacheLayout) -> str:
    """How ExLlamaV3 caches this model type: "full", "mla", "ring", "state" (Unsupported when it cannot run it or
    posenc does not model it)."""
    name = layout.model_type or layout.text_type
    if name in FULL_CACHE_TYPES:
        return "full"
    if name in MLA_TYPES:
        return "mla"
    if name in RING_TYPES:
        return "ring"
    if name in STATE_TYPES:
        return "state"
    if name in NOT_MODELLED_TYPES:
        raise Unsupported(f"not modelled: ExLlamaV3 {VERSION} runs {name}, with caches posenc does not model")
    raise Unsupported(f"ExLlamaV3 {VERSION} has no architecture for model type {name} (exllamav3/architecture)")


def attention_bytes(layer: LayerCache, tokens: int, bits: tuple[int, int] | None) -> tuple[int, int]:
    """(K, V) bytes of one attention layer's ``CacheLayer_fp16`` / ``CacheLayer_quant`` of ``tokens`` tokens."""
    dim = layer.kv_heads * layer.k_head_dim
    if bits is None:
        return tokens * dim * 2, tokens * dim * 2
    if dim % 32:
        raise Unsupported(f"ExLlamaV3 quantizes a cache whose tokens are a multiple of 32 wide, not {dim}")
    scales = tokens * (dim // 32) * 2
    return tokens * (dim // 32) * bits[0] * 4 + scales, tokens * (dim // 32) * bits[1] * 4 + scales


def mla_bytes(layer: LayerCache, tokens: int, bits: tuple[int, int] | None) -> tuple[int, int]:
    """(latent, rope key) bytes of one MLA layer's ``CacheLayer_MLA_fp16`` / ``CacheLayer_MLA_quant``."""
    assert layer.mla is not None
    rank, rope = layer.mla.kv_lora_rank, layer.mla.rope_dim
    if bits is None:
        return tokens * rank * 2, tokens * rope * 2
    if rank % 32:
        raise Unsupported(f"ExLlamaV3 quantizes an MLA latent of a multiple of 32, not {rank}")
    return tokens * (rank // 32) * bits[0] * 4 + tokens * (rank // 32) * 2, tokens * rope * 2


def ring_tokens(window: int, offset: int) -> int:
    """``SlidingAttention.kv_state_size``: the window the architecture passes plus 512, rounded up to a page."""
    return _cdiv(window + offset + SWA_OVERPROVISION, PAGE_SIZE) * PAGE_SIZE


def state_bytes(layer: LayerCache, slots: int, fp32: bool) -> int:
    """``GDNLayerState.storage_size()`` of one gated-delta-net or Mamba2 layer with ``slots`` batch slots and no
    speculative history: conv ring, two recurrent rows per slot, staging rows."""
    shapes = {s.name: s.shape for s in layer.states}
    if "conv_states.0" not in shapes or "recurrent_states.0" not in shapes:
        raise Unsupported(f"not modelled: ExLlamaV3's states of {layer.mixer} layers")
    fdim, kernel = shapes["conv_states.0"]
    nv, d1, d2 = shapes["recurrent_states.0"]
    recurrent = 4 if fp32 or layer.mixer == "mamba2" else 2  # framework fact: Mamba2 keeps float32 regardless
    return (slots * fdim * kernel * 2 + 2 * slots * nv * d1 * d2 * recurrent
            + slots * fdim * 2 + slots * nv * 2 + slots * nv * 4)


def _group(kind: str, layers: list[LayerCache], tokens: int, s: Mapping[str, SettingValue],
           ring: int | None) -> CacheGroup:
    """One group of equal layers as ExLlamaV3 caches them (``ring``: the window offset of a model type whose
    sliding layers are rings, None otherwise)."""
    bits = cache_bits(s["cache_quant"])
    first, n = layers[0], len(layers)
    slots = int(s["max_batch_size"])
    label = "float16" if bits is None else f"q{bits[0]}"
    if kind == "state":
        return CacheGroup("state", n, 0, 0, 0, n * state_bytes(first, slots, bool(s["recurrent_state_fp32"])))
    if kind == "mla":
        k, v = mla_bytes(first, tokens, bits)
        return CacheGroup("mla", n, tokens, n * k, n * v, k_type=label, v_type="float16")
    if kind == "sliding" and ring is not None and not s["swa_full"]:
        assert first.window is not None
        cells = ring_tokens(first.window, ring)
        per = slots * cells * first.kv_heads * first.k_head_dim * 2
        return CacheGroup("sliding", n, cells, n * per, n * per, k_type="float16", v_type="float16",
                          note=f"a ring of {cells} tokens per slot, whatever the context")
    k, v = attention_bytes(first, tokens, bits)
    return CacheGroup(kind, n, tokens, n * k, n * v, k_type=label, v_type="float16" if bits is None else f"q{bits[1]}")


def cost(layout: CacheLayout, ctx: int, settings: Mapping[str, SettingValue]) -> Cost:
    """The bytes of ExLlamaV3's ``Cache`` for a context of ``ctx`` tokens (``--cache_size`` ctx rounded up to a
    256-token page), per group of equal layers."""
    mode = _kind(layout)
    ring = RING_TYPES.get(layout.model_type or layout.text_type) if mode == "ring" else None
    cache_bits(settings["cache_quant"])
    tokens = _cdiv(ctx, PAGE_SIZE) * PAGE_SIZE
    groups = []
    for group in layout.groups():
        kind = group.cache.kind
        if kind == "none":
            continue
        if kind not in ("full", "sliding", "chunked", "mla", "state"):
            raise Unsupported(f"not modelled: ExLlamaV3's cache of {kind} layers")
        layers = [layout.layers[i] for i in group.layers]
        groups.append(_group(kind, layers, tokens, settings, ring))
    notes = [f"--cache_size {tokens} (the context rounded up to 256-token pages)"]
    if any(g.kind == "sliding" and g.cells == tokens for g in groups):
        notes.append("ExLlamaV3's sliding layers of this architecture hold every token (the window is a mask)")
    extras = (Extra("checkpoints", 0, "sliding-ring and recurrent-state checkpoints are kept in host memory"),
              Extra("activations", None, "model_init reserves them for --chunk_size (default 4096) when it splits "
                                         "the model; posenc does not compute them"))
    return Cost("exllamav3", ctx, tokens, 1, dict(settings), tuple(groups), extras, tuple(notes))


def levers(settings: Mapping[str, SettingValue]) -> list[Lever]:
    """Quantized caches, 8 bits first, then 6 and 4; rings instead of full sliding caches."""
    out: list[Lever] = []
    current = cache_bits(settings["cache_quant"])
    for bits in (8, 6, 4):
        if current is None or max(current) > bits:
            out.append((f"--cache_quant {bits},{bits}", {"cache_quant": f"{bits},{bits}"}))
    if settings["swa_full"]:
        out.append(("no --swa_full (sliding rings)", {"swa_full": False}))
    return out


MEMORY = EngineMemory(
    "exllamav3", VERSION,
    f"cache-layer sizes proven against ExLlamaV3 {VERSION}'s own cache classes (run on the meta device); which "
    "layer gets which cache modelled from its architecture source",
    SETTINGS, cost, levers)

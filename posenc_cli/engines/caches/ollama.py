"""Ollama's GGUF runner at Ollama 0.32.15 (the same code in v0.33.0-rc2), modelled from its source (stdlib only).

Ollama 0.32.15 serves every GGUF through the upstream llama-server as a subprocess (``llm/server.go``,
``NewLlamaServer``: "All GGML models are served via the upstream llama-server subprocess", llama.cpp ``b10488``,
``LLAMA_CPP_VERSION``); its own Go engine (the ``ollamarunner`` that once ignored ``OLLAMA_KV_CACHE_TYPE`` without
flash attention) is gone for GGUFs, and its MLX runner (``x/mlxrunner``, safetensors on Apple silicon) is not modelled
here. So what it allocates is llama.cpp's arithmetic (:mod:`posenc_cli.engines.caches.llamacpp`, proven against
llama.cpp's log) with the flags Ollama passes (``llm/llama_server.go``, ``startLlamaServer``):

* ``-c num_ctx x OLLAMA_NUM_PARALLEL`` and ``-np OLLAMA_NUM_PARALLEL``, no ``--kv-unified``: each slot has its own
  stream of ``num_ctx`` cells (padded to 256). ``num_ctx`` is first lowered to the GGUF's ``context_length``
  (``NewLlamaServer``); posenc's ``ctx`` is ``num_ctx``.
* ``OLLAMA_NUM_PARALLEL`` (default 1, ``envconfig/config.go``) is forced to 1 for the architectures
  ``server/sched.go`` names (:data:`ONE_SLOT`: Qwen3.5, Qwen3-Next, LFM2, Nemotron-H, Qwen3-VL, mllama).
* ``OLLAMA_KV_CACHE_TYPE`` goes to both ``--cache-type-k`` and ``--cache-type-v`` unchecked (unset: llama-server's
  f16). It is not inert without flash attention at this version: llama-server refuses a quantized V cache with
  ``--flash-attn off``, so the model fails to load.
* ``OLLAMA_FLASH_ATTENTION``: ``1`` passes ``--flash-attn on``, ``0`` ``off``; unset, ``auto`` when every device can
  (CPU, Metal, ROCm, Vulkan, CUDA compute 6.0+ but 7.2: ``ml/device.go``, ``FlashAttentionSupported``; posenc assumes
  such devices), else ``off`` (``LlamaServerFlashAttention``).
* ``num_batch``: set, ``-b`` and ``-ub`` both take it; unset, Ollama picks 512, 1024 past 4096 tokens of
  ``num_ctx x parallel``, 2048 past 32768 (``server/sched.go``, ``generationBatchForContext``), lower when its VRAM
  prediction leaves no headroom, 512 (256 on a CUDA card of 8 GiB or less past 4096 tokens) with flash attention off
  on CUDA; posenc assumes the headroom. The physical batch sets a sliding layer's cells (window + ubatch).
* A GGUF with multi-token-prediction (nextn) layers turns MTP drafting on (``hasMTPDraft``; ``--spec-type draft-mtp
  --spec-draft-n-max 4``, ``draft_num_predict`` 4): the recurrent states of a hybrid that can roll back keep 4 more
  rows per sequence (``n_rs_seq``), and the draft context has a cache of its own (named, not computed).

The default ``num_ctx`` (``server/routes.go``): ``OLLAMA_CONTEXT_LENGTH`` if set, else 4096 below 23 GiB of total VRAM,
32768 from 23 GiB, 262144 from 47 GiB (:func:`default_num_ctx`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from posenc_cli.engines.caches import llamacpp
from posenc_cli.engines.caches.model import Cost, EngineMemory, Extra, Lever, Setting, SettingValue
from posenc_cli.errors import PosencError

if TYPE_CHECKING:
    from posenc_cli.models.cache_layout import CacheLayout

ENGINE = "ollama"
VERSION = "0.32.15 (GGUFs through llama-server, llama.cpp b10488)"
BASIS = ("modelled from source at Ollama 0.32.15: llama.cpp's arithmetic (proven against llama.cpp's log) with the "
         "llama-server flags Ollama passes; Ollama's own engine is not modelled (it no longer serves GGUFs)")

# framework fact: server/routes.go, the VRAM-based default num_ctx: (total VRAM at least, num_ctx)
DEFAULT_NUM_CTX = ((47 << 30, 262144), (23 << 30, 32768), (0, 4096))
# framework fact: server/sched.go generationBatchForContext: (context above, batch), else 512
AUTO_BATCH = ((32768, 2048), (4096, 1024))
AUTO_BATCH_DEFAULT = 512
# framework fact: api/types.go DefaultOptions DraftNumPredict (--spec-draft-n-max with an MTP draft)
DRAFT_NUM_PREDICT = 4
#: server/sched.go: "Some architectures are not safe with num_parallel > 1" (Ollama's model families, and the
#: transformers model types of the same architectures)
ONE_SLOT = frozenset({"mllama", "qwen3vl", "qwen3vlmoe", "qwen35", "qwen35moe", "qwen3next", "lfm2", "lfm2moe",
                      "nemotron_h", "nemotron_h_moe", "nemotron_h_omni", "qwen3_vl_text", "qwen3_vl_moe_text",
                      "qwen3_5_text", "qwen3_5_moe_text", "qwen3_next", "lfm2_moe"})
_FLASH = {"unset": "auto", "1": "on", "true": "on", "0": "off", "false": "off"}

SETTINGS = (
    Setting("num_parallel", "OLLAMA_NUM_PARALLEL", 1, help="requests served at once: num_ctx cells each"),
    Setting("kv_cache_type", "OLLAMA_KV_CACHE_TYPE", "f16", "str", tuple(llamacpp.CACHE_TYPES),
            help="K and V cache type (unset: f16); a quantized type needs flash attention"),
    Setting("flash_attention", "OLLAMA_FLASH_ATTENTION", "unset", "str", tuple(_FLASH),
            help="1: on, 0: off; unset: auto on devices that support it"),
    Setting("num_batch", "num_batch", 0, minimum=0,
            help="-b and -ub; 0: Ollama's automatic choice (512, 1024 past 4096 tokens, 2048 past 32768)"),
)


def default_num_ctx(total_vram: int, context_length_env: int = 0) -> int:
    """Ollama's ``num_ctx`` when no request or Modelfile sets one: ``OLLAMA_CONTEXT_LENGTH``, else by total VRAM."""
    if context_length_env > 0:
        return context_length_env
    return next(n for floor, n in DEFAULT_NUM_CTX if total_vram >= floor)


def auto_batch(tokens: int) -> int:
    """Ollama's automatic ``num_batch`` for ``num_ctx x parallel`` tokens (when its VRAM prediction leaves room)."""
    return next((batch for above, batch in AUTO_BATCH if tokens > above), AUTO_BATCH_DEFAULT)


def ollama_params(layout: CacheLayout, ctx: int, settings: Mapping[str, SettingValue],
                  notes: list[str]) -> llamacpp.Params:
    """The llama.cpp context parameters of the llama-server Ollama starts for ``num_ctx`` = ``ctx``."""
    slots = int(settings["num_parallel"])
    if slots > 1 and (layout.text_type in ONE_SLOT or (layout.model_type or "") in ONE_SLOT):
        notes.append(f"Ollama serves {layout.text_type} one request at a time: OLLAMA_NUM_PARALLEL {slots} -> 1")
        slots = 1
    cache_type = str(settings["kv_cache_type"])
    flash = _FLASH[str(settings["flash_attention"])]
    if llamacpp.CACHE_TYPES[cache_type][0] > 1 and flash == "off":
        raise PosencError(f"OLLAMA_KV_CACHE_TYPE={cache_type} with OLLAMA_FLASH_ATTENTION off: Ollama 0.32.15 passes "
                          "it to llama-server, which refuses a quantized V cache without flash attention (use "
                          "OLLAMA_FLASH_ATTENTION=1, or f16)")
    batch = int(settings["num_batch"]) or auto_batch(ctx * slots)
    rs_seq = DRAFT_NUM_PREDICT if layout.nextn_layers else 0  # llama.cpp keeps them for the archs that roll back
    if rs_seq and layout.text_type in llamacpp.RS_ROLLBACK and any(x.kind == "state" for x in layout.layers):
        notes.append(f"the GGUF's nextn layers turn MTP drafting on (--spec-draft-n-max {DRAFT_NUM_PREDICT}): "
                     f"{1 + rs_seq} recurrent state rows per sequence")
    notes.append(f"-c {ctx * slots} -np {slots} -b {batch} -ub {batch}: num_ctx {ctx} per request, no unified "
                 "cache; Ollama lowers num_ctx to the GGUF's context_length")
    return llamacpp.Params(ctx * slots, slots, False, cache_type, cache_type, flash, False, batch, batch, rs_seq)


def cost(layout: CacheLayout, ctx: int, settings: Mapping[str, SettingValue]) -> Cost:
    """What Ollama 0.32.15's llama-server allocates for ``num_ctx`` = ``ctx`` (see the module docstring)."""
    notes: list[str] = []
    p = ollama_params(layout, ctx, settings, notes)
    out = llamacpp.cost_with(ENGINE, layout, ctx, settings, p, notes)
    extras = out.extras
    if layout.nextn_layers:
        extras += (Extra("MTP draft context", None, "the speculative draft's own llama.cpp context and cache for the "
                         "GGUF's nextn layers (Ollama turns MTP drafting on for such a GGUF)"),)
    return out._replace(extras=extras)


def levers(settings: Mapping[str, SettingValue]) -> list[Lever]:
    """q8_0 then q4_0 caches (with flash attention), then one request at a time."""
    out = llamacpp.quantized_levers(settings, ("kv_cache_type", "kv_cache_type"),
                                    ("flash_attention", "OLLAMA_FLASH_ATTENTION=1"), ("0", "false"), "1")
    if int(settings["num_parallel"]) > 1:
        out.append(("OLLAMA_NUM_PARALLEL=1", {"num_parallel": 1}))
    return out


MEMORY = EngineMemory(ENGINE, VERSION, BASIS, SETTINGS, cost, levers, notes=(
    "num_ctx defaults to OLLAMA_CONTEXT_LENGTH, else 4096 below 23 GiB of total VRAM, 32768 from 23 GiB and 262144 "
    "from 47 GiB (server/routes.go)",))

"""LM Studio's GGUF path (its llama.cpp engine), modelled (stdlib only): LM Studio is closed source.

What is known, and from where:

* its llama.cpp engine (v2 and later) runs llama.cpp's ``llama-server`` ("engine-protocol llama-server runtimes",
  LM Studio's SDK, lmstudio-js ``LLMLoadModelConfig``), so what it allocates is llama.cpp's arithmetic
  (:mod:`posenc_cli.engines.caches.llamacpp`, proven against llama.cpp's log) with LM Studio's load settings, named
  as its SDK and ``model.yaml`` name them (``llm.load.*``);
* ``maxParallelPredictions``: 4 by default (LM Studio's docs, "Parallel Requests": "By default, Max Concurrent
  Predictions is set to 4");
* ``useUnifiedKvCache``: the predictions share one KV cache, "saving memory"; off, "each prediction can utilize the full
  context length, at the cost of using more memory" (the SDK's field documentation): unified, ``contextLength`` cells
  shared; not, ``contextLength`` cells per prediction. Its default is not documented: posenc assumes on (llama-server's
  own with automatic slots);
* ``llamaKCacheQuantizationType`` / ``llamaVCacheQuantizationType``: f32, f16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1
  (the SDK's list; no bf16), off (f16) by default; a quantized V "requires Flash Attention";
* ``flashAttention``: on or off; unset, posenc assumes llama-server's ``auto``;
* ``evalBatchSize`` (``-b``) and ``physicalBatchSize`` (``-ub``, "clamped by the evaluation batch size"): 512 assumed
  for both (the batch LM Studio's loader shows); the physical batch sets a sliding layer's cells;
* ``contextLength``, posenc's ``ctx``: what each prediction can reach. No ``--swa-full`` setting is exposed (off).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from posenc_cli.engines.caches import llamacpp
from posenc_cli.engines.caches.model import Cost, EngineMemory, Lever, Setting, SettingValue

if TYPE_CHECKING:
    from posenc_cli.models.cache_layout import CacheLayout

ENGINE = "lmstudio"
VERSION = "LM Studio 0.4 (llama.cpp engine v2, llama-server; closed source)"
BASIS = ("modelled: LM Studio is closed source; llama.cpp's arithmetic (proven against llama.cpp's log) with LM "
         "Studio's documented load settings, the undocumented defaults assumed (said in each setting's help)")
#: LM Studio's K and V cache types (lmstudio-js llmLlamaCacheQuantizationTypes)
CACHE_TYPES = ("f16", "f32", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")

SETTINGS = (
    Setting("parallel", "maxParallelPredictions", 4, help="concurrent predictions (Max Concurrent Predictions)"),
    Setting("unified", "useUnifiedKvCache", True, "bool",
            help="the predictions share one KV cache (default assumed on: not documented)"),
    Setting("k_cache_type", "llamaKCacheQuantizationType", "f16", "str", CACHE_TYPES, help="K cache type"),
    Setting("v_cache_type", "llamaVCacheQuantizationType", "f16", "str", CACHE_TYPES,
            help="V cache type; a quantized V needs flashAttention"),
    Setting("flash_attention", "flashAttention", "auto", "str", ("auto", "on", "off"),
            help="flash attention (unset: llama-server's auto, assumed)"),
    Setting("eval_batch_size", "evalBatchSize", 512, help="-b (512 assumed)"),
    Setting("physical_batch_size", "physicalBatchSize", 512, help="-ub, at most evalBatchSize (512 assumed)"),
)


def lmstudio_params(ctx: int, settings: Mapping[str, SettingValue]) -> llamacpp.Params:
    """llama.cpp's context parameters for ``contextLength`` = ``ctx`` with LM Studio's settings."""
    slots, unified = int(settings["parallel"]), bool(settings["unified"])
    return llamacpp.Params(ctx if unified else ctx * slots, slots, unified, str(settings["k_cache_type"]),
                           str(settings["v_cache_type"]), str(settings["flash_attention"]), False,
                           int(settings["eval_batch_size"]), int(settings["physical_batch_size"]))


def cost(layout: CacheLayout, ctx: int, settings: Mapping[str, SettingValue]) -> Cost:
    """What LM Studio's llama.cpp engine allocates for ``contextLength`` = ``ctx`` (modelled)."""
    p = lmstudio_params(ctx, settings)
    shared = "shared by" if p.kv_unified else "for each of"
    notes = [f"contextLength {ctx}: {p.cells} cells {shared} the {p.n_seq_max} predictions (modelled: LM Studio is "
             "closed source)"]
    return llamacpp.cost_with(ENGINE, layout, ctx, settings, p, notes)


def levers(settings: Mapping[str, SettingValue]) -> list[Lever]:
    """q8_0 then q4_0 caches (with flash attention), one prediction at a time, a unified cache."""
    out = llamacpp.quantized_levers(settings, ("k_cache_type", "v_cache_type"), ("flash_attention", "flashAttention"),
                                    ("off",), "on")
    if int(settings["parallel"]) > 1:
        out.append(("maxParallelPredictions 1", {"parallel": 1}))
        if not settings["unified"]:
            out.append(("useUnifiedKvCache", {"unified": True}))
    return out


MEMORY = EngineMemory(ENGINE, VERSION, BASIS, SETTINGS, cost, levers)

"""Run vLLM's own KV cache spec builders and planner on CPU, for ``tests/engines/test_memory_vllm.py``.

A plain helper module for the tests (``from vllm_memory import ...``), on top of :mod:`vllm_harness`'s import of vLLM
(``pip install --no-deps vllm==0.34.0`` plus its listed pure-Python dependencies).

What runs is vLLM's code; what stands in for a GPU is said here:

* a real ``vllm.config.VllmConfig`` per setting (ModelConfig read from the config.json, CacheConfig,
  SchedulerConfig, ParallelConfig); the CPU platform's own changes are put back to what the CUDA path leaves
  (``CpuPlatform.check_and_update_config`` forces block 16/256, no hybrid KV cache manager, no async scheduling and
  a float32 SSM state), and the model's own ``VerifyAndUpdateConfig`` hooks for the CUDA path are run
  (``MambaModelConfig``: prefix caching sets ``mamba_cache_mode``; ``NemotronHForCausalLMConfig``,
  ``Qwen3_5ForConditionalGenerationConfig``: the SSM state's dtype);
* each layer is a real instance of vLLM's layer class (``Attention``, ``ChunkedLocalAttention``, ``MLAAttention``,
  ``MambaMixer2``, ``QwenGatedDeltaNetAttention``) made without its ``__init__`` (which builds weights and
  kernels): the attributes its ``get_kv_cache_spec`` reads are set as the model class sets them (kv heads per rank
  ``max(1, kv_heads // tp)``, head_dim, the layer's sliding window or chunk: cited per model in
  :func:`attention_layers`), and its ``kv_cache_torch_dtype`` by vLLM's own ``kv_cache_dtype_str_to_dtype``;
  a state layer's shapes and dtypes are its model class's ``get_mamba_state_shape_from_config`` /
  ``get_mamba_state_dtype_from_config`` (the same calculators its ``get_state_shape`` calls);
* the attention backend is the class the card assumed selects: ``FlashAttentionBackend`` (its kernel blocks, no
  packing), ``TritonAttentionBackend`` for the per-token-head dtypes (its ``customize_spec`` adds the scales);
  FlashInfer (fp8_e5m2) does not import without its package, so fp8_e5m2 runs with FlashAttention's class, which
  gives the same spec at block sizes up to 64; on Hopper the gated delta net exports prefill checkpoints
  (``_checkpoint_alignment`` = FLASHINFER_GDN_CHECKPOINT_ALIGNMENT, as its ``__init__`` sets it on FlashInfer);
* then, unchanged: ``Platform._align_hybrid_block_size`` (hybrids), the layers' ``get_kv_cache_spec``,
  ``resolve_kv_cache_layout``, ``get_kv_cache_groups``, ``_max_memory_usage_bytes_from_groups``,
  ``_pool_bytes_per_block_from_builder``, ``_estimate_max_model_len_from_groups``, ``get_kv_cache_configs`` and
  ``get_max_concurrency_for_kv_cache_config``.

Qwen3.5's model module does not import here (transformers 5.25's Qwen2-VL image processor needs torchvision), so its
text config runs as Qwen3NextForCausalLM, whose state calculators are the same calls (``qwen3_5.py`` and
``qwen3_next.py`` ``get_mamba_state_shape_from_config``); multimodal configs run as their text model.
"""

from __future__ import annotations

import copy
import functools
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from vllm_harness import _vllm

from posenc_cli.engines.installed import vllm as installed_vllm

#: multimodal architectures and the text model whose config is their ``text_config``
TEXT_MODEL = {"Gemma3ForConditionalGeneration": ("Gemma3ForCausalLM", "gemma3_text"),
              "Llama4ForConditionalGeneration": ("Llama4ForCausalLM", "llama4_text"),
              "Qwen3_5ForConditionalGeneration": ("Qwen3NextForCausalLM", "qwen3_next"),
              "Qwen3_5MoeForConditionalGeneration": ("Qwen3NextForCausalLM", "qwen3_next")}


@dataclass(frozen=True)
class Settings:
    """The vLLM settings a run uses (the command-line names in :mod:`posenc_cli.engines.caches.vllm`)."""

    block_size: int = 64
    kv_cache_dtype: str = "auto"
    tensor_parallel_size: int = 1
    max_num_batched_tokens: int = 8192
    async_scheduling: bool = True
    enable_prefix_caching: bool = True
    disable_hybrid_kv_cache_manager: bool = False
    mamba_ssm_cache_dtype: str = "auto"

    def posenc(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def text_only(cfg: dict[str, Any]) -> dict[str, Any]:
    """The config vLLM's text model reads: a multimodal config's ``text_config`` under its text architecture."""
    arch = (cfg.get("architectures") or [""])[0]
    if arch not in TEXT_MODEL:
        return cfg
    text = copy.deepcopy(cfg["text_config"])
    text["architectures"], text["model_type"] = [TEXT_MODEL[arch][0]], TEXT_MODEL[arch][1]
    text.setdefault("dtype", cfg.get("dtype", cfg.get("torch_dtype")))
    return text


#: the folders the ModelConfigs read (kept for the process: VllmConfig reads the model folder again)
_FOLDERS = tempfile.TemporaryDirectory(prefix="posenc-vllm-mem-")


@functools.lru_cache(maxsize=32)
def _model_config(cfg_json: str) -> Any:
    """vLLM's ModelConfig for a config.json (``dtype="auto"``: bfloat16 or float16 as the config says)."""
    v = _vllm()
    folder = tempfile.mkdtemp(dir=_FOLDERS.name)
    Path(folder, "config.json").write_text(cfg_json)  # json.dumps: Nemotron-H's time_step_limit holds Infinity
    with installed_vllm.quiet(), installed_vllm._env("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1"):
        return v.ModelConfig(model=folder, max_model_len=1024, skip_tokenizer_init=True, dtype="auto")


def vllm_config(cfg: dict[str, Any], s: Settings, ctx: int) -> Any:
    """A VllmConfig as ``vllm serve`` on the card assumed leaves it (see the module docstring)."""
    _vllm()  # sets VLLM_TARGET_DEVICE before vLLM is imported
    import vllm.config as c
    from vllm.model_executor.models.config import (
        MambaModelConfig,
        NemotronHForCausalLMConfig,
        Qwen3_5ForConditionalGenerationConfig,
    )

    mc = copy.copy(_model_config(json.dumps(text_only(cfg), sort_keys=True)))
    mc.max_model_len = ctx
    with installed_vllm.quiet():
        vc = c.VllmConfig(
            model_config=mc,
            cache_config=c.CacheConfig(block_size=s.block_size, cache_dtype=s.kv_cache_dtype,
                                       enable_prefix_caching=s.enable_prefix_caching),
            scheduler_config=c.SchedulerConfig(max_num_batched_tokens=s.max_num_batched_tokens, max_model_len=ctx,
                                               is_encoder_decoder=False),
            parallel_config=c.ParallelConfig(tensor_parallel_size=s.tensor_parallel_size))
    cache, sched = vc.cache_config, vc.scheduler_config
    cache.block_size, cache.mamba_ssm_cache_dtype = s.block_size, s.mamba_ssm_cache_dtype
    cache.mamba_cache_mode, cache.mamba_block_size, cache.mamba_page_size_padded = "none", None, None
    sched.async_scheduling = s.async_scheduling
    sched.disable_hybrid_kv_cache_manager = s.disable_hybrid_kv_cache_manager
    cache.enable_prefix_caching = s.enable_prefix_caching and mc.is_prefix_caching_supported
    if mc.is_hybrid or mc.is_attention_free:
        MambaModelConfig.verify_and_update_config(vc)
    if mc.architecture.startswith("NemotronH"):
        NemotronHForCausalLMConfig.verify_and_update_config(vc)
    if cfg.get("architectures", [""])[0].startswith("Qwen3_5"):
        Qwen3_5ForConditionalGenerationConfig.verify_and_update_config(vc)
    return vc


def _layer_types(text: Any, n: int) -> list[str]:
    """Per layer: attention, sliding, chunked, mla, gdn, mamba2 or none, as vLLM's model classes decide."""
    arch = text.architectures[0]
    if arch.startswith("NemotronH"):  # nemotron_h.py: hybrid_override_pattern, M mamba2, * attention
        return [{"M": "mamba2", "*": "attention"}.get(c, "none") for c in text.hybrid_override_pattern]
    if arch == "Qwen3NextForCausalLM":  # qwen3_next.py Qwen3NextDecoderLayer: config.layer_types
        return ["gdn" if t == "linear_attention" else "attention" for t in text.layer_types]
    if arch.startswith("Deepseek"):  # deepseek_v2.py DeepseekV2MLAAttention: every layer MLA
        return ["mla"] * n
    if arch == "GptOssForCausalLM":  # gpt_oss.py:175: sliding on even layers
        return ["sliding" if i % 2 == 0 else "attention" for i in range(n)]
    if arch == "Llama4ForCausalLM":  # llama4.py:251: chunked local attention where the layer has rope
        return ["chunked" if text.no_rope_layers[i] and text.attention_chunk_size else "attention" for i in range(n)]
    types = getattr(text, "layer_types", None)  # gemma3.py:153, llama.py:186: config.layer_types
    if types is None and getattr(text, "sliding_window", None):
        # EngineArgs.create_engine_config: CacheConfig.sliding_window = the model's when no layer_types (or all
        # sliding), and Attention falls back to it for every layer (arg_utils.py:2321, attention.py:281)
        return ["sliding"] * n
    return ["sliding" if types and types[i] == "sliding_attention" else "attention" for i in range(n)]


def _bare(cls: type, **attrs: Any) -> Any:
    """An instance of a vLLM layer class without running its ``__init__`` (weights, kernels): ``attrs`` set."""
    obj = cls.__new__(cls)
    torch.nn.Module.__init__(obj)
    for k, v in {"kv_sharing_target_layer_name": None, "is_draft_layer": False, **attrs}.items():
        object.__setattr__(obj, k, v)
    return obj


def _backend(kv_cache_dtype: str, mla: bool = False) -> type:
    """The attention backend the card assumed selects (MLA: FLASHMLA for fp8; FLASH_ATTN_MLA, which does not import
    here, stood in for by TRITON_MLA: both MLACommonBackend with kernel blocks of MultipleOf(16))."""
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
    from vllm.v1.attention.backends.mla.flashmla import FlashMLABackend
    from vllm.v1.attention.backends.mla.triton_mla import TritonMLABackend
    from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend

    if mla:
        return FlashMLABackend if kv_cache_dtype in ("fp8", "fp8_e4m3") else TritonMLABackend
    return TritonAttentionBackend if kv_cache_dtype.endswith("per_token_head") else FlashAttentionBackend


def attention_layers(vc: Any) -> dict[str, Any]:
    """The model's cache layers, as instances of vLLM's layer classes (see the module docstring)."""
    _vllm()  # VLLM_TARGET_DEVICE set before vLLM is imported
    from vllm.model_executor.layers.attention.attention import Attention
    from vllm.model_executor.layers.attention.chunked_local_attention import ChunkedLocalAttention
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention
    from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import QwenGatedDeltaNetAttention
    from vllm.model_executor.layers.mamba.mamba_mixer2 import MambaMixer2
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype
    from vllm.v1.attention.backend import AttentionType
    from vllm.v1.attention.backends.gdn_attn import FLASHINFER_GDN_CHECKPOINT_ALIGNMENT

    mc, tp = vc.model_config, vc.parallel_config.tensor_parallel_size
    text, kv_dtype = mc.hf_text_config, vc.cache_config.cache_dtype
    model_cls, _ = mc.registry.resolve_model_cls(mc.architectures, model_config=mc)
    torch_dtype = kv_cache_dtype_str_to_dtype(kv_dtype, mc)
    n = len(text.hybrid_override_pattern) if hasattr(text, "hybrid_override_pattern") else text.num_hidden_layers
    head = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    kv_heads = max(1, text.num_key_value_heads // tp)  # e.g. llama.py:156, gemma3.py:126, qwen3_next.py:315
    common = {"kv_cache_dtype": kv_dtype, "kv_cache_torch_dtype": torch_dtype, "attn_type": AttentionType.DECODER,
              "attn_backend": _backend(kv_dtype), "num_kv_heads": kv_heads, "head_size": head, "head_size_v": head}
    state = {"get_state_shape": lambda: model_cls.get_mamba_state_shape_from_config(vc),
             "get_state_dtype": lambda: model_cls.get_mamba_state_dtype_from_config(vc)}
    layers: dict[str, Any] = {}
    for i, kind in enumerate(_layer_types(text, n)):
        name = f"model.layers.{i}"
        if kind in ("attention", "sliding"):
            window = text.sliding_window if kind == "sliding" else None
            layers[f"{name}.self_attn.attn"] = _bare(Attention, sliding_window=window, **common)
        elif kind == "chunked":
            layers[f"{name}.self_attn.attn"] = _bare(ChunkedLocalAttention, sliding_window=None,
                                                     attention_chunk_size=text.attention_chunk_size, **common)
        elif kind == "mla":  # deepseek_v2.py: MLAAttention(head_size=kv_lora_rank + qk_rope_head_dim)
            layers[f"{name}.self_attn.attn"] = _bare(
                MLAAttention, kv_cache_dtype=kv_dtype, head_size=text.kv_lora_rank + text.qk_rope_head_dim,
                sliding_window=None, topk_buffer_width=None, indexer=None, non_causal_multi_token_decode=False,
                attn_backend=_backend(kv_dtype, mla=True))
        elif kind == "gdn":
            align = FLASHINFER_GDN_CHECKPOINT_ALIGNMENT if vc.cache_config.mamba_cache_mode == "align" else None
            layers[f"{name}.linear_attn"] = _bare(QwenGatedDeltaNetAttention, vllm_config=vc,
                                                  _checkpoint_alignment=align, **state)
        elif kind == "mamba2":
            layers[f"{name}.mixer"] = _bare(MambaMixer2, **state)
    return layers


@dataclass(frozen=True)
class VllmPlan:
    """What vLLM's planner gives for one model, settings and context."""

    block_size: int  # the attention block after the hybrid alignment
    block_bytes: int  # _pool_bytes_per_block_from_builder
    request_bytes: int  # _max_memory_usage_bytes_from_groups: one request of the context
    groups: tuple[tuple[str, int, int, int], ...]  # (spec class, layers, block_size, page bytes) per group
    vc: Any
    builder: Any
    kv_groups: Any
    specs: Any


def vllm_plan(cfg: dict[str, Any], s: Settings, ctx: int) -> VllmPlan:
    """Run vLLM's alignment, spec builders, layout resolution and grouping for ``cfg`` at ``ctx`` tokens."""
    _vllm()  # VLLM_TARGET_DEVICE set before vLLM is imported
    import vllm.v1.core.kv_cache_planning as planning
    import vllm.v1.worker.gpu.attn_utils as worker_specs
    from vllm.config import set_current_vllm_config
    from vllm.platforms.interface import Platform
    from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder

    vc = vllm_config(cfg, s, ctx)
    layers = attention_layers(vc)
    vc.compilation_config.static_forward_context.update(layers)
    with set_current_vllm_config(vc), installed_vllm.quiet():
        if vc.model_config.is_hybrid:
            Platform._align_hybrid_block_size(vc, _backend(s.kv_cache_dtype, vc.model_config.use_mla))
        specs = worker_specs.get_kv_cache_spec(vc)  # each layer's get_kv_cache_spec, customize_attention_spec
        backends = {layer.get_attn_backend() for layer in layers.values() if hasattr(layer, "attn_backend")}
        supported = [x.name for x in get_supported_kv_cache_layouts(b for b in backends if b is not None)]
        vc.cache_config.kv_cache_layout = resolve_kv_cache_layout(vc, [supported], specs.values()).name
        builder = get_kv_cache_config_builder(vc)
        groups = planning.get_kv_cache_groups_from_builder(builder, vc, dict(specs))
        need = planning._max_memory_usage_bytes_from_groups(builder, vc, groups)
        per_block = planning._pool_bytes_per_block_from_builder(builder, vc, groups)
    shape = tuple((type(g.kv_cache_spec).__name__, len(g.layer_names), g.kv_cache_spec.block_size,
                   g.kv_cache_spec.page_size_bytes) for g in groups)
    return VllmPlan(vc.cache_config.block_size, per_block, need, shape, vc, builder, groups, specs)


def vllm_longest(p: VllmPlan, memory: int, limit: int) -> int:
    """``--max-model-len auto``'s answer for a pool of ``memory`` bytes (the null block reserved, as
    ``get_kv_cache_configs`` does), searched up to ``limit`` tokens: ``_estimate_max_model_len_from_groups``."""
    _vllm()  # VLLM_TARGET_DEVICE set before vLLM is imported
    import vllm.v1.core.kv_cache_planning as planning
    from vllm.config import set_current_vllm_config

    p.vc.model_config.max_model_len = limit
    with set_current_vllm_config(p.vc), installed_vllm.quiet():
        return int(planning._estimate_max_model_len_from_groups(p.builder, p.vc, p.kv_groups, memory - p.block_bytes))


def vllm_serves(p: VllmPlan, memory: int, ctx: int) -> tuple[bool, int, float]:
    """(whether ``get_kv_cache_configs`` accepts a pool of ``memory`` bytes at ``ctx``, its blocks, and the
    concurrency it logs: ``get_max_concurrency_for_kv_cache_config``)."""
    _vllm()  # VLLM_TARGET_DEVICE set before vLLM is imported
    import vllm.v1.core.kv_cache_planning as planning
    from vllm.config import set_current_vllm_config
    from vllm.v1.core.kv_cache_utils import get_max_concurrency_for_kv_cache_config

    p.vc.model_config.max_model_len = ctx
    with set_current_vllm_config(p.vc), installed_vllm.quiet():
        try:
            configs = planning.get_kv_cache_configs(p.vc, [dict(p.specs)], [memory], p.kv_groups)
        except ValueError:
            return False, 0, 0.0
        return True, configs[0].num_blocks, get_max_concurrency_for_kv_cache_config(p.vc, configs[0])

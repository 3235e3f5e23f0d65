"""SGLang's own pool-sizing functions, run from its source on CPU, for ``tests/engines/test_memory_sglang.py``.

A plain helper module for the tests (``from sglang_source import ...``). SGLang 0.5.23 does not import without its
GPU stack (triton, orjson, its kernels), so the functions are taken from the installed package's source files
(``pip install --no-deps sglang==0.5.23``; only the files are read, nothing of SGLang is imported): each function or
class is cut out of its file with :mod:`ast` and run unchanged (compiled with postponed annotations, as its files
are), its module-level names supplied here. What these
stand-ins are is said where they are made; none of them computes a size.

Run as they are: ``MemoryPoolConfig``, ``DefaultPoolConfigurator._compute_cell_size`` and ``calculate_pool_sizes``,
``HybridSWAPoolConfigurator.__init__`` and its sizing methods, ``MemoryPoolConfigurator.validate_swa_pool_size``,
``calculate_mla_kv_cache_dim``, ``KVCacheConfigurator._handle_max_mamba_cache``, ``_calculate_mamba_ratio`` and
``resolve_max_num_reqs``, ``Mamba2StateShape.create``, ``Mamba2CacheParams.mamba_cache_per_req``,
``mamba2_state_dtype``, ``extra_groups_for_head_shards``, ``divide``, ``ModelConfig.get_num_kv_heads``,
``_get_and_verify_dtype``, ``is_hybrid_swa_model`` and ``get_hybrid_layer_ids``.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.metadata
import importlib.util
import logging
import sys
import textwrap
import types
import typing
from abc import ABC
from pathlib import Path
from typing import Any

import numpy as np
import torch

VERSION = "0.5.23"


def sglang_root() -> Path | None:
    """The installed SGLang's package folder when it is the version modelled (found without importing it)."""
    try:
        if importlib.metadata.version("sglang") != VERSION:
            return None
        spec = importlib.util.find_spec("sglang")
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@functools.cache
def _tree(relpath: str) -> tuple[str, ast.Module]:
    root = sglang_root()
    assert root is not None
    text = (root / relpath).read_text(encoding="utf-8")
    return text, ast.parse(text)


def _node(relpath: str, dotted: str) -> ast.AST:
    text, tree = _tree(relpath)
    body: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    for part in dotted.split("."):
        node = next((n for n in body if getattr(n, "name", None) == part
                     or (isinstance(n, ast.Assign) and any(getattr(t, "id", None) == part for t in n.targets))),
                    None)
        if node is None:
            raise LookupError(f"{relpath}: no {dotted}")
        body = getattr(node, "body", [])
    assert node is not None
    return node


@functools.cache
def _code(relpath: str, dotted: str) -> types.CodeType:
    text, _ = _tree(relpath)
    node = _node(relpath, dotted)
    lines = text.splitlines(keepends=True)
    source = textwrap.dedent("".join(lines[node.lineno - 1:node.end_lineno]))  # type: ignore[attr-defined]
    decorators = [ast.get_source_segment(text, d) for d in getattr(node, "decorator_list", [])]
    keep = [d for d in decorators if d and d.startswith("dataclass")]  # a class's dataclass decorator stays
    return compile("".join(f"@{d}\n" for d in keep) + source, f"sglang/{relpath}:{dotted}", "exec")


def load(relpath: str, dotted: str, scope: dict[str, Any]) -> Any:
    """``dotted`` (a function, ``Class.method``, a class or a module-level name) from ``sglang/<relpath>``, defined in
    ``scope`` (its module-level names); returns the object (a method as a plain function)."""
    exec(_code(relpath, dotted), scope)  # noqa: S102 - SGLang's own source
    return scope[dotted.split(".")[-1]]


def bind(obj: Any, **functions: Any) -> Any:
    """Set plain functions as ``obj``'s methods."""
    for name, fn in functions.items():
        setattr(obj, name, types.MethodType(fn, obj))
    return obj


class _Env:
    """An ``envs`` entry at its default (``sglang/srt/environ.py``)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self) -> Any:
        return self.value


ENVS = types.SimpleNamespace(SGLANG_NPU_ENABLE_SPARSE_KV_OFFLOAD=_Env(False), SGLANG_MAMBA_CONV_DTYPE=_Env("bfloat16"),
                             SGLANG_MAMBA_SSM_DTYPE=_Env(None), SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=_Env(False))
BASE_SCOPE: dict[str, Any] = {
    "torch": torch, "np": np, "logger": logging.getLogger("sglang-source"), "logging": logging, "envs": ENVS,
    "dataclass": dataclasses.dataclass, "field": dataclasses.field, "ABC": ABC, "Optional": typing.Optional,
    "List": list, "Union": typing.Union, "Any": typing.Any, "PretrainedConfig": object,
    "TYPE_CHECKING": False,
}


def scope(**names: Any) -> dict[str, Any]:
    out = dict(BASE_SCOPE)
    out.update(names)
    return out


@functools.lru_cache(maxsize=1)
def utils() -> types.SimpleNamespace:
    """The small pure helpers other functions call, from their files."""
    s = scope()
    load("srt/distributed/utils.py", "ensure_divisibility", s)
    divide = load("srt/distributed/utils.py", "divide", s)
    ceil_div = load("srt/utils/common.py", "ceil_div", s)
    s["ceil_div"] = ceil_div
    ceil_align = load("srt/utils/common.py", "ceil_align", s)
    return types.SimpleNamespace(divide=divide, ceil_div=ceil_div, ceil_align=ceil_align)


@functools.lru_cache(maxsize=1)
def mamba_utils() -> types.SimpleNamespace:
    """``configs/mamba_utils.py``: the state shapes, dtypes and per-request bytes."""
    s = scope(divide=utils().divide)
    for name in ("extra_groups_for_head_shards", "Mamba2StateDType", "mamba2_state_dtype", "BaseLinearStateParams",
                 "Mamba2StateShape", "Mamba2CacheParams"):
        load("srt/configs/mamba_utils.py", name, s)
    return types.SimpleNamespace(**{k: s[k] for k in ("Mamba2StateShape", "Mamba2CacheParams", "mamba2_state_dtype")})


@functools.lru_cache(maxsize=1)
def model_config() -> types.SimpleNamespace:
    """``configs/model_config.py``: dtype, KV heads per rank, which architectures are hybrid SWA and their layers."""
    s = scope()
    for name in ("MIMO_V2_MODEL_ARCHS", "SWA_SINK_ARCHS", "_STR_DTYPE_TO_TORCH_DTYPE"):
        load("srt/configs/model_config.py", name, s)
    return types.SimpleNamespace(
        get_and_verify_dtype=load("srt/configs/model_config.py", "_get_and_verify_dtype", s),
        is_hybrid_swa_model=load("srt/configs/model_config.py", "is_hybrid_swa_model", s),
        get_hybrid_layer_ids=load("srt/configs/model_config.py", "get_hybrid_layer_ids", s),
        get_num_kv_heads=load("srt/configs/model_config.py", "ModelConfig.get_num_kv_heads", s))


def stub_modules(names: dict[str, dict[str, Any]]) -> dict[str, types.ModuleType]:
    """Modules for the ``from sglang... import`` statements inside the functions run (parents included)."""
    out: dict[str, types.ModuleType] = {}
    for dotted, attrs in names.items():
        parts = dotted.split(".")
        for i in range(1, len(parts) + 1):
            out.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
        out[dotted].__dict__.update(attrs)
    return out


def with_modules(modules: dict[str, types.ModuleType]) -> Any:
    """A context putting ``modules`` in ``sys.modules`` while a function runs."""
    import contextlib
    import unittest.mock

    return contextlib.ExitStack() if not modules else unittest.mock.patch.dict(sys.modules, modules)


NS = types.SimpleNamespace
POOL = "srt/model_executor/pool_configurator.py"
KVC = "srt/mem_cache/kv_cache_configurator.py"


def runtime(tp: int, page: int, swa_ratio: float = 0.8, mamba_ratio: float = 0.9, radix: bool = True,
            extra_buffer: bool = False) -> dict[str, Any]:
    """The ``runtime_context`` accessors (``get_parallel()``, ``get_schedule()``, ...) as ``sglang serve`` on one
    H100 leaves them: no DP attention, no DCP, no pipeline, no speculative decoding, no unified memory, the overlap
    schedule on; ``get_context().override`` writes the schedule as SGLang's does."""
    schedule = NS(swa_full_tokens_ratio=swa_ratio, mamba_full_memory_ratio=mamba_ratio, max_mamba_cache_size=None,
                  max_running_requests=None, disable_overlap_schedule=False, page_size=page, max_total_tokens=None)
    memory = NS(enable_unified_memory=False, enable_hisparse=False, disable_radix_cache=not radix,
                enable_unified_cache_external_linker=False, enable_hierarchical_cache=False)

    def override(_name: str, **kw: Any) -> None:
        for k, v in kw.items():
            setattr(schedule, k, v)

    return {"get_parallel": lambda: NS(attn_tp_size=tp, attn_dcp_size=1, attn_cp_size=1, pp_size=1),
            "get_schedule": lambda: schedule, "get_memory": lambda: memory,
            "get_spec": lambda: NS(speculative_num_draft_tokens=None, speculative_algorithm=None),
            "get_exec": lambda: NS(mamba=NS(enable_linear_replayssm_spec=False, enable_mamba_extra_buffer=extra_buffer,
                                            enable_mamba_extra_buffer_lazy=False),
                                   kernel=NS(dsa_prefill_backend=None, dsa_decode_backend=None)),
            "get_context": lambda: NS(override=override), "schedule": schedule}


@functools.lru_cache(maxsize=1)
def dsa() -> types.SimpleNamespace:
    """``configs/model_config.py``'s DeepSeek Sparse Attention predicates and ``DSATokenToKVPool``'s constants."""
    s = scope()
    for name in ("_hf_arch", "_hf_attr", "is_deepseek_v4", "get_dsa_index_head_dim", "get_dsa_index_kpool",
                 "dsa_layer_skips_topk"):
        load("srt/configs/model_config.py", name, s)
    is_dsa = load("srt/configs/model_config.py", "is_deepseek_dsa", s)
    pool = scope()
    for name in ("quant_block_size", "index_k_with_scale_buffer_dtype", "rope_storage_dtype"):
        load("srt/mem_cache/memory_pool.py", f"DSATokenToKVPool.{name}", pool)
    return types.SimpleNamespace(is_deepseek_dsa=is_dsa, get_dsa_index_head_dim=s["get_dsa_index_head_dim"],
                                 get_dsa_index_kpool=s["get_dsa_index_kpool"],
                                 dsa_layer_skips_topk=s["dsa_layer_skips_topk"],
                                 DSATokenToKVPool=types.SimpleNamespace(**{k: pool[k] for k in (
                                     "quant_block_size", "index_k_with_scale_buffer_dtype", "rope_storage_dtype")}))


def _model_scope(rt: dict[str, Any]) -> dict[str, Any]:
    u, d = utils(), dsa()
    s = scope(ceil_div=u.ceil_div, ceil_align=u.ceil_align, is_deepseek_dsa=d.is_deepseek_dsa,
              get_dsa_index_head_dim=d.get_dsa_index_head_dim, get_dsa_index_kpool=d.get_dsa_index_kpool,
              dsa_layer_skips_topk=d.dsa_layer_skips_topk, DSATokenToKVPool=d.DSATokenToKVPool, _is_npu=False,
              _is_hip=False, is_minimax_sparse=lambda _c: False, is_float4_e2m1fn_x2=lambda _d: False,
              AttentionArch=NS(MLA="MLA", MHA="MHA"), _dflash_draft_cell_size=lambda _k: 0, **rt)
    load(POOL, "MemoryPoolConfig", s)
    load(POOL, "_get_dsa_cache_layer_ids", s)
    return s


def cell_size(kvc: Any, num_layers: int, rt: dict[str, Any]) -> int:
    """``DefaultPoolConfigurator._compute_cell_size`` (MHA, MLA, DSA's indexer with ``layers/cp/utils.py``'s layer
    split, off by default; ``_compute_qsa_cell_size``, for QSA models only, answers 0). DSA's kernel backends are the
    defaults (none named: not TRT-LLM, not TileLang), no PD disaggregation."""
    s = _model_scope(rt)
    kvc_scope = scope(is_deepseek_dsa=dsa().is_deepseek_dsa, DSATokenToKVPool=dsa().DSATokenToKVPool, _is_npu=False,
                      _is_hip=False, get_disagg=lambda: NS(disaggregation_mode="null"), **rt)
    mla_dim = load(KVC, "calculate_mla_kv_cache_dim", kvc_scope)
    elide = load(KVC, "_should_elide_dsa_index_k", kvc_scope)
    fn = load(POOL, "DefaultPoolConfigurator._compute_cell_size", s)
    cp = scope(**rt, is_deepseek_dsa=dsa().is_deepseek_dsa)  # enable_dsa_cache_layer_split off: the default
    cp["get_parallel"] = lambda: NS(**vars(rt["get_parallel"]()), enable_dsa_cache_layer_split=False)
    for name in ("is_glm_dsa_cache_layer_split_enabled", "get_glm_dsa_layer_split_effective_num_layers",
                 "get_glm_dsa_cp_layer_shard_info", "get_layer_shard_range"):
        load("srt/layers/cp/utils.py", name, cp)
    modules = stub_modules({
        "sglang.srt.configs.model_config": {"is_deepseek_dsa": dsa().is_deepseek_dsa},
        "sglang.srt.layers.cp.utils": {k: cp[k] for k in ("get_glm_dsa_layer_split_effective_num_layers",
                                                           "get_glm_dsa_cp_layer_shard_info", "get_layer_shard_range")},
        "sglang.srt.mem_cache.kv_cache_configurator": {"calculate_mla_kv_cache_dim": mla_dim,
                                                        "_should_elide_dsa_index_k": elide}})
    obj = bind(NS(kv_cache_dtype_str="auto", _compute_qsa_cell_size=lambda **_k: 0),
               _compute_dsa_indexer_cell_size=load(POOL, "DefaultPoolConfigurator._compute_dsa_indexer_cell_size", s))
    with with_modules(modules):
        return int(fn(obj, kvc, num_layers))


def default_pool(cell: int, rt: dict[str, Any]) -> Any:
    """A ``DefaultPoolConfigurator`` of that cell (no KV-shard scratch: ``_fixed_overhead_bytes`` 0)."""
    s = _model_scope(rt)
    obj = NS(_fixed_overhead_bytes=0, _cell_size=cell, _zero_kv_max_tokens=0)
    return bind(obj, calculate_pool_sizes=load(POOL, "DefaultPoolConfigurator.calculate_pool_sizes", s))


def swa_pool(kvc: Any, rt: dict[str, Any]) -> Any:
    """A ``HybridSWAPoolConfigurator`` made by its own ``__init__`` (no draft model, no fused draft entry)."""
    s = _model_scope(rt)
    obj = NS()
    obj.validate_swa_pool_size = load(POOL, "MemoryPoolConfigurator.validate_swa_pool_size", s)
    for name in ("_full_cell_bytes", "_swa_cell_bytes", "_recompute_cell_size", "_draft_pool_bytes_per_token",
                 "_unified_full_bytes_per_token", "_unified_pool_bytes", "_solve_pool_sizes", "_make_pool_config",
                 "calculate_pool_sizes"):
        bind(obj, **{name: load(POOL, f"HybridSWAPoolConfigurator.{name}", s)})
    init = load(POOL, "HybridSWAPoolConfigurator.__init__", s)
    init(obj, kvc)
    return obj


def mamba_configurator(kvc: Any, rt: dict[str, Any]) -> Any:
    """``KVCacheConfigurator``'s state-pool split and request count, bound to ``kvc``."""
    s = scope(**rt, _pd_prefill_skips_mamba_spec_state=lambda: False)
    for name in ("MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO", "MAMBA_CACHE_BASE_RATIO_DROP_ON_SKIP",
                 "MAMBA_CACHE_V2_ADDITIONAL_RATIO_NO_BUFFER"):
        load(KVC, name, s)
    s["get_mamba_tracking_slots"] = load("srt/mem_cache/allocation_sizing.py", "get_mamba_tracking_slots", scope())
    for name in ("_handle_max_mamba_cache", "_calculate_mamba_ratio", "resolve_max_num_reqs"):
        bind(kvc, **{name: load(KVC, f"KVCacheConfigurator.{name}", s)})
    return kvc

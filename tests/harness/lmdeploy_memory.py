"""LMDeploy 0.18.0's PyTorch-engine cache sizing, run from the installed wheel on this CPU.

What runs is lmdeploy's own code: the config builders (``lmdeploy/pytorch/configurations``, through
``ModelConfig.from_hf_config``), ``ExecutorBase._adjust_block_size``, ``build_block_cache_plan`` and its
``logical_block_nbytes`` (the block pool laid out on torch's ``meta`` device), ``ExecutorBase._get_state_cache_mem``
and ``ExecutorBase._get_num_gpu_blocks``. lmdeploy goes in without its dependencies, so the package ``__init__`` files
that import its serving stack (``mmengine``, the pipeline) are skipped: the packages are registered as plain
namespaces over the installed folders, and the modules themselves are imported unchanged. Three probes of the CUDA
card are answered for a card posenc assumes (no GPU here): bfloat16 supported (Ampere or newer), FlashMLA absent (a
card below Hopper), ``get_backend()`` the CUDA backend (its cache layout is the default one).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

#: the packages whose __init__ would import lmdeploy's serving stack
_NAMESPACES = ("lmdeploy", "lmdeploy.pytorch.engine", "lmdeploy.pytorch.engine.cache_engine",
               "lmdeploy.pytorch.engine.executor")


def _root() -> Path:
    return Path(str(metadata.distribution("lmdeploy").locate_file("lmdeploy")))


def _register() -> None:
    root = _root()
    for name in _NAMESPACES:
        if name in sys.modules:
            continue
        module = types.ModuleType(name)
        module.__path__ = [str(root.joinpath(*name.split(".")[1:]))]
        sys.modules[name] = module
    from lmdeploy.pytorch.engine.cache_engine.state import StateCacheEngine

    # what the skipped cache_engine/__init__.py exports and ExecutorBase._get_state_cache_mem imports from it
    sys.modules["lmdeploy.pytorch.engine.cache_engine"].StateCacheEngine = StateCacheEngine  # type: ignore[attr-defined]


def available() -> bool:
    try:
        if metadata.version("lmdeploy") != "0.18.0":
            return False
        _register()
        import lmdeploy.pytorch.engine.cache_engine.plan  # noqa: F401
        import lmdeploy.pytorch.engine.executor.base  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means the code cannot run here
        return False
    return True


@contextlib.contextmanager
def _assumed_card() -> Iterator[None]:
    import lmdeploy.pytorch.config as config
    import lmdeploy.pytorch.configurations.deepseek_v2 as deepseek_v2
    import lmdeploy.pytorch.configurations.qwen3_5 as qwen3_5

    with mock.patch.object(config, "is_bf16_supported", lambda *a, **k: True), \
            mock.patch.object(qwen3_5, "is_bf16_supported", lambda *a, **k: True), \
            mock.patch.object(deepseek_v2, "flash_mla_available", lambda: False):
        yield


def hf_config(cfg: dict[str, Any]) -> Any:
    """The transformers config object lmdeploy builds from ``cfg`` (``AutoConfig``; lmdeploy reads a folder's
    config.json with ``AutoConfig.from_pretrained``, which builds the same object)."""
    import copy
    import warnings

    from transformers import AutoConfig

    served = copy.deepcopy({k: v for k, v in cfg.items() if k != "quantization_config"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoConfig.for_model(**served)


def pytorch_cache(cfg: dict[str, Any], *, tp: int = 1, quant_policy: int = 0, block_size: int = 64,
                  max_batch_size: int = 128) -> SimpleNamespace:
    """lmdeploy's own sizing for ``cfg``: ``block_size`` (after ``_adjust_block_size``), ``block_nbytes`` (one
    logical block, every layer), ``state_nbytes`` (every state slot), ``num_layers`` (the layers with a KV cache)
    and ``min_blocks(available)`` (``_get_num_gpu_blocks``)."""
    _register()
    from lmdeploy.messages import QuantPolicy
    from lmdeploy.pytorch.config import CacheConfig, DistConfig, ModelConfig
    from lmdeploy.pytorch.engine.cache_engine.plan import build_block_cache_plan
    from lmdeploy.pytorch.engine.executor.base import ExecutorBase

    hf = hf_config(cfg)
    if "full_attention_interval" in cfg and not hasattr(hf, "full_attention_interval"):
        # Qwen3-Next: transformers 5 derives layer_types from it and drops it, lmdeploy's builder reads it (with
        # transformers 5.25 lmdeploy 0.18.0 raises AttributeError here; with 4.57 the attribute is kept)
        hf.full_attention_interval = cfg["full_attention_interval"]
    with _assumed_card():
        model = ModelConfig.from_hf_config(hf, dist_config=DistConfig(tp=tp))
        cache = CacheConfig(max_batches=max_batch_size, block_size=block_size, num_cpu_blocks=0, num_gpu_blocks=0,
                            quant_policy=QuantPolicy(quant_policy), num_reserved_gpu_blocks=1)
        executor = SimpleNamespace(model_config=model, cache_config=cache)
        ExecutorBase._adjust_block_size(executor)  # type: ignore[arg-type]
        cache.states_shapes = model.states_shapes
        plan = build_block_cache_plan(model, cache, tp)
        state = ExecutorBase._get_state_cache_mem(executor)  # type: ignore[arg-type]
    return SimpleNamespace(block_size=cache.block_size, block_nbytes=plan.logical_block_nbytes, state_nbytes=state,
                           num_layers=model.num_layers, num_state_slots=cache.num_state_caches,
                           num_gpu_blocks=ExecutorBase._get_num_gpu_blocks)


def module_map() -> dict[str, Any]:
    """The installed PyTorch engine's MODULE_MAP (architecture -> model class path)."""
    _register()
    from lmdeploy.pytorch.models.module_map import MODULE_MAP

    return dict(MODULE_MAP)


def turbomind_archs() -> tuple[str, ...]:
    from posenc_cli.engines.installed import lmdeploy as installed

    return installed._supported_archs()


def max_session_len(num_gpu_blocks: int, block_size: int, window_size: int = -1,
                    session_len: int | None = None) -> int:
    """``Engine._get_max_session_len`` of the installed ``lmdeploy/pytorch/engine/engine.py`` (compiled from its
    source alone: importing the module would load the serving stack) for a pool of ``num_gpu_blocks`` blocks, one
    reserved as ``ConfigBuilder.build_cache_config`` reserves it."""
    this = SimpleNamespace(
        scheduler_config=SimpleNamespace(max_session_len=session_len),
        cache_config=SimpleNamespace(num_gpu_blocks=num_gpu_blocks, num_reserved_gpu_blocks=1,
                                     block_size=block_size, window_size=window_size))
    return int(_engine_method("_get_max_session_len")(this))


@functools.cache
def _engine_method(name: str) -> Any:
    import ast

    path = _root() / "pytorch" / "engine" / "engine.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    engine = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Engine")
    method = next(n for n in engine.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace: dict[str, Any] = {}
    exec(compile(ast.Module(body=[method], type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    return namespace[name]


@functools.cache
def runtime_min_blocks() -> int:
    """The fewest blocks ``ExecutorBase._get_runtime_size`` accepts before it shrinks the prefill budget: found by
    running it with a budget that leaves exactly that many blocks and one fewer."""
    _register()
    from lmdeploy.pytorch.engine.executor.base import ExecutorBase

    def accepted(blocks: int) -> bool:
        this = SimpleNamespace(cache_config=SimpleNamespace(cache_max_entry_count=1.0, max_prefill_token_num=8192,
                                                            max_batches=1),
                               model_config=SimpleNamespace(mla_index_topk=None))
        this._get_rank_cache_block_sizes = ExecutorBase._get_rank_cache_block_sizes
        this._get_min_num_gpu_blocks = ExecutorBase._get_min_num_gpu_blocks
        this._get_dsa_score_workspace_size = lambda: ExecutorBase._get_dsa_score_workspace_size(this)
        runtime = (8192 + 2) * 10 * 2
        sizes = [SimpleNamespace(total=1)]
        _, prefill = ExecutorBase._get_runtime_size(this, [runtime + blocks], sizes, 10)  # type: ignore[arg-type]
        return prefill == 8192

    return next(b for b in range(3, 1000) if accepted(b))

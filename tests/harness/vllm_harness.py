"""Run the real vLLM (and SGLang) rotary-embedding code on CPU, to show what those engines compute for a rope config.

A plain helper module for the tests, imported as ``from vllm_harness import ...`` (like ``clihelpers``).

vLLM (``pip install --no-deps vllm==VERSION``, :data:`posenc_cli.engines.vllm.VERSION`, plus the small dependencies in
:data:`VLLM_EXTRA_DEPS` and :data:`VLLM_EXTRA_DEPS_NO_DEPS`; no CUDA torch, no compiled vLLM op is loaded):

* :func:`vllm_rope` builds the rotary embedding through ``vllm.model_executor.layers.rotary_embedding.get_rope``
  with the arguments vLLM's own model code passes (``LlamaAttention._init_rotary_emb``, ``Qwen2Attention``,
  ``GptOssAttention``, ``DeepseekV2MLAAttention``) and returns its cos/sin cache (``cos_sin_cache`` is
  ``(positions, rotary_dim)``: cos half, then sin half) plus what else the engine applies (mscale, softmax scale).
* :func:`vllm_apply_rope` rotates q/k at given positions with the module's ``forward_native`` (pure torch).
* :func:`vllm_config_after_overrides` builds a real ``vllm.config.ModelConfig`` from a config.json in a temporary
  directory: vLLM's own ``--hf-overrides`` merge, rope patching and ``_get_and_verify_max_len`` run unchanged.
* :func:`vllm_rope_from_hf_config` does both: the ModelConfig, then ``get_rope`` with what the model reads from
  the resulting HF config.

Remote-code families and dual chunk attention (``posenc_cli/models/remote_code.py``): :func:`vllm_family_rope` builds
the
rope of ChatGLM, InternLM2, MiniCPM and InternVL chat with the ``get_rope`` arguments their vLLM model classes pass
(:func:`vllm_family_call`; remote-code config classes are stood in for by :func:`remote_config`), and
:func:`vllm_dual_chunk_rope` builds Qwen2's ``DualChunkRotaryEmbedding`` on CPU; :func:`capture_inv_freq` records
the inverse frequencies vLLM's classes compute.

SGLang (``pip install --no-deps sglang==VERSION``, :data:`posenc_cli.engines.sglang.VERSION`): :func:`sglang_rope` runs
``sglang.srt.layers.rotary_embedding`` in a subprocess, because SGLang's import chain needs the real ``triton`` package
(about 1 GB; a fake module in ``sys.modules`` breaks ``torch._dynamo``) and IPython, and patches transformers on import.
Point ``POSENC_SGLANG_PYTHONPATH`` at a directory holding them (``pip install --no-deps --target DIR triton==3.9.0`` and
``pip install --target DIR ipython``); without it, or without sglang, :func:`sglang_available` is False.

Process-wide effects of importing vLLM through :func:`vllm_available`: ``VLLM_TARGET_DEVICE`` is set to ``cpu``
unless already set (it selects ``CpuPlatform``), and vLLM's architecture inspection writes its cache under
``VLLM_CACHE_ROOT`` (default ``~/.cache/vllm/modelinfos``). Python warnings raised inside vLLM are silenced here,
since the test suite turns warnings into errors. See /tmp/notes/vllm.md for every detail and file:line reference.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import tempfile
import types
import unittest.mock
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from posenc_cli.engines import sglang as sglang_engine
from posenc_cli.engines import vllm as vllm_engine
from posenc_cli.engines.installed import vllm as installed_vllm

VLLM_VERSION = vllm_engine.VERSION  # one place: the engine module (a bump there reruns every proof here)
SGLANG_VERSION = sglang_engine.VERSION

#: What ``vllm.model_executor.layers.rotary_embedding`` and ``vllm.config.ModelConfig`` need on top of this
#: project's venv (found by importing until nothing was missing), versions as vLLM 0.33.0 and 0.34.0 pin them:
#: ``pip install`` these ...
VLLM_EXTRA_DEPS = (
    "psutil", "pyzmq", "pydantic>=2.12", "cbor2", "aiohttp>=3.14.4", "openai>=2.25.0", "pybase64", "cachetools",
    "msgspec", "cloudpickle", "uvloop", "py-cpuinfo", "prometheus_client", "fastapi>=0.133.0,<0.137.0",
    "partial-json-parser", "einops", "loguru",
)
#: ... and these with ``--no-deps`` (xgrammar and compressed-tensors would pull torch and triton). .ci/run installs
#: both lists from here.
VLLM_EXTRA_DEPS_NO_DEPS = ("xgrammar==0.2.8", "apache-tvm-ffi==0.1.11", "llguidance>=1.7.0,<1.8.0",
                           "oss-harmony==0.0.11", "compressed-tensors")

# vLLM's config path and rotary classes on CPU are posenc's own module (posenc check --installed runs them too): the
# harness runs the same code
DEEPSEEK_ARCHS, GPT_OSS_ARCHS = installed_vllm.DEEPSEEK_ARCHS, installed_vllm.GPT_OSS_ARCHS
_quiet, _vllm = installed_vllm.quiet, installed_vllm.load
_model_rope_call, _build_vllm_rope = installed_vllm.model_rope_call, installed_vllm.build_rope
_split, _effective_inv_freq = installed_vllm.split, installed_vllm.effective_inv_freq
_describe = installed_vllm.describe_rope
_error_message, vllm_model_config = installed_vllm.error_message, installed_vllm.model_config


def _model_geometry(hf_text_config: Any, arch: str) -> tuple[int, int, int]:
    """(head_dim, rotary_dim, max_position) as the vLLM model class derives them from the HF config."""
    return installed_vllm.model_geometry(hf_text_config, arch, hf_text_config.rope_parameters or {})


# ---------------------------------------------------------------------------------------------------------------
# vLLM


def vllm_available() -> bool:
    """True when vLLM imports on CPU with the pieces the harness calls."""
    if importlib.util.find_spec("vllm") is None:
        return False
    try:
        _vllm()
    except Exception:  # noqa: BLE001 - any import failure means "not available"
        return False
    return True


def vllm_version() -> str | None:
    return _vllm().version if vllm_available() else None


def vllm_rope(rope_parameters: dict[str, Any], *, head_dim: int, rotary_dim: int, max_position: int,
              is_neox_style: bool = True, dtype: torch.dtype = torch.float32, model_arch: str | None = None,
              max_model_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """vLLM's rotary embedding for ``rope_parameters`` (the HF config's ``rope_parameters`` after transformers 5
    standardisation, which is what vLLM's models read), built as the model class of ``model_arch`` builds it.

    ``max_position`` is what the model passes (``config.max_position_embeddings`` for Llama, Qwen2, gpt-oss and
    DeepSeek). ``max_model_len`` matters only for longrope (Phi-3), whose module reads it from the current vLLM
    config; default ``max_position``. ``dtype`` is the cache dtype (vLLM models pass none, so it is the model dtype
    set as torch's default during loading; gpt-oss forces float32).

    Returns ``(cos, sin, extra)``: ``cos``/``sin`` are ``(cache_len, rotary_dim // 2)`` rows indexed by position
    (for longrope, the table the module uses under this ``max_model_len``), already multiplied by the magnitude
    factor vLLM folds into the cache (``extra["mscale"]``). ``extra`` also has ``module``, ``cls``, ``cache_len``,
    ``inv_freq`` (effective, read back from the cache), ``forward`` (the method CustomOp dispatch picked),
    ``softmax_scale_multiplier`` (DeepSeek's mscale**2 on the attention scale) and, for longrope, ``use_long_rope``
    and both tables.
    """
    v = _vllm()
    call = _model_rope_call(rope_parameters, head_dim=head_dim, rotary_dim=rotary_dim, max_position=max_position,
                            is_neox_style=is_neox_style, dtype=dtype, model_arch=model_arch)
    with _quiet():
        config = v.VllmConfig()
    if call["rope_parameters"].get("rope_type") == "longrope":
        # Shim: Phi3LongRoPEScaledRotaryEmbedding.__init__ reads only get_current_vllm_config().model_config
        # .max_model_len (phi3_long_rope_scaled_rope.py:54); a full ModelConfig needs a config.json (see
        # vllm_rope_from_hf_config for that path).
        config.model_config = types.SimpleNamespace(max_model_len=max_model_len or max_position)
    rope = _build_vllm_rope(call, config)
    cos, sin, extra = _describe(rope, call)
    extra["max_model_len"] = max_model_len
    return cos, sin, extra


def vllm_apply_rope(rope: torch.nn.Module | dict[str, Any], positions: torch.Tensor, q: torch.Tensor,
                    k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``q``/``k`` (``(tokens, heads, head_dim)``) at ``positions`` (``(tokens,)``) with vLLM's pure-torch
    path: ``forward_native`` of the CustomOp (what dispatch picks on CPU when custom ops are off, the default), or
    the plain ``forward`` of Phi3's LongRoPE module. Inputs go in flattened as the models pass them."""
    module = rope["module"] if isinstance(rope, dict) else rope
    tokens, heads, dim = q.shape
    kv_heads = k.shape[1]
    forward = getattr(module, "forward_native", None) or module.forward
    with _quiet(), torch.no_grad():
        if type(module).__name__.startswith("Deepseek"):
            # MLA passes (tokens, heads, rope_dim) slices (layers/mla.py:228, models/deepseek_v2.py:615)
            q_out, k_out = forward(positions, q.clone(), k.clone())
        else:
            q_out, k_out = forward(positions, q.reshape(tokens, heads * dim).clone(),
                                   k.reshape(tokens, kv_heads * dim).clone())
    return q_out.reshape(tokens, heads, dim), k_out.reshape(tokens, kv_heads, dim)


def vllm_config_after_overrides(hf_config_dict: dict[str, Any], hf_overrides: dict[str, Any] | None,
                                max_model_len: int | str | None) -> tuple[dict[str, Any], int | str]:
    """What vLLM makes of a config.json plus ``--hf-overrides`` and ``--max-model-len``: the rope dict its models
    read (``hf_text_config.rope_parameters`` after the merge and patching) and the max model length it settles on,
    or the error message it refuses with (``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` unset). All of it is vLLM's own
    ``ModelConfig.__post_init__``; when that raises, the rope dict comes from the same build with no
    ``max_model_len``."""
    try:
        config = vllm_model_config(hf_config_dict, hf_overrides, max_model_len)
    except Exception as exc:  # noqa: BLE001 - the message is the result
        message = _error_message(exc)
        try:
            config = vllm_model_config(hf_config_dict, hf_overrides, None)
        except Exception:  # noqa: BLE001
            return {}, message
        return copy.deepcopy(config.hf_text_config.rope_parameters), message
    return copy.deepcopy(config.hf_text_config.rope_parameters), int(config.max_model_len)


def vllm_rope_from_hf_config(hf_config_dict: dict[str, Any], hf_overrides: dict[str, Any] | None = None,
                             max_model_len: int | str | None = None, *, dtype: torch.dtype = torch.float32,
                             allow_long_max_model_len: bool = False
                             ) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """End to end: a real ``ModelConfig`` and ``VllmConfig`` (so LongRoPE sees the real ``max_model_len``), then
    ``get_rope`` with what the model class reads from the resulting HF config. Same return as :func:`vllm_rope`,
    with ``extra["max_model_len"]`` the length vLLM settled on and ``extra["hf_config"]`` its HF config."""
    v = _vllm()
    model_config = vllm_model_config(hf_config_dict, hf_overrides, max_model_len,
                                     allow_long_max_model_len=allow_long_max_model_len)
    with _quiet():
        config = v.VllmConfig(model_config=model_config)
    text = model_config.hf_text_config
    arch = model_config.architectures[0]
    head, rotary, max_position = _model_geometry(text, arch)
    call = _model_rope_call(text.rope_parameters, head_dim=head, rotary_dim=rotary, max_position=max_position,
                            is_neox_style=True, dtype=dtype, model_arch=arch)
    rope = _build_vllm_rope(call, config)
    cos, sin, extra = _describe(rope, call)
    extra.update(max_model_len=int(model_config.max_model_len), hf_config=model_config.hf_config, arch=arch)
    return cos, sin, extra


# ---------------------------------------------------------------------------------------------------------------
# vLLM: remote-code families and dual chunk attention (posenc_cli/models/remote_code.py)


@contextlib.contextmanager
def capture_inv_freq() -> Iterator[list[torch.Tensor]]:
    """Record every inverse-frequency tensor vLLM's rotary classes compute while building (``_compute_inv_freq`` of
    the base class, LongRoPE and the dual-chunk class): the engine's own float32 values, before any cos/sin."""
    from vllm.model_executor.layers.rotary_embedding import base, dual_chunk_rope, phi3_long_rope_scaled_rope

    seen: list[torch.Tensor] = []
    classes = (base.RotaryEmbeddingBase, phi3_long_rope_scaled_rope.Phi3LongRoPEScaledRotaryEmbedding,
               dual_chunk_rope.DualChunkRotaryEmbedding)
    originals = {cls: cls.__dict__["_compute_inv_freq"] for cls in classes}

    def wrap(fn: Any) -> Any:
        def recorded(self: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
            out: torch.Tensor = fn(self, *args, **kwargs)
            seen.append(out.detach().clone())
            return out
        return recorded

    for cls, fn in originals.items():
        cls._compute_inv_freq = wrap(fn)
    try:
        yield seen
    finally:
        for cls, fn in originals.items():
            cls._compute_inv_freq = fn


def remote_config(hf_config_dict: dict[str, Any]) -> Any:
    """A remote-code config as vLLM's model code sees it, without the model's Python file: a ``PretrainedConfig``
    subclass that, like the remote classes (``InternLM2Config``, ``MiniCPMConfig``), sets every key as an attribute
    before ``PretrainedConfig.__init__`` (which standardises ``rope_scaling`` into ``rope_parameters``), then vLLM's
    own ``patch_rope_parameters`` (what ``vllm.transformers_utils.config.get_config`` runs on every config). The
    remote class's own defaults for keys the file leaves out are not applied (the test configs set them)."""
    _vllm()
    from transformers import PretrainedConfig
    from vllm.transformers_utils.config import patch_rope_parameters

    class RemoteConfig(PretrainedConfig):
        model_type = str(hf_config_dict.get("model_type") or "remote")

        def __init__(self, **kwargs: Any) -> None:
            for key, value in kwargs.items():
                if key not in ("architectures", "model_type"):
                    setattr(self, key, value)
            super().__init__(architectures=kwargs.get("architectures"))

    with _quiet():
        config = RemoteConfig(**copy.deepcopy(hf_config_dict))
        patch_rope_parameters(config)
    return config


def vllm_family_call(hf_config_dict: dict[str, Any]) -> dict[str, Any]:
    """The ``get_rope`` arguments vLLM 0.33.0's model class of a remote-code family passes, from the config vLLM
    builds (``head_size``, ``max_position``, ``rope_parameters``, ``is_neox_style``; ``source``: file:lines)."""
    model_type = hf_config_dict.get("model_type")
    if model_type == "chatglm":
        # vllm/model_executor/models/chatglm.py:75, 98-114 (GLMAttention), vLLM's own ChatGLMConfig
        c = vllm_model_config(hf_config_dict).hf_config
        return {"head_size": c.hidden_size // c.num_attention_heads,
                "max_position": getattr(c, "seq_length", 8192),
                "rope_parameters": {"rope_type": "default", "rope_theta": 10000 * getattr(c, "rope_ratio", 1.0),
                                    "partial_rotary_factor": 0.5},
                "is_neox_style": not c.original_rope, "source": "chatglm.py:75,98-114"}
    if model_type in ("internlm2", "minicpm"):
        # internlm2.py:119, 143-147, 205-211; minicpm.py:264, 287-291, 329-343
        c = remote_config(hf_config_dict)
        return {"head_size": c.hidden_size // c.num_attention_heads,
                "max_position": getattr(c, "max_position_embeddings", 8192),
                "rope_parameters": copy.deepcopy(c.rope_parameters), "is_neox_style": True,
                "source": f"{model_type}.py"}
    if model_type in ("qwen2", "llama"):
        # qwen2.py:249-275 / llama.py:266: transformers' own config class (vLLM's ModelConfig), the whole head
        c = vllm_model_config(hf_config_dict).hf_text_config
        return {"head_size": getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
                "max_position": c.max_position_embeddings, "rope_parameters": copy.deepcopy(c.rope_parameters),
                "is_neox_style": True, "source": f"{model_type}.py"}
    if model_type == "internvl_chat":
        # internvl.py:617-622: the language model of llm_config, by its architecture
        return {**vllm_family_call(hf_config_dict["llm_config"]), "source": "internvl.py -> llm_config"}
    raise ValueError(f"no vLLM 0.33.0 model class for {model_type!r} in this harness")


def vllm_family_rope(hf_config_dict: dict[str, Any], *, max_model_len: int | None = None,
                     dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """vLLM 0.33.0's rotary embedding for a remote-code family, built with the arguments its model class passes
    (:func:`vllm_family_call`). Same return as :func:`vllm_rope`, plus ``extra["engine_inv_freq"]`` (the inverse
    frequencies the class computed, captured before any cos/sin) and ``extra["call"]``."""
    call = vllm_family_call(hf_config_dict)
    params = call["rope_parameters"]
    head = call["head_size"]
    rotary = int(head * params.get("partial_rotary_factor", 1.0))
    with capture_inv_freq() as seen:
        cos, sin, extra = vllm_rope(params, head_dim=head, rotary_dim=rotary, max_position=call["max_position"],
                                    is_neox_style=call["is_neox_style"], dtype=dtype, max_model_len=max_model_len)
    # LongRoPE computes the short table, then the long one; the module uses one of them (use_long_rope)
    used = seen[-2] if extra.get("use_long_rope") is False else seen[-1]
    extra.update(engine_inv_freq=used, call=call)
    return cos, sin, extra


def vllm_dual_chunk_rope(hf_config_dict: dict[str, Any]) -> dict[str, Any]:
    """vLLM 0.33.0's ``get_rope`` as Qwen2 calls it with ``dual_chunk_attention_config`` (qwen2.py:179-184,
    249-275): a real ``ModelConfig`` for the config, then ``get_rope(head_dim, max_position=max_position_embeddings,
    rope_parameters=config.rope_parameters, dual_chunk_attention_config=...)``.

    ``DualChunkRotaryEmbedding.__init__`` asks for the current CUDA device and moves its tables there; on CPU the
    harness answers device 0 and keeps the tables on the CPU (everything else is vLLM's code). Returns the module,
    its five cos/sin tables (``q``, ``qc``, ``k``, ``qc_no_clamp``, ``q_inter``) and the captured inv_freq."""
    v = _vllm()
    from vllm.model_executor.layers.rotary_embedding import dual_chunk_rope

    config = vllm_model_config(hf_config_dict).hf_text_config
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    cls = dual_chunk_rope.DualChunkRotaryEmbedding
    original = cls.__dict__["_compute_cos_sin_cache"]

    def on_cpu(self: Any) -> Any:
        self.device = torch.device("cpu")
        return original(self)

    with _quiet():
        vllm_config = v.VllmConfig()
    v.rotary_embedding._ROPE_DICT.clear()
    cls._compute_cos_sin_cache = on_cpu  # type: ignore[method-assign]
    try:
        with (_quiet(), capture_inv_freq() as seen, v.set_current_vllm_config(vllm_config),
              unittest.mock.patch.object(torch.accelerator, "current_device_index", return_value=0)):
            rope = v.rotary_embedding.get_rope(head, max_position=config.max_position_embeddings,
                                               rope_parameters=config.rope_parameters,
                                               dual_chunk_attention_config=config.dual_chunk_attention_config)
    finally:
        cls._compute_cos_sin_cache = original  # type: ignore[method-assign]
        v.rotary_embedding._ROPE_DICT.clear()
    tables = {name: getattr(rope, f"cos_sin_{name}_cache") for name in ("q", "qc", "k", "qc_no_clamp", "q_inter")}
    return {"module": rope, "cls": type(rope).__name__, "tables": tables, "inv_freq": seen[-1], "head_size": head,
            "dual_chunk_attention_config": dict(config.dual_chunk_attention_config)}


def vllm_source(relative: str) -> str:
    """The text of a file of the installed vLLM package (``model_executor/...``)."""
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.submodule_search_locations
    return (Path(next(iter(spec.submodule_search_locations))) / relative).read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------------------------
# SGLang (in a subprocess: see the module docstring)


def _sglang_path() -> list[str]:
    extra = os.environ.get("POSENC_SGLANG_PYTHONPATH", "")
    return [p for p in extra.split(os.pathsep) if p]


def sglang_available() -> bool:
    """sglang is installed and its import chain's ``triton`` and ``IPython`` can be found (in the venv or in
    ``POSENC_SGLANG_PYTHONPATH``). Cheap: nothing is imported here."""
    if importlib.util.find_spec("sglang") is None:
        return False
    path = _sglang_path() + sys.path
    return all(importlib.machinery.PathFinder.find_spec(name, path) is not None for name in ("triton", "IPython"))


def sglang_rope_many(specs: list[dict[str, Any]], *, timeout: float = 300) -> list[dict[str, Any]]:
    """Run several :func:`sglang_rope` requests in one SGLang subprocess (its import takes about 4-5 s).

    Each spec has the keyword arguments of :func:`sglang_rope` plus ``rope_parameters``; optional ``positions``,
    ``q``, ``k`` tensors are rotated with the module's pure-torch forward. Each result is a dict with ``cos``,
    ``sin`` and the ``extra`` entries (no module: it stays in the subprocess), plus ``q``/``k`` when asked."""
    with tempfile.TemporaryDirectory(prefix="sglang-harness-") as tmp:
        inp, out = Path(tmp) / "in.pt", Path(tmp) / "out.pt"
        torch.save([_sglang_spec(s) for s in specs], inp)
        env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", PYTHONWARNINGS="ignore")
        env["PYTHONPATH"] = os.pathsep.join(_sglang_path() + [p for p in [env.get("PYTHONPATH")] if p])
        proc = subprocess.run([sys.executable, __file__, "--sglang-worker", str(inp), str(out)], env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"SGLang worker failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        results: list[dict[str, Any]] = torch.load(out, weights_only=True)
    return results


def _sglang_spec(spec: dict[str, Any]) -> dict[str, Any]:
    s = dict(spec)
    s["dtype"] = str(s.get("dtype", torch.float32)).removeprefix("torch.")
    s.setdefault("is_neox_style", True)
    s.setdefault("model_arch", None)
    return s


def sglang_rope(rope_parameters: dict[str, Any], *, head_dim: int, rotary_dim: int, max_position: int,
                is_neox_style: bool = True, dtype: torch.dtype = torch.float32, model_arch: str | None = None,
                positions: torch.Tensor | None = None, q: torch.Tensor | None = None, k: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """SGLang's rotary embedding (``sglang.srt.layers.rotary_embedding.get_rope``, or ``get_rope_wrapper`` with
    ``device="cpu"`` for DeepSeek) built as SGLang's model class calls it, on SGLang's CPU engine
    (``SGLANG_USE_CPU_ENGINE=1``). Same return shape as :func:`vllm_rope`; with ``positions``/``q``/``k`` the rotated
    ``q``/``k`` are in ``extra["q"]``/``extra["k"]``. One subprocess per call: use :func:`sglang_rope_many` for
    several."""
    spec = {"rope_parameters": rope_parameters, "head_dim": head_dim, "rotary_dim": rotary_dim,
            "max_position": max_position, "is_neox_style": is_neox_style, "dtype": dtype, "model_arch": model_arch,
            "positions": positions, "q": q, "k": k}
    result = sglang_rope_many([spec])[0]
    return result.pop("cos"), result.pop("sin"), result


def _sglang_worker(inp: str, out: str) -> None:  # pragma: no cover - runs in the subprocess
    import time

    started = time.perf_counter()
    with _quiet():
        from sglang.srt.layers.rotary_embedding import get_rope, get_rope_wrapper
        from sglang.srt.layers.rotary_embedding.yarn import yarn_get_mscale
        from sglang.srt.utils import is_cpu
    import_seconds = time.perf_counter() - started
    specs = torch.load(inp, weights_only=True)
    results = []
    for spec in specs:
        params = copy.deepcopy(spec["rope_parameters"])
        arch = spec["model_arch"]
        dtype = getattr(torch, spec["dtype"])
        head, rotary, max_pos = spec["head_dim"], spec["rotary_dim"], spec["max_position"]
        theta = params.get("rope_theta", 10000)
        extra: dict[str, Any] = {"softmax_scale_multiplier": 1.0}
        with _quiet():
            if arch in DEEPSEEK_ARCHS:
                # sglang/srt/models/deepseek_v2.py: rope_scaling only for a non-default type (2608-2609), renamed
                # deepseek_yarn (2065-2066), neox = not rope_interleave (2166, default True), CPU device (2167-2175)
                scaling = params if params.get("rope_type") != "default" else None
                if scaling:
                    scaling["rope_type"] = "deepseek_yarn"
                neox = False
                rope = get_rope_wrapper(head, rotary_dim=rotary, max_position=max_pos, base=theta,
                                        rope_scaling=scaling, is_neox_style=neox, dtype=dtype, device="cpu")
                if scaling:
                    # compute_mla_mscale_scaling (sglang/srt/configs/model_config.py:2623-2647) is one formula on
                    # yarn_get_mscale; importing sglang.srt.configs needs torchvision, so it is recomputed here.
                    mscale = yarn_get_mscale(scaling.get("factor", 1.0), float(scaling.get("mscale_all_dim", False)))
                    extra["softmax_scale_multiplier"] = mscale * mscale
            else:
                # llama.py:322-336 + 225-232 (also Phi3ForCausalLM), qwen2.py:207-214 + get_rope_config,
                # gpt_oss.py:444-450 + 531-532: the whole rope_parameters dict goes in as rope_scaling
                neox = spec["is_neox_style"]
                rope = get_rope(head, rotary_dim=rotary, max_position=max_pos, base=theta, rope_scaling=params,
                                is_neox_style=neox, dtype=dtype)
        extra.update(cls=type(rope).__name__, rotary_dim=rope.rotary_dim, is_neox_style=neox, is_cpu=is_cpu(),
                     import_seconds=import_seconds)
        if hasattr(rope, "long_short_cos_sin_cache"):
            original = rope.original_max_position_embeddings
            cache = rope.long_short_cos_sin_cache
            extra.update(short_cos=_split(cache[:original])[0], short_sin=_split(cache[:original])[1],
                         long_cos=_split(cache[original:])[0], long_sin=_split(cache[original:])[1],
                         short_mscale=rope.short_mscale, long_mscale=rope.long_mscale, mscale=rope.long_mscale)
            cos, sin = extra["long_cos"], extra["long_sin"]
        else:
            cos, sin = _split(rope.cos_sin_cache)
            extra["mscale"] = float(getattr(rope, "mscale", 1.0))
        extra.update(cos=cos, sin=sin, cache_len=cos.shape[0], inv_freq=_effective_inv_freq(cos, sin))
        if spec.get("positions") is not None:
            q, k, positions = spec["q"], spec["k"], spec["positions"]
            tokens, heads, dim = q.shape
            forward = getattr(rope, "forward_native", None) or rope.forward
            with _quiet(), torch.no_grad():
                if arch in DEEPSEEK_ARCHS:  # its forward_native takes (tokens, heads, dim)
                    q_out, k_out = forward(positions, q.clone(), k.clone())
                else:
                    q_out, k_out = forward(positions, q.reshape(tokens, -1).clone(), k.reshape(tokens, -1).clone())
            extra.update(q=q_out.reshape(q.shape), k=k_out.reshape(k.shape))
        results.append(extra)
    torch.save(results, out)


if __name__ == "__main__" and sys.argv[1:2] == ["--sglang-worker"]:
    _sglang_worker(sys.argv[2], sys.argv[3])


__all__ = [
    "VLLM_EXTRA_DEPS", "VLLM_EXTRA_DEPS_NO_DEPS", "VLLM_VERSION", "SGLANG_VERSION",
    "vllm_available", "vllm_version", "vllm_rope", "vllm_apply_rope", "vllm_model_config",
    "vllm_config_after_overrides", "vllm_rope_from_hf_config", "capture_inv_freq", "remote_config",
    "vllm_family_call", "vllm_family_rope", "vllm_dual_chunk_rope", "vllm_source",
    "sglang_available", "sglang_rope", "sglang_rope_many",
]

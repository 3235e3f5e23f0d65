"""The installed vLLM, run on CPU: its own config path (``vllm.config.ModelConfig``: the ``--hf-overrides`` merge, rope
patching and the length check) and its own rotary classes (``get_rope``, with the arguments its model classes pass),
for ``posenc check --installed`` and for the tests' harness (``tests/harness/vllm_harness.py`` imports what it needs
from here, so the proofs and the user's check run one code path).

No CUDA and no compiled vLLM op is loaded: ``VLLM_TARGET_DEVICE`` is set to ``cpu`` (unless set) so vLLM picks its
``CpuPlatform``; one adaptation (:func:`_as_a_cpu_without_triton`) lets a ``VllmConfig`` finish on an x86 host without
triton-cpu. vLLM's Python warnings are silenced (:func:`quiet`).

What is run and what is not: the rope dict vLLM's model reads after its config path, the length it admits, the
rotary module's inverse frequencies (its own float32 ``_compute_inv_freq`` results, :func:`captured_inv_freq`, where
the table was built with them; else, for linear scaling which divides the positions, read back from the table's row
of position 1, exact to 1.1e-7) and the magnitude it folds into
the table, and DeepSeek's softmax multiplier (``yarn_get_mscale`` as its MLA class computes it). The softmax scale of
other models (``query_pre_attn_scalar``...) is applied by vLLM's attention, outside the rope code: that one is
posenc's modelled value.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import os
import tempfile
import types
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from posenc_cli.engines import vllm as modelled
from posenc_cli.engines.runs import EngineRun, GroupRun
from posenc_cli.files import dumps_json

if TYPE_CHECKING:
    import torch

    from posenc_cli.models.model_positions import ModelPositions

DEEPSEEK_ARCHS = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM")
GPT_OSS_ARCHS = ("GptOssForCausalLM",)


class NotRun(Exception):
    """The installed vLLM could not build this model here (an import its model class needs, a config it rejects
    for another reason than the length): the message says why."""


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """vLLM and torch emit DeprecationWarnings on import and use; the tests turn warnings into errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def version() -> str | None:
    """The installed vLLM's version, or None when it is not installed or does not import on this CPU (the
    distribution is looked up first: no import without it)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return None
    try:
        return str(load().version)
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return None


@functools.lru_cache(maxsize=1)
def load() -> types.SimpleNamespace:
    """Import the pieces of vLLM that are run (once; about 5-7 s on a 2-core machine)."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    with quiet():  # by name: vLLM is an optional package without type information
        vllm = importlib.import_module("vllm")
        config = importlib.import_module("vllm.config")
        rotary_embedding = importlib.import_module("vllm.model_executor.layers.rotary_embedding")
        common = importlib.import_module("vllm.model_executor.layers.rotary_embedding.common")
        current_platform = importlib.import_module("vllm.platforms").current_platform

    if not current_platform.is_cpu():
        raise RuntimeError(f"vLLM selected {type(current_platform).__name__}, not CpuPlatform "
                           f"(VLLM_TARGET_DEVICE={os.environ.get('VLLM_TARGET_DEVICE')!r})")
    _as_a_cpu_without_triton(type(current_platform))
    return types.SimpleNamespace(version=vllm.__version__, rotary_embedding=rotary_embedding,
                                 ModelConfig=config.ModelConfig, VllmConfig=config.VllmConfig,
                                 set_current_vllm_config=config.set_current_vllm_config,
                                 yarn_get_mscale=common.yarn_get_mscale, platform=current_platform)


def _as_a_cpu_without_triton(platform: Any) -> None:
    """Let a VllmConfig finish on an x86 host without triton-cpu.

    From vLLM 0.34 ``CpuPlatform.check_and_update_config`` refuses x86 CPUs when Triton is missing (triton-cpu is not
    on PyPI), while other CPUs run its standalone CPU model runner. Nothing posenc compares (the rope parameters, the
    admitted length, the rotary classes) depends on the CPU's architecture, so vLLM is told it runs on such a CPU.
    Releases without the refusal (0.33) are left untouched.
    """
    import inspect

    cpu_arch = importlib.import_module("vllm.platforms.cpu").CpuArchEnum
    has_triton = importlib.import_module("vllm.triton_utils").HAS_TRITON
    if has_triton or "requires Triton" not in inspect.getsource(platform.check_and_update_config):
        return
    if platform.get_cpu_architecture() == cpu_arch.X86:
        platform.get_cpu_architecture = classmethod(lambda cls: cpu_arch.ARM)


def model_rope_call(rope_parameters: dict[str, Any], *, head_dim: int, rotary_dim: int, max_position: int,
                    is_neox_style: bool, dtype: torch.dtype, model_arch: str | None) -> dict[str, Any]:
    """The ``get_rope`` arguments the model class of ``model_arch`` passes (vLLM 0.33.0 and 0.34.0)."""
    import torch

    params = copy.deepcopy(rope_parameters)
    if rotary_dim != head_dim and "rope_dim" not in params and "partial_rotary_factor" not in params:
        params["partial_rotary_factor"] = rotary_dim / head_dim
    extra: dict[str, Any] = {"softmax_scale_multiplier": 1.0}
    if model_arch in GPT_OSS_ARCHS:
        # framework fact: vllm/model_executor/models/gpt_oss.py:111-126: a fresh yarn dict and a float32 cache
        params = {key: params[key] for key in ("rope_theta", "factor", "original_max_position_embeddings",
                                               "beta_fast", "beta_slow")}
        params.update(rope_type="yarn", truncate=rope_parameters.get("truncate", True))
        dtype = torch.float32
    elif model_arch in DEEPSEEK_ARCHS:
        # vllm/model_executor/models/deepseek_v2.py:1115-1136 (MLA attention; 542-563 is the same for MHA)
        if params["rope_type"] != "default":
            params["rope_type"] = ("deepseek_llama_scaling" if params.get("attention_factor") == 1.0
                                   else "deepseek_yarn")
        is_neox_style = False
        if params["rope_type"] == "deepseek_yarn":
            mscale = load().yarn_get_mscale(params["factor"], float(params.get("mscale_all_dim", False)))
            extra["softmax_scale_multiplier"] = mscale * mscale
    return {"head_size": head_dim, "max_position": max_position, "is_neox_style": is_neox_style,
            "rope_parameters": params, "dtype": dtype, "extra": extra}


def build_rope(call: dict[str, Any], vllm_config: Any) -> Any:
    """``get_rope`` with ``call``'s arguments under ``vllm_config`` (a ``torch.nn.Module``)."""
    v = load()
    # get_rope caches modules per argument tuple; Phi3's LongRoPE also reads max_model_len from the current config,
    # which the key does not include, so start from an empty cache.
    v.rotary_embedding._ROPE_DICT.clear()
    with quiet(), v.set_current_vllm_config(vllm_config):
        return v.rotary_embedding.get_rope(call["head_size"], max_position=call["max_position"],
                                           is_neox_style=call["is_neox_style"],
                                           rope_parameters=call["rope_parameters"], dtype=call["dtype"])


@contextlib.contextmanager
def captured_inv_freq() -> Iterator[list[Any]]:
    """Record the inverse frequencies vLLM's rotary classes compute while a module is built: every
    ``_compute_inv_freq`` defined in ``vllm.model_executor.layers.rotary_embedding`` is wrapped, and only the
    outermost call's result is kept (a subclass calling its parent's is one computation): vLLM's own float32 values,
    before any cos/sin. LongRoPE computes two (short, then long)."""
    import pkgutil

    package = load().rotary_embedding
    classes = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        classes += [c for c in vars(module).values()
                    if isinstance(c, type) and "_compute_inv_freq" in c.__dict__ and c.__module__ == module.__name__]
    seen: list[Any] = []
    depth = [0]
    originals = {c: c.__dict__["_compute_inv_freq"] for c in classes}

    def wrap(fn: Any) -> Any:
        def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
            depth[0] += 1
            try:
                out = fn(self, *args, **kwargs)
            finally:
                depth[0] -= 1
            if depth[0] == 0:
                seen.append(out.detach().clone())
            return out
        return recorded

    for cls, fn in originals.items():
        setattr(cls, "_compute_inv_freq", wrap(fn))  # noqa: B010 - a class attribute mypy does not know
    try:
        yield seen
    finally:
        for cls, fn in originals.items():
            setattr(cls, "_compute_inv_freq", fn)  # noqa: B010


def split(cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``cos_sin_cache`` ``(positions, rotary_dim)``: the cos half, then the sin half."""
    cos, sin = cache.chunk(2, dim=-1)
    return cos, sin


def effective_inv_freq(cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The angle per position step, read back from the cache row of position 1 (any magnitude factor cancels)."""
    import torch

    return torch.atan2(sin[1].double(), cos[1].double())


def describe_rope(rope: Any, call: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """(cos, sin, extra) of a built rotary module: the table it uses (LongRoPE: short or long, as it chose) with the
    magnitude folded in, and what else it applies (``extra``: mscale, inv_freq read back, cache length, class)."""
    extra: dict[str, Any] = dict(call["extra"])
    extra.update(module=rope, cls=type(rope).__name__, rope_parameters=call["rope_parameters"],
                 head_size=call["head_size"], rotary_dim=rope.rotary_dim, is_neox_style=call["is_neox_style"],
                 max_position=call["max_position"])
    if hasattr(rope, "long_short_cos_sin_cache"):  # Phi3LongRoPEScaledRotaryEmbedding: short rows, then long rows
        original = rope.original_max_position_embeddings
        cache = rope.long_short_cos_sin_cache
        short_cos, short_sin = split(cache[:original])
        long_cos, long_sin = split(cache[original:])
        use_long = bool(rope.use_long_rope)
        cos, sin = (long_cos, long_sin) if use_long else (short_cos, short_sin)
        extra.update(use_long_rope=use_long, short_cos=short_cos, short_sin=short_sin, long_cos=long_cos,
                     long_sin=long_sin, short_mscale=rope.short_mscale, long_mscale=rope.long_mscale,
                     mscale=rope.long_mscale if use_long else rope.short_mscale, forward="forward")
    else:
        cos, sin = split(rope.cos_sin_cache)
        extra.update(mscale=float(getattr(rope, "mscale", 1.0)),
                     forward=getattr(getattr(rope, "_forward_method", None), "__name__", None))
    extra["cache_len"] = cos.shape[0]
    extra["inv_freq"] = effective_inv_freq(cos, sin)
    return cos, sin, extra


@contextlib.contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def error_message(exc: BaseException) -> str:
    """vLLM's own message for a config it rejects (pydantic's wrapper removed)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):  # pydantic ValidationError wrapping the ValueError raised in __post_init__
        with contextlib.suppress(Exception):
            msg = str(errors()[0]["msg"])
            return msg.removeprefix("Value error, ")
    return f"{type(exc).__name__}: {exc}"


def model_config(hf_config_dict: dict[str, Any], hf_overrides: dict[str, Any] | None = None,
                 max_model_len: int | str | None = None, *, allow_long_max_model_len: bool = False) -> Any:
    """A real ``vllm.config.ModelConfig`` for a config.json written to a temporary directory (no weights, no
    tokenizer, no network): ``__post_init__`` runs ``get_config`` (hf_overrides merge, ``patch_rope_parameters``),
    the architecture inspection and ``get_and_verify_max_len``. Raises what vLLM raises."""
    with _config_folder(hf_config_dict) as folder:
        return _model_config_in(folder, hf_overrides, max_model_len, allow_long_max_model_len)


@contextlib.contextmanager
def _config_folder(hf_config_dict: dict[str, Any]) -> Iterator[str]:
    """A temporary model folder holding only ``config.json``."""
    with tempfile.TemporaryDirectory(prefix="posenc-vllm-") as tmp:
        (Path(tmp) / "config.json").write_text(dumps_json(hf_config_dict))
        yield tmp


def _model_config_in(folder: str, hf_overrides: dict[str, Any] | None, max_model_len: int | str | None,
                     allow_long_max_model_len: bool = False) -> Any:
    v = load()
    with quiet(), _env("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1" if allow_long_max_model_len else None):
        return v.ModelConfig(model=folder, hf_overrides=copy.deepcopy(hf_overrides or {}),
                             max_model_len=max_model_len, skip_tokenizer_init=True, dtype="float32")


def model_geometry(hf_text_config: Any, arch: str, rope_parameters: dict[str, Any]) -> tuple[int, int, int]:
    """(head_dim, rotary_dim, max_position) as the vLLM model class derives them from the HF config."""
    if arch in DEEPSEEK_ARCHS:
        head = int(hf_text_config.qk_rope_head_dim)  # deepseek_v2.py: get_rope(qk_rope_head_dim, ...)
        return head, head, int(getattr(hf_text_config, "max_position_embeddings", 8192))
    head = getattr(hf_text_config, "head_dim", None) or hf_text_config.hidden_size // hf_text_config.num_attention_heads
    rotary = int(rope_parameters.get("rope_dim") or int(head * rope_parameters.get("partial_rotary_factor", 1.0)))
    default_max = 32768 if arch.startswith("Qwen2") else 8192  # qwen2.py:274 / llama.py:266 getattr defaults
    return int(head), rotary, int(getattr(hf_text_config, "max_position_embeddings", default_max))


def _settle(folder: str, over: dict[str, Any] | None, max_model_len: int) -> tuple[Any, list[str]]:
    """vLLM's ModelConfig at ``max_model_len`` and the variable it needed: first without it (vLLM's own length
    check), then with it when vLLM asked for it."""
    try:
        return _model_config_in(folder, over, max_model_len), []
    except Exception as exc:  # noqa: BLE001 - vLLM's message decides
        message = error_message(exc)
        if "VLLM_ALLOW_LONG_MAX_MODEL_LEN" not in message:
            raise NotRun(message) from exc
    try:
        return _model_config_in(folder, over, max_model_len, True), [modelled.ENV_LONG]
    except Exception as exc:  # noqa: BLE001
        raise NotRun(error_message(exc)) from exc


def _admits(folder: str, over: dict[str, Any] | None, length: int) -> bool:
    """Whether vLLM's own length check admits ``length`` without ``VLLM_ALLOW_LONG_MAX_MODEL_LEN``."""
    try:
        _model_config_in(folder, over, length)
    except Exception as exc:  # noqa: BLE001 - vLLM's message decides
        if "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in error_message(exc):
            return False
        raise NotRun(error_message(exc)) from exc
    return True


def _longest_admitted(folder: str, over: dict[str, Any] | None, guess: int) -> int:
    """The longest ``--max-model-len`` vLLM admits without the variable (its default, with none given, can be
    shorter: Phi-3's original length): posenc's ``guess`` when vLLM admits it and refuses one more, else vLLM's
    answer by bisection."""
    if guess >= 1 and _admits(folder, over, guess) and not _admits(folder, over, guess + 1):
        return guess
    low, high = 1, 1 << 26  # admitted, refused (no config admits 64M positions without the variable)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if _admits(folder, over, middle) else (low, middle)
    return low


def _effective(extra: dict[str, Any], seen: list[Any]) -> Any:
    """The inverse frequencies the table was built with: vLLM's own ``_compute_inv_freq`` result where it is them
    (LongRoPE: short or long as the module chose), else (linear scaling divides the positions, not the frequencies,
    in ``_compute_cos_sin_cache``) the table's read-back (exact to 1.1e-7)."""
    import torch

    read_back = extra["inv_freq"]
    if len(seen) == 2 and "use_long_rope" in extra:
        seen = [seen[1] if extra["use_long_rope"] else seen[0]]
    if len(seen) == 1 and seen[0].shape == read_back.shape:
        exact = seen[0].double()
        if bool(torch.all(torch.abs(exact - read_back) <= 1e-6 * exact)):
            return seen[0]
    return read_back


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    """What the installed vLLM computes serving ``max_model_len`` with the invocation posenc prints (its
    ``--hf-overrides``, if any): its ModelConfig, then per rope group the rotary module its model class builds
    (vLLM's tables are static: ``seq_len`` changes nothing). Raises :class:`NotRun` when vLLM cannot build the
    model here."""
    import torch

    from posenc_cli.models.record import rope_groups

    v = load()
    over = modelled.overrides(model, cfg, max_model_len)
    served = {k: val for k, val in cfg.items() if k != "quantization_config"}  # validated against the float32 table
    with _config_folder(served) as folder:
        config, needs = _settle(folder, over, max_model_len)
        accepts = _longest_admitted(folder, over, modelled.derived_max_len(model))
        try:
            with quiet():
                vllm_config = v.VllmConfig(model_config=config)
        except Exception as exc:  # noqa: BLE001
            raise NotRun(error_message(exc)) from exc
    text, arch = config.hf_text_config, config.architectures[0]
    params = text.rope_parameters or {}
    nested = bool(params) and all(isinstance(p, dict) for p in params.values())  # one dict per layer type
    groups = []
    for g in rope_groups(model):
        own = params[g.name] if nested else params
        head, rotary, max_position = model_geometry(text, arch, own)
        call = model_rope_call(own, head_dim=head, rotary_dim=rotary, max_position=max_position,
                               is_neox_style=True, dtype=torch.float32, model_arch=arch)
        with captured_inv_freq() as seen:
            built = build_rope(call, vllm_config)
        _, _, extra = describe_rope(built, call)
        inv = _effective(extra, seen)
        softmax = float(extra["softmax_scale_multiplier"]) if arch in DEEPSEEK_ARCHS else g.softmax_scale
        groups.append(GroupRun(g.name, inv.numpy().astype("float32"), float(extra["mscale"]), softmax))
    argv = modelled.invocation("MODEL", over, max_model_len)
    return EngineRun(modelled.NAME, str(v.version), int(config.max_model_len), groups,
                     ["env", *needs, *argv] if needs else argv, accepts=accepts, needs=needs)

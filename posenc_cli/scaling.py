"""RoPE context-extension methods as configuration: validation and the exact config for each consumer.

Stdlib only (``posenc pick`` uses it and must not load numpy). A :class:`ScaleRequest` holds one method with
its parameters and the model facts; :func:`rope_parameters` turns it into the transformers 5 ``rope_parameters``
dict, and the ``format_*`` functions render that one dict for transformers 4 (legacy keys), transformers 5,
vLLM and llama.cpp. Frequencies are never computed here: ``frequencies.compute`` reads the same dict.

Methods and how transformers names them:

=========  =====================  ===========================================================================
method     rope_type              note
=========  =====================  ===========================================================================
linear     linear                 position interpolation: every frequency divided by ``factor``
ntk        default                static NTK-aware: ``rope_theta * factor ** (d / (d - 2))``, no rope type
dynamic    dynamic                NTK base grown per forward pass past ``max_position_embeddings``
yarn       yarn                   NTK-by-parts ramp plus attention temperature ``0.1 ln s + 1``
longrope   longrope               per-pair factor lists (short below the original length, long above)
llama3     llama3                 Llama 3.1 bands: high frequencies kept, low divided, middle blended
=========  =====================  ===========================================================================
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass, field, replace
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.units import MAX_LENGTH, format_length

METHODS: dict[str, str] = {
    "linear": "linear",
    "ntk": "default",
    "dynamic": "dynamic",
    "yarn": "yarn",
    "longrope": "longrope",
    "llama3": "llama3",
}
FORMATS = ("hf", "hf-v5", "vllm", "sglang", "llama.cpp", "llama-cpp-python")

#: Beyond this factor RoPE scaling needs a fine-tuning stage (the lesson's rule; PI and YaRN fine-tune past it).
NO_FINETUNE_LIMIT = 8.0

DEFAULT_THETA = 10000.0  # transformers' RotaryEmbeddingConfigMixin.default_theta
DEFAULT_HEAD_DIM = 128

# Input limits, checked by validate() so library callers get them too; the CLI's help text reads them from here.
#: A factor past this cannot keep the target within MAX_LENGTH even from a 1-position original length (the target
#: check in validate() then gives the exact bound for the original length in use).
MAX_FACTOR = float(MAX_LENGTH)
#: Shipped rope_theta values reach 1e7-ish (Llama 4: 5e5, Qwen3-2507: 5e6, MiniMax: 1e7); 1e12 is headroom, and keeps
#: ntk's theta * factor ** (d / (d - 2)) and every wavelength far from float64 overflow.
MAX_THETA = 1e12
#: Shipped head dims are 64 to 512 (Gemma 3: 256, DeepSeek MLA: 576 split); the --explain table has one row per pair,
#: and at 4096 (2048 rows) `posenc scale yarn --factor 4 --original-max 4k --head-dim 4096 --explain` takes 0.9 s.
MAX_HEAD_DIM = 4096
#: beta_fast/beta_slow (rotations), mscale, mscale_all_dim, attention_factor, low/high_freq_factor: shipped values are
#: below 100 (beta_fast 32) and above 0.01; the bounds keep attention factors, their squares and llama3's band
#: wavelengths (original / low_freq_factor) finite in float32 and in the printed configs.
MAX_PARAMETER = 1e6
MIN_PARAMETER = 1e-6


def ntk_theta(theta: float, factor: float, rotary_dim: int) -> float:
    """Static NTK-aware base: ``theta * factor ** (d / (d - 2))`` (bloc97), d = rotary dim."""
    return float(theta * factor ** (rotary_dim / (rotary_dim - 2)))


@dataclass(frozen=True)
class ScaleRequest:
    """One context extension: method, scale and the model facts it depends on.

    ``original_max`` is the trained context length, ``target`` the extended one; ``factor`` is
    ``target / original_max`` unless given explicitly (then ``target = original_max * factor``).
    """

    method: str
    original_max: int
    target: int
    factor: float
    theta: float = DEFAULT_THETA
    head_dim: int = DEFAULT_HEAD_DIM
    partial_rotary_factor: float | None = None
    # yarn
    beta_fast: float | None = None
    beta_slow: float | None = None
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool | None = None
    # llama3
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    # longrope
    short_factor: list[float] | None = None
    long_factor: list[float] | None = None
    fine_tuned: bool = False
    notes: list[str] = field(default_factory=list, compare=False)
    # keys of the model's own rope dict that no method sets (mrope_section, llama_4_scaling_beta): carried over
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * (1.0 if self.partial_rotary_factor is None else self.partial_rotary_factor))


def _bound(x: float) -> str:
    """A limit as written in a message: 2147483648 exactly, 1e+12 short."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e10 else f"{x:g}"


def _finite(value: float | None, name: str, *, minimum: float | None = None, strict: bool = False,
            maximum: float | None = None) -> None:
    if value is None:
        return
    relation = "greater than" if strict else "at least"
    allowed = "" if minimum is None else f" {relation} {_bound(minimum)}"
    allowed += "" if maximum is None else (" and" if minimum is not None else "") + f" at most {_bound(maximum)}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PosencError(f"{name} must be a finite number{allowed}, got {value!r}")
    if minimum is not None and (value <= minimum if strict else value < minimum):
        raise PosencError(f"{name} must be{allowed}, got {value:g}")
    if maximum is not None and value > maximum:
        raise PosencError(f"{name} must be{allowed}, got {value:g}")


def make_request(
    method: str,
    *,
    factor: float | None = None,
    original_max: int | None = None,
    target: int | None = None,
    **kwargs: Any,
) -> ScaleRequest:
    """Build and validate a request; the factor or the target is derived from the other.

    Raises :class:`PosencError` for anything transformers would only warn about: factor < 1, non-finite numbers,
    inconsistent lengths, bad longrope lists, low_freq_factor >= high_freq_factor, beta_fast < beta_slow, an odd
    rotary dim, an unknown method.
    """
    if method not in METHODS:
        raise PosencError(f"method {method!r} is not known; use one of: {', '.join(METHODS)}")
    if original_max is None:
        raise PosencError("the original (trained) context length is needed: pass --original-max (e.g. 32k) "
                          "or --config with max_position_embeddings")
    _finite(factor, "--factor", minimum=1.0, maximum=MAX_FACTOR)  # before original_max * factor can overflow
    if factor is None and target is None:
        raise PosencError("give the scale: --factor S, or --target LENGTH (with the original length)")
    if factor is not None and target is not None and not math.isclose(target / original_max, factor, rel_tol=1e-9):
        raise PosencError(f"--factor {factor:g} disagrees with --target {target} / original {original_max} "
                          f"= {target / original_max:g}; give one of them")
    if factor is None:
        assert target is not None
        if target <= original_max:
            raise PosencError(f"target length {format_length(target)} must be longer than the original "
                              f"{format_length(original_max)}; nothing to extend")
        factor = target / original_max
    if target is None:
        exact = original_max * factor
        if exact != int(exact):
            raise PosencError(f"factor {factor:g} x original length {original_max} = {exact:g} is not a whole "
                              "number of positions; pass --target instead")
        target = int(exact)
    if target < original_max:
        raise PosencError(f"target length {target} is shorter than the original {original_max}")
    req = ScaleRequest(method=method, original_max=original_max, target=target, factor=float(factor), **kwargs)
    validate(req)
    return req


def validate(req: ScaleRequest) -> None:
    """Strict checks on a request (see :func:`make_request`)."""
    _finite(req.factor, "factor", minimum=1.0, maximum=MAX_FACTOR)
    if req.target > MAX_LENGTH:
        raise PosencError(f"target length {req.target} (original {req.original_max} x factor {req.factor:g}) is too "
                          f"long; allowed up to {MAX_LENGTH} ({format_length(MAX_LENGTH)}), so a factor of at most "
                          f"{MAX_LENGTH / req.original_max:g} from this original length")
    _finite(req.theta, "--theta", minimum=1.0, strict=True, maximum=MAX_THETA)
    if isinstance(req.head_dim, bool) or not 2 <= req.head_dim <= MAX_HEAD_DIM:
        raise PosencError(f"--head-dim must be a positive even number up to {MAX_HEAD_DIM}, got {req.head_dim}")
    if req.partial_rotary_factor is not None:
        _finite(req.partial_rotary_factor, "--partial-rotary-factor", minimum=0.0, strict=True)
        if req.partial_rotary_factor > 1:
            raise PosencError(f"--partial-rotary-factor must be in (0, 1], got {req.partial_rotary_factor:g}")
    d = req.rotary_dim
    if d < 4 or d % 2:
        raise PosencError(f"the rotary dimension must be an even number of at least 4, got {d} "
                          f"(head_dim {req.head_dim} x partial_rotary_factor {req.partial_rotary_factor or 1:g})")
    for name in ("beta_fast", "beta_slow", "mscale", "mscale_all_dim"):
        _finite(getattr(req, name), f"--{name.replace('_', '-')}", minimum=MIN_PARAMETER, maximum=MAX_PARAMETER)
    _finite(req.attention_factor, "--attention-factor", minimum=MIN_PARAMETER, maximum=MAX_PARAMETER)
    if (req.beta_fast or 32) < (req.beta_slow or 1):
        raise PosencError(f"--beta-fast ({req.beta_fast or 32:g}) must not be smaller than --beta-slow "
                          f"({req.beta_slow or 1:g})")
    _finite(req.low_freq_factor, "--low-freq-factor", minimum=MIN_PARAMETER, maximum=MAX_PARAMETER)
    _finite(req.high_freq_factor, "--high-freq-factor", minimum=MIN_PARAMETER, maximum=MAX_PARAMETER)
    # equal factors (Llama 4) leave no blended band, which transformers computes fine; inverted ones are nonsense
    if req.method == "llama3" and req.low_freq_factor > req.high_freq_factor:
        raise PosencError(f"--low-freq-factor ({req.low_freq_factor:g}) must not be larger than --high-freq-factor "
                          f"({req.high_freq_factor:g})")
    if req.method == "llama3" and req.target <= req.original_max:
        raise PosencError("llama3 needs a target longer than the original length")
    if req.method == "longrope":
        for name in ("short_factor", "long_factor"):
            values = getattr(req, name)
            flag = f"--{name.replace('_', '-')}"
            if values is None:
                raise PosencError(f"longrope needs {flag}: a JSON list of {d // 2} numbers or @file")
            if len(values) != d // 2:
                raise PosencError(f"{flag} has {len(values)} entries; it must have rotary_dim/2 = {d // 2}")
            for i, v in enumerate(values):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                    raise PosencError(f"{flag}[{i}] = {v!r}; every factor must be a finite number > 0")


def warnings_for(req: ScaleRequest) -> list[str]:
    """Advice that is not an error (printed on stderr by the CLI)."""
    out: list[str] = []
    if req.factor > NO_FINETUNE_LIMIT and not req.fine_tuned:
        out.append(f"warning: factor {req.factor:g} is above {NO_FINETUNE_LIMIT:g}x; RoPE scaling this far needs a "
                   "fine-tuning stage at the target length (pass --fine-tuned if the model has one)")
    return out


def rope_parameters(req: ScaleRequest) -> dict[str, Any]:
    """The transformers 5 ``rope_parameters`` dict for ``req`` (``rope_theta`` inside, as v5 saves it)."""
    rope_type = METHODS[req.method]
    p: dict[str, Any] = {"rope_type": rope_type}
    theta = req.theta
    if req.method == "ntk":
        theta = ntk_theta(req.theta, req.factor, req.rotary_dim)
    elif req.method in ("linear", "dynamic"):
        p["factor"] = req.factor
    elif req.method == "yarn":
        p["factor"] = req.factor
        p["original_max_position_embeddings"] = req.original_max
        for key in ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate"):
            value = getattr(req, key)
            if value is not None:
                p[key] = float(value) if key != "truncate" else bool(value)
    elif req.method == "longrope":
        p["factor"] = req.factor
        p["original_max_position_embeddings"] = req.original_max
        p["short_factor"] = [float(v) for v in req.short_factor or []]
        p["long_factor"] = [float(v) for v in req.long_factor or []]
        if req.attention_factor is not None:
            p["attention_factor"] = float(req.attention_factor)
    elif req.method == "llama3":
        p["factor"] = req.factor
        p["low_freq_factor"] = float(req.low_freq_factor)
        p["high_freq_factor"] = float(req.high_freq_factor)
        p["original_max_position_embeddings"] = req.original_max
    p["rope_theta"] = float(theta)
    if req.partial_rotary_factor is not None:
        p["partial_rotary_factor"] = float(req.partial_rotary_factor)
    for key, value in req.extra.items():
        p.setdefault(key, value)
    return p


def max_position_embeddings(req: ScaleRequest) -> int:
    """What ``max_position_embeddings`` must say: the target, except for dynamic NTK.

    transformers' ``dynamic`` treats ``max_position_embeddings`` as the trained length and grows the base only past
    it, so it must stay at the original length.
    """
    return req.original_max if req.method == "dynamic" else req.target


def format_hf(req: ScaleRequest) -> dict[str, Any]:
    """Legacy keys (transformers 4.x reads them; 5.x still accepts them): top-level theta + ``rope_scaling``."""
    p = rope_parameters(req)
    theta = p.pop("rope_theta")
    prf = p.pop("partial_rotary_factor", None)
    out: dict[str, Any] = {"rope_theta": theta, "rope_scaling": None if p["rope_type"] == "default" else p}
    if prf is not None:
        out["partial_rotary_factor"] = prf
    out["max_position_embeddings"] = max_position_embeddings(req)
    return out


def format_hf_v5(req: ScaleRequest) -> dict[str, Any]:
    """transformers 5 shape: one ``rope_parameters`` dict with ``rope_theta`` inside."""
    return {"rope_parameters": rope_parameters(req), "max_position_embeddings": max_position_embeddings(req)}


def vllm_overrides(req: ScaleRequest, text_config: bool = False) -> dict[str, Any]:
    """The ``--hf-overrides`` JSON (see :func:`posenc_cli.engines.vllm.rope_overrides`)."""
    from posenc_cli.engines.vllm import rope_overrides

    return rope_overrides(rope_parameters(req), serve_len=req.target, trained_len=req.original_max,
                          text_config=text_config)


def format_vllm(req: ScaleRequest, model: str = "MODEL", text_config: bool = False) -> list[str]:
    """argv for ``vllm serve`` with the overrides and ``--max-model-len``."""
    from posenc_cli.engines.vllm import invocation

    return invocation(model, vllm_overrides(req, text_config), req.target)


def render(req: ScaleRequest, fmt: str, model: str = "MODEL", *, text_config: bool = False) -> tuple[str, list[str]]:
    """The text ``posenc scale`` prints on stdout for ``fmt``, and notes for stderr.

    ``text_config``: the model keeps its rope settings in ``text_config`` (multimodal), where vLLM reads them.
    The engine formats are renderings of the engine models in :mod:`posenc_cli.engines`.
    """
    if fmt == "hf":
        return json.dumps(format_hf(req), indent=2), []
    if fmt == "hf-v5":
        return json.dumps(format_hf_v5(req), indent=2), []
    if fmt == "vllm":
        caveats = []
        if req.method == "dynamic":
            caveats.append("vLLM's dynamic NTK is static: max_trained_positions makes its base equal transformers' "
                           f"at {req.target} positions; shorter sequences keep that base, where transformers grows "
                           "its base from rope_theta")
        return shlex.join(format_vllm(req, model, text_config)), caveats
    if fmt == "sglang":
        from posenc_cli.engines.sglang import request_invocation

        argv, caveats = request_invocation(rope_parameters(req), serve_len=req.target, trained_len=req.original_max,
                                           text_config=text_config, model_name=model)
        return shlex.join(argv), caveats
    if fmt == "llama.cpp":
        from posenc_cli.engines.llamacpp import flags

        f = flags(rope_parameters(req), max_model_len=req.target, arch="ARCH", in_gguf=False)
        return shlex.join(f.argv), f.warnings
    if fmt == "llama-cpp-python":
        from posenc_cli.engines.llamacpp import flags, python_server_argv

        f = flags(rope_parameters(req), max_model_len=req.target, arch="ARCH", in_gguf=False)
        return shlex.join(python_server_argv(f.argv, model)), f.warnings
    raise PosencError(f"--format {fmt!r} is not known; use one of: {', '.join(FORMATS)}")


def patch_config(config: dict[str, Any], req: ScaleRequest, fmt: str) -> dict[str, Any]:
    """A copy of a model's config.json with ``req`` applied; every other key keeps its value and order.

    ``hf`` writes the legacy keys and drops a ``rope_parameters`` dict (transformers would prefer ``rope_scaling``
    anyway, so two disagreeing copies would only mislead); ``hf-v5`` writes ``rope_parameters`` and drops the
    legacy ``rope_scaling`` and top-level ``rope_theta`` for the same reason. A top-level
    ``original_max_position_embeddings`` (Phi-3) takes priority in transformers, so it is updated too.
    """
    if fmt not in ("hf", "hf-v5"):
        raise PosencError(f"writing a config needs --format hf or hf-v5, not {fmt!r}")
    new = dict(config)
    if fmt == "hf":
        update = format_hf(req)
        new.pop("rope_parameters", None)
    else:
        update = format_hf_v5(req)
        new.pop("rope_scaling", None)
        new.pop("rope_theta", None)
    for key, value in update.items():
        new[key] = value
    if fmt == "hf" and (str(new.get("model_type", "")).startswith("gpt_neox") or "rotary_emb_base" in new):
        # GPT-NeoX configs read theta and the rotary fraction only from these legacy names
        new["rotary_emb_base"] = update["rope_theta"]
        if req.partial_rotary_factor is not None:
            new["rotary_pct"] = req.partial_rotary_factor
    if "original_max_position_embeddings" in new:
        new["original_max_position_embeddings"] = req.original_max
    return new


def with_method(req: ScaleRequest, method: str) -> ScaleRequest:
    """The same model and scale under another method (for side-by-side charts and comparisons)."""
    other = replace(req, method=method)
    validate(other)
    return other

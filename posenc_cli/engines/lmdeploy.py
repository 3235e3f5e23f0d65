"""LMDeploy 0.18.0, TurboMind engine (``--backend turbomind``, its default on CUDA): what it computes for a model.

Two halves, proven differently:

* **the parsing is run.** TurboMind reads a model's rope in Python: ``lmdeploy/turbomind/models/utils.py``
  ``parse_rope_param`` (the transformers config object after ``--hf-overrides``, its ``rope_parameters`` when the
  object has one, as every transformers 5 config does, else ``rope_theta`` + ``rope_scaling``) and
  ``copy_rope_config`` (what reaches the C++ ``RopeConfig``). :func:`parse` is posenc's copy of the two, and
  ``tests/engines/test_lmdeploy.py`` runs lmdeploy's own functions from the installed wheel on the corpus and
  compares every field.
* **the kernel is modelled.** The frequencies are computed on the GPU by C++/CUDA that cannot run here, and the 0.18.0
  wheel ships no C++ source. :func:`frequencies` follows the source of the lmdeploy repository at commit
  ``1263d5cd`` (2026-08-21, the newest snapshot available to posenc; its ``parse_rope_param`` and
  ``copy_rope_config`` are identical to 0.18.0's): ``src/turbomind/models/attention_weight.cc``
  (``init_rope_kernel_param``), ``src/turbomind/kernels/attention/rotary_embedding.h`` (``FastRoPE``,
  ``init_default`` / ``init_yarn`` / ``init_llama3``), ``src/turbomind/models/llama/unified_attention_layer.cc``
  (``init_dynamic_ntk``) and ``src/turbomind/models/attention_weight.h`` (``RopeConfig``: ``base``, ``factor`` and
  the YaRN / llama3 fields are float32, ``max_position_embeddings`` an int).

What TurboMind does, per rope type (pairs in rotate-half order after its q/k weight reordering: pair ``j`` turns
features ``j`` and ``j + dim/2`` with ``inv_freq[j] = base ** (-2j / dim)`` before scaling; ``dim`` =
``int(head_dim * partial_rotary_factor)``, the rest pass through):

* default, linear: ``exp2f(2j * (-log2(base) / dim)) / factor`` in float32 (transformers: ``1 / base ** (2j/dim)``;
  the two roundings differ by up to 7.7e-7 relative at base 1e6, within posenc's float32 tolerance).
* llama3: transformers' blend, written as ``smooth = clamp(original / 2pi / (high - low) * freq - low / (high -
  low))``.
* dynamic NTK: the base is computed once per request from its prompt length (``factor * L / M - (factor - 1)``,
  ``M`` = the config's ``max_position_embeddings``) and kept while it generates; transformers recomputes it from the
  whole sequence at every forward. For a prompt of ``L`` tokens the two agree.
* YaRN: with ``original_max_position_embeddings`` in the dict, the factor is ``max_position_embeddings /
  original`` (the config's ``factor`` is read only for the attention factor: ``0.1 ln(factor) + 1``, or
  ``attention_factor``, or the DeepSeek ``mscale`` ratio); the correction range is computed from the *config's*
  ``max_position_embeddings`` (``copy_rope_config`` passes it, not the original) and always floored and ceiled
  (``truncate`` is never read). The Qwen card's patch (yarn x4 from 32k, ``max_position_embeddings`` left at 32k)
  therefore gets factor 1: frequencies unscaled, cos/sin x1.1386 (logits x1.296).
* LongRoPE (``longrope``/``su``) and any other type: the parser raises ``Unsupported rope type`` (will not start).
* mrope (Qwen2-VL, Qwen3.5) is read as default with sections; per-layer rope dicts do not exist in TurboMind (one
  ``AttentionConfig`` per model).

TurboMind runs only the architectures in ``lmdeploy/turbomind/supported_models.py`` (:data:`SUPPORTED_ARCHS`);
lmdeploy serves the others (Gemma, Phi-3, DeepSeek...) with its PyTorch engine (``--backend pytorch``, also the
one it picks without CUDA), which posenc does not model: those are "not modelled". ``--session-len`` is accepted at
any length (lmdeploy only warns past the config's window), so nothing else is needed to serve longer.
``--rope-scaling-factor`` exists in the CLI but TurboMind 0.18 never reads it; ``--hf-overrides`` is merged key by
key into the config (a dict is merged, never replaced: a key can be changed, not removed).
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from posenc_cli.engines.render import served_rope
from posenc_cli.engines.runs import NOT_MODELLED, WILL_NOT_START, EngineRun, GroupRun
from posenc_cli.engines.target import Rendering, Target
from posenc_cli.errors import PosencError
from posenc_cli.files import dumps_json
from posenc_cli.rope.attention_factors import yarn_mscale
from posenc_cli.rope.scaling import max_position_embeddings

if TYPE_CHECKING:  # numpy loads only when a model is run
    import numpy as np
    import numpy.typing as npt

    from posenc_cli.models.model_positions import ModelPositions

NAME = "lmdeploy"
VERSION = "0.18.0"
#: lmdeploy/turbomind/supported_models.py SUPPORTED_ARCHS (0.18.0): the architectures TurboMind runs
SUPPORTED_ARCHS = (
    "Qwen2ForCausalLM", "Qwen2MoeForCausalLM", "Qwen2VLForConditionalGeneration",
    "Qwen2_5_VLForConditionalGeneration", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "InternS2PreviewForConditionalGeneration", "InternS2MobiusForConditionalGeneration", "InternVLChatModel",
    "InternVLForConditionalGeneration", "InternS1ForConditionalGeneration", "LlamaForCausalLM",
    "InternLM2ForCausalLM", "InternLM3ForCausalLM", "Glm4MoeLiteForCausalLM", "GptOssForCausalLM",
    "MixtralForCausalLM")
#: the MLA architecture: its softmax scale and rope dim come from make_mla_config, which posenc does not model
_MLA = ("Glm4MoeLiteForCausalLM",)
_TYPES = ("default", "linear", "dynamic", "yarn", "llama3")


@dataclass(frozen=True)
class TurboMindRope:
    """The C++ ``RopeConfig`` as ``copy_rope_config`` fills it (defaults: the C++ struct's). ``type``: one of
    default, linear, dynamic, yarn, llama3; ``dim``: the rotated features; ``max_position_embeddings``: the
    config's (for YaRN too, not the original length)."""

    type: str
    base: float
    dim: int
    factor: float
    max_position_embeddings: int
    yarn_attention_factor: float = 1.0
    yarn_beta_fast: float = 32.0  # framework fact: TurboMind's RopeConfig default
    yarn_beta_slow: float = 1.0  # framework fact: TurboMind's RopeConfig default
    llama3_low_freq_factor: float = 1.0
    llama3_high_freq_factor: float = 4.0
    llama3_original_max_position_embeddings: int = 0


def parse(rope: dict[str, Any] | None, theta: float, head_dim: int, max_position_embeddings: int,
          partial_rotary_factor: float = 1.0) -> TurboMindRope:
    """posenc's copy of ``parse_rope_param`` + ``copy_rope_config``: ``rope`` is the dict TurboMind reads (the
    config's ``rope_parameters``, else ``rope_scaling``; None: plain RoPE), ``theta`` its base (``rope_theta``
    inside ``rope_parameters`` when that is read). Raises ValueError where lmdeploy raises (an unsupported type)."""
    p = rope or {}
    prf = p.get("partial_rotary_factor")
    dim = int(head_dim * float(prf if prf is not None else partial_rotary_factor))
    # a dict without a type raises in lmdeploy too ("Unsupported rope type: ")
    kind = (p.get("rope_type") or p.get("type") or "") if rope is not None else "default"
    kind = "default" if kind == "mrope" else kind
    factor = p.get("factor", 0.0)
    if kind not in _TYPES:
        raise ValueError(f"Unsupported rope type: {kind}")
    if kind == "default":
        return TurboMindRope("default", theta, dim, 1.0, max_position_embeddings)
    if kind in ("linear", "dynamic"):
        return TurboMindRope(kind, theta, dim, factor, max_position_embeddings)
    if kind == "llama3":
        return TurboMindRope("llama3", theta, dim, factor, max_position_embeddings,
                             llama3_low_freq_factor=p.get("low_freq_factor", 1.0),
                             llama3_high_freq_factor=p.get("high_freq_factor", 1.0),
                             llama3_original_max_position_embeddings=p.get("original_max_position_embeddings", 0))
    attention = p.get("attention_factor")
    if attention is None:
        mscale, mscale_all_dim = p.get("mscale"), p.get("mscale_all_dim")
        if mscale is not None and mscale_all_dim is not None:
            attention = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
        else:
            attention = yarn_mscale(factor)
    if "original_max_position_embeddings" in p:
        factor = max_position_embeddings / p["original_max_position_embeddings"]
    return TurboMindRope("yarn", theta, dim, factor, max_position_embeddings, yarn_attention_factor=attention,
                         yarn_beta_fast=p.get("beta_fast", 32.0),  # framework fact: parse_rope_param's .get
                         yarn_beta_slow=p.get("beta_slow", 1.0))  # framework fact: parse_rope_param's .get


def _dynamic_base(rope: TurboMindRope, prompt_len: int) -> np.float32:
    """``init_dynamic_ntk``: the base for a request of ``prompt_len`` tokens, in float32 as the C++ computes it."""
    import numpy as np

    f32 = np.float32
    base, factor = f32(rope.base), f32(rope.factor)
    if factor > 1 and prompt_len > rope.max_position_embeddings:
        scaled = f32(f32(factor * f32(prompt_len)) / f32(rope.max_position_embeddings)) - f32(factor - f32(1))
        base = f32(base * np.power(f32(scaled), f32(rope.dim / f32(rope.dim - 2.0))))
    return f32(base)


def _yarn_ramp(rope: TurboMindRope) -> tuple[np.float32, np.float32]:
    """``init_rope_kernel_param``'s YaRN ramp (``ramp_inv_factor_div_2``, ``ramp_inv_factor_mul_min``): the
    correction range from ``rope.max_position_embeddings``, floored and ceiled always."""
    import numpy as np

    # emulation: TurboMind's correction range in its float32 arithmetic, not transformers' (rope/yarn_ramp.py)
    f32 = np.float32
    log_base = f32(np.log(f32(rope.base)))  # std::log(float) -> float

    def correction_dim(rotations: float) -> float:
        return float(rope.dim * math.log(rope.max_position_embeddings / (float(f32(rotations)) * 2 * math.pi))
                     / float(f32(2 * log_base)))

    low = max(f32(math.floor(correction_dim(rope.yarn_beta_fast))), f32(0))
    high = min(f32(math.ceil(correction_dim(rope.yarn_beta_slow))), f32(rope.dim - 1))
    if low == high:
        high = f32(high + f32(0.001))
    span = float(high) - float(low)
    return f32(1.0 / span / 2.0), f32(1.0 / span * float(low))


def frequencies(rope: TurboMindRope, seq_len: int) -> tuple[npt.NDArray[np.float32], float]:
    """What TurboMind's kernel computes for ``rope`` on a request of ``seq_len`` prompt tokens: the float32 inverse
    frequency of each pair (``dim // 2``, rotate-half order) and the cos/sin multiplier. The arithmetic follows the
    C++ in float32 step by step; the GPU's ``exp2f`` (2 ulp at most, CUDA's documented bound) is numpy's here, so a
    value may sit up to 2 ulp (2.4e-7 relative) from the GPU's."""
    import numpy as np

    f32 = np.float32
    base = _dynamic_base(rope, seq_len) if rope.type == "dynamic" else f32(rope.base)
    scale_factor = f32(f32(-np.log2(base)) / f32(rope.dim))
    idx = np.arange(0, rope.dim - rope.dim % 2, 2).astype(f32)
    freq = np.exp2((idx * scale_factor).astype(f32)).astype(f32)
    factor = f32(rope.factor)
    inv_factor = f32(1.0) if rope.type == "dynamic" or factor == 0 else f32(1.0 / float(factor))
    if rope.type == "yarn":
        div2, mul_min = _yarn_ramp(rope)
        alpha = np.clip((idx * div2 - mul_min).astype(f32), 0, 1).astype(f32)
        inv = (freq - freq * alpha * (f32(1) - inv_factor)).astype(f32)
        return inv, float(rope.yarn_attention_factor)
    if rope.type == "llama3":
        inv_diff = f32(1.0 / float(f32(rope.llama3_high_freq_factor) - f32(rope.llama3_low_freq_factor)))
        slope = f32(rope.llama3_original_max_position_embeddings / (2 * math.pi) * float(inv_diff))
        beta = f32(f32(rope.llama3_low_freq_factor) * inv_diff)
        smooth = np.clip((slope * freq - beta).astype(f32), 0, 1).astype(f32)
        inv = ((f32(1) - smooth) * freq * inv_factor + smooth * freq).astype(f32)
        return inv, 1.0
    return (inv_factor * freq).astype(f32), 1.0


def _text(cfg: dict[str, Any]) -> dict[str, Any]:
    """The config TurboMind's model class reads rope settings from: the whole config, or its ``text_config`` /
    ``llm_config`` (a multimodal wrapper)."""
    for key in ("text_config", "llm_config"):
        if isinstance(cfg.get(key), dict):
            return dict(cfg[key])
    return cfg


def refusal(cfg: dict[str, Any], supported: tuple[str, ...] = SUPPORTED_ARCHS) -> str | None:
    """Why posenc has no TurboMind numbers for this config (None: it has); ``supported``: the architectures
    TurboMind runs."""
    archs = cfg.get("architectures") or []
    arch = archs[0] if archs else None
    if arch not in supported:
        return (f"{NOT_MODELLED}: TurboMind does not run {arch or 'a config without architectures'} (lmdeploy "
                "serves it with its PyTorch engine, which posenc does not model)")
    if arch in _MLA:
        return f"{NOT_MODELLED}: {arch} uses TurboMind's MLA attention (make_mla_config), which posenc does not model"
    return None


def _nesting(cfg: dict[str, Any]) -> str | None:
    """Where ``--hf-overrides`` must put the text model's keys: lmdeploy merges them into the config TurboMind's
    model class gets, the whole config for a multimodal aggregate (it has a ``vision_config``), else the text config
    (``source_model_config`` unwraps a text-only wrapper). transformers builds a ``text_config`` for a flat
    multimodal file too (Qwen2-VL keeps its text keys at the top), and that is what the model class reads."""
    if "vision_config" not in cfg:
        return None
    return "llm_config" if isinstance(cfg.get("llm_config"), dict) else "text_config"


def served(p: dict[str, Any], window: int, cfg: dict[str, Any]) -> tuple[dict[str, Any], int, dict[str, Any] | None]:
    """The rope dict and ``max_position_embeddings`` TurboMind reads for the rope dict ``p`` of a model whose window is
    ``window``, and the ``--hf-overrides`` posenc adds to get them (None: none needed). YaRN with an original length
    is overridden (:func:`overrides`) unless it is the identity (factor 1 over its own window)."""
    if p.get("rope_type") != "yarn" or "original_max_position_embeddings" not in p or "factor" not in p:
        return p, window, None
    original = int(p["original_max_position_embeddings"])
    if window == original and float(p["factor"]) == 1.0:
        return p, window, None
    where = _nesting(cfg)
    over = overrides(p, trained_len=original, window=window, nested=where is not None)
    if where is not None and where != "text_config":
        over = {where: over.pop("text_config")}
    body = over[where] if where is not None else over
    return body["rope_parameters"], int(body["max_position_embeddings"]), over


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    """What TurboMind computes serving ``max_model_len`` (``--session-len``) for a prompt of ``seq_len`` tokens
    (default: that long): each rope group's dict, with posenc's ``--hf-overrides`` where YaRN needs them
    (:func:`served`), parsed as TurboMind parses it (:func:`parse`), then its kernel (:func:`frequencies`)."""
    from posenc_cli.models.record import rope_groups  # numpy: only when a model is run

    why = refusal(cfg)
    groups_of = rope_groups(model) if why is None else []
    dicts = {json_key(g.spec.params) for g in groups_of}
    over = None
    if why is None and len(dicts) > 1:
        why = f"{NOT_MODELLED}: TurboMind has one rope per model, this config one per layer type"
    groups, warnings = [], []
    for g in groups_of if why is None else []:
        p, window, over = served(dict(g.spec.params), model.max_position_embeddings or 0, cfg)
        try:
            # framework fact: this package's own default base (10000), read as it reads it
            rope = parse(p, float(p.get("rope_theta", 10000.0)), g.spec.head_dim, window)
        except ValueError as exc:
            why = f"{WILL_NOT_START}: TurboMind's parser raises {exc}"
            break
        inv, attention = frequencies(rope, seq_len or max_model_len)
        groups.append(GroupRun(g.name, inv, attention, model.softmax_scale))
        warnings += _warnings(dict(g.spec.params), rope, over is not None)
    argv = invocation("MODEL", over, max_model_len)
    if why is not None:
        return EngineRun(NAME, VERSION, max_model_len, [], argv, refusal=why)
    return EngineRun(NAME, VERSION, max_model_len, groups, argv, accepts=max_model_len,
                     warnings=list(dict.fromkeys(warnings)))


def json_key(p: Any) -> str:
    return dumps_json(p, indent=None)


def _warnings(p: dict[str, Any], rope: TurboMindRope, overridden: bool) -> list[str]:
    out = []
    if overridden:
        out.append("TurboMind takes YaRN's factor as max_position_embeddings / original and its correction range from "
                   "max_position_embeddings: the --hf-overrides set both to what transformers uses")
    if rope.type == "yarn" and p.get("truncate") is False:
        out.append("TurboMind always rounds YaRN's correction range (truncate: false is not read)")
    if rope.type == "dynamic":
        out.append("TurboMind's dynamic NTK base is fixed per request at its prompt length (transformers grows it "
                   "with every generated token)")
    return out


# --- scale --engine lmdeploy --------------------------------------------------------------------------------------

def overrides(rope: dict[str, Any], *, trained_len: int, window: int, nested: bool) -> dict[str, Any]:
    """The ``--hf-overrides`` that make TurboMind parse ``rope`` (a transformers 5 dict, ``rope_theta`` inside) as
    transformers computes it.

    YaRN: TurboMind takes the factor as ``max_position_embeddings / original`` and the correction range from
    ``max_position_embeddings``, so ``max_position_embeddings`` is set to the trained length (the range
    transformers computes) and ``original_max_position_embeddings`` to ``trained / factor`` (the factor); the config's
    ``factor`` still gives the attention factor. Other types: the dict and transformers' window (dynamic keeps the
    trained length, its ``M``). The dict is carried whole (``rope_theta`` too): lmdeploy merges it key by key into the
    config, and with transformers 4 the config object has no ``rope_parameters`` until the override adds it."""
    p = dict(rope)
    if p.get("rope_type") == "yarn" and "factor" in p:
        original = trained_len / float(p["factor"])
        p["original_max_position_embeddings"] = int(original) if original.is_integer() else original
        window = trained_len
    body: dict[str, Any] = {"rope_parameters": p, "max_position_embeddings": window}
    return {"text_config": body} if nested else body


def invocation(model_name: str, over: dict[str, Any] | None, session_len: int) -> list[str]:
    argv = ["lmdeploy", "serve", "api_server", model_name, "--backend", "turbomind", "--session-len", str(session_len)]
    return argv + (["--hf-overrides", dumps_json(over, indent=None)] if over else [])


def render(r: Rendering) -> tuple[str, list[str]]:
    """``--engine lmdeploy``: ``lmdeploy serve api_server`` on TurboMind with the request as ``--hf-overrides``."""
    req, caveats = r.req, []
    rope = served_rope(r)
    if any(isinstance(v, dict) for v in rope.values()):
        raise PosencError("--engine lmdeploy: TurboMind has one rope per model, this model one per layer type "
                          "(and TurboMind does not run its architecture)")
    if r.config is not None:
        why = refusal(r.config)
        if why is not None:
            caveats.append(why)
    kind = rope.get("rope_type", "default")
    if kind not in _TYPES and kind != "mrope":
        caveats.append(f"{WILL_NOT_START}: TurboMind's parser raises Unsupported rope type: {kind}")
    if kind == "yarn" and rope.get("truncate") is False:
        caveats.append("TurboMind always rounds YaRN's correction range (truncate: false is not read)")
    if kind == "dynamic":
        caveats.append("TurboMind's dynamic NTK base is fixed per request at its prompt length")
    where = _nesting(r.config) if r.config is not None else None
    over = overrides(rope, trained_len=req.original_max, window=max_position_embeddings(req), nested=where is not None)
    if where is not None and where != "text_config":
        over = {where: over.pop("text_config")}
    return shlex.join(invocation(r.model, over, req.target)), caveats


TARGET = Target(
    NAME, "LMDeploy (TurboMind)", "lmdeploy", VERSION, render, run,
    proven_by="its rope parser run (lmdeploy/turbomind/models/utils.py); the CUDA kernel modelled from its C++ source",
    cannot_express="YaRN with an original length (factor = `max_position_embeddings / original`, correction range "
                   "from `max_position_embeddings`: posenc's override sets both); YaRN `truncate: false` (always "
                   "rounded); LongRoPE (will not start); dynamic NTK past the prompt (base fixed per request); "
                   "architectures outside TurboMind's list (PyTorch engine: not modelled)")

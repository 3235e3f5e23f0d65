"""vLLM (:data:`VERSION`, the one place its version is written: the tests' harness and ``.ci/run`` read it): what
its config path and rotary classes compute (``vllm/config/model.py``,
``vllm/transformers_utils/config.py``, ``vllm/model_executor/layers/rotary_embedding/``).

* ``--hf-overrides`` replaces a dict-valued key whole, so the override carries the model's complete rope dict,
  ``rope_theta`` and every model-specific key included; multimodal models read rope settings from ``text_config``,
  so the override is nested there.
* Length check: ``max_position_embeddings`` is multiplied by ``factor`` for every rope type except su, longrope,
  llama3, yarn and the DeepSeek ones, and never for a gemma3 model type (vLLM takes Gemma 3's 128k as already
  scaled); a longer ``--max-model-len`` needs ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``. So a file patched as the Qwen cards
  say (yarn x4 from 32k, ``max_position_embeddings`` left at 32k) serves 128k (:mod:`posenc_cli.rope.windows`) but vLLM
  admits 32k without the variable.
* default, linear, llama3, yarn: transformers' formulas (yarn reads beta, mscale, attention_factor and truncate).
* DeepSeek V2/V3 (and Kimi K2) models turn any scaled rope into ``deepseek_yarn``: correction range always floored
  and ceiled (``truncate`` ignored), ``attention_factor`` ignored, cos/sin magnitude
  ``mscale(s, mscale)/mscale(s, mscale_all_dim)`` with defaults 1 and 0; the softmax scale as transformers.
* dynamic NTK is static: the base is computed once from ``max_position_embeddings`` and ``max_trained_positions``
  (default: the same), so as shipped it is plain RoPE and the table has ``max_position_embeddings`` rows.
* longrope is static: the long factors for every sequence once ``max_model_len`` exceeds the original length; the
  magnitude comes from ``max_position_embeddings / original`` (or ``short_mscale``/``long_mscale``), not from
  ``attention_factor``.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from posenc_cli.engines.render import in_text_config, served_rope
from posenc_cli.engines.runs import EngineRun, GroupRun, static_longrope
from posenc_cli.engines.target import Rendering, Target
from posenc_cli.files import dumps_json
from posenc_cli.rope.attention_factors import yarn_mscale
from posenc_cli.rope.scaling import rope_parameters

if TYPE_CHECKING:  # the reader loads only when an engine runs a model
    from posenc_cli.models.model_positions import ModelPositions
    from posenc_cli.models.record import RopeGroup

NAME = "vllm"
VERSION = "0.34.0"
ENV_LONG = "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
_NOT_MULTIPLIED = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
DEEPSEEK = ("deepseek_v2", "deepseek_v3", "deepseek_v32")


def derived_max_len(model: ModelPositions) -> int:
    """The longest ``--max-model-len`` vLLM accepts without the override variable: ``max_position_embeddings`` times
    the factor of the rope groups whose type it multiplies (the last one wins, as in its loop over the per-layer
    dicts); never for a gemma3 model type, whose window vLLM takes as already scaled, nor for the DeepSeek models,
    whose scaled rope it turns into deepseek_yarn."""
    base = model.max_position_embeddings or 0
    text_type = model.text_model_type or model.model_type or ""
    if "gemma3" in text_type or text_type in DEEPSEEK:
        return base
    factor = 1.0
    for layer in model.layers:
        params = layer.params
        if params.get("rope_type", "default") not in _NOT_MULTIPLIED and "factor" in params:
            factor = float(params["factor"])
    return int(base * factor)


def group(model: ModelPositions, g: RopeGroup, max_model_len: int, notes: list[str]) -> GroupRun:
    """What vLLM computes for the rope group ``g`` of ``model`` (from the rope record) serving ``max_model_len``."""
    from posenc_cli.rope.frequencies import compute, default_inv_freq, dynamic_base

    spec, p = g.spec, g.spec.params
    rope_type = p.get("rope_type", "default")
    if model.text_model_type in DEEPSEEK and rope_type != "default":
        # deepseek_yarn: truncate ignored (always rounded), attention_factor ignored
        s = float(p.get("factor", 1.0))
        params = {k: v for k, v in p.items() if k not in ("truncate", "attention_factor")}
        params["attention_factor"] = yarn_mscale(s, float(p.get("mscale") or 1.0)) / yarn_mscale(
            s, float(p.get("mscale_all_dim") or 0.0))
        freqs = compute(replace(spec, params={**params, "rope_type": "yarn"}), max_model_len)
        if p.get("truncate") is False or p.get("attention_factor") is not None:
            notes.append("DeepSeek models run deepseek_yarn, which ignores truncate and attention_factor")
        return GroupRun(g.name, freqs.inv_freq, freqs.attention_factor, model.softmax_scale)
    if rope_type == "dynamic":
        d = spec.rotary_dim
        trained = int(p.get("max_trained_positions", spec.max_position_embeddings))
        base = dynamic_base(spec.theta, float(p["factor"]), spec.max_position_embeddings, trained, d)
        return GroupRun(g.name, default_inv_freq(base, d), 1.0, model.softmax_scale)
    if rope_type == "longrope":
        group = static_longrope(g, max_model_len)
        group.softmax_scale = model.softmax_scale
        return group
    freqs = compute(spec, max_model_len, top_level=model.top_level)
    return GroupRun(g.name, freqs.inv_freq, freqs.attention_factor, model.softmax_scale)


def rope_overrides(rope: dict[str, Any], *, serve_len: int, trained_len: int, text_config: bool) -> dict[str, Any]:
    """The ``--hf-overrides`` for a rope dict served at ``serve_len``: the whole dict (vLLM replaces it) and the
    window, nested under ``text_config`` where vLLM reads a multimodal model's rope settings.

    Dynamic NTK: vLLM's base is static, computed from ``max_position_embeddings`` over ``max_trained_positions``;
    with the serving length over the trained length it equals transformers' base at the serving length (and its
    table then has a row for every position served).
    """
    nested = bool(rope) and all(isinstance(v, dict) for v in rope.values())  # one dict per layer type (Gemma 3)
    p: dict[str, Any] = {k: dict(v) for k, v in rope.items()} if nested else dict(rope)
    subs: list[dict[str, Any]] = list(p.values()) if nested else [p]
    for sub in subs:
        if sub.get("rope_type") == "dynamic":
            sub["max_trained_positions"] = trained_len
    body: dict[str, Any] = {"rope_parameters": p, "max_position_embeddings": serve_len}
    return {"text_config": body} if text_config else body


def overrides(model: ModelPositions, cfg: dict[str, Any], max_model_len: int) -> dict[str, Any] | None:
    """The overrides that make vLLM serve ``model`` as transformers computes it, or None when none is needed
    (only dynamic NTK past its trained length needs them)."""
    if len(model.layers) != 1:
        return None
    p = model.layers[0].params
    trained = model.max_position_embeddings or 0
    if p.get("rope_type") != "dynamic" or max_model_len <= trained:
        return None
    from posenc_cli.models.config_keys import text_config

    _, _, where = text_config(cfg)
    return rope_overrides(p, serve_len=max_model_len, trained_len=trained, text_config=where == "text_config")


def invocation(model_name: str, over: dict[str, Any] | None, max_model_len: int) -> list[str]:
    argv = ["vllm", "serve", model_name]
    if over:
        argv += ["--hf-overrides", dumps_json(over, indent=None)]
    return argv + ["--max-model-len", str(max_model_len)]


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    """What the engine computes serving ``max_model_len``, for a sequence of ``seq_len`` tokens (default: that long).

    ``cfg``, the raw config, is read here because vLLM reads it: it merges ``--hf-overrides`` into the raw config
    and reads the result again (modelled by describing the merged config); the groups then come from the rope
    record of what it serves."""
    from posenc_cli.models.record import rope_groups  # numpy: only when a model is run

    notes: list[str] = []
    over = overrides(model, cfg, max_model_len)
    served = model
    if over is not None:  # what vLLM reads after the overrides
        from posenc_cli.models.model_positions import describe

        merged = dict(cfg)
        body = over.get("text_config", over)
        target = dict(cfg.get("text_config") or {}) if "text_config" in over else merged
        target.pop("rope_scaling", None)
        target.update(body)
        if "text_config" in over:
            merged["text_config"] = target
        served = describe(merged)
    groups = [group(served, g, max_model_len, notes) for g in rope_groups(served)]
    accepts = derived_max_len(served)
    needs = [ENV_LONG] if max_model_len > accepts else []
    warnings = list(dict.fromkeys(notes))
    first = served.layers[0].params if served.layers else {}
    if first.get("rope_type") == "dynamic" and over is None and max_model_len > (model.max_position_embeddings or 0):
        warnings.append("vLLM's dynamic NTK is static and its table has max_position_embeddings rows")
    if first.get("rope_type") == "longrope" and max_model_len > int(first["original_max_position_embeddings"]):
        warnings.append("vLLM uses the long factors for every sequence (transformers switches at the original length)")
    argv = invocation("MODEL", over, max_model_len)
    if needs:
        argv = ["env", *needs, *argv]
    return EngineRun(NAME, VERSION, max_model_len, groups, argv, accepts=accepts, needs=needs,
                     warnings=warnings)


def command_line(run_: EngineRun) -> str:
    return shlex.join(run_.invocation)


def render(r: Rendering) -> tuple[str, list[str]]:
    """``--engine vllm``: ``vllm serve`` with the model's whole rope dict after the request as ``--hf-overrides``."""
    req = r.req
    caveats = []
    if rope_parameters(req).get("rope_type") == "dynamic":
        caveats.append("vLLM's dynamic NTK is static: max_trained_positions makes its base equal transformers' "
                       f"at {req.target} positions; shorter sequences keep that base, where transformers grows "
                       "its base from rope_theta")
    over = rope_overrides(served_rope(r, replaces_dicts=True), serve_len=req.target, trained_len=req.original_max,
                          text_config=in_text_config(r))
    return shlex.join(invocation(r.model, over, req.target)), caveats


TARGET = Target(
    NAME, "vLLM", "vllm", VERSION, render, run,
    proven_by="its config path and rotary classes, CPU wheel",
    cannot_express="dynamic NTK (one static base; posenc's override makes it equal at the serving length); LongRoPE "
                   "(long factors for every sequence once `--max-model-len` passes the original length); dual-chunk "
                   "attention (no backend left: will not start)")

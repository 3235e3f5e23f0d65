"""ExLlamaV3 1.6.5: what its rope code computes for a model (``exllamav3/util/rope.py`` ``RoPE``, fed by
``exllamav3/model/config.py`` ``Config.read_rope_settings_default``).

ExLlamaV3's inverse frequencies are computed in torch in Python (``RoPE.__init__``); only applying them to q/k runs
in its CUDA extension. Its tests (``tests/engines/test_exllamav3.py``) run that Python on this CPU: the extension is
never called by it, and the harness loads ``rope.py`` without its one import of the extension (which would compile
CUDA). So the frequencies are **run**, not modelled; ``llama_4_scaling_beta``'s per-position query scaling is applied
in the CUDA attention kernel and is not part of these numbers.

It reads the raw config.json (not transformers' config object): ``rope_theta`` (or ``rope_parameters.rope_theta``),
the rope dict from ``rope_scaling`` (first) or ``rope_parameters``, ``partial_rotary_factor``, ``rotary_dim``,
``max_position_embeddings`` and a top-level ``original_max_position_embeddings``. Per rope type:

* default / mrope, linear, llama3, proportional: transformers' formulas (llama3's keys default to 8 / 1 / 4 / 8192).
* YaRN: with ``original_max_position_embeddings`` in the dict the factor is ``max_position_embeddings /
  original`` (the dict's ``factor`` is not read), as TurboMind; the correction range is from the original and
  ``truncate`` is honoured; the attention factor is ``attention_factor``, else ``0.1 ln(factor) + 1`` of that factor
  (1 when ``llama_4_scaling_beta`` is set; the DeepSeek mscale ratio only for architectures that ask for it).
* LongRoPE / su: static: the long factors when ``max_position_embeddings`` passes the original length, for every
  sequence; magnitude ``sqrt(1 + ln(mpe/original) / ln(original))`` (``attention_factor`` and the mscale keys are
  not read).
* dynamic NTK (and any other type): ``RoPE`` raises ``Unknown rope_type`` (will not start).

posenc models the architectures whose config class reads the rope with ``read_rope_settings_default(RopeStyle.NEOX)``
and nothing else (:data:`PLAIN_ARCHS`, checked against the installed source by the tests); the others (Gemma's
two rope settings, DeepSeek's mscale ratio, multimodal sub-configs...) are "not modelled". The context length is the
cache's: ``model_init``'s ``--cache_size`` (``Cache(model, max_num_tokens=N)``); nothing limits it to the window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from posenc_cli.engines.runs import NOT_MODELLED, WILL_NOT_START, EngineRun, GroupRun
from posenc_cli.engines.target import Rendering, Target
from posenc_cli.errors import PosencError
from posenc_cli.files import dumps_config
from posenc_cli.rope.attention_factors import longrope_attention_factor, yarn_mscale
from posenc_cli.rope.rope_types import rope_type_of
from posenc_cli.rope.scaling import max_position_embeddings, rope_parameters

if TYPE_CHECKING:  # numpy loads only when a model is run
    import numpy as np
    import numpy.typing as npt

    from posenc_cli.models.model_positions import ModelPositions

NAME = "exllamav3"
VERSION = "1.6.5"
#: architectures whose ExLlamaV3 config class reads the rope with read_rope_settings_default(RopeStyle.NEOX) only
PLAIN_ARCHS = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "MixtralForCausalLM",
               "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "GptOssForCausalLM", "Phi3ForCausalLM",
               "Ministral3ForCausalLM", "SmolLM3ForCausalLM")
_TYPES = ("default", "mrope", "proportional", "llama3", "linear", "yarn", "longrope", "su")


def _read(cfg: dict[str, Any], kind: type, keys: list[str], default: Any) -> Any:
    """``exllamav3.util.file.read_dict`` with ``wrong_type_as_missing``: the first key (``a->b`` nested) whose value
    is not None and of type ``kind`` (an int read as a float; a whole float as an int), else ``default``."""
    for key in keys:
        where: Any = cfg
        *path, last = key.split("->")
        for sub in path:
            where = where.get(sub) if isinstance(where, dict) else None
        value = where.get(last) if isinstance(where, dict) else None
        if value is None:
            continue
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if kind is int and isinstance(value, float) and value == int(value):
            value = int(value)
        if isinstance(value, kind):
            return value
        raise TypeError(f"Value for {last} is not of expected type: [{kind}]")
    return default


def settings(cfg: dict[str, Any], head_dim: int) -> dict[str, Any]:
    """posenc's copy of ``read_rope_settings_default(RopeStyle.NEOX)``: the ``RopeSettings`` fields it fills from the
    raw config (``head_dim``: the architecture's, ``head_dim`` or ``hidden_size // num_attention_heads``)."""
    def lenient(kind: type, keys: list[str], default: Any) -> Any:
        try:
            return _read(cfg, kind, keys, default)
        except TypeError:
            return default

    return {"head_dim": head_dim,
            # framework fact: this package's own default base (10000), read as it reads it
            "rope_theta": lenient(float, ["rope_theta", "rope_parameters->rope_theta"], 10000.0),
            "rope_scaling": _read(cfg, dict, ["rope_scaling", "rope_parameters"], None),
            "rotary_dim": _read(cfg, int, ["rotary_dim"], None),
            "partial_rotary_factor": lenient(float, ["partial_rotary_factor",
                                                     "rope_parameters->partial_rotary_factor"], 1.0),
            "max_position_embeddings": _read(cfg, int, ["max_position_embeddings"], None),
            "original_max_position_embeddings": _read(cfg, int, ["original_max_position_embeddings"], None)}


def _yarn(s: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """``RoPE._rope_params_yarn``: the transformers yarn dict that gives its frequencies, and its attention factor."""
    rs, window = s["rope_scaling"], s["max_position_embeddings"]
    if window is None:
        raise ValueError("YaRN scaling requires explicit max_position_embeddings")
    original = rs.get("original_max_position_embeddings")
    factor = window / int(original) if original is not None else rs.get("factor")
    original = int(original) if original is not None else window
    attention = rs.get("attention_factor")
    if attention is None:
        attention = 1.0 if rs.get("llama_4_scaling_beta") else yarn_mscale(float(factor))
    params = {"rope_type": "yarn", "rope_theta": s["rope_theta"], "factor": float(factor),
              "original_max_position_embeddings": original,
              "beta_fast": float(rs.get("beta_fast", 32)),  # framework fact: exllamav3's rope_scaling.get defaults
              "beta_slow": float(rs.get("beta_slow", 1)),  # framework fact: (a null stays null there)
              "truncate": rs.get("truncate", True),
              "attention_factor": attention}
    return params, float(attention)


def frequencies(s: dict[str, Any]) -> tuple[npt.NDArray[np.float32], float]:
    """What ``RoPE(device, RopeSettings(**s))`` computes: ``inv_freq`` (float32, ``dim // 2`` pairs, rotate-half)
    and ``attn_factor``. Raises ValueError where ExLlamaV3 does (an unknown rope type)."""
    from posenc_cli.rope.frequencies import RopeSpec, compute

    rs = s["rope_scaling"] or {}
    kind = rope_type_of(rs, None) if s["rope_scaling"] is not None else None
    # the rotated features as the spec's head dim: every type but proportional turns `dim` of them
    dim = s["rotary_dim"] or int(s["head_dim"] * s["partial_rotary_factor"])
    base = {"rope_theta": s["rope_theta"]}
    if kind in (None, "default", "mrope"):
        return compute(RopeSpec({**base, "rope_type": "default"}, dim, 0)).inv_freq, 1.0
    if kind not in _TYPES:
        raise ValueError(f"Unknown rope_type: {kind}")
    if kind == "linear":
        return compute(RopeSpec({**base, "rope_type": "linear", "factor": rs.get("factor", 1.0)}, dim, 0)).inv_freq, 1.0
    if kind == "llama3":
        p = {**base, "rope_type": "llama3", "factor": rs.get("factor", 8.0),
             "low_freq_factor": rs.get("low_freq_factor", 1.0), "high_freq_factor": rs.get("high_freq_factor", 4.0),
             "original_max_position_embeddings": rs.get("original_max_position_embeddings", 8192)}
        return compute(RopeSpec(p, dim, 0)).inv_freq, 1.0
    if kind == "proportional":
        p = {"rope_theta": s["rope_theta"], "partial_rotary_factor": s["partial_rotary_factor"],
             "rope_type": "proportional", "factor": rs.get("factor", 1.0)}
        return compute(RopeSpec(p, s["head_dim"], 0)).inv_freq, 1.0
    if kind == "yarn":
        params, attention = _yarn(s)
        return compute(RopeSpec({**base, **params}, dim, 0)).inv_freq, attention
    window = s["max_position_embeddings"]
    original = rs.get("original_max_position_embeddings", s["original_max_position_embeddings"])
    p = {**base, "rope_type": "longrope", "factor": 1.0, "original_max_position_embeddings": original,
         "long_factor": rs.get("long_factor"), "short_factor": rs.get("short_factor")}
    inv = compute(RopeSpec(p, dim, window), original + 1 if window > original else original).inv_freq
    return inv, longrope_attention_factor({}, window / original, original)


def refusal(cfg: dict[str, Any]) -> str | None:
    """Why posenc has no ExLlamaV3 numbers for this config (None: it has)."""
    archs = cfg.get("architectures") or []
    arch = archs[0] if archs else None
    if arch not in PLAIN_ARCHS:
        return (f"{NOT_MODELLED}: posenc models ExLlamaV3 only for the architectures that read their rope with "
                f"read_rope_settings_default(RopeStyle.NEOX) alone, not {arch or 'a config without architectures'}")
    return None


def head_dim_of(cfg: dict[str, Any]) -> int | None:
    """The architectures' ``head_dim``: the config's, else ``hidden_size // num_attention_heads`` (None: the config
    has neither, and ExLlamaV3's config class stops on the missing key)."""
    if isinstance(cfg.get("head_dim"), int) and cfg["head_dim"]:
        return int(cfg["head_dim"])
    hidden, heads = cfg.get("hidden_size"), cfg.get("num_attention_heads")
    return hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads else None


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    """What ExLlamaV3 computes with a cache of ``max_model_len`` tokens (static: ``seq_len`` changes nothing)."""
    from posenc_cli.models.record import rope_groups  # numpy: only when a model is run

    argv = invocation("MODEL", max_model_len)
    why = refusal(cfg)
    head_dim = head_dim_of(cfg)
    if why is None and head_dim is None:
        why = f"{WILL_NOT_START}: ExLlamaV3 reads head_dim, or hidden_size and num_attention_heads, which are missing"
    if why is not None or head_dim is None:
        return EngineRun(NAME, VERSION, max_model_len, [], argv, refusal=why)
    try:
        inv, attention = frequencies(settings(cfg, head_dim))
    except ValueError as exc:
        return EngineRun(NAME, VERSION, max_model_len, [], argv, refusal=f"{WILL_NOT_START}: ExLlamaV3 raises {exc}")
    groups = [GroupRun(g.name, inv, attention, model.softmax_scale) for g in rope_groups(model)]
    return EngineRun(NAME, VERSION, max_model_len, groups, argv, accepts=max_model_len, warnings=_warnings(cfg))


def _warnings(cfg: dict[str, Any]) -> list[str]:
    rs = _read(cfg, dict, ["rope_scaling", "rope_parameters"], None) or {}
    kind = rope_type_of(rs, None)
    out = []
    if kind == "yarn" and "original_max_position_embeddings" in rs:
        out.append("ExLlamaV3's YaRN factor is max_position_embeddings / original (the dict's factor is not read)")
    if kind in ("longrope", "su"):
        out.append("ExLlamaV3 picks LongRoPE's factors once, from max_position_embeddings, for every sequence")
    if rs.get("llama_4_scaling_beta"):
        out.append("llama_4_scaling_beta scales queries per position in ExLlamaV3's CUDA kernel (not compared)")
    return out


def invocation(model_name: str, cache_size: int) -> list[str]:
    """ExLlamaV3's own loader (``exllamav3.model_init`` arguments, as its examples take them)."""
    return ["python", "examples/chat.py", "-m", model_name, "--cache_size", str(cache_size)]


def render(r: Rendering) -> tuple[str, list[str]]:
    """``--engine exllamav3``: the config.json keys ExLlamaV3 reads (legacy ``rope_scaling``, which it reads before
    ``rope_parameters``), and the cache size as a caveat."""
    req = r.req
    p = rope_parameters(req)
    kind = p.get("rope_type", "default")
    if kind not in _TYPES:
        raise PosencError(f"--engine exllamav3: ExLlamaV3 has no {kind} rope (its RoPE raises Unknown rope_type); "
                          "use yarn or linear")
    theta = p.pop("rope_theta")
    prf = p.pop("partial_rotary_factor", None)
    keys: dict[str, Any] = {"rope_theta": theta, "rope_scaling": None if kind == "default" and len(p) == 1 else p}
    if prf is not None:
        keys["partial_rotary_factor"] = prf
    keys["max_position_embeddings"] = max_position_embeddings(req)
    caveats = [f"ExLlamaV3 reads these from config.json (rope_scaling before rope_parameters: replace both); load "
               f"with a cache of {req.target} tokens (--cache_size {req.target})"]
    if r.config is not None:
        why = refusal(r.config)
        if why is not None:
            caveats.append(why)
    return dumps_config(keys), caveats


TARGET = Target(
    NAME, "ExLlamaV3", "exllamav3", VERSION, render, run, prints_config=True,
    proven_by="its RoPE class and config reader run on CPU (the CUDA extension not loaded)",
    cannot_express="dynamic NTK (will not start); YaRN factor = `max_position_embeddings / original` (posenc's keys "
                   "agree); LongRoPE (long factors for every sequence once the window passes the original length); "
                   "architectures with their own rope reading (not modelled)")

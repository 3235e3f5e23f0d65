"""MLX-LM 0.32.2 (with mlx 0.32.4): what its model classes compute from a config.json (``mlx_lm/utils.py``
``load_model``, each ``mlx_lm/models/<model>.py``'s ``ModelArgs`` and ``mlx_lm/models/rope_utils.py``), as measured
on mlx's CPU backend by ``tests/engines/test_mlx_lm.py`` (:mod:`posenc_cli.engines.installed.mlx_lm` runs it).

mlx-lm has no rope flag and no override: it reads the config.json next to the weights, one model file per
``model_type``, each with its own ``ModelArgs`` (keys outside it are dropped by ``from_dict``). So the rope is what
that model file reads:

* Legacy keys only, in most model files (llama, mistral, qwen2, gpt_oss, deepseek_v3, phi3, gemma3): top-level
  ``rope_theta`` and ``rope_scaling``. A transformers 5 file with only ``rope_parameters`` runs with the file's
  ``ModelArgs`` default theta (llama: 1e4) and no scaling, silently. qwen3 reads ``rope_parameters`` too.
  mixtral and qwen3_moe never read ``rope_scaling`` (plain RoPE whatever it says).
* ``initialize_rope``: default and linear (``nn.RoPE``, ``scale = 1/factor``), dynamic (the base transformers uses
  for the whole sequence, per forward: the same), llama3, YaRN (``YarnRoPE``), LongRoPE (``SuScaledRoPE``).
* YaRN: the correction range is always floored and ceiled (``truncate: false`` ignored); the cos/sin magnitude is
  ``mscale(s, mscale) / mscale(s, mscale_all_dim)`` (defaults 1 and 0), so an explicit ``attention_factor`` is
  ignored; ``original_max_position_embeddings`` defaults to 4096 and the betas to 32 and 1.
* LongRoPE (``SuScaledRoPE``): the long factors at every length (transformers: the short ones up to the original
  length); the magnitude ``long_mscale`` or ``sqrt(1 + ln(mpe / original) / ln(original))``. phi3 reads the original
  length from the top-level key (default 4096) and needs ``rope_scaling.type``.
* Layout: ``traditional`` (``rope_traditional``, default false) pairs ``2i, 2i+1`` (interleaved); false is rotate-half
  as transformers. DeepSeek V3 is traditional, as transformers' interleaved DeepSeek rope.
* Inverse frequencies given as a base are computed by mlx's rope kernel (``exp`` of a float32 product): measured on
  the CPU backend up to 1.5e-6 relative from transformers' float32 ``1 / base ** (2i / d)``, a backend-dependent
  rounding of the same number (Metal has its own ``exp``). This model (and the installed run) reports the base's
  frequencies as transformers computes them; the tests check the kernel's angles within 2e-6.

Only the model files listed in :data:`READERS` are modelled; another model file mlx-lm has is "not modelled", a
``model_type`` it has no file for "will not start" (``load_model`` raises "Model type ... not supported").
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from posenc_cli.engines.mlx_lm_files import model_file
from posenc_cli.engines.runs import NOT_MODELLED, WILL_NOT_START, EngineRun, GroupRun
from posenc_cli.engines.target import Rendering, Target
from posenc_cli.errors import PosencError
from posenc_cli.files import dumps_config, dumps_json
from posenc_cli.rope.attention_factors import longrope_attention_factor, yarn_mscale, yarn_mscale_for
from posenc_cli.rope.rope_types import param
from posenc_cli.rope.yarn_ramp import yarn_correction_range

if TYPE_CHECKING:  # the reader loads only when an engine runs a model
    import numpy as np
    import numpy.typing as npt

    from posenc_cli.models.model_positions import ModelPositions

NAME = "mlx-lm"
VERSION = "0.32.2"
MLX_VERSION = "0.32.4"

@dataclass(frozen=True)
class Reader:
    """How one model file's ``ModelArgs`` and attention read the rope (mlx-lm 0.32.2).

    ``theta``: ``rope_theta``'s default (None: required); ``head_dim_key``: reads ``head_dim`` (else
    ``hidden_size // num_attention_heads``); ``head_dim``: its default; ``mpe``: ``max_position_embeddings``'
    default; ``scaling``: reads ``rope_scaling``; ``v5``: takes theta and scaling from ``rope_parameters`` when the
    legacy keys are absent (qwen3); ``traditional``: the layout flag (None: the config's ``rope_traditional``);
    ``kind``: ``initialize`` (``initialize_rope``), ``phi3``, ``phimoe``, ``gemma3`` (local base on sliding layers),
    ``olmo3`` (plain RoPE on non-full layers), ``deepseek`` (rope dims ``qk_rope_head_dim``, softmax x mscale^2),
    ``plain`` (``nn.RoPE`` from the theta key, whatever the scaling says); ``theta_key``: the key theta is read from;
    ``partial``: the key and default of the rotated fraction (None: the whole head); ``layers_key``: the layer
    count's key."""

    theta: float | None
    head_dim_key: bool = True
    head_dim: int | None = None
    mpe: int | None = None
    scaling: bool = True
    v5: bool = False
    traditional: bool | None = None
    kind: str = "initialize"
    theta_key: str = "rope_theta"
    partial: tuple[str, float | None] | None = None
    layers_key: str = "num_hidden_layers"


READERS: dict[str, Reader] = {
    "llama": Reader(1e4),
    "qwen2": Reader(1e6, head_dim_key=False, mpe=32768),
    "mixtral": Reader(1e6, head_dim_key=False, scaling=False),
    "qwen3": Reader(None, v5=True, traditional=False),
    "qwen3_moe": Reader(None, scaling=False, traditional=False),
    "gpt_oss": Reader(150000.0, head_dim=64, traditional=False),
    "deepseek_v3": Reader(1e4, mpe=2048, traditional=True, kind="deepseek"),
    "phi3": Reader(1e4, head_dim_key=False, mpe=131072, kind="phi3"),
    "phimoe": Reader(1e4, head_dim_key=False, mpe=131072, traditional=False, kind="phimoe"),
    "gemma3_text": Reader(1e6, head_dim=256, mpe=32768, traditional=False, kind="gemma3"),
    "olmo3": Reader(None, traditional=False, kind="olmo3"),
    "exaone": Reader(None, layers_key="num_layers"),
    "gemma": Reader(1e4, scaling=False, kind="plain"),
    "gemma2": Reader(1e4, scaling=False, kind="plain"),
    "cohere": Reader(8e6, head_dim_key=False, scaling=False, traditional=True, kind="plain"),
    "phi": Reader(1e4, head_dim_key=False, scaling=False, traditional=False, kind="plain",
                  partial=("partial_rotary_factor", 0.4)),
    "stablelm": Reader(None, head_dim_key=False, scaling=False, traditional=False, kind="plain",
                       partial=("partial_rotary_factor", None)),
    "gpt_neox": Reader(None, head_dim_key=False, scaling=False, traditional=False, kind="plain",
                       theta_key="rotary_emb_base", partial=("rotary_pct", None)),
    "starcoder2": Reader(1e5, head_dim_key=False, scaling=False, traditional=False, kind="plain"),
    "glm4_moe": Reader(None, scaling=False, traditional=False, kind="plain", partial=("partial_rotary_factor", None)),
    "smollm3": Reader(1e4),
    "qwen3_next": Reader(None, traditional=False, partial=("partial_rotary_factor", None)),
    "exaone4": Reader(None, traditional=False),
    "nemotron-nas": Reader(5e5, head_dim_key=False, mpe=131072, traditional=False),
    "llama4": Reader(None, traditional=True),
}
#: gemma2.py's ``query_pre_attn_scalar`` default (transformers' Gemma2Config: 256)
GEMMA2_QPAS = 144.0


class Refused(PosencError):
    """mlx-lm will not build this model (``will not start``), or posenc has no model of how it would."""


@dataclass(frozen=True)
class MlxRope:
    """One rope module as mlx-lm builds it: ``cls`` its class (``RoPE``, ``DynamicNTKScalingRoPE``, ``Llama3RoPE``,
    ``YarnRoPE``, ``SuScaledRoPE``), ``dims`` the features it rotates, ``base``, ``scale`` (``nn.RoPE``'s position
    scale), ``traditional`` (interleaved pairs), ``config`` the scaling dict it was given (JSON text),
    ``max_position_embeddings`` as passed, ``original`` (SuScaledRoPE)."""

    cls: str
    dims: int
    base: float
    traditional: bool
    scale: float = 1.0
    config: str = "{}"
    max_position_embeddings: int | None = None
    original: int | None = None
    long_mscale: float | None = None

    @property
    def scaling(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.config)
        return loaded


def initialize_rope(dims: int, base: float, traditional: bool, scaling: dict[str, Any] | None,
                    mpe: int | None) -> MlxRope:
    """``rope_utils.initialize_rope``: the class and arguments it builds for a scaling dict."""
    rope_type = (scaling.get("type") or scaling.get("rope_type", "default")) if scaling is not None else "default"
    config = json.dumps(scaling or {}, sort_keys=True, allow_nan=False)
    if rope_type in ("default", "linear", "mrope"):
        scale = 1.0
        if rope_type == "linear":
            if "factor" not in (scaling or {}):
                raise Refused(f"{WILL_NOT_START}: mlx-lm's initialize_rope needs rope_scaling.factor for linear")
            scale = 1 / float((scaling or {})["factor"])
        return MlxRope("RoPE", dims, base, traditional, scale)
    if rope_type in ("dynamic", "llama3", "yarn", "deepseek_yarn", "telechat3-yarn", "longrope"):
        assert scaling is not None
        # framework fact: the keys mlx-lm's initialize_rope indexes (a KeyError there)
        needs = {"longrope": ("original_max_position_embeddings", "short_factor", "long_factor")}.get(
            rope_type, ("factor",))
        missing = [k for k in needs if k not in scaling]
        if missing:
            raise Refused(f"{WILL_NOT_START}: mlx-lm's initialize_rope needs rope_scaling.{missing[0]} for "
                          f"{rope_type} (KeyError)")
        if rope_type == "dynamic" and mpe is None:
            raise Refused(f"{WILL_NOT_START}: this mlx-lm model file passes no max_position_embeddings to "
                          "DynamicNTKScalingRoPE, whose first call then raises TypeError")
        cls = {"dynamic": "DynamicNTKScalingRoPE", "llama3": "Llama3RoPE", "longrope": "SuScaledRoPE"}.get(
            rope_type, "YarnRoPE")
        original = int(scaling["original_max_position_embeddings"]) if rope_type == "longrope" else None
        return MlxRope(cls, dims, base, traditional, config=config, max_position_embeddings=mpe, original=original)
    if rope_type == "proportional":
        raise Refused(f"{NOT_MODELLED}: mlx-lm's ProportionalRoPE (posenc models default, linear, dynamic, "
                      "llama3, yarn and longrope)")
    raise Refused(f"{WILL_NOT_START}: mlx-lm's initialize_rope raises \"Unsupported RoPE type {rope_type}\"")


def _get(text: dict[str, Any], key: str, default: Any) -> Any:
    """A ``ModelArgs`` field: the config's value (a key set to null too), else the dataclass default."""
    return text[key] if key in text else default


def _required(text: dict[str, Any], key: str, name: str) -> Any:
    if key not in text:
        raise Refused(f"{WILL_NOT_START}: mlx-lm's {name} ModelArgs requires {key} (TypeError on load)")
    return text[key]


def layer_ropes(cfg: dict[str, Any]) -> tuple[str, list[MlxRope | None], float]:
    """What mlx-lm builds for ``cfg``: its model file, one rope per layer (None: no rope) and the softmax multiplier
    of ``1 / sqrt(head_dim)``. Raises :class:`Refused` (will not start / not modelled)."""
    name = model_file(cfg)
    if name is None:
        raise Refused(f"{WILL_NOT_START}: mlx-lm {VERSION} has no model file for model_type "
                      f"{cfg.get('model_type')!r} (load_model: \"Model type ... not supported\")")
    if name == "gemma3":  # gemma3.py's ModelArgs fills the text config's head count (8) before gemma3_text reads it
        text, name = {"num_attention_heads": 8, **(cfg.get("text_config") or {})}, "gemma3_text"
    else:
        text = cfg
    if name == "qwen2_vl":  # qwen2_vl.py runs qwen2.py on the text config (or the whole file without one): 1-D rope
        text, name = dict(cfg.get("text_config") or cfg), "qwen2"
    if name == "llama4":  # llama4.py builds its TextArgs from text_config
        text = dict(cfg.get("text_config") or {})
    if name == "gemma3_text":  # gemma3_text's ModelArgs defaults
        text = {"num_attention_heads": 4, "num_hidden_layers": 26, **text}
    reader = READERS.get(name)
    if reader is None:
        raise Refused(f"{NOT_MODELLED}: mlx-lm's {name} model file (posenc models its {', '.join(READERS)} files)")
    theta = _get(text, reader.theta_key, reader.theta)
    scaling = _get(text, "rope_scaling", None) if reader.scaling else None
    if reader.v5 and isinstance(text.get("rope_parameters"), dict):
        theta = text["rope_parameters"].get("rope_theta") if theta is None else theta
        scaling = text["rope_parameters"] if scaling is None else scaling
    if theta is None:
        raise Refused(f"{WILL_NOT_START}: mlx-lm's {name} model file requires {reader.theta_key} (a transformers 5 "
                      "file keeps rope_theta in rope_parameters, which this file does not read)")
    theta = float(theta)
    heads = int(_required(text, "num_attention_heads", name))
    n = int(_required(text, reader.layers_key, name))
    head_dim = _get(text, "head_dim", reader.head_dim) if reader.head_dim_key else None
    head_dim = int(head_dim) if head_dim else int(_required(text, "hidden_size", name)) // heads
    mpe = _get(text, "max_position_embeddings", reader.mpe)
    traditional = bool(text.get("rope_traditional", False)) if reader.traditional is None else reader.traditional
    softmax = 1.0
    if reader.kind == "phi3":
        return name, [_phi3(text, theta, head_dim, traditional, mpe)] * n, softmax
    if reader.kind == "phimoe":
        return name, [_phimoe(text, theta, head_dim, mpe)] * n, softmax
    if reader.kind == "deepseek":
        dims = int(_get(text, "qk_rope_head_dim", 64))
        rope = initialize_rope(dims, theta, True, scaling, mpe)
        # softmax: q_head_dim ** -0.5 times mscale(s, mscale_all_dim) ** 2 when a factor > 1 is scaled
        m_all = float(scaling.get("mscale_all_dim") or 0) if scaling is not None else 0.0
        if scaling is not None and m_all and float(scaling["factor"]) > 1:
            softmax = (0.1 * m_all * math.log(float(scaling["factor"])) + 1.0) ** 2
        return name, [rope] * n, softmax
    dims = head_dim
    if reader.partial is not None:
        key, default = reader.partial
        fraction = _get(text, key, default)
        if fraction is None:
            raise Refused(f"{WILL_NOT_START}: mlx-lm's {name} ModelArgs requires {key} (TypeError on load)")
        dims = int(float(fraction) * head_dim)
    if name == "nemotron-nas" and scaling and ("factor" not in scaling or scaling.get("rope_type") is None):
        raise Refused(f"{WILL_NOT_START}: mlx-lm's nemotron-nas needs rope_scaling.factor and rope_scaling.rope_type "
                      "(ValueError)")
    if reader.kind == "plain":
        if name == "gemma2":  # the softmax: query_pre_attn_scalar ** -0.5, with gemma2.py's own default
            softmax = math.sqrt(float(_get(text, "query_pre_attn_scalar", 256.0))
                                / float(_get(text, "query_pre_attn_scalar", GEMMA2_QPAS)))
        return name, [MlxRope("RoPE", dims, theta, traditional)] * n, softmax
    full = initialize_rope(dims, theta, traditional, scaling, mpe if name != "gpt_oss" else None)
    if reader.kind == "gemma3":
        pattern = int(_get(text, "sliding_window_pattern", 6))
        # framework fact: this package's own default base (10000), read as it reads it
        local = MlxRope("RoPE", head_dim, float(_get(text, "rope_local_base_freq", 10000.0)), False)
        return name, [local if (i + 1) % pattern else full for i in range(n)], softmax
    if reader.kind == "olmo3":
        types = text.get("layer_types") or ["full_attention" if (i + 1) % 4 == 0 else "sliding_attention"
                                            for i in range(n)]
        plain = MlxRope("RoPE", head_dim, theta, False)
        return name, [full if types[i] == "full_attention" else plain for i in range(n)], softmax
    return name, [full] * n, softmax


def read(cfg: dict[str, Any]) -> tuple[str, list[MlxRope | None], float]:
    """:func:`layer_ropes`, with a value of the wrong type or range (which mlx-lm's ModelArgs would not check
    either) refused as not modelled rather than raised."""
    try:
        return layer_ropes(cfg)
    except Refused:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, ZeroDivisionError, OverflowError, IndexError) as exc:
        raise Refused(f"{NOT_MODELLED}: posenc cannot read this config as mlx-lm's model file would "
                      f"({type(exc).__name__}: {exc})") from None


def _phi3(text: dict[str, Any], theta: float, head_dim: int, traditional: bool, mpe: int | None) -> MlxRope:
    """phi3.py: ``rope_scaling`` must name ``type`` and ``long_factor``; su/longrope builds SuScaledRoPE with the
    top-level original length, linear ``nn.RoPE(scale=1/factor)``, any other type is dropped (a printed warning)."""
    scaling = text.get("rope_scaling")
    dims = int(head_dim * float(_get(text, "partial_rotary_factor", 1.0)))
    if not scaling:
        return MlxRope("RoPE", dims, theta, traditional)
    if not {"long_factor", "type"} <= set(scaling):
        raise Refused(f"{WILL_NOT_START}: mlx-lm's phi3 ModelArgs requires rope_scaling to name type and "
                      "long_factor (ValueError)")
    if scaling["type"] in ("longrope", "su"):
        return MlxRope("SuScaledRoPE", dims, theta, False, config=json.dumps(scaling, sort_keys=True, allow_nan=False),
                       max_position_embeddings=mpe,
                       original=int(_get(text, "original_max_position_embeddings", 4096)))
    if scaling["type"] == "linear":
        return MlxRope("RoPE", dims, theta, traditional, 1 / float(scaling["factor"]))
    return MlxRope("RoPE", dims, theta, traditional)


def _phimoe(text: dict[str, Any], theta: float, head_dim: int, mpe: int | None) -> MlxRope:
    scaling = text.get("rope_scaling")
    if scaling is None:
        return MlxRope("RoPE", head_dim, theta, False)
    # framework fact: the keys mlx-lm's phimoe indexes
    missing = [k for k in ("short_factor", "long_factor", "short_mscale", "long_mscale") if k not in scaling]
    if missing:
        raise Refused(f"{WILL_NOT_START}: mlx-lm's phimoe reads rope_scaling.{missing[0]} (KeyError)")
    return MlxRope("SuScaledRoPE", head_dim, theta, False, config=json.dumps(scaling, sort_keys=True, allow_nan=False),
                   max_position_embeddings=mpe, original=int(_get(text, "original_max_position_embeddings", 4096)),
                   long_mscale=scaling["long_mscale"])


def frequencies(rope: MlxRope, seq_len: int) -> tuple[npt.NDArray[np.float32], float]:
    """(inverse frequencies, cos/sin magnitude) ``rope`` applies to a sequence of ``seq_len`` tokens."""
    import numpy as np

    from posenc_cli.rope.frequencies import RopeSpec, compute, default_inv_freq, dynamic_base

    s = rope.scaling
    if rope.cls == "RoPE":
        return (default_inv_freq(rope.base, rope.dims) * np.float32(rope.scale)).astype(np.float32), 1.0
    if rope.cls == "DynamicNTKScalingRoPE":
        assert rope.max_position_embeddings is not None
        base = dynamic_base(rope.base, float(s["factor"]), seq_len, rope.max_position_embeddings, rope.dims)
        return default_inv_freq(base, rope.dims), 1.0
    mpe = rope.max_position_embeddings or 0
    if rope.cls == "Llama3RoPE":
        params = {"rope_type": "llama3", "rope_theta": rope.base, "factor": float(s["factor"]),
                  "low_freq_factor": float(s.get("low_freq_factor", 1.0)),
                  "high_freq_factor": float(s.get("high_freq_factor", 4.0)),
                  "original_max_position_embeddings": int(s.get("original_max_position_embeddings", 8192))}
        return compute(RopeSpec(params, rope.dims, mpe), seq_len).inv_freq, 1.0
    if rope.cls == "YarnRoPE":
        factor = float(s["factor"])
        magnitude = yarn_mscale(factor, float(s.get("mscale", 1))) / yarn_mscale(factor,
                                                                                  float(s.get("mscale_all_dim", 0)))
        params = {"rope_type": "yarn", "rope_theta": rope.base, "factor": factor, "truncate": True,
                  "original_max_position_embeddings": int(s.get("original_max_position_embeddings", 4096)),
                  "beta_fast": float(s.get("beta_fast", 32)),  # framework fact: mlx-lm's YarnRoPE defaults
                  "beta_slow": float(s.get("beta_slow", 1)),  # framework fact: (initialize_rope's .get)
                  "attention_factor": magnitude}
        return compute(RopeSpec(params, rope.dims, mpe), seq_len).inv_freq, magnitude
    # SuScaledRoPE: the long factors at every length
    assert rope.original is not None
    long = np.asarray(s["long_factor"], dtype=np.float32)
    freqs = (long * (np.float32(rope.base) ** (np.arange(0, rope.dims, 2, dtype=np.float32) / np.float32(rope.dims))))
    inv: npt.NDArray[np.float32] = (np.float32(1) / freqs.astype(np.float32)).astype(np.float32)
    factor = mpe / rope.original
    default = longrope_attention_factor({}, factor, rope.original)
    return inv, float(rope.long_mscale or default)  # `long_mscale or ...`: a 0 or null long_mscale is the default


# --- run ----------------------------------------------------------------------------------------------------------

#: ``mlx_lm.server`` serves the model directory as its config.json says: no rope flag, no context-length check
INVOCATION = ["mlx_lm.server", "--model", "MODEL"]
#: the fix for a transformers 5 file mlx-lm misreads: its rope as the legacy keys (transformers 5 still reads them)
V4_FIX = "posenc convert MODEL/config.json --to v4 --in-place (or posenc scale ... --engine mlx-lm --in-place)"
#: transformers model types whose attention pairs features 2i, 2i+1 on the checkpoint's weights
#: (DeepSeek V3's ``rope_interleave``, default true; Cohere's ``rotate_half`` of even and odd features; Llama 4's
#: complex rotation of consecutive pairs)
_INTERLEAVED = ("deepseek_v3", "kimi_k2", "cohere", "llama4_text", "llama4")


def transformers_layout(model: ModelPositions, cfg: dict[str, Any], layout: str) -> str:
    """How transformers pairs the rotated features on the checkpoint's weights (``rotate-half`` or ``interleaved``)."""
    if model.text_model_type in _INTERLEAVED and cfg.get("rope_interleave", True):
        return "interleaved"
    return layout


def divergences(name: str, cfg: dict[str, Any], rope: MlxRope | None, seq_len: int) -> list[str]:
    """What mlx-lm does differently from transformers with this config (the run's warnings)."""
    out: list[str] = []
    text = cfg.get("text_config") if name == "gemma3_text" and isinstance(cfg.get("text_config"), dict) else cfg
    assert isinstance(text, dict)
    reader = READERS[name]
    if isinstance(text.get("rope_parameters"), dict) and not reader.v5 and "rope_scaling" not in text:
        theta = text.get("rope_theta", reader.theta)
        out.append(f"mlx-lm's {name} model file reads rope_theta and rope_scaling only: this transformers 5 file "
                   f"keeps its rope in rope_parameters, so mlx-lm runs theta {theta:g} with no scaling, silently; "
                   f"write the keys it reads: {V4_FIX}")
    if not reader.scaling and text.get("rope_scaling"):
        out.append(f"mlx-lm's {name} model file never reads rope_scaling: it runs plain RoPE")
    s = rope.scaling if rope is not None else {}
    if rope is not None and rope.cls == "YarnRoPE":
        if s.get("truncate") is False or cfg.get("truncate") is False:
            out.append("mlx-lm always rounds YaRN's correction range (truncate: false is ignored)")
        factor = float(s["factor"])
        ours = yarn_mscale(factor, float(s.get("mscale", 1))) / yarn_mscale(factor, float(s.get("mscale_all_dim", 0)))
        if s.get("attention_factor") is not None and not math.isclose(ours, float(s["attention_factor"]),
                                                                      rel_tol=1e-9):
            out.append("mlx-lm's YaRN ignores attention_factor (its magnitude is mscale(s, mscale) / "
                       "mscale(s, mscale_all_dim))")
        if "original_max_position_embeddings" not in s:
            out.append("this YaRN dict names no original_max_position_embeddings: mlx-lm uses 4096")
    if rope is not None and rope.cls == "SuScaledRoPE" and rope.original is not None:
        out.append(f"mlx-lm uses LongRoPE's long factors at every length (transformers: the short ones up to "
                   f"{rope.original:,} tokens)")
    return out


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    """What mlx-lm computes for the model, for a sequence of ``seq_len`` tokens (default ``max_model_len``; mlx-lm
    checks no length, so ``accepts`` is None). ``cfg``: the config.json mlx-lm reads, raw."""
    from posenc_cli.models.record import rope_groups

    seq = seq_len or max_model_len
    try:
        name, ropes, softmax = read(cfg)
    except Refused as exc:
        return EngineRun(NAME, VERSION, max_model_len, [], list(INVOCATION), refusal=str(exc))
    groups: list[GroupRun] = []
    warnings: list[str] = []
    for g in rope_groups(model):
        indices = g.layers if g.layers is not None else range(len(ropes))
        built: set[MlxRope] = {r for i in indices if i < len(ropes) and (r := ropes[i]) is not None}
        if len(built) != 1:
            return EngineRun(NAME, VERSION, max_model_len, [], list(INVOCATION), refusal=(
                f"{NOT_MODELLED}: mlx-lm builds {len(built)} different ropes for transformers' {g.name} layers"))
        rope = built.pop()
        warnings += divergences(name, cfg, rope, seq)
        wanted = transformers_layout(model, cfg, g.layout)
        layout = "interleaved" if rope.traditional else "rotate-half"
        if rope.dims != g.spec.rotary_dim or layout != wanted:
            groups.append(GroupRun(g.name, None, 1.0, softmax, [f"mlx-lm rotates {rope.dims} features paired "
                                                                f"{layout}, transformers {g.spec.rotary_dim} paired "
                                                                f"{wanted}"]))
            continue
        inv, magnitude = frequencies(rope, seq)
        groups.append(GroupRun(g.name, inv, magnitude, softmax))
    warnings += [n for g in groups for n in g.notes]
    return EngineRun(NAME, VERSION, max_model_len, groups, list(INVOCATION), accepts=None,
                     warnings=list(dict.fromkeys(warnings)))


# --- render -------------------------------------------------------------------------------------------------------

def _yarn_inv(dims: int, base: float, s: dict[str, Any], truncate: bool) -> list[float]:
    """YaRN's inverse frequencies in Python floats (transformers' formula; ``truncate``: floor/ceil the range)."""
    factor, original = float(s["factor"]), int(s.get("original_max_position_embeddings", 4096))
    low, high = yarn_correction_range(float(param(s, "beta_fast", "yarn")), float(param(s, "beta_slow", "yarn")),
                                      dims, base, original, truncate)
    high = high + 0.001 if low == high else high
    out = []
    for i in range(dims // 2):
        extra = 1 / base ** (2 * i / dims)
        keep = 1 - min(max((i - low) / (high - low), 0.0), 1.0)
        out.append(extra / factor * (1 - keep) + extra * keep)
    return out


def _gap(ours: list[float], theirs: list[float]) -> float:
    return max(abs(a - b) / b for a, b in zip(ours, theirs, strict=True))


def caveats(name: str, cfg: dict[str, Any], rope: MlxRope, target: int) -> list[str]:
    """Where mlx-lm's rope for a rendered config differs from transformers', with the difference."""
    out: list[str] = []
    s = rope.scaling
    if rope.cls == "YarnRoPE" and (s.get("truncate") is False or cfg.get("truncate") is False):
        gap = _gap(_yarn_inv(rope.dims, rope.base, s, True), _yarn_inv(rope.dims, rope.base, s, False))
        out.append(f"mlx-lm always rounds YaRN's correction range (truncate: false ignored): its inverse "
                   f"frequencies differ from transformers' by up to {gap:.3g} relative")
    if rope.cls == "YarnRoPE" and s.get("attention_factor") is not None:
        factor = float(s["factor"])
        theirs = float(s["attention_factor"])
        ours = yarn_mscale(factor, float(s.get("mscale", 1))) / yarn_mscale(factor, float(s.get("mscale_all_dim", 0)))
        if not math.isclose(ours, theirs, rel_tol=1e-9):
            out.append(f"mlx-lm ignores attention_factor {theirs:g}: its cos/sin magnitude is {ours:.6g}")
    if rope.cls == "SuScaledRoPE" and rope.original is not None:
        short, long = s.get("short_factor") or [], s.get("long_factor") or []
        gap = max((abs(a / b - 1) for a, b in zip(short, long, strict=False)), default=0.0)
        if gap:
            out.append(f"mlx-lm uses LongRoPE's long factors at every length: up to {rope.original:,} tokens its "
                       f"inverse frequencies differ from transformers' (the short factors) by up to {gap:.3g} "
                       "relative")
    return out


def _rope_dict(config: dict[str, Any]) -> dict[str, Any] | None:
    text = config["text_config"] if isinstance(config.get("text_config"), dict) else config
    scaling = text.get("rope_scaling")
    return scaling if isinstance(scaling, dict) else None


def _for_mlx(config: dict[str, Any], name: str) -> None:
    """Make a v4 config say for mlx-lm what it says for transformers, where a key can: phi3 needs
    ``rope_scaling.type``; an explicit YaRN ``attention_factor`` becomes ``mscale`` (transformers ignores mscale
    when attention_factor is given; mlx-lm's magnitude is ``0.1 mscale ln s + 1`` with no ``mscale_all_dim``)."""
    scaling = _rope_dict(config)
    if scaling is None:
        return
    rope_type = scaling.get("rope_type") or scaling.get("type")
    if name in ("phi3", "phimoe") and rope_type:
        scaling["type"] = rope_type
    factor = float(scaling.get("factor") or 1)
    if (rope_type == "yarn" and scaling.get("attention_factor") is not None and factor > 1
            and not scaling.get("mscale_all_dim") and READERS[name].kind != "deepseek"):
        scaling["mscale"] = yarn_mscale_for(float(scaling["attention_factor"]), factor)


def render(r: Rendering) -> tuple[str, list[str]]:
    """``--engine mlx-lm``: the config.json keys mlx-lm reads (v4 ``rope_theta`` and ``rope_scaling``); with
    ``--config`` the whole patched config, refused where mlx-lm would not build it or posenc has no model of it."""
    from posenc_cli.engines import hf

    if r.config is None or r.facts is None:
        body = hf.format_hf(r.req)
        probe = {"model_type": "llama", "num_attention_heads": 1, "num_hidden_layers": 1,
                 "head_dim": r.req.rotary_dim, **body}
        name = "llama"
    else:
        body = hf.patch_config(r.config, r.req, "hf", r.facts.group)
        probe = body
        name = model_file(body) or ""
        name = "gemma3_text" if name == "gemma3" else name
    if name in READERS:
        _for_mlx(body, name)
    try:
        name, ropes, _ = read(probe)
    except Refused as exc:
        raise PosencError(f"mlx-lm cannot run this: {exc}") from None
    if not READERS[name].scaling and _rope_dict(body):
        raise PosencError(f"mlx-lm's {name} model file never reads rope_scaling: it would run plain RoPE; serve "
                          "this model with another engine")
    notes: list[str] = []
    for rope in dict.fromkeys(x for x in ropes if x is not None):
        notes += caveats(name, probe, rope, r.req.target)
    if r.config is None:
        notes.append("most mlx-lm model files read only these legacy keys (qwen3 also rope_parameters; mixtral, "
                     "qwen3_moe and the plain-RoPE files never read rope_scaling); pass --config for the model's "
                     "whole file and its own model file's reading")
    text = dumps_config(body) if r.config is not None else dumps_json(body)
    return text, list(dict.fromkeys(notes))


TARGET = Target(
    NAME, "MLX-LM", "mlx-lm", VERSION, render, run, prints_config=True,
    targets="{version} (mlx " + MLX_VERSION + ")",
    proven_by="its model classes and rope_utils on mlx's CPU backend",
    cannot_express="YaRN with `truncate: false` (always rounded); LongRoPE below the original length (the long "
                   "factors at every length); a transformers 5 file with only `rope_parameters` (read as theta "
                   "default, no scaling: posenc writes v4 keys); mixtral, qwen3_moe, gemma, gemma2, cohere, phi, "
                   "stablelm, gpt_neox, starcoder2 and glm4_moe never read `rope_scaling`; model files posenc has not "
                   "modelled (not modelled)")

"""Reading model ``config.json`` files: which positional encoding a model uses and its resolved RoPE settings.

Stdlib only. The RoPE resolution follows transformers 5's ``convert_rope_params_to_dict`` and
``standardize_rope_params``: legacy ``rope_scaling`` wins over ``rope_parameters``; ``rope_theta`` inside the dict
wins over the top-level key; ``type`` stands in for ``rope_type`` (legacy ``su`` is LongRoPE, ``mrope`` is default
RoPE with sections); a top-level ``original_max_position_embeddings`` (Phi-3) wins for yarn/llama3/longrope and the
dict falls back to ``max_position_embeddings``; ``head_dim`` is used when set, else ``hidden_size //
num_attention_heads``. Per-layer-type dicts (``{"full_attention": {...}, "sliding_attention": {...}}``) are resolved
one by one.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc_cli.errors import PosencError

# model_type -> the theta its config class assumes when the file has none (transformers 5 `default_theta`)
_DEFAULT_THETA = {"mixtral": 1e6, "gpt_oss": 150000.0, "llama4": 500000.0, "cohere": 500000.0, "bitnet": 500000.0}
_ALIBI_TYPES = {"bloom", "mpt"}
_LEARNED_TYPES = {"gpt2", "opt", "gpt_bigcode", "bert", "roberta", "distilbert", "xlm-roberta", "bart", "gpt_neo"}
_ORIGINAL_FROM_TOP = {"yarn", "llama3", "longrope"}
_LEGACY_TYPES = {"su": "longrope", "mrope": "default"}
# keys the frequency functions read unconditionally, per rope_type (a missing one would be a KeyError)
_REQUIRED = {
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("original_max_position_embeddings",),
    "longrope": ("short_factor", "long_factor", "original_max_position_embeddings"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}
_NUMERIC = ("rope_theta", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings",
            "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "partial_rotary_factor")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_rope_params(params: Mapping[str, Any], where: str) -> None:
    """One clear PosencError for a rope dict the frequency functions could not read (missing key, not a number)."""
    rope_type = str(params.get("rope_type"))
    for key in _REQUIRED.get(rope_type, ()):
        if params.get(key) is None:
            raise PosencError(f"{where}: rope_type {rope_type!r} needs {key!r}, which the config does not set")
    for key in _NUMERIC:
        value = params.get(key)
        if value is not None and not _is_number(value):
            raise PosencError(f"{where}: {key} = {value!r} is not a finite number")
    for key in ("short_factor", "long_factor"):
        values = params.get(key)
        if values is not None and (not isinstance(values, list) or not all(_is_number(v) for v in values)):
            raise PosencError(f"{where}: {key} must be a list of numbers")


# model_type -> partial_rotary_factor its config class assumes when the file has none
_DEFAULT_PARTIAL_ROTARY = {"phi": 0.5, "persimmon": 0.5, "stablelm": 0.25, "glm": 0.5, "glm4": 0.5, "glm4_moe": 0.5,
                           "nemotron": 0.5, "recurrent_gemma": 0.5, "qwen3_next": 0.25}
# GPT-NeoX configs read only `rotary_emb_base` and `rotary_pct` (a top-level rope_theta or partial_rotary_factor is
# ignored); the value is the rotary_pct they assume when it is missing
_NEOX_TYPES = {"gpt_neox": 0.25, "gpt_neox_japanese": 1.0}


def load_json(path: str) -> dict[str, Any]:
    """Read a JSON object from ``path`` (``-`` reads stdin); every failure is one clear PosencError."""
    if path == "-":
        label = "<stdin>"
        try:
            data = json.loads(sys.stdin.read())
        except json.JSONDecodeError as exc:
            raise PosencError(f"{label}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    else:
        label = path
        if Path(path).is_dir():
            raise PosencError(f"{label} is a directory; pass the config.json file inside it")
        data = load_json_value(path)
    if not isinstance(data, dict):
        raise PosencError(f"{label}: expected a JSON object, got {type(data).__name__}")
    return data


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically; see :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder and a rename.

    A failure at any point leaves ``path`` as it was (absent, or the old contents) and removes the temp file.
    """
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise PosencError(f"cannot write {target}: folder {folder} does not exist")
    if target.is_dir():
        raise PosencError(f"cannot write {target}: it is a directory")
    tmp = folder / f".{target.name}.posenc-{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o7777)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise PosencError(f"cannot write {target}: {exc.strerror or exc}") from None


@dataclass
class LayerRope:
    """One resolved rope dict (transformers 5 ``rope_parameters`` after standardization)."""

    name: str
    params: dict[str, Any]


@dataclass
class ModelPositions:
    """What a config says about positions."""

    family: str  # "rope", "alibi", "learned", "none" or "unknown"
    model_type: str | None
    max_position_embeddings: int | None
    head_dim: int | None = None
    layers: list[LayerRope] = field(default_factory=list)
    top_level: dict[str, Any] | None = None  # the flat dict transformers reads `truncate` from
    num_heads: int | None = None
    notes: list[str] = field(default_factory=list)


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _head_dim(cfg: Mapping[str, Any]) -> int | None:
    model_type = str(cfg.get("model_type", ""))
    for key in ("qk_rope_head_dim", "head_dim", "rotary_dim"):
        value = cfg.get(key)
        if value is not None and not (_is_number(value) and value == int(value)):
            raise PosencError(f"{key} = {value!r} is not a whole number")
    if model_type.startswith("deepseek") and cfg.get("qk_rope_head_dim"):
        return int(cfg["qk_rope_head_dim"])  # MLA: only this part of each head rotates
    if cfg.get("head_dim"):
        return int(cfg["head_dim"])
    hidden = cfg.get("hidden_size", cfg.get("n_embd", cfg.get("d_model")))
    heads = cfg.get("num_attention_heads", cfg.get("n_head", cfg.get("n_heads")))
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        return hidden // heads
    return None


def _is_nested(rp: Mapping[str, Any]) -> bool:
    return bool(rp) and all(isinstance(v, dict) for v in rp.values())


def _resolve_flat(rp: Mapping[str, Any], cfg: Mapping[str, Any], model_type: str) -> dict[str, Any]:
    out = dict(rp)
    rope_type = out.get("rope_type", out.get("type", "default"))
    if rope_type in _LEGACY_TYPES:
        rope_type = _LEGACY_TYPES[rope_type]
    if model_type == "phi3" and rope_type == "yarn":
        rope_type = "longrope"  # Phi-3's config class maps legacy yarn to longrope
    out["rope_type"] = rope_type
    out.pop("type", None)
    if model_type in _NEOX_TYPES:
        top, prf = cfg.get("rotary_emb_base"), cfg.get("rotary_pct", _NEOX_TYPES[model_type])
    else:
        top = cfg.get("rope_theta", cfg.get("rotary_emb_base"))
        prf = cfg.get("partial_rotary_factor", cfg.get("rotary_pct", _DEFAULT_PARTIAL_ROTARY.get(model_type)))
    if "rope_theta" not in out:
        if top is not None and not _is_number(top):
            raise PosencError(f"rope_theta = {top!r} is not a finite number")
        out["rope_theta"] = float(top) if top is not None else _DEFAULT_THETA.get(model_type, 10000.0)
    if prf is not None:
        out.setdefault("partial_rotary_factor", prf)
    if rope_type in _ORIGINAL_FROM_TOP:
        if "original_max_position_embeddings" in cfg:
            out["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]
        elif cfg.get("max_position_embeddings") is not None:
            out.setdefault("original_max_position_embeddings", cfg["max_position_embeddings"])
    return out


def _uses_alibi(cfg: Mapping[str, Any], model_type: str) -> bool:
    if cfg.get("alibi") is True or cfg.get("position_embedding_type") == "alibi":
        return True
    attn = cfg.get("attn_config")
    if isinstance(attn, dict) and "alibi" in attn:
        return bool(attn["alibi"])
    return model_type in _ALIBI_TYPES


def describe(cfg: Mapping[str, Any]) -> ModelPositions:
    """Classify a model config and, for RoPE models, resolve every rope dict as transformers would."""
    model_type = str(cfg.get("model_type", "")) or None
    mt = model_type or ""
    max_pos = _int_or_none(cfg.get("max_position_embeddings", cfg.get("n_positions", cfg.get("max_seq_len"))))
    heads = _int_or_none(cfg.get("num_attention_heads", cfg.get("n_head", cfg.get("n_heads"))))
    if _uses_alibi(cfg, mt):
        return ModelPositions("alibi", model_type, max_pos, _head_dim(cfg), num_heads=heads)
    has_rope_keys = any(k in cfg for k in ("rope_theta", "rope_scaling", "rope_parameters", "rotary_dim",
                                           "rotary_pct", "rotary_emb_base", "partial_rotary_factor"))
    if not has_rope_keys:
        if mt in _LEARNED_TYPES or cfg.get("position_embedding_type") == "absolute" or "n_positions" in cfg:
            return ModelPositions("learned", model_type, max_pos, _head_dim(cfg), num_heads=heads)
        if not mt:
            return ModelPositions("unknown", model_type, max_pos, _head_dim(cfg), num_heads=heads,
                                  notes=["no model_type and no RoPE, ALiBi or position keys"])
    head_dim = _head_dim(cfg)
    if cfg.get("rotary_dim") and head_dim and "partial_rotary_factor" not in cfg:
        # GPT-J style: rotary_dim features of each head rotate
        cfg = {**cfg, "partial_rotary_factor": int(cfg["rotary_dim"]) / head_dim}
    legacy = cfg.get("rope_scaling")
    rp = legacy if legacy else cfg.get("rope_parameters")
    if rp and not isinstance(rp, dict):
        raise PosencError(f"rope_scaling / rope_parameters must be a JSON object, got {rp!r}")
    rp = dict(rp) if rp else {}
    layers: list[LayerRope] = []
    top_level: dict[str, Any] | None = None
    if _is_nested(rp):
        for name, sub in rp.items():
            layers.append(LayerRope(name, _resolve_flat(sub, cfg, mt)))
    else:
        top_level = _resolve_flat(rp, cfg, mt)
        layers.append(LayerRope("all layers", top_level))
    for layer in layers:
        check_rope_params(layer.params, "rope parameters" if layer.name == "all layers" else layer.name)
    return ModelPositions("rope", model_type, max_pos, head_dim, layers, top_level, heads)


def parse_factor_list(text: str, name: str) -> list[float]:
    """A LongRoPE factor list from a JSON list (``[1.0, 1.1, ...]``) or ``@file`` holding one."""
    if text.startswith("@"):
        raw: Any = load_json_value(text[1:])
    else:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PosencError(f"{name} is not a JSON list ({exc.msg}); give e.g. '[1.0, 1.5, 2.0]' or @file") from None
    if not isinstance(raw, list):
        raise PosencError(f"{name} must be a JSON list of numbers, got {type(raw).__name__}")
    for i, v in enumerate(raw):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise PosencError(f"{name}[{i}] = {v!r} is not a number")
    return [float(v) for v in raw]


def read_text(path: str | os.PathLike[str], label: str | None = None, *, kind: str = "file",
              error: type[PosencError] = PosencError) -> str:
    """The UTF-8 text of ``path``; a missing or unreadable file is one ``error`` naming ``label`` (default: the path).

    ``kind`` names what was expected in the "no such ..." message (``file``, ``rules file``).
    """
    label = str(Path(path)) if label is None else label
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{label}: no such {kind}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{label}: cannot read it ({exc.__class__.__name__})") from None


def load_json_value(path: str) -> Any:
    """Any JSON value from a file, with the same one-line errors as :func:`load_json`."""
    p = Path(path)
    text = read_text(p)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PosencError(f"{p}: not valid JSON (line {exc.lineno}: {exc.msg})") from None


def trained_context(params: Mapping[str, Any], max_pos: int) -> tuple[int, int | None, str]:
    """(trained length, extended length or None when unbounded, how they were read) for one resolved rope dict.

    yarn/llama3/longrope name the trained length; linear is assumed to extend ``max_position_embeddings`` by its
    factor; dynamic NTK treats ``max_position_embeddings`` as trained and grows past it without a bound.
    """
    rope_type = params.get("rope_type", "default")
    if rope_type in _ORIGINAL_FROM_TOP:
        return int(params["original_max_position_embeddings"]), max_pos, "original_max_position_embeddings"
    if rope_type == "linear":
        return int(max_pos / float(params["factor"])), max_pos, "max_position_embeddings / factor (assumed)"
    if rope_type == "dynamic":
        return max_pos, None, "dynamic NTK grows the base past max_position_embeddings"
    return max_pos, max_pos, "max_position_embeddings"


# the dtype names a config's `torch_dtype` / `dtype` uses, as posenc names them
_CONFIG_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32", "float64": "float64",
                  "bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32", "fp32": "float32"}


def declared_dtype(cfg: Mapping[str, Any]) -> tuple[str | None, str]:
    """(dtype the weights are published in, where it was read) from ``dtype`` / ``torch_dtype``.

    transformers 5 writes ``dtype``, 4 wrote ``torch_dtype``; multimodal configs may carry it only in
    ``text_config``. ``None`` when the config names no usable dtype (absent, ``"auto"``).
    """
    for where, source in (("", cfg), ("text_config.", cfg.get("text_config"))):
        if not isinstance(source, Mapping):
            continue
        for key in ("dtype", "torch_dtype"):
            value = source.get(key)
            if isinstance(value, str):
                name = _CONFIG_DTYPES.get(value.removeprefix("torch.").lower())
                if name is not None:
                    return name, f"{where}{key} in the config"
    return None, "the config names no dtype"

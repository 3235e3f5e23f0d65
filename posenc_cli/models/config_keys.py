"""Reading a config's keys as its transformers class holds them: the text model, class defaults, dtype (stdlib).

* The text model is ``get_text_config(decoder=True)`` (:func:`text_config`): the generated path (``text_config``,
  ``thinker_config.text_config`` in Qwen2.5-Omni, ``decoder`` in T5Gemma); a sub-config the file leaves out is the
  class's defaults, and keys the file leaves out inside it are the sub-config class's defaults (Qwen2-Audio's
  ``text_config`` names no hidden size). A config without ``model_type`` is read as the type its ``architectures``
  names (:func:`infer_model_type`).
* :func:`with_class_defaults` resolves ``attribute_map`` aliases and fills in the class defaults;
  :func:`with_text` writes a text config back where the class looks for it.
* :func:`head_dim_of` is the head dim the rope functions read: MLA models (DeepSeek V2/V3, Kimi K2, MiniCPM3) rotate
  ``qk_rope_head_dim``, a class may always derive it, else ``head_dim`` or ``hidden_size / num_attention_heads``.
* :func:`declared_dtype`: the dtype the weights are published in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.models.model_types import Kind, arch_types, generated, known_type
from posenc_cli.models.value_checks import is_number
from posenc_cli.rope.scaling import MAX_HEAD_DIM

#: Where remote-code composites (no class in transformers) keep their language model: InternVL chat's
#: ``llm_config``, VILA's ``llm_cfg``, DeepSeek-VL2's and Janus's ``language_config``.
_REMOTE_SUBCONFIGS = ("text_config", "llm_config", "llm_cfg", "language_config")

#: Remote-code model types that transformers reads with another class.
_ALIASES = {"kimi_k2": "deepseek_v3"}

_ARCH_SUFFIXES = ("ForCausalLM", "ForConditionalGeneration", "LMHeadModel", "Model")


def infer_model_type(cfg: Mapping[str, Any]) -> tuple[str, str] | None:
    """(model type, the architectures entry it came from) for a config without ``model_type``."""
    names = {t.replace("_", "").replace("-", ""): t for t in arch_types()}
    archs = cfg.get("architectures")
    for arch in archs if isinstance(archs, list) else []:  # describe refuses another kind; lint reads it anyway
        if not isinstance(arch, str):
            continue
        stem = arch
        for suffix in _ARCH_SUFFIXES:
            if stem.endswith(suffix):
                stem = stem[: -len(suffix)]
                break
        found = names.get(stem.lower())
        if found:
            return found, arch
    return None


ABSENT = " (absent: class defaults)"


def text_config(cfg: Mapping[str, Any]) -> tuple[Mapping[str, Any], str, str]:
    """(the text model's config, its model type, where it was found), as ``get_text_config(decoder=True)``.

    The path to the decoder's config comes from the generated data (``text_config``, ``thinker_config.text_config``
    in Qwen2.5-Omni, ``decoder`` in T5Gemma); a sub-config the file leaves out is the class's defaults. A
    ``model_type`` inside it picks the class only where the composite class reads it with ``AutoConfig``. A config
    without ``model_type`` (remote code such as MiniCPM3) is read as the type its ``architectures`` names."""
    model_type = str(cfg.get("model_type") or "")
    if not model_type:
        inferred = infer_model_type(cfg)
        model_type = inferred[0] if inferred else ""
    model_type = _ALIASES.get(model_type, model_type)
    entry = generated()["models"].get(model_type)
    path: list[str] = list(entry["path"]) if entry else next(
        ([key] for key in _REMOTE_SUBCONFIGS if isinstance(cfg.get(key), Mapping)), [])
    default_type = str(entry["text_type"]) if entry else ""
    honours_inner = bool(entry["auto"]) if entry else True
    node: Mapping[str, Any] = cfg
    for i, key in enumerate(path):
        sub = node.get(key)
        if sub is None and entry and entry.get("flat") and i == 0:
            return cfg, default_type, ""  # a flat file: the class moves the text keys into text_config
        if sub is None:
            where = ".".join(path)
            return dict(entry.get("absent") or {}) if entry else {}, default_type, f"{where}{ABSENT}"
        if not isinstance(sub, Mapping):
            raise PosencError(f"{'.'.join(path[:i + 1])} must be a JSON object, got {type(sub).__name__}")
        node = sub
    if not path:
        if entry and entry.get("decoder_prefix"):
            cfg = _decoder_keys(cfg)
        return cfg, _ALIASES.get(default_type or model_type, default_type or model_type), ""
    inner = _ALIASES.get(str(node.get("model_type") or ""), str(node.get("model_type") or ""))
    if inner and default_type and not known_type(inner):
        inner = ""  # a sub-config type transformers has no class for (EXAONE 4.5's exaone4_5_text): the default
    text_type = (inner or default_type or model_type) if honours_inner else default_type
    return node, _ALIASES.get(text_type, text_type), ".".join(path)


def _decoder_keys(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """An encoder-decoder config as ``get_text_config(decoder=True)`` hands it out: ``decoder_layers`` ->
    ``num_hidden_layers``, ``decoder_attention_heads`` -> ``num_attention_heads``, ``decoder_X`` -> ``X``."""
    out = dict(cfg)
    for key, value in cfg.items():
        if key.startswith("decoder_"):
            new = {"decoder_layers": "num_hidden_layers", "decoder_attention_heads": "num_attention_heads"}.get(
                key, key.removeprefix("decoder_"))
            out[new] = value
    return out


def with_class_defaults(text: Mapping[str, Any], kind: Kind) -> Mapping[str, Any]:
    """``text`` as the config class holds it: ``attribute_map`` aliases resolved both ways, the class defaults of
    sizes and windows filled in where the file is silent, and a head dim the class always derives (Zamba2:
    ``2 * hidden_size // num_attention_heads``) put in its place."""
    if not kind.defaults and not kind.aliases and kind.head_dim_times is None:
        return text
    out = dict(text)
    for alias, target in kind.aliases.items():
        if target not in out and alias in out:
            out[target] = out[alias]
    for key, value in kind.defaults.items():
        out.setdefault(key, value)
    for alias, target in kind.aliases.items():
        if target in out:
            out[alias] = out[target]
    hidden, heads = out.get("hidden_size"), out.get("num_attention_heads")
    if kind.head_dim_times is not None and isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        out["head_dim"] = kind.head_dim_times * hidden // heads
    return out


def with_text(cfg: Mapping[str, Any], where: str, text: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` with the text model's config (found at ``where``, as :func:`text_config` names it) replaced by
    ``text``; a sub-config the file leaves out is written where the class looks for it."""
    path = where.removesuffix(ABSENT).split(".") if where else []
    if not path:
        return text
    out = dict(cfg)
    node = out
    for key in path[:-1]:
        child = node.get(key)
        node[key] = dict(child) if isinstance(child, Mapping) else {}
        node = node[key]
    node[path[-1]] = text
    return out


def head_dim_of(text: Mapping[str, Any], kind: Kind, text_type: str) -> int | None:
    for key in ("qk_rope_head_dim", "head_dim", "rotary_dim", "global_head_dim"):
        value = text.get(key)
        if value is not None and not (is_number(value) and value == int(value)):
            raise PosencError(f"{key} = {value!r} is not a whole number")
    for key, rules in (kind.conversions.get("keys") or {}).items():
        # a dim the class makes config.head_dim whatever head_dim the file writes (GLM-5's qk_rope_head_dim)
        if any(r["field"] == "head_dim" and r.get("wins") for r in rules) and text.get(key):
            return int(text[key])
    if kind.mla and text.get("qk_rope_head_dim"):
        return int(text["qk_rope_head_dim"])  # MLA: the config class sets head_dim = qk_rope_head_dim
    if kind.mla:
        return 32 if text_type == "minicpm3" else 64
    if text.get("head_dim"):
        return int(text["head_dim"])
    if kind.head_dim:
        return kind.head_dim
    hidden = text.get("hidden_size", text.get("n_embd", text.get("d_model")))
    heads = text.get("num_attention_heads", text.get("n_head", text.get("n_heads")))
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        if hidden // heads > MAX_HEAD_DIM:
            raise PosencError(f"hidden_size {hidden} / num_attention_heads {heads} gives head_dim {hidden // heads}; "
                              f"posenc reads head dims up to {MAX_HEAD_DIM} (no model comes near)")
        return hidden // heads
    return None


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

"""A rope scaling written into a GGUF: the metadata and rope tensors llama.cpp's converter writes for the same rope
(``posenc scale METHOD --config MODEL.gguf -o NEW.gguf``), as a :class:`~posenc_cli.models.gguf.writer.Edit`.

What ``convert_hf_to_gguf.py`` (llama-cpp-python 0.3.36) writes from a config.json, per architecture posenc writes
(:data:`WRITTEN_ARCHS`; ``conversion/base.py`` ``set_gguf_parameters``, ``llama.py``, ``phi.py``, ``deepseek.py``,
``gemma.py``, ``mistral3.py``), and so what :func:`scaling_edit` sets:

* every architecture: ``{arch}.context_length`` = ``max_position_embeddings`` and ``{arch}.rope.freq_base`` =
  ``rope_theta`` (``ntk`` changes only these: a static base, no scaling key);
* the common keys (llama, llama4, qwen2, qwen3, qwen3moe, glm4, glm4moe, gpt-oss, gemma3, deepseek2, mistral3):
  ``linear``: ``rope.scaling.type`` linear and ``rope.scaling.factor``; ``yarn``: type yarn, the factor,
  ``rope.scaling.original_context_length``, ``rope.scaling.yarn_attn_factor`` when the rope dict names an
  ``attention_factor`` and ``rope.scaling.yarn_beta_fast/slow`` when it names them (or, where the reader leaves
  them out because llama.cpp does not read them, when the input has them); gemma3: these for the global layers,
  ``rope.freq_base_swa`` (the sliding layers' base) kept;
* llama, llama4: ``llama3`` (``LlamaModel.generate_extra_tensors``): no scaling key, the ``rope_freqs`` tensor (F32,
  one factor per pair);
* deepseek2: ``rope.scaling.yarn_log_multiplier`` = 0.1 mscale_all_dim when the dict names mscale_all_dim;
* mistral3 (a Ministral 3 config, YaRN only): ``rope.scaling.yarn_log_multiplier`` = mscale_all_dim itself;
* phi3 (``Phi3MiniModel``, LongRoPE only): ``rope.scaling.original_context_length``, ``rope.scaling.attn_factor``
  and the ``rope_factors_long/short`` tensors (F32), no scaling type.

Every other ``rope.scaling.*`` key of the input is deleted, and a ``rope_freqs`` tensor is dropped unless the new
rope is llama3 (a GGUF converted from the patched config has none; llama.cpp applies it under any scaling, so it
would stack). Where the converter's file would be wrong, posenc's differs from it, so that llama.cpp computes what
transformers computes (the proof: tests/models/test_gguf_scaled.py runs llama.cpp on both files):

* YaRN with an attention factor other than the one llama.cpp derives (``0.1 ln s + 1``; for mistral3
  ``mscale(s, 1) / mscale(s, mscale_all_dim)``), from ``--attention-factor`` or a model's ``mscale``: llama.cpp does
  not read ``yarn_attn_factor`` (it multiplies ``rope.scaling.attn_factor`` by its own factor), so
  ``rope.scaling.attn_factor`` = wanted / that factor is written as well;
* deepseek2: llama.cpp ties the magnitude and the softmax scale to ``rope.scaling.attn_factor`` and
  ``yarn_log_multiplier`` under any scaling (:mod:`posenc_cli.models.gguf.deepseek2`): the two keys that give
  transformers' numbers are written (for DeepSeek's own mscale pair they are the converter's; for linear scaling
  the converter writes none, and llama.cpp's softmax would be ``(0.1 ln s + 1)^2`` too large);
* LongRoPE: ``rope.scaling.attn_factor`` (llama.cpp's magnitude) is transformers' magnitude for the rope dict: an
  explicit ``attention_factor``, else ``sqrt(1 + ln(f) / ln(original))`` with ``f`` the dict's ``factor`` when it
  names one, where the converter always takes ``f = max_position_embeddings / original``. ``posenc scale longrope``
  writes ``factor = max_position_embeddings / original``, so on its own files the two agree (a converted Phi-3 twin
  at 256k: the same keys, logits within 2e-3 of transformers); a dict whose factor says otherwise gets transformers'
  magnitude here.

Refused, with the reason: dynamic NTK (llama.cpp has none; the converter writes no scaling, so the file would run
plain RoPE), llama3 outside llama, LongRoPE outside phi3 and anything but LongRoPE on phi3 (the converter refuses or
drops them), a gemma3 YaRN attention factor (llama.cpp applies it to the sliding layers too), a deepseek2 rope the
two keys cannot give, a mistral3 file not from Ministral 3 (not proven) or anything but YaRN for one, and the
architectures not listed (not proven). YaRN's ``truncate: false`` (gpt-oss)
is not held by any GGUF: a note says so.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.models.gguf.deepseek2 import deepseek2_keys
from posenc_cli.models.gguf.header import BOOL, FLOAT32, FLOAT64, STRING, UINT32, shortest_float32
from posenc_cli.models.gguf.metadata import DEEPSEEK_ARCHS, GEMMA3_ARCHS, LOG_MULTIPLIER_ARCHS, GgufFacts
from posenc_cli.models.gguf.writer import Edit
from posenc_cli.rope.attention_factors import longrope_attention_factor, yarn_attention_factor, yarn_mscale
from posenc_cli.rope.rope_types import RECORDS

__all__ = ["WRITTEN_ARCHS", "SCALING_KEYS", "scaling_edit"]

#: the rope types each GGUF architecture takes from the converter's common code (``conversion/base.py``): a new base,
#: linear and YaRN keys
_COMMON = ("default", "linear", "yarn")

#: architecture -> the rope types posenc writes into its GGUFs (each proven on converter-made GGUFs:
#: tests/models/test_gguf_scaled.py)
WRITTEN_ARCHS: dict[str, tuple[str, ...]] = {
    "llama": (*_COMMON, "llama3"),
    "llama4": (*_COMMON, "llama3"),
    "qwen2": _COMMON,
    "qwen3": _COMMON,
    "qwen3moe": _COMMON,
    "gemma3": _COMMON,
    "deepseek2": _COMMON,
    "glm4": _COMMON,
    "glm4moe": _COMMON,
    "gpt-oss": _COMMON,
    "mistral3": ("yarn",),
    "phi3": ("longrope",),
}

#: the rope scaling keys (under ``{arch}.``) a new scaling replaces: every one llama.cpp or the converter knows
SCALING_KEYS = ("rope.scaling.type", "rope.scaling.factor", "rope.scale_linear", "rope.scaling.attn_factor",
                "rope.scaling.original_context_length", "rope.scaling.finetuned", "rope.scaling.alpha",
                "rope.scaling.yarn_log_multiplier", "rope.scaling.yarn_ext_factor", "rope.scaling.yarn_attn_factor",
                "rope.scaling.yarn_beta_fast", "rope.scaling.yarn_beta_slow")


def _refuse(facts: GgufFacts, rope_type: str) -> None:
    arch = facts.architecture
    if rope_type == "dynamic":
        raise PosencError("dynamic NTK cannot be written into a GGUF: llama.cpp has no dynamic NTK (no per-length "
                          "base), and convert_hf_to_gguf.py writes no scaling for it, so the file would run plain "
                          "RoPE; use `posenc scale ntk` (a static base) or yarn")
    allowed = WRITTEN_ARCHS.get(arch)
    if allowed is None:
        known = ", ".join(WRITTEN_ARCHS)
        raise PosencError(f"posenc writes rope scaling into GGUFs of the architectures {known}, proven on GGUFs made "
                          f"by llama.cpp's converter; this one is {arch}: patch config.json with `--engine hf "
                          "-o DIR/config.json` and convert it with convert_hf_to_gguf.py")
    if arch in LOG_MULTIPLIER_ARCHS and not facts.yarn_log_multiplier:
        raise PosencError(f"posenc writes {arch} GGUFs converted from a Ministral 3 config (they carry "
                          "rope.scaling.yarn_log_multiplier); this one has none, so it comes from another Mistral 3 "
                          "config (Mistral Small 3.x), whose conversion is not proven here: patch config.json with "
                          "`--engine hf -o DIR/config.json` and convert it with convert_hf_to_gguf.py")
    if arch in LOG_MULTIPLIER_ARCHS and rope_type != "yarn":
        raise PosencError(f"{'ntk (a new base)' if rope_type == 'default' else rope_type} cannot be written into "
                          f"a {arch} GGUF of Ministral 3: convert_hf_to_gguf.py writes YaRN only for it (it asserts "
                          "rope_type yarn); use `posenc scale yarn`")
    if rope_type not in allowed:
        name = {"default": "ntk (a new base)"}.get(rope_type, rope_type)
        raise PosencError(f"{name} cannot be written into a {arch} GGUF: llama.cpp's converter writes "
                          f"{' / '.join(allowed)} for {arch} (llama3 is a rope_freqs tensor of llama and llama4 "
                          "GGUFs only; LongRoPE the rope_factors tensors of phi3 ones)")


def marker_keys(record: Mapping[str, Any]) -> dict[str, tuple[int, Any]]:
    """posenc's record of a file it wrote (:func:`posenc_cli.models.facts.marker`) as GGUF metadata: ``posenc.*``
    keys, outside every architecture's namespace, which llama.cpp never reads (:func:`metadata.gguf_config` reads
    them back)."""
    return {"posenc.trained_ctx": (UINT32, int(record["trained_ctx"])),
            "posenc.window": (UINT32, int(record["window"])),
            "posenc.training_free": (BOOL, bool(record["training_free"])),
            "posenc.rope_theta": (FLOAT64, float(record["rope_theta"]))}


def scaling_edit(facts: GgufFacts, params: Mapping[str, Any], max_position_embeddings: int,
                 rotary_dim: int) -> tuple[Edit, list[str]]:
    """The :class:`Edit` that gives a GGUF of ``facts`` the rope dict ``params`` (transformers 5 form, ``rope_theta``
    inside) and ``max_position_embeddings``, and notes on what differs from the converter's output (module
    docstring). ``rotary_dim``: the rotating features (the rope tensors hold one value per pair)."""
    arch = facts.architecture
    rope_type = str(params.get("rope_type", "default"))
    _refuse(facts, rope_type)
    key = f"{arch}.".__add__
    edit = Edit(delete_keys={key(k) for k in SCALING_KEYS})
    edit.set_keys[key("context_length")] = (UINT32, int(max_position_embeddings))
    theta = float(params["rope_theta"])
    edit.set_keys[key("rope.freq_base")] = (FLOAT32, theta)
    notes: list[str] = []
    if facts.has_rope_freqs and rope_type != "llama3":
        edit.tensors["rope_freqs.weight"] = None
        notes.append("dropped the rope_freqs tensor (per-pair factors): llama.cpp applies it under any scaling, "
                     f"so it would stack on {'ntk' if rope_type == 'default' else rope_type}; a GGUF converted from "
                     "the patched config has none")
    if rope_type == "linear":
        edit.set_keys[key("rope.scaling.type")] = (STRING, "linear")
        edit.set_keys[key("rope.scaling.factor")] = (FLOAT32, float(params["factor"]))
        if arch in DEEPSEEK_ARCHS:
            notes += _deepseek2(edit, key, params)
    elif rope_type == "yarn":
        notes += _yarn(edit, key, params, facts)
    elif rope_type == "llama3":
        from posenc_cli.models.gguf.rope import llama3_factors  # numpy: only for a llama3 rope

        llama3 = {k: params[k] for k in RECORDS["llama3"].keys if k != "rope_theta"}
        edit.tensors["rope_freqs.weight"] = llama3_factors(llama3, theta, rotary_dim)
    elif rope_type == "longrope":
        notes += _longrope(edit, key, params, max_position_embeddings, rotary_dim)
    return edit, notes


def _deepseek2(edit: Edit, key: Any, params: Mapping[str, Any]) -> list[str]:
    """deepseek2's two keys (:func:`~posenc_cli.models.gguf.deepseek2.deepseek2_keys`) for a linear or YaRN rope;
    refused where llama.cpp's tie of magnitude and softmax cannot give transformers' numbers."""
    factor = float(params["factor"])
    if factor <= 1.0:
        return []
    keys = deepseek2_keys(params)
    if not keys.exact:
        raise PosencError(f"this rope cannot be written into a deepseek2 GGUF: llama.cpp ties its softmax scale to "
                          f"the cos/sin magnitude (rope.scaling.attn_factor and yarn_log_multiplier), and no values "
                          f"of the two keys give transformers' magnitude {yarn_attention_factor(params, factor):.6g} "
                          f"with its softmax scale; keep the model's mscale and mscale_all_dim (no --attention-factor)")
    m_all = params.get("mscale_all_dim")
    converters = shortest_float32(0.1 * float(m_all)) if m_all is not None else None
    notes: list[str] = []
    if keys.log_multiplier != converters and (keys.log_multiplier or converters is not None):
        edit.set_keys[key("rope.scaling.yarn_log_multiplier")] = (FLOAT32, keys.log_multiplier)
        notes.append(f"wrote rope.scaling.yarn_log_multiplier {keys.log_multiplier!r}: llama.cpp's deepseek2 scales "
                     "the softmax by ((0.1 ln(factor) + 1)(1 + yarn_log_multiplier ln(factor)))^2 under any scaling, "
                     f"so this gives transformers' softmax x{keys.softmax:.6g} (convert_hf_to_gguf.py writes "
                     f"{'none' if converters is None else converters})")
    elif converters is not None:
        edit.set_keys[key("rope.scaling.yarn_log_multiplier")] = (FLOAT32, converters)
    if keys.attn_factor is not None:
        edit.set_keys[key("rope.scaling.attn_factor")] = (FLOAT32, keys.attn_factor)
        notes.append(f"wrote rope.scaling.attn_factor {shortest_float32(keys.attn_factor)!r}: llama.cpp's deepseek2 "
                     f"magnitude, giving transformers' attention factor {keys.magnitude:.6g} (llama.cpp does not read "
                     "the yarn_attn_factor key convert_hf_to_gguf.py writes)")
    return notes


def _yarn(edit: Edit, key: Any, params: Mapping[str, Any], facts: GgufFacts) -> list[str]:
    arch = facts.architecture
    factor = float(params["factor"])
    edit.set_keys[key("rope.scaling.type")] = (STRING, "yarn")
    edit.set_keys[key("rope.scaling.factor")] = (FLOAT32, factor)
    original = int(params["original_max_position_embeddings"])
    edit.set_keys[key("rope.scaling.original_context_length")] = (UINT32, original)
    notes: list[str] = []
    if params.get("attention_factor") is not None:
        edit.set_keys[key("rope.scaling.yarn_attn_factor")] = (FLOAT32, float(params["attention_factor"]))
    for name in ("beta_fast", "beta_slow"):
        # the dict's value, else the input's key: the reader leaves the keys out of the dict where llama.cpp does
        # not read them (metadata.BETA_ARCHS), and the converter wrote them from the config that a scaled config
        # keeps them in
        value = params.get(name, getattr(facts, f"yarn_{name}"))
        if value is not None:
            edit.set_keys[key(f"rope.scaling.yarn_{name}")] = (FLOAT32, float(value))
    if arch in DEEPSEEK_ARCHS:
        return notes + _deepseek2(edit, key, params) + _truncate(params)
    wanted = yarn_attention_factor(params, factor)
    default = yarn_mscale(factor)
    m_all = params.get("mscale_all_dim")
    if arch in LOG_MULTIPLIER_ARCHS and m_all:
        # the ministral3 converter writes mscale_all_dim itself as yarn_log_multiplier; llama.cpp's magnitude is
        # then mscale(s, 1) / mscale(s, m_all) times rope.scaling.attn_factor (it takes the config's mscale as 1)
        edit.set_keys[key("rope.scaling.yarn_log_multiplier")] = (FLOAT32, float(m_all))
        default = yarn_mscale(factor) / yarn_mscale(factor, float(m_all))
    if arch in GEMMA3_ARCHS and not math.isclose(wanted, default, rel_tol=1e-7):
        raise PosencError(f"a YaRN attention factor other than 0.1 ln(factor) + 1 ({wanted:.6g}) cannot be written "
                          "into a gemma3 GGUF: llama.cpp applies rope.scaling.attn_factor to the sliding-window "
                          "layers too, where transformers scales the global layers only")
    if not math.isclose(wanted, default, rel_tol=1e-7):
        edit.set_keys[key("rope.scaling.attn_factor")] = (FLOAT32, wanted / default)
        notes.append(f"wrote rope.scaling.attn_factor {shortest_float32(wanted / default)!r}: llama.cpp multiplies it "
                     f"by {default:.6g}, giving transformers' attention factor {wanted:.6g} "
                     "(llama.cpp does not read the yarn_attn_factor key convert_hf_to_gguf.py writes)")
    return notes + _truncate(params)


def _truncate(params: Mapping[str, Any]) -> list[str]:
    if params.get("truncate") is False:
        return ["llama.cpp always rounds YaRN's correction range (truncate=true); this rope has truncate=false, "
                "which a GGUF cannot hold"]
    return []


def _longrope(edit: Edit, key: Any, params: Mapping[str, Any], max_position_embeddings: int,
              rotary_dim: int) -> list[str]:
    original = int(params["original_max_position_embeddings"])
    notes: list[str] = []
    long, short = list(params["long_factor"]), list(params["short_factor"])
    if len(long) != rotary_dim // 2 or len(short) != rotary_dim // 2:
        raise PosencError(f"longrope factor lists must have one entry per rotated pair ({rotary_dim // 2}), got "
                          f"{len(long)} long and {len(short)} short")
    scale = max_position_embeddings / original
    # transformers' magnitude: from the dict's factor when it names one (posenc_cli.rope.frequencies), else the
    # lengths' ratio, which is all the converter uses
    factor = float(params.get("factor") or scale)
    magnitude = longrope_attention_factor(params, factor, original)
    converters = math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1.0 else 1.0
    if shortest_float32(magnitude) != shortest_float32(converters):
        notes.append(f"wrote rope.scaling.attn_factor {magnitude:.6g}, transformers' LongRoPE magnitude for this rope "
                     f"(factor {factor:g}); convert_hf_to_gguf.py writes {converters:.6g} from the lengths alone")
    edit.set_keys[key("rope.scaling.original_context_length")] = (UINT32, original)
    edit.set_keys[key("rope.scaling.attn_factor")] = (FLOAT32, magnitude)
    edit.tensors["rope_factors_long.weight"] = [float(v) for v in long]
    edit.tensors["rope_factors_short.weight"] = [float(v) for v in short]
    return notes

"""What a GGUF file's metadata says about positions (:class:`GgufFacts`, :func:`read_gguf`), and the HF-style config
that computes what llama.cpp computes from it (:func:`gguf_config`, :func:`llama_cpp_meaning`).

:mod:`posenc_cli.models.gguf.header` (standard library) reads the header: the values of the keys below are decoded,
every other value is seeked over (a tokenizer's arrays of 128k tokens and 280k merges cost their 8-byte lengths, not
a decode), the tensor-info records give their names, and tensor data is never read, so a 100 GB file costs what its
header does. Every value is what ``gguf.GGUFReader`` gives (the tests compare the two on every test GGUF); a
truncated or corrupt file is one :class:`PosencError`. Read: ``general.architecture`` and, under ``{arch}.``:
``context_length``, ``embedding_length``, ``attention.head_count`` (a per-layer list counts as its first entry, as
llama.cpp's ``n_head()`` does), ``attention.key_length``, ``rope.freq_base``, ``rope.dimension_count``,
``rope.scaling.type``, ``rope.scaling.factor`` (older files: ``rope.scale_linear``),
``rope.scaling.original_context_length``, ``rope.scaling.attn_factor``, ``rope.scaling.yarn_beta_fast``,
``rope.scaling.yarn_beta_slow``, ``rope.scaling.yarn_log_multiplier``, ``rope.freq_base_swa``, ``block_count``,
``attention.sliding_window(_pattern)``, every other ``rope.*`` key (reported), and the VALUES of the small rope
tensors ``rope_freqs.weight`` (llama3 factors that convert_hf_to_gguf.py bakes into the file; the metadata then
names no scaling) and ``rope_factors_long/short.weight`` (LongRoPE), read by seeking to just those bytes.
GGUF stores floats as float32; they are reported as the shortest decimal that rounds to the same float32 (``0.1``,
not ``0.10000000149011612``), which is what the converter was given in nearly every case.

The synthesized config carries llama.cpp's meaning, not transformers' defaults for the ``model_type``: a missing
``rope.freq_base`` is 10000; ``rope.dimension_count`` features rotate in every architecture (so the partial rotary
factor is always written, and :func:`posenc_cli.models.sources.describe_source` makes plain RoPE honour it); a scaling
factor with no ``rope.scaling.type`` means linear scaling; in YaRN mode llama.cpp multiplies
``rope.scaling.attn_factor`` by ``0.1 ln(factor) + 1``, so that product is written as ``attention_factor``; the YaRN
beta keys count only for the architectures whose llama.cpp code reads them (grok, mistral3). ``rope_freqs`` becomes the
llama3 parameters that give its factors (:mod:`posenc_cli.models.gguf.rope`; another table: LongRoPE with that one table
and magnitude 1), ``rope_factors_long/short`` a LongRoPE dict with the ``attn_factor`` key as its magnitude, deepseek2
transformers' deepseek_v3 with llama.cpp's mscale rule, gemma3 gemma3_text with llama.cpp's sliding pattern and
``rope.freq_base_swa``. :func:`llama_cpp_meaning` lists what llama.cpp does that a config would say otherwise and what
the file cannot hold (YaRN's truncate, DeepSeek's mscale).

Stdlib only: a GGUF needs no package at all, and numpy is loaded only to match a ``rope_freqs`` tensor against
transformers' llama3 arithmetic.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.models.gguf.header import ARRAY_MAX, Skipped, read_header, shortest_float32, starts_with_gguf_magic
from posenc_cli.rope.attention_factors import longrope_attention_factor, yarn_mscale


@dataclass
class GgufFacts:
    """What a GGUF file's metadata says about positions (``None``: the key is absent)."""

    architecture: str
    context_length: int | None = None
    rope_freq_base: float | None = None
    rope_dimension_count: int | None = None
    embedding_length: int | None = None
    head_count: int | None = None
    key_length: int | None = None
    scaling_type: str | None = None
    scaling_factor: float | None = None
    original_context_length: int | None = None
    attn_factor: float | None = None
    yarn_beta_fast: float | None = None
    yarn_beta_slow: float | None = None
    yarn_log_multiplier: float | None = None
    has_rope_freqs: bool = False
    keys: dict[str, Any] = field(default_factory=dict)  # every rope / context / head key found, for reporting
    freq_base_swa: float | None = None
    block_count: int | None = None
    sliding_window: int | None = None
    swa_pattern: Any = None  # attention.sliding_window_pattern: a period, or one bool per layer
    rope_freqs: list[float] | None = None  # the rope_freqs tensor's values (llama3 factors, per pair)
    rope_factors_long: list[float] | None = None  # LongRoPE's tables, as tensors
    rope_factors_short: list[float] | None = None


_REPORTED = ("context_length", "embedding_length", "attention.head_count", "attention.head_count_kv",
             "attention.key_length", "attention.value_length", "block_count", "attention.sliding_window",
             "attention.sliding_window_pattern")

_REPORTED_SUFFIXES = tuple("." + key for key in _REPORTED)


def _maybe_reported(key: str) -> bool:
    """Whether ``key`` can be one :func:`_metadata` keeps, whatever the architecture (it may come later in the
    file): ``general.architecture``, ``{arch}.rope.*`` or ``{arch}.`` + a key in ``_REPORTED``."""
    return (key == "general.architecture" or ".rope." in key or key.endswith(_REPORTED_SUFFIXES)
            or key.startswith(MARKER_PREFIX))


#: posenc's record of a GGUF it wrote (``posenc.trained_ctx``, ``posenc.window``, ``posenc.training_free``)
MARKER_PREFIX = "posenc."


def read_gguf(path: str | os.PathLike[str], label: str | None = None) -> GgufFacts:
    """The positional facts in a GGUF file's metadata; a truncated or corrupt file is one PosencError."""
    label = str(path) if label is None else label
    if not starts_with_gguf_magic(Path(path), label):
        raise PosencError(f"{label}: not a readable GGUF file (it does not start with the GGUF magic bytes)")
    header = read_header(path, label, _maybe_reported, ROPE_TENSORS)
    facts = _facts(_metadata(header.fields, label), set(header.tensor_names), label)
    tables: dict[str, list[float]] = {}
    for name, values in header.tensors.items():
        if not isinstance(values, list):
            raise PosencError(f"{label}: GGUF tensor {name} holds {values}; posenc reads F32 or F16 rope tables of "
                              "at most 4096 entries")
        tables[name] = values
    rotary = facts.rope_dimension_count or facts.key_length or (
        facts.embedding_length // facts.head_count if facts.embedding_length and facts.head_count else None)
    for name, values in tables.items():
        bad = next((v for v in values if not (math.isfinite(v) and v > 0)), None)
        if bad is not None:
            raise PosencError(f"{label}: GGUF tensor {name} holds {bad!r}; llama.cpp divides each pair's frequency "
                              "by these factors, which must be positive numbers")
        if rotary and len(values) != rotary // 2:
            raise PosencError(f"{label}: GGUF tensor {name} has {len(values)} values; llama.cpp needs one per "
                              f"rotating pair ({rotary // 2} for rope.dimension_count {rotary})")
    facts.rope_freqs = tables.get("rope_freqs.weight")
    facts.rope_factors_long = tables.get("rope_factors_long.weight")
    facts.rope_factors_short = tables.get("rope_factors_short.weight")
    return facts


#: the small tensors llama.cpp's rope reads (convert_hf_to_gguf.py writes them): their values are read
ROPE_TENSORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")


def _metadata(candidates: dict[str, Any], label: str) -> dict[str, Any]:
    """The architecture, rope, context and head fields among ``candidates`` (file order); one of them that the
    header reader seeked over instead of decoding (an array of arrays or of more than ARRAY_MAX entries) is an
    error."""
    arch = candidates.get("general.architecture")
    fields: dict[str, Any] = {}
    for name, value in candidates.items():
        if name == "general.architecture" or name.startswith(MARKER_PREFIX):
            fields[name] = value
        elif isinstance(arch, str) and name.startswith(arch + "."):
            rest = name[len(arch) + 1:]
            if rest.startswith("rope.") or rest in _REPORTED:
                fields[name] = value
    for name, value in fields.items():
        if isinstance(value, Skipped):
            raise PosencError(f"{label}: GGUF key {name} holds {value}; posenc reads arrays of at most {ARRAY_MAX} "
                              "numbers or strings, and strings of at most 1 MiB")
    return fields


def _facts(fields: dict[str, Any], tensor_names: set[str], label: str) -> GgufFacts:
    arch = fields.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise PosencError(f"{label}: the GGUF file has no general.architecture, so its keys cannot be found")

    def get(key: str, kind: type, first_of_list: bool = False) -> Any:
        full = f"{arch}.{key}"
        value = fields.get(full)
        if value is None:
            return None
        if first_of_list and isinstance(value, list) and value:
            value = value[0]  # a per-layer list: llama.cpp's n_head() is layer 0's
        if kind is str:
            ok, wanted = isinstance(value, str), "a string"
        elif kind is int:
            ok, wanted = isinstance(value, int) and not isinstance(value, bool), "an integer"
        else:
            ok, wanted = (isinstance(value, (int, float)) and not isinstance(value, bool)
                          and math.isfinite(value)), "a finite number"
        if not ok:
            raise PosencError(f"{label}: GGUF key {full} = {value!r} is not {wanted}")
        return float(value) if kind is float else value

    factor = get("rope.scaling.factor", float)
    if factor is None:
        factor = get("rope.scale_linear", float)  # the key's name before rope.scaling.factor
    return GgufFacts(
        architecture=arch,
        context_length=get("context_length", int),
        rope_freq_base=get("rope.freq_base", float),
        rope_dimension_count=get("rope.dimension_count", int),
        embedding_length=get("embedding_length", int),
        head_count=get("attention.head_count", int, first_of_list=True),
        key_length=get("attention.key_length", int),
        scaling_type=get("rope.scaling.type", str),
        scaling_factor=factor,
        original_context_length=get("rope.scaling.original_context_length", int),
        attn_factor=get("rope.scaling.attn_factor", float),
        yarn_beta_fast=get("rope.scaling.yarn_beta_fast", float),
        yarn_beta_slow=get("rope.scaling.yarn_beta_slow", float),
        yarn_log_multiplier=get("rope.scaling.yarn_log_multiplier", float),
        has_rope_freqs="rope_freqs.weight" in tensor_names,
        keys=dict(fields),
        freq_base_swa=get("rope.freq_base_swa", float),
        block_count=get("block_count", int),
        sliding_window=get("attention.sliding_window", int),
        swa_pattern=fields.get(f"{arch}.attention.sliding_window_pattern"),
    )


def gguf_config(facts: GgufFacts) -> dict[str, Any]:
    """An HF-style config dict from GGUF facts, with llama.cpp's meaning (see the module docstring).

    llama.cpp rotates ``rope.dimension_count`` features in every architecture, so the partial rotary factor is
    always written; a missing ``rope.freq_base`` is llama.cpp's 10000. In YaRN mode llama.cpp multiplies the GGUF's
    ``rope.scaling.attn_factor`` by ``0.1 ln(factor) + 1``, so that product is the attention factor. The factor
    tensors become the rope type that computes the same: ``rope_freqs`` a llama3 dict
    (:mod:`posenc_cli.models.gguf.rope`), ``rope_factors_long/short`` a longrope dict, with
    ``rope.scaling.original_context_length`` as the original length (also written at the top level, where
    transformers' Phi-3 config reads it). deepseek2 is read as transformers' deepseek_v3 (MLA: the rotary part is
    ``qk_rope_head_dim``), with llama.cpp's mscale rule (see :func:`llama_cpp_meaning`); mistral3's
    ``yarn_log_multiplier`` is mscale_all_dim itself (the magnitude ``mscale(s, 1) / mscale(s, m_all)``). The model
    type is the text model's (:data:`MODEL_TYPES`), and a file with no scaling key whose class defaults to one
    (:data:`SCALED_CLASS_DEFAULTS`) says ``rope_type`` default: llama.cpp runs plain RoPE.
    """
    deepseek = facts.architecture in DEEPSEEK_ARCHS
    model_type = MODEL_TYPES.get(facts.architecture, facts.architecture.replace("-", "_"))
    cfg: dict[str, Any] = {"model_type": "deepseek_v3" if deepseek else model_type}
    if facts.context_length is not None:
        cfg["max_position_embeddings"] = facts.context_length
    # framework fact: this package's own default base (10000), read as it reads it
    theta = facts.rope_freq_base if facts.rope_freq_base is not None else 10000.0
    cfg["rope_theta"] = theta
    head_dim = facts.key_length
    if not head_dim and facts.embedding_length and facts.head_count:
        head_dim = facts.embedding_length // facts.head_count
    if deepseek:
        if facts.rope_dimension_count:
            cfg["qk_rope_head_dim"] = facts.rope_dimension_count
    else:
        if head_dim:
            cfg["head_dim"] = head_dim
        if facts.rope_dimension_count and head_dim:
            cfg["partial_rotary_factor"] = facts.rope_dimension_count / head_dim
    if facts.head_count:
        cfg["num_attention_heads"] = facts.head_count
    if facts.embedding_length is not None:
        cfg["hidden_size"] = facts.embedding_length
    if facts.block_count is not None:
        cfg["num_hidden_layers"] = facts.block_count
    if facts.architecture in GEMMA3_ARCHS:
        _gemma3_layers(facts, cfg)
    elif facts.freq_base_swa is not None:
        cfg["rope_local_base_freq"] = facts.freq_base_swa
    rope = _gguf_rope(facts, theta, facts.rope_dimension_count or head_dim)
    if rope is not None:
        cfg["rope_scaling"] = rope
        if rope.get("rope_type") == "longrope" and facts.original_context_length is not None:
            # the file's own original length: transformers' Phi-3 config reads it at the top level (its default
            # 4096 would replace the dict's), so it is written there too
            cfg["original_max_position_embeddings"] = facts.original_context_length
    elif facts.architecture in SCALED_CLASS_DEFAULTS:
        # no scaling key: llama.cpp runs plain RoPE, where the model type's class default is a scaling
        cfg["rope_scaling"] = {"rope_type": "default"}
    record = {name: facts.keys.get(MARKER_PREFIX + name)
              for name in ("trained_ctx", "window", "training_free", "rope_theta")}
    if all(record[name] is not None for name in ("trained_ctx", "window", "training_free")):
        cfg["posenc"] = record  # posenc's record of a GGUF it wrote (models.facts.read_marker checks it)
    return cfg


#: GGUF architectures whose transformers text model_type is not the name with "-" as "_", so that class defaults
#: and rope.windows' trained lengths apply to a GGUF as to its config.json. mistral3 and llama4 are transformers'
#: wrapper types, whose absent text_config would give a Mistral Small 3.1's or a Llama 4 Scout's class defaults;
#: mistral3's text model reads as mistral (ministral3's class defaults hold a YaRN rope a GGUF may not have).
MODEL_TYPES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "glm4moe": "glm4_moe", "mistral3": "mistral",
               "llama4": "llama4_text"}

#: GGUF architectures whose transformers config class defaults to a scaled rope (gpt_oss: YaRN x32), which a GGUF
#: with no scaling key must not inherit
SCALED_CLASS_DEFAULTS = ("gpt-oss",)

DEEPSEEK_ARCHS = ("deepseek2",)  # llama.cpp archs that rebuild YaRN's mscale pair from yarn_log_multiplier

#: the archs other than deepseek2 whose llama.cpp code reads rope.scaling.yarn_log_multiplier, as m_all itself (not
#: / 0.1): the converter writes it only from a Ministral 3 config (mscale_all_dim), with YaRN only (it asserts it)
LOG_MULTIPLIER_ARCHS = ("mistral3",)

BETA_ARCHS = ("grok", "mistral3")  # the archs whose llama.cpp code reads rope.scaling.yarn_beta_fast/slow

DEFAULT_GGUF_CONTEXT = 4096

GEMMA3_ARCHS = ("gemma3",)  # read as transformers' gemma3_text: sliding layers turn with rope.freq_base_swa


def _gemma3_layers(facts: GgufFacts, cfg: dict[str, Any]) -> None:
    """llama.cpp's gemma3 (models/gemma3.cpp): with a sliding window, layers follow
    ``attention.sliding_window_pattern`` (one bool per layer, or a period; default 6, the last of each period full
    attention) and sliding layers use ``rope.freq_base_swa``; without one, every layer is full attention."""
    cfg["model_type"] = "gemma3_text"
    n = facts.block_count
    if not facts.sliding_window or not n:
        if n:
            cfg["layer_types"] = ["full_attention"] * n
        return
    cfg["sliding_window"] = facts.sliding_window
    pattern = facts.swa_pattern
    if isinstance(pattern, list) and len(pattern) == n:
        swa = [bool(p) for p in pattern]
    else:
        period = pattern if isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0 else 6
        swa = [il % period < period - 1 for il in range(n)]
    cfg["layer_types"] = ["sliding_attention" if s else "full_attention" for s in swa]
    cfg["rope_local_base_freq"] = facts.freq_base_swa if facts.freq_base_swa is not None else cfg["rope_theta"]


def _gguf_rope(facts: GgufFacts, theta: float, rotary_dim: int | None) -> dict[str, Any] | None:
    """The rope_scaling dict that computes what llama.cpp computes from the file (None: plain RoPE)."""
    if facts.rope_freqs is not None and rotary_dim and any(v != 1.0 for v in facts.rope_freqs):
        from posenc_cli.models.gguf.rope import llama3_params  # numpy: only for a table that scales

        params = llama3_params(facts.rope_freqs, theta, rotary_dim)
        if params is not None:
            out: dict[str, Any] = {"rope_type": "llama3", **params}
            return out
        # not the llama3 formula: the same division, written as LongRoPE with one table and magnitude 1
        return {"rope_type": "longrope", "long_factor": facts.rope_freqs, "short_factor": facts.rope_freqs,
                "attention_factor": 1.0,
                "original_max_position_embeddings": facts.original_context_length or facts.context_length
                or DEFAULT_GGUF_CONTEXT}
    if facts.rope_factors_long is not None and facts.rope_factors_short is not None:
        longrope: dict[str, Any] = {"rope_type": "longrope", "long_factor": facts.rope_factors_long,
                                    "short_factor": facts.rope_factors_short}
        if facts.original_context_length is not None:
            longrope["original_max_position_embeddings"] = facts.original_context_length
        # llama.cpp's magnitude is rope.scaling.attn_factor (1 when absent), whatever the lengths; the converter
        # writes LongRoPE's own sqrt(1 + ln(s) / ln(original)) as float32: that value, when the key is it
        magnitude = facts.attn_factor if facts.attn_factor is not None else 1.0
        if facts.context_length and facts.original_context_length:
            own = longrope_attention_factor({}, facts.context_length / facts.original_context_length,
                                            facts.original_context_length)
            magnitude = own if shortest_float32(own) == magnitude else magnitude
        longrope["attention_factor"] = magnitude
        return longrope
    scaling = facts.scaling_type
    if scaling is None and facts.scaling_factor not in (None, 0.0, 1.0):
        scaling = "linear"  # llama.cpp's default type when only a factor is given
    if scaling not in ("linear", "yarn") or facts.scaling_factor in (None, 0.0):
        return None
    factor = float(facts.scaling_factor or 1.0)
    rope: dict[str, Any] = {"rope_type": scaling, "factor": factor}
    if facts.original_context_length is not None:
        rope["original_max_position_embeddings"] = facts.original_context_length
    if scaling == "yarn":
        raf = facts.attn_factor
        if facts.architecture in DEEPSEEK_ARCHS and facts.yarn_log_multiplier:
            # deepseek2.cpp: the converter wrote 0.1 * mscale_all_dim; llama.cpp takes mscale = mscale_all_dim
            # unless that is 1 (llama-context.cpp), so the cos/sin ratio is 1 and the softmax gets mscale^2
            mscale_all_dim = facts.yarn_log_multiplier / 0.1
            rope["mscale_all_dim"] = shortest_float32(mscale_all_dim)
            rope["mscale"] = rope["mscale_all_dim"]
            if raf is not None:
                rope["attention_factor"] = raf
        elif facts.architecture in LOG_MULTIPLIER_ARCHS and facts.yarn_log_multiplier:
            # llama-context.cpp: the magnitude is mscale(s, 1) / mscale(s, m_all) times attn_factor, with m_all
            # the key itself (the ministral3 converter writes mscale_all_dim there)
            rope["mscale"] = 1.0
            rope["mscale_all_dim"] = facts.yarn_log_multiplier
            if raf is not None:
                rope["attention_factor"] = raf * yarn_mscale(factor) / yarn_mscale(factor, facts.yarn_log_multiplier)
        elif raf is not None:
            rope["attention_factor"] = raf * (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)
        if facts.architecture in BETA_ARCHS:  # the others run 32 and 1 whatever the file says
            if facts.yarn_beta_fast is not None:
                rope["beta_fast"] = facts.yarn_beta_fast
            if facts.yarn_beta_slow is not None:
                rope["beta_slow"] = facts.yarn_beta_slow
    return rope


def llama_cpp_meaning(facts: GgufFacts) -> list[str]:
    """What llama.cpp computes from this file that a config would say otherwise, and what the file cannot hold:
    one sentence each (``posenc inspect`` prints them)."""
    notes: list[str] = []
    arch = facts.architecture
    if facts.rope_freqs is not None:
        notes.append("rope_freqs: llama.cpp divides each pair's frequency by its factor, under any --rope-scaling "
                     "flag too (new scaling flags stack on it)")
    if facts.rope_factors_long is not None or facts.rope_factors_short is not None:
        notes.append("rope_factors_long/short tensors: llama.cpp uses the long factors when the context per sequence "
                     f"(--ctx-size) exceeds {facts.original_context_length or 'the original length'}, else the "
                     "short ones, for the whole run (transformers switches per sequence length)")
    if facts.scaling_type == "yarn":
        notes.append("YaRN's truncate is not stored: llama.cpp always rounds the correction range (truncate=true)")
        if arch not in BETA_ARCHS:
            stored = [f"{k} {v:g}" for k, v in (("yarn_beta_fast", facts.yarn_beta_fast),
                                                 ("yarn_beta_slow", facts.yarn_beta_slow)) if v is not None]
            verb = "are" if len(stored) > 1 else "is"
            ignored = f" (the file's {' and '.join(stored)} {verb} not read)" if stored else ""
            notes.append(f"{arch}: llama.cpp reads no yarn_beta keys{ignored}: beta_fast 32 and beta_slow 1 "
                         "unless --yarn-beta-fast/--yarn-beta-slow (only grok and mistral3 read the keys)")
        if arch in DEEPSEEK_ARCHS:
            if facts.yarn_log_multiplier:
                notes.append(f"{arch}: rope.scaling.yarn_log_multiplier {facts.yarn_log_multiplier:g} is 0.1 x "
                             "mscale_all_dim; llama.cpp takes mscale = mscale_all_dim (the config's mscale is not "
                             "stored) and multiplies the softmax scale by mscale(factor, mscale_all_dim)^2")
            else:
                notes.append(f"{arch}: no yarn_log_multiplier: llama.cpp scales both cos/sin and the softmax by "
                             "0.1 ln(factor) + 1")
    if arch in LOG_MULTIPLIER_ARCHS and facts.scaling_type == "yarn" and facts.yarn_log_multiplier:
        notes.append(f"{arch}: rope.scaling.yarn_log_multiplier {facts.yarn_log_multiplier:g} is mscale_all_dim; "
                     "llama.cpp's cos/sin magnitude is mscale(factor, 1) / mscale(factor, mscale_all_dim) times "
                     "rope.scaling.attn_factor (the config's mscale is taken as 1)")
    if facts.freq_base_swa is not None:
        notes.append(f"rope.freq_base_swa {facts.freq_base_swa:g}: llama.cpp's sliding-window layers use this base, "
                     f"the others rope.freq_base {facts.rope_freq_base or 10000.0:g}")
    return notes


def reading_notes(facts: GgufFacts, cfg: dict[str, Any]) -> list[str]:
    """How the reader took the file's metadata (``cfg``: :func:`gguf_config` of ``facts``): one sentence each."""
    notes = ["read from GGUF metadata with llama.cpp's meaning (rope.dimension_count features rotate)"]
    if facts.architecture in DEEPSEEK_ARCHS:
        notes.append(f"GGUF architecture {facts.architecture} read as transformers' deepseek_v3 (MLA: "
                     "rope.dimension_count is qk_rope_head_dim)")
    rope = cfg.get("rope_scaling") or {}
    if facts.rope_freqs is not None and rope.get("rope_type") == "llama3":
        notes.append("rope_freqs tensor read as llama3 factors (low_freq_factor taken as 1; the tensor "
                     "holds only the products that matter)")
    elif facts.rope_freqs is not None and rope.get("rope_type") == "longrope":
        notes.append("rope_freqs tensor is not the llama3 formula: shown as LongRoPE with that one table "
                     "and attention factor 1, which computes the same division")
    return notes

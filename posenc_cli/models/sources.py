"""Where a model config comes from: a config.json file, stdin, a model folder, a Hugging Face Hub id or a GGUF file.

:func:`read_source` turns what the user typed into a :class:`Source`, an HF-style config dict plus a label for
messages. Resolution order: ``-`` reads stdin; an existing folder gives its ``config.json`` (or its only ``*.gguf``);
an existing file is GGUF when it starts with the ``GGUF`` magic bytes, JSON otherwise; a missing path that looks like
one (``.json``/``.gguf`` suffix, starts with ``.``, ``~`` or ``/``, or is not a valid Hub id) is "no such file";
anything else that is a valid Hub id (``name`` or ``owner/name``, HF's naming rules) is fetched from the Hub. A local
path wins over a Hub id of the same spelling.

Hub: ``huggingface_hub.hf_hub_download(repo_id, "config.json", revision=...)``, so the HF cache (``HF_HOME``,
``HF_HUB_CACHE``), ``HF_HUB_OFFLINE``, ``HF_ENDPOINT`` and the usual token (``HF_TOKEN``, ``hf auth login``) all
apply, and a cached config is read without the network. Every failure is one :class:`PosencError` line.

GGUF: :mod:`posenc_cli.models.gguf.header` (standard library) reads the header: the values of the keys below are
decoded,
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
factor is always written, and :func:`describe_source` makes plain RoPE honour it); a scaling factor with no
``rope.scaling.type`` means linear scaling; in YaRN mode llama.cpp multiplies ``rope.scaling.attn_factor`` by
``0.1 ln(factor) + 1``, so that product is written as ``attention_factor``; the YaRN beta keys count only for the
architectures whose llama.cpp code reads them (grok, mistral3). ``rope_freqs`` becomes the llama3 parameters that
give its factors (:mod:`posenc_cli.models.gguf.rope`; another table: LongRoPE with that one table and magnitude 1),
``rope_factors_long/short`` a LongRoPE dict with the ``attn_factor`` key as its magnitude, deepseek2 transformers'
deepseek_v3 with llama.cpp's mscale rule, gemma3 gemma3_text with llama.cpp's sliding pattern and
``rope.freq_base_swa``. :func:`llama_cpp_meaning` lists what llama.cpp does that a config would say otherwise and
what the file cannot hold (YaRN's truncate, DeepSeek's mscale).

Stdlib only: huggingface_hub is imported inside the functions that read a Hub id; a GGUF needs no package at all,
and numpy is loaded only to match a ``rope_freqs`` tensor against transformers' llama3 arithmetic.
"""

from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from posenc_cli.errors import PosencError
from posenc_cli.files import load_json, parse_json_object, read_bytes

if TYPE_CHECKING:
    from posenc_cli.models.model_positions import ModelPositions

__all__ = ["GgufFacts", "Source", "read_source", "describe_source", "read_gguf", "is_hub_id", "HUB_INSTALL_HINT"]

HUB_INSTALL_HINT = "reading a Hub id needs huggingface_hub: pip install huggingface_hub"
GGUF_MAGIC = b"GGUF"
_HUB_PART = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?")
_REASON_MAX = 160  # characters of a library's error message kept in ours


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


@dataclass
class Source:
    """A model config and where it came from."""

    config: dict[str, Any]  # HF-style config dict (for a GGUF: synthesized from its metadata)
    label: str  # what to call it in messages
    kind: str  # "file", "stdin", "folder", "hub" or "gguf"
    path: str | None  # the local config.json or .gguf actually read; None for stdin
    gguf: GgufFacts | None = None
    hub_id: str | None = None  # the Hub id as given (a hub source), which engines and posenc itself take back


def served_name(src: Source) -> str:
    """What an engine's command line names this model by: the Hub id, the folder, the GGUF file, or the folder of a
    ``config.json`` (where the weights sit beside it); ``MODEL`` when none of these is known (stdin, a loose file)."""
    if src.kind == "hub" and src.hub_id:
        return src.hub_id
    if src.kind in ("folder", "gguf") and src.path:
        return str(Path(src.path).parent) if src.kind == "folder" and src.path.endswith("config.json") else src.path
    if src.kind == "file" and src.path and Path(src.path).name == "config.json":
        return str(Path(src.path).parent)
    return "MODEL"


def is_hub_id(text: str) -> bool:
    """``name`` or ``owner/name`` by the Hub's rules: ``[A-Za-z0-9._-]``, no leading/trailing ``-`` or ``.``, at most
    96 characters a part, no ``--`` or ``..``, not ending in ``.git``."""
    parts = text.split("/")
    if not 1 <= len(parts) <= 2 or not all(_HUB_PART.fullmatch(p) for p in parts):
        return False
    return "--" not in text and ".." not in text and not text.endswith(".git")


def _looks_like_path(text: str) -> bool:
    if text.lower().endswith((".json", ".gguf")) or text.startswith((".", "~", os.sep)):
        return True
    return any(sep and sep in text for sep in (os.sep, os.altsep)) and not is_hub_id(text)


def read_source(source: str, *, revision: str | None = None) -> Source:
    """Read the model config ``source`` names (see the module docstring for the order); errors are PosencError."""
    if not source.strip():
        raise PosencError("empty model source: give a config.json path, a model folder, a .gguf file, a Hub id or -")
    if source == "-":
        _no_revision(revision, "- reads stdin")
        return checked_source(Source(load_json("-"), "<stdin>", "stdin", None))
    path = Path(os.path.expanduser(source))
    kind = _local_kind(path)
    if kind == "folder":
        _no_revision(revision, f"{source} is a local folder")
        return checked_source(_read_folder(path))
    if kind == "file":
        _no_revision(revision, f"{source} is a local file")
        if _starts_with_gguf_magic(path, source) or source.lower().endswith(".gguf"):
            return checked_source(_gguf_source(path, source))
        return checked_source(Source(load_json(str(path)), source, "file", str(path)))
    if _looks_like_path(source):
        raise PosencError(f"{source}: no such file")
    if is_hub_id(source):
        return checked_source(_read_hub(source, revision))
    raise PosencError(f"{source}: not a file, a folder or a Hub id")


def _local_kind(path: Path) -> str | None:
    """"folder", "file" (anything else that exists) or None; a name the OS rejects (too long, NUL) does not exist."""
    try:
        if path.is_dir():
            return "folder"
        return "file" if path.exists() else None
    except (OSError, ValueError):
        return None


def _no_revision(revision: str | None, what: str) -> None:
    if revision is not None:
        raise PosencError(f"--revision applies to Hub ids only ({what})")


#: Keys at least one of which every model config holds: what names the model, its sizes or its positions. A
#: tokenizer.json, a generation_config.json or ``{}`` holds none, and reading one as "no RoPE" would be a false pass.
#: (Not ``decoder``, T5Gemma's sub-config: a tokenizer.json has one too; T5Gemma names its model_type.)
MODEL_KEYS = ("model_type", "architectures", "max_position_embeddings", "hidden_size", "num_attention_heads",
              "num_hidden_layers", "head_dim", "n_positions", "n_embd", "n_head", "n_layer", "d_model", "n_heads",
              "num_layers", "max_seq_len", "seq_length", "rope_theta", "rope_scaling", "rope_parameters",
              "rotary_emb_base", "text_config", "llm_config", "llm_cfg", "language_config", "thinker_config")
_OTHER_FILES = (("tokenizer.json", ("added_tokens", "normalizer", "pre_tokenizer")),
                ("tokenizer_config.json", ("tokenizer_class", "added_tokens_decoder", "chat_template")),
                ("generation_config.json", ("_from_model_config", "do_sample", "max_new_tokens")))


def checked_source(src: Source) -> Source:
    """``src`` if its config is a model config (one of :data:`MODEL_KEYS`; ``text_config`` an object), else one
    PosencError naming what it looks like instead."""
    if not any(key in src.config for key in MODEL_KEYS):
        looks = next((name for name, keys in _OTHER_FILES if any(k in src.config for k in keys)), None)
        hint = f": it looks like a {looks}" if looks else (": it is an empty object" if not src.config else "")
        raise PosencError(f"{src.label}: not a model config{hint}; a config.json names model_type or architectures, "
                          "or sizes such as max_position_embeddings and hidden_size")
    text_config = src.config.get("text_config")
    if text_config is not None and not isinstance(text_config, dict):
        raise PosencError(f"{src.label}: text_config must be a JSON object, got {type(text_config).__name__}")
    return src


def _read_folder(folder: Path) -> Source:
    config = folder / "config.json"
    if config.is_file():
        return Source(load_json(str(config)), str(config), "folder", str(config))
    message = f"{folder}: no config.json in this folder (a model folder holds config.json next to the weights)"
    ggufs = sorted(p for p in folder.glob("*.gguf") if p.is_file())
    if len(ggufs) == 1:
        return _gguf_source(ggufs[0], str(ggufs[0]))
    if ggufs:
        raise PosencError(f"{message}; it holds {len(ggufs)} .gguf files: pass one of them")
    raise PosencError(message)


def _starts_with_gguf_magic(path: Path, label: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == GGUF_MAGIC
    except OSError as exc:
        raise PosencError(f"{label}: cannot read it ({exc.strerror or exc.__class__.__name__})") from None


# ----------------------------------------------------------------------------------------------------------- Hub


def _one_line(text: str) -> str:
    line = next((part.strip() for part in str(text).splitlines() if part.strip()), "")
    return line if len(line) <= _REASON_MAX else line[: _REASON_MAX - 3] + "..."


def _read_hub(repo_id: str, revision: str | None) -> Source:
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise PosencError(f"{repo_id!r} looks like a Hub id, but {HUB_INSTALL_HINT}") from None
    from posenc_cli import __version__

    label = f"Hub {repo_id}@{revision or 'main'}"
    # huggingface_hub logs a WARNING per retry when the Hub is unreachable; the failure is reported as one line
    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)
    try:
        path = hf_hub_download(repo_id, "config.json", revision=revision, library_name="posenc",
                               library_version=__version__)
    except Exception as exc:  # only library code runs in the try: every failure becomes one line
        raise _hub_error(exc, repo_id, revision) from None
    finally:
        hub_log.setLevel(level)
    return Source(parse_json_object(read_bytes(path, label), f"{label} config.json"), label, "hub", path,
                  hub_id=repo_id)


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes/contexts, nearest first."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _status(exc: BaseException) -> str:
    code = getattr(getattr(exc, "response", None), "status_code", None)
    return str(code) if code is not None else "error"


def _hub_error(exc: Exception, repo_id: str, revision: str | None) -> PosencError:
    """One line for a huggingface_hub failure: what went wrong with ``repo_id`` and what to do."""
    from huggingface_hub import errors as hf

    model = f"Hub model {repo_id!r}"
    at = f" at revision {revision!r}" if revision else ""
    if isinstance(exc, hf.GatedRepoError):  # a RepositoryNotFoundError: test it first
        return PosencError(f"{model} is gated: accept its licence on the Hub and set HF_TOKEN (or hf auth login)")
    if isinstance(exc, hf.RepositoryNotFoundError):
        return PosencError(f"{model} not found on the Hub, and no such local file or folder: check the id; for a "
                           "private repo set HF_TOKEN")
    if isinstance(exc, hf.RevisionNotFoundError):
        return PosencError(f"{model} has no revision {revision or 'main'!r}: give a branch, tag or commit that exists")
    if isinstance(exc, hf.LocalEntryNotFoundError | hf.OfflineModeIsEnabled):
        chain = _chain(exc)
        if any(isinstance(e, hf.OfflineModeIsEnabled) for e in chain):
            return PosencError(f"{model}{at} is not in the local cache and HF_HUB_OFFLINE is set (or the Hub cannot be "
                               "reached): download it once online, or pass a config.json path")
        http = next((e for e in chain if isinstance(e, hf.HfHubHTTPError)), None)
        if http is not None:
            return PosencError(f"cannot fetch config.json of {model}{at}: the Hub answered HTTP {_status(http)}, "
                               "and it is not in the local cache")
        if any(isinstance(e, hf.FileMetadataError) for e in chain):
            return PosencError(f"cannot fetch config.json of {model}{at}: the endpoint did not answer like the Hub "
                               "(check HF_ENDPOINT and proxy settings), and it is not in the local cache")
        reason = _one_line(str(chain[-1])) or chain[-1].__class__.__name__
        return PosencError(f"{model}{at} is not in the local cache and the Hub cannot be reached ({reason}): check the "
                           "connection, or pass a config.json path")
    if isinstance(exc, hf.EntryNotFoundError):
        return PosencError(f"{model} has no config.json{at}: pass a config.json path (a GGUF-only repo: download "
                           "the .gguf and pass its path)")
    if isinstance(exc, hf.HFValidationError):
        return PosencError(f"{repo_id!r} is not a valid Hub id: {_one_line(str(exc))}")
    if isinstance(exc, hf.HfHubHTTPError):
        detail = _one_line(exc.server_message or "")
        return PosencError(f"cannot fetch config.json of {model}{at}: HTTP {_status(exc)}"
                           + (f" ({detail})" if detail else ""))
    reason = (exc.strerror if isinstance(exc, OSError) and exc.strerror else None) or _one_line(str(exc))
    return PosencError(f"cannot fetch config.json of {model}{at}: {reason or exc.__class__.__name__}")


# ---------------------------------------------------------------------------------------------------------- GGUF


def _gguf_source(path: Path, label: str) -> Source:
    facts = read_gguf(path, label)
    return Source(gguf_config(facts), label, "gguf", str(path), facts)


_REPORTED = ("context_length", "embedding_length", "attention.head_count", "attention.head_count_kv",
             "attention.key_length", "attention.value_length", "block_count", "attention.sliding_window",
             "attention.sliding_window_pattern")
_REPORTED_SUFFIXES = tuple("." + key for key in _REPORTED)


def _maybe_reported(key: str) -> bool:
    """Whether ``key`` can be one :func:`_metadata` keeps, whatever the architecture (it may come later in the
    file): ``general.architecture``, ``{arch}.rope.*`` or ``{arch}.`` + a key in ``_REPORTED``."""
    return key == "general.architecture" or ".rope." in key or key.endswith(_REPORTED_SUFFIXES)


def read_gguf(path: str | os.PathLike[str], label: str | None = None) -> GgufFacts:
    """The positional facts in a GGUF file's metadata; a truncated or corrupt file is one PosencError."""
    from posenc_cli.models.gguf.header import read_header

    label = str(path) if label is None else label
    if not _starts_with_gguf_magic(Path(path), label):
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
    from posenc_cli.models.gguf.header import ARRAY_MAX, Skipped

    arch = candidates.get("general.architecture")
    fields: dict[str, Any] = {}
    for name, value in candidates.items():
        if name == "general.architecture":
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
    (:mod:`posenc_cli.models.gguf.rope`),
    ``rope_factors_long/short`` a longrope dict. deepseek2 is read as transformers' deepseek_v3 (MLA: the rotary
    part is ``qk_rope_head_dim``), with llama.cpp's mscale rule (see :func:`llama_cpp_meaning`).
    """
    deepseek = facts.architecture in DEEPSEEK_ARCHS
    cfg: dict[str, Any] = {"model_type": "deepseek_v3" if deepseek else facts.architecture.replace("-", "_")}
    if facts.context_length is not None:
        cfg["max_position_embeddings"] = facts.context_length
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
    return cfg


DEEPSEEK_ARCHS = ("deepseek2",)  # llama.cpp archs that rebuild YaRN's mscale pair from yarn_log_multiplier
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
                "original_max_position_embeddings": facts.context_length or DEFAULT_GGUF_CONTEXT}
    if facts.rope_factors_long is not None and facts.rope_factors_short is not None:
        longrope: dict[str, Any] = {"rope_type": "longrope", "long_factor": facts.rope_factors_long,
                                    "short_factor": facts.rope_factors_short}
        if facts.original_context_length is not None:
            longrope["original_max_position_embeddings"] = facts.original_context_length
        # llama.cpp's magnitude is rope.scaling.attn_factor (1 when absent), whatever the lengths; the converter
        # writes LongRoPE's own sqrt(1 + ln(s) / ln(original)) as float32: that value, when the key is it
        magnitude = facts.attn_factor if facts.attn_factor is not None else 1.0
        if facts.context_length and facts.original_context_length:
            from posenc_cli.models.gguf.header import shortest_float32
            from posenc_cli.rope.attention_factors import longrope_attention_factor

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
            rope["mscale_all_dim"] = _shortest(mscale_all_dim)
            rope["mscale"] = rope["mscale_all_dim"]
            if raf is not None:
                rope["attention_factor"] = raf
        elif raf is not None:
            rope["attention_factor"] = raf * (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)
        if facts.architecture in BETA_ARCHS:  # the others run 32 and 1 whatever the file says
            if facts.yarn_beta_fast is not None:
                rope["beta_fast"] = facts.yarn_beta_fast
            if facts.yarn_beta_slow is not None:
                rope["beta_slow"] = facts.yarn_beta_slow
    return rope


def _shortest(value: float) -> float:
    from posenc_cli.models.gguf.header import shortest_float32

    return shortest_float32(value)


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
    if facts.freq_base_swa is not None:
        notes.append(f"rope.freq_base_swa {facts.freq_base_swa:g}: llama.cpp's sliding-window layers use this base, "
                     f"the others rope.freq_base {facts.rope_freq_base or 10000.0:g}")
    return notes


def written_config(config: dict[str, Any], label: str) -> str:
    """The text ``convert`` and ``scale -o`` write for ``config``: strict JSON that ``posenc inspect`` reads back.

    The text is parsed again with posenc's reader and inspected as ``posenc inspect`` would; a config it cannot
    read back (a value the reader refuses, a rope dict the frequency functions reject) is one PosencError naming
    ``label`` and the reason, and nothing is written.
    """
    from posenc_cli.files import dumps_config
    from posenc_cli.models.inspection import report
    from posenc_cli.models.model_positions import describe

    text = dumps_config(config) + "\n"
    try:
        again = checked_source(Source(parse_json_object(text, label), label, "file", None))
        report(describe(again.config))
    except PosencError as exc:
        raise PosencError(f"{label}: refusing to write a config posenc cannot read back: {exc}") from None
    return text


def describe_source(src: Source) -> ModelPositions:
    """:func:`posenc_cli.models.model_positions.describe` for any source; a GGUF is read with llama.cpp's rules."""
    from posenc_cli.models.model_positions import describe

    model = describe(src.config)
    if src.gguf is not None:
        model.default_partial = True  # llama.cpp rotates rope.dimension_count features, whatever the architecture
        model.notes.append("read from GGUF metadata with llama.cpp's meaning (rope.dimension_count features rotate)")
        if src.gguf.architecture in DEEPSEEK_ARCHS:
            model.notes.append(f"GGUF architecture {src.gguf.architecture} read as transformers' deepseek_v3 (MLA: "
                               "rope.dimension_count is qk_rope_head_dim)")
        rope = src.config.get("rope_scaling") or {}
        if src.gguf.rope_freqs is not None and rope.get("rope_type") == "llama3":
            model.notes.append("rope_freqs tensor read as llama3 factors (low_freq_factor taken as 1; the tensor "
                               "holds only the products that matter)")
        elif src.gguf.rope_freqs is not None and rope.get("rope_type") == "longrope":
            model.notes.append("rope_freqs tensor is not the llama3 formula: shown as LongRoPE with that one table "
                               "and attention factor 1, which computes the same division")
    return model

"""Where a model config comes from: a config.json file, stdin, a model folder, a Hugging Face Hub id or a GGUF file.

:func:`read_source` turns what the user typed into a :class:`Source`, an HF-style config dict plus a label for
messages. Resolution order: ``-`` reads stdin; an existing folder gives its ``config.json`` (or its only ``*.gguf``);
an existing file is GGUF when it starts with the ``GGUF`` magic bytes, JSON otherwise; a missing path that looks like
one (``.json``/``.gguf`` suffix, starts with ``.``, ``~`` or ``/``, or is not a valid Hub id) is "no such file";
anything else that is a valid Hub id (``name`` or ``owner/name``, HF's naming rules) is fetched from the Hub. A local
path wins over a Hub id of the same spelling.

The Hub (:mod:`posenc_cli.models.hub`) and GGUF files (:mod:`posenc_cli.models.gguf.metadata`) have their own
modules; this one resolves what the user typed, reads config.json files, folders and stdin, and hands each config
to the reader (:func:`describe_source`) or back to a file (:func:`written_config`).

Stdlib only: huggingface_hub is imported inside the functions that read a Hub id; a GGUF needs no package at all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from posenc_cli.errors import PosencError
from posenc_cli.files import dumps_config, load_json, parse_json_object
from posenc_cli.models.gguf.header import starts_with_gguf_magic
from posenc_cli.models.hub import is_hub_id, read_hub

if TYPE_CHECKING:
    from posenc_cli.models.gguf.metadata import GgufFacts
    from posenc_cli.models.model_positions import ModelPositions

__all__ = ["Source", "read_source", "describe_source", "checked_source", "served_name", "written_config"]

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
        if starts_with_gguf_magic(path, source) or source.lower().endswith(".gguf"):
            return checked_source(_gguf_source(path, source))
        return checked_source(Source(load_json(str(path)), source, "file", str(path)))
    if _looks_like_path(source):
        raise PosencError(f"{source}: no such file")
    if is_hub_id(source):
        config, label, cached = read_hub(source, revision)
        return checked_source(Source(config, label, "hub", cached, hub_id=source))
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
        raise PosencError(f"{{revision}} applies to Hub ids only ({what})", "revision")


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


def _gguf_source(path: Path, label: str) -> Source:
    from posenc_cli.models.gguf.metadata import gguf_config, read_gguf

    facts = read_gguf(path, label)
    return Source(gguf_config(facts), label, "gguf", str(path), facts)


def written_config(config: dict[str, Any], label: str) -> str:
    """The text ``convert`` and ``scale -o`` write for ``config``: strict JSON that ``posenc inspect`` reads back.

    The text is parsed again with posenc's reader and inspected as ``posenc inspect`` would; a config it cannot
    read back (a value the reader refuses, a rope dict the frequency functions reject) is one PosencError naming
    ``label`` and the reason, and nothing is written.
    """
    from posenc_cli.models.inspection import report  # numpy: only when a config is written
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
    # the position reader loads here, not with the sources: posenc memory reads sources without it
    from posenc_cli.models.gguf.metadata import reading_notes
    from posenc_cli.models.model_positions import describe

    model = describe(src.config)
    if src.gguf is not None:
        model.default_partial = True  # llama.cpp rotates rope.dimension_count features, whatever the architecture
        model.from_gguf = True
        model.notes += reading_notes(src.gguf, src.config)
    return model

"""Rewrite a config's rope keys between transformers 4 and 5 (stdlib only).

* v4: ``rope_scaling`` (the scaling dict, or null for plain RoPE) plus top-level ``rope_theta`` and
  ``partial_rotary_factor``; Gemma 3 keeps its local base in ``rope_local_base_freq``.
* v5: one ``rope_parameters`` dict with ``rope_theta`` (and ``partial_rotary_factor``) inside, per layer type where
  the config class builds one per layer type (Gemma 3, OLMo 3), exactly as transformers 5's ``save_pretrained``
  writes it (:func:`posenc_cli.models.rope_dicts.rope_dicts`).

Every other key keeps its value and its place; the rope keys take the place of the first one they replace. The
resolved rope numbers never change: ``tests/models/test_convert.py`` checks every corpus config round trip against
:func:`posenc_cli.models.model_positions.describe`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from posenc_cli.errors import PosencError
from posenc_cli.models.config_keys import ABSENT, text_config, with_text
from posenc_cli.models.remote_code import v5_refusal
from posenc_cli.models.rope_dicts import rope_dicts

VERSIONS = ("v4", "v5")
#: Text model types that exist only in transformers 5: their rope settings have no v4 form.
V5_ONLY = frozenset({"gemma4_text", "deepseek_v4"})
#: Config classes whose ``head_dim`` stays None unless the file sets it (transformers 5.24: every class with
#: rope_parameters built from its defaults; tests/models/test_consistency.py regenerates the set from transformers).
HEAD_DIM_UNSET = frozenset({"hunyuan_v1_dense", "hunyuan_v1_moe", "hunyuan_vl_text", "minimax", "ministral",
                            "mixtral"})
#: Keys some families name their window by (GPT-2-style ``n_positions``, MPT's ``max_seq_len``); a patched window
#: goes where the file already keeps it, so the reader and the class read the new one.
_WINDOW_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len")
_V4_KEYS = ("rope_scaling", "rope_theta", "partial_rotary_factor", "rope_local_base_freq")
# keys the v5 dicts carry that v4 keeps at the top level
_TOP = ("rope_theta", "partial_rotary_factor")


def _replace_keys(cfg: Mapping[str, Any], drop: tuple[str, ...], new: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` without ``drop``, with ``new`` placed where the first dropped key stood (else at the end)."""
    out: dict[str, Any] = {}
    placed = False
    for key, value in cfg.items():
        if key in drop or key in new:
            if not placed:
                out.update(new)
                placed = True
            continue
        out[key] = value
    if not placed:
        out.update(new)
    return out


def _plain_is_not_default(text: Mapping[str, Any], text_type: str, group: str) -> bool:
    """Whether transformers would scale ``group`` of ``text`` although its rope_scaling says plain RoPE."""
    dicts, _ = rope_dicts({**text, "model_type": text_type} if text_type else text)
    return bool(dicts.get(group, dicts.get("", {})).get("rope_type", "default") != "default")


def _keep_order(old: Mapping[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new`` with every key ``old`` had at its old place; keys that replace a dropped one take its place, and the
    rest go at the end (a patched file reads as a diff of the rope keys only)."""
    out: dict[str, Any] = {}
    added = [k for k in new if k not in old]
    for key in old:
        if key in new:
            out[key] = new[key]
        elif added:  # a dropped key: what replaces it (rope_scaling -> rope_parameters) goes here
            out.update({k: new[k] for k in added})
            added = []
    out.update({k: new[k] for k in added})
    return out


def convert(cfg: Mapping[str, Any], to: str) -> dict[str, Any]:
    """``cfg`` with its text model's rope keys in transformers ``to`` form (``v4`` or ``v5``)."""
    if to not in VERSIONS:
        raise PosencError(f"{{to}} {to!r} is not known; use v4 or v5", "to")
    text, text_type, where = text_config(cfg)
    if where.endswith(ABSENT):
        raise PosencError(f"{text_type}: the config has no {where.removesuffix(ABSENT)} to convert")
    if not any(k in text for k in ("rope_theta", "rope_scaling", "rope_parameters", "rope_local_base_freq")):
        raise PosencError("the config sets none of rope_theta, rope_scaling, rope_parameters: nothing to convert "
                          "(GPT-NeoX's rotary_emb_base/rotary_pct read the same in both versions)")
    if to == "v4" and text_type in V5_ONLY:
        raise PosencError(f"{text_type} exists only in transformers 5; its rope_parameters has no v4 form")
    if to == "v5" and (refusal := v5_refusal(cfg)):
        raise PosencError(refusal)
    dicts, nested = rope_dicts(cfg)
    new_text = _to_v5(text, dicts, nested) if to == "v5" else _to_v4(text, text_type, dicts, nested)
    return with_text(cfg, where, new_text)


def _to_v5(text: Mapping[str, Any], dicts: dict[str, dict[str, Any]], nested: bool) -> dict[str, Any]:
    params: dict[str, Any] = {k: dict(v) for k, v in dicts.items()} if nested else dict(dicts[""])
    return _replace_keys(text, _V4_KEYS + ("rope_parameters",), {"rope_parameters": params})


def _to_v4(text: Mapping[str, Any], text_type: str, dicts: dict[str, dict[str, Any]],
           nested: bool) -> dict[str, Any]:
    if not nested:
        flat = dict(dicts[""])
        top = {k: flat.pop(k) for k in _TOP if k in flat}
        scaling = flat if flat.get("rope_type", "default") != "default" or len(flat) > 1 else None
        return _replace_keys(text, _V4_KEYS + ("rope_parameters",), {"rope_scaling": scaling, **top})
    if text_type == "gemma3_text" and set(dicts) == {"full_attention", "sliding_attention"}:
        full, sliding = dict(dicts["full_attention"]), dicts["sliding_attention"]
        if sliding.get("rope_type", "default") != "default":
            raise PosencError("gemma3 sliding-attention layers are scaled; transformers 4 can only scale the "
                              "full-attention layers (rope_scaling)")
        theta = full.pop("rope_theta")
        full.pop("partial_rotary_factor", None)
        scaling = full if full.get("rope_type", "default") != "default" else None
        return _replace_keys(text, _V4_KEYS + ("rope_parameters",), {
            "rope_scaling": scaling, "rope_theta": theta, "rope_local_base_freq": sliding["rope_theta"]})
    if text_type == "olmo3" and set(dicts) == {"full_attention", "sliding_attention"}:
        full, sliding = dict(dicts["full_attention"]), dicts["sliding_attention"]
        if sliding.get("rope_type", "default") != "default" or sliding.get("rope_theta") != 500000.0:
            raise PosencError("olmo3 sliding-attention layers differ from the class default (theta 500000, no "
                              "scaling); transformers 4 cannot express that")
        theta = full.pop("rope_theta")
        scaling = full if full.get("rope_type", "default") != "default" else None
        return _replace_keys(text, _V4_KEYS + ("rope_parameters",), {"rope_scaling": scaling, "rope_theta": theta})
    raise PosencError(f"{text_type or 'this model'} has per-layer-type rope_parameters "
                      f"({', '.join(dicts)}); transformers 4 has no form for them")


def with_rope(cfg: Mapping[str, Any], group: str, rope: dict[str, Any], max_position_embeddings: int,
              to: str, head_dim: int | None = None) -> dict[str, Any]:
    """``cfg`` with the rope dict of ``group`` (``""`` for a model with one) replaced by ``rope`` (a transformers 5
    dict, ``rope_theta`` inside) and the window set, written in transformers ``to`` form (``v4`` or ``v5``).

    Every other group keeps its dict and every other key its value and place; the text model stays where it was
    (``text_config``). GPT-NeoX reads theta only as ``rotary_emb_base``, and a top-level
    ``original_max_position_embeddings`` (Phi-3) wins over the dict's in transformers, so both follow ``rope``.

    ``head_dim``: the model's head dimension, written for yarn and dynamic when the file leaves it to a class whose
    default is None (:data:`HEAD_DIM_UNSET`): transformers 5 reads ``config.head_dim`` as is there and fails, where
    the other rope types derive it from hidden_size / num_attention_heads.
    """
    if to not in VERSIONS:
        raise PosencError(f"{{to}} {to!r} is not known; use v4 or v5", "to")
    if to == "v5" and (refusal := v5_refusal(cfg)):
        raise PosencError(refusal)
    text, text_type, where = text_config(cfg)
    dicts, nested = rope_dicts(cfg)
    key = group if nested else ""
    if key not in dicts:
        raise PosencError(f"{text_type or 'the model'} has no rope group {group!r} in its config; it has: "
                          f"{', '.join(dicts)}")
    dicts = {**dicts, key: dict(rope)}
    new_text = _to_v5(text, dicts, nested) if to == "v5" else _to_v4(text, text_type, dicts, nested)
    window_key = next((k for k in _WINDOW_KEYS if k in text), "max_position_embeddings")
    new_text[window_key] = max_position_embeddings
    if rope.get("rope_type") == "default" and to == "v4" and _plain_is_not_default(new_text, text_type, key):
        # a class whose default scaling is not plain (gpt-oss: yarn x32) reads rope_scaling null as its default
        new_text["rope_scaling"] = {"rope_type": "default"}
    if (rope.get("rope_type") in ("yarn", "dynamic") and head_dim is not None and text.get("head_dim") is None
            and text_type in HEAD_DIM_UNSET):
        new_text["head_dim"] = head_dim
    new_text = _keep_order(text, new_text)
    if "original_max_position_embeddings" in new_text and "original_max_position_embeddings" in rope:
        new_text["original_max_position_embeddings"] = rope["original_max_position_embeddings"]
    if to == "v4" and (text_type.startswith("gpt_neox") or "rotary_emb_base" in text):
        new_text["rotary_emb_base"] = rope["rope_theta"]
        if "partial_rotary_factor" in rope:
            new_text["rotary_pct"] = rope["partial_rotary_factor"]
    return with_text(cfg, where, new_text)


class Converted(NamedTuple):
    """``posenc convert``'s answer: the config's text, and the file it goes to (None: stdout)."""

    text: str
    destination: str | None


def convert_source(source: str, to: str, *, revision: str | None = None, output: str | None = None,
                   in_place: bool = False) -> Converted:
    """``posenc convert``: the config of ``source`` (a config.json or ``-``, a folder, a Hub id at ``revision``) with
    its rope keys rewritten for transformers ``to`` (v4 or v5), checked by reading it back; written to ``output``,
    or over the config itself with ``in_place`` (a local file only), else printed."""
    # the model reader loads only here: the engines import this module for with_rope, on a bare request too
    from posenc_cli.models.sources import describe_source, read_source, written_config

    if output and in_place:
        raise PosencError("give either {output} FILE or {in_place}, not both", "output", "in_place")
    src = read_source(source, revision=revision)
    if in_place and (src.kind not in ("file", "folder") or src.path is None):
        raise PosencError(f"{{in_place}} rewrites a local config.json; {src.label} is a {src.kind} (use -o FILE)",
                          "in_place")
    if src.gguf is not None:
        raise PosencError(f"{src.label} is a GGUF file: its rope settings are llama.cpp metadata, not transformers "
                          "keys")
    model = describe_source(src)  # a config posenc cannot read is refused as itself, before any rewriting
    converted = convert(src.config, to)
    if model.family == "rope" and model.layers and model.max_position_embeddings:
        # posenc's record of what the file alone cannot say, as scale -o writes it (docs/conventions.md)
        from posenc_cli.models.facts import MARKER, marker, model_facts

        try:
            facts = model_facts(model, src.label, cfg=src.config)
        except PosencError:  # a family posenc does not extend: its window is what the file says
            facts = None
        if facts is not None and facts.native is not None and facts.trained is not None:
            converted[MARKER] = marker(facts.trained, facts.native, facts.training_free, facts.theta)
    text = written_config(converted, f"the {to} config")
    return Converted(text, src.path if in_place else output)

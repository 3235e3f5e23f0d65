"""The rope dict(s) a config class builds from a config, as transformers 5 stores them in ``rope_parameters``.

* A flat rope dict: legacy ``rope_scaling`` wins over ``rope_parameters``; ``rope_theta`` and
  ``partial_rotary_factor`` inside the dict win over the top-level keys, which win over the class default;
  ``type`` stands in for ``rope_type``; for yarn/llama3/longrope a top-level ``original_max_position_embeddings``
  (phi3: always, its class default is 4096) overrides the dict's, else the dict falls back to
  ``max_position_embeddings``.
* Per-layer-type rope built by the class: Gemma 3 (global theta plus ``rope_local_base_freq`` for sliding layers;
  legacy scaling goes to full-attention layers only), OLMo 3 (scaling on full-attention layers; sliding layers keep
  the class theta 500000), Gemma 4 (``proportional`` rope with ``global_head_dim`` on full-attention layers),
  DeepSeek V4 (``main`` plain rope on sliding layers, ``compress`` with ``compress_rope_theta`` elsewhere, YaRN
  attention factor 1). For nested dicts transformers reads YaRN's ``truncate`` from the outer dict, so it is
  always True.
* The generated key conversions (:func:`class_rope_dict`, :func:`_converted`): what a class builds from keys real files
  carry beside or instead of a rope dict.
* Rotary dims: plain ``default`` rope uses ``partial_rotary_factor`` only in the model types whose rotary class reads
  it (``default_partial`` in the generated data); every scaled rope type reads it. ``int(head_dim * factor)`` may be
  odd (GLM-4.5's defaults): transformers then turns ``ceil(dim / 2)`` pairs, and so does posenc.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.models.config_keys import head_dim_of, text_config, with_class_defaults
from posenc_cli.models.model_types import Kind, text_kind
from posenc_cli.models.value_checks import int_or_none, is_number, shown
from posenc_cli.rope.rope_types import ALIASES, DEFAULT_THETA, ORIGINAL, record, rope_type_of

#: Model types whose config class rewrites a ``yarn`` (or ``su``) dict to ``longrope`` before reading it.
REMAPS_YARN = frozenset({"phi3"})


def _flat(rp: Mapping[str, Any], text: Mapping[str, Any], kind: Kind, text_type: str,
          max_pos: int | None) -> dict[str, Any]:
    """A flat rope dict as the config class standardizes it (see the module docstring)."""
    out = dict(rp)
    rope_type = ALIASES.get(_rope_type(out), _rope_type(out))
    if text_type in REMAPS_YARN and rope_type == "yarn":
        rope_type = "longrope"  # Phi3Config remaps legacy yarn (and su) to longrope
    out["rope_type"] = rope_type
    out.pop("type", None)
    if kind.neox is not None:
        top, prf = text.get("rotary_emb_base"), text.get("rotary_pct", kind.neox)
    else:
        top = text.get("rope_theta", text.get("rotary_emb_base"))
        prf = text.get("partial_rotary_factor", text.get("rotary_pct", kind.partial))
    if "rope_theta" not in out:
        if top is not None and not is_number(top):
            raise PosencError(f"rope_theta = {top!r} is not a finite number")
        out["rope_theta"] = float(top) if top is not None else kind.theta
    if prf is not None:
        out.setdefault("partial_rotary_factor", prf)
    if _reads_original(rope_type):
        top_original = text.get(ORIGINAL, kind.original)
        if top_original is not None:
            # the rotary class standardizes again, when the top-level key has become an attribute: it wins
            out[ORIGINAL] = top_original
        elif max_pos is not None:
            out.setdefault(ORIGINAL, max_pos)
    return out


def _rope_type(rp: Mapping[str, Any]) -> str:
    """The rope type a dict names (``rope_type``, else legacy ``type``, else default); not a string is an error."""
    rope_type = rope_type_of(rp)
    if not isinstance(rope_type, str):
        raise PosencError(f"rope_type = {shown(rope_type)} is not allowed; use a rope type name such as 'default', "
                          "'linear', 'dynamic', 'yarn', 'longrope' or 'llama3'")
    return rope_type


def _reads_original(rope_type: str) -> bool:
    """transformers' standardization fills the type's original length (yarn, llama3, longrope: the record says)."""
    found = record(rope_type)
    return found is not None and found.reads_original


def _nested_standardize(params: dict[str, Any], max_pos: int | None) -> dict[str, Any]:
    out = dict(params)
    rope_type = _rope_type(out)
    out["rope_type"] = ALIASES.get(rope_type, rope_type)
    out.pop("type", None)
    if _reads_original(out["rope_type"]) and max_pos is not None:
        out.setdefault(ORIGINAL, max_pos)
    return out


def _rope_dict(text: Mapping[str, Any]) -> dict[str, Any]:
    legacy = text.get("rope_scaling")
    rp = legacy if legacy else text.get("rope_parameters")
    if rp and not isinstance(rp, Mapping):
        raise PosencError(f"rope_scaling / rope_parameters must be a JSON object, got {rp!r}")
    return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in (rp or {}).items()}


def _gemma3(text: Mapping[str, Any], kind: Kind, max_pos: int | None) -> dict[str, dict[str, Any]]:
    """Gemma3TextConfig: full layers take rope_theta and any legacy scaling; sliding layers rope_local_base_freq."""
    given = text.get("rope_parameters")
    rp = {k: dict(v) for k, v in given.items() if isinstance(v, Mapping)} if isinstance(given, Mapping) else {}
    # a flat rope_parameters is not a per-layer dict: the class ignores it
    rp = {k: v for k, v in rp.items() if k in ("full_attention", "sliding_attention")}
    full = rp.get("full_attention") or {"rope_type": "default"}
    if text.get("rope_scaling"):
        full.update(text["rope_scaling"])
    full.setdefault("rope_theta", text.get("rope_theta", 1e6))
    sliding = rp.get("sliding_attention") or {"rope_type": "default"}
    sliding.setdefault("rope_theta", text.get("rope_local_base_freq", DEFAULT_THETA))
    return {"full_attention": _nested_standardize(full, max_pos),
            "sliding_attention": _nested_standardize(sliding, max_pos)}


def _olmo3(text: Mapping[str, Any], kind: Kind, max_pos: int | None) -> dict[str, dict[str, Any]]:
    """Olmo3Config: scaling on full layers; rope_theta is consumed there, so sliding layers keep 500000."""
    given = text.get("rope_parameters")
    rp = {k: dict(v) for k, v in given.items() if isinstance(v, Mapping)} if isinstance(given, Mapping) else {}
    full = rp.get("full_attention") or {"rope_type": "default"}
    if text.get("rope_scaling"):
        full.update(text["rope_scaling"])
    full.setdefault("rope_theta", text.get("rope_theta", kind.theta))
    sliding = rp.get("sliding_attention") or {"rope_type": "default"}
    sliding.setdefault("rope_theta", kind.theta)
    return {"full_attention": _nested_standardize(full, max_pos),
            "sliding_attention": _nested_standardize(sliding, max_pos)}


def _gemma4(text: Mapping[str, Any], kind: Kind, max_pos: int | None) -> dict[str, dict[str, Any]]:
    """Gemma4TextConfig: a per-layer-type rope_parameters as given (all or nothing), no legacy keys."""
    given = text.get("rope_parameters")
    if not isinstance(given, Mapping) or not given:
        given = {"sliding_attention": {"rope_type": "default", "rope_theta": DEFAULT_THETA},
                 "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                    "rope_theta": 1000000.0}}
    return {k: _nested_standardize(dict(v), max_pos) for k, v in given.items() if isinstance(v, Mapping)}


def _deepseek_v4(text: Mapping[str, Any], kind: Kind, max_pos: int | None,
                 head_dim: int | None) -> dict[str, dict[str, Any]]:
    """DeepseekV4Config: "main" plain rope (rope_theta) and "compress" (the yarn block, compress_rope_theta)."""
    prf = text.get("partial_rotary_factor")
    if prf is None:
        legacy = text.get("qk_rope_head_dim")
        prf = legacy / (head_dim or 512) if legacy is not None else 64 / 512
    rp = _rope_dict(text)
    if isinstance(rp.get("main"), dict) and isinstance(rp.get("compress"), dict):
        return {"main": rp["main"], "compress": rp["compress"]}
    yarn = _nested_standardize({k: v for k, v in rp.items() if k not in ("main", "compress")}, max_pos)
    bases = {"rope_theta": text.get("rope_theta", DEFAULT_THETA),
             "compress_rope_theta": text.get("compress_rope_theta", 160000.0)}  # DeepseekV4Config's defaults
    for key, value in bases.items():
        if not is_number(value) or value <= 1:
            raise PosencError(f"{key} must be a finite number greater than 1 (a rope base), got {shown(value)}")
    main = {"rope_type": "default", "rope_theta": float(bases["rope_theta"]), "partial_rotary_factor": prf}
    compress = {**yarn, "rope_theta": float(bases["compress_rope_theta"]), "partial_rotary_factor": prf}
    if compress["rope_type"] == "yarn":
        compress.setdefault("attention_factor", 1.0)  # V4 does not scale cos/sin with YaRN's mscale
    return {"main": main, "compress": compress}


def class_rope_dict(text: Mapping[str, Any], kind: Kind) -> dict[str, Any]:
    """The file's rope dict as the class nests it (generated ``conversions``): keys beside the layer-type dicts of a
    per-layer rope_parameters are dropped where the class ignores them (transformers nests only the keys that are
    layer types); a flat dict is copied to the layer types the class puts it on (Ergo: sliding layers, and full
    attention gets none). A null entry stays: that layer type gets no RoPE."""
    rp = _rope_dict(text)
    if not rp and kind.default_rope is not None:
        rp = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in kind.default_rope.items()}
    conv = kind.conversions
    if any(isinstance(v, Mapping) for v in rp.values()):
        strays = [k for k, v in rp.items() if not isinstance(v, Mapping) and v is not None]
        read = [k for k in strays if (conv.get("stray") or {}).get(k, "ignored") != "ignored"]
        if read:
            raise PosencError(f"rope_parameters mixes layer-type dicts with {', '.join(map(repr, read))}, which the "
                              "config class reads in a way posenc does not model; write one dict per layer type")
        return {k: v for k, v in rp.items() if k not in strays}
    fill = conv.get("fill")
    if rp and fill and kind.neox is None and _rope_dict(text):
        # the file's own flat dict: the class fills in its default_theta, not the theta of the dict it builds when
        # the file has none (Ministral 3: 10000 against its default YaRN dict's 1e6), and no fraction of its own
        if "rope_theta" not in rp and text.get("rope_theta") is None:
            rp["rope_theta"] = fill["rope_theta"]
        if "partial_rotary_factor" not in rp and text.get("partial_rotary_factor") is None and kind.partial:
            rp["partial_rotary_factor"] = fill.get("partial_rotary_factor") or 1.0
    flat = conv.get("flat")
    if rp and flat is not None and not flat.get("to") and kind.default_rope is not None:
        # the class puts a flat dict on no layer type and builds its own per-layer dicts (Gemma 3n, T5Gemma 2)
        return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in kind.default_rope.items()}
    if rp and flat and flat.get("to"):
        theta = text.get("rope_theta", flat.get("theta"))
        copied = {**rp, "rope_theta": rp.get("rope_theta", theta)} if theta is not None else dict(rp)
        return {**{g: dict(copied) for g in flat["to"]}, **dict.fromkeys(flat.get("none", ()))}
    return rp


def _converted(per_type: dict[str, dict[str, Any]], given: Mapping[str, Any], text: Mapping[str, Any], kind: Kind,
               head_dim: int | None) -> dict[str, dict[str, Any]]:
    """The resolved dicts with the generated key conversions applied (MiniMax-M2's ``rotary_dim`` becomes
    ``partial_rotary_factor = rotary_dim / head_dim``; Dots3's ``swa_rope_theta`` the sliding layers' theta): a key
    the file sets gives its group's field, unless the file's own rope dict for that group sets the field, or the
    class lets the top-level field written beside it win. ``rope_theta`` / ``partial_rotary_factor`` of a flat dict
    are the rope standardization of :func:`_flat`; of a per-layer class, the groups the class puts them in (Gemma 3n:
    full attention only)."""
    for key, rules in (kind.conversions.get("keys") or {}).items():
        raw = text.get(key)
        if not isinstance(raw, (int, float)) or not is_number(raw):
            continue
        value = float(raw)
        for rule in rules:
            group, fld = rule["group"], rule["field"]
            if fld == "head_dim" or (not group and key in ("rope_theta", "partial_rotary_factor")):
                continue  # read by config_keys.head_dim_of; a flat dict's by _flat
            own = given.get(group) if group else given
            if group not in per_type or (isinstance(own, Mapping) and fld in own):
                continue
            if key != fld and not rule.get("wins") and text.get(fld) is not None:
                continue
            if rule["transform"] == "per_head_dim":
                if not head_dim:
                    continue
                per_type[group][fld] = value / head_dim
            else:
                per_type[group][fld] = value
    return per_type


def resolve(text: Mapping[str, Any], text_type: str, kind: Kind, max_pos: int | None,
             head_dim: int | None) -> tuple[dict[str, dict[str, Any]], bool]:
    """The rope dict(s) as the config class builds them: ``({"": flat}, False)`` or ``({layer type: dict}, True)``."""
    if kind.resolver == "flat":
        rp = class_rope_dict(text, kind)
        if not _rope_dict(text) and kind.conversions.get("ignored"):
            # the class's own rope dict holds these already: the top-level keys are not read (Moonshine Streaming)
            text = {k: v for k, v in text.items() if k not in kind.conversions["ignored"]}
        if any(isinstance(v, Mapping) for v in rp.values()):
            # per layer type (v5); a null entry gives that layer type no RoPE (Beam)
            per_type = {k: _flat(v, text, kind, text_type, max_pos) for k, v in rp.items() if isinstance(v, Mapping)}
            return _converted(per_type, _rope_dict(text), text, kind, head_dim), True
        flat = {"": _flat(rp, text, kind, text_type, max_pos)}
        return _converted(flat, _rope_dict(text), text, kind, head_dim), False
    if kind.resolver == "deepseek_v4":
        return _deepseek_v4(text, kind, max_pos, head_dim), True
    builders: dict[str, Callable[..., dict[str, dict[str, Any]]]] = {
        "gemma3": _gemma3, "olmo3": _olmo3, "gemma4": _gemma4}
    return builders[kind.resolver](text, kind, max_pos), True


def rope_dicts(cfg: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], bool]:
    """The text model's rope dict(s) as transformers 5 stores them in ``rope_parameters`` (what ``convert`` writes):
    ``({"": flat}, False)``, or ``({layer type: dict}, True)`` for classes that build one per layer type."""
    text, text_type, _ = text_config(cfg)
    kind = text_kind(text, text_type)
    text = with_class_defaults(text, kind)
    max_pos = int_or_none(text.get("max_position_embeddings")) or kind.max_positions
    return resolve(text, text_type, kind, max_pos, head_dim_of(text, kind, text_type))

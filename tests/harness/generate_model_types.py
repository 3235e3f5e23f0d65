"""Write posenc_cli/models/model_types.json from the installed transformers: what every config class assumes about
positions.

Run by a developer after upgrading transformers (``python tests/harness/generate_model_types.py``); posenc never imports
transformers at run time, it reads the JSON. ``tests/models/test_model_types.py`` regenerates the data in memory and
fails
when the committed file is stale for the installed transformers version, and sweeps every model type against
transformers' own rotary embeddings.

What is extracted, per model type (``models``):

* ``path``: the attributes leading from the top-level config to the decoder's text config
  (``get_text_config(decoder=True)``): ``[]`` for a plain decoder, ``["text_config"]``, ``["thinker_config",
  "text_config"]`` (Qwen2.5-Omni), ``["decoder"]`` (T5Gemma); ``auto``: the last step is an ``AutoConfig``
  sub-config, so a ``model_type`` written inside it picks the class; ``text_type``: the class used when it does not;
  ``flat``: with no ``text_config`` in the file, the composite reads the text keys from the top level (Qwen2-VL);
  ``absent``: what the composite's own default text config sets otherwise than the text class (used when the file
  has no such sub-config).

and per text config class (``text``, keyed by the class's ``model_type``):

* ``theta``, ``rope`` (the class's default rope dict when it is not plain RoPE), ``partial`` (its default
  ``partial_rotary_factor``), read off ``ConfigClass().to_dict()`` (what ``save_pretrained`` of a default config
  writes);
* ``defaults``: the class defaults of the other attributes the rotary embeddings read (sizes, window, MLA dims, ...),
  so a file that leaves them out reads as transformers reads it (Qwen2-Audio's text_config names no hidden size);
* ``aliases``: the class's ``attribute_map`` (``head_dim`` -> ``kv_channels`` in JetMoe);
* ``head_dim``: how ``config.head_dim`` comes about when the file does not set it: derived from
  ``hidden_size // num_attention_heads`` times a factor (Zamba2: 2), or a class default;
* ``default_partial``: whether the rotary class applies ``partial_rotary_factor`` to plain RoPE (probed: the
  number of frequencies at 0.5 against 1.0);
* ``accepts``: the rope types the class builds a rotary embedding for (Phi-3's rejects all but longrope);
* ``rotary``: the rotary embedding class the decoder builds; ``scales``: whether it applies a rope type other than
  plain RoPE at all (probed with linear x2);
* ``conversions``: what the class builds from the keys real files carry (see :func:`conversions`): each rope key its
  fields and source name (:func:`candidate_keys`: ``rotary_dim``, ``compress_rope_theta``, ``swa_rope_theta``,
  ``rope_local_base_freq``, ``*_rope_theta``, ``rotary_pct``, ...), set alone on the class defaults written as a file
  without rope_parameters and layer_types, with two distinctive values, and read back from the built
  ``rope_parameters`` (group, field, ``value`` or ``value / head_dim``, and whether it beats the top-level field
  written beside it); a flat rope dict on per-layer classes; keys beside layer-type dicts;
* ``layer_types``: the layer types the class builds when a file names none, when they depend on the layer index
  alone (``{"head": [...], "cycle": [...]}``, probed at several layer counts).

``models`` entries also say ``decoder_prefix`` where ``get_text_config(decoder=True)`` hands out a copy of an
encoder-decoder config with its ``decoder_*`` keys renamed (Moonshine).

Model types whose decoder has no rotary embedding are listed in ``without_rotary`` with the reason.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import logging
import math
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# the reason posenc's reader matches on: shared, so the generated data and the reader cannot drift apart
from posenc_cli.models.model_types import NO_ROTARY

OUT = Path(__file__).resolve().parents[2] / "posenc_cli" / "models" / "model_types.json"

#: attributes of a text config that posenc's reader takes from the class when a file leaves them out
DEFAULT_KEYS = (
    "hidden_size", "num_attention_heads", "num_hidden_layers", "max_position_embeddings", "head_dim",
    "original_max_position_embeddings", "qk_rope_head_dim", "qk_nope_head_dim", "kv_lora_rank", "rotary_dim",
    "rotary_pct", "rotary_emb_base", "rope_local_base_freq", "sliding_window", "sliding_window_pattern",
    "global_head_dim", "kv_channels", "attention_head_dim", "full_attention_interval", "no_rope_layer_interval",
    "compress_rope_theta", "n_positions", "n_embd", "n_head", "n_layer",
    # what the caches are sized by (posenc memory): a config that leaves them out gets the class's
    "num_key_value_heads", "v_head_dim", "attention_chunk_size", "num_kv_shared_layers",
)
_SKIP_NAME_PARTS = ("Vision", "Audio", "Encoder", "Patch", "DiT", "Talker", "Code2Wav", "Token2Wav")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """transformers' warnings and log lines silenced while probing, and put back afterwards."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.CRITICAL)
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


def _rotary_class(text: Any) -> type | None:
    """The text model's rotary embedding class that builds from this config alone, or None."""
    module_name = type(text).__module__.replace(".configuration_", ".modeling_")
    try:
        module = importlib.import_module(module_name)
    except Exception:  # noqa: BLE001 - a modeling module that needs an optional package: no rotary to compare
        return None
    candidates = [obj for name, obj in vars(module).items()
                  if inspect.isclass(obj) and name.endswith("RotaryEmbedding") and obj.__module__ == module_name
                  and not any(w in name for w in _SKIP_NAME_PARTS)]
    for cls in sorted(candidates, key=lambda c: ("Text" not in c.__name__, c.__name__)):
        try:
            rot = cls(text)
        except Exception:  # noqa: BLE001 - a class that is not this config's (a vision rotary)
            continue
        if hasattr(rot, "inv_freq") or getattr(rot, "rope_type", None):
            return cls
    return None


def inv_freq_groups(rot: Any) -> dict[str, tuple[Any, float]]:
    """{"": (inv_freq, attention_scaling)} or one entry per layer type, as the rotary module holds them."""
    rope_type = getattr(rot, "rope_type", None)
    if isinstance(rope_type, dict) and rope_type:
        return {lt: (getattr(rot, f"{lt}_inv_freq").numpy(), float(getattr(rot, f"{lt}_attention_scaling")))
                for lt in rope_type}
    return {"": (rot.inv_freq.numpy(), float(getattr(rot, "attention_scaling", 1.0)))}



def _why_no_rotary(text: Any) -> str:
    module_name = type(text).__module__.replace(".configuration_", ".modeling_")
    try:
        importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return "no model code in transformers (a config class only: the model runs as remote code)"
        return f"its model code needs {exc.name}, which is not installed"
    except Exception as exc:  # noqa: BLE001
        return f"its model code does not import: {type(exc).__name__}"
    return NO_ROTARY


def _path_to(root: Any, target: Any) -> list[str] | None:
    """Attribute names from ``root`` to the sub-config ``target`` (breadth first over ``sub_configs``); ``[]`` also
    for the copy an encoder-decoder class hands out (``decoder_*`` keys renamed, see :func:`_decoder_prefix`)."""
    from transformers import PretrainedConfig

    if target is not root and type(target) is type(root) and getattr(root, "is_encoder_decoder", False):
        return []
    queue: list[tuple[Any, list[str]]] = [(root, [])]
    while queue:
        node, path = queue.pop(0)
        if node is target:
            return path
        for key in getattr(node, "sub_configs", {}) or {}:
            child = getattr(node, key, None)
            if isinstance(child, PretrainedConfig):
                queue.append((child, [*path, key]))
    return None


def _number_of_frequencies(cls: type, rotary: type, **kwargs: Any) -> int | None:
    try:
        groups = inv_freq_groups(rotary(cls(**kwargs)))
    except Exception:  # noqa: BLE001 - the class refuses the probe: no answer
        return None
    return int(next(iter(groups.values()))[0].shape[0]) if groups else None


def _default_partial(cls: type, rotary: type, rope: dict[str, Any]) -> bool:
    """Whether plain RoPE in this class honours ``partial_rotary_factor`` (fewer frequencies at 0.5 than at 1)."""
    if any(isinstance(v, dict) for v in rope.values()):
        return True  # per-layer dicts carry their own factor, read by every rotary class that takes them
    counts = []
    for factor in (1.0, 0.5):
        params = {**rope, "rope_type": "default", "partial_rotary_factor": factor}
        counts.append(_number_of_frequencies(cls, rotary, rope_parameters=params, partial_rotary_factor=factor))
    return counts[0] is not None and counts[1] is not None and counts[1] < counts[0]


def _attr(config: Any, name: str) -> Any:
    try:
        return getattr(config, name, None)
    except Exception:  # noqa: BLE001 - a per-layer attribute (Gemma 4's head_dim) has no global value
        return None


def _applies_scaling(cls: type, rotary: type, rope: dict[str, Any]) -> bool:
    """False when the rotary class takes a linear x2 dict and still computes plain RoPE (ESM's ignores the dict)."""
    if any(isinstance(v, dict) for v in rope.values()):
        return True
    try:
        plain = inv_freq_groups(rotary(cls(rope_parameters={**rope, "rope_type": "default"})))[""][0]
        linear = inv_freq_groups(rotary(cls(rope_parameters={**rope, "rope_type": "linear", "factor": 2.0})))[""][0]
    except Exception:  # noqa: BLE001 - the class refuses linear (Phi-3 takes only longrope): not an ignored dict
        return True
    return bool(abs(float(linear[0]) - float(plain[0]) / 2) < 1e-6)


#: a dict of each rope type, completed per class (window, factor lists) by :func:`_accepted`
PROBES: dict[str, dict[str, Any]] = {
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0},
    "longrope": {"rope_type": "longrope"},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
}


def _accepted(cls: type, rotary: type, saved: dict[str, Any]) -> list[str] | None:
    """The rope types the class builds a rotary embedding for (Phi-3's takes only longrope); None for per-layer
    classes, whose dicts posenc extends one group at a time."""
    rope = dict(saved.get("rope_parameters") or {})
    window = saved.get("max_position_embeddings")
    if any(isinstance(v, dict) for v in rope.values()) or not isinstance(window, int):
        return None
    base = {k: v for k, v in rope.items() if k in ("rope_theta", "partial_rotary_factor")}
    taken = []
    for name, probe in PROBES.items():
        # with a head dim of 128 written out too: Mixtral-style classes need it for yarn/dynamic (posenc writes it),
        # and GLM-4.5's default 42 x 0.5 is an odd dim that only the defaults have
        for extra in ({"head_dim": 128}, {}):
            count = _number_of_frequencies(cls, rotary, rope_parameters=rope, **extra)
            if count is None:
                continue
            params = {**base, **probe}
            if name in ("yarn", "longrope", "llama3"):
                params["original_max_position_embeddings"] = window
            if name == "longrope":
                params["short_factor"] = [1.0] * count
                params["long_factor"] = [2.0] * count
            kwargs: dict[str, Any] = {"rope_parameters": params, "max_position_embeddings": window * 4, **extra}
            if _number_of_frequencies(cls, rotary, **kwargs) is not None:
                taken.append(name)
                break
    return taken


def _head_dim_rule(cls: type, base: Any) -> dict[str, Any] | None:
    """How ``config.head_dim`` comes about when a file leaves it out (and hidden_size / heads are given)."""
    hidden, heads = _attr(base, "hidden_size"), _attr(base, "num_attention_heads")
    head_dim = _attr(base, "head_dim")
    if not isinstance(hidden, int) or not isinstance(heads, int) or not heads:
        return {"default": head_dim} if isinstance(head_dim, int) else None
    try:
        wider = cls(hidden_size=hidden * 2, num_attention_heads=heads)
    except Exception:  # noqa: BLE001
        return {"default": head_dim} if isinstance(head_dim, int) else None
    if not isinstance(head_dim, int) or not head_dim:
        return None
    if _attr(wider, "head_dim") != head_dim:
        times = head_dim * heads // hidden if head_dim * heads % hidden == 0 else None
        return {"derived": True, "times": times or 1}
    return {"default": head_dim}


def _reads_flat_text_keys(cls: type, model_type: str) -> bool:
    """Whether the composite moves a file's top-level text keys into its text_config when the file has none
    (Qwen2-VL, Qwen2.5-VL): distinctive top-level values must reach the text config."""
    try:
        config = cls.from_dict({"model_type": model_type, "hidden_size": 1234, "num_attention_heads": 2,
                                "max_position_embeddings": 777, "rope_theta": 4321.0})
        text = config.get_text_config(decoder=True)
    except Exception:  # noqa: BLE001 - the class refuses such a file: it does not read it either
        return False
    return _attr(text, "hidden_size") == 1234 and _attr(text, "max_position_embeddings") == 777


#: names of keys that may turn into rope settings or layer types, matched in a config class's fields and source
_PROBE_NAME = re.compile(r"rope|rotary|theta|partial|_pct|base_freq|layer_pattern")
#: keys the probes set in their own way (rope dicts), or that are no config key
_NOT_PROBED = frozenset({"rope_parameters", "rope_scaling", "rope_type", "type", "default_theta", "rope_init_fn",
                         "rope_layer_type", "partial_rotary_factors", "rope_type_labels", "_rope_type_labels"})
#: distinctive probe values per kind of key (two each, so that a rule is checked on a second value)
_THETAS, _FRACTIONS, _THETA_TOP, _FRACTION_TOP = (12345.0, 23456.0, 34567.0), (0.5, 0.375, 0.625), 77777.0, 0.75


def _probe_kind(name: str) -> str | None:
    if "pattern" in name:
        return "layers"
    if "dim" in name:
        return "dim"
    if any(w in name for w in ("theta", "base", "freq")):
        return "theta"
    if any(w in name for w in ("pct", "partial", "fraction")):
        return "fraction"
    return None


def candidate_keys(cls: type) -> list[str]:
    """Keys a config class may convert into its rope settings: its dataclass fields and the string literals of its
    own source (and its model-specific bases') whose names speak of rope, theta or rotary fractions."""
    from transformers import PretrainedConfig

    names: set[str] = set()
    with contextlib.suppress(TypeError, ValueError):
        names.update(inspect.signature(cls).parameters)
    for klass in cls.__mro__:
        if klass is PretrainedConfig or not klass.__module__.startswith("transformers.models."):
            continue
        names.update(getattr(klass, "__annotations__", {}))
        with contextlib.suppress(OSError, TypeError):
            names.update(re.findall(r"[\"'](\w+)[\"']", inspect.getsource(klass)))
    return sorted(n for n in names if _PROBE_NAME.search(n) and n not in _NOT_PROBED and _probe_kind(n)
                  and not n.startswith("_"))


def rope_view(text: Any) -> dict[str, dict[str, Any] | None]:
    """The built config's rope dicts: ``{"": flat}`` or one per layer type (None where a type gets none)."""
    rp = _attr(text, "rope_parameters")
    if not isinstance(rp, dict):
        return {}
    if any(isinstance(v, dict) for v in rp.values()):
        return {k: (dict(v) if isinstance(v, dict) else None) for k, v in rp.items()
                if isinstance(v, dict) or (v is None and not k.startswith("rope"))}
    return {"": dict(rp)}


def _build(cls: type, d: dict[str, Any]) -> Any | None:
    try:
        return cls.from_dict(json.loads(json.dumps(d)))
    except Exception:  # noqa: BLE001 - the class refuses the probe
        return None


def _head_dim_of(config: Any) -> int | None:
    head_dim = _attr(config, "head_dim")
    if isinstance(head_dim, int) and head_dim > 0:
        return head_dim
    hidden, heads = _attr(config, "hidden_size"), _attr(config, "num_attention_heads")
    return hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads else None


def _layer_list(config: Any) -> list[str] | None:
    types = _attr(config, "layer_types")
    return list(types) if isinstance(types, (list, tuple)) and all(isinstance(t, str) for t in types) else None


def _probe_base(cls: type, keys: list[str]) -> tuple[dict[str, Any], Any] | None:
    """The default config as a file that names none of ``keys`` (nor a rope dict, nor its layer types) writes it,
    and what the class builds from it."""
    saved = json.loads(json.dumps(cls().to_dict(), default=str))
    n = saved.get("num_hidden_layers")
    # per-layer lists of the default (MiMo-V2-Flash's mlp_layer_types) would pin the layer count
    saved = {k: v for k, v in saved.items() if not (isinstance(v, list) and isinstance(n, int) and len(v) == n > 1)}
    for drop in (("rope_parameters", "layer_types"), ("rope_parameters",)):
        base = {k: v for k, v in saved.items() if k not in keys and k not in drop}
        built = _build(cls, base)
        if built is not None and rope_view(built):
            return base, built
    return None


def _explain(value: Any, out: Any, head_dim: int | None) -> str | None:
    """How a probe value became a rope field: ``value`` as is, or ``value / head_dim`` (a rotary dim)."""
    if not isinstance(out, (int, float)) or isinstance(out, bool):
        return None
    if math.isclose(float(out), float(value), rel_tol=1e-9):
        return "value"
    if head_dim and math.isclose(float(out), float(value) / head_dim, rel_tol=1e-9):
        return "per_head_dim"
    return None


def _convert(transform: str, value: float, head_dim: int | None) -> float:
    return float(value) if transform == "value" else float(value) / float(head_dim or 1)


def _head_dim_rule_of(cls: type, base: dict[str, Any], key: str, values: tuple[float, ...]) -> list[dict[str, Any]]:
    """``[{field: head_dim, ...}]`` when a dim key becomes ``config.head_dim`` (GLM-5's ``qk_rope_head_dim``: the
    inherited rotary reads head_dim), with ``wins``: whether it beats a head_dim the file writes beside it."""
    plain = {k: v for k, v in base.items() if k != "head_dim"}
    for value in values:
        built = _build(cls, {**plain, key: int(value)})
        if built is None or _attr(built, "head_dim") != int(value):
            return []
    other = int(values[0]) * 2
    beside = _build(cls, {**plain, key: int(values[0]), "head_dim": other})
    wins = beside is not None and _attr(beside, "head_dim") == int(values[0])
    return [{"group": "", "field": "head_dim", "transform": "value", "wins": wins}]


def conversions(cls: type) -> dict[str, Any] | None:
    """What the class builds from keys real files carry, probed (each key alone on the class defaults, with two
    distinctive values).

    ``keys``: key -> [{group, field, transform, wins}], ``transform`` being ``value`` or ``per_head_dim`` and ``wins``
    whether the key beats the top-level ``rope_theta`` / ``partial_rotary_factor`` written beside it; ``layers``: a
    list key -> {element: layer type}; ``unexplained``: keys that change the rope in a way no transform names (the
    sweep shows what posenc then reads); ``ignored``: ``rope_theta`` / ``partial_rotary_factor`` at the top level of a
    file with no rope dict, not read; ``flat``: the groups a flat rope dict is copied to (and those left without rope)
    in classes that nest it, and the theta they get; ``fill``: the theta and fraction a flat class puts into a
    file's rope dict that names neither; ``stray``: per stray key, whether a key beside the layer-type
    dicts of a per-layer rope_parameters is ignored. None: the class cannot build its defaults without a rope dict or
    layer types.
    """
    keys = candidate_keys(cls)
    found = _probe_base(cls, keys)
    if found is None:
        return None
    base, built = found
    before = rope_view(built)
    layers_before = _layer_list(built)
    head_dim = _head_dim_of(built)
    rules: dict[str, list[dict[str, Any]]] = {}
    layer_rules: dict[str, dict[str, str]] = {}
    unexplained: list[str] = []
    ignored: list[str] = []
    n = _attr(built, "num_hidden_layers")
    for key in keys:
        kind = _probe_kind(key)
        if kind == "layers":
            if not isinstance(n, int) or layers_before is None:
                continue
            mapping: dict[str, str] = {}
            consistent, changed = True, False
            for pattern in ([i % 2 for i in range(n)], [(i + 1) % 2 for i in range(n)]):
                after = _build(cls, {**base, key: pattern})
                types = _layer_list(after) if after is not None else None
                if types is None or len(types) != n:
                    consistent = False
                    break
                changed = changed or types != layers_before
                for element, layer_type in zip(pattern, types, strict=True):
                    consistent = consistent and mapping.setdefault(str(element), layer_type) == layer_type
            if changed and consistent:
                layer_rules[key] = mapping
            elif changed:
                unexplained.append(key)
            continue
        if kind == "dim":
            if not head_dim or head_dim < 8:
                continue
            values: tuple[float, ...] = (head_dim // 2, head_dim // 4)
        else:
            # two values that are neither the key's default nor a value the rope dicts already hold
            taken = {base.get(key)} | {p.get(f) for p in before.values() if p for f in ("rope_theta",
                                                                                         "partial_rotary_factor")}
            values = tuple(v for v in (_THETAS if kind == "theta" else _FRACTIONS) if v not in taken)[:2]
        found_rules: list[dict[str, Any]] | None = None
        disagree = False
        for value in values:
            after = _build(cls, {**base, key: value})
            if after is None:
                found_rules = None
                break
            view = rope_view(after)
            this: list[dict[str, Any]] = []
            for group, params in view.items():
                old = before.get(group) or {}
                for fld in ("rope_theta", "partial_rotary_factor"):
                    new = (params or {}).get(fld)
                    if new == old.get(fld) or new is None:
                        continue
                    transform = _explain(value, new, head_dim)
                    this.append({"group": group, "field": fld, "transform": transform})
            if found_rules is None:
                found_rules = this
            elif [(r["group"], r["field"], r["transform"]) for r in this] != \
                    [(r["group"], r["field"], r["transform"]) for r in found_rules]:
                disagree = True
        if disagree:
            unexplained.append(key)
            continue
        if kind == "dim" and found_rules is not None:
            found_rules += _head_dim_rule_of(cls, base, key, values)
        if found_rules is not None and not found_rules and key in ("rope_theta", "partial_rotary_factor"):
            ignored.append(key)  # the class's own rope dict already holds it (Moonshine Streaming)
        if not found_rules:
            continue
        if any(r["transform"] is None for r in found_rules):
            unexplained.append(key)
            continue
        for rule in found_rules:
            if rule["field"] == "head_dim":
                continue
            top = {"rope_theta": _THETA_TOP, "partial_rotary_factor": _FRACTION_TOP}[rule["field"]]
            both = _build(cls, {**base, key: values[0], rule["field"]: top}) if key != rule["field"] else None
            got = (rope_view(both).get(rule["group"]) or {}).get(rule["field"]) if both is not None else None
            rule["wins"] = got is not None and math.isclose(
                float(got), _convert(rule["transform"], values[0], head_dim), rel_tol=1e-9)
        # sorted: some classes build their per-layer dicts in set order, which varies with the hash seed
        rules[key] = sorted(found_rules, key=lambda r: (r["group"], r["field"]))
    out: dict[str, Any] = {"keys": rules}
    if layer_rules:
        out["layers"] = layer_rules
    if unexplained:
        out["unexplained"] = sorted(unexplained)
    if ignored:
        out["ignored"] = sorted(ignored)
    nested = {g for g in before if g}
    if not nested:
        # what the class fills into a flat rope dict of the file's that names neither theta nor fraction (its
        # default_theta, which need not be the theta of the rope dict it builds when the file has none)
        bare = _build(cls, {**base, "rope_parameters": {"rope_type": "linear", "factor": 2.0}})
        filled = rope_view(bare).get("") if bare is not None else None
        if filled and isinstance(filled.get("rope_theta"), (int, float)):
            out["fill"] = {"rope_theta": float(filled["rope_theta"]),
                           "partial_rotary_factor": filled.get("partial_rotary_factor")}
    if nested:
        flat = _build(cls, {**base, "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 12345.0}})
        view = rope_view(flat) if flat is not None else {}
        if view and "" not in view:
            to = sorted(g for g, p in view.items() if p and p.get("rope_type") == "linear")
            out["flat"] = {"to": to, "none": sorted(g for g, p in view.items() if p is None)}
            # the theta the class fills in when neither the flat dict nor the file names one
            bare = _build(cls, {**base, "rope_parameters": {"rope_type": "linear", "factor": 2.0}})
            theta = (rope_view(bare).get(to[0]) or {}).get("rope_theta") if bare is not None and to else None
            if isinstance(theta, (int, float)):
                out["flat"]["theta"] = float(theta)
        per_layer = {g: {"rope_type": "linear", "factor": 2.0, "rope_theta": 12345.0} for g in sorted(nested)}
        clean = _build(cls, {**base, "rope_parameters": per_layer})
        strays = {}
        for stray_key, stray_value in (("rope_theta", 54321.0), ("rope_type", "default")):
            stray = _build(cls, {**base, "rope_parameters": {**per_layer, stray_key: stray_value}})
            if clean is not None and stray is not None:
                strays[stray_key] = "ignored" if rope_view(clean) == rope_view(stray) else "read"
        if strays:
            out["stray"] = strays
    return out


def layer_rule(cls: type, keys: list[str]) -> dict[str, Any] | None:
    """The layer types the class builds when a file names none, as ``{"head": [...], "cycle": [...]}`` (layer i is
    ``head[i]``, then ``cycle`` repeats), when they depend on the layer index alone (the same list's prefix for every
    layer count probed); None otherwise."""
    found = _probe_base(cls, keys)
    if found is None:
        return None
    base = found[0]
    lists = {}
    for n in (7, 24, 61, 96):
        built = _build(cls, {**base, "num_hidden_layers": n})
        types = _layer_list(built) if built is not None else None
        if types is None or len(types) != n:
            return None
        lists[n] = types
    longest = lists[96]
    if any(types != longest[:n] for n, types in lists.items()):
        return None
    for size in range(1, len(longest) // 2 + 1):
        for head in range(size + 1):
            cycle = longest[head:head + size]
            if all(longest[i] == cycle[(i - head) % size] for i in range(head, len(longest))):
                return {"head": longest[:head], "cycle": cycle}
    return None


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def generate() -> dict[str, Any]:
    """The model-type data for the installed transformers."""
    with quiet():
        return _generate()


def _generate() -> dict[str, Any]:
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    models: dict[str, Any] = {}
    texts: dict[str, Any] = {}
    without: dict[str, str] = {}
    for model_type in sorted(CONFIG_MAPPING_NAMES):
        try:
            cls = CONFIG_MAPPING[model_type]
            config = cls()
            text = config.get_text_config(decoder=True)
        except Exception as exc:  # noqa: BLE001 - a class that cannot build its own default
            without[model_type] = f"no default config: {type(exc).__name__}"
            continue
        rotary = _rotary_class(text)
        if rotary is None:
            without[model_type] = _why_no_rotary(text)
            continue
        path = _path_to(config, text)
        if path is None:
            without[model_type] = "its text config is not reachable through sub_configs"
            continue
        owner: Any = config
        for key in path[:-1]:
            owner = getattr(owner, key)
        auto = bool(path) and getattr(getattr(owner, "sub_configs", {}).get(path[-1]), "__name__", "") == "AutoConfig"
        text_type = str(type(text).model_type or text.model_type)
        models[model_type] = {"path": path, "auto": auto, "text_type": text_type}
        if text is not config and type(text) is type(config):
            models[model_type]["decoder_prefix"] = True  # get_text_config renames decoder_* keys in a copy
        if path == ["text_config"] and _reads_flat_text_keys(cls, model_type):
            models[model_type]["flat"] = True
        if path:
            # what the composite builds when the file has no such sub-config: its own defaults for the text model
            # (Qwen3-ASR's 28 layers of 2048), not always the text class's
            mine, plain = text.to_dict(), type(text)().to_dict()
            absent = {k: mine[k] for k in (*DEFAULT_KEYS, "rope_parameters", "partial_rotary_factor")
                      if k in mine and mine[k] is not None and mine[k] != plain.get(k)}
            if absent:
                models[model_type]["absent"] = _jsonable(absent)
        if text_type in texts:
            continue
        text_cls = type(text)
        saved = text_cls().to_dict()
        rope = dict(saved.get("rope_parameters") or {})
        nested = bool(rope) and all(isinstance(v, dict) for v in rope.values())
        theta = None if nested else rope.pop("rope_theta", None)
        partial = None if nested else rope.pop("partial_rotary_factor", saved.get("partial_rotary_factor"))
        entry: dict[str, Any] = {
            "theta": theta,
            "rope": rope if nested or rope.get("rope_type", "default") != "default" or len(rope) > 1 else None,
            "partial": partial,
            "defaults": {k: saved[k] for k in DEFAULT_KEYS if saved.get(k) is not None},
            "aliases": dict(getattr(text_cls, "attribute_map", {}) or {}),
            "head_dim": _head_dim_rule(text_cls, text_cls()),
            "default_partial": _default_partial(text_cls, rotary, dict(saved.get("rope_parameters") or {})),
            "rotary": rotary.__name__,
            "accepts": _accepted(text_cls, rotary, saved),
            "scales": _applies_scaling(text_cls, rotary, dict(saved.get("rope_parameters") or {})),
            "conversions": conversions(text_cls),
            "layer_types": layer_rule(text_cls, candidate_keys(text_cls)),
        }
        rule = entry["head_dim"]
        if rule and rule.get("derived"):
            entry["defaults"].pop("head_dim", None)
            target = entry["aliases"].get("head_dim")
            if target:
                entry["defaults"].pop(target, None)
        texts[text_type] = _jsonable(entry)
    import transformers.models.auto.modeling_auto as modeling_auto
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    # what a trainer loading through the Auto classes without remote code can build (TRL's create_model_from_path:
    # AutoConfig by model_type, then getattr(transformers, architectures[0])): every model_type AutoConfig knows,
    # and every model class the Auto mappings name
    classes: set[str] = set()
    for name in dir(modeling_auto):
        if name.endswith("_MAPPING_NAMES"):
            for value in getattr(modeling_auto, name).values():
                classes.update(value if isinstance(value, (tuple, list)) else [value])
    return {"transformers": transformers.__version__, "models": models, "text": texts,
            "without_rotary": without, "auto_config_types": sorted(CONFIG_MAPPING_NAMES),
            "auto_model_classes": sorted(classes)}


def main() -> int:
    data = generate()
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {OUT}: {len(data['models'])} model types with RoPE, {len(data['text'])} text classes, "
          f"{len(data['without_rotary'])} without (transformers {data['transformers']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

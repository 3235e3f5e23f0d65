"""Write tests/data/layer_cache.json: the cache tensors transformers keeps per layer, measured by running the model.

Run by a developer after upgrading transformers (``python tests/harness/generate_layer_cache.py``, a few minutes on
two cores); ``tests/models/test_cache_layout.py`` compares what
:func:`~posenc_cli.models.cache_layout.transformers_cache` predicts from the same config, tensor by tensor, and
regenerates a sample in memory to catch stale data.

How, per model type of transformers' ``CONFIG_MAPPING`` whose decoder is a causal language model
(``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` names its text type or itself):

* the text config is the class's default ``get_text_config(decoder=True)``, shrunk as the per-layer rotation sweep
  shrinks it (:func:`generate_layer_rotation.shrink`: tiny hidden size, at most 8 layers, the layer pattern kept),
  with every window made :data:`WINDOW` tokens (``sliding_window``, ``attention_chunk_size``) so that the
  :data:`SEQ`-token prompt runs past it and the data shows what transformers keeps of a sliding layer;
* the model class (``AutoModel``'s, else the module's own ``*Model``) is built with random weights in
  :data:`DTYPE` (bfloat16: a state kept in float32 whatever the compute dtype shows as such), or float32 when a
  bfloat16 pass fails on CPU, with eager attention, and runs one forward pass over :data:`SEQ` tokens with
  ``use_cache=True`` and no cache given: the cache the model makes by default (``DynamicCache(config=...)``, or its
  own class such as MiniMax's), which is what ``generate`` builds when asked for nothing else;
* per layer of the returned cache: its class and every tensor it holds (``keys``, ``values``, ``conv_states.i``,
  ``recurrent_states.i``, ``indexer_keys``, ...; a MiniMax cache's ``linear_cache``) as shape and dtype.

The shrunk config dict is stored with the measurement, so the test reads exactly the config the model was built
from.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from generate_layer_rotation import DERIVE, MAX_PARAMS, _model_class, _text_dict, first_build
from generate_layer_rotation import shrink as shrink_for_rotation
from generate_model_types import quiet

OUT = Path(__file__).resolve().parents[1] / "data" / "layer_cache.json"
SEQ = 11  # prompt tokens: past the window, and no head count or head size equals it
WINDOW = 5  # every sliding window and attention chunk, so the prompt runs past it
DTYPE = "bfloat16"
_WINDOW_KEYS = ("sliding_window", "attention_chunk_size")
#: settings put into a model type's shrunk config so that it builds and shows its cache: a hybrid whose default layer
#: pattern has no attention layer (which transformers' mask code refuses), expert counts the tiny config breaks
OVERRIDES: dict[str, dict[str, Any]] = {
    "granitemoehybrid": {"layer_types": ["mamba", "attention", "mamba", "attention"], "num_hidden_layers": 4},
    "bamba": {"attn_layer_indices": [1, 5]},
    "mamba2": {"hidden_size": 256, "num_heads": 8, "head_dim": 64, "state_size": 16, "time_step_rank": 16},
    "zamba": {"hidden_size": 256, "attention_hidden_size": 512, "attention_head_dim": 128, "mamba_dt_rank": 16},
    "kimi_linear": {"num_experts_per_token": 2},
    "bailing_hybrid": {"num_expert_group": 1, "num_experts_per_token": 2},
    "gpt_neo": {"hidden_size": 256, "num_heads": 4, "window_size": WINDOW},  # its local layers: a mask, a full cache
    "lfm2_moe": {"layer_types": ["conv", "full_attention", "conv", "conv", "full_attention", "conv", "conv",
                                 "full_attention"]},
}
#: Config settings the class derives its layer types from, as (label, model type, settings put into the shrunk
#: config; :data:`DERIVE` deletes a key so the class derives it again). Every built text type whose config holds
#: ``layer_types`` also gets a variant with them deleted (``"<text type> derived"``): the class's own rule.
VARIANTS: list[tuple[str, str, dict[str, Any]]] = [
    ("qwen2 sliding from layer 4", "qwen2", {"layer_types": DERIVE, "use_sliding_window": True,
                                            "max_window_layers": 4}),
    ("gemma3_text pattern 2", "gemma3_text", {"layer_types": DERIVE, "sliding_window_pattern": 2}),
    ("qwen3_next interval 2", "qwen3_next", {"layer_types": DERIVE, "full_attention_interval": 2}),
    ("llama4_text interval 2", "llama4_text", {"layer_types": DERIVE, "no_rope_layers": DERIVE,
                                              "no_rope_layer_interval": 2}),
    ("lfm2 conv", "lfm2", {"layer_types": ["conv", "full_attention", "conv", "conv", "full_attention", "conv"],
                          "num_hidden_layers": 6, "full_attn_idxs": DERIVE}),
    ("nemotron_h pattern", "nemotron_h", {"layers_block_type": DERIVE, "num_hidden_layers": DERIVE,
                                          "hybrid_override_pattern": "M-M*-ME"}),
    ("jamba period 2", "jamba", {"attn_layer_period": 2, "attn_layer_offset": 1}),
    # Gemma 4 26B: full-attention layers with num_global_key_value_heads when attention_k_eq_v (values = keys)
    ("gemma4_text k_eq_v", "gemma4_text", {"attention_k_eq_v": True, "num_global_key_value_heads": 1,
                                           "per_layer_config": DERIVE}),
    ("gemma4_text global heads without k_eq_v", "gemma4_text", {"num_global_key_value_heads": 1,
                                                                "per_layer_config": DERIVE}),
]

#: attributes of a cache layer that are bookkeeping, not cache memory
_BOOKKEEPING = ("cumulative_length", "_sliding_window_tensor", "cumulative_length_linear", "indexer_position_ids")


def shrink(d: dict[str, Any], layers: int) -> dict[str, Any]:
    """The rotation sweep's tiny config with every window :data:`WINDOW` tokens."""
    out = shrink_for_rotation(d, layers)
    for key in _WINDOW_KEYS:
        if isinstance(out.get(key), int) and not isinstance(out.get(key), bool) and out[key] > WINDOW:
            out[key] = WINDOW
    return out


def _tensors(obj: Any) -> dict[str, list[Any]]:
    """name -> [shape, dtype] of every tensor an object holds (directly, or in a dict / list by index)."""
    import torch

    out: dict[str, list[Any]] = {}
    for name, value in sorted(vars(obj).items()):
        if name in _BOOKKEEPING:
            continue
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else None
        if isinstance(value, torch.Tensor):
            out[name] = [list(value.shape), str(value.dtype).removeprefix("torch.")]
        elif items is not None:
            for key, item in items:
                if isinstance(item, torch.Tensor):
                    out[f"{name}.{key}"] = [list(item.shape), str(item.dtype).removeprefix("torch.")]
    return out


def record(cache: Any, n: int) -> list[dict[str, Any]]:
    """Per layer of a transformers cache: its layer class and its tensors."""
    if hasattr(cache, "self_attention_cache"):
        cache = cache.self_attention_cache
    layers = list(getattr(cache, "layers", []))
    linear = getattr(cache, "linear_cache", None)
    out = []
    for i in range(max(n, len(layers))):
        layer = layers[i] if i < len(layers) else None
        entry: dict[str, Any] = {"class": type(layer).__name__ if layer is not None else None,
                                 "tensors": _tensors(layer) if layer is not None else {}}
        if isinstance(linear, list) and i < len(linear) and hasattr(linear[i], "shape"):
            entry["tensors"]["linear_cache"] = [list(linear[i].shape), str(linear[i].dtype).removeprefix("torch.")]
        out.append(entry)
    return out


def measure(text_cls: type, d: dict[str, Any]) -> dict[str, Any]:
    """Build the text model of config dict ``d``, run the prompt with the default cache and record it (or raise)."""
    import torch

    errors = []
    for dtype in (DTYPE, "float32"):
        config = text_cls.from_dict(json.loads(json.dumps(d)))
        config._attn_implementation = "eager"
        n = int(config.num_hidden_layers)
        for cls in _model_class(config):
            with torch.device("meta"):
                try:
                    size = sum(p.numel() for p in cls(config).parameters())
                except Exception as exc:  # noqa: BLE001 - this class does not build from this config: try the next
                    errors.append(f"{cls.__name__}: {type(exc).__name__}: {str(exc)[:120]}")
                    continue
            if size > MAX_PARAMS:
                raise RuntimeError(f"{cls.__name__} has {size} parameters after shrinking")
            torch.manual_seed(0)
            model = cls(config).to(getattr(torch, dtype)).eval()
            vocab = int(getattr(config, "vocab_size", 0) or 0) or 32
            ids = torch.arange(1, SEQ + 1).remainder(vocab).unsqueeze(0)
            try:
                with torch.no_grad():
                    out = model(input_ids=ids, use_cache=True)
            except Exception as exc:  # noqa: BLE001 - recorded as this class's failure
                errors.append(f"{cls.__name__} forward ({dtype}): {type(exc).__name__}: {str(exc)[:160]}")
                continue
            cache = getattr(out, "past_key_values", None)
            if cache is None and isinstance(out, tuple) and len(out) > 1:
                cache = out[1]
            if cache is None:
                errors.append(f"{cls.__name__}: the forward pass returns no cache")
                continue
            return {"model_class": cls.__name__, "cache_class": type(cache).__name__, "dtype": dtype,
                    "layers": record(cache, n)}
    raise RuntimeError("; ".join(errors) or "no model class for this config")


def generative(model_type: str) -> str | None:
    """None when ``model_type``'s decoder is a causal language model in transformers, else why it is not swept."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return None
    try:
        text_type = CONFIG_MAPPING[model_type]().get_text_config(decoder=True).model_type
    except Exception as exc:  # noqa: BLE001
        return f"no default config: {type(exc).__name__}"
    return None if text_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES else "not a causal language model"


def build(model_type: str, builds: dict[str, Any], overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """{"build": key} (the measurement stored in ``builds``), or {"skipped" / "failed": reason}."""
    reason = generative(model_type)
    if reason is not None:
        return {"skipped": reason}
    overrides = {**OVERRIDES.get(model_type, {}), **(overrides or {})}
    try:
        text_cls, saved = _text_dict(model_type)
    except Exception as exc:  # noqa: BLE001 - a class that cannot build its own default config
        return {"failed": f"no default config: {type(exc).__name__}"}
    return first_build(model_type, text_cls, saved, overrides, builds, shrink, measure,
                       once="num_hidden_layers" in overrides)


def generate(model_types: list[str] | None = None, variants: list[str] | None = None) -> dict[str, Any]:
    """The layer-cache data for the installed transformers; ``model_types`` / ``variants`` (labels) pick a sample,
    None all of them."""
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    torch.set_num_threads(1)
    builds: dict[str, Any] = {}
    types: dict[str, Any] = {}
    with quiet():
        for model_type in model_types if model_types is not None else sorted(CONFIG_MAPPING_NAMES):
            types[model_type] = build(model_type, builds)
        found: dict[str, Any] = {}
        derived = sorted({(b["text_type"], t) for t, v in types.items() if "build" in v
                          for b in [builds[v["build"]]] if "layer_types" in b["config"] and b["text_type"] == t})
        todo = VARIANTS + [(f"{t} derived", t, {"layer_types": DERIVE}) for t, _ in derived]
        for label, model_type, overrides in todo:
            if variants is not None and label not in variants:
                continue
            found[label] = {"model_type": model_type, "overrides": overrides, **build(model_type, builds, overrides)}
    builds = {k: v for k, v in sorted(builds.items()) if "failed" not in v}
    return {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0], "seq": SEQ,
            "window": WINDOW, "types": {t: v for t, v in types.items() if "skipped" not in v}, "variants": found,
            "builds": builds}


def main() -> int:
    start = time.monotonic()
    data = generate(sys.argv[1:] or None)
    if len(sys.argv) > 1:
        print(json.dumps(data, indent=1))
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".tmp")
    # compact: one build per line
    lines = [f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in data["builds"].items()]
    head = {k: v for k, v in data.items() if k != "builds"}
    text = json.dumps(head, indent=1, sort_keys=True)[:-2] + ',\n "builds": {\n' + ",\n".join(lines) + "\n }\n}\n"
    json.loads(text)
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(OUT)
    built = sum("build" in v for v in data["types"].values())
    print(f"wrote {OUT}: {built} model types built, {len(data['types']) - built} failed, "
          f"{len(data['builds'])} distinct builds (transformers {data['transformers']}, "
          f"{time.monotonic() - start:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

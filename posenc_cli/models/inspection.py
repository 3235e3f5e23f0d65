"""What a model's positional encoding does, per layer group, with numbers (numpy via ``frequencies``)."""

from __future__ import annotations

import math
from typing import Any

from posenc_cli.models import remote_code
from posenc_cli.models.model_positions import ModelPositions
from posenc_cli.models.record import RopeGroup, rope_groups
from posenc_cli.rope.encodings import alibi_slopes
from posenc_cli.rope.frequencies import compute
from posenc_cli.rope.windows import window

_PARAM_SKIP = {"rope_type", "rope_theta", "partial_rotary_factor", "short_factor", "long_factor"}


def layer_report(model: ModelPositions, group: RopeGroup, seq_len: int | None) -> dict[str, Any]:
    """Numbers for one rope group (from the rope record), at sequence length ``seq_len`` (None: as the model
    starts). A remote-code family or engine-only mechanism (``model.engine``) gets the numbers of the engine that
    serves it."""
    spec, params = group.spec, group.params
    if model.engine is not None:
        freqs = remote_code.engine_frequencies(model.engine, params, seq_len)
    else:
        freqs = compute(spec, seq_len, top_level=group.top_level)
    wl = freqs.wavelengths
    # the record's window; a config without max_position_embeddings is reported at length 0, as it always was
    served = group.window or window(params, 0, model.text_model_type or model.model_type)
    native, original, basis = served.served, served.original, served.basis
    if model.engine is not None and spec.rope_type == "dynamic":  # vLLM's dynamic NTK is static: a fixed table
        native, basis = spec.max_position_embeddings, "the engine's static table has max_position rows"
    reference = original or native or spec.max_position_embeddings
    out: dict[str, Any] = {
        "layer": group.name,
        "layers": list(group.layers) if group.layers is not None else None,
        "rope_type": spec.rope_type,
        "rope_theta": spec.theta,
        "head_dim": spec.head_dim,
        "partial_rotary_factor": spec.partial_rotary_factor,
        "rotary_dim": spec.rotary_dim,
        "rotating_pairs": int(wl.size),
        "parameters": {k: v for k, v in params.items() if k not in _PARAM_SKIP},
        "native_window": native,
        "original_length": original,
        "window_basis": basis,
        "window_fact": served.fact or None,
        "seq_len": seq_len,
        "attention_factor": freqs.attention_factor,
        "logit_multiplier": freqs.attention_factor**2 * model.softmax_scale,
        "wavelength_min": float(wl.min()),
        "wavelength_max": float(wl.max()),
        "pairs_longer_than_original": int((wl > reference).sum()),
        "inv_freq": [float(v) for v in freqs.inv_freq.tolist()],
        "details": freqs.details,
    }
    if spec.rope_type in ("yarn", "llama3"):
        out["bands"] = {b: freqs.bands.count(b) for b in dict.fromkeys(freqs.bands)}
    if model.engine is not None:
        out["numbers_from"] = model.engine.numbers_from
    return out


def report(model: ModelPositions, seq_len: int | None = None) -> dict[str, Any]:
    """The whole ``posenc inspect`` result as a JSON-ready dict.

    ``layers`` lists every rope group (Gemma 3 and OLMo 3 have two, DeepSeek V4 "main" and "compress");
    ``no_rope`` the layers that use no positional encoding. For RoPE models the first group's keys are repeated at
    the top level.
    """
    base: dict[str, Any] = {
        "family": model.family, "model_type": model.model_type, "text_model_type": model.text_model_type,
        "text_source": model.text_source, "max_position_embeddings": model.max_position_embeddings,
        "num_layers": model.num_layers, "softmax_scale": model.softmax_scale,
        "softmax_scale_reason": model.softmax_scale_reason, "notes": model.notes,
        "no_rope": [{"name": g.name, "layers": g.layers, "reason": g.reason} for g in model.no_rope],
    }
    if model.engine is not None:
        base["engine_reading"] = remote_code.engine_section(model.engine)
    if model.family == "rope":
        layers = [layer_report(model, g, seq_len) for g in rope_groups(model)]
        if not layers:
            return {**base, "family": "none", "layers": [],
                    "summary": "no layer applies RoPE: " + "; ".join(g.reason for g in model.no_rope)}
        return {**layers[0], **base, "layers": layers}
    if model.family == "alibi":
        slopes = [float(v) for v in alibi_slopes(model.num_heads).tolist()] if model.num_heads else None
        return {**base, "num_heads": model.num_heads, "alibi_slopes": slopes,
                "summary": "ALiBi: no position embedding; each head adds -slope * distance to its attention scores "
                           "(causal). Nothing to scale: it runs past its training length, though quality beyond it "
                           "comes mostly from recent tokens."}
    summaries = {
        "learned": f"learned absolute position embeddings: a table of {model.max_position_embeddings} rows. "
                   "Positions past it have no embedding; extending needs new rows and training (or a switch to RoPE).",
        "sinusoidal": "fixed sinusoidal absolute positions added to the input embeddings (Vaswani et al.).",
        "relative_bias": "learned relative-position buckets added to attention scores (T5 style): no RoPE.",
        "none": "no positional encoding in any layer: " + "; ".join(g.reason for g in model.no_rope),
    }
    summary = summaries.get(model.family, "no positional encoding recognised in this config; " + "; ".join(model.notes))
    return {**base, "summary": summary}


def wavelength_text(value: float) -> str:
    return f"{value:,.1f}" if math.isfinite(value) else "inf"


def layer_ranges(layers: list[int] | None) -> str:
    """``0-4, 6-10, 12`` for a list of layer indices; ``?`` when the config gives no layer count."""
    if layers is None:
        return "?"
    runs: list[list[int]] = []
    for i in sorted(layers):
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


"""What a model config's positional encoding does, with numbers (numpy via ``frequencies``)."""

from __future__ import annotations

import math
from typing import Any

from posenc_cli.config import LayerRope, ModelPositions, trained_context
from posenc_cli.errors import PosencError
from posenc_cli.frequencies import RopeSpec, compute

_PARAM_SKIP = {"rope_type", "rope_theta", "partial_rotary_factor", "short_factor", "long_factor"}


def spec_for(model: ModelPositions, layer: LayerRope) -> RopeSpec:
    """The :class:`RopeSpec` transformers would build for one layer of ``model``."""
    if model.head_dim is None:
        raise PosencError("the config has neither head_dim nor hidden_size and num_attention_heads; "
                          "cannot tell the rotary dimension")
    if model.max_position_embeddings is None:
        raise PosencError("the config has no max_position_embeddings")
    return RopeSpec(layer.params, model.head_dim, model.max_position_embeddings)


def layer_report(model: ModelPositions, layer: LayerRope, seq_len: int | None) -> dict[str, Any]:
    """Numbers for one rope dict, at sequence length ``seq_len`` (None: as the model starts)."""
    spec = spec_for(model, layer)
    top = model.top_level if len(model.layers) > 1 else None
    freqs = compute(spec, seq_len, top_level=top)
    wl = freqs.wavelengths
    trained, extended, basis = trained_context(layer.params, spec.max_position_embeddings)
    out: dict[str, Any] = {
        "layer": layer.name,
        "rope_type": spec.rope_type,
        "rope_theta": spec.theta,
        "head_dim": spec.head_dim,
        "partial_rotary_factor": spec.partial_rotary_factor,
        "rotary_dim": spec.rotary_dim,
        "parameters": {k: v for k, v in layer.params.items() if k not in _PARAM_SKIP},
        "trained_context": trained,
        "extended_context": extended,
        "context_basis": basis,
        "seq_len": seq_len,
        "attention_factor": freqs.attention_factor,
        "logit_multiplier": freqs.attention_factor**2,
        "wavelength_min": float(wl.min()),
        "wavelength_max": float(wl.max()),
        "pairs_longer_than_trained": int((wl > trained).sum()),
        "inv_freq": [float(v) for v in freqs.inv_freq.tolist()],
        "details": freqs.details,
    }
    if spec.rope_type in ("yarn", "llama3"):
        out["bands"] = {b: freqs.bands.count(b) for b in dict.fromkeys(freqs.bands)}
    return out


def report(model: ModelPositions, seq_len: int | None = None) -> dict[str, Any]:
    """The whole ``posenc inspect`` result as a JSON-ready dict.

    For RoPE the top-level keys describe the first rope dict and ``layers`` lists every one (per-layer-type
    configs such as Gemma 3 have several).
    """
    base: dict[str, Any] = {"family": model.family, "model_type": model.model_type,
                            "max_position_embeddings": model.max_position_embeddings}
    if model.family == "rope":
        layers = [layer_report(model, layer, seq_len) for layer in model.layers]
        return {**base, **layers[0], "layers": layers}
    if model.family == "alibi":
        from posenc_cli.encodings import alibi_slopes

        slopes = [float(v) for v in alibi_slopes(model.num_heads).tolist()] if model.num_heads else None
        return {**base, "num_heads": model.num_heads, "alibi_slopes": slopes,
                "summary": "ALiBi: no position embedding; each head adds -slope * distance to its attention scores "
                           "(causal). Nothing to scale: it runs past its training length, though quality beyond it "
                           "comes mostly from recent tokens."}
    if model.family == "learned":
        return {**base, "summary": f"learned absolute position embeddings: a table of "
                                   f"{model.max_position_embeddings} rows. Positions past it have no embedding; "
                                   "extending needs new rows and training (or a switch to RoPE)."}
    return {**base, "summary": "no positional encoding recognised in this config; " + "; ".join(model.notes)}


def wavelength_text(value: float) -> str:
    return f"{value:,.1f}" if math.isfinite(value) else "inf"

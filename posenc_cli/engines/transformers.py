"""transformers 5.x's numbers: the reference every other engine is compared with (posenc's frequency code is proven
equal to it by the parity tests), per rope group at a sequence length (numpy at import: :mod:`.hf`, the record,
loads this module when a model is run)."""

from __future__ import annotations

from posenc_cli.engines.runs import EngineRun, GroupRun
from posenc_cli.models.model_positions import ModelPositions
from posenc_cli.models.record import rope_groups
from posenc_cli.rope.frequencies import compute
from posenc_cli.rope.windows import window as window_for


def groups_at(model: ModelPositions, seq_len: int | None) -> list[GroupRun]:
    out = []
    for g in rope_groups(model):
        freqs = compute(g.spec, seq_len, top_level=g.top_level)
        out.append(GroupRun(g.name, freqs.inv_freq, freqs.attention_factor, g.softmax_scale))
    return out


def reference_run(name: str, version: str, model: ModelPositions, max_model_len: int, seq_len: int, *,
                  past_window: bool = False) -> EngineRun:
    """transformers' run of the model (the config as it is) serving ``max_model_len``, at ``seq_len``, as the
    reference engine ``name`` ``version`` reports it; ``past_window``: warn when that is past the native window."""
    warnings = _past_window(model, max_model_len) if past_window else []
    return EngineRun(name, version, max_model_len, groups_at(model, seq_len), ["config.json as it is"], accepts=None,
                     warnings=warnings)


def _past_window(model: ModelPositions, max_model_len: int) -> list[str]:
    """A warning when ``max_model_len`` is past the model's native window (transformers computes it all the same)."""
    first = model.layers[0]
    window = window_for(first.params, model.max_position_embeddings or max_model_len,
                        model.text_model_type or model.model_type).served
    if window is not None and max_model_len > window:
        return [f"max_model_len {max_model_len:,} is past the model's native window {window:,}: transformers "
                "computes it, but the model was not trained there"]
    return []

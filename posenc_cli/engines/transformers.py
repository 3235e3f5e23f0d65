"""transformers 5.x: the reference every other engine is compared with (posenc's frequency code is proven equal to
it by the parity tests). Dynamic NTK and LongRoPE change with the sequence length: ``run`` reports them at the
serving length, :func:`short_run` at the original length."""

from __future__ import annotations

from typing import Any

from posenc_cli.engines.hf import NAME, VERSION
from posenc_cli.engines.runs import EngineRun, GroupRun
from posenc_cli.models.inspection import spec_for
from posenc_cli.models.positions import ModelPositions
from posenc_cli.rope.frequencies import compute
from posenc_cli.rope.windows import window as window_for


def groups_at(model: ModelPositions, seq_len: int | None) -> list[GroupRun]:
    out = []
    for layer in model.layers:
        freqs = compute(spec_for(model, layer), seq_len, top_level=model.top_level)
        out.append(GroupRun(layer.name, freqs.inv_freq, freqs.attention_factor, model.softmax_scale))
    return out


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    first = model.layers[0]
    window = window_for(first.params, model.max_position_embeddings or max_model_len,
                        model.text_model_type or model.model_type).served
    warnings = []
    if window is not None and max_model_len > window:
        warnings.append(f"max_model_len {max_model_len:,} is past the model's native window {window:,}: transformers "
                        "computes it, but the model was not trained there")
    return EngineRun(NAME, VERSION, max_model_len, groups_at(model, seq_len or max_model_len), ["config.json as it is"],
                     accepts=None, warnings=warnings)


def short_run(model: ModelPositions, cfg: dict[str, Any], seq_len: int) -> EngineRun:
    return EngineRun(NAME, VERSION, seq_len, groups_at(model, seq_len), ["config.json as it is"])

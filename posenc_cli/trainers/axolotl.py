"""axolotl 0.21.0 (``loaders/utils.py`` ``load_model_config``): the YAML posenc renders for a request
(``posenc scale --engine axolotl``), what it trains for a model as shipped (transformers' modeling of the config as it
is: axolotl does not change the rope of a config it loads), and how ``posenc audit`` reads its YAML back.

``model_config:`` (alias ``overrides_of_model_config``) is ``setattr`` on the built config, so only a complete
``rope_parameters`` dict (``rope_type`` and ``rope_theta`` inside) takes effect under transformers 5; a bare
``rope_theta`` is ignored.

stdlib at import (``posenc scale`` loads this module only for its format).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from posenc_cli.engines.runs import EngineRun
from posenc_cli.engines.target import Rendering, Target
from posenc_cli.errors import PosencError
from posenc_cli.trainers.hf_based import complete_keys, dump_yaml, top_level_only, trainer_input, transformers_groups
from posenc_cli.trainers.settings import Reader, TrainedWith, positive_int, reject_rope_keys

if TYPE_CHECKING:
    from posenc_cli.models.model_positions import ModelPositions

NAME = "axolotl"
VERSION = "0.21.0"


def render(r: Rendering) -> tuple[str, list[str]]:
    """``--engine axolotl``: the YAML ``model_config`` with the whole rope dict."""
    t = trainer_input(r)
    top_level_only("axolotl", "model_config", t)
    caveats = ["axolotl sets model_config keys on the loaded config one by one: keep rope_parameters whole "
               "(a legacy `type` key or a bare rope_theta does not take effect under transformers 5)"]
    if t.req.method == "dynamic":
        caveats.append(f"a sequence_len over {t.max_pos} makes axolotl raise max_position_embeddings to it after "
                       "the model is built: training keeps transformers' dynamic base, but the saved config moves "
                       "the point where the base starts to grow")
    else:
        caveats.append(f"keep sequence_len at most {t.max_pos}: axolotl raises max_position_embeddings to a longer "
                       "one without changing the rope")
    if t.req.stage:  # a training run at this length (a pick stage): axolotl's training length
        return dump_yaml({"sequence_len": t.req.target, "model_config": complete_keys(t)}), caveats
    return dump_yaml({"model_config": complete_keys(t)}), caveats


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    """transformers' numbers for the model as shipped."""
    return EngineRun(NAME, VERSION, max_model_len, transformers_groups(model, seq_len or max_model_len),
                     [f"sequence_len: {max_model_len}"], layout="rotate-half")


# --- posenc audit: an axolotl YAML read back ----------------------------------------------------------------------

MODEL_CONFIG_ROPE = {"rope_parameters", "rope_scaling", "rope_theta", "max_position_embeddings",
                 "partial_rotary_factor"}


def _read_yaml(data: Any, path: str, exported: Mapping[str, Any] | None,
               base: Mapping[str, Any] | None = None) -> TrainedWith:
    """The rope and window an axolotl YAML trained with (``model_config`` set on the built config)."""
    if "rope_scaling" in data:
        raise PosencError(f"{path}: axolotl rejects a top-level rope_scaling (\"it should now be a key under "
                          "model_config\", utils/schemas/deprecated.py)")
    reject_rope_keys(data, set(), path, "axolotl takes rope settings under model_config")
    over = data.get("model_config", data.get("overrides_of_model_config")) or {}
    if not isinstance(over, Mapping):
        raise PosencError(f"{path}: model_config must be a mapping, got {type(over).__name__}")
    reject_rope_keys(over, MODEL_CONFIG_ROPE, path, f"model_config takes {', '.join(sorted(MODEL_CONFIG_ROPE))}")
    label = f"axolotl {path}"
    notes: list[str] = []
    window = _window(data, over, exported, path)
    rope = over.get("rope_parameters") or over.get("rope_scaling")
    if rope is None:
        if "rope_theta" in over:
            notes.append("model_config: rope_theta alone is ignored under transformers 5 (axolotl 0.21): the model "
                         "trained with its checkpoint's theta")
        return TrainedWith(NAME, label, None, window, notes)
    if not isinstance(rope, Mapping):
        raise PosencError(f"{path}: model_config rope dict must be a mapping, got {rope!r}")
    rope = dict(rope)
    nested = {k: v for k, v in rope.items() if isinstance(v, Mapping)}
    if nested and len(nested) != len(rope):
        raise PosencError(f"{path}: model_config's rope dict mixes per-layer-type dicts ({', '.join(nested)}) with "
                          "flat keys; give one dict per layer type")
    for name, group in (nested or {"": rope}).items():
        where = f"model_config's rope dict{f' for {name}' if name else ''}"
        if "rope_type" not in group:
            raise PosencError(f"{path}: {where} has no rope_type; under transformers 5 axolotl fails with KeyError: "
                              "'rope_type' (write rope_type, not type)")
        if "rope_theta" not in group:
            if "rope_theta" not in over or nested:
                raise PosencError(f"{path}: {where} has no rope_theta; under transformers 5 the model is built with "
                                  "rope_theta None (TypeError): add rope_theta to it")
            rope["rope_theta"] = over["rope_theta"]
    if nested:
        rope = {name: dict(group) for name, group in nested.items()}
    if any(g.get("rope_type") == "dynamic" for g in (nested or {"": rope}).values()) and (
            window is not None and window == data.get("sequence_len")):
        notes.append(f"dynamic NTK under transformers 5 scales from the live config's max_position_embeddings, which "
                     f"axolotl raises to sequence_len ({window}) after building the model: the run trained plain RoPE "
                     f"up to {window}, and the export must carry max_position_embeddings {window}")
    return TrainedWith(NAME, label, rope, window, notes)


def _window(data: Mapping[str, Any], over: Mapping[str, Any], exported: Mapping[str, Any] | None,
                    path: str) -> int | None:
    """The window axolotl 0.21 trains with: model_config's max_position_embeddings (set before the model is built),
    else the checkpoint's, raised to sequence_len when that is longer (loaders/model.py _adjust_model_config, after
    the model is built). None: neither is known."""
    given = over.get("max_position_embeddings")
    if given is not None:
        given = positive_int(given, "model_config max_position_embeddings", path)
    elif exported is not None:
        from posenc_cli.models.config_keys import text_config

        value = text_config(exported)[0].get("max_position_embeddings")
        given = int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    seq = data.get("sequence_len")
    if seq is not None:
        seq = positive_int(seq, "sequence_len", path)
    if given is None or seq is None:
        return given if seq is None else seq
    return max(given, seq)



TARGET = Target(
    NAME, "axolotl", "axolotl", VERSION, render, run, targets="axolotl {version}", prints="YAML `model_config`",
    proven_by="`load_model_config`",
    cannot_express="nothing in transformers' rope types: the whole `rope_parameters` dict is set",
    reads_back=Reader(NAME, "axolotl", "yaml", _read_yaml,
                      frozenset({"base_model", "sequence_len", "model_config", "overrides_of_model_config"}),
                      setattr_dict=True))

"""TRL 1.16.0 (``trainer/utils.py`` ``create_model_from_path``): the ``SFTConfig`` keys posenc renders for a request
(``posenc scale --engine trl``) and what it trains for a model as shipped: ``model_init_kwargs`` go to
``from_pretrained``, which sets them on the loaded config, so the same complete rope dict as axolotl's; TRL does not
change the rope of a config it loads.

stdlib at import (``posenc scale`` loads this module only for its format).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from posenc_cli.engines.runs import NOT_MODELLED, WILL_NOT_START, EngineRun
from posenc_cli.engines.target import Rendering, Target
from posenc_cli.models.model_types import generated
from posenc_cli.trainers.hf_based import complete_keys, dump_yaml, top_level_only, trainer_input, transformers_groups
from posenc_cli.trainers.trained import refused

if TYPE_CHECKING:
    from posenc_cli.models.model_positions import ModelPositions

NAME = "trl"
VERSION = "1.16.0"


def render(r: Rendering) -> tuple[str, list[str]]:
    """``--engine trl``: ``SFTConfig.model_init_kwargs`` with the whole rope dict."""
    t = trainer_input(r)
    top_level_only("TRL", "model_init_kwargs", t)
    # a training run at a set length (a pick stage): SFTConfig.max_length, where TRL cuts and packs sequences
    length = {"max_length": t.req.target} if t.req.stage else {}
    return dump_yaml({**length, "model_init_kwargs": complete_keys(t)}), [
        "model_init_kwargs go to from_pretrained, which sets them on the loaded config: keep rope_parameters "
        "whole (rope_scaling without rope_theta fails under transformers 5)"]


def hf_loadable(cfg: dict[str, Any]) -> tuple[str, str] | None:
    """Why TRL 1.16.0's ``create_model_from_path`` cannot build this config with transformers' own classes, as
    (verdict, reason); None when it can. It loads ``AutoConfig`` by ``model_type`` (an unknown type loads only with
    ``trust_remote_code=True`` from the checkpoint's ``auto_map`` code), then takes ``getattr(transformers,
    architectures[0])``; where that is no transformers class it falls back to an Auto class, which may run the
    checkpoint's code: posenc runs neither, so those are not modelled."""
    data = generated()
    model_type = cfg.get("model_type")
    if model_type not in data["auto_config_types"]:  # None too: AutoConfig picks its class by model_type
        if "auto_map" in cfg:
            named = f"a {model_type} config class" if model_type else "config class for a file without model_type"
            return NOT_MODELLED, (f"transformers has no {named}: it loads only with trust_remote_code=True "
                                  "(model_init_kwargs), which runs the checkpoint's own code; posenc does not run it")
        return WILL_NOT_START, (f"transformers {data['transformers']} does not recognize model_type {model_type} "
                                "and the config has no auto_map: from_pretrained fails")
    architectures = cfg.get("architectures") or []
    if architectures and architectures[0] not in data["auto_model_classes"]:
        return NOT_MODELLED, (f"{architectures[0]} is no transformers class: TRL falls back to an Auto class (from "
                              "auto_map, or AutoModelForCausalLM), whose choice posenc does not model")
    return None


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    """transformers' numbers for the model as shipped, where TRL can build it with transformers' own classes."""
    unloadable = hf_loadable(cfg)
    if unloadable is not None:
        return refused(NAME, VERSION, max_model_len, *unloadable)
    return EngineRun(NAME, VERSION, max_model_len, transformers_groups(model, seq_len or max_model_len),
                     [f"max_length={max_model_len}"], layout="rotate-half")


TARGET = Target(
    NAME, "TRL", "trl", VERSION, render, run, targets="TRL {version}", prints="`SFTConfig.model_init_kwargs`",
    proven_by="`create_model_from_path`",
    cannot_express="nothing in transformers' rope types: the whole `rope_parameters` dict is set")

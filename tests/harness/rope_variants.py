"""Corpus configs with their text model's rope replaced: the rope types an engine reads, on real model geometry
(shared by the LMDeploy and ExLlamaV3 engine tests)."""

from __future__ import annotations

import copy
from typing import Any


def text_of(cfg: dict[str, Any]) -> dict[str, Any]:
    """The dict holding the text model's keys: ``text_config`` / ``llm_config`` of a wrapper, else the config."""
    for key in ("text_config", "llm_config"):
        if isinstance(cfg.get(key), dict):
            sub: dict[str, Any] = cfg[key]
            return sub
    return cfg


def with_rope(cfg: dict[str, Any], rope: dict[str, Any] | None, **keys: Any) -> dict[str, Any]:
    """``cfg`` with its text model's rope replaced by ``rope`` (legacy keys: ``rope_theta`` + ``rope_scaling``, the
    model's theta and partial rotary factor kept) and ``keys`` set on the text model."""
    out = copy.deepcopy(cfg)
    text = text_of(out)
    own = text.pop("rope_parameters", None)
    theta = (own or {}).get("rope_theta", text.get("rope_theta", 10000.0))
    prf = (own or {}).get("partial_rotary_factor")
    text["rope_theta"] = theta
    text["rope_scaling"] = rope
    if prf is not None:
        text["partial_rotary_factor"] = prf
    text.update(keys)
    return out


def variants(cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """As shipped, linear, dynamic, YaRN (the card's patch, a window x4, no original, an explicit attention factor
    and betas, DeepSeek's mscale pair), llama3; a partial rotary factor on text models only (a flat multimodal file,
    Qwen2-VL, has transformers build its text sub-config from a fixed set of keys: no such model exists)."""
    window = int(text_of(cfg)["max_position_embeddings"])
    out = {
        "as shipped": cfg,
        "linear x4": with_rope(cfg, {"rope_type": "linear", "factor": 4.0}),
        "dynamic x4": with_rope(cfg, {"rope_type": "dynamic", "factor": 4.0}),
        "yarn x4, card patch": with_rope(cfg, {"rope_type": "yarn", "factor": 4.0,
                                               "original_max_position_embeddings": window}),
        "yarn x4, window x4": with_rope(cfg, {"rope_type": "yarn", "factor": 4.0,
                                              "original_max_position_embeddings": window},
                                        max_position_embeddings=4 * window),
        "yarn x4, no original": with_rope(cfg, {"rope_type": "yarn", "factor": 4.0}),
        "yarn attention_factor": with_rope(cfg, {"rope_type": "yarn", "factor": 4.0, "attention_factor": 1.25,
                                                 "beta_fast": 16.0, "beta_slow": 2.0,
                                                 "original_max_position_embeddings": window},
                                           max_position_embeddings=4 * window),
        "yarn truncate false": with_rope(cfg, {"rope_type": "yarn", "factor": 4.0, "truncate": False,
                                               "original_max_position_embeddings": window},
                                         max_position_embeddings=4 * window),
        "yarn mscale": with_rope(cfg, {"rope_type": "yarn", "factor": 4.0, "mscale": 0.707, "mscale_all_dim": 1.0}),
        "llama3 x8": with_rope(cfg, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": window // 4}),
    }
    if "vision_config" not in cfg:
        out["partial 0.5"] = with_rope(cfg, None, partial_rotary_factor=0.5)
    return out

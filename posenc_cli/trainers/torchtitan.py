"""torchtitan 0.3.0: the ``ComplexRoPE.Config`` posenc renders for a request (``posenc scale --engine torchtitan``),
what it trains with it (``posenc check --trainer``; its RoPE never multiplies cos/sin by YaRN's attention factor),
and how ``posenc audit`` reads a torchtitan TOML back (the rope lives in the model flavour's code).

stdlib at import (``posenc scale`` loads this module only for its format).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from posenc_cli.engines.runs import CANNOT_EXPRESS
from posenc_cli.engines.target import Rendering, Target
from posenc_cli.errors import PosencError
from posenc_cli.rope.attention_factors import yarn_attention_factor, yarn_mscale
from posenc_cli.rope.rope_types import RECORDS, param
from posenc_cli.trainers.settings import Reader, TrainedWith, reject_rope_keys
from posenc_cli.trainers.trained import (
    Refusal,
    Rope,
    Trained,
    one_rotary_runner,
    plain_only,
    request_group,
    rope_type_of,
    rotary_fraction,
    yarn_factor,
)

NAME = "torchtitan"
VERSION = "0.3.0"
#: torchtitan models built with CosSinRoPE (models/qwen3, qwen3_5, gpt_oss); the others use ComplexRoPE
COSSIN_PREFIXES = ("qwen3", "gpt_oss")

def torchtitan_setup(rope: Rope) -> tuple[str, Trained, list[str]]:
    """torchtitan 0.3.0's ``ComplexRoPE.Config`` for ``rope`` and what it computes: its RoPE never multiplies cos/sin by
    YaRN's attention factor (its gpt-oss attention folds it into the softmax scale, which gives the same logits;
    its Llama 3 and Qwen3 decoders leave it out), or a refusal."""
    who = "torchtitan"
    group = rope.params
    plain_only(group, who)
    rope_type = rope_type_of(group)
    fraction = rotary_fraction(rope, group)
    if fraction != 1.0:
        raise Refusal(CANNOT_EXPRESS, f"{who}'s RoPE rotates the whole head (dim); this model rotates {fraction:g} "
                      "of it")
    theta = float(group["rope_theta"])
    head = [f"dim={rope.head_dim}", f"max_seq_len={rope.target}", f"theta={theta!r}"]
    caveats: list[str] = []
    # torchtitan's Qwen3 and gpt-oss use CosSinRoPE (rotate-half, as transformers); Llama 3, DeepSeek-V3 and Kimi use
    # ComplexRoPE (adjacent pairs), the only one with llama scaling
    cls = "CosSinRoPE" if rope_type != "llama3" and rope.model_type.startswith(COSSIN_PREFIXES) else "ComplexRoPE"
    params: dict[str, Any] = {"rope_type": "default", "rope_theta": theta}
    if rope_type == "default":
        text = f"{cls}.Config({', '.join(head)})"
    elif rope_type == "llama3":
        params = {k: group[k] for k in RECORDS["llama3"].keys if k != "rope_theta"} | {"rope_type": "llama3",
                                                                                     "rope_theta": theta}
        text = (f"ComplexRoPE.Config({', '.join(head)}, scaling=\"llama\", scaling_factor={float(group['factor'])!r}, "
                f"low_freq_factor={float(group['low_freq_factor'])!r}, "
                f"high_freq_factor={float(group['high_freq_factor'])!r}, "
                f"original_max_position_embeddings={int(group['original_max_position_embeddings'])})")
    elif rope_type == "yarn":
        factor = yarn_factor(rope, group)
        attention = yarn_attention_factor(group, factor)
        folds = rope.model_type == "gpt_oss" and attention == yarn_mscale(factor)
        params = {"rope_type": "yarn", "rope_theta": theta, "factor": factor,
                  "original_max_position_embeddings": int(group["original_max_position_embeddings"]),
                  "beta_fast": float(param(group, "beta_fast", "yarn")),
                  "beta_slow": float(param(group, "beta_slow", "yarn")),
                  "truncate": bool(param(group, "truncate", "yarn")), "attention_factor": attention if folds else 1.0}
        if folds:
            caveats.append(f"{who}'s RoPE leaves out YaRN's attention factor; its gpt-oss attention folds it into "
                           f"the softmax scale (x{attention:.6g} squared, models/gpt_oss/model.py), as transformers' "
                           "cos/sin do")
        elif attention != 1.0:
            caveats.append(f"{who}'s RoPE never applies YaRN's attention factor, and its Llama3/Qwen3 decoders do not "
                           f"fold it into the softmax scale (only its gpt-oss, DeepSeek-V3 and Kimi models do): they "
                           f"train with cos/sin x1 where transformers uses x{attention:.6g} (logits "
                           f"x{attention ** 2:.4g})")
        text = (f"{cls}.Config({', '.join(head)}, scaling=\"yarn\", rope_factor={factor!r}, "
                f"beta_fast={float(param(group, 'beta_fast', 'yarn'))!r}, "
                f"beta_slow={float(param(group, 'beta_slow', 'yarn'))!r}, "
                f"original_seq_len={int(group['original_max_position_embeddings'])}, "
                f"truncate={bool(param(group, 'truncate', 'yarn'))!r})")
    else:
        raise Refusal(CANNOT_EXPRESS, f"{who} has no {rope_type} RoPE (its ComplexRoPE.Config scaling is none, "
                      "llama or yarn); nearest it can express: posenc scale yarn, or a larger theta (posenc scale ntk)")
    if rope.stage:  # the training length (TrainingConfig.seq_len, which also sizes the RoPE cache it needs)
        text += f"\ntraining.seq_len = {rope.target}"
    caveats.append(f"{who} writes no config.json with a Hugging Face checkpoint: write its rope with posenc scale "
                   "--engine hf-v5")
    layout = "rotate-half"
    if text.startswith("ComplexRoPE"):
        layout = "interleaved"
        caveats.append("ComplexRoPE pairs adjacent dims: convert Hugging Face q/k weights with torchtitan's "
                       "state-dict adapter for the model (it permutes them)")
    return text, Trained(params, layout=layout), caveats


def render(r: Rendering) -> tuple[str, list[str]]:
    """``--engine torchtitan``: the ``ComplexRoPE.Config`` for the request, refused where torchtitan trains another
    attention factor."""
    group = request_group(r, r.fmt)
    rope = Rope.of_request(r.req, group, r.facts)
    text, trained, caveats = torchtitan_setup(rope)
    hf, titan = rope.freqs(), trained.freqs(rope)
    if not math.isclose(hf.attention_factor, titan.attention_factor, rel_tol=1e-9):
        attention = hf.attention_factor
        raise PosencError(
            f"torchtitan's RoPE never applies YaRN's attention factor, and its Llama3/Qwen3 decoders do not fold it "
            f"into the softmax scale (only its gpt-oss, DeepSeek-V3 and Kimi models do): they train with cos/sin "
            f"x{titan.attention_factor:g} where transformers uses x{attention:.6g} (logits x{attention ** 2:.4g}); "
            "nearest it can express: the same YaRN with mscale = mscale_all_dim (attention factor 1)")
    return text, caveats



def _setup_as_shipped(rope: Rope) -> tuple[list[str], Trained, list[str]]:
    text, trained, caveats = torchtitan_setup(rope)
    trained.notes[:0] = caveats
    return [text], trained, caveats


# --- posenc audit: a torchtitan TOML read back --------------------------------------------------------------------

#: torchtitan 0.3 flavours' rope (models/llama3/__init__.py: every Llama 3 flavour; qwen3: plain, theta 1e6)
FLAVOUR_ROPE = {  # framework fact: torchtitan's flavours
    "llama3": ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192, "rope_theta": 500000.0}, 131072),
    "qwen3": ({"rope_type": "default", "rope_theta": 1000000.0}, None),
}


def _read_toml(data: Any, path: str, exported: Mapping[str, Any] | None,
               base: Mapping[str, Any] | None) -> TrainedWith:
    """The rope and window a torchtitan TOML trained with: its model flavour's."""
    model = data.get("model")
    if not isinstance(model, Mapping) or "name" not in model:
        raise PosencError(f"{path}: no [model] name: cannot tell which torchtitan model trained")
    name = str(model["name"])
    if name not in FLAVOUR_ROPE:
        raise PosencError(f"{path}: torchtitan model {name!r} is not audited yet; known: {', '.join(FLAVOUR_ROPE)}")
    reject_rope_keys(model, {"name", "flavor"}, path, "torchtitan sets RoPE in the model flavour's code, not the TOML")
    rope, window = FLAVOUR_ROPE[name]
    return TrainedWith(NAME, f"torchtitan {path} ({name} {model.get('flavor', '')})".replace(" )", ")"),
                       dict(rope), window)


TARGET = Target(
    NAME, "torchtitan", "torchtitan", VERSION, render, one_rotary_runner(NAME, VERSION, _setup_as_shipped),
    targets="torchtitan {version}", prints="`ComplexRoPE.Config`", proven_by="its RoPE class",
    cannot_express="YaRN's attention factor on its Llama/Qwen decoders; dynamic, longrope",
    reads_back=Reader(NAME, "torchtitan", "toml", _read_toml))

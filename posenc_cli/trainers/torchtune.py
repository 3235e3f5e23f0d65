"""torchtune 0.6.1: the model builder fields posenc renders for a request (``posenc scale --engine torchtune``) and
what its RoPE classes train with them (``RotaryPositionalEmbeddings``; ``Llama3ScaledRoPE`` with its fixed 1/4/8192),
for ``posenc check --trainer`` too.

stdlib at import (``posenc scale`` loads this module only for its format).
"""

from __future__ import annotations

from posenc_cli.engines.runs import CANNOT_EXPRESS
from posenc_cli.engines.target import Rendering, Target
from posenc_cli.trainers.trained import (
    Refusal,
    Rope,
    Trained,
    fixed_llama3,
    flag_number,
    llama3_fixed,
    one_rotary_runner,
    plain_only,
    request_group,
    rope_type_of,
    rotary_fraction,
)

NAME = "torchtune"
VERSION = "0.6.1"

def torchtune_setup(rope: Rope) -> tuple[str, Trained, list[str]]:
    """torchtune 0.6.1's builder fields for ``rope`` and what its RoPE classes compute with them
    (``RotaryPositionalEmbeddings``; ``Llama3ScaledRoPE`` with 1/4/8192 whatever the model says), or a refusal."""
    who = "torchtune"
    group = rope.params
    plain_only(group, who)
    rope_type = rope_type_of(group)
    fraction = rotary_fraction(rope, group)
    if fraction != 1.0:
        raise Refusal(CANNOT_EXPRESS, f"{who}'s model builders rotate the whole head; this model rotates "
                      f"{fraction:g} of it")
    theta = float(group["rope_theta"])
    lines = ["model:"]
    if rope_type == "default":
        lines += [f"  rope_base: {flag_number(theta)}"]
        params = {"rope_type": "default", "rope_theta": theta}
    elif rope_type == "llama3":
        lines += [f"  rope_base: {flag_number(theta)}", f"  scale_factor: {flag_number(float(group['factor']))}"]
        params = fixed_llama3({"rope_type": "llama3", "rope_theta": theta, "factor": float(group["factor"])})
    else:
        raise Refusal(CANNOT_EXPRESS, f"{who} has no {rope_type} RoPE (only plain RoPE and llama3 at 1/4/8192; RFC "
                      "meta-pytorch/torchtune #1183); nearest it can express: a larger rope_base "
                      "(posenc scale ntk)")
    lines.append(f"  max_seq_len: {rope.target}")
    if rope.stage:  # the training length: torchtune's tokenizer builders cut (and pack) sequences at max_seq_len
        lines += ["tokenizer:", f"  max_seq_len: {rope.target}"]
    caveats = [f"{who} computes its RoPE cache for max_seq_len positions only (longer inputs fail), and its "
               "checkpointer copies the source config.json on save: write the exported rope with posenc scale "
               "--engine hf-v5"]
    caveats.append("these are arguments of torchtune's component builders (llama3_1 and llama3_2 take scale_factor; "
                   "the named builders such as llama3_1_8b fix them): pass them with the model's sizes")
    return "\n".join(lines), Trained(params, layout="interleaved"), caveats


def render(r: Rendering) -> tuple[str, list[str]]:
    """``--engine torchtune``: the builder fields for the request, or a refusal."""
    group = request_group(r, r.fmt)
    rope = Rope.of_request(r.req, group, r.facts)
    text, _, caveats = torchtune_setup(rope)
    if rope_type_of(group) == "llama3":
        llama3_fixed(rope, group, "torchtune")
    return text, caveats



def _setup_as_shipped(rope: Rope) -> tuple[list[str], Trained, list[str]]:
    text, trained, caveats = torchtune_setup(rope)
    if rope.params.get("rope_type") == "llama3" and fixed_llama3(rope.params) != rope.params:
        trained.notes.append("torchtune's Llama3ScaledRoPE takes only scale_factor: low_freq_factor/high_freq_factor/"
                             "original length are 1/4/8192")
    return text.splitlines(), trained, caveats


TARGET = Target(
    NAME, "torchtune", "torchtune", VERSION, render, one_rotary_runner(NAME, VERSION, _setup_as_shipped),
    targets="torchtune {version}", prints="model builder fields", proven_by="its RoPE classes",
    cannot_express="YaRN (no yarn RoPE); llama3 band factors or original length other than 1/4/8192; dynamic, "
                   "longrope")

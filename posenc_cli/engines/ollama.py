"""Ollama: serves a GGUF through llama.cpp with no rope flag, so a longer context has to be written into the GGUF.

What Ollama does with positions (its Modelfile and server): the model is ``FROM`` a GGUF; ``PARAMETER num_ctx N``
is the only length it takes, and it lowers ``num_ctx`` to the GGUF's ``context_length``; no ``--rope-scaling`` or
other rope flag reaches llama.cpp. So what it computes is llama.cpp on the GGUF's own rope metadata and tensors
(:func:`posenc_cli.engines.llamacpp.run`, the model posenc proves against llama-cpp-python on GGUFs made by llama.cpp's
converter and by posenc's writer), and the longest context it accepts is that ``context_length``.

For a config.json, that GGUF is the one llama.cpp's ``convert_hf_to_gguf.py`` (or ``posenc scale ... --config
MODEL.gguf -o NEW.gguf``) makes from it. Ollama's OWN converter (``ollama create`` from a safetensors folder) is
another matter: :mod:`posenc_cli.models.ollama_convert` says what it drops, and :func:`run` warns with it.

``--engine ollama`` prints a Modelfile (comments carry the ``ollama create`` / ``ollama run`` commands): ``FROM`` the
GGUF written with ``-o NEW.gguf`` (``posenc scale METHOD --config MODEL.gguf --target N -o NEW.gguf --engine
ollama``); without ``-o`` it names ``NEW.gguf`` and says how to write it first (posenc never prints a Modelfile that
would serve the old rope at the new length). Ollama itself is not run here (a Go server); the numbers are llama.cpp's.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from posenc_cli.engines import llamacpp
from posenc_cli.engines.runs import WILL_NOT_START, EngineRun
from posenc_cli.engines.target import Rendering, Target
from posenc_cli.models.ollama_convert import FIX, ollama_converter_drops
from posenc_cli.rope.scaling import rope_parameters

if TYPE_CHECKING:
    from posenc_cli.models.model_positions import ModelPositions

NAME = "ollama"
VERSION = f"via {llamacpp.VERSION}"  # the llama.cpp its numbers are proven against; Ollama vendors its own llama.cpp
CAPPED = "Ollama lowers num_ctx to the GGUF's context_length"


def gguf_steps(r: Rendering, tool: str) -> tuple[str, list[str]]:
    """(the GGUF to load, comment lines on how it comes to carry the scaling) for ``--engine ollama/lmstudio``."""
    if r.gguf and r.facts is None:  # the GGUF -o NEW.gguf wrote (scale.scaled renders it without the old facts)
        return r.model, []
    if r.gguf:
        return "NEW.gguf", [f"{tool} passes no rope flag: write NEW.gguf first, with the scaling in it:",
                            f"  posenc scale {_method(r)} --config {r.model} --target {r.req.target} -o NEW.gguf"]
    return "NEW.gguf", [f"{tool} passes no rope flag: NEW.gguf must carry the scaling. Patch config.json "
                        "(posenc scale ... --engine hf -o DIR/config.json) and convert DIR with llama.cpp's "
                        "convert_hf_to_gguf.py --outfile NEW.gguf",
                        "(or write it from the model's GGUF: posenc scale ... --config MODEL.gguf -o NEW.gguf)"]


def _method(r: Rendering) -> str:
    return {"default": "ntk"}.get(rope_parameters(r.req).get("rope_type", "default"), r.req.method)


def _name(path: str) -> str:
    stem = os.path.basename(path).removesuffix(".gguf")
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in stem).lower() or "model"


def render(r: Rendering) -> tuple[str, list[str]]:
    """``--engine ollama``: a Modelfile (its comments carry the commands)."""
    gguf, steps = gguf_steps(r, "Ollama")
    name = _name(gguf)
    lines = [f"# {line}" for line in steps]
    lines += ["# save as Modelfile beside the GGUF, then:", f"#   ollama create {name} -f Modelfile",
              f"#   ollama run {name}", f"FROM ./{os.path.basename(gguf)}" if os.path.dirname(gguf) in ("", ".")
              else f"FROM {gguf}", f"PARAMETER num_ctx {r.req.target}"]
    caveats: list[str] = []
    if not r.gguf and r.facts is not None:
        model_type = r.facts.model_type if r.facts is not None else ""
        caveats += [f"{drop}: {FIX}" for drop in ollama_converter_drops(
            {"rope_scaling": rope_parameters(r.req), "max_position_embeddings": r.req.target}, model_type or "")]
    return "\n".join(lines), caveats


def llamacpp_base(model: ModelPositions, cfg: dict[str, Any], served: int, seq_len: int | None,
                  name: str) -> EngineRun:
    """:func:`posenc_cli.engines.llamacpp.run` for an engine serving a GGUF with no flag, or a refusal: llama.cpp's
    own (the model's reading refuses llama.cpp, or no llama.cpp rope exists for it), under ``name``."""
    reading = model.engine
    why = reading.refusal.get(llamacpp.NAME) if reading is not None else None
    if why is None:
        try:
            return llamacpp.run(model, cfg, served, seq_len)
        except llamacpp.NoEquivalent as exc:
            why = f"not modelled: {exc} (a GGUF of this model has no rope llama.cpp runs)"
    return EngineRun(name, VERSION, served, [], [], refusal=why)


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    """llama.cpp on the GGUF of this model with no rope flag, at ``num_ctx`` = ``max_model_len`` lowered to the GGUF's
    ``context_length`` (the model's ``max_position_embeddings``)."""
    from posenc_cli.models.config_keys import text_config

    accepts = model.max_position_embeddings
    served = min(max_model_len, accepts) if accepts else max_model_len
    base = llamacpp_base(model, cfg, served, seq_len, NAME)
    warnings = [w for w in base.warnings if "applies on top of these flags" not in w and "--" not in w]
    if accepts and max_model_len > accepts and base.refusal is None:
        # Ollama starts, but serves fewer tokens than asked, silently: not the run that was asked for
        return EngineRun(NAME, VERSION, max_model_len, [], ["ollama", "run", "NAME"], accepts=accepts, refusal=(
            f"{WILL_NOT_START}: {CAPPED} ({accepts:,}), so num_ctx {max_model_len:,} serves {accepts:,} tokens; "
            "write the scaling into the GGUF (posenc scale ... --config MODEL.gguf "
            "-o NEW.gguf --engine ollama)"))
    text, text_type, _ = text_config(cfg)
    warnings += [f"if the GGUF comes from `ollama create` on the safetensors folder: {drop}; {FIX}"
                 for drop in ollama_converter_drops(text, text_type)]
    return EngineRun(NAME, VERSION, max_model_len, base.groups, ["ollama", "run", "NAME"], accepts=accepts or None,
                     needs=[f"Modelfile: PARAMETER num_ctx {max_model_len}"], refusal=base.refusal,
                     warnings=warnings)


TARGET = Target(
    NAME, "Ollama", "ollama", VERSION, render, run,
    targets="Ollama serving a GGUF through llama.cpp (numbers: llama.cpp {version})",
    proven_by="llama.cpp (llama-cpp-python) with no rope flag on GGUFs posenc writes from converter-made GGUFs",
    cannot_express="any rope flag (the scaling must be in the GGUF: `scale --config MODEL.gguf -o NEW.gguf`); "
                   "num_ctx above the GGUF's context_length (lowered to it); what llama.cpp cannot (dynamic NTK, "
                   "YaRN `truncate: false`); its own safetensors converter drops YaRN's original length, a "
                   "`rope_type`-only YaRN dict and `rope_parameters` (llama, qwen2)")

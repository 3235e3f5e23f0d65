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
import shlex
from typing import TYPE_CHECKING, Any

from posenc_cli.engines import llamacpp
from posenc_cli.engines.runs import SERVES_LESS, EngineRun
from posenc_cli.engines.target import Rendering, Target
from posenc_cli.models.ollama_convert import FIX, ollama_converter_drops
from posenc_cli.rope.scaling import rope_parameters
from posenc_cli.units import format_length

if TYPE_CHECKING:
    from posenc_cli.models.model_positions import ModelPositions

NAME = "ollama"
VERSION = f"via {llamacpp.VERSION}"  # the llama.cpp its numbers are proven against; Ollama vendors its own llama.cpp
CAPPED = "Ollama lowers num_ctx to the GGUF's context_length"
#: the GGUF a check's Modelfile names until the check names the model (the llama.cpp run's placeholder too)
MODEL_GGUF = "MODEL.gguf"


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
    stem = os.path.basename(path.rstrip("/")).removesuffix(".gguf")
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in stem).lower() or "model"


def from_argument(gguf: str) -> str:
    """What a Modelfile saved beside ``gguf`` writes after ``FROM`` to name it. Ollama resolves a relative ``FROM``
    against the Modelfile's folder (``parser.expandPathImpl``: an absolute path or ``~`` stands as given, anything
    else is joined to that folder), so a relative path becomes ``./`` and the file's name; a value with a space is
    quoted (its parser ends an unquoted value at the first space)."""
    named = gguf if os.path.isabs(gguf) or gguf.startswith(("~", "\\")) else f"./{os.path.basename(gguf)}"
    return f'"{named}"' if any(c.isspace() for c in named) else named


#: what a Modelfile's ``FROM`` names when the model has no GGUF here (a config.json, a Hub id): its Ollama name
NAME_PLACEHOLDER = "NAME"
#: how to find the GGUF of a model Ollama pulled (its Modelfile's FROM line is the blob's path)
FIND_GGUF = f"a pulled model's GGUF: `ollama show --modelfile {NAME_PLACEHOLDER}` prints it (its FROM line)"


def modelfile(source: str, num_ctx: int, *, gguf: bool, steps: list[str] | tuple[str, ...] = (),
              find_gguf: bool = False, tagged: bool = False) -> str:
    """A Modelfile serving ``num_ctx`` tokens: ``FROM`` the GGUF ``source`` (``gguf``: saved beside it,
    :func:`from_argument`) or the model Ollama knows as ``source``, then ``PARAMETER num_ctx``. Every other line is
    a ``#`` comment (``steps`` first, the commands, the server-wide ``OLLAMA_CONTEXT_LENGTH``, and with
    ``find_gguf`` how to find a pulled model's GGUF), so the whole text is a valid Modelfile. The model it creates is
    named for the source, with the length when ``tagged`` or the source is not a GGUF (a GGUF posenc wrote is named
    for its length already)."""
    stem = "model" if source == NAME_PLACEHOLDER else _name(source)
    name = stem if gguf and not tagged else f"{stem}-{format_length(num_ctx)}"
    lines = [f"# {line}" for line in steps]
    lines += ["# save as Modelfile beside the GGUF, then:" if gguf else "# save as Modelfile, then:",
              f"#   ollama create {name} -f Modelfile", f"#   ollama run {name}",
              f"# (or every model's default context, server-wide: OLLAMA_CONTEXT_LENGTH={num_ctx} ollama serve)"]
    lines += [f"# {FIND_GGUF}"] if find_gguf else []
    lines += [f"FROM {from_argument(source) if gguf else source}", f"PARAMETER num_ctx {num_ctx}"]
    return "\n".join(lines)


def render(r: Rendering) -> tuple[str, list[str]]:
    """``--engine ollama``: a Modelfile (its comments carry the commands)."""
    gguf, steps = gguf_steps(r, "Ollama")
    text = modelfile(gguf, r.req.target, gguf=True, steps=steps, find_gguf=bool(steps) and not r.gguf)
    caveats: list[str] = []
    if not r.gguf and r.facts is not None:
        model_type = r.facts.model_type if r.facts is not None else ""
        caveats += [f"{drop}: {FIX}" for drop in ollama_converter_drops(
            {"rope_scaling": rope_parameters(r.req), "max_position_embeddings": r.req.target}, model_type or "")]
    return text, caveats


def command_line(text: str) -> str:
    """One shell line that writes the Modelfile ``text`` (its ``FROM`` and ``PARAMETER`` lines), creates the model
    and runs it: ``posenc check``'s run line, which sets ``num_ctx`` (a bare ``ollama run`` keeps Ollama's default)."""
    kept = [line for line in text.splitlines() if line and not line.startswith("#")]
    name = next((line.split()[-1] for line in text.splitlines() if line.startswith("#   ollama run ")), "model")
    return (f"printf {shlex.quote(chr(10).join(kept) + chr(10))} > Modelfile && ollama create {name} -f Modelfile "
            f"&& ollama run {name}").replace(chr(10), "\\n")


def serve(r: Rendering, run_: EngineRun) -> str:
    """The model as it is (its rope unchanged) served at ``run_.max_model_len``: its Modelfile, ``FROM`` the GGUF
    (``r.gguf``), the Ollama name given with ``--model`` (``r.named``), else ``NAME`` (a Hub id or a folder is not a
    name Ollama serves)."""
    source = r.model if r.gguf or r.named else NAME_PLACEHOLDER
    return modelfile(source, run_.max_model_len, gguf=r.gguf, find_gguf=not r.gguf, tagged=True)


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
    ``context_length`` (the model's ``max_position_embeddings``); its Modelfile ``FROM MODEL.gguf`` (the checked
    GGUF's path, once :func:`posenc_cli.frameworks.check.check` names it). Past ``context_length`` Ollama starts but
    serves only the GGUF's window: the verdict :data:`SERVES_LESS`."""
    from posenc_cli.models.config_keys import text_config

    accepts = model.max_position_embeddings
    served = min(max_model_len, accepts) if accepts else max_model_len
    base = llamacpp_base(model, cfg, served, seq_len, NAME)
    warnings = [w for w in base.warnings if "applies on top of these flags" not in w and "--" not in w]
    if accepts and max_model_len > accepts and base.refusal is None:
        # Ollama starts, but serves fewer tokens than asked, silently: not the run that was asked for
        return EngineRun(NAME, VERSION, max_model_len, [], ["ollama", "run", "NAME"], accepts=accepts, refusal=(
            f"{SERVES_LESS}: Ollama serves only the GGUF's window ({accepts:,} tokens): {CAPPED}, so num_ctx "
            f"{max_model_len:,} serves {accepts:,} and a longer prompt is cut; write the scaling into the GGUF "
            "(posenc scale ... --config MODEL.gguf -o NEW.gguf --engine ollama)"))
    if not model.from_gguf:  # a GGUF given is the file Ollama serves: no converter made it from this config
        text, text_type, _ = text_config(cfg)
        warnings += [f"if the GGUF comes from `ollama create` on the safetensors folder: {drop}; {FIX}"
                     for drop in ollama_converter_drops(text, text_type)]
    return EngineRun(NAME, VERSION, max_model_len, base.groups, ["ollama", "run", "NAME"], accepts=accepts or None,
                     needs=[f"Modelfile: PARAMETER num_ctx {max_model_len}"], refusal=base.refusal,
                     warnings=warnings, modelfile=modelfile(MODEL_GGUF, max_model_len, gguf=True,
                                                            find_gguf=not model.from_gguf))


TARGET = Target(
    NAME, "Ollama", "ollama", VERSION, render, run, serve=serve,
    targets="Ollama serving a GGUF through llama.cpp (numbers: llama.cpp {version})",
    proven_by="llama.cpp (llama-cpp-python) with no rope flag on GGUFs posenc writes from converter-made GGUFs",
    cannot_express="any rope flag (the scaling must be in the GGUF: `scale --config MODEL.gguf -o NEW.gguf`); "
                   "num_ctx above the GGUF's context_length (lowered to it); what llama.cpp cannot (dynamic NTK, "
                   "YaRN `truncate: false`); its own safetensors converter drops YaRN's original length, a "
                   "`rope_type`-only YaRN dict and `rope_parameters` (llama, qwen2)")

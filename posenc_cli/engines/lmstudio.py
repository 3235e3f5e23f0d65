"""LM Studio: loads a GGUF into its llama.cpp runtime with the rope the file carries; the one length set is the
context length chosen when the model is loaded. So, as for Ollama (:mod:`posenc_cli.engines.ollama`), a longer
context is written into the GGUF (``posenc scale METHOD --config MODEL.gguf --target N -o NEW.gguf``) and loaded
with that context length; what it computes is llama.cpp on the GGUF's own rope
(:func:`posenc_cli.engines.llamacpp.run`).

``--engine lmstudio`` prints the steps: ``lms import NEW.gguf`` (LM Studio's CLI, ``lms``: "import a model file")
and the context length to set when loading (the load dialog's context length; ``lms load --help`` names the option
of the installed ``lms``, which posenc does not guess). LM Studio itself is not run here; the numbers are llama.cpp's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from posenc_cli.engines import llamacpp
from posenc_cli.engines.ollama import gguf_steps, llamacpp_base
from posenc_cli.engines.runs import EngineRun
from posenc_cli.engines.target import Rendering, Target

if TYPE_CHECKING:
    from posenc_cli.models.model_positions import ModelPositions

NAME = "lmstudio"
VERSION = f"via {llamacpp.VERSION}"  # the llama.cpp its numbers are proven against


def render(r: Rendering) -> tuple[str, list[str]]:
    """``--engine lmstudio``: the GGUF to import and the context length to load it with."""
    gguf, steps = gguf_steps(r, "LM Studio")
    lines = [f"# {line}" for line in steps]
    lines += [f"lms import {gguf}", _load_with(r.req.target)]
    return "\n".join(lines), []


def serve(r: Rendering, run_: EngineRun) -> str:
    """The model as it is (its rope unchanged) loaded with context length ``run_.max_model_len``: its GGUF imported
    first (``r.gguf``), else the model as LM Studio lists it (``r.model``)."""
    lines = [f"lms import {r.model}"] if r.gguf else []
    return "\n".join([*lines, f"lms load {'MODEL' if r.gguf else r.model}", _load_with(run_.max_model_len)])


def _load_with(length: int) -> str:
    return (f"# load it with context length {length} (the load dialog's context length, or the context-length "
            "option `lms load --help` lists)")


def run(model: ModelPositions, cfg: dict[str, Any], max_model_len: int, seq_len: int | None = None) -> EngineRun:
    """llama.cpp on the model's GGUF with no rope flag at ``max_model_len`` (LM Studio's context length)."""
    base = llamacpp_base(model, cfg, max_model_len, seq_len, NAME)
    warnings = [w for w in base.warnings if "applies on top of these flags" not in w and "--" not in w]
    return EngineRun(NAME, VERSION, max_model_len, base.groups, ["lms", "load", "MODEL"],
                     needs=[f"context length {max_model_len}"], refusal=base.refusal, warnings=warnings)


TARGET = Target(
    NAME, "LM Studio", "lmstudio", VERSION, render, run, serve=serve,
    targets="LM Studio's llama.cpp runtime (numbers: llama.cpp {version})",
    proven_by="llama.cpp (llama-cpp-python) with no rope flag on GGUFs posenc writes from converter-made GGUFs",
    cannot_express="any rope flag (the scaling must be in the GGUF: `scale --config MODEL.gguf -o NEW.gguf`); what "
                   "llama.cpp cannot (dynamic NTK, YaRN `truncate: false`)")

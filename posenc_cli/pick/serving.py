"""``posenc pick --engine E``: each engine's serving answer for the plan, as ``posenc scale --engine E`` gives it.

Each entry is the plan's ``posenc scale`` command with ``--engine E`` and what that command prints: the text, its
caveats and the verdict beside them (scale's own core, :func:`posenc_cli.scale.scaled.scale`, run on the command's
options), so the plan and the command can never disagree. A plan with no extension (the target fits the model's
window) gets the command that serves the model as it is at the target; a new model with no extension, its plain
rope. Nothing is written: on a GGUF, an engine that serves a GGUF is answered without ``-o NEW.gguf`` (its text says
how the file is written), while the command listed keeps it.
"""

from __future__ import annotations

import shlex
from typing import Any

from posenc_cli.errors import PosencError
from posenc_cli.frameworks.registry import ENGINE, formats
from posenc_cli.pick.picker import KEEP, NEW_GGUF, PickResult, inputs_config, scale_argv
from posenc_cli.scale.options import ScaleOptions
from posenc_cli.scale.scaled import GGUF_FORMATS, ScaleAsk, scale
from posenc_cli.units import format_length

#: ``posenc scale`` flags a plan's command carries -> the :class:`ScaleOptions` field each sets
_OPTIONS = {"--target": "target", "--original-max": "original_max", "--factor": "factor",
            "--partial-rotary-factor": "partial_rotary_factor"}


def check_engines(names: list[str]) -> list[str]:
    """``names`` if each is an engine format (``scale --engine``'s), else the one-line error (exit 2)."""
    known = formats(ENGINE)
    for name in names:
        if name not in known:
            raise PosencError(f"{{engine}} {name!r} is not known; use one of: {', '.join(known)}", "engine")
    return names


def serving_argv(result: PickResult) -> list[str]:
    """The plan's ``posenc scale`` command: the extension's, else the one serving the model as it is at the target
    (its own scaling family names the method; the rope stays unchanged), else a new model's plain rope."""
    a = result.answer
    if a["extension"] is not None:
        return shlex.split(a["extension"]["command"])
    target = format_length(int(a["inputs"]["ctx"]))
    if result.source is not None:
        method = KEEP.get(str(a["inputs"]["model_rope_type"]), "ntk")
        return ["posenc", "scale", method, "--config", inputs_config(result.source), "--target", target]
    hyper = a["hyperparameters"]
    theta = hyper.get("theta") or a["inputs"]["theta"] or 10000.0
    return scale_argv("ntk", ["--original-max", target, "--factor", "1", "--theta", f"{float(theta):g}"], None,
                      int(a["inputs"]["head_dim"] or 128), result.partial_rotary_factor)


def engine_answers(result: PickResult, engines: list[str]) -> list[dict[str, Any]]:
    """Each engine's serving answer for the plan: ``engine``, ``command`` (``posenc scale ... --engine E``),
    ``text``, ``caveats``, ``verdict``, ``refusal`` (the command's one-line error; None when it answers) and
    ``memory`` (Ollama on a model: num_ctx with its caches' size; else None)."""
    if result.source is not None and result.source.kind == "stdin":
        raise PosencError("{engine} runs the plan's posenc scale command, which reads the model again: give the "
                          "config as a file, not - (stdin)", "engine")
    argv = serving_argv(result)
    out = []
    for engine in check_engines(engines):
        writes = argv[-2:] == ["-o", NEW_GGUF]
        command = argv if engine in GGUF_FORMATS or not writes else argv[:-2]
        entry: dict[str, Any] = {"engine": engine, "command": shlex.join([*command, "--engine", engine]),
                                 "text": None, "caveats": [], "verdict": None, "refusal": None}
        try:
            scaled = _scale(argv[:-2] if writes else argv, engine)
        except PosencError as exc:
            if not writes or engine not in GGUF_FORMATS:  # with -o the file carries the rope: nothing refused
                entry["refusal"] = str(exc)
        else:
            entry.update(text=scaled.text, caveats=scaled.caveats, verdict=scaled.verdict)
        entry["memory"] = _memory(result, engine)
        out.append(entry)
    return out


def _memory(result: PickResult, engine: str) -> str | None:
    """Ollama's answer on a model gives num_ctx with its memory (its caches at the target, on its defaults)."""
    if engine != "ollama" or result.source is None:
        return None
    from posenc_cli.memory.checked import served_memory

    served = served_memory("ollama", result.source, int(result.answer["inputs"]["ctx"]))
    return None if served is None else str(served["line"])


def _scale(argv: list[str], engine: str) -> Any:
    """``posenc scale``'s core on a plan's command (``posenc scale METHOD FLAGS``) with ``--engine engine``."""
    method, flags = argv[2], [f for f in argv[3:] if f != "--fine-tuned"]
    options, given = ScaleOptions(), dict(zip(flags[::2], flags[1::2], strict=True))
    for flag, value in given.items():
        if flag in _OPTIONS:
            field = _OPTIONS[flag]
            setattr(options, field, float(value) if field in ("factor", "partial_rotary_factor") else value)
    theta = float(given["--theta"]) if "--theta" in given else None
    head_dim = int(given["--head-dim"]) if "--head-dim" in given else None
    return scale(method, options, ScaleAsk(config=given.get("--config"), engine=engine), theta=theta,
                 head_dim=head_dim, fine_tuned="--fine-tuned" in argv)

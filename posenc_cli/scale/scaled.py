"""``posenc scale``'s core: a request (:mod:`.options`) rendered for one engine's format through the registry, on a
model or bare, or written into the model's config; with the engine's verdict on it.

No numpy at import (the engine renderings keep it inside the functions that compute tables); the model reader
loads only when a model is given, so a bare ``posenc scale`` never loads it (``tests/test_imports.py``): those are
this module's deliberate function-level imports.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

from posenc_cli.engines import hf
from posenc_cli.engines.target import Rendering
from posenc_cli.errors import PosencError
from posenc_cli.frameworks.registry import formats, render, render_request, training_formats
from posenc_cli.rope import scaling
from posenc_cli.rope.scaling import ScaleRequest
from posenc_cli.scale.options import ScaleOptions, scale_request
from posenc_cli.units import format_length, parse_length

if TYPE_CHECKING:
    from posenc_cli.engines.runs import EngineRun
    from posenc_cli.frameworks.check import Judgement
    from posenc_cli.models.facts import ModelFacts
    from posenc_cli.models.sources import Source


# NamedTuples, not frozen dataclasses: cheaper to define, and posenc scale's start-up counts
class ScaleAsk(NamedTuple):
    """What ``posenc scale`` was asked beyond the scaling itself: the model, the format, where the result goes."""

    config: str | None = None  # a model: config.json, folder, Hub id or GGUF
    engine: str | None = None  # one of the registry's formats; None: the model file's own format, else hf
    seq_len: str | None = None  # a training run's length, up to the target (training formats only)
    output: str | None = None  # write the patched config here
    in_place: bool = False  # rewrite the config itself
    model: str = "MODEL"  # the model name the engine command lines give


class Scaled(NamedTuple):
    """A request rendered: ``text`` for stdout (or for ``destination``), and the stderr lines in their order."""

    request: ScaleRequest
    text: str
    notes: list[str]  # printed first
    caveats: list[str]  # printed before the text on stdout, not before a write
    destination: str | None  # the file the patched config goes to; None: stdout
    verdict: str | None = None  # an engine asked for: that engine's verdict on the request (posenc check's line)
    written: str | None = None  # the GGUF written (``-o NEW.gguf`` on a GGUF model): already on disk


class _Model(NamedTuple):
    """A model read for ``--config``: its source and facts, and the file a write patches."""

    source: Source
    facts: ModelFacts
    path: str


def scale(method: str, options: ScaleOptions, ask: ScaleAsk, *, theta: float | None = None,
          head_dim: int | None = None, fine_tuned: bool = False) -> Scaled:
    """``posenc scale``: the request ``method`` and ``options`` make (on the model of ``ask.config``, if any),
    rendered for ``ask.engine``; or, with ``ask.output``/``ask.in_place``, the model's config patched with it.

    The result is built before any note, so a rejected request or format ends as one error and no notes.
    """
    _check_ask(ask)
    model = _read_model(ask) if ask.config is not None else None
    facts = model.facts if model else None
    fmt = ask.engine or hf.own_format(facts)
    notes: list[str] = []
    inside = _inside_window(options, model, ask)
    req = scale_request(method, options if inside is None else replace(options, target=str(inside[1])), theta=theta,
                        head_dim=head_dim, fine_tuned=fine_tuned, model=facts, notes=notes)
    if model is not None and inside is not None and req.unchanged:
        return _served_as_is(req, fmt, model, inside[0], ask, notes)
    if ask.seq_len is not None:
        if fmt not in training_formats():
            raise PosencError(f"{{seq_len}} sets the length a training run trains at; {{engine}} {fmt} serves the "
                              f"whole target (use it with one of: {', '.join(training_formats())})",
                              "seq_len", "engine")
        req = scaling.at_length(req, parse_length(ask.seq_len, name="--seq-len"))
    destination = written = None
    caveats: list[str] = []
    if model is not None and model.source.kind == "gguf" and ask.output:
        written, text, caveats = _written_gguf(model, req, ask, notes)
    elif model is not None and (ask.output or ask.in_place) and not _prints_config(fmt):
        if fmt not in hf.FORMATS:
            writers = [f for f in formats() if f in hf.FORMATS or _prints_config(f)]
            raise PosencError(f"{{engine}} {fmt} serves flags, not a config: with a config.json, {{output}} and "
                              f"{{in_place}} write the config {', '.join(writers)} read (or give the model's GGUF: "
                              "--config MODEL.gguf -o NEW.gguf)", "engine", "output", "in_place")
        text = _patched(model, req, fmt)
        destination = model.path if ask.in_place else ask.output
    elif model is not None:
        text, caveats = render_on_model(req, fmt, model.source, model.facts, ask.model)
    else:
        text, caveats = render_request(req, fmt, model=ask.model)
    printed = _printed_config(text, req, model) if ask.engine is not None and _prints_config(fmt) else None
    if printed is not None and model is not None and (ask.output or ask.in_place):
        from posenc_cli.models.sources import written_config  # loaded with the reader (see _read_model)

        text = written_config(printed, f"the config {fmt} reads")
        destination = model.path if ask.in_place else ask.output
    if model is not None:
        notes += _ollama_memory(fmt, model.source, req.target)
    given = {"theta": theta, "head_dim": head_dim}
    verdict = None
    if ask.engine is not None and (destination is None or printed is not None):
        verdict = _verdict(req, fmt, model, printed)
        if destination is not None:
            verdict = verdict.replace("on the config printed", "on the config written", 1)
    return Scaled(req, text, _notes(req, fmt, facts, notes, given), caveats, destination, verdict, written)


def _inside_window(options: ScaleOptions, model: _Model | None, ask: ScaleAsk) -> tuple[int, int] | None:
    """(the length asked, the model's window) when ``--engine`` asks a model to serve a target inside its window
    (the rope stays as it is: only the serving length is set); None otherwise (a request, or a refusal)."""
    if (model is None or ask.engine is None or ask.engine in hf.FORMATS or ask.engine in training_formats()
            or ask.output or ask.in_place or ask.seq_len is not None or options.factor is not None
            or options.target is None):
        return None
    window = model.facts.native
    asked = parse_length(options.target, name="--target")
    return (asked, window) if window is not None and asked <= window else None


def _served_as_is(req: ScaleRequest, fmt: str, model: _Model, length: int, ask: ScaleAsk,
                  notes: list[str]) -> Scaled:
    """A target inside the model's window, for an engine: the model as it is (``req``, its own rope) served at
    ``length``, printed as the engine's run of it (:attr:`~posenc_cli.engines.target.Target.serve`, else the run's
    command line), with that run's verdict: what is printed is what was judged."""
    from posenc_cli.models.sources import served_name

    src = model.source
    name = served_name(src) if ask.model == "MODEL" else ask.model
    judged = _judge_source(src, fmt, length, name)
    run = judged.verdict.run if judged.verdict is not None else None
    window = model.facts.native or length
    said = [n for n in notes if "its rope settings are returned unchanged" not in n]
    where = (f"already serves {format_length(window)}" if length == window else
             f"serves {format_length(window)}, and {format_length(length)} is inside that window")
    said.append(f"note: {src.label} {where}: its rope stays as it is, only the serving length is set")
    said += _ollama_memory(fmt, src, length)
    rendering = Rendering(replace(req, target=length), fmt, name, gguf=src.kind == "gguf", named=ask.model != "MODEL")
    text = _serving_text(rendering, run)
    return Scaled(req, text, said, run.warnings if run else [], None, f"on the model as it is, {judged.line()}")


def _ollama_memory(fmt: str, src: Source, num_ctx: int) -> list[str]:
    """Every Ollama answer on a model gives num_ctx with its memory: the note, on Ollama's defaults."""
    if fmt != "ollama":
        return []
    from posenc_cli.memory.checked import served_memory

    served = served_memory("ollama", src, num_ctx)
    return [] if served is None else [f"note: {served['line']}"]


def _judge_source(src: Source, fmt: str, length: int, name: str) -> Judgement:
    """The verdict of the engine that owns ``fmt`` on the model of ``src`` as it is, served at ``length`` under
    ``name`` (the name its command lines give it)."""
    from posenc_cli.frameworks.check import judge
    from posenc_cli.frameworks.registry import format_owner
    from posenc_cli.models.sources import describe_source

    return judge(describe_source(src), src.config, format_owner(fmt), length, model_name=name)


def _serving_text(r: Rendering, run: EngineRun | None) -> str:
    """The engine's text for a run of a model as it is (:attr:`~posenc_cli.engines.target.Target.serve`, else the
    run's command line); nothing when the engine will not run it (the verdict says why)."""
    import shlex

    from posenc_cli.frameworks.registry import for_format

    if run is None or run.refusal:
        return ""
    target = for_format(r.fmt)
    return target.serve(r, run) if target.serve else shlex.join(run.invocation)


def _prints_config(fmt: str) -> bool:
    from posenc_cli.frameworks.registry import for_format

    return fmt not in hf.FORMATS and for_format(fmt).prints_config


def _printed_config(text: str, req: ScaleRequest, model: _Model | None) -> dict[str, Any]:
    """The config.json an engine that prints config keys (mlx-lm, ExLlamaV3) reads from what it printed: a whole
    config as printed, else the keys set in the model's config (the request's own config without ``--config``), its
    rope keys replaced whole (``rope_scaling`` is read before ``rope_parameters``: both go)."""
    import json

    from posenc_cli.models.config_keys import text_config

    keys: dict[str, Any] = json.loads(text)
    if "model_type" in keys or "architectures" in keys:
        return keys
    base = copy.deepcopy(model.source.config) if model is not None else request_config(req)
    _, _, where = text_config(base)
    inner = base[where] if where == "text_config" else base
    for key in ("rope_scaling", "rope_parameters", "rope_theta"):
        inner.pop(key, None)
    inner.update(keys)
    return base


def _verdict(req: ScaleRequest, fmt: str, model: _Model | None, printed: dict[str, Any] | None = None) -> str:
    """What ``posenc check`` says of the engine (or trainer) that owns ``fmt`` for this request: its line from
    :func:`posenc_cli.frameworks.check.judge`, on the model's config patched with the request (``--config``) or on a
    config of the request alone (theta, head dim, lengths and the rope dict), at the target length; for an engine that
    prints config keys, on the config ``printed`` (what it reads: the verdict judges what was printed or written).
    For transformers' formats the config is the reference itself."""
    if fmt in hf.FORMATS:
        return "this is transformers' config: the reference every engine is compared with"
    try:
        on, judged = _judgement(req, fmt, model, printed=printed)
    except PosencError as exc:  # the rendering stands; what could not be compared is said
        on = "on the patched config" if model is not None else "on this request's config"
        return f"{on}, not compared: {exc}"
    return f"{on}, {judged.line()}"


def _judgement(req: ScaleRequest, fmt: str, model: _Model | None, name: str = "MODEL",
               printed: dict[str, Any] | None = None) -> tuple[str, Judgement]:
    """(what was judged, the verdict of the engine owning ``fmt``) on the config ``printed``, else on the model's
    config patched with ``req`` or the request's own config, at the target; ``name``: what its command lines call
    the model."""
    # the engine comparison computes frequencies: numpy and the config reader load only for it
    from posenc_cli.frameworks.check import judge
    from posenc_cli.frameworks.registry import format_owner
    from posenc_cli.models.model_positions import describe

    if printed is not None:
        cfg, on = printed, "on the config printed"
    elif model is not None:
        cfg = hf.patch_config(model.source.config, req, hf.own_format(model.facts), model.facts.group)
        on = "on the patched config"
    else:
        cfg = request_config(req)
        on = "on this request's config"
    return on, judge(describe(cfg), cfg, format_owner(fmt), req.target, model_name=name)


def request_config(req: ScaleRequest) -> dict[str, Any]:
    """A config.json of the request alone (a bare ``posenc scale``): one attention head of ``head_dim``, the
    request's theta, partial rotary factor, rope dict and ``max_position_embeddings``, as transformers' legacy keys
    (``--engine hf``), as a whole one-layer Llama: engines that serve only the architectures they know (LMDeploy's
    TurboMind, ExLlamaV3) or build the model from its config (mlx-lm) read it as they read a Llama, and transformers
    with its plain rope reading."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": req.head_dim,
            "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": req.head_dim, "num_hidden_layers": 1,
            "intermediate_size": req.head_dim, "rms_norm_eps": 1e-6, "vocab_size": 256, **hf.format_hf(req)}


def _check_ask(ask: ScaleAsk) -> None:
    if ask.engine is not None and ask.engine not in formats():
        raise PosencError(f"{{engine}} {ask.engine!r} is not known; use one of: {', '.join(formats())}", "engine")
    if (ask.output or ask.in_place) and ask.config is None:
        raise PosencError("{output} and {in_place} patch a model config: pass {config} FILE", "output", "in_place",
                          "config")
    if ask.output and ask.in_place:
        raise PosencError("give either {output} FILE or {in_place}, not both", "output", "in_place")


def _read_model(ask: ScaleAsk) -> _Model:
    """The model of ``--config``, and the file a write patches (a folder's config.json)."""
    # the model reader loads only for --config: a bare request never needs it (tests/test_imports.py)
    from posenc_cli.models.facts import model_facts
    from posenc_cli.models.sources import describe_source, read_source

    assert ask.config is not None
    src = read_source(ask.config)
    if ask.in_place and src.kind == "gguf":
        raise PosencError(f"{{in_place}} would rewrite {src.label}; posenc never writes over a GGUF it reads: give "
                          "-o NEW.gguf", "in_place")
    if (ask.output or ask.in_place) and src.kind not in ("file", "stdin", "folder", "gguf"):
        raise PosencError(f"{{output}} and {{in_place}} patch a local config.json; {src.label} is a {src.kind} "
                          "(print the scaling without them, or download config.json first)", "output", "in_place")
    if ask.in_place and src.kind == "stdin":
        raise PosencError("{in_place} rewrites a config file; {config} - is stdin (use -o - to print the patched "
                          "config)", "in_place", "config")
    path = src.path if ask.in_place and src.kind == "folder" and src.path else ask.config
    return _Model(src, model_facts(describe_source(src), src.label, cfg=src.config), path)


def _patched(model: _Model, req: ScaleRequest, fmt: str) -> str:
    # loaded with the reader (see _read_model)
    from posenc_cli.models.facts import MARKER
    from posenc_cli.models.sources import written_config

    cfg = hf.patch_config(model.source.config, req, fmt, model.facts.group)
    cfg[MARKER] = written_marker(req)
    return written_config(cfg, "the patched config")


def written_marker(req: ScaleRequest) -> dict[str, Any]:
    """The ``posenc`` record of a file written with ``req`` (:func:`posenc_cli.models.facts.marker`): the length the
    model was trained at and whether the window it now serves is reached training-free (``--fine-tuned``: the model
    is trained at the target, so the target is its trained length)."""
    from posenc_cli.models.facts import marker

    trained = req.target if req.fine_tuned else req.trained_length
    return marker(trained, req.target, trained < req.target, req.theta)


#: the formats that serve a GGUF written with ``-o NEW.gguf`` (the others describe a config.json or flags)
GGUF_FORMATS = ("ollama", "lmstudio", "llama.cpp", "llama-cpp-python")
#: of these, the ones whose command serves the written file as it is (its run), not a rendering naming it
_SERVED_AS_WRITTEN = ("llama.cpp", "llama-cpp-python")


def _written_gguf(model: _Model, req: ScaleRequest, ask: ScaleAsk, notes: list[str]) -> tuple[str, str, list[str]]:
    """``-o NEW.gguf`` on a GGUF model: the scaling written into a new GGUF (:mod:`posenc_cli.models.gguf.scaled`),
    and the rendering for ``--engine ollama``/``lmstudio`` naming it (else no text). Returns (the name written,
    the text, its caveats); the writer's notes are appended to ``notes``."""
    from posenc_cli.models.gguf.scaled import marker_keys, scaling_edit
    from posenc_cli.models.gguf.writer import rewrite

    assert ask.output is not None and model.source.gguf is not None and model.source.path is not None
    if ask.engine is not None and ask.engine not in GGUF_FORMATS:
        raise PosencError(f"-o {ask.output} on a GGUF writes a new GGUF; {{engine}} {ask.engine} describes a "
                          f"config.json or flags: use {{engine}} {' or '.join(GGUF_FORMATS)} with -o, or {{engine}} "
                          f"{ask.engine} without it", "engine")
    if ask.engine is not None and ask.output == "-":
        raise PosencError(f"-o - streams the GGUF to stdout; {{engine}} {ask.engine} prints there too: give -o "
                          "NEW.gguf", "engine")
    edit, written_notes = scaling_edit(model.source.gguf, scaling.rope_parameters(req),
                                       scaling.max_position_embeddings(req), req.rotary_dim)
    edit.set_keys.update(marker_keys(written_marker(req)))
    written = rewrite(model.source.path, ask.output, edit, label=model.source.label)
    notes += [f"note: {line}" for line in written_notes]
    if ask.engine is None:
        return written, "", []
    if ask.engine in _SERVED_AS_WRITTEN:
        # the file carries the rope: the command is the engine's run of the patched config (what the file holds,
        # tests/models/test_gguf_scaled.py), naming the file, so the verdict printed beside it judges this command
        judged = _judgement(req, ask.engine, model, written)[1].verdict
        run = judged.run if judged is not None else None
        return written, _serving_text(Rendering(req, ask.engine, written, gguf=True), run), run.warnings if run else []
    # no config or facts: the rendering names the new file (engines.ollama.gguf_steps), not the old one
    text, caveats = render(Rendering(req, ask.engine, written, None, None, True))
    return written, text, caveats


def render_on_model(req: ScaleRequest, fmt: str, source: Source, facts: ModelFacts | None,
                    name: str = "MODEL") -> tuple[str, list[str]]:
    """``posenc scale --engine fmt`` of ``req`` on a model read from ``source``: its config and facts (no facts, a
    model with no rope group: neither), and the name engine command lines give it (its served name unless ``name``
    is given). Returns (text, caveats). ``pick --trainer`` renders its runs through this too."""
    from posenc_cli.models.sources import served_name  # loaded already: the model was read with it

    return render_request(req, fmt, source.config if facts is not None else None, facts,
                          served_name(source) if name == "MODEL" else name, gguf=source.kind == "gguf")


def _notes(req: ScaleRequest, fmt: str, facts: ModelFacts | None, notes: list[str],
           given: dict[str, Any]) -> list[str]:
    """The stderr notes, in order: the model's, the request's, the defaults used, the method's advice."""
    out = [*((facts.window_note,) if facts and facts.window_note else ()), *(facts.notes if facts else ()), *notes]
    for name, value in given.items():
        if value is None and (facts is None or getattr(facts, name) is None):
            out.append(f"note: --{name.replace('_', '-')} not given; using {getattr(req, name):g}")
    out += scaling.warnings_for(req)
    if req.method == "dynamic" and not req.unchanged and fmt in hf.FORMATS:
        out.append("note: dynamic keeps max_position_embeddings at the trained length; the base grows past it per "
                   "forward")
    return out

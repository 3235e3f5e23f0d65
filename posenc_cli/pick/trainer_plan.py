"""``posenc pick --trainer NAME``: a plan's training runs and serving config in one trainer's format (no numpy at
import; the renderings load what ``posenc scale --engine NAME`` loads).

What a stage trains with: every fine-tuning stage trains the plan's one rope dict (the final scaling, its factor
included) at the stage's own length, which is what the plan's note says ("each stage uses the same scaling at its
own length"). DeepSeek-V3 trained both of its YaRN stages (32k, then 128k) with one s=40 configuration, and
DeepSeek-V2 trained at 32k the YaRN it serves at 128k. The last stage therefore trains the numbers the serving
config carries (``posenc audit --trained-with`` reads a plan's ``extension.config_v5`` as the trained rope), and a
training-free jump after it changes the length served, not the frequencies. An ABF plan trains plain RoPE at the
raised theta; when it stops short of the target (a custom rules file), the served config adds a yarn jump on top.

A stage's settings are what ``posenc scale <the plan's command> --seq-len L --engine NAME`` prints: the same
request the plan's config comes from, at the stage's length (:func:`posenc_cli.rope.scaling.at_length`), rendered by the
same function (:func:`posenc_cli.frameworks.registry.render_request`). A trainer that cannot express them refuses, with
the measured difference and the nearest setting; the stage carries the refusal and the plan is not ``runnable`` in
that trainer (``pick`` then exits 1: the check that the trainer reproduces the plan ran and failed).

A new model (no ``--config``): the first run is pre-training at the trained length with plain RoPE at the plan's
``rope_theta`` (its hyperparameters); pick plans no pre-training tokens, so that run has none.
"""

from __future__ import annotations

import math
import shlex
from typing import TYPE_CHECKING, Any

from posenc_cli.engines import hf
from posenc_cli.errors import PosencError
from posenc_cli.frameworks.registry import ENGINE, TRAINER, entries, formats, render_request
from posenc_cli.pick.picker import NEW_GGUF, PickInputs, PickResult, pick, plain_request, scale_argv
from posenc_cli.rope.scaling import at_length, max_position_embeddings, rope_parameters
from posenc_cli.scale.scaled import GGUF_FORMATS, render_on_model
from posenc_cli.units import format_length

if TYPE_CHECKING:
    from posenc_cli.rope.scaling import ScaleRequest

#: The trainer formats of ``posenc scale --engine`` (the registry's).
TRAINERS = formats(TRAINER)
#: The engines whose ``posenc scale`` command the serving part names: each serving engine's first format (the
#: first engine, transformers, is the config keys themselves).
ENGINES = tuple(e.formats[0] for e in entries(ENGINE)[1:])


def _train_samples(n: int) -> str:
    return f"--train-samples {n}"


#: How a trainer takes a run's length in sequences, where it has one setting for it (Megatron-LM counts samples;
#: the others count steps or epochs, which depend on a batch size pick does not know).
SAMPLES = {"megatron": _train_samples}


def pick_with_trainer(inputs: PickInputs, trainer: str | None = None) -> PickResult:
    """``posenc pick``: the plan for ``inputs`` (:func:`posenc_cli.pick.picker.pick`) and, with ``trainer``, its
    training runs in that trainer's format as the answer's ``trainer`` part (:func:`trainer_plan`); a trainer name
    the registry does not know fails before any model is read."""
    if trainer is not None:
        check_trainer(trainer)
    result = pick(inputs)
    if trainer is not None:
        result.answer["trainer"] = trainer_plan(result, trainer)
    return result


def check_trainer(name: str) -> str:
    """``name`` if it is a trainer format, else the one-line error (exit 2)."""
    if name not in TRAINERS:
        raise PosencError(f"--trainer {name!r} is not known; use one of: {', '.join(TRAINERS)}")
    return name


def _render(req: ScaleRequest, fmt: str, result: PickResult) -> tuple[str, list[str]]:
    """``posenc scale --engine fmt`` of ``req`` on the plan's model (scale's own rendering), or bare."""
    if result.source is not None:
        return render_on_model(req, fmt, result.source, result.model)
    return render_request(req, fmt)


def _serving(config: dict[str, Any], config_format: str, argv: list[str], req: ScaleRequest,
             result: PickResult) -> dict[str, Any]:
    """The serving part: the config keys, their ``posenc scale`` command, and each engine's command with the
    refusal that command gives (an engine that cannot express the rope: llama.cpp has no llama3 flag)."""
    refusals: dict[str, str] = {}
    writes = argv[-2:] == ["-o", NEW_GGUF]  # a GGUF model: the engines that serve a GGUF get it written
    commands: dict[str, str] = {}
    for engine in ENGINES:
        served = writes and engine in GGUF_FORMATS
        commands[engine] = shlex.join([*(argv if served or not writes else argv[:-2]), "--engine", engine])
        if served:  # the written GGUF carries the rope: nothing to refuse
            continue
        try:
            _render(req, engine, result)
        except PosencError as exc:
            refusals[engine] = str(exc)
    return {"config": config, "config_format": config_format, "command": shlex.join(argv), "engines": commands,
            "engine_refusals": refusals}


def _run(req: ScaleRequest, argv: list[str], length: int, fmt: str, result: PickResult) -> dict[str, Any]:
    """One training run at ``length``: the ``posenc scale`` command, the rope dict and window it trains with,
    and the trainer's settings (or its refusal)."""
    at = at_length(req, length)
    run: dict[str, Any] = {
        "seq_len": length,
        "rope_parameters": rope_parameters(at),
        "max_position_embeddings": max_position_embeddings(at),
        "command": shlex.join([*argv, "--seq-len", format_length(length), "--engine", fmt]),
        "settings": None, "caveats": [], "refusal": None,
    }
    try:
        run["settings"], run["caveats"] = _render(at, fmt, result)
    except PosencError as exc:
        run["refusal"] = str(exc)
    return run


def trainer_plan(result: PickResult, fmt: str) -> dict[str, Any]:
    """The ``trainer`` part of ``pick --json``: ``pretraining`` (a new model), ``stages`` (each a run from
    :func:`_run` plus ``stage``, ``from``, ``tokens`` and ``sequences``), ``training_free`` (the jump served past
    the last run), ``serving`` (the plan's config and the engines' commands), ``nothing_to_train`` (why, when no run)
    and ``runnable`` (no run refused)."""
    check_trainer(fmt)
    a, f = result.answer, result.facts
    ext, reqs = a["extension"], result.requests
    prf = result.partial_rotary_factor
    out: dict[str, Any] = {"name": fmt, "runnable": True, "pretraining": None, "stages": [], "training_free": None,
                           "serving": None, "nothing_to_train": None}
    trained_ctx = int(f["trained_ctx"])
    rope = f["existing"] is False or f["model_encoding"] == "rope"
    if not rope:
        out["nothing_to_train"] = (f"this plan keeps the model's {f['model_encoding']} positions; posenc renders RoPE "
                                   "settings for trainers")
        return out
    pre_req = None
    if not f["existing"]:
        theta = float(f["theta_new"])
        pre_req, flags = plain_request(f, trained_ctx, theta, prf)
        argv = scale_argv("ntk", flags, None, int(f["head_dim"]), prf)
        out["pretraining"] = {**_run(pre_req, argv, trained_ctx, fmt, result), "theta": theta, "tokens": None}
    last = trained_ctx
    if ext is not None and ext["fine_tune"] and reqs is not None:
        lengths: list[int] = list(f["stage_lengths"])
        tokens = int(f["stage_tokens"])
        for i, (start, end) in enumerate(zip([trained_ctx, *lengths[:-1]], lengths, strict=True)):
            n = math.ceil(tokens / end)
            stage = {"stage": i + 1, "from": start, **_run(reqs.trained, reqs.trained_argv, end, fmt, result),
                     "tokens": tokens, "sequences": n, "samples_setting": SAMPLES[fmt](n) if fmt in SAMPLES else None}
            out["stages"].append(stage)
        last = lengths[-1] if lengths else trained_ctx
    served_to = ext["to"] if ext is not None else trained_ctx
    if served_to > last:
        out["training_free"] = {"from": last, "to": served_to, "factor": served_to / last}
    if ext is not None and reqs is not None:
        out["serving"] = _serving(ext["config"], ext["config_format"], shlex.split(ext["command"]), reqs.served,
                                  result)
    elif pre_req is not None:
        assert out["pretraining"] is not None
        argv = shlex.split(out["pretraining"]["command"])[:-4]  # without --seq-len L --engine NAME
        out["serving"] = _serving(hf.format_hf(pre_req), "hf", argv, pre_req, result)
    if out["serving"] is not None:
        # the served frequencies are the ones the last run trained (a stage's rope dict is the plan's), unless no
        # stage trained the extension (training-free) or an ABF plan adds a training-free yarn jump
        out["serving"]["trained_numbers"] = bool(out["stages"]) and reqs is not None and reqs.trained is reqs.served \
            or (ext is None and pre_req is not None)
    if not out["stages"]:
        if ext is None:
            why = "the plan keeps the model as it is" if f["existing"] else "the plan has no long-context stage"
        elif not ext["fine_tune"]:
            why = (f"the plan's {ext['method']} x{ext['factor']:g} is training-free"
                   + (" (the budget does not pay for its stages)" if int(f["missing_tokens"]) else ""))
        else:
            why = "the plan has no stage"
        out["nothing_to_train"] = why + (": serve the config below" if out["serving"] else "")
    runs = [out["pretraining"], *out["stages"]] if out["pretraining"] else out["stages"]
    out["runnable"] = all(r["refusal"] is None for r in runs)
    return out

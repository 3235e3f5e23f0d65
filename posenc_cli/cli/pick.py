"""``posenc pick``: the YAML decision rules' recommendation, rendered.

No ``from __future__ import annotations`` here: typer would evaluate each option's annotation string again on every
run (about 70 compiles, 2 ms of pick's start-up); written plainly, they are built once, as the module loads.
"""

import sys
from typing import Annotated, Any

import typer

from posenc_cli.cli.options import LENGTHS, THETA_RANGE, context_length, engine_option, or_list, split_names
from posenc_cli.cli.output import note, print_json
from posenc_cli.errors import ExitCode
from posenc_cli.files import dumps_json
from posenc_cli.frameworks.registry import ENGINE, TRAINER, formats
from posenc_cli.rope.scaling import MAX_HEAD_DIM
from posenc_cli.rope.slopes import MAX_HEADS
from posenc_cli.units import (
    MAX_TOKENS,
    format_length,
    format_size,
    format_tokens,
    parse_length,
    parse_size,
    parse_tokens,
)


def pick(
    ctx: Annotated[str, typer.Option(help=f"Target context at inference: 4k, 128k, 1M, 131072; {LENGTHS}.")],
    trained_ctx: Annotated[str | None, typer.Option(
        help=f"Trained length; {LENGTHS}.", show_default="--ctx, or with --config the model's trained length")
    ] = None,
    extrapolation: Annotated[str, typer.Option(
        help="Untrained reach you accept: none (training-free jumps up to x4), moderate or strong (up to x8, "
             "with a warning).")] = "none",
    typical_ctx: Annotated[str | None, typer.Option(
        help="The length most requests use: a training-free static scaling is sized for it; 1 to --ctx.",
        show_default="none")] = None,
    budget: Annotated[str, typer.Option(
        help=f"Fine-tuning tokens for a long-context stage: 0, 500M, 2B, 1T (decimal); 0 to {MAX_TOKENS:.0e}.")
    ] = "0",
    config: Annotated[str | None, typer.Option(
        help="An existing model (config.json, folder, Hub id or GGUF): it is extended, not replaced.",
        show_default="a new model")] = None,
    head_dim: Annotated[int | None, typer.Option(
        help=f"Head dimension; even, 2 to {MAX_HEAD_DIM}.", show_default="128, or the config's")] = None,
    heads: Annotated[int | None, typer.Option(
        help=f"Attention heads, for ALiBi slopes; 1 to {MAX_HEADS}.", show_default="32, or the config's")] = None,
    theta: Annotated[float | None, typer.Option(
        help=f"The model's rope_theta, if not in --config; {THETA_RANGE}.", show_default="the config's")] = None,
    rules: Annotated[str | None, typer.Option(
        help="A rules YAML file replacing the shipped policy.", show_default="the shipped rules")] = None,
    trainer: Annotated[str | None, typer.Option(
        help="Also give each training run (sequence length, rope settings, tokens) in this trainer's format, and "
             f"the serving config of the same numbers: {or_list(formats(TRAINER))}. Exit 1 when the trainer cannot "
             "express a run.",
        show_default="none")] = None,
    engine: Annotated[list[str] | None, engine_option(
        f"Also give the command that serves the plan with this engine, and what it prints: "
        f"{or_list(formats(ENGINE)[2:])}.", show_default="none")] = None,
    memory: Annotated[str | None, typer.Option(
        "--memory", help="A device's memory (24GiB, 80GB): whether the target fits each engine (--engine, default "
                         "all) beside the weights, and how; needs --config.")] = None,
    explain: Annotated[bool, typer.Option(help="Show every rule in order and which conditions held (stderr).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Recommend an encoding, its hyperparameters, an extension config, a test plan and a fallback."""
    from posenc_cli.pick.picker import PickInputs
    from posenc_cli.pick.picker import pick as run_pick

    inputs = PickInputs(
        ctx=context_length(ctx),
        trained_ctx=parse_length(trained_ctx, name="--trained-ctx") if trained_ctx is not None else None,
        extrapolation=extrapolation, budget=parse_tokens(budget), config=config, head_dim=head_dim, heads=heads,
        theta=theta, rules=rules,
        typical_ctx=parse_length(typical_ctx, name="--typical-ctx") if typical_ctx is not None else None,
    )
    if trainer is None:
        result = run_pick(inputs)
    else:  # the trainers' renderings load only for --trainer
        from posenc_cli.pick.trainer_plan import pick_with_trainer

        result = pick_with_trainer(inputs, trainer)
    engines = split_names(engine)
    if engines:  # scale's core loads only for --engine
        from posenc_cli.pick.serving import engine_answers

        result.answer["engines"] = engine_answers(result, engines)
    if memory is not None:  # the memory models load only for --memory
        from posenc_cli.pick.memory_plan import memory_answer

        result.answer["memory"] = memory_answer(result, parse_size(memory, name="memory"), engines)
    if result.model is not None and result.model.window_note:
        note(result.model.window_note)
    for name, value in result.answer["inputs"]["assumed"].items():
        note(f"note: assumed {name} {value} (no --{name.replace('_', '-')} and no --config); pass your model's")
    if explain:
        _render_trace(result.traces)
    plan: dict[str, Any] | None = result.answer.get("trainer")
    if as_json:
        print_json(result.answer)
    else:
        _render_pick(result.answer, result.model)
    if plan is not None and not plan["runnable"]:
        refused = [r for r in [plan["pretraining"], *plan["stages"]] if r is not None and r["refusal"] is not None]
        note(f"note: {trainer} cannot train {len(refused)} of the plan's runs as planned (see the refusal and nearest "
             "setting above); exit 1")
        raise typer.Exit(ExitCode.CHECK_FAILED)


def _render_trace(traces: Any) -> None:
    lines = ["rules, in order (first match not vetoed wins):"]
    chosen_seen = False
    for t in traces:
        if t.matched and not t.vetoed_by and not chosen_seen:
            status, chosen_seen = "FIRED", True
        elif t.vetoed_by:
            status = f"matched, vetoed by guard {t.vetoed_by}"
        elif t.matched:
            status = "matched (not reached)"
        else:
            status = "no match"
        lines.append(f"  {t.rule}: {status}")
        for text, ok in t.conditions:
            lines.append(f"      {'held  ' if ok else 'failed'}  {text}")
        if not t.conditions:
            lines.append("      (catch-all)")
    note("\n".join(lines))


def _render_pick(a: dict[str, Any], model: Any = None) -> None:
    i = a["inputs"]
    kind = f"existing {i['model_encoding']} model" if i["existing"] else "new model"
    budget = format_tokens(i["budget"]) if i["budget"] else "none"
    serving = f", {model.serving}" if model is not None and model.serving else ""
    out = [f"posenc pick: {kind}, target {format_length(i['ctx'])}, trained {format_length(i['trained_ctx'])}"
           f"{serving}, extrapolation {i['extrapolation']}, fine-tuning budget {budget}",
           "", f"1. Encoding: {a['encoding']}", f"   {a['reason']}", "", "2. Hyperparameters:"]
    out += [f"   {k}: {v}" for k, v in a["hyperparameters"].items()] or ["   (none)"]
    out += ["", "3. Extension:"]
    ext = a["extension"]
    if ext is None:
        out.append("   none")
    else:
        tuning = "yes, " + ext["fine_tune_tokens"] if ext["fine_tune"] else "none"
        out.append(f"   {ext['method']} x{ext['factor']:g}: {format_length(ext['from'])} -> "
                   f"{format_length(ext['to'])}; fine-tuning: {tuning}")
        if ext["note"]:
            out.append(f"   {ext['note']}")
        form = ("transformers 5 rope_parameters" if ext["config_format"] == "hf-v5"
                else "transformers rope_scaling, read by 4.x and 5.x")
        if ext.get("output"):  # a GGUF: the scaling is written into a new one
            out.append(f"   written into {ext['output']} by the command below (these keys, as {form}):")
        else:
            out.append(f"   merge into config.json ({form}; other engines via the command below):")
        out += ["   " + line for line in dumps_json(ext["config"]).splitlines()]
        out.append(f"   {'next' if ext.get('output') else 'same numbers'}: {ext['command']}")
    out += ["", "4. Test plan:"] + [f"   - {t}" for t in a["test_plan"]]
    out += ["", f"5. Fallback: {a['fallback']}", "", f"rule: {a['rule']}: {a['why']}"]
    for v in a["vetoed"]:
        out.append(f"vetoed: {v['rule']} (guard {v['guard']})")
    if "trainer" in a:
        out += ["", *_render_trainer(a["trainer"])]
    for e in a.get("engines", []):
        out += ["", *_render_engine(e)]
    if "memory" in a:
        out += ["", *_render_memory(a["memory"])]
    sys.stdout.write("\n".join(out) + "\n")


def _render_memory(m: dict[str, Any]) -> list[str]:
    out = [f"Memory at {format_length(m['ctx'])} on {format_size(m['memory'])} (for the caches: "
           f"{format_size(m['for_caches'])}):"]
    for r in m["engines"]:
        ollama = f"num_ctx {m['ctx']}: " if r["engine"] == "ollama" else ""
        out.append(f"   {r['engine']}: {ollama}{r['line']}")
    out += [f"   {name}: no memory model" for name in m["not_sized"]]
    return out + [f"   note: {n}" for n in m["notes"]]


def _render_engine(e: dict[str, Any]) -> list[str]:
    out = [f"Serving with {e['engine']}:", f"   $ {e['command']}"]
    if e["refusal"] is not None:
        return out + [f"   REFUSED: {e['refusal']}"]
    if e["text"] is None:
        return out + ["   (writes the GGUF, then prints the command that serves it)"]
    out += [f"   caveat: {c}" for c in e["caveats"]]
    out += [f"   verdict: {e['verdict']}"] if e["verdict"] else []
    out += [f"   memory: {e['memory']}"] if e.get("memory") else []
    return out + ["   " + line for line in e["text"].splitlines()]


def _render_run(run: dict[str, Any]) -> list[str]:
    out = [f"      $ {run['command']}"]
    if run["refusal"] is not None:
        return out + [f"      REFUSED: {run['refusal']}"]
    out += ["      " + line for line in run["settings"].splitlines()]
    return out + [f"      caveat: {c}" for c in run["caveats"]]


def _render_trainer(t: dict[str, Any]) -> list[str]:
    out = [f"6. Training with {t['name']}" + ("" if t["runnable"] else " (not runnable as planned: see REFUSED)")
           + ":"]
    pre = t["pretraining"]
    if pre is not None:
        out.append(f"   pre-training at {format_length(pre['seq_len'])}, plain RoPE with rope_theta {pre['theta']:g} "
                   "(tokens: not planned by pick):")
        out += _render_run(pre)
    for s in t["stages"]:
        samples = f"; {s['samples_setting']}" if s["samples_setting"] else ""
        out.append(f"   stage {s['stage']}: {format_length(s['from'])} -> {format_length(s['seq_len'])}, sequences "
                   f"of {s['seq_len']:,} tokens, {format_tokens(s['tokens'])} tokens ({s['sequences']:,} sequences"
                   f"{samples}):")
        out += _render_run(s)
    if t["nothing_to_train"]:
        out.append(f"   {'after pre-training, nothing more to train' if pre else 'nothing to train'}: "
                   f"{t['nothing_to_train']}")
    serving = t["serving"]
    if j := t["training_free"]:
        how = ("the frequencies trained, served longer" if serving["trained_numbers"]
               else "the serving config's scaling, not trained")
        out.append(f"   then training-free: {format_length(j['from'])} -> {format_length(j['to'])} (x{j['factor']:g}), "
                   f"{how}")
    if serving is not None:
        same = ("the frequencies the last run trained" if serving["trained_numbers"]
                else "other frequencies than trained: the jump is training-free")
        out.append(f"   serving ({same}): config.json keys")
        out += ["      " + line for line in dumps_json(serving["config"]).splitlines()]
        for engine, command in serving["engines"].items():
            refusal = serving["engine_refusals"].get(engine)
            out.append(f"      {engine}: {command}" + (f" (refuses: {refusal})" if refusal else ""))
    return out

"""``posenc check``: what transformers and every registered engine (and with ``--trainer``, every training
framework) compute for a model's positions."""

from __future__ import annotations

import shlex
import sys
from typing import Annotated, Any

import typer

from posenc_cli.cli.inspect import RevisionOpt, SourceArg, note_newer_transformers
from posenc_cli.cli.options import (
    LENGTHS,
    context_length,
    engine_option,
    hidden_alias,
    one_of,
    options_as_typed,
    split_names,
)
from posenc_cli.cli.output import note, print_json
from posenc_cli.engines.ollama import command_line as ollama_command
from posenc_cli.engines.runs import NOT_MODELLED, SAME_RTOL
from posenc_cli.errors import ExitCode, PosencError
from posenc_cli.frameworks.check import check_source, verdict_line
from posenc_cli.frameworks.registry import ENGINE, TRAINER, names


def check(
    source: SourceArg,
    engine: Annotated[list[str] | None, engine_option(
        f"Engines to compare with transformers: {', '.join(names(ENGINE))}.", "all of them")] = None,
    engines: Annotated[list[str] | None, hidden_alias("--engines", "--engine")] = None,
    ctx: Annotated[str | None, typer.Option(
        help=f"Serving length (4k, 128k); {LENGTHS}.", show_default="the model's native window")] = None,
    max_model_len: Annotated[str | None, hidden_alias("--max-model-len", "--ctx")] = None,
    trainer: Annotated[list[str] | None, typer.Option(
        help=f"Training frameworks, or all: {', '.join(names(TRAINER))}. Each is compared with transformers and "
             "with every engine (trained at --ctx). Repeat it, or give a comma list.", show_default="none")] = None,
    trainers: Annotated[list[str] | None, hidden_alias("--trainers", "--trainer")] = None,
    revision: RevisionOpt = None,
    installed: Annotated[bool, typer.Option(
        "--installed", help="Run each engine or trainer (and transformers) whose package is importable here with "
        "its own code, at the installed version, instead of posenc's model; rows say which.")] = False,
    memory: Annotated[str | None, typer.Option(
        "--memory", help="A device's memory (24GiB, 80GB): also whether --ctx fits each engine's caches beside the "
                         "weights; a context that does not fit is a failed check (exit 1).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Compare each engine's RoPE with transformers', per layer group (and each trainer's, with --trainer).

    Exit 0 only when every engine and trainer asked for computes what transformers computes; 1 when one differs,
    will not start or (a trainer) cannot express the model's rope, or a trained-with/served-with pair differs;
    else 3 when one was not compared (not modelled: leave it out with --engine or --trainer). A model without
    RoPE is exit 0 (nothing can differ).
    """
    asked = _names(ENGINE, (engine, "--engine"), (engines, "--engines"))
    trainer_names = _names(TRAINER, (trainer, "--trainer"), (trainers, "--trainers"))
    length, typed = one_of("ctx", (ctx, "--ctx"), (max_model_len, "--max-model-len"))
    with options_as_typed(typed):
        report, label = check_source(
            source, list(names(ENGINE)) if asked is None else asked,
            None if length is None else context_length(length, typed.get("ctx", "--ctx")), trainer_names,
            revision=revision, installed=installed)
    from posenc_cli.memory.checked import add_ollama_memory

    add_ollama_memory(report, source, revision)
    fits = None if memory is None else _fits(source, report, asked, memory, revision)
    note_newer_transformers()
    for line in report.notes:
        note(f"note: {line}")
    if as_json:
        print_json(report.as_dict() if fits is None else {**report.as_dict(), "memory": fits})
    else:
        _render(report, label)
        if fits is not None:
            _render_fits(fits)
    code = report.exit_code()
    if fits is not None and any(r["runs"] and not r["fits"] for r in fits["engines"]):
        code = ExitCode.CHECK_FAILED
    raise typer.Exit(code)


def _fits(source: str, report: Any, asked: list[str] | None, memory: str, revision: str | None) -> dict[str, Any]:
    """Whether the checked length fits each engine's caches on a device of ``memory``."""
    from posenc_cli.memory.checked import fit_rows
    from posenc_cli.units import parse_size

    return fit_rows(source, report.max_model_len, asked, parse_size(memory, name="memory"), revision=revision)


def _render_fits(fits: dict[str, Any]) -> None:
    from posenc_cli.units import format_size

    weights = fits["weights"]
    known = format_size(weights["bytes"]) if weights["bytes"] is not None else f"unknown ({weights['source']})"
    out = [f"\nmemory at {fits['ctx']:,} tokens on {format_size(fits['memory'])} (weights {known}):"]
    out += [f"  {r['engine']}: {r['line']}" for r in fits["engines"]]
    out += [f"  {name}: no memory model" for name in fits["not_sized"]]
    out += [f"  note: {n}" for n in fits["notes"]]
    sys.stdout.write("\n".join(out) + "\n")


def _names(kind: str, *given: tuple[list[str] | None, str]) -> list[str] | None:
    """The engines (or trainers; ``all`` is every one) asked for by an option or its hidden alias (None: neither
    was given)."""
    values, typed = one_of(kind, *given)
    flag = typed.get(kind, given[0][1])
    asked = split_names(values)
    known = names(kind)
    if asked is None:
        return None
    if not asked:
        some = "some" if kind == ENGINE else "all or some"
        raise PosencError(f"{flag} is empty; use {some} of: {', '.join(known)}")
    if kind == TRAINER and asked == ["all"]:
        return list(known)
    if kind == TRAINER and "all" in asked:
        raise PosencError(f"{flag} {','.join(asked)!r}: all stands alone (it is every trainer); or name some of: "
                          f"{', '.join(known)}")
    return asked


def _diff(value: float, pair: int | None) -> str:
    """A relative inv_freq difference and the pair where it is largest; 0 when they agree to float32."""
    if value <= SAME_RTOL:
        return "0" if value == 0 else f"{value:.1e} (float32)"
    return f"{value:.3g} (pair {pair})"


def _table(report: Any, verdicts: list[Any], i: int, who: str) -> list[str]:
    """One rope group's row per engine (or trainer) against transformers."""
    short = f"at {report.short_len:,}" if report.short_len else None
    header = [who, *(["source"] if report.installed else []), "verdict", "inv_freq diff at max len",
              *([f"inv_freq diff {short}"] if short else []), "attention factor", "softmax scale",
              "cos/sin diff at max len"]
    rows = [tuple(header)]
    for v in verdicts:
        named = [v.run.engine, *([_source_cell(v.run.source)] if report.installed else [])]
        if not v.groups:
            rows.append((*named, v.verdict, *["-"] * (len(header) - len(named) - 1)))
            continue
        g = v.groups[i]
        cells = [*named, "same" if g.same else ("differs" if v.verdict == "same" else v.verdict),
                 _diff(g.inv_freq_rel_diff, g.worst_pair)]
        if short:
            cells.append(_diff(g.short_diff or 0.0, g.short_worst_pair))
        cells += [f"{g.attention_factor[1]:.6g}", f"x{g.softmax_scale[1]:.6g}", f"{g.cos_sin_diff:.3g}"]
        rows.append(tuple(cells))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _source_cell(source: str | None) -> str:
    """A row's source in the table: ``run`` (the installed package's code) or ``modelled``."""
    return "run" if source and source.startswith("run") else "modelled"


def _runs(verdicts: list[Any], trainer: bool, lengths: tuple[int, int | None], installed: bool) -> list[str]:
    """Each engine's (or trainer's) verdict (the line ``posenc scale --engine`` prints too), invocation and notes;
    with --installed, where its numbers come from."""
    out = []
    for v in verdicts:
        r = v.run
        if installed and r.source:
            out.append(f"{r.engine}: {r.source}")
        if r.refusal:
            out.append(verdict_line(v, lengths))
            continue
        if trainer:
            out.append(f"{verdict_line(v, lengths)}; layout {r.layout}")
            out += [f"  setup: {line}" for line in r.invocation]
        else:
            accepts = f"; accepts {r.accepts:,} without flags" if r.accepts else ""
            out.append(f"{verdict_line(v, lengths)}{accepts}")
            out.append(f"  run: {ollama_command(r.modelfile) if r.modelfile else shlex.join(r.invocation)}")
        out += [f"  note: {w}" for w in r.warnings]
    return out


def _off(value: float, pair: int | None) -> str:
    """'the same', or how far one inv_freq is off (relative to transformers', in percent) at its worst pair."""
    if value <= SAME_RTOL:
        return "the same"
    percent = 100 * value
    return f"off by {percent:,.0f}% (pair {pair})" if percent >= 100 else f"off by {percent:.3g}% (pair {pair})"


def _pair_line(pair: Any, several: bool, lengths: tuple[int, int | None]) -> str:
    """'trained with X, served with Y: same' or what differs, group by group."""
    head = f"  {pair.trainer} -> {pair.engine}: "
    if pair.same:
        return head + "same"
    parts = []
    for g in pair.groups:
        if g.same:
            continue
        long, short = lengths
        what = [f"inv_freq {_off(g.inv_freq_rel_diff, g.worst_pair)} at {long:,}"]
        if g.short_diff is not None and short is not None:
            what.append(f"{_off(g.short_diff, g.short_worst_pair)} at {short:,}")
        (a_eng, a_tr), (s_eng, s_tr) = g.attention_factor, g.softmax_scale
        if a_eng != a_tr:
            what.append(f"attention factor {a_tr:.6g} trained, {a_eng:.6g} served")
        if s_eng != s_tr:
            what.append(f"softmax scale x{s_tr:.6g} trained, x{s_eng:.6g} served")
        parts.append((f"[{g.name}] " if several else "") + ", ".join(what))
    return head + "differs: " + "; ".join(parts)


def _pair_lines(pairs: list[Any], several: bool, lengths: tuple[int, int | None]) -> list[str]:
    """Per trainer: one line naming the engines it is the same as, one per engine it differs from."""
    out: list[str] = []
    for trainer in dict.fromkeys(p.trainer for p in pairs):
        mine = [p for p in pairs if p.trainer == trainer]
        same = [p.engine for p in mine if p.same]
        if same:
            out.append(f"  {trainer} -> {', '.join(same)}: same")
        out += [_pair_line(p, several, lengths) for p in mine if not p.same]
    return out


def _render(report: Any, label: str) -> None:
    if report.no_rope is not None:
        sys.stdout.write(f"posenc check: {label} (model_type {report.model_type})\n{report.summary()}\n")
        return
    out = [f"posenc check: {label} (model_type {report.model_type}) at max_model_len {report.max_model_len:,}"]
    if report.reference is None:  # remote code: no transformers numbers, nothing compared
        for v in report.verdicts + (report.trainers or []):
            why = (v.run.refusal or "").removeprefix(NOT_MODELLED).lstrip(": ")
            out.append(f"{v.run.engine} {v.run.version}: {v.verdict}: {why}")
        sys.stdout.write("\n".join([*out, report.summary()]) + "\n")
        return
    if report.short_len:
        out.append(f"length-dependent rope: also compared at {report.short_len:,} positions")
    out += [f"transformers {report.reference.version}: {w}" for w in report.reference.warnings]
    if report.installed:
        out.append(f"transformers (the reference): {report.reference.source}")
    for i, group in enumerate(report.reference.groups):
        out.append("")
        out.append(f"[{group.name}] transformers: attention factor {group.attention_factor:.6g}, softmax scale "
                   f"x{group.softmax_scale:.6g}")
        out += _table(report, report.verdicts, i, "engine")
        if report.trainers is not None:
            out += _table(report, report.trainers, i, "trainer")
    out.append("")
    lengths = (report.max_model_len, report.short_len)
    out += _runs(report.verdicts, False, lengths, report.installed)
    if report.trainers is not None:
        out.append("")
        out.append(f"trainers (training at {report.max_model_len:,} tokens):")
        out += _runs(report.trainers, True, lengths, report.installed)
        out.append("")
        out.append("trained with X, served with Y:")
        several = len(report.reference.groups) > 1
        out += _pair_lines(report.pairs, several, lengths) or ["  no trainer and engine both ran"]
    out.append(report.summary())
    sys.stdout.write("\n".join(out) + "\n")

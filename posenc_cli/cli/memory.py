"""``posenc memory``: what a context costs in memory on each engine, per layer group, and with a budget the longest
context that fits. Parsing and rendering only: the work is :func:`posenc_cli.memory.report.memory_report`.

No ``from __future__ import annotations`` (as in ``cli/pick.py``): typer would compile each option's annotation string
on every run; written plainly, they are built once, as the module loads.
"""

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from posenc_cli.cli.options import LENGTHS, context_length, engine_option, split_names
from posenc_cli.cli.output import note, print_json
from posenc_cli.errors import ExitCode, PosencError
from posenc_cli.files import output_kind
from posenc_cli.units import format_size

if TYPE_CHECKING:
    from posenc_cli.memory.report import Budget

SIZES = "bytes, KiB/MiB/GiB (powers of 2) or KB/MB/GB (powers of 10)"
#: after the arguments, one engine's own options: click passes them through as the context's extra args
ENGINE_ARGS = {"allow_extra_args": True, "ignore_unknown_options": True}

SourceArg = Annotated[str, typer.Argument(
    help="A config.json (or - for stdin), a model folder, a Hub id or a GGUF file; after it, with one --engine, "
         "that engine's own options (--cache-type-k q8_0, OLLAMA_NUM_PARALLEL=2).")]
CtxOpt = Annotated[str | None, typer.Option(
    help=f"Context length per sequence; {LENGTHS}.", show_default="the model's window")]
EngineOpt = Annotated[list[str] | None, engine_option(
    "Engines to size (vllm, llama.cpp, ollama, mlx-lm, ...).", show_default="every engine with a memory model")]
SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", help="One engine's setting among several: ENGINE:SETTING=VALUE (llama.cpp:--cache-type-k=q8_0).",
    show_default="each engine's defaults")]
FitOpt = Annotated[str | None, typer.Option(
    help=f"Memory left for the caches: the longest context that fits, per engine and setting; {SIZES}.",
    show_default="no budget")]
MemoryOpt = Annotated[str | None, typer.Option(
    "--memory", help=f"A whole device's memory: the weights and the overheads posenc computes come off it; {SIZES}.",
    show_default="no budget")]
WeightsOpt = Annotated[str | None, typer.Option(
    help=f"The weights' size for --memory when posenc cannot read it (a config.json alone) or another file is "
         f"served (a quantized GGUF); {SIZES}.", show_default="read from the GGUF or safetensors headers")]
RevisionOpt = Annotated[str | None, typer.Option(help="Hub revision for a Hub id.", show_default="main")]


def budget_of(fit: str | None, device: str | None) -> "Budget":
    """``--fit`` and ``--memory`` read as sizes."""
    from posenc_cli.memory.report import Budget
    from posenc_cli.units import parse_size

    return Budget(None if fit is None else parse_size(fit, name="fit"),
                  None if device is None else parse_size(device, name="memory"))


def memory(
    context: typer.Context,
    source: SourceArg,
    ctx: CtxOpt = None,
    engine: EngineOpt = None,
    set_: SetOpt = None,
    fit: FitOpt = None,
    device: MemoryOpt = None,
    weights: WeightsOpt = None,
    revision: RevisionOpt = None,
    groups: Annotated[bool | None, typer.Option(
        "--groups/--no-groups", help="Each engine's layer groups (K, V, state, cells), its levers and notes.",
        show_default="with one engine")] = None,
    png: Annotated[str | None, typer.Option(help="Also draw bytes against context per engine to this PNG.",
                                            show_default="no figure")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """What a context costs in memory on each engine, exact per layer group, and the longest context that fits."""
    from posenc_cli.memory.report import memory_report
    from posenc_cli.units import parse_size

    if png is not None and output_kind(png) == "stdout":
        raise PosencError("{png} would write the figure where the answer goes (stdout): give a file, or draw it "
                          "alone with posenc plot memory -o -", "png")
    budget = budget_of(fit, device)
    length = None if ctx is None else context_length(ctx)
    size = None if weights is None else parse_size(weights, name="weights")
    result, code = memory_report(source, length, split_names(engine), extra=list(context.args), sets=set_ or [],
                                 budget=budget, revision=revision, weights=size)
    if png:
        from posenc_cli.plots.memory import memory as draw

        drawn = draw(source, length, split_names(engine), png, extra=list(context.args), sets=set_ or [],
                     budget=budget, revision=revision, weights=size)
        note(f"wrote {drawn.shown}")
    if as_json:
        print_json(result)
    else:
        render(result, groups=len(result["engines"]) == 1 if groups is None else groups)
    if code != ExitCode.OK:
        raise typer.Exit(code)


memory.context_settings = ENGINE_ARGS  # type: ignore[attr-defined]


def _settings(row: dict[str, Any]) -> str:
    given = [f"{s['flag']}={_value(s['value'])}" for s in row["settings"] if s["given"]]
    return " ".join(given) or "defaults"


def _value(v: Any) -> str:
    return ("on" if v else "off") if isinstance(v, bool) else str(v)


def render(r: dict[str, Any], *, groups: bool = True) -> None:
    """The text answer (plain text, no rich: a light command): the model, a table of engines, then (``groups``)
    each engine's layer groups, levers and notes."""
    m, w, b = r["model"], r["weights"], r["budget"]
    out = [f"model: {m['source']} ({m['text_type']}, {m['layers']} layers" + (f", {m['dtype']}" if m["dtype"] else "")
           + ")",
           "weights: " + (format_size(w["bytes"]) + f" ({w['source']})" if w["bytes"] is not None
                          else f"unknown ({w['source']})")]
    out += [f"  {n}" for n in w.get("notes", [])]
    line = f"context: {r['ctx']:,} tokens"
    if b["for_caches"] is not None:
        how = "--memory less the weights and the overheads computed" if b["extras_counted"] else "--fit"
        line += f"   for the caches: {format_size(b['for_caches'])} ({how})"
    out += [line, ""]
    rows = [("engine", "caches", "outside", "fits", "longest", "settings")]
    for row in r["engines"]:
        if not row["runs"]:
            rows.append((row["engine"], "-", "-", "-", "-", f"cannot run: {row['why']}"))
            continue
        named = [e for e in row["extras"] if e["bytes"] is None]
        outside = ("unknown" if named and not row["extra_bytes"] else
                   format_size(row["extra_bytes"]) + (f" + {len(named)} unknown" if named else ""))
        fits = "-" if "fits" not in row else ("yes" if row["fits"] else f"no: needs {format_size(row['needs'])}")
        longest = "-" if "fit" not in row else _longest(row["fit"])
        rows.append((row["engine"], format_size(row["cache_bytes"]), outside, fits, longest, _settings(row)))
    widths = [max(len(r_[c]) for r_ in rows) for c in range(len(rows[0]))]
    right = {1, 2, 4}
    out += ["  ".join(cell.rjust(wd) if c in right else cell.ljust(wd) for c, (cell, wd) in
                      enumerate(zip(row_, widths, strict=True))).rstrip() for row_ in rows]
    for row in r["engines"]:
        if row["runs"] and groups:
            out += _engine_detail(row)
    if not groups and len(r["engines"]) > 1:
        out += ["", "each engine's layer groups, what buys more and its notes: --groups, or one --engine"]
    out += [f"note: {text}" for text in r["notes"]]
    sys.stdout.write("\n".join(out) + "\n")


def _longest(fit: dict[str, Any]) -> str:
    if fit["longest"] is None:
        return "none"
    return f"any (>= {fit['longest']:,})" if fit["unbounded"] else f"{fit['longest']:,}"


def _engine_detail(row: dict[str, Any]) -> list[str]:
    out = ["", f"{row['engine']} ({row['basis']}): {row['allocated']:,} cells allocated for {row['sequences']} "
               f"sequence(s)"]
    out.append(f"  settings ({row['version']}'s defaults unless given): " + ", ".join(
        f"{s['flag']} {_value(s['value'])}" + (" (given)" if s["given"] else "") for s in row["settings"]))
    for g in row["groups"]:
        parts = []
        if g["k_bytes"]:
            parts.append(f"K {format_size(g['k_bytes'])}" + (f" {g['k_type']}" if g["k_type"] else ""))
        if g["v_bytes"]:
            parts.append(f"V {format_size(g['v_bytes'])}" + (f" {g['v_type']}" if g["v_type"] else ""))
        if g["state_bytes"]:
            parts.append(f"state {format_size(g['state_bytes'])}")
        cells = f" x {g['cells']:,} cells" if g["cells"] else ""
        detail = ", ".join(parts) or "nothing cached"
        out.append(f"  {g['layers']} {g['kind']} layers{cells}: {detail}" + (f" ({g['note']})" if g["note"] else ""))
    for e in row["extras"]:
        size = format_size(e["bytes"]) if e["bytes"] is not None else "not computed"
        out.append(f"  outside the caches: {e['name']} {size}" + (f" ({e['why']})" if e["why"] else ""))
    if row.get("requests_at_once") is not None:
        out.append(f"  requests of {row['ctx']:,} tokens served at once from the budget: {row['requests_at_once']:g}")
    for lever in row.get("levers", []):
        out.append(f"  {lever['label']}: longest {_longest(lever)}")
    return out + [f"  note: {text}" for text in row["notes"]]

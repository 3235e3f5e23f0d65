"""``posenc plot``: heatmaps and charts of sinusoidal, RoPE, ALiBi and RoPE scaling, to PNG/SVG/PDF or the terminal.

Parsing and showing only: each command is one call of :mod:`posenc_cli.plots.drawings`, which checks every option
first (one ``error:`` line, exit 2, nothing written), computes, draws and writes. numpy and matplotlib load there,
when a plot is drawn (``posenc --help`` lists this module). The path written goes to stderr; stdout stays empty
unless ``--json`` (path and plotted parameters), ``--terminal`` or ``-o -``.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from posenc_cli.cli.memory import (
    ENGINE_ARGS,
    CtxOpt,
    EngineOpt,
    FitOpt,
    MemoryOpt,
    RevisionOpt,
    SetOpt,
    SourceArg,
    WeightsOpt,
    budget_of,
)
from posenc_cli.cli.options import LENGTHS, THETA_RANGE, context_length, one_of, split_names
from posenc_cli.cli.output import note, print_json
from posenc_cli.cli.scaling_options import GIVEN, scaling_options
from posenc_cli.plots import drawings
from posenc_cli.plots.drawings import (
    MAX_ALIBI_HEADS,
    MAX_ALIBI_SEQ,
    MAX_BASES,
    MAX_DECAY_WORK,
    MAX_DISTANCE,
    MAX_DPI,
    MAX_FEATURES,
    MAX_WIDTH,
    MIN_DPI,
    Drawn,
)
from posenc_cli.rope.rope_types import DEFAULT_THETA
from posenc_cli.rope.scaling import MAX_HEAD_DIM
from posenc_cli.scale.options import ScaleOptions
from posenc_cli.units import format_length, parse_size

plot_app = typer.Typer(
    add_completion=False,
    help="Draw positional encodings: heatmaps and charts to PNG, SVG or PDF, or straight into the terminal.",
    no_args_is_help=True,
)

OutputOpt = Annotated[str | None, typer.Option(
    "--output", "-o", help="File to write; .png, .svg or .pdf picks the format (- writes a PNG to stdout).",
    show_default="a descriptive .png name in the current folder")]
DpiOpt = Annotated[int, typer.Option(
    help=f"Dots per inch; also the pixel grid large heatmaps are averaged to; {MIN_DPI} to {MAX_DPI}.")]
TitleOpt = Annotated[str | None, typer.Option(help="Replace the figure title.", show_default="one naming the inputs")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the path written and the plotted parameters as JSON.")]
TerminalOpt = Annotated[bool, typer.Option(
    "--terminal", help="Draw into the terminal with coloured half-block cells instead of writing a file.")]
WidthOpt = Annotated[int | None, typer.Option(
    help=f"--terminal: columns to use; 1 to {MAX_WIDTH}.", show_default="the terminal's width")]
NoTerminalOpt = Annotated[bool, typer.Option("--terminal", hidden=True)]
HeadDimOpt = Annotated[int, typer.Option(help=f"Head dimension; even, 2 to {MAX_HEAD_DIM}.")]
ThetaOpt = Annotated[float, typer.Option(help=f"rope_theta; {THETA_RANGE}.")]


def _cmap_opt(default: str) -> Any:
    return typer.Option(help=f"Matplotlib colormap (default {default}); in the terminal: RdBu, coolwarm, viridis, "
                             "magma, gray (add _r to reverse).")


def _show(drawn: Drawn, as_json: bool) -> None:
    """The terminal rendering on stdout, or the JSON answer (stdout), or the path written (stderr)."""
    if drawn.renderable is not None:
        from rich.console import Console

        tty = sys.stdout.isatty()
        out = Console(file=sys.stdout, width=drawn.columns, force_terminal=True, highlight=False,
                      color_system="auto" if tty else "truecolor")
        out.print(drawn.renderable)
    elif as_json:
        print_json(drawn.result)
    else:
        note(f"wrote {drawn.shown}")


@plot_app.command()
def sinusoidal(
    max_len: Annotated[str, typer.Option(help=f"Positions: 512, 4k, 128k; {LENGTHS}.")] = "512",
    d_model: Annotated[int, typer.Option(help=f"Embedding dimension; 1 to {MAX_FEATURES:,}.")] = 128,
    theta: Annotated[float | None, typer.Option(
        help=f"Frequency base; {THETA_RANGE}.", show_default="10000.0")] = None,
    base: Annotated[float | None, typer.Option(hidden=True, help="--theta's old name, still read.")] = None,
    output: OutputOpt = None,
    dpi: DpiOpt = 150,
    cmap: Annotated[str, _cmap_opt("RdBu")] = "RdBu",
    title: TitleOpt = None,
    terminal: TerminalOpt = False,
    width: WidthOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Heatmap of the sinusoidal encoding (position x dimension); large inputs are averaged to the pixel grid.

    Example: posenc plot sinusoidal --max-len 512 --d-model 128
    """
    b, _ = one_of("theta", (theta, "--theta"), (base, "--base"))
    _show(drawings.sinusoidal(max_len, d_model, 10000.0 if b is None else b, output, dpi=dpi, cmap=cmap,
                              title=title, terminal=terminal, width=width, as_json=as_json), as_json)


@plot_app.command()
@scaling_options()
def rope(
    max_len: Annotated[str | None, typer.Option(
        help=f"Positions; {LENGTHS}.", show_default="4096, or the target with --method")] = None,
    head_dim: HeadDimOpt = 128,
    theta: ThetaOpt = DEFAULT_THETA,
    method: Annotated[str | None, typer.Option(
        help="Scaling method drawn beside the original: linear, ntk, dynamic, yarn, longrope, llama3.",
        show_default="none")] = None,
    scale_options: ScaleOptions = GIVEN,
    output: OutputOpt = None,
    dpi: DpiOpt = 150,
    cmap: Annotated[str, _cmap_opt("RdBu")] = "RdBu",
    title: TitleOpt = None,
    terminal: TerminalOpt = False,
    width: WidthOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """cos(pos * theta_i) over positions x pairs; with --method, the original and the scaled side by side.

    Example: posenc plot rope --max-len 16k --method yarn --factor 4 --original-max 4k
    """
    _show(drawings.rope(max_len, head_dim, theta, method, scale_options, output, dpi=dpi, cmap=cmap, title=title,
                        terminal=terminal, width=width, as_json=as_json), as_json)


@plot_app.command()
def alibi(
    heads: Annotated[int, typer.Option(help=f"Attention heads (official slopes); 1 to {MAX_ALIBI_HEADS}.")] = 8,
    seq_len: Annotated[str, typer.Option(help=f"Positions per side of each matrix; 1 to {MAX_ALIBI_SEQ}.")] = "32",
    output: OutputOpt = None,
    dpi: DpiOpt = 150,
    cmap: Annotated[str, _cmap_opt("viridis")] = "viridis",
    title: TitleOpt = None,
    terminal: TerminalOpt = False,
    width: WidthOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Each head's causal ALiBi bias matrix as small multiples, future keys masked, slope in each title.

    Example: posenc plot alibi --heads 8 --seq-len 32
    """
    _show(drawings.alibi(heads, seq_len, output, dpi=dpi, cmap=cmap, title=title, terminal=terminal, width=width,
                         as_json=as_json), as_json)


@plot_app.command()
@scaling_options("original_max factor target methods *")
def frequencies(
    head_dim: HeadDimOpt = 128,
    theta: ThetaOpt = DEFAULT_THETA,
    scale_options: ScaleOptions = GIVEN,
    methods: Annotated[str, typer.Option(
        help="Comma-separated: linear, ntk, dynamic, yarn, longrope, llama3.")] = "linear,ntk,yarn,llama3",
    output: OutputOpt = None,
    dpi: DpiOpt = 150,
    title: TitleOpt = None,
    as_json: JsonOpt = False,
    terminal: NoTerminalOpt = False,
) -> None:
    """Wavelength per pair (log scale) for each scaling method against the unscaled one.

    The original context length is a dashed line; YaRN's ramp and llama3's blended band are shaded.
    Example: posenc plot frequencies --head-dim 128 --theta 500000 --original-max 8k --factor 8
    """
    _show(drawings.frequencies(head_dim, theta, scale_options, methods, output, dpi=dpi, title=title,
                               as_json=as_json, terminal=terminal), as_json)


@plot_app.command()
def decay(
    head_dim: Annotated[int, typer.Option(help=f"Head dimension d; even, 2 to {MAX_HEAD_DIM}.")] = 128,
    theta: Annotated[str, typer.Option(
        help=f"1 to {MAX_BASES} bases, comma-separated: 10000,500000; each {THETA_RANGE}.")] = "10000",
    max_distance: Annotated[str, typer.Option(
        help=f"Largest relative distance: 1000, 32k; 1 to {format_length(MAX_DISTANCE)}, and distances x head_dim/2 "
             f"x bases at most 2^{MAX_DECAY_WORK.bit_length() - 1}.")] = "1000",
    log_x: Annotated[bool, typer.Option(help="Logarithmic distance axis.")] = False,
    output: OutputOpt = None,
    dpi: DpiOpt = 150,
    title: TitleOpt = None,
    as_json: JsonOpt = False,
    terminal: NoTerminalOpt = False,
) -> None:
    """RoFormer's long-term decay: the relative upper bound against relative distance, one curve per base.

    Example: posenc plot decay --head-dim 128 --theta 10000,500000
    """
    _show(drawings.decay(head_dim, theta, max_distance, log_x, output, dpi=dpi, title=title, as_json=as_json,
                         terminal=terminal), as_json)


@plot_app.command(context_settings=ENGINE_ARGS)
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
    output: OutputOpt = None,
    dpi: DpiOpt = 150,
    title: TitleOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The caches' bytes against context, one line per engine (dashed: what buys more), with the budget line.

    Example: posenc plot memory tests/corpus/gemma-3-27b-it.json --ctx 128k --memory 24GiB
    """
    from posenc_cli.plots.memory import memory as draw

    length = None if ctx is None else context_length(ctx)
    _show(draw(source, length, split_names(engine), output, extra=list(context.args), sets=set_ or [],
               budget=budget_of(fit, device), revision=revision, dpi=dpi, title=title, as_json=as_json,
               weights=None if weights is None else parse_size(weights, name="weights")), as_json)

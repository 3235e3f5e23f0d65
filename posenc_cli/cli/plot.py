"""``posenc plot``: heatmaps and charts of sinusoidal, RoPE, ALiBi and RoPE scaling, to PNG/SVG/PDF or the terminal.

numpy and matplotlib load inside the commands, when a plot is drawn (``posenc --help`` lists this module).
Each command validates every option first (one ``error:`` line, exit 2, nothing written), then computes the data
with :mod:`posenc_cli.plots.data`, builds the figure (:mod:`~posenc_cli.plots.figures`, or
:mod:`~posenc_cli.plots.terminal` for ``--terminal``), renders it to bytes and writes it (a file atomically;
``-o -``, a FIFO or a device directly). The path written goes to stderr; stdout stays empty unless ``--json``
(path and plotted parameters), ``--terminal`` or ``-o -``.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from posenc_cli.cli.options import LENGTHS, THETA_RANGE
from posenc_cli.cli.output import note, print_json
from posenc_cli.cli.scaling_options import GIVEN, scaling_options
from posenc_cli.errors import PosencError
from posenc_cli.files import output_kind, write_output
from posenc_cli.rope import scaling
from posenc_cli.rope.scaling import MAX_HEAD_DIM, check_head_dim, check_theta, rope_parameters
from posenc_cli.scale.options import ScaleOptions, scale_request
from posenc_cli.units import format_length, format_number, parse_length

if TYPE_CHECKING:
    from posenc_cli.rope.scaling import ScaleRequest

plot_app = typer.Typer(
    add_completion=False,
    help="Draw positional encodings: heatmaps and charts to PNG, SVG or PDF, or straight into the terminal.",
    no_args_is_help=True,
)

SUFFIXES = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
# Work caps. Large heatmaps are averaged to the pixel grid, so their cost grows with the grid (dpi) and the column
# count, not with the positions. Measured on one core at the caps, --dpi 1200: `plot sinusoidal --max-len 2048M
# --d-model 64k` 28 s (--d-model 1M took 287 s, so d_model is capped at 64k: 4x the widest shipped, 16384);
# `plot rope --max-len 2048M --head-dim 4096 --method yarn` 25 s; `plot alibi --heads 64 --seq-len 512` 35 s.
MAX_DPI = 1200
# Below about 6 dpi the smallest labels round to less than one pixel and FreeType refuses them (`plot alibi --dpi 5`
# and `plot frequencies --dpi 5` crashed); 10 leaves a margin
MIN_DPI = 10
MAX_FEATURES = 1 << 16  # columns of the sinusoidal heatmap (d_model)
MAX_ALIBI_HEADS = 64
MAX_ALIBI_SEQ = 512
MAX_DISTANCE = 1 << 20
#: decay sums every pair at every distance for every base: distances x pairs x bases. 2**20 distances x 512 pairs
#: (head_dim 1024), one base, took 27 s on one core; 2**29 is about that much work.
MAX_DECAY_WORK = 1 << 29
MAX_BASES = 16  # curves on one decay chart: more are not readable
MAX_WIDTH = 10_000  # --terminal columns

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


# ---------------------------------------------------------------- validation (stdlib only)


def _positive(value: int, name: str, limit: int | None = None) -> int:
    if value < 1:
        raise PosencError(f"{name} must be a positive integer, got {value}")
    if limit is not None and value > limit:
        raise PosencError(f"{name} {value} is too large to draw; the limit is {limit:,}")
    return value


def _format_number(x: float) -> str:
    return format_number(x)


def _length(text: str, name: str, limit: int | None = None) -> int:
    value = parse_length(text, name=name)
    if limit is not None and value > limit:
        raise PosencError(f"{name} {text} is too large to draw; the limit is {limit:,}")
    return value


@dataclass(frozen=True)
class Target:
    """Where the figure goes: a file (path + format) or the terminal."""

    path: Path | None
    fmt: str
    dpi: int
    terminal: bool
    as_json: bool


def _target(output: str | None, default_name: str, dpi: int, terminal: bool, as_json: bool,
            width: int | None = None) -> Target:
    """Check the output options before anything is computed: suffix, folder, permissions, conflicts."""
    if dpi < MIN_DPI:
        raise PosencError(f"--dpi {dpi} is too small to draw labels at; the smallest is {MIN_DPI}")
    _positive(dpi, "--dpi", MAX_DPI)
    if width is not None and not terminal:
        raise PosencError("--width sets the terminal width; it needs --terminal")
    if terminal:
        if output is not None:
            raise PosencError("--terminal draws in the terminal and writes no file; drop -o/--output")
        if as_json:
            raise PosencError("--terminal and --json both print to stdout; give one of them")
        if width is not None:
            _positive(width, "--width", MAX_WIDTH)
        return Target(None, "terminal", dpi, True, False)

    path = Path(output if output is not None else default_name)
    kind = output_kind(output if output is not None else default_name)
    suffix = path.suffix.lower()
    if kind != "file" and suffix not in SUFFIXES:
        suffix = ".png"  # stdout, a FIFO or a device has no suffix to go by: PNG, as the default name is
    if kind == "stdout" and as_json:
        raise PosencError(f"-o {output} writes to stdout, as --json does; give one of them")
    if suffix not in SUFFIXES:
        shown = f"suffix {path.suffix!r}" if path.suffix else "no suffix"
        raise PosencError(f"cannot tell the format of {path}: {shown}; use .png, .svg or .pdf")
    if kind == "file":
        folder = path.parent
        if not folder.is_dir():
            raise PosencError(f"cannot write {path}: folder {folder} does not exist")
        if path.exists() and not os.access(path, os.W_OK):
            raise PosencError(f"cannot write {path}: the file is read-only")
        if not os.access(Path(os.path.realpath(path)).parent, os.W_OK | os.X_OK):
            raise PosencError(f"cannot write {path}: folder {folder} is not writable")
    elif kind == "stream" and not os.access(path, os.W_OK):
        raise PosencError(f"cannot write {path}: not writable")
    return Target(path, SUFFIXES[suffix], dpi, False, as_json)


def _no_terminal(terminal: bool, kind: str) -> None:
    if terminal:
        raise PosencError(f"--terminal draws the heatmap kinds (sinusoidal, rope, alibi); {kind} is a line chart: "
                          "write it to a file with -o")


def _terminal_size(width: int | None) -> tuple[int, int]:
    """(columns, lines) for --terminal: --width, else the terminal's size (120 x 40 when not a terminal)."""
    size = shutil.get_terminal_size((120, 40))
    return (width or size.columns), max(size.lines, 12)


def _emit(target: Target, fig: Any, kind: str, params: dict[str, Any]) -> None:
    """Render to bytes, write them (:func:`posenc_cli.files.write_output`), report the path (stderr) or the JSON
    (stdout)."""
    from posenc_cli.plots.figures import figure_bytes

    assert target.path is not None
    data = figure_bytes(fig, target.fmt)
    shown = write_output(target.path, data)
    if target.as_json:
        title = fig.get_suptitle() or fig.axes[0].get_title()  # the title drawn, default or --title
        print_json({"path": str(target.path), "kind": kind, "format": target.fmt, "dpi": target.dpi,
                    "bytes": len(data), "title": title, **params})
    else:
        note(f"wrote {shown}")


def _print_terminal(renderable: Any, columns: int) -> None:
    from rich.console import Console

    tty = sys.stdout.isatty()
    out = Console(file=sys.stdout, width=columns, force_terminal=True, highlight=False,
                  color_system="auto" if tty else "truecolor")
    out.print(renderable)


def _grid_params(hm: Any) -> dict[str, Any]:
    return {"shape": list(hm.full_shape), "drawn_shape": list(hm.values.shape), "aggregated": hm.aggregated}


# ---------------------------------------------------------------- sinusoidal


@plot_app.command()
def sinusoidal(
    max_len: Annotated[str, typer.Option(help=f"Positions: 512, 4k, 128k; {LENGTHS}.")] = "512",
    d_model: Annotated[int, typer.Option(help=f"Embedding dimension; 1 to {MAX_FEATURES:,}.")] = 128,
    base: Annotated[float, typer.Option(help=f"Frequency base; {THETA_RANGE}.")] = 10000.0,
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
    n = _length(max_len, "--max-len")
    d = _positive(d_model, "--d-model", MAX_FEATURES)
    b = check_theta(base, "--base")
    target = _target(output, f"posenc-sinusoidal-{n}x{d}.png", dpi, terminal, as_json, width)
    params: dict[str, Any] = {"max_len": n, "d_model": d, "base": b, "cmap": cmap}
    from posenc_cli.plots.data import heatmap_data_sinusoidal, pixel_grid

    if target.terminal:
        from posenc_cli.plots.terminal import terminal_heatmap, terminal_palette

        terminal_palette(cmap)
        columns, lines = _terminal_size(width)
        hm = heatmap_data_sinusoidal(n, d, 2 * (lines - 6), columns, base=b)
        _print_terminal(terminal_heatmap([hm], cmap=cmap, title=title), columns)
        return
    from posenc_cli.plots.figures import check_cmap, heatmap_figure

    check_cmap(cmap)
    hm = heatmap_data_sinusoidal(n, d, *pixel_grid(dpi), base=b)
    fig = heatmap_figure([hm], cmap=cmap, dpi=dpi, title=title)
    _emit(target, fig, "sinusoidal", {**params, **_grid_params(hm)})


# ---------------------------------------------------------------- rope


@plot_app.command()
@scaling_options()
def rope(
    max_len: Annotated[str | None, typer.Option(
        help=f"Positions; {LENGTHS}.", show_default="4096, or the target with --method")] = None,
    head_dim: HeadDimOpt = 128,
    theta: ThetaOpt = 10000.0,
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
    hd = check_head_dim(head_dim)
    th = check_theta(theta)
    req = None
    if method is not None:
        req = scale_request(method, scale_options, theta=th, head_dim=hd)
    else:
        so = scale_options
        given = [flag for flag, value in (("--factor", so.factor), ("--original-max", so.original_max),
                                          ("--target", so.target), ("--short-factor", so.short_factor),
                                          ("--long-factor", so.long_factor)) if value is not None]
        if given:
            raise PosencError(f"{given[0]} describes a scaling method; add --method (linear, ntk, dynamic, yarn, "
                              "longrope or llama3)")
    prf = 1.0 if scale_options.partial_rotary_factor is None else scale_options.partial_rotary_factor
    if req is None and (not math.isfinite(prf) or not 0 < prf <= 1 or int(hd * prf) < 2 or int(hd * prf) % 2):
        raise PosencError(f"--partial-rotary-factor {prf:g} must be in (0, 1] and leave an even rotary dim")
    n = _length(max_len, "--max-len") if max_len is not None else (req.target if req else 4096)
    suffix = f"-{req.method}-x{_format_number(req.factor)}" if req else ""
    tgt = _target(output, f"posenc-rope-{n}x{hd}{suffix}.png", dpi, terminal, as_json, width)
    params: dict[str, Any] = {"max_len": n, "head_dim": hd, "theta": th, "cmap": cmap, "method": method}
    if req is not None:
        params.update(factor=req.factor, original_max=req.original_max, target=req.target,
                      rope_parameters=rope_parameters(req))
    from posenc_cli.plots.data import pixel_grid, rope_cos_data

    if tgt.terminal:
        from posenc_cli.plots.terminal import terminal_heatmap, terminal_palette

        terminal_palette(cmap)
        columns, lines = _terminal_size(width)
        panels = 2 if req else 1
        panel_cols = max(4, (columns - 2 * (panels - 1)) // panels)
        maps = rope_cos_data(n, hd, th, 2 * (lines - 8), panel_cols, partial_rotary_factor=prf, request=req)
        _print_terminal(terminal_heatmap(maps, cmap=cmap, title=title or _rope_title(hd, n, req)), columns)
        return
    from posenc_cli.plots.figures import check_cmap, heatmap_figure

    check_cmap(cmap)
    maps = rope_cos_data(n, hd, th, *pixel_grid(dpi, 2 if req else 1), partial_rotary_factor=prf, request=req)
    fig = heatmap_figure(maps, cmap=cmap, dpi=dpi, title=title or _rope_title(hd, n, req))
    params["panels"] = [{"title": m.title, **_grid_params(m)} for m in maps]
    _emit(tgt, fig, "rope", params)


def _rope_title(head_dim: int, n: int, req: ScaleRequest | None) -> str:
    what = "RoPE cos(pos * theta_i)"
    return f"{what}: head dim {head_dim}, {n:,} positions" + (", original vs scaled" if req else "")


# ---------------------------------------------------------------- alibi


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
    h = _positive(heads, "--heads", MAX_ALIBI_HEADS)
    n = _length(seq_len, "--seq-len", MAX_ALIBI_SEQ)
    tgt = _target(output, f"posenc-alibi-{h}x{n}.png", dpi, terminal, as_json, width)
    from posenc_cli.plots.data import alibi_data

    if tgt.terminal:
        from posenc_cli.plots.terminal import terminal_alibi, terminal_palette

        terminal_palette(cmap)
        columns, _ = _terminal_size(width)
        _print_terminal(terminal_alibi(alibi_data(h, n), columns, cmap=cmap, title=title), columns)
        return
    from posenc_cli.plots.figures import alibi_figure, check_cmap

    check_cmap(cmap)
    data = alibi_data(h, n)
    fig = alibi_figure(data, cmap=cmap, dpi=dpi, title=title)
    _emit(tgt, fig, "alibi", {"heads": h, "seq_len": n, "cmap": cmap, "slopes": data.slopes.tolist()})


# ---------------------------------------------------------------- frequencies


@plot_app.command()
@scaling_options("original_max factor target methods *")
def frequencies(
    head_dim: HeadDimOpt = 128,
    theta: ThetaOpt = 10000.0,
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
    _no_terminal(terminal, "frequencies")
    hd = check_head_dim(head_dim)
    th = check_theta(theta)
    names = [m.strip() for m in methods.split(",") if m.strip()]
    if not names:
        raise PosencError("--methods is empty; give e.g. linear,ntk,yarn,llama3")
    for m in names:
        if m not in scaling.METHODS:
            raise PosencError(f"method {m!r} is not known; use one of: {', '.join(scaling.METHODS)}")
    if len(set(names)) != len(names):
        raise PosencError(f"--methods lists a method twice: {methods}")
    requests = [scale_request(m, scale_options, theta=th, head_dim=hd) for m in names]
    first = requests[0]
    default = f"posenc-frequencies-d{hd}-theta{_format_number(th)}-x{_format_number(first.factor)}.png"
    tgt = _target(output, default, dpi, False, as_json)
    from posenc_cli.plots.data import frequency_chart_data
    from posenc_cli.plots.figures import frequency_figure

    chart = frequency_chart_data(requests)
    fig = frequency_figure(chart, dpi=dpi, title=title)
    params = {"head_dim": hd, "theta": th, "original_max": first.original_max, "target": first.target,
              "factor": first.factor, "methods": names,
              "rope_parameters": {c.method: c.rope_parameters for c in chart.curves},
              "yarn_range": list(chart.yarn_range) if chart.yarn_range else None,
              "llama3_band": list(chart.llama3_band) if chart.llama3_band else None}
    _emit(tgt, fig, "frequencies", params)


# ---------------------------------------------------------------- decay


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
    _no_terminal(terminal, "decay")
    hd = check_head_dim(head_dim)
    bases: list[float] = []
    for part in theta.split(","):
        try:
            value = float(part)
        except ValueError:
            raise PosencError(f"--theta {part.strip()!r} is not a number; give e.g. 10000,500000") from None
        bases.append(check_theta(value))
    if len(set(bases)) != len(bases):
        raise PosencError(f"--theta lists a base twice: {theta}")
    if len(bases) > MAX_BASES:
        raise PosencError(f"--theta lists {len(bases)} bases; allowed 1 to {MAX_BASES}")
    r = _length(max_distance, "--max-distance", MAX_DISTANCE)
    work = (r + 1) * (hd // 2) * len(bases)
    if work > MAX_DECAY_WORK:
        raise PosencError(f"--max-distance {max_distance} x {hd // 2} pairs x {len(bases)} bases is {work:,} terms; "
                          f"allowed up to 2^{MAX_DECAY_WORK.bit_length() - 1} = {MAX_DECAY_WORK:,} (about 30 s): "
                          "shorten the distance, the head dim or the list of bases")
    names = "-".join(_format_number(b) for b in bases)
    tgt = _target(output, f"posenc-decay-d{hd}-theta{names}.png", dpi, False, as_json)
    from posenc_cli.plots.data import decay_bound
    from posenc_cli.plots.figures import decay_figure

    curves = [decay_bound(hd, b, r) for b in bases]
    fig = decay_figure(curves, dpi=dpi, title=title, log_x=log_x)
    _emit(tgt, fig, "decay", {"head_dim": hd, "theta": bases, "max_distance": r, "log_x": log_x})

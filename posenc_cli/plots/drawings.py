"""Each ``posenc plot`` kind from its options to what is shown: :func:`sinusoidal`, :func:`rope`, :func:`alibi`,
:func:`frequencies` and :func:`decay`.

Every option is checked first (one :class:`PosencError`, nothing written), then the data are computed
(:mod:`.data`), the figure built (:mod:`.figures`, or :mod:`.terminal` for the terminal), rendered to bytes and
written (a file atomically; ``-o -``, a FIFO or a device directly). A :class:`Drawn` says what happened: the rich
renderable for the terminal, or the path written with the plotted parameters (the ``--json`` answer). Errors name
their fields (``{dpi}``), which the command line renders as its options.

Only the standard library and the stdlib-only request modules load with this module (``posenc --help`` lists the
command); numpy, matplotlib and rich load inside the functions, when something is drawn.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from posenc_cli.errors import PosencError
from posenc_cli.files import output_kind, write_output
from posenc_cli.rope import scaling
from posenc_cli.rope.rope_types import METHODS
from posenc_cli.rope.scaling import check_head_dim, check_theta, rope_parameters
from posenc_cli.scale.options import ScaleOptions, scale_request
from posenc_cli.units import format_number, parse_length

if TYPE_CHECKING:
    from posenc_cli.rope.scaling import ScaleRequest

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
MAX_WIDTH = 10_000  # terminal columns


class Target(NamedTuple):
    """Where the figure goes: a file (path + format) or the terminal (``width`` columns, None: the terminal's)."""

    path: Path | None
    fmt: str
    dpi: int
    terminal: bool
    as_json: bool
    width: int | None = None


class Drawn(NamedTuple):
    """What a plot showed: ``renderable`` for the terminal (``columns`` wide), or ``shown`` (the path written, as
    :func:`posenc_cli.files.write_output` names it) with ``result``, the path and plotted parameters as JSON."""

    renderable: Any = None
    columns: int = 0
    shown: str | None = None
    result: dict[str, Any] | None = None


def _positive(value: int, field: str, limit: int | None = None) -> int:
    if value < 1:
        raise PosencError(f"{{{field}}} must be a positive integer, got {value}", field)
    if limit is not None and value > limit:
        raise PosencError(f"{{{field}}} {value} is too large to draw; the limit is {limit:,}", field)
    return value


def _length(text: str, field: str, limit: int | None = None) -> int:
    value = parse_length(text, name="--" + field.replace("_", "-"))
    if limit is not None and value > limit:
        raise PosencError(f"{{{field}}} {text} is too large to draw; the limit is {limit:,}", field)
    return value


def target(output: str | None, default_name: str, dpi: int, terminal: bool, as_json: bool,
           width: int | None = None) -> Target:
    """Check the output options before anything is computed: suffix, folder, permissions, conflicts."""
    if dpi < MIN_DPI:
        raise PosencError(f"{{dpi}} {dpi} is too small to draw labels at; the smallest is {MIN_DPI}", "dpi")
    _positive(dpi, "dpi", MAX_DPI)
    if width is not None and not terminal:
        raise PosencError("{width} sets the terminal width; it needs {terminal}", "width", "terminal")
    if terminal:
        if output is not None:
            raise PosencError("{terminal} draws in the terminal and writes no file; drop -o/--output", "terminal")
        if as_json:
            raise PosencError("{terminal} and {json} both print to stdout; give one of them", "terminal", "json")
        if width is not None:
            _positive(width, "width", MAX_WIDTH)
        return Target(None, "terminal", dpi, True, False, width)

    path = Path(output if output is not None else default_name)
    kind = output_kind(output if output is not None else default_name)
    suffix = path.suffix.lower()
    if kind != "file" and suffix not in SUFFIXES:
        suffix = ".png"  # stdout, a FIFO or a device has no suffix to go by: PNG, as the default name is
    if kind == "stdout" and as_json:
        raise PosencError(f"-o {output} writes to stdout, as {{json}} does; give one of them", "json")
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
        raise PosencError(f"{{terminal}} draws the heatmap kinds (sinusoidal, rope, alibi); {kind} is a line chart: "
                          "write it to a file with -o", "terminal")


def _terminal_size(width: int | None) -> tuple[int, int]:
    """(columns, lines) for the terminal: ``width``, else the terminal's size (120 x 40 when not a terminal)."""
    size = shutil.get_terminal_size((120, 40))
    return (width or size.columns), max(size.lines, 12)


def _emit(tgt: Target, fig: Any, kind: str, params: dict[str, Any]) -> Drawn:
    """Render to bytes, write them (:func:`posenc_cli.files.write_output`); the JSON names the title drawn."""
    from posenc_cli.plots.figures import figure_bytes

    assert tgt.path is not None
    data = figure_bytes(fig, tgt.fmt)
    shown = write_output(tgt.path, data)
    title = fig.get_suptitle() or fig.axes[0].get_title()  # the title drawn, default or --title
    return Drawn(shown=shown, result={"path": str(tgt.path), "kind": kind, "format": tgt.fmt, "dpi": tgt.dpi,
                                      "bytes": len(data), "title": title, **params})


def _grid_params(hm: Any) -> dict[str, Any]:
    return {"shape": list(hm.full_shape), "drawn_shape": list(hm.values.shape), "aggregated": hm.aggregated}


def sinusoidal(max_len: str, d_model: int, theta: float, output: str | None, *, dpi: int, cmap: str,
               title: str | None, terminal: bool, width: int | None, as_json: bool) -> Drawn:
    """Heatmap of the sinusoidal encoding (position x dimension); large inputs averaged to the pixel grid."""
    n = _length(max_len, "max_len")
    d = _positive(d_model, "d_model", MAX_FEATURES)
    b = check_theta(theta)
    tgt = target(output, f"posenc-sinusoidal-{n}x{d}.png", dpi, terminal, as_json, width)
    params: dict[str, Any] = {"max_len": n, "d_model": d, "base": b, "cmap": cmap}
    from posenc_cli.plots.data import heatmap_data_sinusoidal, pixel_grid

    if tgt.terminal:
        from posenc_cli.plots.terminal import terminal_heatmap, terminal_palette

        terminal_palette(cmap)
        columns, lines = _terminal_size(width)
        hm = heatmap_data_sinusoidal(n, d, 2 * (lines - 6), columns, base=b)
        return Drawn(terminal_heatmap([hm], cmap=cmap, title=title), columns)
    from posenc_cli.plots.figures import check_cmap, heatmap_figure

    check_cmap(cmap)
    hm = heatmap_data_sinusoidal(n, d, *pixel_grid(dpi), base=b)
    fig = heatmap_figure([hm], cmap=cmap, dpi=dpi, title=title)
    return _emit(tgt, fig, "sinusoidal", {**params, **_grid_params(hm)})


def rope(max_len: str | None, head_dim: int, theta: float, method: str | None, options: ScaleOptions,
         output: str | None, *, dpi: int, cmap: str, title: str | None, terminal: bool, width: int | None,
         as_json: bool) -> Drawn:
    """cos(pos * theta_i) over positions x pairs; with ``method``, the original and the scaled side by side."""
    hd = check_head_dim(head_dim)
    th = check_theta(theta)
    req = None
    if method is not None:
        req = scale_request(method, options, theta=th, head_dim=hd)
    else:
        # every scaling option but the rotated share describes a method's scaling, meaningless without one
        given = [f.name for f in fields(options) if f.name != "partial_rotary_factor"
                 and getattr(options, f.name) is not None]
        if given:
            *others, last = METHODS
            methods = f"{', '.join(others)} or {last}"
            raise PosencError(f"{{{given[0]}}} describes a scaling method; add {{method}} ({methods})", given[0],
                              "method")
    prf = 1.0 if options.partial_rotary_factor is None else options.partial_rotary_factor
    if req is None and (not math.isfinite(prf) or not 0 < prf <= 1 or int(hd * prf) < 2 or int(hd * prf) % 2):
        raise PosencError(f"{{partial_rotary_factor}} {prf:g} must be in (0, 1] and leave an even rotary dim",
                          "partial_rotary_factor")
    n = _length(max_len, "max_len") if max_len is not None else (req.target if req else 4096)
    suffix = f"-{req.method}-x{format_number(req.factor)}" if req else ""
    tgt = target(output, f"posenc-rope-{n}x{hd}{suffix}.png", dpi, terminal, as_json, width)
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
        return Drawn(terminal_heatmap(maps, cmap=cmap, title=title or _rope_title(hd, n, req)), columns)
    from posenc_cli.plots.figures import check_cmap, heatmap_figure

    check_cmap(cmap)
    maps = rope_cos_data(n, hd, th, *pixel_grid(dpi, 2 if req else 1), partial_rotary_factor=prf, request=req)
    fig = heatmap_figure(maps, cmap=cmap, dpi=dpi, title=title or _rope_title(hd, n, req))
    params["panels"] = [{"title": m.title, **_grid_params(m)} for m in maps]
    return _emit(tgt, fig, "rope", params)


def _rope_title(head_dim: int, n: int, req: ScaleRequest | None) -> str:
    what = "RoPE cos(pos * theta_i)"
    return f"{what}: head dim {head_dim}, {n:,} positions" + (", original vs scaled" if req else "")


def alibi(heads: int, seq_len: str, output: str | None, *, dpi: int, cmap: str, title: str | None, terminal: bool,
          width: int | None, as_json: bool) -> Drawn:
    """Each head's causal ALiBi bias matrix as small multiples, future keys masked, slope in each title."""
    h = _positive(heads, "heads", MAX_ALIBI_HEADS)
    n = _length(seq_len, "seq_len", MAX_ALIBI_SEQ)
    tgt = target(output, f"posenc-alibi-{h}x{n}.png", dpi, terminal, as_json, width)
    from posenc_cli.plots.data import alibi_data

    if tgt.terminal:
        from posenc_cli.plots.terminal import terminal_alibi, terminal_palette

        terminal_palette(cmap)
        columns, _ = _terminal_size(width)
        return Drawn(terminal_alibi(alibi_data(h, n), columns, cmap=cmap, title=title), columns)
    from posenc_cli.plots.figures import alibi_figure, check_cmap

    check_cmap(cmap)
    data = alibi_data(h, n)
    fig = alibi_figure(data, cmap=cmap, dpi=dpi, title=title)
    return _emit(tgt, fig, "alibi", {"heads": h, "seq_len": n, "cmap": cmap, "slopes": data.slopes.tolist()})


def frequencies(head_dim: int, theta: float, options: ScaleOptions, methods: str, output: str | None, *, dpi: int,
                title: str | None, as_json: bool, terminal: bool) -> Drawn:
    """Wavelength per pair (log scale) for each scaling method against the unscaled one."""
    _no_terminal(terminal, "frequencies")
    hd = check_head_dim(head_dim)
    th = check_theta(theta)
    names = [m.strip() for m in methods.split(",") if m.strip()]
    if not names:
        raise PosencError("{methods} is empty; give e.g. linear,ntk,yarn,llama3", "methods")
    for m in names:
        if m not in scaling.METHODS:
            raise PosencError(f"method {m!r} is not known; use one of: {', '.join(scaling.METHODS)}")
    if len(set(names)) != len(names):
        raise PosencError(f"{{methods}} lists a method twice: {methods}", "methods")
    requests = [scale_request(m, options, theta=th, head_dim=hd) for m in names]
    first = requests[0]
    default = f"posenc-frequencies-d{hd}-theta{format_number(th)}-x{format_number(first.factor)}.png"
    tgt = target(output, default, dpi, False, as_json)
    from posenc_cli.plots.data import frequency_chart_data
    from posenc_cli.plots.figures import frequency_figure

    chart = frequency_chart_data(requests)
    fig = frequency_figure(chart, dpi=dpi, title=title)
    params = {"head_dim": hd, "theta": th, "original_max": first.original_max, "target": first.target,
              "factor": first.factor, "methods": names,
              "rope_parameters": {c.method: c.rope_parameters for c in chart.curves},
              "yarn_range": list(chart.yarn_range) if chart.yarn_range else None,
              "llama3_band": list(chart.llama3_band) if chart.llama3_band else None}
    return _emit(tgt, fig, "frequencies", params)


def decay(head_dim: int, theta: str, max_distance: str, log_x: bool, output: str | None, *, dpi: int,
          title: str | None, as_json: bool, terminal: bool) -> Drawn:
    """RoFormer's long-term decay: the relative upper bound against relative distance, one curve per base in
    ``theta`` (a comma list)."""
    _no_terminal(terminal, "decay")
    hd = check_head_dim(head_dim)
    bases: list[float] = []
    for part in theta.split(","):
        try:
            value = float(part)
        except ValueError:
            raise PosencError(f"{{theta}} {part.strip()!r} is not a number; give e.g. 10000,500000", "theta") from None
        bases.append(check_theta(value))
    if len(set(bases)) != len(bases):
        raise PosencError(f"{{theta}} lists a base twice: {theta}", "theta")
    if len(bases) > MAX_BASES:
        raise PosencError(f"{{theta}} lists {len(bases)} bases; allowed 1 to {MAX_BASES}", "theta")
    r = _length(max_distance, "max_distance", MAX_DISTANCE)
    work = (r + 1) * (hd // 2) * len(bases)
    if work > MAX_DECAY_WORK:
        raise PosencError(f"{{max_distance}} {max_distance} x {hd // 2} pairs x {len(bases)} bases is {work:,} terms; "
                          f"allowed up to 2^{MAX_DECAY_WORK.bit_length() - 1} = {MAX_DECAY_WORK:,} (about 30 s): "
                          "shorten the distance, the head dim or the list of bases", "max_distance")
    names = "-".join(format_number(b) for b in bases)
    tgt = target(output, f"posenc-decay-d{hd}-theta{names}.png", dpi, False, as_json)
    from posenc_cli.plots.data import decay_bound
    from posenc_cli.plots.figures import decay_figure

    curves = [decay_bound(hd, b, r) for b in bases]
    fig = decay_figure(curves, dpi=dpi, title=title, log_x=log_x)
    return _emit(tgt, fig, "decay", {"head_dim": hd, "theta": bases, "max_distance": r, "log_x": log_x})

"""``posenc verify``: parse options, call :mod:`posenc_cli.rope.verify` (``--config``:
:mod:`posenc_cli.models.verification`), render its report. No math here.

numpy and the core load inside the command, so registering it costs ``posenc pick`` nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from posenc_cli.cli.options import THETA_RANGE
from posenc_cli.cli.output import console, print_json
from posenc_cli.errors import ExitCode, PosencError
from posenc_cli.models.config_keys import declared_dtype
from posenc_cli.models.sources import describe_source, read_source
from posenc_cli.rope.rope_types import DEFAULT_THETA
from posenc_cli.rope.scaling import MAX_HEAD_DIM, check_head_dim, check_theta
from posenc_cli.units import check_int, check_number, format_length, parse_length

# Work caps: the cost of a run grows with these (the core's 1 GiB workspace check also bounds trials x head_dim).
# The dtype scan for where positions stop being distinct grows faster than linearly in --max-position: on one core
# (2 vCPU box) float64 took 6.7 s at 128M, 20 s at 256M and 46 s at 512M; at the caps, --head-dim 4096 --max-position
# 128M took 12.5 s and --trials 1024 --head-dim 500 --max-position 128M 13.5 s.
MAX_POSITION = 1 << 27
MAX_TRIALS = 1024
MAX_SEED = 2**64 - 1  # numpy's generators take any non-negative int; 64 bits is what a seed is written down as

if TYPE_CHECKING:
    from posenc_cli.models.verification import ModelVerifyReport
    from posenc_cli.rope.verify import Precision, VerifyReport


def verify(
    config: Annotated[str | None, typer.Option(
        help="Check this model's RoPE instead: a config.json (or - for stdin), a model folder, a Hub id or a GGUF "
             "file; its theta, scaling, rotary dim and attention factor, per layer group, up to its window.",
        show_default="none: the generic check")] = None,
    revision: Annotated[str | None, typer.Option(
        help="Hub revision for a Hub id in --config.", show_default="main")] = None,
    head_dim: Annotated[int | None, typer.Option(
        help=f"Features per head; even, 2 to {MAX_HEAD_DIM}.", show_default="128")] = None,
    theta: Annotated[float | None, typer.Option(
        help=f"RoPE base (rope_theta); {THETA_RANGE}.", show_default="10000")] = None,
    base: Annotated[float | None, typer.Option("--base", hidden=True, help="The old name of --theta.")] = None,
    layout: Annotated[str | None, typer.Option(
        help="interleaved, rotate-half or both.", show_default="both")] = None,
    trials: Annotated[int, typer.Option(help=f"Random q,k pairs per check; 1 to {MAX_TRIALS}.")] = 16,
    max_position: Annotated[str | None, typer.Option(
        help=f"Largest position tried: 4096, 128k, 1M (k=1024); 2 to {format_length(MAX_POSITION)}.",
        show_default="1M, or the model's extended context")] = None,
    dtype: Annotated[str | None, typer.Option(
        help="float64, float32, bfloat16 or float16.",
        show_default="float64, or the model's dtype, else bfloat16")] = None,
    seed: Annotated[int, typer.Option(help="Random seed; 0 to 2^64-1.")] = 0,
    tolerance: Annotated[float | None, typer.Option(
        help="Largest relative error that passes; greater than 0, at most 1.",
        show_default="1e-4, or the dtype's epsilon when larger")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False,
) -> None:
    """Prove RoPE's relative-distance property numerically and show where each dtype breaks it.

    Exit 0 when every check passes, 1 when one fails.
    """
    theta, theta_flag = _one_of(("--theta", theta), ("--base", base))
    window = parse_length(max_position, name="--max-position") if max_position is not None else None
    if window is not None and not 2 <= window <= MAX_POSITION:
        raise PosencError(f"--max-position {max_position} is out of range; allowed 2 to {format_length(MAX_POSITION)}"
                          " (longer windows take minutes to scan)")
    check_int(trials, "--trials", 1, MAX_TRIALS)
    check_int(seed, "--seed", 0, MAX_SEED)
    if head_dim is not None:
        check_head_dim(head_dim)
    if theta is not None:
        check_theta(theta, theta_flag)
    if tolerance is not None:
        check_number(tolerance, "--tolerance", 0.0, 1.0)
    report: VerifyReport | ModelVerifyReport
    if config is not None:
        given = [name for name, value in (("--head-dim", head_dim), (theta_flag, theta), ("--layout", layout))
                 if value is not None]
        if given:
            raise PosencError(f"{given[0]} does not apply with --config: the model's config sets it")
    elif revision is not None:
        raise PosencError("--revision applies to a Hub id given with --config")
    if config is not None:
        report = _run_model(config, revision, dtype, window, tolerance, trials, seed)
    else:
        report = _run_generic(head_dim, theta, layout, trials, window, dtype, seed, tolerance)
    if as_json:
        print_json(report.as_dict())
    elif config is not None:
        _render_model(report)  # type: ignore[arg-type]
    else:
        _render_generic(report)  # type: ignore[arg-type]
    raise typer.Exit(ExitCode.OK if report.passed else ExitCode.CHECK_FAILED)


def _one_of(*spellings: tuple[str, float | None]) -> tuple[float | None, str]:
    """The value of an option given under one of its spellings (the name first, then hidden old names), and the
    spelling used (for messages); two spellings at once is a mistake."""
    given = [(flag, value) for flag, value in spellings if value is not None]
    if len(given) > 1:
        raise PosencError(f"{given[1][0]} is the old name of {spellings[0][0]}; give one of them")
    flag, value = given[0] if given else spellings[0]
    return value, flag


#: Layout spellings the option accepts beside the layouts' own names.
_LAYOUT_ALIASES = {"half": "rotate-half"}


def _run_generic(head_dim: int | None, theta: float | None, layout: str | None, trials: int, window: int | None,
                 dtype: str | None, seed: int, tolerance: float | None) -> VerifyReport:
    from posenc_cli.rope import verify as core
    from posenc_cli.rope.encodings import LAYOUTS

    layout = _LAYOUT_ALIASES.get(layout or "both", layout or "both")
    if layout == "both":
        layouts = LAYOUTS
    elif layout in LAYOUTS:
        layouts = (layout,)
    else:
        raise PosencError(f"--layout {layout!r} is not known; use interleaved, rotate-half or both")
    settings = core.VerifySettings(
        head_dim=128 if head_dim is None else head_dim, base=DEFAULT_THETA if theta is None else theta, layouts=layouts,
        trials=trials, max_position=window or 1 << 20, dtype=dtype or "float64", seed=seed, tolerance=tolerance,
    )
    return core.run(settings)


def _run_model(source: str, revision: str | None, dtype: str | None, window: int | None,
               tolerance: float | None, trials: int, seed: int) -> ModelVerifyReport:
    from posenc_cli.models import verification as core

    src = read_source(source, revision=revision)
    cfg = src.config
    if dtype is not None:
        name, where = dtype, "--dtype"
    else:
        declared, where = declared_dtype(cfg)
        name = declared or "bfloat16"
        if declared is None:
            where += "; bfloat16 assumed"
    return core.run_model(describe_source(src), dtype=name, dtype_source=where, max_position=window,
                          tolerance=tolerance, trials=trials, seed=seed)


def _error_cell(value: float, floor: float) -> str:
    """An error as printed: below the rounding floor its digits belong to the CPU, so the floor is printed."""
    if value != value or value == float("inf"):
        return "inf"
    return f"< {floor:.1e}" if value < floor else f"{value:.2e}"


def _position_cell(value: int | None, approximate: bool = False) -> str:
    if value is None:
        return "none"
    return f"~{value:,}" if approximate else f"{value:,}"


def _precision_table(p: Precision, title: str) -> Any:
    from rich.table import Table

    table = Table(title=title)
    table.add_column("position", justify="right")
    for c in p.columns:
        table.add_column(c.label, justify="right")
    shown = _shown_rows(p.positions)
    for i in shown:
        table.add_row(f"{p.positions[i]:,}", *(_error_cell(c.errors[i], c.noise_floor) for c in p.columns))
    table.add_section()
    table.add_row("identical to previous from", *(_position_cell(c.first_identical) for c in p.columns))
    table.add_row(f"exceeds {p.tolerance:g} from", *(_position_cell(c.exceeds_from, True) for c in p.columns))
    return table


def _shown_rows(positions: list[int]) -> list[int]:
    """Row indices for the printed table: powers of ten and the window's top (JSON carries the whole grid)."""
    keep = [i for i, p in enumerate(positions) if _is_power_of_ten(p)]
    return keep + [len(positions) - 1] if positions and len(positions) - 1 not in keep else keep


def _is_power_of_ten(n: int) -> bool:
    while n % 10 == 0 and n > 1:
        n //= 10
    return n == 1


def _legend(floors: list[float]) -> str:
    bounds = ", ".join(f"{f:.1e}" for f in sorted(set(floors)))
    return (f"Errors are relative to |q||k|. '< x' marks an error below the rounding bound x (terms x eps; here "
            f"{bounds}): its digits differ between CPUs. 'exceeds from' is the first of 8 positions per octave "
            "that does.")


def _say(out: Any, line: str) -> None:
    """A sentence on the results console: never wrapped, never read as rich markup ([layer] names)."""
    out.print(line, markup=False, soft_wrap=True)


def _render_generic(report: VerifyReport) -> None:
    from rich.table import Table

    s = report.settings
    out = console()
    half = s.dtype != s.check_dtype.name
    where = f" (checks in {s.check_dtype.name})" if half else ""
    table = Table(title=f"posenc verify: head_dim={s.head_dim} theta={s.base:g} dtype={s.dtype}{where} tol={s.tol:g}")
    for col in ("check", "result", "max rel err", "detail"):
        table.add_column(col)
    for c in report.checks:
        table.add_row(c.name, "pass" if c.passed else "FAIL", _error_cell(c.max_rel_error, report.noise_floor),
                      c.detail)
    out.print(table)
    p = report.precision
    title = ("relative-distance error by absolute position" if not half
             else f"where {s.dtype} breaks RoPE: relative-distance error by absolute position")
    out.print(_precision_table(p, title))
    _say(out, _legend([report.noise_floor] + [c.noise_floor for c in p.columns]))
    for line in p.advice:
        _say(out, line)
    _say(out, "all checks passed" if report.passed else "some checks FAILED")


def _render_model(report: ModelVerifyReport) -> None:
    out = console()
    _say(out, f"model_type: {report.model_type}   dtype: {report.dtype} ({report.dtype_source})   "
              f"tolerance: {report.tolerance:g}")
    for g in report.groups:
        title = (f"{g.layer}: {g.rope_type}, theta {g.theta:g}, rotary dim {g.rotary_dim} of {g.head_dim}, "
                 f"attention factor {g.attention_factor:.6g}, up to {g.max_position:,}")
        out.print(_precision_table(g.precision, title))
        for line in g.precision.advice:
            _say(out, f"{g.layer}: {line}")
    _say(out, _legend([c.noise_floor for g in report.groups for c in g.precision.columns]))
    _say(out, "passed: the way transformers runs it holds up to the window" if report.passed
         else "FAILED: the way transformers runs it breaks within the window (see above)")

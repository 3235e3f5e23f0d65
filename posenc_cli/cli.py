"""posenc's command line: parse options, call the core, render results. No math lives here.

Results go to stdout (JSON through ``json.dumps``, tables through a stdout console); messages go to
stderr. Every user mistake ends as one ``error: ...`` line and exit code 2 (see :class:`PosencGroup`).
numpy, matplotlib and the core modules are imported inside the commands that need them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer._click.exceptions import ClickException
from typer.core import TyperGroup

from posenc_cli import __version__
from posenc_cli.errors import ExitCode, PosencError

if TYPE_CHECKING:
    from rich.console import Console


class PosencGroup(TyperGroup):
    """Runs a command and turns any usage error or :class:`PosencError` into one ``error:`` line."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            rv = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        except PosencError as exc:
            _fail(str(exc), ExitCode.USAGE)
        except typer.Abort:
            _fail("aborted", ExitCode.CHECK_FAILED)
        code = rv if isinstance(rv, int) else ExitCode.OK
        if standalone_mode:
            sys.exit(code)
        return code


def _fail(message: str, code: int) -> None:
    first = " ".join(message.split())  # one line, always
    sys.stderr.write(f"error: {first}\n")
    sys.stderr.flush()
    sys.exit(code)


app = typer.Typer(
    cls=PosencGroup,
    name="posenc",
    help="Pick, scale, inspect and verify positional encodings (sinusoidal, RoPE and its extensions, ALiBi).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def console(stderr: bool = False) -> Console:
    """A rich console bound to stdout (results) or stderr (messages); rich is loaded on first use."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # piped output has no terminal width; 120 columns keeps the tables readable in logs and READMEs
    width = None if stream.isatty() else 120
    return Console(file=stream, highlight=False, width=width)


def print_json(obj: Any) -> None:
    """Machine output: plain ``json.dumps`` to stdout, never through rich (which would wrap lines)."""
    sys.stdout.write(json.dumps(obj, indent=2) + "\n")


def note(message: str) -> None:
    """A human message on stderr."""
    sys.stderr.write(message + "\n")


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"posenc {__version__}\n")
        raise typer.Exit(ExitCode.OK)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Pick, scale, inspect and verify positional encodings."""


@app.command()
def verify(
    head_dim: Annotated[int, typer.Option(help="Features per head (even).")] = 128,
    base: Annotated[float, typer.Option(help="RoPE base (theta).")] = 10000.0,
    layout: Annotated[str, typer.Option(help="interleaved, half or both.")] = "both",
    trials: Annotated[int, typer.Option(help="Random q,k pairs per check.")] = 16,
    max_position: Annotated[str, typer.Option(help="Largest position tried: 4096, 128k, 1M (k=1024).")] = "1M",
    dtype: Annotated[str, typer.Option(help="float64 or float32: the dtype the pass/fail checks run in.")] = "float64",
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    tolerance: Annotated[float, typer.Option(help="Largest relative error that passes.")] = 1e-4,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False,
) -> None:
    """Prove RoPE's relative-distance property and related invariants numerically.

    Exit 0 when every check passes, 1 when one fails.
    """
    from posenc_cli import verify as core
    from posenc_cli.encodings import LAYOUTS
    from posenc_cli.units import parse_length

    if layout == "both":
        layouts = LAYOUTS
    elif layout in LAYOUTS:
        layouts = (layout,)
    else:
        raise PosencError(f"--layout {layout!r} is not known; use interleaved, half or both")
    settings = core.VerifySettings(
        head_dim=head_dim, base=base, layouts=layouts, trials=trials,
        max_position=parse_length(max_position, name="--max-position"), dtype=dtype, seed=seed,
        tolerance=tolerance,
    )
    report = core.run(settings)
    if as_json:
        print_json(report.as_dict())
    else:
        _render_verify(report)
    raise typer.Exit(ExitCode.OK if report.passed else ExitCode.CHECK_FAILED)


def _render_verify(report: Any) -> None:
    from rich.table import Table

    s = report.settings
    out = console()
    table = Table(title=f"posenc verify: head_dim={s.head_dim} base={s.base:g} dtype={s.dtype} tol={s.tolerance:g}")
    for col in ("check", "result", "max abs err", "max rel err", "detail"):
        table.add_column(col)
    for c in report.checks:
        table.add_row(c.name, "pass" if c.passed else "FAIL", f"{c.max_abs_error:.2e}", f"{c.max_rel_error:.2e}",
                      c.detail)
    out.print(table)
    prec = Table(title="relative-distance error by absolute position (relative to |q||k|)")
    for col in ("position", "float32", "float64"):
        prec.add_column(col, justify="right")
    for r in report.precision:
        prec.add_row(f"{r.position:,}", f"{r.float32_rel_error:.2e}", f"{r.float64_rel_error:.2e}")
    out.print(prec)
    if report.float32_exceeds_from is None:
        out.print(f"float32 stays within {s.tolerance:g} up to position {s.max_position:,}.")
    else:
        out.print(f"float32 exceeds {s.tolerance:g} from position {report.float32_exceeds_from:,}: beyond it, "
                  "form the angles position * inv_freq in float64.")
    out.print("all checks passed" if report.passed else "some checks FAILED")


def main() -> None:
    """Console-script entry point."""
    app()

"""posenc's command line, assembled: one module per command in this package; this one builds the app.

No math lives in the CLI: commands parse, call the core, render.

Results go to stdout (JSON through ``json.dumps``, tables through a stdout console); messages go to
stderr. Every user mistake ends as one ``error: ...`` line and exit code 2 (see :class:`PosencGroup`).
numpy, matplotlib and the core modules are imported inside the commands that need them.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer
import typer.main
from typer._click.exceptions import ClickException
from typer.core import TyperGroup

from posenc_cli import __version__
from posenc_cli.cli import check, convert, inspect, pick, rules, scale, verify
from posenc_cli.cli.output import console, note, print_json
from posenc_cli.errors import ExitCode, PosencError

__all__ = ["app", "main", "console", "note", "print_json"]


#: Command groups whose modules load only when the group is used (or listed in help): name -> (module, Typer app).
LAZY_GROUPS = {
    "plot": ("posenc_cli.cli.plot", "plot_app"),
    "experiment": ("posenc_cli.cli.experiment", "experiment_app"),
}


class PosencGroup(TyperGroup):
    """Runs a command and turns any usage error or :class:`PosencError` into one ``error:`` line.

    ``plot`` and ``experiment`` are attached on first use, so other commands never import their modules.
    """

    def list_commands(self, ctx: Any) -> list[str]:
        names = super().list_commands(ctx)
        return names + [name for name in LAZY_GROUPS if name not in names]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in LAZY_GROUPS and cmd_name not in self.commands:
            module, attr = LAZY_GROUPS[cmd_name]
            command = typer.main.get_command(getattr(importlib.import_module(module), attr))
            command.name = cmd_name
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

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
    if first:  # a bare `posenc` raises an empty usage error after printing the help
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


# one module per command; registering one imports only typer
app.command("pick")(pick.pick)
app.command("scale")(scale.scale)
app.command("inspect")(inspect.inspect)
app.command("check")(check.check)
app.command("convert")(convert.convert)
app.command("verify")(verify.verify)
app.add_typer(rules.rules_app, name="rules")


def _keep_only(name: str | None) -> None:
    """Register only the command or group the user asked for.

    Building every command's parameters costs typer about 12 ms per start; a run needs one. ``posenc``,
    ``posenc --help`` and unknown names keep the full app, so help and "no such command" hints stay complete.
    """
    commands = [c for c in app.registered_commands
                if (c.name or (c.callback.__name__ if c.callback else "")).replace("_", "-") == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if commands or groups or name in LAZY_GROUPS:
        app.registered_commands = commands
        app.registered_groups = groups


def main() -> None:
    """Console-script entry point."""
    _keep_only(sys.argv[1] if len(sys.argv) > 1 else None)
    app()

"""posenc's command line, assembled: one module per command in this package; this one builds the app.

No math lives in the CLI: commands parse, call the core, render.

Results go to stdout (strict JSON through ``posenc_cli.files.dumps_json``, tables through a stdout console);
messages go to stderr. Every user mistake ends as one ``error: ...`` line and exit code 2, work that could not be
done (a server unreachable, a full output device) as one line and exit code 3, and a reader closing stdout early as
a quiet exit 0 (see :class:`PosencGroup`; every code is in :mod:`posenc_cli.errors`).
numpy, matplotlib, rich and the modules that load them are imported inside the commands that need them.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Annotated, Any, NoReturn, Protocol, runtime_checkable

import typer
import typer.main
from typer.core import TyperGroup

from posenc_cli.cli.output import console, note, print_json
from posenc_cli.errors import CouldNotRun, ExitCode, PosencError

__all__ = ["app", "main", "console", "note", "print_json"]


#: Every command: name -> (module, attribute), a function (a command) or a Typer app (a group such as ``rules``).
#: A module is imported only when its command runs or help lists it, so a run builds one command's parameters.
COMMANDS = {
    "pick": ("posenc_cli.cli.pick", "pick"),
    "rules": ("posenc_cli.cli.rules", "rules_app"),
    "scale": ("posenc_cli.cli.scale", "scale"),
    "inspect": ("posenc_cli.cli.inspect", "inspect"),
    "check": ("posenc_cli.cli.check", "check"),
    "convert": ("posenc_cli.cli.convert", "convert"),
    "verify": ("posenc_cli.cli.verify", "verify"),
    "plot": ("posenc_cli.cli.plot", "plot_app"),
    "experiment": ("posenc_cli.cli.experiment", "experiment_app"),
    "eval": ("posenc_cli.cli.eval", "eval_app"),
    "audit": ("posenc_cli.cli.audit", "audit"),
    "memory": ("posenc_cli.cli.memory", "memory"),
    "docs": ("posenc_cli.cli.docs", "docs"),
}
LAZY_GROUPS = {name: spec for name, spec in COMMANDS.items() if spec[1].endswith("_app")}


@runtime_checkable
class ParserError(Protocol):
    """A usage error of the argument parser (an unknown option, a missing argument: click's ``ClickException``).

    Told by its shape: typer vendors click as the private ``typer._click``; of its exceptions it re-exports
    ``BadParameter`` (one kind) and, from 0.28 only, ``TyperException`` (their base), so across the typer versions
    posenc takes (0.26 to 0.28) no public class names them all."""

    exit_code: int

    def format_message(self) -> str: ...


class PosencGroup(TyperGroup):
    """Runs a command and turns any usage error or :class:`PosencError` into one ``error:`` line (exit 2;
    :class:`CouldNotRun`, exit 3), and a closed stdout into a quiet exit 0.

    Commands are attached on first use (:data:`COMMANDS`), so a run imports only the module of its command.
    """

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            module, attr = COMMANDS[cmd_name]
            target = getattr(importlib.import_module(module), attr)
            if not isinstance(target, typer.Typer):
                single = typer.Typer(add_completion=False)
                # a command that takes an engine's own options after its arguments says so on its function
                single.command(cmd_name, context_settings=getattr(target, "context_settings", None))(target)
                target = single
            command = typer.main.get_command(target)
            command.name = cmd_name
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    # a closed stdout is caught in both phases of click's main (parsing runs eager callbacks such as --version),
    # before click's own handler, which would turn it into exit 1: that reads as a failed check
    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except BrokenPipeError:
            _stdout_closed()

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            _stdout_closed()

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
            sys.stdout.flush()  # output still buffered meets a closed pipe here, not at interpreter exit
        except BrokenPipeError:
            _stdout_closed()
        except OSError as exc:  # stdout itself failed (a full device: `> /dev/full`); -o paths raise CouldNotRun
            _stdout_failed(exc)
        except CouldNotRun as exc:
            _fail(exc.render(option_name), ExitCode.COULD_NOT_RUN)
        except PosencError as exc:
            _fail(exc.render(option_name), ExitCode.USAGE)
        except typer.Abort:
            _fail("aborted", ExitCode.CHECK_FAILED)
        except Exception as exc:
            if not isinstance(exc, ParserError):
                raise
            _fail(exc.format_message(), exc.exit_code)
        code = rv if isinstance(rv, int) else ExitCode.OK
        if standalone_mode:
            sys.exit(code)
        return code


def option_name(field: str) -> str:
    """The option a core error's field came from: every option is its field's name, dashed (``beta_fast`` is
    ``--beta-fast``; a field already written as an option is left as it is); see
    :class:`posenc_cli.errors.PosencError`."""
    return field if field.startswith("-") else "--" + field.replace("_", "-")


def _stdout_closed() -> NoReturn:
    """The reader of stdout went away (``posenc verify | head -1``): exit quietly with ExitCode.OK.

    Python's recipe (the signal module's note on SIGPIPE): point stdout at devnull, so the flush at interpreter exit
    cannot raise again, and exit. OK rather than 1 or 2: the reader chose to stop reading; nothing failed and the
    input was fine (see :class:`posenc_cli.errors.ExitCode`).
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real descriptor behind sys.stdout (an embedding, a test runner)
        pass
    sys.exit(ExitCode.OK)


def _stdout_failed(exc: OSError) -> NoReturn:
    """Writing stdout failed (``posenc scale ... > /dev/full``): one ``error:`` line and ExitCode.COULD_NOT_RUN (the
    input was fine; the output device was not). stdout then points at devnull, so the flush at interpreter exit does
    not fail again with Python's own message."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    _fail(f"cannot write to stdout: {exc.strerror or exc}", ExitCode.COULD_NOT_RUN)
    raise AssertionError("unreachable")  # _fail exits


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
        # package metadata is read only when asked for: every other command starts without it
        from posenc_cli.cli.documentation import version

        sys.stdout.write(f"posenc {version()}\n")
        raise typer.Exit(ExitCode.OK)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Pick, scale, inspect and verify positional encodings."""


def main() -> None:
    """Console-script entry point."""
    app()

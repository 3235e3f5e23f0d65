"""Where results and messages go: results on stdout (strict JSON through :func:`posenc_cli.files.dumps_json`,
tables through a stdout console), messages on stderr. rich loads on first use."""

from __future__ import annotations

import errno
import sys
from typing import TYPE_CHECKING, Any

from posenc_cli.files import dumps_json

if TYPE_CHECKING:
    from rich.console import Console


def console(stderr: bool = False) -> Console:
    """A rich console bound to stdout (results) or stderr (messages); rich is loaded on first use."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich would exit 1 itself (a "failed check"); the CLI's one handler decides (a quiet exit 0)
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "the reader closed the pipe")

    stream = sys.stderr if stderr else sys.stdout
    # piped output has no terminal width; 120 columns keeps the tables readable in logs and READMEs
    width = None if stream.isatty() else 120
    return _Console(file=stream, highlight=False, width=width)


def print_json(obj: Any) -> None:
    """Machine output: strict JSON (:func:`posenc_cli.files.dumps_json`, never NaN or Infinity) to stdout, never
    through rich (which would wrap lines)."""
    sys.stdout.write(dumps_json(obj) + "\n")


def note(message: str) -> None:
    """A human message on stderr."""
    sys.stderr.write(message + "\n")

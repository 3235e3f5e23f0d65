"""Where results and messages go: results on stdout (JSON through ``json.dumps``, tables through a stdout console),
messages on stderr. rich loads on first use."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


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

"""The command line: one module per command, assembled in :mod:`posenc_cli.cli.app`. The core never imports it."""

from __future__ import annotations

from posenc_cli.cli.app import app, main
from posenc_cli.cli.output import console, note, print_json

__all__ = ["app", "main", "console", "note", "print_json"]

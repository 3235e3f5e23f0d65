"""Helpers the CLI tests share: run ``posenc`` in-process, check a success or a one-line usage error, write a config.

A plain module of ``tests/harness/``, imported as ``from clihelpers import ...`` (``tests/conftest.py`` puts the
harness on ``sys.path``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from posenc_cli.cli import app


def run(*args: str, input: str | None = None) -> Result:
    """``posenc ARGS...`` in-process; ``input`` is what stdin reads."""
    return CliRunner().invoke(app, list(args), input=input)


def ok(result: Result) -> Result:
    """Exit 0 and no traceback on stderr; returns ``result``."""
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def assert_usage_error(result: Result, *needles: str) -> str:
    """Exit 2, nothing on stdout, exactly one stderr line 'error: ...' containing every needle, no traceback.

    Returns that line.
    """
    return assert_error_line(result, 2, *needles)


def assert_could_not_run(result: Result, *needles: str) -> str:
    """As :func:`assert_usage_error`, with exit 3: the input was fine, the work could not be done (a server)."""
    return assert_error_line(result, 3, *needles)


def assert_error_line(result: Result, code: int, *needles: str) -> str:
    """Exit ``code``, nothing on stdout, exactly one stderr line 'error: ...' containing every needle, no traceback."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("error: "), line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def write_json(folder: Path, data: Any, name: str = "config.json") -> str:
    """Write ``data`` as indented JSON (UTF-8, final newline) to ``folder / name``; returns the path as text."""
    path = folder / name
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return str(path)

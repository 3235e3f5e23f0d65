"""The README's transcripts are real: every ``$ posenc ...`` line in a ```console block is run and its output
compared with the lines under it.

A command ending in ``2>&1`` is compared with stdout and stderr as written; ``2>&1 >/dev/null`` with stderr
only; anything else with stdout only. ```text blocks are not checked (plots, timings, training runs).

``python tests/test_readme.py`` rewrites the README's console blocks from fresh runs.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posenc_cli.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BLOCK = re.compile(r"```console\n(.*?)```", re.S)


def transcripts(text: str) -> list[tuple[str, str]]:
    """(command line, expected output) for every ``$ posenc`` line of every console block."""
    out: list[tuple[str, str]] = []
    for block in BLOCK.findall(text):
        command: str | None = None
        lines: list[str] = []
        for line in block.splitlines():
            if line.startswith("$ "):
                if command is not None:
                    out.append((command, "\n".join(lines)))
                command, lines = line[2:], []
            else:
                lines.append(line)
        if command is not None:
            out.append((command, "\n".join(lines)))
    return [(c, o) for c, o in out if c.startswith("posenc ")]


def run(command: str) -> str:
    """Output of ``command`` as the README shows it (see the module docstring for redirections)."""
    stream = "stdout"
    if command.endswith("2>&1 >/dev/null"):
        stream, command = "stderr", command[: -len("2>&1 >/dev/null")]
    elif command.endswith("2>&1"):
        stream, command = "output", command[: -len("2>&1")]
    args = shlex.split(command)[1:]
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        result = CliRunner().invoke(app, args)
    finally:
        os.chdir(cwd)
    text: str = getattr(result, stream)
    return text.rstrip("\n")


CASES = transcripts(README.read_text(encoding="utf-8"))


def test_readme_has_transcripts() -> None:
    assert len(CASES) >= 10


@pytest.mark.parametrize(("command", "expected"), CASES, ids=[c for c, _ in CASES])
def test_transcript_is_real(command: str, expected: str) -> None:
    assert run(command) == expected.rstrip("\n")


def test_python_examples_run() -> None:
    """The "Use it from Python" code runs as printed."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})


def _rewrite() -> None:
    text = README.read_text(encoding="utf-8")

    def fill(match: re.Match[str]) -> str:
        body: list[str] = []
        for line in match.group(1).splitlines():
            if line.startswith("$ "):
                body.append(line)
                if line[2:].startswith("posenc "):
                    body.extend(run(line[2:]).splitlines())
            elif not body or not body[0][2:].startswith("posenc "):
                body.append(line)  # a non-posenc block keeps its text
        return "```console\n" + "\n".join(body) + "\n```"

    README.write_text(BLOCK.sub(fill, text), encoding="utf-8")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    _rewrite()

"""The documentation's transcripts are real: every ``$ posenc ...`` line in a ```console block of README.md and of
every docs/**/*.md page is run and its output compared with the lines under it.

A command ending in ``2>&1`` is compared with stdout and stderr as written; ``2>&1 >/dev/null`` with stderr
only; anything else with stdout only. ```text blocks are not checked (plots, timings, training runs).

Text is compared exactly, except measured errors printed in scientific notation (``1.23e-04``): those must agree
within a factor of :data:`MEASURED_SPREAD` (see :func:`same_output`), and runs of table padding and rule
characters count as one.

``python tests/docs/test_readme.py`` rewrites the console blocks of every page from fresh runs;
``python tests/docs/test_readme.py README.md docs/commands/pick.md`` only those pages.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posenc_cli.cli import app

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
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
    return [(c, o) for c, o in out if _posenc_command(c)]


def _posenc_command(command: str) -> bool:
    """``posenc ...``, optionally after ``VAR=value`` environment settings."""
    words = command.split()
    while words and "=" in words[0]:
        words.pop(0)
    return bool(words) and words[0] == "posenc"


def run(command: str) -> str:
    """Output of ``command`` as the README shows it (see the module docstring for redirections).

    ``VAR=value posenc ...`` runs in a fresh interpreter with those variables set (huggingface_hub reads its
    environment once, at import); everything else runs in-process.
    """
    stream = "stdout"
    if command.endswith("2>&1 >/dev/null"):
        stream, command = "stderr", command[: -len("2>&1 >/dev/null")]
    elif command.endswith("2>&1"):
        stream, command = "output", command[: -len("2>&1")]
    words = shlex.split(command)
    start = words.index("posenc")  # VAR=value words before it set the environment; after it, they are arguments
    env = dict(w.split("=", 1) for w in words[:start])
    args = words[start + 1:]
    if env:
        full = {k: v for k, v in os.environ.items() if not k.startswith("HF_")} | env
        proc = subprocess.run([sys.executable, "-m", "posenc_cli", *args], capture_output=True, text=True,
                              timeout=300, cwd=ROOT, env=full)
        text = {"stdout": proc.stdout, "stderr": proc.stderr, "output": proc.stdout + proc.stderr}[stream]
        return text.rstrip("\n")
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        piped: str | None = None
        for stage in _stages(args):  # `posenc A | posenc B`: A's stdout is B's stdin
            result = CliRunner().invoke(app, stage, input=piped)
            piped = result.stdout
    finally:
        os.chdir(cwd)
    out: str = getattr(result, stream)
    return out.rstrip("\n")


def _stages(args: list[str]) -> list[list[str]]:
    stages: list[list[str]] = [[]]
    for word in args:
        if word == "|":
            stages.append([])
        elif not (word == "posenc" and not stages[-1]):
            stages[-1].append(word)
    return stages


#: How far a measured error may move between two CPUs and still be "the same" number.
#: Every e-notation number posenc prints is a maximum of measured errors that sits above the rounding bound of its
#: arithmetic (smaller ones print as "< bound"). Such an error is dominated by deliberate, IEEE-exact roundings
#: (of positions, angles or tables to a dtype); what differs between CPUs is the last ulp or two of sin, cos, pow
#: and of summation order (FMA or not, SIMD width, BLAS kernel), and a flipped rounding of a few entries near a
#: tie. Both move a maximum by well under a factor of two; a real change of behaviour (the float64-sized residue
#: a float32 check once printed, a broken angle formula) moves it by orders of magnitude.
MEASURED_SPREAD = 2.0
MEASURED = re.compile(r"[-+]?\d+\.\d+e[-+]\d+")
# a run of spaces or of one table-drawing character: widths follow the widest cell, which may move by a digit
PADDING = re.compile(r"( )+|(─)+|(━)+|(═)+")


def _shape(text: str) -> tuple[str, list[float]]:
    numbers = [float(m) for m in MEASURED.findall(text)]
    skeleton = PADDING.sub(lambda m: m.group(0)[0], MEASURED.sub("<e>", text))
    return skeleton, numbers


def same_output(expected: str, actual: str) -> bool:
    """True when ``actual`` is ``expected`` up to measured-error noise (see :data:`MEASURED_SPREAD`)."""
    shape_e, numbers_e = _shape(expected)
    shape_a, numbers_a = _shape(actual)
    if shape_e != shape_a or len(numbers_e) != len(numbers_a):
        return False
    for e, a in zip(numbers_e, numbers_a, strict=True):
        if (e == 0) != (a == 0) or (e < 0) != (a < 0):
            return False
        if e and not 1 / MEASURED_SPREAD <= a / e <= MEASURED_SPREAD:
            return False
    return True


def pages() -> list[Path]:
    """README.md and every Markdown page of the docs site (docs/pending/*.md included, so a page waiting to be
    folded in is checked too)."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


CASES = [(_name(page), command, expected)
         for page in pages() for command, expected in transcripts(page.read_text(encoding="utf-8"))]
pytestmark = pytest.mark.numeric


def test_readme_has_transcripts() -> None:
    assert sum(page == "README.md" for page, _, _ in CASES) >= 5
    assert len(CASES) >= 60


@pytest.mark.parametrize(("page", "command", "expected"), CASES, ids=[f"{p}: {c}" for p, c, _ in CASES])
def test_transcript_is_real(page: str, command: str, expected: str) -> None:
    actual = run(command)
    assert same_output(expected.rstrip("\n"), actual), actual


@pytest.mark.parametrize(("expected", "actual", "same"), [
    ("err 1.00e-04 ok", "err 1.00e-04 ok", True),
    ("err 1.00e-04 ok", "err 1.90e-04 ok", True),  # within a factor of two: another CPU's rounding
    ("err 1.00e-04 ok", "err 2.10e-04 ok", False),
    ("err 5.68e-07 ok", "err 4.44e-16 ok", False),  # the float32 check that ran in float64
    ("err 0.00e+00 ok", "err 1.00e-16 ok", False),
    ("err 1.00e-04 ok", "err 1.00e-04 FAIL", False),
    ("theta 500000", "theta 500001", False),  # only e-notation numbers are measured errors
    ("│ a   │ 1.00e-04 │", "│ a    │ 1.20e-04 │", True),  # padding follows the widest cell
    ("┃ 1.00e-04 ┃", "┃ < 1.5e-05 ┃", False),
])
def test_measured_numbers_compare_with_a_stated_spread(expected: str, actual: str, same: bool) -> None:
    assert same_output(expected, actual) is same


def test_python_examples_run() -> None:
    """Every ```python block of the docs (the "Use it from Python" page) runs as printed."""
    ran = 0
    for page in pages():
        for code in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            exec(compile(code, _name(page), "exec"), {})
            ran += 1
    assert ran


def _rewrite(page: Path) -> None:
    text = page.read_text(encoding="utf-8")

    def fill(match: re.Match[str]) -> str:
        body: list[str] = []
        for line in match.group(1).splitlines():
            if line.startswith("$ "):
                body.append(line)
                if _posenc_command(line[2:]):
                    body.extend(run(line[2:]).splitlines())
            elif not body or not _posenc_command(body[0][2:]):
                body.append(line)  # a non-posenc block keeps its text
        return "```console\n" + "\n".join(body) + "\n```"

    page.write_text(BLOCK.sub(fill, text), encoding="utf-8")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    for page in [ROOT / arg for arg in sys.argv[1:]] or pages():
        _rewrite(page)

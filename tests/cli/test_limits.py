"""Input limits across the whole command tree: every numeric or length option, driven with extreme values, ends in
a result or in one ``error:`` line (never a traceback), and its help states a default and a range.

The options come from walking the click tree, so an option added later is fuzzed and its help checked without
touching this file. Each command gets small valid other arguments so that an accepted value runs quickly; runs
that would do real work (training, a server) are stopped by an argument checked only after the numbers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from clihelpers import run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posenc_cli.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "tests" / "corpus" / "qwen2.5-7b-instruct.json")
CLOSED = "http://127.0.0.1:9/v1"  # the discard port: nothing listens, so a connection fails at once
# a file where --out wants a folder: passkey checks --steps and --seed, then refuses --out before training
NOT_A_FOLDER = str(ROOT / "pyproject.toml")

#: Names of string options that carry numbers (lengths, counts, number lists).
NUMERIC_NAME = re.compile(r"len|ctx|max|position|target|distance|budget|steps|trials|lengths|depths|theta|rate")


def walk(command: Any, path: tuple[str, ...], ctx: Any) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, command) for the root, every group and every command; groups attach their commands lazily."""
    yield path, command
    if hasattr(command, "list_commands"):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            yield from walk(sub, (*path, name), sub.context_class(sub, parent=ctx, info_name=name))


def _tree() -> list[tuple[tuple[str, ...], Any]]:
    root = typer.main.get_command(app)
    return list(walk(root, (), root.context_class(root, info_name="posenc")))


TREE = _tree()
LEAVES = [(path, cmd) for path, cmd in TREE if not hasattr(cmd, "list_commands")]


def is_numeric(param: Any) -> bool:
    if getattr(param, "is_flag", False) or param.param_type_name != "option" or param.hidden:
        return False
    return param.type.name in ("int", "integer", "float") or bool(NUMERIC_NAME.search(param.name or ""))


def base_args(path: tuple[str, ...], tmp: Path) -> list[str]:
    """Small valid arguments for ``path``: an accepted fuzzed value finishes in about a second."""
    png = ["-o", str(tmp / "x.png")]
    return {
        ("pick",): ["--ctx", "4k"],
        ("scale",): ["yarn", "--original-max", "4k", "--factor", "2"],
        ("inspect",): [CONFIG],
        ("check",): [CONFIG, "--engines", "hf"],
        ("verify",): ["--max-position", "4k", "--trials", "2", "--head-dim", "16"],
        ("plot", "sinusoidal"): ["--max-len", "64", "--d-model", "16", "--dpi", "20", *png],
        ("plot", "rope"): ["--max-len", "64", "--head-dim", "16", "--dpi", "20", *png],
        ("plot", "alibi"): ["--heads", "2", "--seq-len", "8", "--dpi", "20", *png],
        ("plot", "frequencies"): ["--head-dim", "16", "--original-max", "4k", "--factor", "2", "--dpi", "20", *png],
        ("plot", "decay"): ["--head-dim", "16", "--max-distance", "100", "--dpi", "20", *png],
        # --device is checked after every number, and no device is called that: nothing trains
        ("experiment", "lm"): ["--quick", "--methods", "rope", "--device", "none"],
        ("experiment", "copy"): ["--quick", "--methods", "rope", "--device", "none"],
        ("experiment", "passkey"): ["--quick", "--out", NOT_A_FOLDER],
        ("memory",): [CONFIG, "--engine", "transformers,llama.cpp"],
        ("plot", "memory"): [CONFIG, "--engine", "transformers", "--dpi", "20", *png],
        ("eval", "probe"): [CLOSED, "--timeout", "0.5", "--retries", "0"],
        ("eval", "run"): [CLOSED, "--out", str(tmp / "run"), "--lengths", "64", "--timeout", "0.5", "--retries", "0"],
    }.get(path, [])


def with_value(args: list[str], option: str, value: str) -> list[str]:
    """``args`` with ``option`` set to ``value`` (replacing the base value, if any)."""
    out = list(args)
    if option in out:
        i = out.index(option)
        del out[i:i + 2]
    return [*out, option, value]


NUMERIC = [(path, p) for path, cmd in LEAVES for p in cmd.params if is_numeric(p)]

EXTREMES = ["0", "-1", "1e-300", "1e300", "inf", "-inf", "nan", str(2**63), "1e30k", "", "abc", "9" * 40 + "k",
            "2048M", "4096M", "1,2", "0x10"]


def test_the_walk_finds_every_command_and_their_numbers() -> None:
    names = {" ".join(path) for path, _ in LEAVES}
    assert {"pick", "scale", "verify", "plot decay", "experiment passkey", "eval run", "rules show"} <= names
    found = {(" ".join(path), p.opts[0]) for path, p in NUMERIC}
    assert {("verify", "--max-position"), ("scale", "--factor"), ("eval run", "--concurrency"),
            ("experiment lm", "--steps"), ("plot decay", "--theta"), ("pick", "--budget")} <= found
    # every command with numbers has small arguments here, so an accepted value runs fast
    assert {path for path, _ in NUMERIC} <= {path for path, _ in LEAVES if base_args(path, Path("/tmp"))}


def check_outcome(result: Any) -> None:
    assert result.exit_code in (0, 1, 2, 3), (result.exit_code, result.stderr, result.exception)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), lines


@pytest.mark.parametrize(("path", "param"), NUMERIC, ids=[f"{' '.join(p)} {q.opts[0]}" for p, q in NUMERIC])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.sampled_from(EXTREMES) | st.integers(-(2**70), 2**70).map(str)
       | st.floats(allow_nan=True, allow_infinity=True).map(repr))
def test_extreme_numbers_end_in_a_result_or_one_error_line(path: tuple[str, ...], param: Any, value: str,
                                                           tmp_path: Path) -> None:
    args = with_value(base_args(path, tmp_path), param.opts[0], value)
    check_outcome(run(*path, *args))


@pytest.mark.parametrize(("path", "param"), NUMERIC, ids=[f"{' '.join(p)} {q.opts[0]}" for p, q in NUMERIC])
def test_every_extreme_value_is_handled(path: tuple[str, ...], param: Any, tmp_path: Path) -> None:
    """The fixed list, all of it, for every option (hypothesis above adds random numbers)."""
    for value in EXTREMES:
        check_outcome(run(*path, *with_value(base_args(path, tmp_path), param.opts[0], value)))


@pytest.mark.parametrize(("path", "param"), NUMERIC, ids=[f"{' '.join(p)} {q.opts[0]}" for p, q in NUMERIC])
def test_numeric_help_states_a_range(path: tuple[str, ...], param: Any) -> None:
    help_text = param.help or ""
    assert re.search(r"\d", help_text) and re.search(r"\bto\b|at most|at least|greater than", help_text), help_text


@pytest.mark.parametrize("path", [p for p, _ in LEAVES], ids=[" ".join(p) for p, _ in LEAVES])
def test_every_option_shows_its_default(path: tuple[str, ...]) -> None:
    command = dict(TREE)[path]
    options = [p for p in command.params if p.param_type_name == "option" and not p.is_flag and not p.hidden]
    rendered = run(*path, "--help").stdout
    shown = rendered.count("[default:") + rendered.count("[required]")
    assert shown >= len(options), (path, shown, [p.opts[0] for p in options])


@pytest.mark.parametrize("path", [p for p, _ in TREE], ids=[" ".join(p) or "posenc" for p, _ in TREE])
@pytest.mark.parametrize("flag", ["--install-completion", "--show-completion"])
def test_no_shell_completion_options(path: tuple[str, ...], flag: str) -> None:
    """add_completion=False everywhere: typer's completion installer would be offered but broken."""
    assert flag not in run(*path, "--help").stdout
    result = run(*path, flag)
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and flag in lines[0], lines

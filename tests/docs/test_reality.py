"""The reality table of docs/commands/pick.md: documented decisions of model builders next to what `posenc pick`
answers for the same situation. Every row's command is run here and its "pick's answer" cell must be exactly what pick
answers now, so the table cannot drift. ``python tests/docs/test_reality.py`` rewrites those cells from fresh runs.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from posenc_cli.cli import app

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "commands" / "pick.md"
START, END = "<!-- reality table -->", "<!-- /reality table -->"
#: The scenario table above it: (scenario, command, pick's answer) rows, checked the same way.
SCENARIO = ("<!-- scenario table -->", "<!-- /scenario table -->")


def summary(answer: dict[str, Any]) -> str:
    """The key fields of an answer, in a table cell."""
    from posenc_cli.units import format_length

    parts = [f"`{answer['rule']}`"]
    theta = answer["hyperparameters"].get("theta")
    if theta is not None:
        parts.append(f"theta {float(theta):g}")
    ext = answer["extension"]
    if ext is not None:
        tuned = f"fine-tuned, {ext['fine_tune_tokens']}" if ext["fine_tune"] else "training-free"
        parts.append(f"{ext['method']} x{ext['factor']:g} {format_length(ext['from'])} -> {format_length(ext['to'])}, "
                     f"{tuned}")
    plan = answer["plan"]
    trains = (ext is not None and ext["fine_tune"]) or "stages" in answer["reason"] and "theta" in answer["reason"]
    if plan["stages"] and trains:
        jump = f", last jump x{plan['final_jump']:g}" if plan["final_jump"] > 1 else ""
        parts.append(f"trains to {format_length(plan['train_to'])} in {plan['stages']} stage(s){jump}")
    return "; ".join(parts)


def rows(text: str, markers: tuple[str, str] = (START, END)) -> list[tuple[int, list[str]]]:
    """(line index, cells) of every data row between the markers."""
    lines = text.splitlines()
    start, end = lines.index(markers[0]), lines.index(markers[1])
    out = []
    for i in range(start + 3, end):  # past the header and its rule
        if lines[i].startswith("|"):
            out.append((i, [c.strip() for c in lines[i].strip().strip("|").split("|")]))
    return out


def answer_for(cell: str) -> dict[str, Any]:
    command = cell.strip("`")
    args = shlex.split(command)
    assert args[:2] == ["posenc", "pick"], command
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        result = CliRunner().invoke(app, [*args[1:], "--json"])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, (command, result.stderr)
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


ROWS = rows(PAGE.read_text(encoding="utf-8"))


def test_the_table_has_enough_documented_decisions() -> None:
    assert len(ROWS) >= 15
    for _, cells in ROWS:
        source, situation, command, answer, builders, verdict = cells
        assert source and situation and builders and verdict
        assert verdict.split()[0].rstrip(":") in ("same", "differs", "defensible"), verdict


@pytest.mark.parametrize(("index", "cells"), ROWS, ids=[c[0].split("]")[0].strip("[") for _, c in ROWS])
def test_each_row_is_what_pick_answers(index: int, cells: list[str]) -> None:
    assert cells[3] == summary(answer_for(cells[2]))


SCENARIO_ROWS = rows(PAGE.read_text(encoding="utf-8"), SCENARIO)


@pytest.mark.parametrize(("index", "cells"), SCENARIO_ROWS, ids=[c[0] for _, c in SCENARIO_ROWS])
def test_each_scenario_is_what_pick_answers(index: int, cells: list[str]) -> None:
    assert cells[2] == summary(answer_for(cells[1]))


def test_the_scenarios_are_distinct() -> None:
    assert len(SCENARIO_ROWS) >= 12
    assert len({c[2] for _, c in SCENARIO_ROWS}) == len(SCENARIO_ROWS)


def _rewrite() -> None:
    text = PAGE.read_text(encoding="utf-8")
    lines = text.splitlines()
    for i, cells in rows(text):
        cells[3] = summary(answer_for(cells[2]))
        lines[i] = "| " + " | ".join(cells) + " |"
    for i, cells in rows(text, SCENARIO):
        cells[2] = summary(answer_for(cells[1]))
        lines[i] = "| " + " | ".join(cells) + " |"
    PAGE.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    _rewrite()

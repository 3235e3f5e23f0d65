"""The scaling options as one parameter (posenc_cli.cli.scaling_options): each command lists them in its own
order, and gets them back as one ScaleOptions."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Annotated

import typer
from typer.testing import CliRunner

from posenc_cli.cli.scaling_options import GIVEN, SCALING, scaling_options
from posenc_cli.scale.options import ScaleOptions


def test_every_scale_option_has_its_type() -> None:
    assert list(SCALING) == [f.name for f in dataclasses.fields(ScaleOptions)]


def test_the_layout_orders_the_block_and_the_command_gets_one_scale_options() -> None:
    got: list[tuple[ScaleOptions, int]] = []

    @scaling_options("target factor width *")
    def draw(name: Annotated[str, typer.Argument()], scale_options: ScaleOptions = GIVEN,
             width: Annotated[int, typer.Option()] = 3, last: Annotated[bool, typer.Option()] = False) -> None:
        got.append((scale_options, width))

    names = list(inspect.signature(draw).parameters)
    assert names[:4] == ["name", "target", "factor", "width"]
    assert names[4:-1] == [n for n in SCALING if n not in ("target", "factor")]
    assert names[-1] == "last"
    app = typer.Typer()
    app.command()(draw)
    result = CliRunner().invoke(app, ["x", "--factor", "2", "--original-max", "4k", "--width", "5"])
    assert result.exit_code == 0, result.output
    options, width = got[0]
    assert (options.factor, options.original_max, options.target, width) == (2.0, "4k", None, 5)

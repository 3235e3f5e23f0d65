"""``posenc convert``: rewrite a config's rope keys for transformers 4 or 5; print it, or write it atomically."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from posenc_cli.cli.inspect import RevisionOpt, SourceArg
from posenc_cli.cli.output import note
from posenc_cli.files import write_output_text
from posenc_cli.models.convert import convert_source


def convert(
    source: SourceArg,
    to: Annotated[str, typer.Option(help="v4 (rope_scaling + rope_theta) or v5 (rope_parameters).")],
    revision: RevisionOpt = None,
    output: Annotated[str | None, typer.Option("--output", "-o", help="Write the result here (atomically).",
                                               show_default="print it")] = None,
    in_place: Annotated[bool, typer.Option(help="Rewrite the config file itself (atomically).")] = False,
) -> None:
    """Rewrite the rope keys between transformers 4 and 5, keeping every other key in its place."""
    converted = convert_source(source, to, revision=revision, output=output, in_place=in_place)
    if converted.destination is None:
        sys.stdout.write(converted.text)
        return
    note(f"wrote {write_output_text(converted.destination, converted.text)}")

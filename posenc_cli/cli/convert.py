"""``posenc convert``: rewrite a config's rope keys for transformers 4 or 5; print it, or write it atomically."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from posenc_cli.cli.inspect import RevisionOpt, SourceArg
from posenc_cli.cli.output import note
from posenc_cli.errors import PosencError
from posenc_cli.files import write_output_text
from posenc_cli.models.convert import convert as rewrite
from posenc_cli.models.sources import describe_source, read_source, written_config


def convert(
    source: SourceArg,
    to: Annotated[str, typer.Option(help="v4 (rope_scaling + rope_theta) or v5 (rope_parameters).")],
    revision: RevisionOpt = None,
    output: Annotated[str | None, typer.Option("--output", "-o", help="Write the result here (atomically).",
                                               show_default="print it")] = None,
    in_place: Annotated[bool, typer.Option(help="Rewrite the config file itself (atomically).")] = False,
) -> None:
    """Rewrite the rope keys between transformers 4 and 5, keeping every other key in its place."""
    if output and in_place:
        raise PosencError("give either --output FILE or --in-place, not both")
    src = read_source(source, revision=revision)
    if in_place and (src.kind not in ("file", "folder") or src.path is None):
        raise PosencError(f"--in-place rewrites a local config.json; {src.label} is a {src.kind} (use -o FILE)")
    if src.gguf is not None:
        raise PosencError(f"{src.label} is a GGUF file: its rope settings are llama.cpp metadata, not transformers "
                          "keys")
    describe_source(src)  # a config posenc cannot read is refused as itself, before any rewriting
    text = written_config(rewrite(src.config, to), f"the {to} config")
    dest = src.path if in_place else output
    if dest is None:
        sys.stdout.write(text)
        return
    shown = write_output_text(dest, text)
    note(f"wrote {shown}")

"""``posenc scale``: the exact rope scaling for transformers (v4/v5 keys), vLLM and llama.cpp."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from posenc_cli.cli import options as opts
from posenc_cli.cli.output import console, note
from posenc_cli.cli.scaling_options import GIVEN, scaling_options
from posenc_cli.files import write_output_text
from posenc_cli.frameworks.registry import ENGINE, TRAINER, formats
from posenc_cli.rope.scaling import MAX_HEAD_DIM, ScaleRequest
from posenc_cli.scale.options import ScaleOptions
from posenc_cli.scale.scaled import ScaleAsk, Scaled
from posenc_cli.scale.scaled import scale as scale_core


@scaling_options("factor original_max target theta head_dim partial_rotary_factor config engine fmt *")
def scale(
    method: Annotated[str, typer.Argument(help="linear, ntk, dynamic, yarn, longrope or llama3.")],
    scale_options: ScaleOptions = GIVEN,
    theta: Annotated[float | None, typer.Option(
        help=f"rope_theta; {opts.THETA_RANGE}.", show_default="10000, or the config's")] = None,
    head_dim: Annotated[int | None, typer.Option(
        help=f"Head dimension; even, 4 to {MAX_HEAD_DIM}.", show_default="128, or the config's")] = None,
    config: Annotated[str | None, typer.Option(
        help="Read theta, head dim and lengths from a model: config.json, folder, Hub id or GGUF.",
        show_default="none")] = None,
    engine: Annotated[str | None, typer.Option(
        "--engine", help=f"{', '.join(formats(ENGINE))}; trainers: {', '.join(formats(TRAINER))}.",
        show_default="with --config, the file's own (hf-v5 for a rope_parameters file), else hf")] = None,
    fmt: Annotated[str | None, typer.Option("--format", hidden=True, help="--engine's old name, still read.")] = None,
    fine_tuned: Annotated[bool, typer.Option(
        help="The model is fine-tuned at this scale (no warning for a jump past x4).")] = False,
    seq_len: Annotated[str | None, typer.Option(
        help="hf, hf-v5 and trainer formats: the length one training run trains at, up to the target (a stage of a "
             "staged plan); the rope dict stays the target's, the lengths become this one.",
        show_default="the target")] = None,
    explain: Annotated[bool, typer.Option(help="Per-pair table on stderr.")] = False,
    output: Annotated[str | None, typer.Option(
        "--output", "-o", help="Write the patched --config here (a GGUF --config: a new GGUF with the scaling "
        "written in; - streams it to stdout when that is not a terminal).", show_default="print it")] = None,
    in_place: Annotated[bool, typer.Option(help="Rewrite --config itself (atomically).")] = False,
    model: Annotated[str, typer.Option(
        help="Model name (or GGUF path) for the vllm, sglang and llama-cpp-python command lines.")] = "MODEL",
) -> None:
    """Print the exact rope scaling config for transformers (v4/v5 keys), vLLM or llama.cpp.

    Example: posenc scale yarn --original-max 32k --target 128k --theta 1e6
    """
    chosen, _ = opts.one_of("engine", (engine, "--engine"), (fmt, "--format"))
    ask = ScaleAsk(config=config, engine=chosen, seq_len=seq_len, output=output, in_place=in_place, model=model)
    scaled = scale_core(method, scale_options, ask, theta=theta, head_dim=head_dim, fine_tuned=fine_tuned)
    _render(scaled, explain)


def _render(scaled: Scaled, explain: bool) -> None:
    """The notes on stderr (then the per-pair table), and the result: written to its file, or on stdout after its
    caveats."""
    for line in scaled.notes:
        note(line)
    if explain:
        _explain(scaled.request)
    if scaled.written is not None:
        note(f"wrote {scaled.written}")
        if not scaled.text:
            return
    if scaled.destination is not None:
        note(f"wrote {write_output_text(scaled.destination, scaled.text)}")
        if scaled.verdict is not None:
            note(f"verdict: {scaled.verdict}")
        return
    for line in scaled.caveats:
        note(f"caveat: {line}")
    if scaled.verdict is not None:
        note(f"verdict: {scaled.verdict}")
    sys.stdout.write(scaled.text + "\n")


def _explain(req: ScaleRequest) -> None:
    """Per-pair table (stderr): what the method does to each frequency pair."""
    from rich.table import Table

    from posenc_cli.rope.frequencies import for_request

    freqs = for_request(req)
    table = Table(title=f"{req.method}: factor {req.factor:g}, {req.original_max} -> {req.target} positions, "
                        f"rotary dim {req.rotary_dim}, theta {req.theta:g}")
    for col in ("pair", "original wavelength", "new wavelength", "effective scale", "band"):
        table.add_column(col, justify="right" if col != "band" else "left")
    for i, old, new, ratio, band in freqs.pair_table():
        table.add_row(str(i), f"{old:,.2f}", f"{new:,.2f}", f"{ratio:.4f}", band)
    err = console(stderr=True)
    err.print(table)
    err.print(f"attention factor (cos and sin): {freqs.attention_factor:.6f}; "
              f"logit multiplier (its square): {freqs.attention_factor ** 2:.6f}")
    for key, value in freqs.details.items():
        err.print(f"{key}: {value}")

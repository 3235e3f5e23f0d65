"""The option types and help texts several commands share: the RoPE scaling options of ``posenc scale`` and
``posenc plot rope/frequencies`` (given to a command as one parameter by
:func:`posenc_cli.cli.scaling_options.scaling_options`), and the ranges the help texts state.

Only typer, the stdlib and the stdlib-only scaling and units modules (whose limits the help texts state) load at
import time (``import posenc_cli.cli`` must stay free of numpy and matplotlib).
"""

from __future__ import annotations

from typing import Annotated, TypeVar

import typer

from posenc_cli.errors import PosencError
from posenc_cli.rope.scaling import MAX_FACTOR, MAX_PARAMETER, MAX_THETA, MIN_PARAMETER
from posenc_cli.units import MAX_LENGTH, format_length

T = TypeVar("T")

#: How the length options state their range (the limit lives in posenc_cli.units.MAX_LENGTH).
LENGTHS = f"1 to {format_length(MAX_LENGTH)} (k=1024, M=1024^2)"
_PARAM = f"at least {MIN_PARAMETER:g}, at most {MAX_PARAMETER:g}"

FactorOpt = Annotated[float | None, typer.Option(
    help=f"Scale factor S: target = original x S (with --config: S x the model's native window); 1 to "
         f"{MAX_FACTOR:.0f}, and the target at most {format_length(MAX_LENGTH)}.",
    show_default="--target / --original-max")]
OriginalMaxOpt = Annotated[str | None, typer.Option(
    help=f"Trained context length: 4k, 32k, 131072; {LENGTHS}.", show_default="the config's, else required")]
TargetOpt = Annotated[str | None, typer.Option(
    "--target", help=f"Extended context length: 128k, 1M; {LENGTHS}.", show_default="original x --factor")]
PartialRotaryFactorOpt = Annotated[float | None, typer.Option(
    help="Fraction of head_dim that rotates: greater than 0, at most 1.", show_default="1, or the config's")]
BetaFastOpt = Annotated[float | None, typer.Option(
    help=f"YaRN: ramp start in rotations; {_PARAM}.", show_default="32, or the config's")]
BetaSlowOpt = Annotated[float | None, typer.Option(
    help=f"YaRN: ramp end in rotations; {_PARAM}.", show_default="1, or the config's")]
AttentionFactorOpt = Annotated[float | None, typer.Option(
    help=f"YaRN/LongRoPE: explicit cos/sin factor; {_PARAM}.", show_default="the method's formula")]
MscaleOpt = Annotated[float | None, typer.Option(
    help=f"YaRN: mscale (with --mscale-all-dim); {_PARAM}.", show_default="none, or the config's")]
MscaleAllDimOpt = Annotated[float | None, typer.Option(
    help=f"YaRN: mscale_all_dim; {_PARAM}.", show_default="none, or the config's")]
TruncateOpt = Annotated[bool | None, typer.Option(
    "--truncate/--no-truncate", help="YaRN: round the ramp.", show_default="on (transformers')")]
LowFreqFactorOpt = Annotated[float | None, typer.Option(
    help=f"llama3: low_freq_factor; {_PARAM}, at most --high-freq-factor.", show_default="1, or the config's")]
HighFreqFactorOpt = Annotated[float | None, typer.Option(
    help=f"llama3: high_freq_factor; {_PARAM}.", show_default="4, or the config's")]
ShortFactorOpt = Annotated[str | None, typer.Option(
    help="longrope: JSON list or @file; rotary_dim/2 numbers, each finite and greater than 0.",
    show_default="the config's, else required")]
LongFactorOpt = Annotated[str | None, typer.Option(
    help="longrope: JSON list or @file; rotary_dim/2 numbers, each finite and greater than 0.",
    show_default="the config's, else required")]
#: --theta of the RoPE commands (validated by posenc_cli.rope.scaling.check_theta).
THETA_RANGE = f"greater than 1, at most {MAX_THETA:g}"


def renamed(value: T | None, old: T | None, name: str, old_name: str) -> T | None:
    """The value of an option given by its name or by its old one (a hidden alias): one of them, or both alike."""
    if value is not None and old is not None and value != old:
        raise PosencError(f"{old_name} is the old name of {name}; give one of them")
    return value if value is not None else old

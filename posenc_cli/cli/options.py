"""The RoPE scaling options that ``posenc scale`` and ``posenc plot rope/frequencies`` share, and the one way they
become a validated :class:`~posenc_cli.rope.scaling.ScaleRequest`.

Only typer, the stdlib and the stdlib-only scaling and units modules (whose limits the help texts state) load at
import time (``import posenc_cli.cli`` must stay free of numpy and matplotlib);
:func:`scale_request` imports the scaling, config and units modules when it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from posenc_cli.errors import PosencError
from posenc_cli.rope.scaling import MAX_FACTOR, MAX_PARAMETER, MAX_THETA, MIN_PARAMETER
from posenc_cli.units import MAX_LENGTH, format_length

if TYPE_CHECKING:
    from posenc_cli.models.facts import ModelFacts
    from posenc_cli.rope.scaling import ScaleRequest

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
#: --theta of the RoPE commands (validated by posenc_cli.rope.scaling.validate, or the plot commands' _base).
THETA_RANGE = f"greater than 1, at most {MAX_THETA:g}"


@dataclass(eq=False)  # a plain bag of values; frozen/eq would only add start-up time
class ScaleOptions:
    """The shared scaling options as the command line gave them (lengths and factor lists still text).

    None is "not given": the model's own value, else the method's default (llama3: low 1, high 4).
    """

    factor: float | None = None
    original_max: str | None = None
    target: str | None = None
    partial_rotary_factor: float | None = None
    beta_fast: float | None = None
    beta_slow: float | None = None
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool | None = None
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    short_factor: str | None = None
    long_factor: str | None = None


def scale_request(
    method: str,
    options: ScaleOptions,
    *,
    theta: float | None = None,
    head_dim: int | None = None,
    fine_tuned: bool = False,
    model: ModelFacts | None = None,
    notes: list[str] | None = None,
) -> ScaleRequest:
    """Parse ``options`` for ``method`` and build the request through :func:`posenc_cli.models.extension.extend`.

    ``theta`` and ``head_dim`` are what the command line gave (None: the model's, else the defaults); ``model``:
    the facts of the model given with ``--config``. Notes for stderr are appended to ``notes``. Every mistake is
    one :class:`PosencError`.
    """
    from posenc_cli.files import parse_factor_list
    from posenc_cli.models.extension import extend
    from posenc_cli.units import parse_length

    original_max = (parse_length(options.original_max, name="--original-max")
                    if options.original_max is not None else None)
    if original_max is None and model is None:
        raise PosencError(f"{method} needs the original (trained) context length: pass --original-max, e.g. 4k")
    short = parse_factor_list(options.short_factor, "--short-factor") if options.short_factor else None
    long = parse_factor_list(options.long_factor, "--long-factor") if options.long_factor else None
    return extend(
        method, model, factor=options.factor, original_max=original_max,
        target=parse_length(options.target, name="--target") if options.target is not None else None,
        theta=theta, head_dim=head_dim, partial_rotary_factor=options.partial_rotary_factor, fine_tuned=fine_tuned,
        notes=notes, beta_fast=options.beta_fast, beta_slow=options.beta_slow,
        attention_factor=options.attention_factor, mscale=options.mscale, mscale_all_dim=options.mscale_all_dim,
        truncate=options.truncate, low_freq_factor=options.low_freq_factor,
        high_freq_factor=options.high_freq_factor, short_factor=short, long_factor=long,
    )

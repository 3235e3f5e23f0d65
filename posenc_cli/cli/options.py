"""The RoPE scaling options that ``posenc scale`` and ``posenc plot rope/frequencies`` share, and the one way they
become a validated :class:`~posenc_cli.scaling.ScaleRequest`.

Only typer, the stdlib and the stdlib-only scaling and units modules (whose limits the help texts state) load at
import time (``import posenc_cli.cli`` must stay free of numpy and matplotlib);
:func:`scale_request` imports the scaling, config and units modules when it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from posenc_cli.errors import PosencError
from posenc_cli.scaling import MAX_FACTOR, MAX_PARAMETER, MAX_THETA, MIN_PARAMETER
from posenc_cli.units import MAX_LENGTH, format_length

if TYPE_CHECKING:
    from posenc_cli.models import ModelFacts
    from posenc_cli.scaling import ScaleRequest

#: How the length options state their range (the limit lives in posenc_cli.units.MAX_LENGTH).
LENGTHS = f"1 to {format_length(MAX_LENGTH)} (k=1024, M=1024^2)"
_PARAM = f"at least {MIN_PARAMETER:g}, at most {MAX_PARAMETER:g}"

FactorOpt = Annotated[float | None, typer.Option(
    help=f"Scale factor S (target = original x S): 1 to {MAX_FACTOR:.0f}, and the target at most "
         f"{format_length(MAX_LENGTH)}.", show_default="--target / --original-max")]
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
LowFreqFactorOpt = Annotated[float, typer.Option(
    help=f"llama3: low_freq_factor; {_PARAM}, at most --high-freq-factor.")]
HighFreqFactorOpt = Annotated[float, typer.Option(help=f"llama3: high_freq_factor; {_PARAM}.")]
ShortFactorOpt = Annotated[str | None, typer.Option(
    help="longrope: JSON list or @file; rotary_dim/2 numbers, each finite and greater than 0.",
    show_default="the config's, else required")]
LongFactorOpt = Annotated[str | None, typer.Option(
    help="longrope: JSON list or @file; rotary_dim/2 numbers, each finite and greater than 0.",
    show_default="the config's, else required")]
#: --theta of the RoPE commands (validated by posenc_cli.scaling.validate, or the plot commands' _base).
THETA_RANGE = f"greater than 1, at most {MAX_THETA:g}"


@dataclass(eq=False)  # a plain bag of values; frozen/eq would only add start-up time
class ScaleOptions:
    """The shared scaling options as the command line gave them (lengths and factor lists still text).

    The defaults are the options' defaults; give ``low_freq_factor=1.0`` and ``high_freq_factor=4.0`` in the
    command signatures too (typer reads them there).
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
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    short_factor: str | None = None
    long_factor: str | None = None


def scale_request(
    method: str,
    options: ScaleOptions,
    *,
    theta: float,
    head_dim: int,
    original_max: int | None = None,
    partial_rotary_factor: float | None = None,
    fine_tuned: bool = False,
    has_config: bool = False,
    model: ModelFacts | None = None,
) -> ScaleRequest:
    """Parse and validate ``options`` for ``method`` into the request ``posenc scale`` prints.

    ``theta`` and ``head_dim`` are the model's; ``original_max`` and ``partial_rotary_factor`` are what a model
    config says, used when the options leave them out. ``has_config``: the command takes ``--config`` (the error for
    a missing original length then names it). ``model``: the model's facts, whose rope dict fills every parameter
    the options leave out (same rope type) and whose other keys are kept. Every mistake is one
    :class:`PosencError`.
    """
    from posenc_cli import scaling
    from posenc_cli.config import parse_factor_list
    from posenc_cli.units import parse_length

    if method not in scaling.METHODS:
        raise PosencError(f"method {method!r} is not known; use one of: {', '.join(scaling.METHODS)}")
    if options.original_max is not None:
        original_max = parse_length(options.original_max, name="--original-max")
    if original_max is None and not has_config:  # with --config, make_request says where the length can come from
        raise PosencError(f"{method} needs the original (trained) context length: pass --original-max, e.g. 4k")
    own = model.inherited(method) if model is not None else {}

    def given(name: str, value: Any) -> Any:
        return value if value is not None else own.get(name)

    short = parse_factor_list(options.short_factor, "--short-factor") if options.short_factor else None
    long = parse_factor_list(options.long_factor, "--long-factor") if options.long_factor else None
    # llama3 band factors have defaults on the command line: the model's own values win over those defaults
    low = own.get("low_freq_factor", options.low_freq_factor) if options.low_freq_factor == 1.0 \
        else options.low_freq_factor
    high = own.get("high_freq_factor", options.high_freq_factor) if options.high_freq_factor == 4.0 \
        else options.high_freq_factor
    return scaling.make_request(
        method, factor=options.factor, original_max=original_max,
        target=parse_length(options.target, name="--target") if options.target is not None else None,
        theta=theta, head_dim=head_dim,
        partial_rotary_factor=(options.partial_rotary_factor if options.partial_rotary_factor is not None
                               else partial_rotary_factor),
        beta_fast=given("beta_fast", options.beta_fast), beta_slow=given("beta_slow", options.beta_slow),
        attention_factor=options.attention_factor, mscale=given("mscale", options.mscale),
        mscale_all_dim=given("mscale_all_dim", options.mscale_all_dim), truncate=given("truncate", options.truncate),
        low_freq_factor=low, high_freq_factor=high, fine_tuned=fine_tuned,
        short_factor=given("short_factor", short), long_factor=given("long_factor", long),
        extra=model.extra if model is not None else {},
    )

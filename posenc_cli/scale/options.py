"""A scaling asked for by name (``posenc scale``, ``posenc plot rope/frequencies``): the options as the user gave
them, and the validated request they make (:func:`scale_request`). stdlib only: plots import it without the engines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from posenc_cli.errors import PosencError
from posenc_cli.files import parse_factor_list
from posenc_cli.models.extension import extend
from posenc_cli.units import parse_length

if TYPE_CHECKING:
    from posenc_cli.models.facts import ModelFacts
    from posenc_cli.rope.scaling import ScaleRequest


@dataclass(eq=False)  # a plain bag of values; frozen/eq would only add start-up time
class ScaleOptions:
    """The scaling options as the command line gave them (lengths and factor lists still text).

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
    original_max = (parse_length(options.original_max, name="--original-max")
                    if options.original_max is not None else None)
    if original_max is None and model is None:
        raise PosencError(f"{method} needs the original (trained) context length: pass {{original_max}}, e.g. 4k",
                          "original_max")
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

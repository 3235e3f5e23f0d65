"""The option types and help texts several commands share: the RoPE scaling options of ``posenc scale`` and
``posenc plot rope/frequencies`` (given to a command as one parameter by
:func:`posenc_cli.cli.scaling_options.scaling_options`), the ranges the help texts state, the ``--engine`` form
(repeatable, each value a name or a comma list) and the hidden aliases that keep old option names working.

Only typer, the stdlib and the stdlib-only scaling and units modules (whose limits the help texts state) load at
import time (``import posenc_cli.cli`` must stay free of numpy and matplotlib).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Annotated, Any, TypeVar

import typer

from posenc_cli.cli.output import note
from posenc_cli.errors import PosencError
from posenc_cli.rope.scaling import MAX_FACTOR, MAX_PARAMETER, MAX_THETA, MIN_PARAMETER
from posenc_cli.units import MAX_LENGTH, decimal_length_note, format_length, parse_length

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


T = TypeVar("T")


def context_length(text: str, name: str = "--ctx") -> int:
    """A context-length option parsed, with a note on stderr when a round decimal number may have meant a binary
    multiple (``128000`` for ``128k``): the value is used as given."""
    value = parse_length(text, name=name)
    said = decimal_length_note(text, value)
    if said is not None:
        note(f"note: {name} {said}")
    return value


def or_list(names: Sequence[str]) -> str:
    """``a, b or c``: the names a help text offers."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def engine_option(help: str, show_default: str | bool = True) -> Any:
    """``--engine``: one option for the engines a command works with, repeatable, each value a name or a comma list
    (``--engine vllm,llama.cpp`` is ``--engine vllm --engine llama.cpp``); read it with :func:`split_names`."""
    return typer.Option("--engine", help=f"{help} Repeat it, or give a comma list.", show_default=show_default)


def hidden_alias(flag: str, of: str) -> Any:
    """An old spelling of option ``of``, still accepted and no longer listed in the help."""
    return typer.Option(flag, hidden=True, help=f"The old name of {of}.")


def split_names(*given: Sequence[str] | None) -> list[str] | None:
    """The names a repeatable option (and its hidden aliases) gave, each value one name or a comma list, in the
    order given; None when none was given (an empty value gives ``[]``)."""
    values = [v for values in given if values for v in values]
    if not values:
        return None
    return [n.strip() for v in values for n in v.split(",") if n.strip()]


def one_of(field: str, *given: tuple[T | None, str]) -> tuple[T | None, dict[str, str]]:
    """The value of an option given under its own name or a hidden alias (``(value, flag)`` pairs, its own first;
    an empty list counts as not given), and ``{field: flag}`` when an alias was typed, for
    :func:`options_as_typed`. Both given: one value, or an error when they differ."""
    typed = [(value, flag) for value, flag in given if value is not None and value != []]
    if any(value != typed[0][0] for value, _ in typed[1:]):  # the same value under both names is one answer
        raise PosencError(f"{typed[1][1]} is the old name of {typed[0][1]}; give one of them")
    if not typed:
        return None, {}
    value, flag = typed[0]
    return value, {} if flag == given[0][1] else {field: flag}


@contextmanager
def options_as_typed(typed: Mapping[str, str]) -> Iterator[None]:
    """A core error about one of ``typed``'s fields names the option as the user typed it (a hidden alias such as
    ``--base``); its other fields stay for the app to name (:func:`posenc_cli.cli.app.option_name`)."""
    try:
        yield
    except PosencError as exc:
        if not set(exc.fields) & set(typed):
            raise
        rest = tuple(f for f in exc.fields if f not in typed)
        raise type(exc)(exc.render(lambda f: typed.get(f, "{" + f + "}")), *rest) from None

"""The scaling options as one parameter: :func:`scaling_options` gives ``posenc scale`` and ``posenc plot
rope/frequencies`` every scaling option (typed and described once in :mod:`posenc_cli.cli.options`) as one
:class:`~posenc_cli.scale.options.ScaleOptions`, each command keeping the order its help lists them in."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any

from posenc_cli.cli import options
from posenc_cli.rope.rope_types import tunable
from posenc_cli.scale.options import ScaleOptions


def _option_type(name: str) -> Any:
    """The parameter type of the scaling option ``name``, typed and described once in :mod:`posenc_cli.cli.options`
    (``beta_fast`` is ``BetaFastOpt``)."""
    return getattr(options, "".join(part.title() for part in name.split("_")) + "Opt")


#: Each scaling option's parameter type, in :class:`ScaleOptions`' order (the order a command lists them by default):
#: the request's lengths and factor, and every key a method's rope type reads (``rope_types.tunable``).
SCALING: dict[str, Any] = {f.name: _option_type(f.name) for f in dataclasses.fields(ScaleOptions)}
#: The default of a command's ``scale_options`` parameter, never used: :func:`scaling_options` passes the options given.
GIVEN = ScaleOptions()
assert set(tunable()) <= set(SCALING), "every key a rope type's method reads is a scaling option"


def scaling_options(layout: str = "*") -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command every scaling option, as one ``scale_options: ScaleOptions`` parameter.

    The command declares ``scale_options: ScaleOptions = GIVEN`` where the options go; typer sees the options there
    instead. ``layout`` orders that block when a command lists them otherwise (its help text keeps its order):
    option names and the command's own parameter names, ``*`` for the remaining options in :data:`SCALING`'s order.
    ``posenc scale``: ``"factor original_max target theta head_dim partial_rotary_factor config engine fmt *"``.
    """
    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(command, eval_str=True)
        params = signature.parameters
        names = layout.split()
        rest = [n for n in SCALING if n not in names]
        block = [p for n in names for p in ([_option(r) for r in rest] if n == "*" else
                                            [_option(n) if n in SCALING else params[n]])]
        placed = {p.name for p in block}
        own = [p for p in params.values() if p.name not in placed]  # scale_options marks where the block goes
        at = [p.name for p in own].index("scale_options")
        new = [*own[:at], *block, *own[at + 1:]]

        @functools.wraps(command)
        def run(**kwargs: Any) -> None:
            command(scale_options=ScaleOptions(**{n: kwargs.pop(n) for n in SCALING}), **kwargs)

        run.__signature__ = signature.replace(parameters=new)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in new}
        return run
    return decorate


def _option(name: str) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=SCALING[name])

"""The longest context whose caches fit a budget, solved exactly on an engine's own cost function.

An engine's cost is a step function of the context (padding to 256 cells, pages of ``block_size`` tokens, a sliding
layer that stops growing at its window, states that do not grow at all), never ``bytes per token x tokens``: the
solver bisects the cost itself, which every memory model keeps non-decreasing in the context
(``tests/engines/caches/test_models.py`` checks that property for every engine on the corpus).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from posenc_cli.engines.caches.model import Cost, SettingValue
from posenc_cli.units import MAX_LENGTH

if TYPE_CHECKING:
    from posenc_cli.engines.caches.model import EngineMemory
    from posenc_cli.models.cache_layout import CacheLayout


def needed(cost: Cost, *, extras: bool) -> int:
    """What a :class:`Cost` needs of a budget: its caches, plus the extras posenc computes when ``extras``."""
    return cost.cache_bytes + (cost.extra_bytes if extras else 0)


class Fit(NamedTuple):  # a named tuple, not a dataclass: posenc memory defines it at start-up
    """The longest context that fits (``longest`` None: not even one token; ``unbounded``: the caches stop growing
    before :data:`~posenc_cli.units.MAX_LENGTH`, so every length fits) and the cost at it."""

    longest: int | None
    unbounded: bool
    cost: Cost | None


def longest_fit(cost_at: Callable[[int], Cost], budget: int, *, extras: bool = False,
                upper: int = MAX_LENGTH) -> Fit:
    """The largest ``n`` in ``[1, upper]`` with ``needed(cost_at(n)) <= budget``, by bisection (``cost_at`` is
    non-decreasing in ``n``): about 31 evaluations."""
    first = cost_at(1)
    if needed(first, extras=extras) > budget:
        return Fit(None, False, first)
    top = cost_at(upper)
    if needed(top, extras=extras) <= budget:
        return Fit(upper, True, top)
    low, high, best = 1, upper, first  # needed(low) fits, needed(high) does not
    while high - low > 1:
        mid = (low + high) // 2
        cost = cost_at(mid)
        if needed(cost, extras=extras) <= budget:
            low, best = mid, cost
        else:
            high = mid
    return Fit(low, False, best)


def engine_fit(model: EngineMemory, layout: CacheLayout, settings: Mapping[str, SettingValue], budget: int, *,
               extras: bool = False) -> Fit:
    """:func:`longest_fit` on one engine's memory model with its settings."""
    return longest_fit(lambda n: model.cost(layout, n, settings), budget, extras=extras)

"""The longest-fit solver against brute force on step functions and on the toy engine's sliding and paged caches."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from toy_memory import MEMORY as TOY

from posenc_cli.engines.caches.model import CacheGroup, Cost
from posenc_cli.memory.fit import engine_fit, longest_fit
from posenc_cli.models.cache_layout import CacheLayout, LayerCache


def _cost(n_bytes: int, ctx: int = 1) -> Cost:
    return Cost("t", ctx, ctx, 1, {}, (CacheGroup("full", 1, ctx, n_bytes, 0),))


@settings(max_examples=200, deadline=None)
@given(step=st.integers(1, 300), per=st.integers(1, 1000), flat=st.integers(0, 10**6), cap=st.integers(1, 5000),
       budget=st.integers(0, 2 * 10**6))
def test_longest_fit_is_the_brute_force_answer(step: int, per: int, flat: int, cap: int, budget: int) -> None:
    """A padded cost that stops growing at ``cap`` tokens (a sliding layer): the solver's answer is the largest n
    that fits, found by scanning (upper bound 6000 so that the scan is cheap)."""
    def cost(n: int) -> Cost:
        return _cost(flat + per * (-(-min(n, cap) // step) * step), n)

    fit = longest_fit(cost, budget, upper=6000)
    scan = [n for n in range(1, 6001) if cost(n).cache_bytes <= budget]
    if not scan:
        assert fit.longest is None
    else:
        assert fit.longest == max(scan)
        assert fit.unbounded == (max(scan) == 6000)


def test_a_sliding_model_fits_any_length_when_its_window_fits() -> None:
    """Sliding layers stop at their window: the whole cost is flat past it, so a budget above it fits every
    length (unbounded), where bytes-per-token x tokens would answer a finite length."""
    layout = CacheLayout("toy", "toy", "bfloat16", "test", [LayerCache("sliding", 8, 128, 128, window=4096)] * 4)
    values = TOY.settings_for({})
    at_window = TOY.cost(layout, 4096, values).cache_bytes
    fit = engine_fit(TOY, layout, values, at_window)
    assert fit.unbounded and fit.longest is not None and fit.longest >= 1 << 30
    tight = engine_fit(TOY, layout, values, at_window - 1)
    assert tight.longest == 4096 - 16 and not tight.unbounded  # one block of 16 cells less


def test_a_budget_below_one_token_fits_nothing() -> None:
    layout = CacheLayout("toy", "toy", "bfloat16", "test", [LayerCache("full", 8, 128, 128)])
    fit = engine_fit(TOY, layout, TOY.settings_for({}), 10)
    assert fit.longest is None and fit.cost is not None and fit.cost.cache_bytes > 10

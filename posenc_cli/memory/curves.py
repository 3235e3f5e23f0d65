"""Bytes against context, per engine and setting: the data of ``posenc plot memory`` and ``posenc memory --png``."""

from __future__ import annotations

from dataclasses import dataclass

from posenc_cli.engines.caches.model import SettingValue, Unsupported
from posenc_cli.errors import PosencError
from posenc_cli.memory.fit import engine_fit, needed
from posenc_cli.memory.report import NO_BUDGET, Asked, Budget, budget_for, context_for

#: points per curve: the costs are step functions of 256-cell or block-size steps, far finer than a figure shows
POINTS = 161


@dataclass(frozen=True)
class Curve:
    """One engine at one setting: ``label``, the contexts and what the caches need at each (bytes)."""

    engine: str
    label: str
    lever: bool
    contexts: tuple[int, ...]
    needs: tuple[int, ...]


@dataclass(frozen=True)
class MemoryChart:
    """What the figure shows: the curves, the context asked, the budget line (None: none given), the model."""

    model: str
    ctx: int
    budget: int | None
    curves: tuple[Curve, ...]


def memory_chart(ask: Asked, ctx: int | None, budget: Budget | None = None) -> MemoryChart:
    """Each runnable engine's curve at its settings and at each of its levers, from 0 to past the context asked
    and each engine's longest fit at its own settings (x1.25)."""
    ctx = context_for(ask.model, ctx, [])
    limit, extras = budget_for(ask, budget or NO_BUDGET)
    layout = ask.model.layout
    series: list[tuple[str, str, bool, dict[str, SettingValue]]] = []
    top = ctx
    for name, memory in ask.models.items():
        values = ask.values(name)
        try:
            memory.cost(layout, 1, values)
        except Unsupported:
            continue
        settings = [(name, False, values)]
        settings += [(f"{name}: {label}", True, {**values, **change}) for label, change in memory.levers(values)]
        for label, lever, chosen in settings:
            try:
                memory.cost(layout, 1, chosen)
            except (Unsupported, PosencError):  # a lever that does not apply to this model
                continue
            series.append((name, label, lever, chosen))
            if limit is not None and not lever:  # the engines' own settings set the axis; levers reach past it
                fit = engine_fit(memory, layout, chosen, limit, extras=extras)
                if fit.longest is not None and not fit.unbounded:
                    top = max(top, fit.longest)
    top = max(1, top * 5 // 4)
    contexts = tuple(sorted({max(1, top * i // (POINTS - 1)) for i in range(POINTS)} | {ctx}))
    curves: list[Curve] = []
    for name, label, lever, chosen in series:
        memory = ask.models[name]
        needs = tuple(needed(memory.cost(layout, n, chosen), extras=extras) for n in contexts)
        if lever and any(c.engine == name and not c.lever and c.needs == needs for c in curves):
            continue  # a lever that changes nothing for this model draws no line
        curves.append(Curve(name, label, lever, contexts, needs))
    return MemoryChart(ask.model.label, ctx, limit, tuple(curves))

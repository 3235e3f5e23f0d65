"""The memory figure: bytes of the caches against context, one line per engine (dashed: a lever that buys more),
the context asked and the budget; ``posenc plot memory`` and ``posenc memory --png`` draw this one figure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from posenc_cli.memory.curves import memory_chart
from posenc_cli.memory.report import Budget, asked
from posenc_cli.plots.drawings import Drawn, _emit, target

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from posenc_cli.memory.curves import MemoryChart

GIB = 1024**3


def memory_figure(chart: MemoryChart, *, dpi: float, title: str | None = None) -> Figure:
    """Caches in GiB against context in tokens."""
    from posenc_cli.plots.data import HEATMAP_SIZE
    from posenc_cli.plots.figures import DEFAULT_DPI, _new_figure

    rows = -(-(len(chart.curves) + 1) // 2)  # the legend below the axes, two columns
    width, height = HEATMAP_SIZE
    fig = _new_figure((width, height + 0.16 * rows), dpi or DEFAULT_DPI)
    ax = fig.add_subplot(1, 1, 1)
    legend = 0.16 * rows / (height + 0.16 * rows)
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.12 + legend, top=0.9)
    colors: dict[str, Any] = {}
    for curve in chart.curves:
        color = colors.setdefault(curve.engine, f"C{len(colors) % 10}")
        ax.plot(curve.contexts, [n / GIB for n in curve.needs], color=color, linewidth=0.9 if curve.lever else 1.5,
                linestyle="--" if curve.lever else "-", label=curve.label, gid=f"curve:{curve.label}")
    ax.axvline(chart.ctx, color="0.4", linewidth=0.8, linestyle=":", gid="ctx")
    if chart.budget is not None:
        ax.axhline(chart.budget / GIB, color="black", linewidth=1.0, gid="budget",
                   label=f"for the caches: {chart.budget / GIB:.2f} GiB")
    ax.set_xlim(0, max(c.contexts[-1] for c in chart.curves) if chart.curves else chart.ctx)
    ax.set_ylim(bottom=0)
    from matplotlib.ticker import FuncFormatter

    from posenc_cli.units import format_length

    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: format_length(int(x)) if x >= 1024 and x % 1024 == 0
                                               else f"{int(x):,}"))
    ax.set_xlabel("context (tokens per sequence)")
    ax.set_ylabel("caches (GiB)")
    ax.grid(True, alpha=0.3)
    if chart.curves:
        ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.1), frameon=False)
    ax.set_title(title or f"What a context costs: {chart.model}", fontsize=10)
    return fig


def memory(source: str, ctx: int | None, engines: Sequence[str] | None, output: str | None, *,
           extra: Sequence[str] = (), sets: Sequence[str] = (), budget: Budget | None = None,
           revision: str | None = None, dpi: int = 150, title: str | None = None, as_json: bool = False,
           weights: int | None = None) -> Drawn:
    """Draw the memory figure of ``source`` to ``output`` (default memory.png)."""
    tgt = target(output, "memory.png", dpi, False, as_json)
    chart = memory_chart(asked(source, engines, extra=extra, sets=sets, revision=revision, weights=weights), ctx,
                         budget)
    fig = memory_figure(chart, dpi=tgt.dpi, title=title)
    return _emit(tgt, fig, "memory", {"ctx": chart.ctx, "budget": chart.budget,
                                      "curves": [c.label for c in chart.curves]})

"""The results chart: metric against evaluation length, one line per method, the training length marked.

matplotlib's object API on the Agg canvas (no pyplot, no global state); returns PNG bytes.
"""

from __future__ import annotations

import io
import math
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: TID253 - loaded only by `posenc experiment`
from matplotlib.figure import Figure  # noqa: TID253

STYLE: dict[str, tuple[str, str, str]] = {  # method -> (color, line style, marker)
    "nope": ("#7f7f7f", "-", "o"),
    "sinusoidal": ("#d62728", "-", "s"),
    "learned": ("#8c564b", "-", "D"),
    "rope": ("#1f77b4", "-", "o"),
    "rope+linear": ("#17becf", "--", "v"),
    "rope+ntk": ("#9467bd", "--", "^"),
    "rope+yarn": ("#2ca02c", "--", "P"),
    "alibi": ("#ff7f0e", "-", "X"),
}

LABELS = {"bits_per_byte": "held-out bits per byte (lower is better)",
          "copy_accuracy": "copy accuracy (higher is better)"}


def render_png(results: dict[str, Any]) -> bytes:
    """PNG bytes of the chart for a results dict from :func:`posenc_cli.experiment.run.run`."""
    settings = results["settings"]
    lens = [int(n) for n in settings["eval_lens"]]
    train_len = int(settings["train_len"])
    metric = results["metric"]
    baseline = results["baseline"]
    fig = Figure(figsize=(9.0, 5.0), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    finite = [v for series in results["results"].values() for v in series.values() if v is not None]
    if metric == "bits_per_byte":
        # a method that falls apart can score far above the baseline; keep the useful range readable
        top = min(max(finite + [baseline["value"]]) * 1.05, baseline["value"] * 1.6)
        bottom = max(0.0, min(finite + [baseline["value"]]) * 0.9)
    else:
        top, bottom = 1.02, -0.02
    clipped = False
    for method, series in results["results"].items():
        color, style, marker = STYLE.get(method, ("black", "-", "o"))
        xs = [int(n) for n, v in series.items() if v is not None]
        ys = [float(v) for v in series.values() if v is not None]
        shown = [min(y, top) for y in ys]
        clipped = clipped or any(y > top for y in ys)
        label = method if len(xs) == len(lens) else f"{method} (n/a past {train_len})"
        ax.plot(xs, shown, linestyle=style, marker=marker, color=color, label=label, linewidth=1.6, markersize=5)
        for x, y in zip(xs, ys, strict=True):
            if y > top:
                ax.annotate(f"{y:.2f}", (x, top), textcoords="offset points", xytext=(0, -12), ha="center",
                            fontsize=7, color=color)
    ax.axvline(train_len, color="black", linestyle=":", linewidth=1.2)
    # along the left side of the line, where no data point can be (the first length is the leftmost point)
    ax.annotate(f"trained at {train_len}", (train_len, 0.5), xycoords=("data", "axes fraction"),
                textcoords="offset points", xytext=(-4, 0), rotation=90, ha="right", va="center", fontsize=8)
    ax.axhline(baseline["value"], color="#bbbbbb", linestyle="-.", linewidth=1.0,
               label=f"{baseline['name']} baseline ({baseline['value']:.3g})")
    ax.set_xscale("log", base=2)
    ax.set_xticks(lens)
    ax.set_xticklabels([str(n) for n in lens])
    ax.set_xlim(min(lens) / 2 ** 0.25, max(lens) * 2 ** 0.25)
    if not math.isclose(top, bottom):
        ax.set_ylim(bottom, top)
    ax.set_xlabel("evaluation length (tokens)" if results["task"] == "copy" else "evaluation length (bytes)")
    ax.set_ylabel(LABELS.get(metric, metric))
    title = f"posenc experiment {results['task']}: trained at {train_len}, seed {results['seed']}"
    if clipped:
        title += " (values above the top edge are clipped, numbers shown)"
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
